#pragma once
// ggml's tensor element layouts, as GGUF files store them, and their exact dequantization (the
// reference every ggml_* kernel is tested against). Plain types: F32 (binary32), F16 (binary16),
// BF16 (upper half of a binary32), one element per "block".
//
//   std::vector<float> out(256);
//   inferkit::detail::ggml_dequantize(inferkit::GgmlType::kF16, row_bytes, 256, out.data());
//
// Each type's codec says where the binary16 factors of a block are, so a loader can reject NaN /
// Inf factors before a kernel multiplies by them.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "inferkit/core/convert.hpp"
#include "inferkit/core/ggml_type.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

/// What the loader and kernels need to know of a supported type.
struct GgmlBlockCodec {
  GgmlType type;                       ///< the type
  int block_size;                      ///< weights per block
  int block_bytes;                     ///< bytes per block
  int factor_count;                    ///< binary16 factors per block (0 for the plain types)
  std::uint16_t factor_offsets[2];     ///< byte offset of each factor in the block
  const char* factor_names[2];         ///< their names in ggml's structs ("d", "dmin", "m")
};

inline constexpr GgmlBlockCodec kGgmlCodecs[] = {
    {GgmlType::kF32, 1, 4, 0, {0, 0}, {nullptr, nullptr}},
    {GgmlType::kF16, 1, 2, 0, {0, 0}, {nullptr, nullptr}},
    {GgmlType::kBF16, 1, 2, 0, {0, 0}, {nullptr, nullptr}},
};

/// The codec of `t`, or nullptr when the ggml kernels do not support it.
inline const GgmlBlockCodec* ggml_block_codec(GgmlType t) {
  for (const auto& c : kGgmlCodecs)
    if (c.type == t) return &c;
  return nullptr;
}

/// Whether `t` is one of the plain float types (F32, F16, BF16).
inline bool ggml_plain_float(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

/// n elements of a plain-type row at p, widened to float (exact).
inline void ggml_plain_row_to_float(GgmlType t, const std::byte* p, Index n, float* out) {
  const auto count = static_cast<std::size_t>(n);
  if (t == GgmlType::kF32)
    std::memcpy(out, p, count * sizeof(float));
  else if (t == GgmlType::kF16)
    convert(reinterpret_cast<const Float16*>(p), out, count);
  else
    convert(reinterpret_cast<const BFloat16*>(p), out, count);
}

/// The n weights of a row at p (n a multiple of the block size), dequantized.
inline void ggml_dequantize(GgmlType t, const std::byte* p, Index n, float* out) {
  ggml_plain_row_to_float(t, p, n, out);
}

}  // namespace inferkit::detail
