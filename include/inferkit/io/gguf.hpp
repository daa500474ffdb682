#pragma once
// GgufFile: a GGUF file (versions 2 and 3, little-endian) read and validated: header, metadata
// (every value type, arrays of strings included), tensor infos, `general.alignment`, and the data
// section, memory-mapped read-only (MappedFile; plain read as the fallback). Tensors are views
// into the mapping (GgufTensor): nothing is copied, and opening touches no tensor byte (the
// metadata is parsed from the first pages only).
//
//   const auto f = inferkit::GgufFile::open("model.gguf");
//   const auto layers = f.get<std::uint32_t>("llama.block_count");          // required, exact type
//   const auto eps = f.find<float>("llama.attention.layer_norm_rms_epsilon");  // std::optional
//   std::span<const float> w = f.tensor("token_embd.weight").values<float>();   // F32, no copy
//
// Layout (a fact of the format): magic "GGUF", uint32 version, uint64 tensor count, uint64
// metadata count; metadata entries (string key = uint64 length + bytes, uint32 value type, value);
// tensor infos (string name, uint32 n_dims, uint64 dims[n_dims] fastest-varying first, uint32 ggml
// type, uint64 offset relative to the data section); zero padding to the alignment; the data
// section. Version 1 (32-bit counts) is refused.
//
// Contract: a file that does not follow the format is rejected with std::invalid_argument naming
// the file, the byte offset, the key or tensor and the bad value: truncation, bad magic, an
// unsupported version (a byte-swapped one is named big-endian), unknown value or tensor types,
// counts or lengths larger than the bytes left (checked before any allocation, so no allocation
// exceeds what the file size justifies), duplicate keys or tensor names, a `general.alignment`
// that is not a uint32 power of two, n_dims outside [1, 4], element or byte counts that overflow
// 64 bits, a first dimension that is not a multiple of the type's block size, tensors misaligned,
// outside the data section or overlapping each other. Tensors of a type id ggml has but inferkit
// has no block layout for (the i-quants) load as metadata; asking for their bytes is an error
// naming the tensor and the type. Const access is thread-safe.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/ggml_type.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/io/gguf_value.hpp"
#include "inferkit/io/mapped_file.hpp"

namespace inferkit {

inline constexpr std::uint32_t kGgufMagic = 0x46554747;     ///< "GGUF" read as a little-endian uint32
inline constexpr std::uint32_t kGgufDefaultAlignment = 32;  ///< when `general.alignment` is absent
inline constexpr std::uint32_t kGgufMaxDims = 4;            ///< ggml's GGML_MAX_DIMS
inline constexpr std::uint64_t kGgufMaxNameBytes = 65535;   ///< bound on a key or tensor name

/// One tensor's description from the file.
struct GgufTensorInfo {
  std::string name;                               ///< e.g. "blk.0.attn_q.weight"
  std::uint32_t n_dims = 0;                       ///< 1..4
  std::array<std::uint64_t, 4> dims{1, 1, 1, 1};  ///< ne[0] fastest-varying; unused dims are 1
  GgmlType type = GgmlType::kF32;                 ///< element type
  std::uint64_t offset = 0;                       ///< bytes from the start of the data section
  std::uint64_t bytes = 0;                        ///< data bytes (0 when the layout is not known)
  bool layout_known = true;                       ///< false for type ids inferkit has no block layout for

  /// Number of elements (product of the dims).
  std::uint64_t elements() const { return dims[0] * dims[1] * dims[2] * dims[3]; }
  /// Rows: elements / dims[0].
  std::uint64_t rows() const { return dims[1] * dims[2] * dims[3]; }
};

/// The ggml type whose elements are C++ type T: float F32, Float16 F16, BFloat16 BF16, double
/// F64, int8_t ... int64_t I8 ... I64.
template <class T>
constexpr GgmlType ggml_plain_type() {
  if constexpr (std::is_same_v<T, float>)
    return GgmlType::kF32;
  else if constexpr (std::is_same_v<T, Float16>)
    return GgmlType::kF16;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return GgmlType::kBF16;
  else if constexpr (std::is_same_v<T, double>)
    return GgmlType::kF64;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return GgmlType::kI8;
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return GgmlType::kI16;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return GgmlType::kI32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return GgmlType::kI64;
  else
    static_assert(sizeof(T) == 0, "T must be float, Float16, BFloat16, double or an int type");
}

/// A tensor's data: a view into the file's bytes (valid while the GgufFile lives).
class GgufTensor {
 public:
  /// A view of the tensor `info` describes, whose first byte is at `data` (GgufFile::tensor()
  /// and friends build these; both `info` and the bytes must outlive the view; nothing is checked).
  GgufTensor(const GgufTensorInfo& info, const std::byte* data) : info_(&info), data_(data) {}

