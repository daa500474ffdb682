#pragma once
// GgufWriter: builds a GGUF file (version 3 by default, or 2) from metadata and tensors, for
// conversion tools and tests. Reading a file and writing it back (GgufWriter::from) gives the same
// bytes, bit for bit, when the original used the canonical layout every ggml / gguf-py writer uses:
// metadata and tensor infos in order, zero padding to the alignment, tensors in info order each
// at the next aligned offset, each followed by zero padding to the alignment. A file without
// tensors ends after its metadata (as gguf-py's vocabulary-only files do) unless
// pad_empty_data_section(true) asks for the padding (as ggml's own writer adds it).
//
//   inferkit::GgufWriter w;
//   w.set("general.architecture", std::string("llama"));
//   w.set<std::uint32_t>("llama.block_count", 2);
//   w.add_tensor<float>("output_norm.weight", {64}, norm);   // F32, dims fastest-varying first
//   w.write("model.gguf");
//
// Contract: keys and tensor names are non-empty, at most 65535 bytes and unique (set() replaces a
// key's value in place; add_tensor with a name already present throws); tensor data must hold
// exactly the bytes its type and dims imply; `general.alignment`, when set, must be a uint32
// power of two. Tensor data passed as a span is referenced, not copied: keep it alive until
// write() returns. Errors throw std::invalid_argument naming the key or tensor and the value.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/ggml_type.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/io/gguf.hpp"
#include "inferkit/io/gguf_value.hpp"

namespace inferkit {

/// Builds a GGUF file from metadata and tensors and writes it out (file comment). Tensor data is
/// referenced, not copied.
class GgufWriter {
 public:
  /// A tensor to write: its info (offset is assigned by the writer) and its bytes.
  struct Tensor {
    std::string name;                 ///< non-empty, at most 65535 bytes, unique in the file
    GgmlType type = GgmlType::kF32;   ///< ggml type of the elements in `data`
    std::vector<std::uint64_t> dims;  ///< fastest-varying first, 1..4 of them
    std::span<const std::byte> data;  ///< referenced, not copied
  };

  /// An empty file of GGUF version `version` (2 or 3: the same layout in little-endian).
  explicit GgufWriter(std::uint32_t version = 3) : version_(version) {
    require(version == 2 || version == 3, "GGUF version", version, "must be 2 or 3");
  }

  /// The metadata and tensors of `file`, tensors referencing its bytes (keep it alive until
  /// write() returns). Tensors whose type has no known layout keep the bytes up to the next
  /// tensor (or the end of the data section).
  static GgufWriter from(const GgufFile& file) {
    GgufWriter w(file.version());
    w.pad_empty_data_ = file.tensors().empty() && file.file().size() > file.metadata_end();
    for (const auto& kv : file.metadata()) w.set(kv.key, kv.value);
    const auto& infos = file.tensors();
    for (std::size_t i = 0; i < infos.size(); ++i) {
      const auto& t = infos[i];
      std::span<const std::byte> data;
      if (t.layout_known) {
        data = file.tensor_at(i).bytes();
      } else {
        std::uint64_t end = file.data_size();
        for (const auto& o : infos)
          if (o.offset > t.offset && o.offset < end) end = o.offset;
        data = file.file().bytes().subspan(static_cast<std::size_t>(file.data_offset() + t.offset),
                                           static_cast<std::size_t>(end - t.offset));
      }
      w.add_raw(Tensor{t.name, t.type, {t.dims.begin(), t.dims.begin() + t.n_dims}, data}, /*check_size=*/false);
    }
    return w;
  }

  // ---- metadata --------------------------------------------------------------------------------

