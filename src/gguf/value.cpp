// Metadata value types and parsing of one value from the file.
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/parse.h"

namespace squeeze::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UInt8: return "uint8";
    case ValueType::Int8: return "int8";
    case ValueType::UInt16: return "uint16";
    case ValueType::Int16: return "int16";
    case ValueType::UInt32: return "uint32";
    case ValueType::Int32: return "int32";
    case ValueType::Float32: return "float32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "string";
    case ValueType::Array: return "array";
    case ValueType::UInt64: return "uint64";
    case ValueType::Int64: return "int64";
    case ValueType::Float64: return "float64";
  }
  return "unknown";
}

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::UInt8:
    case ValueType::Int8:
    case ValueType::Bool: return 1;
    case ValueType::UInt16:
    case ValueType::Int16: return 2;
    case ValueType::UInt32:
    case ValueType::Int32:
    case ValueType::Float32: return 4;
    case ValueType::UInt64:
    case ValueType::Int64:
    case ValueType::Float64: return 8;
    case ValueType::String:
    case ValueType::Array: return 0;
  }
  return 0;
}

namespace detail {

void fail(const std::string& path, const std::string& what) {
  throw FormatError(path + ": " + what);
}

bool value_type_known(uint32_t id) { return id <= static_cast<uint32_t>(ValueType::Float64); }


bool value_type_is_integer(ValueType t) {
  switch (t) {
    case ValueType::UInt8:
    case ValueType::Int8:
    case ValueType::UInt16:
    case ValueType::Int16:
    case ValueType::UInt32:
    case ValueType::Int32:
    case ValueType::UInt64:
    case ValueType::Int64: return true;
    default: return false;
  }
}

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

void set_unsigned(Value& v, uint64_t x) {
  v.u64 = x;
  if (x <= static_cast<uint64_t>(kInt64Max)) v.i64 = static_cast<int64_t>(x);
}

void set_signed(Value& v, int64_t x) {
  v.i64 = x;
  if (x >= 0) v.u64 = static_cast<uint64_t>(x);
}

std::string key_context(std::string_view key) { return "value of key '" + std::string(key) + "'"; }

// Reads one scalar of a numeric or bool type into v.
void parse_scalar(Cursor& cur, ValueType t, std::string_view key, Value& v) {
  const std::string what = key_context(key);
  switch (t) {
    case ValueType::UInt8: set_unsigned(v, cur.read<uint8_t>(what)); break;
    case ValueType::UInt16: set_unsigned(v, cur.read<uint16_t>(what)); break;
    case ValueType::UInt32: set_unsigned(v, cur.read<uint32_t>(what)); break;
    case ValueType::UInt64: set_unsigned(v, cur.read<uint64_t>(what)); break;
    case ValueType::Int8: set_signed(v, cur.read<int8_t>(what)); break;
    case ValueType::Int16: set_signed(v, cur.read<int16_t>(what)); break;
    case ValueType::Int32: set_signed(v, cur.read<int32_t>(what)); break;
    case ValueType::Int64: set_signed(v, cur.read<int64_t>(what)); break;
    case ValueType::Float32: v.f64 = cur.read<float>(what); break;
    case ValueType::Float64: v.f64 = cur.read<double>(what); break;
    case ValueType::Bool: {
      const uint8_t b = cur.read<uint8_t>(what);
      if (b > 1) cur.fail("key '" + std::string(key) + "' has invalid bool value " + std::to_string(b));
      v.b = b != 0;
      break;
    }
    case ValueType::String:
    case ValueType::Array: break;  // handled by the caller
  }
}

void parse_array(Cursor& cur, std::string_view key, Value& v) {
  const std::string what = "array header of key '" + std::string(key) + "'";
  const uint32_t elem_id = cur.read<uint32_t>(what);
  if (!value_type_known(elem_id)) {
    cur.fail("key '" + std::string(key) + "' is an array of unknown value type " + std::to_string(elem_id));
  }
  const auto elem = static_cast<ValueType>(elem_id);
  if (elem == ValueType::Array) {
    cur.fail("key '" + std::string(key) + "' is an array of arrays (not supported)");
  }
  const uint64_t n = cur.read<uint64_t>(what);
  v.array_type = elem;
  v.array_len = n;

  if (elem == ValueType::String) {
    // Each string takes at least its 8-byte length, which bounds n before any allocation.
    if (n > cur.remaining() / 8) {
      cur.fail("file is truncated or corrupt: key '" + std::string(key) + "' claims " +
               std::to_string(n) + " strings, more than the " + std::to_string(cur.remaining()) +
               " bytes left can hold");
    }
    v.array_data = cur.take(0, what);  // where the strings start
    v.strings.reserve(static_cast<size_t>(n));
    const std::string elem_what = "string in array of key '" + std::string(key) + "'";
    for (uint64_t i = 0; i < n; ++i) v.strings.push_back(cur.read_string(elem_what));
    return;
  }

  const size_t size = value_type_size(elem);
  if (n > cur.remaining() / size) {
    cur.fail("file is truncated or corrupt: key '" + std::string(key) + "' claims " +
             std::to_string(n) + " elements of " + std::string(value_type_name(elem)) +
             ", more than the " + std::to_string(cur.remaining()) + " bytes left can hold");
  }
  v.array_data = cur.take(n * size, "array data of key '" + std::string(key) + "'");
  if (elem == ValueType::Bool) {
    for (uint64_t i = 0; i < n; ++i) {
      if (v.array_data[i] > 1) {
        cur.fail("key '" + std::string(key) + "' has invalid bool value " +
                 std::to_string(v.array_data[i]) + " at index " + std::to_string(i));
      }
    }
  }
}

}  // namespace

Value parse_value(Cursor& cur, uint32_t type_id, std::string_view key) {
  if (!value_type_known(type_id)) {
    cur.fail("key '" + std::string(key) + "' has unknown value type " + std::to_string(type_id));
  }
  Value v;
  v.type = static_cast<ValueType>(type_id);
  if (v.type == ValueType::String) {
    v.str = cur.read_string(key_context(key));
  } else if (v.type == ValueType::Array) {
    parse_array(cur, key, v);
  } else {
    parse_scalar(cur, v.type, key, v);
  }
  return v;
}

}  // namespace detail
}  // namespace squeeze::gguf
