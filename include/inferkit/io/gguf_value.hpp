#pragma once
// GGUF metadata values: the 13 value types of the format (GgufValueType, ids as stored), a value
// (GgufValue: one scalar, a string or an array) and an array (GgufArray: elements of one scalar
// type stored contiguously as in the file, or strings in one blob with offsets, so a 100k-entry
// token list is two allocations, not 100k).
//
//   inferkit::GgufValue v = inferkit::GgufValue::of<std::uint32_t>(22);
//   std::uint32_t n = v.as<std::uint32_t>("llama.block_count");  // throws on a type mismatch
//
// Type ids (a fact of the format): 0 uint8, 1 int8, 2 uint16, 3 int16, 4 uint32, 5 int32,
// 6 float32, 7 bool (1 byte, 0 or 1), 8 string (uint64 length + bytes), 9 array (uint32 element
// type, uint64 count, elements), 10 uint64, 11 int64, 12 float64. Arrays of arrays are not
// supported (no GGUF writer emits them; the reader rejects them naming the key).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "inferkit/core/error.hpp"

namespace inferkit {

static_assert(std::endian::native == std::endian::little, "inferkit's GGUF code assumes a little-endian host");

/// GGUF metadata value type ids, as stored in the file.
enum class GgufValueType : std::uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr std::uint32_t kGgufValueTypeCount = 13;  ///< value type ids are 0 .. 12

/// The format's name of a value type ("uint32"), or "unknown(<id>)".
inline std::string gguf_value_type_name(GgufValueType t) {
  static constexpr const char* kNames[kGgufValueTypeCount] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                                              "int32",  "float32", "bool",   "string", "array",
                                                              "uint64", "int64",   "float64"};
  const auto id = static_cast<std::uint32_t>(t);
  return id < kGgufValueTypeCount ? kNames[id] : "unknown(" + std::to_string(id) + ")";
}

/// Bytes of one scalar of type `t` in the file (0 for string and array).
inline constexpr std::size_t gguf_scalar_bytes(GgufValueType t) {
  constexpr std::size_t kBytes[kGgufValueTypeCount] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  const auto id = static_cast<std::uint32_t>(t);
  return id < kGgufValueTypeCount ? kBytes[id] : 0;
}

/// The GGUF scalar type of a C++ type (uint8_t ... double, bool), or kString for std::string.
template <class T>
struct GgufTypeOf;
// The specializations; the doc comments inside the macro document each one.
#define INFERKIT_GGUF_TYPE_OF(T, E)                                                        \
  /** GgufTypeOf for the C++ type in the angle brackets: the GGUF type it is stored as. */ \
  template <>                                                                              \
  struct GgufTypeOf<T> {                                                                   \
    static constexpr GgufValueType value = GgufValueType::E; /**< its GGUF type id */      \
  };
INFERKIT_GGUF_TYPE_OF(std::uint8_t, kUint8)
INFERKIT_GGUF_TYPE_OF(std::int8_t, kInt8)
INFERKIT_GGUF_TYPE_OF(std::uint16_t, kUint16)
INFERKIT_GGUF_TYPE_OF(std::int16_t, kInt16)
INFERKIT_GGUF_TYPE_OF(std::uint32_t, kUint32)
INFERKIT_GGUF_TYPE_OF(std::int32_t, kInt32)
INFERKIT_GGUF_TYPE_OF(float, kFloat32)
INFERKIT_GGUF_TYPE_OF(bool, kBool)
INFERKIT_GGUF_TYPE_OF(std::string, kString)
INFERKIT_GGUF_TYPE_OF(std::uint64_t, kUint64)
INFERKIT_GGUF_TYPE_OF(std::int64_t, kInt64)
INFERKIT_GGUF_TYPE_OF(double, kFloat64)
#undef INFERKIT_GGUF_TYPE_OF

/// True for the C++ types that are GGUF scalars (numbers and bool).
template <class T>
concept GgufScalar = requires {
  GgufTypeOf<T>::value;
}
&&!std::is_same_v<T, std::string>;

/// An array value: `size()` elements of one type. Numeric and bool elements are stored as in the
/// file (little-endian, contiguous, 8-byte aligned storage) and read as a span; strings are
/// stored in one blob and read one by one.
class GgufArray {
 public:
  GgufArray() = default;