  const GgufTensorInfo& info() const { return *info_; }    ///< name, dims, type, offset
  const std::string& name() const { return info_->name; }  ///< the tensor's name, e.g. "blk.0.attn_q.weight"
  GgmlType type() const { return info_->type; }            ///< its ggml element type

  /// The raw bytes (ggml blocks for block types). Throws std::invalid_argument naming the tensor
  /// and its type when inferkit does not know the type's layout.
  std::span<const std::byte> bytes() const {
    require_layout();
    return {data_, static_cast<std::size_t>(info_->bytes)};
  }

  /// Bytes of row r (dims[0] elements). Throws std::out_of_range for r >= rows().
  std::span<const std::byte> row(std::uint64_t r) const {
    require_layout();
    require_index(r, info_->rows(), "row of tensor '" + info_->name + "'");
    const std::uint64_t rb = ggml_row_bytes(info_->type, info_->dims[0]);
    return {data_ + r * rb, static_cast<std::size_t>(rb)};
  }

  /// The elements as a span of T, for the plain types: float (F32), Float16 (F16), BFloat16
  /// (BF16), double (F64), int8_t (I8), int16_t (I16), int32_t (I32), int64_t (I64). Throws
  /// std::invalid_argument naming the tensor when its type is not T's, or when its data is not
  /// aligned for T (possible only with a `general.alignment` below sizeof(T)).
  template <class T>
  std::span<const T> values() const {
    constexpr GgmlType want = ggml_plain_type<T>();
    if (info_->type != want) [[unlikely]]
      throw_invalid_argument("tensor '" + info_->name + "' type", ggml_type_name(info_->type),
                             "asked for " + ggml_type_name(want) + " values");
    if (reinterpret_cast<std::uintptr_t>(data_) % alignof(T) != 0) [[unlikely]]
      throw_invalid_argument("tensor '" + info_->name + "' data address alignment",
                             reinterpret_cast<std::uintptr_t>(data_) % alignof(T),
                             "must be a multiple of " + std::to_string(alignof(T)));
    return {reinterpret_cast<const T*>(data_), static_cast<std::size_t>(info_->elements())};
  }

 private:
  void require_layout() const {
    if (!info_->layout_known) [[unlikely]]
      throw_invalid_argument("tensor '" + info_->name + "' type", ggml_type_name(info_->type),
                             "has no block layout known to inferkit (its bytes cannot be viewed)");
  }
  const GgufTensorInfo* info_;
  const std::byte* data_;
};

namespace detail {

/// Bounds-checked little-endian reads over a byte span; every failure names the file, the offset
/// and what was being read.
class GgufCursor {
 public:
  GgufCursor(std::span<const std::byte> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  std::size_t offset() const { return pos_; }
  std::size_t left() const { return bytes_.size() - pos_; }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  const std::byte* take(std::size_t n, std::string_view what) {
    need(n, what);
    const std::byte* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }

  /// A GGUF string (uint64 length + bytes) as a view; `max_len` bounds the length.
  std::string_view string(std::string_view what, std::uint64_t max_len = std::numeric_limits<std::uint64_t>::max()) {
    const std::size_t at = pos_;
    const auto len = read<std::uint64_t>(what);
    if (len > max_len) fail(at, std::string(what) + " length", len, "must be <= " + std::to_string(max_len));
    if (len > left())
      fail(at, std::string(what) + " length", len, "exceeds the " + std::to_string(left()) + " bytes left");
    const auto* p = take(static_cast<std::size_t>(len), what);
    return {reinterpret_cast<const char*>(p), static_cast<std::size_t>(len)};
  }

  template <class V>
  [[noreturn]] void fail(std::size_t at, std::string_view what, const V& value, std::string_view requirement) const {
    throw_invalid_argument("GGUF '" + file_ + "' at byte " + std::to_string(at) + ": " + std::string(what), value,
                           requirement);
  }

 private:
  void need(std::size_t n, std::string_view what) const {
    if (n > left()) [[unlikely]]
      fail(pos_, what, "truncated",
           "needs " + std::to_string(n) + " bytes, " + std::to_string(left()) + " left (file truncated)");
  }
  std::span<const std::byte> bytes_;
  const std::string& file_;
  std::size_t pos_ = 0;
};

inline bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

}  // namespace detail

/// A GGUF file parsed and validated, its metadata as values and its tensors as views into its
/// bytes (file comment). Move-only; const access is thread-safe.
class GgufFile {
 public:
  /// Opens and validates `path` (memory-mapped unless `mode` says read).
  static GgufFile open(const std::string& path, MappedFile::Mode mode = MappedFile::Mode::kMapOrRead) {
    return GgufFile(MappedFile::open(path, mode));
  }
  /// Parses bytes already in memory (MappedFile::from_bytes owns them, MappedFile::view lends them).
  explicit GgufFile(MappedFile file) : file_(std::move(file)) { parse(); }

