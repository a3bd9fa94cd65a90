// A file written under a temporary name next to its path and renamed into place only once it
// is complete and on disk, so that nobody (a reader, a later run after a crash, an error or a
// Ctrl-C half-way) ever finds a half-written file at the path.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace squeeze {

class AtomicFile {
 public:
  // Creates the temporary file PATH.tmp.PID; throws Error ("cannot write PATH: ...") when it
  // cannot.
  explicit AtomicFile(std::string path);
  // Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends n bytes; throws Error on a failed write.
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Flushes, syncs to disk, closes and renames the temporary file over path(). Throws Error
  // (the temporary file removed, path() untouched) when any step fails.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& tmp_path() const { return tmp_; }

 private:
  void discard();

  std::string path_;
  std::string tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

}  // namespace squeeze