  /// Sets `key` to `value`: in place when the key exists (its position kept), else appended.
  void set(const std::string& key, GgufValue value) {
    require(!key.empty() && key.size() <= kGgufMaxNameBytes, "GGUF key length", key.size(), "must be in [1, 65535]");
    if (key == "general.alignment") {
      require(value.type() == GgufValueType::kUint32, "GGUF key 'general.alignment' type",
              gguf_value_type_name(value.type()), "must be uint32");
      const auto a = value.as<std::uint32_t>();
      require(a != 0 && (a & (a - 1)) == 0, "GGUF key 'general.alignment'", a, "must be a power of two");
    }
    if (value.type() == GgufValueType::kArray)
      require(value.as<GgufArray>().element_type() != GgufValueType::kArray, "GGUF key '" + key + "' element type",
              "array", "arrays of arrays are not supported");
    const auto it = index_.find(key);
    if (it != index_.end()) {
      kv_[it->second].value = std::move(value);
      return;
    }
    index_.emplace(key, kv_.size());
    kv_.push_back({key, std::move(value)});
  }
  /// Sets `key` to a scalar or string of the GGUF type of T.
  template <class T>
  void set(const std::string& key, T value) {
    if constexpr (std::is_same_v<T, GgufValue>) {
      set(key, GgufValue(std::move(value)));
    } else {
      set(key, GgufValue::of<T>(std::move(value)));
    }
  }
  /// Sets `key` to the string `s` (a copy; this is what `set(key, "text")` calls).
  void set(const std::string& key, const char* s) { set(key, GgufValue::of(std::string(s))); }

  /// Removes `key` (no-op when absent).
  void remove(const std::string& key) {
    const auto it = index_.find(key);
    if (it == index_.end()) return;
    kv_.erase(kv_.begin() + static_cast<std::ptrdiff_t>(it->second));
    index_.clear();
    for (std::size_t i = 0; i < kv_.size(); ++i) index_.emplace(kv_[i].key, i);
  }

  const std::vector<GgufKeyValue>& metadata() const { return kv_; }  ///< in write order

  /// With no tensors: whether the file still ends with zero padding to the alignment.
  void pad_empty_data_section(bool pad) { pad_empty_data_ = pad; }

  // ---- tensors ---------------------------------------------------------------------------------

  /// Adds a tensor of ggml type `type` whose bytes are `data` (exactly ggml's size for the dims).
  void add_tensor(std::string name, GgmlType type, std::vector<std::uint64_t> dims, std::span<const std::byte> data) {
    add_raw(Tensor{std::move(name), type, std::move(dims), data}, /*check_size=*/true);
  }
  /// Adds a tensor of a plain type (float, Float16, BFloat16, double, int8_t ... int64_t).
  template <class T>
  void add_tensor(std::string name, std::vector<std::uint64_t> dims, std::span<const T> values) {
    add_tensor(std::move(name), ggml_plain_type<T>(), std::move(dims), std::as_bytes(values));
  }
  /// The same from a vector, which is referenced too: keep it alive and unresized until write()
  /// returns.
  template <class T>
  void add_tensor(std::string name, std::vector<std::uint64_t> dims, const std::vector<T>& values) {
    add_tensor<T>(std::move(name), std::move(dims), std::span<const T>(values));
  }

  const std::vector<Tensor>& tensors() const { return tensors_; }  ///< in write order

  // ---- output ----------------------------------------------------------------------------------

  /// The alignment the file will use (general.alignment or 32).
  std::uint32_t alignment() const {
    const auto it = index_.find("general.alignment");
    return it == index_.end() ? kGgufDefaultAlignment : kv_[it->second].value.as<std::uint32_t>();
  }

  /// Writes the file to `out`. Throws std::invalid_argument when the stream fails.
  void write(std::ostream& out) const {
    const std::uint32_t align = alignment();
    std::uint64_t pos = 0;
    auto put = [&](const void* p, std::size_t n) {
      out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
      pos += n;
    };
    auto put_u32 = [&](std::uint32_t v) { put(&v, 4); };
    auto put_u64 = [&](std::uint64_t v) { put(&v, 8); };
    auto put_str = [&](std::string_view s) {
      put_u64(s.size());
      put(s.data(), s.size());
    };
    auto pad = [&] {
      static constexpr char kZeros[64] = {};
      std::uint64_t n = (align - pos % align) % align;
      while (n > 0) {
        const std::size_t k = n < sizeof(kZeros) ? static_cast<std::size_t>(n) : sizeof(kZeros);
        put(kZeros, k);
        n -= k;
      }
    };
    put_u32(kGgufMagic);
    put_u32(version_);
    put_u64(tensors_.size());
    put_u64(kv_.size());
    for (const auto& kv : kv_) {
      put_str(kv.key);
      put_u32(static_cast<std::uint32_t>(kv.value.type()));
      write_value(kv.value, put, put_u32, put_u64, put_str);
    }
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
      put_str(t.name);
      put_u32(static_cast<std::uint32_t>(t.dims.size()));
      for (const auto d : t.dims) put_u64(d);
      put_u32(static_cast<std::uint32_t>(t.type));
      put_u64(offset);
      offset += padded(t.data.size(), align);
    }
    if (!tensors_.empty() || pad_empty_data_) pad();
    for (const auto& t : tensors_) {
      if (!t.data.empty()) put(t.data.data(), t.data.size());
      pad();
    }
    if (!out) throw_invalid_argument("GGUF output stream", "failed", "the write did not complete");
  }