  /// Takes over the source's bytes and tables without re-parsing: they keep their addresses, so
  /// tensor views and spans obtained from the source stay valid (they now belong to this object).
  GgufFile(GgufFile&&) noexcept = default;
  /// Drops this file (views into it become invalid), then takes over the source as the move
  /// constructor does.
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  std::uint32_t version() const { return version_; }            ///< 2 or 3
  std::uint32_t alignment() const { return alignment_; }        ///< general.alignment or 32
  std::uint64_t metadata_end() const { return metadata_end_; }  ///< end of the tensor infos (before padding)
  std::uint64_t data_offset() const { return data_offset_; }    ///< file offset of the data section
  std::uint64_t data_size() const { return data_size_; }        ///< bytes from data_offset() to the end
  const MappedFile& file() const { return file_; }              ///< the bytes (mapped or read)
  const std::string& name() const { return file_.name(); }      ///< the path

  // ---- metadata --------------------------------------------------------------------------------

  /// Every key/value in file order.
  const std::vector<GgufKeyValue>& metadata() const { return kv_; }

  /// The value of `key`, or nullptr.
  const GgufValue* find_value(std::string_view key) const {
    const auto it = kv_index_.find(std::string(key));
    return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
  }
  /// The value of `key`. Throws std::invalid_argument naming the key and the file when absent.
  const GgufValue& value(std::string_view key) const {
    const GgufValue* v = find_value(key);
    if (v == nullptr) [[unlikely]]
      throw_invalid_argument("GGUF key", std::string(key), "is required but missing from '" + name() + "'");
    return *v;
  }
  /// True when the metadata has `key`, whatever its type.
  bool contains(std::string_view key) const { return find_value(key) != nullptr; }

  /// Required value of exact type T (a scalar, std::string, std::string_view or GgufArray).
  /// Throws std::invalid_argument naming the key, the stored type and T when they differ, or the
  /// key when it is missing.
  template <class T>
  decltype(auto) get(std::string_view key) const {
    return value(key).template as<T>(key);
  }
  /// Optional value of exact type T: std::nullopt when the key is missing; a present key of
  /// another type is an error (a silent default would hide a broken file).
  template <class T>
  std::optional<std::decay_t<decltype(std::declval<GgufValue>().as<T>())>> find(std::string_view key) const {
    const GgufValue* v = find_value(key);
    if (v == nullptr) return std::nullopt;
    return v->template as<T>(key);
  }
  /// Required integer of any stored integer type, converted to T when the value fits.
  template <std::integral T>
  T get_integer(std::string_view key) const {
    return value(key).template as_integer<T>(key);
  }
  /// Optional integer of any stored integer type.
  template <std::integral T>
  std::optional<T> find_integer(std::string_view key) const {
    const GgufValue* v = find_value(key);
    if (v == nullptr) return std::nullopt;
    return v->template as_integer<T>(key);
  }
  /// Required array of scalars T as a span into the metadata.
  template <GgufScalar T>
  std::span<const T> get_array(std::string_view key) const {
    return get<GgufArray>(key).template values<T>(key);
  }

  // ---- tensors ---------------------------------------------------------------------------------

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  ///< in file order

  /// The tensor named `name`, or std::nullopt.
  std::optional<GgufTensor> find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(std::string(name));
    if (it == tensor_index_.end()) return std::nullopt;
    return tensor_at(it->second);
  }
  /// The tensor named `name`. Throws std::invalid_argument naming it when absent.
  GgufTensor tensor(std::string_view name) const {
    auto t = find_tensor(name);
    if (!t) [[unlikely]]
      throw_invalid_argument("GGUF tensor", std::string(name), "is required but missing from '" + this->name() + "'");
    return *t;
  }
  /// Tensor i in file order.
  GgufTensor tensor_at(std::size_t i) const {
    require_index(i, tensors_.size(), "tensor index");
    const GgufTensorInfo& t = tensors_[i];
    return GgufTensor(t, file_.bytes().data() + data_offset_ + t.offset);
  }

