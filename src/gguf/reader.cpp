// GGUF reader: maps the file read-only and validates the header, metadata and tensor table
// before anything else looks at it. Tensor data is never copied; TensorInfo::data points into
// the mapping.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "gguf/file_impl.h"
#include "gguf/gguf.h"
#include "gguf/parse.h"

namespace squeeze::gguf {

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kMaxAlignment = uint64_t{1} << 31;  // the key is a uint32 in the spec
constexpr size_t kMaxDims = 4;
constexpr size_t kMaxNameBytes = 63;  // ggml keeps names in char[64] with a NUL
// Smallest possible encodings, used to bound the header's counts by the file size.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;             // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, 1 dim, type, offset
// The header's counts are reserved up to this many: a KeyValue is ~10x its smallest encoding, so
// reserving a corrupt count in full would allocate ten times the file size before the first read
// fails (the vectors grow past it as entries actually parse).
constexpr uint64_t kMaxReserve = 256;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string quoted(std::string_view s) {
  std::string q = "'";  // built by appends: GCC 12 -O3 warns falsely on "'" + std::string
  q += s;
  q += '\'';
  return q;
}

}  // namespace

Mapping::Mapping(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) detail::fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    detail::fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    detail::fail(path, "not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) {
    ::close(fd);
    detail::fail(path, "not a GGUF file (the file is empty)");
  }
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps its own reference
  if (p == MAP_FAILED) detail::fail(path, std::string("cannot map: ") + std::strerror(err));
  data_ = static_cast<const uint8_t*>(p);
}

Mapping::Mapping(const std::string& path, std::span<const uint8_t> bytes)
    : owned_(bytes.begin(), bytes.end()) {
  if (owned_.empty()) detail::fail(path, "not a GGUF file (the file is empty)");
  data_ = owned_.data();
  size_ = owned_.size();
}

Mapping::~Mapping() {
  if (data_ != nullptr && owned_.empty()) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void detail::FileData::fail(const std::string& what) const { detail::fail(path, what); }

namespace {

void read_header(detail::FileData& f, detail::Cursor& cur, uint64_t& n_tensors, uint64_t& n_kv) {
  if (cur.remaining() < sizeof kMagic ||
      std::memcmp(cur.take(sizeof kMagic, "magic"), kMagic, sizeof kMagic) != 0) {
    f.fail("not a GGUF file (bad magic)");
  }
  f.version = cur.read<uint32_t>("version");
  if (f.version != 2 && f.version != 3) {
    std::string msg = "unsupported GGUF version " + std::to_string(f.version);
    if (f.version != 0 && (f.version & 0xFFFFu) == 0) msg += " (a big-endian file?)";
    f.fail(msg + "; versions 2 and 3 are read");
  }
  n_tensors = cur.read<uint64_t>("tensor count");
  n_kv = cur.read<uint64_t>("metadata key count");
  if (n_tensors > cur.remaining() / kMinTensorInfoBytes ||
      n_kv > cur.remaining() / kMinKvBytes ||
      n_tensors * kMinTensorInfoBytes + n_kv * kMinKvBytes > cur.remaining()) {
    f.fail("file is truncated or corrupt: the header claims " + std::to_string(n_tensors) +
           " tensors and " + std::to_string(n_kv) + " metadata keys, more than the " +
           std::to_string(cur.remaining()) + " bytes left can hold");
  }
}

void read_metadata(detail::FileData& f, detail::Cursor& cur, uint64_t n_kv) {
  f.metadata.reserve(static_cast<size_t>(std::min(n_kv, kMaxReserve)));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string_view key = cur.read_string("metadata key " + std::to_string(i));
    if (f.key_index.contains(key)) f.fail("duplicate metadata key " + quoted(key));
    const uint32_t type_id = cur.read<uint32_t>("value type of key " + quoted(key));
    Value v = detail::parse_value(cur, type_id, key);
    f.key_index.emplace(key, f.metadata.size());
    f.metadata.push_back(KeyValue{std::string(key), std::move(v)});
  }

  const auto it = f.key_index.find("general.alignment");
  if (it != f.key_index.end()) {
    const Value& v = f.metadata[it->second].value;
    if (!detail::value_type_is_integer(v.type)) {
      f.fail("general.alignment has type " + std::string(value_type_name(v.type)) +
             ", expected uint32");
    }
    const bool negative = v.i64 < 0 && v.u64 == 0;
    const uint64_t a = v.u64;
    if (negative || a == 0 || (a & (a - 1)) != 0 || a > kMaxAlignment) {
      f.fail("general.alignment " + (negative ? std::to_string(v.i64) : std::to_string(a)) +
             " is not a power of two in [1, 2^31]");
    }
    f.alignment = a;
  }
}

TensorInfo read_tensor_info(detail::FileData& f, detail::Cursor& cur, uint64_t index) {
  TensorInfo t;
  const std::string_view name = cur.read_string("name of tensor " + std::to_string(index));
  if (name.size() > kMaxNameBytes) {
    f.fail("tensor name of " + std::to_string(name.size()) + " bytes is too long (max " +
           std::to_string(kMaxNameBytes) + "): '" + std::string(name.substr(0, 64)) + "...'");
  }
  if (f.tensor_index.contains(name)) f.fail("duplicate tensor name " + quoted(name));
  t.name = std::string(name);
  const std::string ctx = "tensor " + quoted(name);

  const uint32_t n_dims = cur.read<uint32_t>("number of dimensions of " + ctx);
  if (n_dims < 1 || n_dims > kMaxDims) {
    f.fail(ctx + " has " + std::to_string(n_dims) + " dimensions; 1 to 4 are allowed");
  }
  t.shape.resize(n_dims);
  int64_t n_elements = 1;
  bool overflow = false;
  for (uint32_t d = 0; d < n_dims; ++d) {
    t.shape[d] = cur.read<int64_t>("shape of " + ctx);
    if (t.shape[d] < 0) {
      f.fail(ctx + " has negative dimension " + std::to_string(d) + " (" +
             std::to_string(t.shape[d]) + ")");
    }
    overflow = overflow || __builtin_mul_overflow(n_elements, t.shape[d], &n_elements);
  }
  if (overflow) f.fail(ctx + " has too many elements: shape " + shape_string(t.shape) + " overflows");
  t.n_elements = n_elements;

  const uint32_t type_id = cur.read<uint32_t>("type of " + ctx);
  const formats::FormatInfo* info = formats::format_info(type_id);
  if (info == nullptr || info->block_size <= 0 || info->block_bytes == 0) {
    f.fail(ctx + " has unknown type id " + std::to_string(type_id));
  }
  t.type = info->type;
  if (t.shape[0] % info->block_size != 0) {
    f.fail(ctx + " has rows of " + std::to_string(t.shape[0]) + " elements, not a multiple of the " +
           std::string(info->name) + " block size " + std::to_string(info->block_size));
  }
  // n_elements is a multiple of block_size because shape[0] is.
  size_t n_bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n_elements / info->block_size),
                             static_cast<uint64_t>(info->block_bytes), &n_bytes)) {
    f.fail(ctx + " has a byte size that overflows (shape " + shape_string(t.shape) + ")");
  }
  t.n_bytes = n_bytes;

  t.offset = cur.read<uint64_t>("data offset of " + ctx);
  f.tensor_index.emplace(name, index);
  return t;
}

