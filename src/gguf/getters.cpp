// Typed metadata getters of gguf::File.
#include <cstring>
#include <limits>

#include "core/error.h"
#include "gguf/file_impl.h"
#include "gguf/gguf.h"
#include "gguf/parse.h"

namespace squeeze::gguf {

namespace {

bool is_unsigned(ValueType t) {
  return t == ValueType::UInt8 || t == ValueType::UInt16 || t == ValueType::UInt32 ||
         t == ValueType::UInt64;
}

bool is_float(ValueType t) { return t == ValueType::Float32 || t == ValueType::Float64; }

std::string type_desc(const Value& v) {
  if (v.type != ValueType::Array) return std::string(value_type_name(v.type));
  return "array of " + std::string(value_type_name(v.array_type));
}

[[noreturn]] void wrong_type(const File& f, std::string_view key, const Value& v,
                             std::string_view expected) {
  detail::fail(f.path(), "key '" + std::string(key) + "' has type " + type_desc(v) + ", expected " +
                             std::string(expected));
}

[[noreturn]] void missing(const File& f, std::string_view key) {
  detail::fail(f.path(), "missing required key '" + std::string(key) + "'");
}

int64_t as_int(const File& f, std::string_view key, const Value& v) {
  if (!detail::value_type_is_integer(v.type)) wrong_type(f, key, v, "an integer");
  if (is_unsigned(v.type) && v.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    detail::fail(f.path(), "key '" + std::string(key) + "' value " + std::to_string(v.u64) +
                               " does not fit in int64");
  }
  return v.i64;
}

double as_float(const File& f, std::string_view key, const Value& v) {
  if (is_float(v.type)) return v.f64;
  if (detail::value_type_is_integer(v.type)) {
    return is_unsigned(v.type) ? static_cast<double>(v.u64) : static_cast<double>(v.i64);
  }
  wrong_type(f, key, v, "a number");
}

// Element i of a numeric array, read from the packed little-endian payload.
template <typename T>
T element(const Value& v, uint64_t i) {
  T x;
  std::memcpy(&x, v.array_data + i * sizeof(T), sizeof(T));
  return x;
}

}  // namespace

int64_t File::require_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) missing(*this, key);
  return as_int(*this, key, *v);
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  return as_int(*this, key, *v);
}

double File::require_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) missing(*this, key);
  return as_float(*this, key, *v);
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  return as_float(*this, key, *v);
}

std::string_view File::require_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) missing(*this, key);
  if (v->type != ValueType::String) wrong_type(*this, key, *v, "string");
  return v->str;
}

std::optional<std::string_view> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != ValueType::String) wrong_type(*this, key, *v, "string");
  return v->str;
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != ValueType::Bool) wrong_type(*this, key, *v, "bool");
  return v->b;
}

std::vector<std::string_view> File::require_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) missing(*this, key);
  if (v->type != ValueType::Array || v->array_type != ValueType::String) {
    wrong_type(*this, key, *v, "array of string");
  }
  return v->strings;
}

std::vector<int64_t> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return {};
  if (v->type != ValueType::Array || !detail::value_type_is_integer(v->array_type)) {
    wrong_type(*this, key, *v, "array of integers");
  }
  std::vector<int64_t> out(static_cast<size_t>(v->array_len));
  for (uint64_t i = 0; i < v->array_len; ++i) {
    switch (v->array_type) {
      case ValueType::UInt8: out[i] = element<uint8_t>(*v, i); break;
      case ValueType::Int8: out[i] = element<int8_t>(*v, i); break;
      case ValueType::UInt16: out[i] = element<uint16_t>(*v, i); break;
      case ValueType::Int16: out[i] = element<int16_t>(*v, i); break;
      case ValueType::UInt32: out[i] = element<uint32_t>(*v, i); break;
      case ValueType::Int32: out[i] = element<int32_t>(*v, i); break;
      case ValueType::Int64: out[i] = element<int64_t>(*v, i); break;
      case ValueType::UInt64: {
        const uint64_t x = element<uint64_t>(*v, i);
        if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          detail::fail(path(), "key '" + std::string(key) + "' element " + std::to_string(i) +
                                   " (" + std::to_string(x) + ") does not fit in int64");
        }
        out[i] = static_cast<int64_t>(x);
        break;
      }
      default: break;  // not an integer type: excluded above
    }
  }
  return out;
}

std::vector<float> File::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return {};
  if (v->type != ValueType::Array || !is_float(v->array_type)) {
    wrong_type(*this, key, *v, "array of float32 or float64");
  }
  std::vector<float> out(static_cast<size_t>(v->array_len));
  for (uint64_t i = 0; i < v->array_len; ++i) {
    out[i] = v->array_type == ValueType::Float32 ? element<float>(*v, i)
                                                 : static_cast<float>(element<double>(*v, i));
  }
  return out;
}

}  // namespace squeeze::gguf