 private:
  void parse() {
    const auto bytes = file_.bytes();
    detail::GgufCursor c(bytes, file_.name());
    const auto magic = c.read<std::uint32_t>("magic");
    if (magic != kGgufMagic) c.fail(0, "magic", hex(magic), "must be 0x46554747 (\"GGUF\")");
    version_ = c.read<std::uint32_t>("version");
    if (version_ != 2 && version_ != 3) {
      const std::uint32_t swapped = __builtin_bswap32(version_);
      if (swapped == 2 || swapped == 3)
        c.fail(4, "version", version_, "is a big-endian GGUF (version " + std::to_string(swapped) + "), not supported");
      c.fail(4, "version", version_,
             version_ == 1 ? "GGUF v1 (32-bit counts) is not supported; 2 and 3 are" : "must be 2 or 3");
    }
    const std::size_t tensor_count_at = c.offset();
    const auto n_tensors = c.read<std::uint64_t>("tensor count");
    const std::size_t kv_count_at = c.offset();
    const auto n_kv = c.read<std::uint64_t>("metadata count");
    // The smallest entry: a key of 1 byte + type + a 1-byte value; a tensor info with a 1-byte name
    // and one dim. Counts beyond what the bytes left can hold are rejected before reserving.
    constexpr std::uint64_t kMinKv = 8 + 1 + 4 + 1, kMinTensor = 8 + 1 + 4 + 8 + 4 + 8;
    if (n_kv > c.left() / kMinKv)
      c.fail(kv_count_at, "metadata count", n_kv,
             "exceeds what the " + std::to_string(c.left()) + " bytes left can hold");
    if (n_tensors > c.left() / kMinTensor)
      c.fail(tensor_count_at, "tensor count", n_tensors,
             "exceeds what the " + std::to_string(c.left()) + " bytes left can hold");

    kv_.reserve(static_cast<std::size_t>(n_kv));
    kv_index_.reserve(static_cast<std::size_t>(n_kv));
    for (std::uint64_t i = 0; i < n_kv; ++i) {
      const std::size_t at = c.offset();
      const std::string_view key = c.string("metadata key", kGgufMaxNameBytes);
      if (key.empty()) c.fail(at, "metadata key " + std::to_string(i), "\"\"", "must not be empty");
      if (kv_index_.count(std::string(key)) != 0) c.fail(at, "metadata key", std::string(key), "is duplicated");
      const std::size_t type_at = c.offset();
      const auto type = c.read<std::uint32_t>("value type of key '" + std::string(key) + "'");
      GgufValue v = read_value(c, type, type_at, key);
      kv_index_.emplace(std::string(key), kv_.size());
      kv_.push_back({std::string(key), std::move(v)});
    }

    alignment_ = kGgufDefaultAlignment;
    if (const GgufValue* a = find_value("general.alignment")) {
      if (a->type() != GgufValueType::kUint32)
        throw_invalid_argument("GGUF '" + name() + "' key 'general.alignment' type", gguf_value_type_name(a->type()),
                               "must be uint32");
      const auto al = a->as<std::uint32_t>();
      if (al == 0 || (al & (al - 1)) != 0)
        throw_invalid_argument("GGUF '" + name() + "' key 'general.alignment'", al, "must be a power of two");
      alignment_ = al;
    }

    tensors_.reserve(static_cast<std::size_t>(n_tensors));
    tensor_index_.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) tensors_.push_back(read_tensor_info(c, i));

    // The data section starts at the next multiple of the alignment.
    const std::uint64_t header_end = c.offset();
    metadata_end_ = header_end;
    const std::uint64_t pad = (alignment_ - header_end % alignment_) % alignment_;
    data_offset_ = header_end + pad;
    if (data_offset_ > bytes.size()) {
      if (!tensors_.empty())
        c.fail(header_end, "data section start", data_offset_,
               "is past the end of the file (" + std::to_string(bytes.size()) + " bytes): truncated");
      data_offset_ = bytes.size();  // no tensors: the padding may be absent
    }
    data_size_ = bytes.size() - data_offset_;
    check_tensor_extents();
  }