void locate_tensor_data(detail::FileData& f) {
  const uint64_t size = f.map.size();
  for (TensorInfo& t : f.tensors) {
    const std::string ctx = "tensor " + quoted(t.name);
    if (t.offset % f.alignment != 0) {
      f.fail(ctx + " has data offset " + std::to_string(t.offset) +
             ", not a multiple of the alignment " + std::to_string(f.alignment));
    }
    // data_offset + offset + n_bytes <= size, written so that nothing can overflow.
    if (f.data_offset > size || t.offset > size - f.data_offset ||
        t.n_bytes > size - f.data_offset - t.offset) {
      f.fail(ctx + " data ends past the end of the file (truncated?): " +
             std::to_string(t.n_bytes) + " bytes at offset " + std::to_string(t.offset) +
             " of the data section, which starts at " + std::to_string(f.data_offset) +
             " in a file of " + std::to_string(size) + " bytes");
    }
    t.data = f.map.data() + f.data_offset + t.offset;
  }
}

}  // namespace

namespace {

// Validates the header, metadata and tensor table of f's bytes.
void parse(detail::FileData& f) {
  detail::Cursor cur(f.map.data(), f.map.size(), 0, f.path);

  uint64_t n_tensors = 0, n_kv = 0;
  read_header(f, cur, n_tensors, n_kv);
  read_metadata(f, cur, n_kv);
  f.tensors.reserve(static_cast<size_t>(std::min(n_tensors, kMaxReserve)));
  for (uint64_t i = 0; i < n_tensors; ++i) f.tensors.push_back(read_tensor_info(f, cur, i));

  // The data section starts at the next multiple of the alignment after the tensor table.
  f.data_offset = (cur.pos() + f.alignment - 1) / f.alignment * f.alignment;
  locate_tensor_data(f);
}

}  // namespace

File File::open(const std::string& path) {
  auto f = std::make_unique<Impl>(path);
  parse(*f);
  return File(std::move(f));
}

File File::from_bytes(const std::string& name, std::span<const uint8_t> bytes) {
  auto f = std::make_unique<Impl>(name, bytes);
  parse(*f);
  return File(std::move(f));
}

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

const std::string& File::path() const { return impl_->path; }
uint32_t File::version() const { return impl_->version; }
uint64_t File::alignment() const { return impl_->alignment; }
size_t File::file_size() const { return impl_->map.size(); }
const uint8_t* File::file_data() const { return impl_->map.data(); }
uint64_t File::data_offset() const { return impl_->data_offset; }
const std::vector<KeyValue>& File::metadata() const { return impl_->metadata; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }

const Value* File::find(std::string_view key) const {
  const auto it = impl_->key_index.find(key);
  return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

}  // namespace squeeze::gguf