  /// Writes the file to `path`.
  void write(const std::string& path) const {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) throw_invalid_argument("GGUF output file", path, "cannot be created");
    write(f);
    f.close();
    if (!f) throw_invalid_argument("GGUF output file", path, "the write did not complete");
  }

  /// The file's bytes in memory.
  std::vector<std::byte> to_bytes() const {
    std::ostringstream s(std::ios::binary);
    write(s);
    const std::string str = s.str();
    std::vector<std::byte> out(str.size());
    if (!str.empty()) std::memcpy(out.data(), str.data(), str.size());
    return out;
  }

 private:
  static std::uint64_t padded(std::uint64_t n, std::uint32_t align) { return (n + align - 1) / align * align; }

  template <class Put, class Put32, class Put64, class PutStr>
  static void write_value(const GgufValue& v, Put& put, Put32& put_u32, Put64& put_u64, PutStr& put_str) {
    std::visit(
        [&](const auto& x) {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, std::string>) {
            put_str(x);
          } else if constexpr (std::is_same_v<X, GgufArray>) {
            put_u32(static_cast<std::uint32_t>(x.element_type()));
            put_u64(x.size());
            if (x.element_type() == GgufValueType::kString) {
              for (std::size_t i = 0; i < x.size(); ++i) put_str(x.string(i));
            } else {
              const auto raw = x.raw_bytes();
              if (!raw.empty()) put(raw.data(), raw.size());
            }
          } else if constexpr (std::is_same_v<X, bool>) {
            const std::uint8_t b = x ? 1 : 0;
            put(&b, 1);
          } else {
            put(&x, sizeof(X));
          }
        },
        v.storage());
  }

  void add_raw(Tensor t, bool check_size) {
    require(!t.name.empty() && t.name.size() <= kGgufMaxNameBytes, "GGUF tensor name length", t.name.size(),
            "must be in [1, 65535]");
    require(tensor_names_.count(t.name) == 0, "GGUF tensor name", t.name, "is already added");
    require(!t.dims.empty() && t.dims.size() <= kGgufMaxDims, "tensor '" + t.name + "' n_dims", t.dims.size(),
            "must be in [1, 4]");
    require(ggml_type_id_valid(static_cast<std::uint32_t>(t.type)), "tensor '" + t.name + "' type",
            static_cast<std::uint32_t>(t.type), "is not a ggml tensor type id");
    if (check_size || ggml_type_known_layout(t.type)) {
      require(ggml_type_known_layout(t.type), "tensor '" + t.name + "' type", ggml_type_name(t.type),
              "has no block layout known to inferkit: its size cannot be checked");
      std::uint64_t rows = 1;
      for (std::size_t d = 1; d < t.dims.size(); ++d)
        require(!__builtin_mul_overflow(rows, t.dims[d], &rows), "tensor '" + t.name + "' dims", "overflow",
                "the element count overflows 64 bits");
      const std::uint64_t row = ggml_row_bytes(t.type, t.dims[0]);
      std::uint64_t bytes = 0;
      require(!__builtin_mul_overflow(row, rows, &bytes), "tensor '" + t.name + "' dims", "overflow",
              "the byte count overflows 64 bits");
      require(t.data.size() == bytes, "tensor '" + t.name + "' data bytes", t.data.size(),
              "must be " + std::to_string(bytes) + " for its type and dims");
    }
    tensor_names_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  std::uint32_t version_;
  bool pad_empty_data_ = false;
  std::vector<GgufKeyValue> kv_;
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, std::size_t> tensor_names_;
};

}  // namespace inferkit