  GgufValue read_value(detail::GgufCursor& c, std::uint32_t type, std::size_t type_at, std::string_view key) {
    if (type >= kGgufValueTypeCount)
      c.fail(type_at, "value type of key '" + std::string(key) + "'", type, "must be 0..12");
    const auto t = static_cast<GgufValueType>(type);
    const std::string what = "value of key '" + std::string(key) + "'";
    switch (t) {
      case GgufValueType::kUint8:
        return GgufValue::of(c.read<std::uint8_t>(what));
      case GgufValueType::kInt8:
        return GgufValue::of(c.read<std::int8_t>(what));
      case GgufValueType::kUint16:
        return GgufValue::of(c.read<std::uint16_t>(what));
      case GgufValueType::kInt16:
        return GgufValue::of(c.read<std::int16_t>(what));
      case GgufValueType::kUint32:
        return GgufValue::of(c.read<std::uint32_t>(what));
      case GgufValueType::kInt32:
        return GgufValue::of(c.read<std::int32_t>(what));
      case GgufValueType::kFloat32:
        return GgufValue::of(c.read<float>(what));
      case GgufValueType::kUint64:
        return GgufValue::of(c.read<std::uint64_t>(what));
      case GgufValueType::kInt64:
        return GgufValue::of(c.read<std::int64_t>(what));
      case GgufValueType::kFloat64:
        return GgufValue::of(c.read<double>(what));
      case GgufValueType::kBool: {
        const std::size_t at = c.offset();
        const auto b = c.read<std::uint8_t>(what);
        if (b > 1) c.fail(at, what, static_cast<unsigned>(b), "a bool must be 0 or 1");
        return GgufValue::of(b == 1);
      }
      case GgufValueType::kString:
        return GgufValue::of(std::string(c.string(what)));
      case GgufValueType::kArray: {
        const std::size_t et_at = c.offset();
        const auto et = c.read<std::uint32_t>("array element type of key '" + std::string(key) + "'");
        if (et >= kGgufValueTypeCount)
          c.fail(et_at, "array element type of key '" + std::string(key) + "'", et, "must be 0..12");
        const auto e = static_cast<GgufValueType>(et);
        if (e == GgufValueType::kArray)
          c.fail(et_at, "array element type of key '" + std::string(key) + "'", "array",
                 "arrays of arrays are not supported");
        const std::size_t n_at = c.offset();
        const auto n = c.read<std::uint64_t>("array count of key '" + std::string(key) + "'");
        const std::uint64_t min_elem = e == GgufValueType::kString ? 8 : gguf_scalar_bytes(e);
        if (n > c.left() / min_elem)
          c.fail(n_at, "array count of key '" + std::string(key) + "'", n,
                 "exceeds what the " + std::to_string(c.left()) + " bytes left can hold");
        if (e == GgufValueType::kString) {
          // Two passes: the first validates every length and sums them, so the blob is allocated
          // once and only for bytes that exist.
          const std::size_t start = c.offset();
          std::uint64_t total = 0;
          for (std::uint64_t i = 0; i < n; ++i) total += c.string(what).size();
          detail::GgufCursor again(file_.bytes(), file_.name());
          (void)again.take(start, what);
          GgufArray a = GgufArray::strings_with_capacity(static_cast<std::size_t>(n), static_cast<std::size_t>(total));
          for (std::uint64_t i = 0; i < n; ++i) a.push_string(again.string(what));
          return GgufValue::of(std::move(a));
        }
        if (e == GgufValueType::kBool) {
          const std::size_t at = c.offset();
          const std::byte* p = c.take(static_cast<std::size_t>(n), what);
          for (std::uint64_t i = 0; i < n; ++i)
            if (std::to_integer<unsigned>(p[i]) > 1)
              c.fail(at + i, what + " element " + std::to_string(i), std::to_integer<unsigned>(p[i]),
                     "a bool must be 0 or 1");
          return GgufValue::of(GgufArray::from_raw(e, static_cast<std::size_t>(n), p));
        }
        const std::byte* p = c.take(static_cast<std::size_t>(n * min_elem), what);
        return GgufValue::of(GgufArray::from_raw(e, static_cast<std::size_t>(n), p));
      }
    }
    c.fail(type_at, "value type of key '" + std::string(key) + "'", type, "must be 0..12");
  }