  /// An array of scalars.
  template <GgufScalar T>
  static GgufArray of(std::span<const T> values) {
    GgufArray a;
    a.type_ = GgufTypeOf<T>::value;
    a.count_ = values.size();
    a.words_.resize((values.size_bytes() + 7) / 8);
    if (!values.empty()) std::memcpy(a.words_.data(), values.data(), values.size_bytes());
    return a;
  }
  /// The same from a vector; a std::vector<bool> (not contiguous) is copied through uint8 and
  /// stored as bool.
  template <GgufScalar T>
  static GgufArray of(const std::vector<T>& values) {
    if constexpr (std::is_same_v<T, bool>) {
      // std::vector<bool> is not contiguous.
      std::vector<std::uint8_t> bytes(values.begin(), values.end());
      GgufArray a = of<std::uint8_t>(std::span<const std::uint8_t>(bytes));
      a.type_ = GgufValueType::kBool;
      return a;
    } else {
      return of<T>(std::span<const T>(values));
    }
  }

  /// An array of strings.
  template <class S>
  static GgufArray of_strings(std::span<const S> strings) {
    GgufArray a;
    a.type_ = GgufValueType::kString;
    a.count_ = strings.size();
    a.offsets_.reserve(strings.size() + 1);
    a.offsets_.push_back(0);
    for (const auto& s : strings) {
      a.blob_.append(std::string_view(s));
      a.offsets_.push_back(a.blob_.size());
    }
    return a;
  }
  /// The same from a vector (S: anything std::string_view is constructible from).
  template <class S>
  static GgufArray of_strings(const std::vector<S>& strings) {
    return of_strings<S>(std::span<const S>(strings));
  }

  /// For readers: an array of `count` scalars of type `t` copied from `bytes` (count * size).
  static GgufArray from_raw(GgufValueType t, std::size_t count, const std::byte* bytes) {
    GgufArray a;
    a.type_ = t;
    a.count_ = count;
    const std::size_t n = count * gguf_scalar_bytes(t);
    a.words_.resize((n + 7) / 8);
    if (n != 0) std::memcpy(a.words_.data(), bytes, n);
    return a;
  }
  /// For readers: an empty string array to append to.
  static GgufArray strings_with_capacity(std::size_t count, std::size_t blob_bytes) {
    GgufArray a;
    a.type_ = GgufValueType::kString;
    a.offsets_.reserve(count + 1);
    a.offsets_.push_back(0);
    a.blob_.reserve(blob_bytes);
    return a;
  }
  /// Appends a string (string arrays only).
  void push_string(std::string_view s) {
    blob_.append(s);
    offsets_.push_back(blob_.size());
    ++count_;
  }

  GgufValueType element_type() const { return type_; }  ///< type of every element
  std::size_t size() const { return count_; }           ///< number of elements
  bool empty() const { return count_ == 0; }            ///< no elements

  /// The elements as a span of T. Throws std::invalid_argument naming `what` (the key) when the
  /// element type is not T.
  template <GgufScalar T>
  std::span<const T> values(std::string_view what = "array") const {
    if (type_ != GgufTypeOf<T>::value) [[unlikely]]
      throw_invalid_argument(std::string(what) + " element type", gguf_value_type_name(type_),
                             "asked for an array of " + gguf_value_type_name(GgufTypeOf<T>::value));
    return {reinterpret_cast<const T*>(words_.data()), count_};
  }

  /// Element i of a string array (a view into this array's storage). Throws std::invalid_argument
  /// when this is not a string array, std::out_of_range for i >= size().
  std::string_view string(std::size_t i, std::string_view what = "array") const {
    if (type_ != GgufValueType::kString) [[unlikely]]
      throw_invalid_argument(std::string(what) + " element type", gguf_value_type_name(type_),
                             "asked for an array of string");
    require_index(i, count_, std::string(what) + " index");
    return std::string_view(blob_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
  }

  /// Bytes of the scalar elements as stored (numeric and bool arrays).
  std::span<const std::byte> raw_bytes() const {
    return {reinterpret_cast<const std::byte*>(words_.data()), count_ * gguf_scalar_bytes(type_)};
  }

  /// Same element type, count and elements. Numeric elements compare by their bytes: a NaN
  /// equals the same NaN bits, and 0.0 differs from -0.0 (unlike GgufValue's scalar ==).
  friend bool operator==(const GgufArray& a, const GgufArray& b) {
    if (a.type_ != b.type_ || a.count_ != b.count_) return false;
    if (a.type_ == GgufValueType::kString) return a.blob_ == b.blob_ && a.offsets_ == b.offsets_;
    const auto x = a.raw_bytes(), y = b.raw_bytes();
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0);
  }

