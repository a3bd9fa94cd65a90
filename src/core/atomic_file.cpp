#include "core/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace squeeze {

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (f_ == nullptr) throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() {
  if (f_ != nullptr) {
    std::fclose(f_);
    f_ = nullptr;
  }
  std::remove(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  if (f_ == nullptr) throw Error("internal: '" + tmp_ + "' written after commit");
  if (n > 0 && std::fwrite(data, 1, n, f_) != n) {
    throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
  }
}

void AtomicFile::commit() {
  if (f_ == nullptr) throw Error("internal: '" + tmp_ + "' committed twice");
  bool ok = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
  int err = ok ? 0 : errno;
  if (std::fclose(f_) != 0 && ok) {
    ok = false;
    err = errno;
  }
  f_ = nullptr;
  if (!ok) {
    discard();
    throw Error("cannot write '" + path_ + "': " + std::strerror(err));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const Error e("cannot rename '" + tmp_ + "' to '" + path_ + "': " + std::strerror(errno));
    discard();
    throw e;
  }
  committed_ = true;
}

}  // namespace squeeze