  GgufTensorInfo read_tensor_info(detail::GgufCursor& c, std::uint64_t i) {
    GgufTensorInfo t;
    const std::size_t at = c.offset();
    t.name = std::string(c.string("name of tensor " + std::to_string(i), kGgufMaxNameBytes));
    if (t.name.empty()) c.fail(at, "name of tensor " + std::to_string(i), "\"\"", "must not be empty");
    if (tensor_index_.count(t.name) != 0) c.fail(at, "tensor name", t.name, "is duplicated");
    const std::string what = "tensor '" + t.name + "'";
    const std::size_t nd_at = c.offset();
    t.n_dims = c.read<std::uint32_t>(what + " n_dims");
    if (t.n_dims < 1 || t.n_dims > kGgufMaxDims) c.fail(nd_at, what + " n_dims", t.n_dims, "must be in [1, 4]");
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < t.n_dims; ++d) {
      const std::size_t d_at = c.offset();
      t.dims[d] = c.read<std::uint64_t>(what + " dim " + std::to_string(d));
      if (t.dims[d] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        c.fail(d_at, what + " dim " + std::to_string(d), t.dims[d], "must be <= 2^63 - 1");
      if (!detail::checked_mul(elements, t.dims[d], elements))
        c.fail(d_at, what + " element count", "overflow", "the product of its dims overflows 64 bits");
    }
    if (elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      c.fail(nd_at, what + " element count", elements, "must be <= 2^63 - 1");
    const std::size_t type_at = c.offset();
    const auto type = c.read<std::uint32_t>(what + " type");
    if (!ggml_type_id_valid(type)) c.fail(type_at, what + " type", type, "is not a ggml tensor type id");
    t.type = static_cast<GgmlType>(type);
    t.layout_known = ggml_type_known_layout(t.type);
    if (t.layout_known) {
      const std::uint32_t bs = ggml_block_size(t.type);
      if (t.dims[0] % bs != 0)
        c.fail(nd_at, what + " dim 0", t.dims[0],
               "must be a multiple of " + std::to_string(bs) + " (the block size of " + ggml_type_name(t.type) + ")");
      const std::uint64_t blocks = t.dims[0] / bs;
      std::uint64_t row = 0;
      if (!detail::checked_mul(blocks, ggml_block_bytes(t.type), row) || !detail::checked_mul(row, t.rows(), t.bytes))
        c.fail(nd_at, what + " byte count", "overflow", "its size in bytes overflows 64 bits");
    }
    t.offset = c.read<std::uint64_t>(what + " offset");
    tensor_index_.emplace(t.name, tensors_.size());
    return t;
  }

  void check_tensor_extents() const {
    const std::string file = "GGUF '" + name() + "'";
    for (const auto& t : tensors_) {
      if (t.offset % alignment_ != 0)
        throw_invalid_argument(file + " tensor '" + t.name + "' offset", t.offset,
                               "must be a multiple of the alignment " + std::to_string(alignment_));
      if (t.offset > data_size_ || t.bytes > data_size_ - t.offset)
        throw_invalid_argument(
            file + " tensor '" + t.name + "' extent",
            "[" + std::to_string(t.offset) + ", " + std::to_string(t.offset) + " + " + std::to_string(t.bytes) + ")",
            "must lie inside the data section of " + std::to_string(data_size_) + " bytes");
    }
    // Overlaps: sort by offset; each tensor must end where (or before) the next one starts.
    std::vector<std::size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return tensors_[a].offset != tensors_[b].offset ? tensors_[a].offset < tensors_[b].offset : a < b;
    });
    for (std::size_t k = 1; k < order.size(); ++k) {
      const auto& p = tensors_[order[k - 1]];
      const auto& n = tensors_[order[k]];
      // A tensor of unknown layout occupies at least its first byte.
      const std::uint64_t p_end = p.layout_known ? p.offset + p.bytes : p.offset + 1;
      const bool overlap = n.offset < p_end;
      if (overlap)
        throw_invalid_argument(
            file + " tensor '" + n.name + "' offset", n.offset,
            "overlaps tensor '" + p.name + "' at [" + std::to_string(p.offset) + ", " + std::to_string(p_end) + ")");
    }
  }

  static std::string hex(std::uint32_t v) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s = "0x";
    for (int sh = 28; sh >= 0; sh -= 4) s += kDigits[(v >> sh) & 0xF];
    return s;
  }

  MappedFile file_;
  std::uint32_t version_ = 0;
  std::uint32_t alignment_ = kGgufDefaultAlignment;
  std::uint64_t metadata_end_ = 0;
  std::uint64_t data_offset_ = 0;
  std::uint64_t data_size_ = 0;
  std::vector<GgufKeyValue> kv_;
  std::unordered_map<std::string, std::size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> tensor_index_;
};

}  // namespace inferkit