 private:
  GgufValueType type_ = GgufValueType::kUint8;
  std::size_t count_ = 0;
  std::vector<std::uint64_t> words_;    // scalar elements (8-byte aligned storage)
  std::string blob_;                    // string elements, concatenated
  std::vector<std::uint64_t> offsets_;  // string i is blob_[offsets_[i], offsets_[i + 1])
};

/// One metadata value: a scalar, a string or an array. The variant's index is the type id.
class GgufValue {
 public:
  /// The alternatives in type-id order: `index()` is the GgufValueType id.
  using Storage = std::variant<std::uint8_t, std::int8_t, std::uint16_t, std::int16_t, std::uint32_t, std::int32_t,
                               float, bool, std::string, GgufArray, std::uint64_t, std::int64_t, double>;

  GgufValue() = default;
  /// The value `v` holds (its alternative is the type).
  explicit GgufValue(Storage v) : v_(std::move(v)) {}

  /// A value of the GGUF type of T (T a scalar, std::string or GgufArray).
  template <class T>
  static GgufValue of(T value) {
    GgufValue g;
    g.v_.template emplace<T>(std::move(value));
    return g;
  }
  /// A string value: a copy of the NUL-terminated `s` (what `of("text")` calls).
  static GgufValue of(const char* s) { return of(std::string(s)); }

  GgufValueType type() const { return static_cast<GgufValueType>(v_.index()); }  ///< the stored type

  /// The value as T (a scalar, std::string, std::string_view or GgufArray), exactly: no
  /// conversion between types. Throws std::invalid_argument naming `key`, the stored type and the
  /// asked type.
  template <class T>
  decltype(auto) as(std::string_view key = "value") const {
    if constexpr (std::is_same_v<T, std::string_view>) {
      return std::string_view(ref<std::string>(key));
    } else {
      return ref<T>(key);
    }
  }

  /// The value of an integer-typed scalar (uint8 ... int64) converted to integer type T when it
  /// fits. Throws std::invalid_argument naming `key` when the stored type is not an integer or the
  /// value does not fit in T.
  template <std::integral T>
  T as_integer(std::string_view key = "value") const {
    return std::visit(
        [&](const auto& x) -> T {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_integral_v<X> && !std::is_same_v<X, bool>) {
            if (!std::in_range<T>(x)) [[unlikely]]
              throw_invalid_argument("GGUF key '" + std::string(key) + "'", x,
                                     "does not fit in the asked integer type");
            return static_cast<T>(x);
          } else {
            throw_invalid_argument("GGUF key '" + std::string(key) + "' type", gguf_value_type_name(type()),
                                   "asked for an integer");
          }
        },
        v_);
  }

  const Storage& storage() const { return v_; }  ///< the variant
  /// Same type and equal value (std::variant's ==: float scalars compare as numbers, so NaN is
  /// never equal and 0.0 == -0.0; arrays by GgufArray's ==).
  friend bool operator==(const GgufValue&, const GgufValue&) = default;

 private:
  template <class T>
  static std::string asked_name() {
    if constexpr (std::is_same_v<T, GgufArray>) {
      return "array";
    } else {
      return gguf_value_type_name(GgufTypeOf<T>::value);
    }
  }
  template <class T>
  const T& ref(std::string_view key) const {
    const T* p = std::get_if<T>(&v_);
    if (p == nullptr) [[unlikely]]
      throw_invalid_argument("GGUF key '" + std::string(key) + "' type", gguf_value_type_name(type()),
                             "asked for " + asked_name<T>());
    return *p;
  }
  Storage v_;
};

/// A key and its value, as one entry of a file's metadata.
struct GgufKeyValue {
  std::string key;  ///< e.g. "llama.block_count"
  GgufValue value;  ///< the value
  /// Same key and equal value.
  friend bool operator==(const GgufKeyValue&, const GgufKeyValue&) = default;
};

}  // namespace inferkit
