// squeeze inspect FILE: prints a GGUF file's header, metadata and tensor table.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "gguf/gguf.h"

namespace squeeze::cli {

namespace {

using gguf::Value;
using gguf::ValueType;

struct InspectOptions {
  std::string path;
  size_t array_items = 6;    // array elements shown before "..."
  size_t string_bytes = 60;  // string bytes shown before "..."
  bool no_tensors = false;
};

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream os;
  os << std::fixed << std::setprecision(u == 0 ? 0 : 2) << v << " " << units[u];
  return os.str();
}

// The shortest text that reads back as the same float: fixed notation for ordinary
// magnitudes (10000, 0.5), scientific for tiny or huge ones (1e-05).
template <typename T>
std::string shortest(T x) {
  char buf[400];
  const T a = x < 0 ? -x : x;
  const auto fmt = (a == 0 || (a >= T(1e-4) && a < T(1e15))) ? std::chars_format::fixed
                                                             : std::chars_format::scientific;
  const auto r = std::to_chars(buf, buf + sizeof buf, x, fmt);
  return std::string(buf, r.ptr);
}

// Quoted, escaped and shortened to about max_bytes of the original (cut at a UTF-8 boundary).
std::string quote(std::string_view s, size_t max_bytes) {
  size_t n = std::min(s.size(), max_bytes);
  while (n < s.size() && n > 0 && (static_cast<uint8_t>(s[n]) & 0xC0) == 0x80) --n;
  std::string out = "\"";
  for (char c : s.substr(0, n)) {
    const auto u = static_cast<uint8_t>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  out += '"';
  if (n < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

// Element i of a numeric array as text.
std::string array_element(const Value& v, uint64_t i) {
  auto load = [&](auto x) {
    std::memcpy(&x, v.array_data + i * sizeof(x), sizeof(x));
    return x;
  };
  switch (v.array_type) {
    case ValueType::UInt8: return std::to_string(load(uint8_t{}));
    case ValueType::Int8: return std::to_string(load(int8_t{}));
    case ValueType::UInt16: return std::to_string(load(uint16_t{}));
    case ValueType::Int16: return std::to_string(load(int16_t{}));
    case ValueType::UInt32: return std::to_string(load(uint32_t{}));
    case ValueType::Int32: return std::to_string(load(int32_t{}));
    case ValueType::UInt64: return std::to_string(load(uint64_t{}));
    case ValueType::Int64: return std::to_string(load(int64_t{}));
    case ValueType::Float32: return shortest(load(float{}));
    case ValueType::Float64: return shortest(load(double{}));
    case ValueType::Bool: return load(uint8_t{}) ? "true" : "false";
    default: return "?";
  }
}

std::string value_text(const Value& v, const InspectOptions& o) {
  switch (v.type) {
    case ValueType::UInt8:
    case ValueType::UInt16:
    case ValueType::UInt32:
    case ValueType::UInt64: return std::to_string(v.u64);
    case ValueType::Int8:
    case ValueType::Int16:
    case ValueType::Int32:
    case ValueType::Int64: return std::to_string(v.i64);
    case ValueType::Float32: return shortest(static_cast<float>(v.f64));
    case ValueType::Float64: return shortest(v.f64);
    case ValueType::Bool: return v.b ? "true" : "false";
    case ValueType::String: return quote(v.str, o.string_bytes);
    case ValueType::Array: break;
  }
  std::string out = "[";
  const uint64_t shown = std::min<uint64_t>(v.array_len, o.array_items);
  for (uint64_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    out += v.array_type == ValueType::String ? quote(v.strings[i], o.string_bytes / 2)
                                             : array_element(v, i);
  }
  if (shown < v.array_len) out += shown > 0 ? ", ..." : "...";
  return out + "]";
}

std::string type_text(const Value& v) {
  if (v.type != ValueType::Array) return std::string(gguf::value_type_name(v.type));
  return std::string(gguf::value_type_name(v.array_type)) + "[" + std::to_string(v.array_len) + "]";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void print_metadata(const gguf::File& f, const InspectOptions& o, std::ostream& os) {
  size_t key_w = 8, type_w = 6;
  for (const gguf::KeyValue& kv : f.metadata()) {
    key_w = std::max(key_w, std::min<size_t>(kv.key.size(), 48));
    type_w = std::max(type_w, type_text(kv.value).size());
  }
  os << "metadata: " << f.metadata().size() << " keys\n";
  for (const gguf::KeyValue& kv : f.metadata()) {
    os << "  " << std::left << std::setw(static_cast<int>(key_w)) << kv.key << "  "
       << std::setw(static_cast<int>(type_w)) << type_text(kv.value) << "  "
       << value_text(kv.value, o) << "\n";
  }
}

void print_tensors(const gguf::File& f, std::ostream& os) {
  size_t name_w = 4, shape_w = 5;
  for (const gguf::TensorInfo& t : f.tensors()) {
    name_w = std::max(name_w, t.name.size());
    shape_w = std::max(shape_w, shape_text(t.shape).size());
  }
  struct TypeTotal {
    size_t count = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, TypeTotal> by_type;
  uint64_t n_elements = 0, n_bytes = 0;
  bool any_unsupported = false;

  os << "\ntensors: " << f.tensors().size() << "\n";
  os << "  " << std::left << std::setw(static_cast<int>(name_w)) << "name" << "  " << std::setw(8)
     << "type" << "  " << std::setw(static_cast<int>(shape_w)) << "shape" << "  " << std::right
     << std::setw(12) << "bytes" << "  offset\n";
  for (const gguf::TensorInfo& t : f.tensors()) {
    const formats::FormatInfo& info = formats::format_info(t.type);
    std::string type(info.name);
    if (!info.supported) {
      type += "*";
      any_unsupported = true;
    }
    os << "  " << std::left << std::setw(static_cast<int>(name_w)) << t.name << "  " << std::setw(8)
       << type << "  " << std::setw(static_cast<int>(shape_w)) << shape_text(t.shape) << "  "
       << std::right << std::setw(12) << t.n_bytes << "  " << f.data_offset() + t.offset << "\n";
    by_type[type].count += 1;
    by_type[type].bytes += t.n_bytes;
    n_elements += static_cast<uint64_t>(t.n_elements);
    n_bytes += t.n_bytes;
  }
  if (any_unsupported) os << "  (* a format squeeze knows but cannot run)\n";

  os << "\ntotal: " << f.tensors().size() << " tensors, " << n_elements << " elements, " << n_bytes
     << " bytes (" << human_bytes(n_bytes) << ")";
  if (n_elements > 0) {
    os << ", " << std::fixed << std::setprecision(2)
       << 8.0 * static_cast<double>(n_bytes) / static_cast<double>(n_elements) << " bits/element";
  }
  os << "\n";
  for (const auto& [type, tot] : by_type) {
    os << "  " << std::left << std::setw(8) << type << std::right << std::setw(5) << tot.count
       << (tot.count == 1 ? " tensor   " : " tensors  ") << std::setw(12) << tot.bytes << " bytes (" << human_bytes(tot.bytes) << ")\n";
  }
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  CLI::App app{"Print a GGUF file's header, metadata and tensor table.", "squeeze inspect"};
  InspectOptions o;
  app.add_option("file", o.path, "GGUF file to read")->required();
  app.add_option("-n,--array-items", o.array_items, "array elements to show")->capture_default_str();
  app.add_option("-w,--string-bytes", o.string_bytes, "string bytes to show")->capture_default_str();
  app.add_flag("--no-tensors", o.no_tensors, "leave out the tensor table");
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    const gguf::File f = gguf::File::open(o.path);
    std::ostream& os = std::cout;
    os << "file: " << f.path() << "\n"
       << "GGUF version " << f.version() << ", alignment " << f.alignment() << ", "
       << f.file_size() << " bytes (" << human_bytes(f.file_size()) << "), tensor data at offset "
       << f.data_offset() << "\n\n";
    print_metadata(f, o, os);
    if (!o.no_tensors) print_tensors(f, os);
    return 0;
  });
}

}  // namespace squeeze::cli
