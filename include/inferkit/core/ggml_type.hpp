#pragma once
// GgmlType: the tensor element types of GGUF files (ggml's type ids, a fact of the format), with
// each block type's elements per block and bytes per block. Shared by io/ (tensor infos) and
// quant/ (the GGUF block kernels), so neither needs the other.
//
//   const std::uint64_t bytes = inferkit::ggml_row_bytes(inferkit::GgmlType::kQ4_K, 4096);  // 2304
//
// Layouts (bytes per block of `block_size` weights): F32 4/1, F16 2/1, BF16 2/1, Q4_0 18/32,
// Q4_1 20/32, Q5_0 22/32, Q5_1 24/32, Q8_0 34/32, Q8_1 36/32, Q2_K 84/256, Q3_K 110/256,
// Q4_K 144/256, Q5_K 176/256, Q6_K 210/256, Q8_K 292/256. The i-quants, ternary and MXFP4 types
// have ids here (so errors can name them) and no layout: ggml_type_known_layout() is false.

#include <array>
#include <cstdint>
#include <string>

#include "inferkit/core/error.hpp"

namespace inferkit {

/// ggml tensor type ids as GGUF stores them (`uint32` in each tensor info).
enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

namespace detail {
struct GgmlTypeTraits {
  const char* name;           // ggml's spelling, e.g. "Q4_K"; nullptr: not a ggml type id
  std::uint32_t block_size;   // elements per block (0: layout not known to inferkit)
  std::uint32_t block_bytes;  // bytes per block
};
inline constexpr std::uint32_t kGgmlTypeIdCount = 40;
inline constexpr std::array<GgmlTypeTraits, kGgmlTypeIdCount> kGgmlTypeTraits = {{
    {"F32", 1, 4},      {"F16", 1, 2},      {"Q4_0", 32, 18},   {"Q4_1", 32, 20},   {nullptr, 0, 0},
    {nullptr, 0, 0},    {"Q5_0", 32, 22},   {"Q5_1", 32, 24},   {"Q8_0", 32, 34},   {"Q8_1", 32, 36},
    {"Q2_K", 256, 84},  {"Q3_K", 256, 110}, {"Q4_K", 256, 144}, {"Q5_K", 256, 176}, {"Q6_K", 256, 210},
    {"Q8_K", 256, 292}, {"IQ2_XXS", 0, 0},  {"IQ2_XS", 0, 0},   {"IQ3_XXS", 0, 0},  {"IQ1_S", 0, 0},
    {"IQ4_NL", 0, 0},   {"IQ3_S", 0, 0},    {"IQ2_S", 0, 0},    {"IQ4_XS", 0, 0},   {"I8", 1, 1},
    {"I16", 1, 2},      {"I32", 1, 4},      {"I64", 1, 8},      {"F64", 1, 8},      {"IQ1_M", 0, 0},
    {"BF16", 1, 2},     {nullptr, 0, 0},    {nullptr, 0, 0},    {nullptr, 0, 0},    {"TQ1_0", 0, 0},
    {"TQ2_0", 0, 0},    {nullptr, 0, 0},    {nullptr, 0, 0},    {nullptr, 0, 0},    {"MXFP4", 0, 0},
}};
inline const GgmlTypeTraits* ggml_traits(std::uint32_t id) {
  if (id >= kGgmlTypeIdCount || kGgmlTypeTraits[id].name == nullptr) return nullptr;
  return &kGgmlTypeTraits[id];
}
}  // namespace detail

/// True when `id` is a ggml type id (known to ggml, whether or not inferkit has its layout).
inline bool ggml_type_id_valid(std::uint32_t id) { return detail::ggml_traits(id) != nullptr; }

/// ggml's name of a type ("Q4_K"), or "unknown(<id>)".
inline std::string ggml_type_name(GgmlType t) {
  const auto* tr = detail::ggml_traits(static_cast<std::uint32_t>(t));
  return tr ? std::string(tr->name) : "unknown(" + std::to_string(static_cast<std::uint32_t>(t)) + ")";
}

/// True when inferkit knows the type's block layout (elements and bytes per block).
inline bool ggml_type_known_layout(GgmlType t) {
  const auto* tr = detail::ggml_traits(static_cast<std::uint32_t>(t));
  return tr != nullptr && tr->block_size != 0;
}

/// Elements per block (1 for the plain types). Throws std::invalid_argument for a type whose
/// layout inferkit does not know.
inline std::uint32_t ggml_block_size(GgmlType t) {
  require(ggml_type_known_layout(t), "type", ggml_type_name(t), "has no block layout known to inferkit");
  return detail::ggml_traits(static_cast<std::uint32_t>(t))->block_size;
}

/// Bytes per block. Throws std::invalid_argument for a type whose layout inferkit does not know.
inline std::uint32_t ggml_block_bytes(GgmlType t) {
  require(ggml_type_known_layout(t), "type", ggml_type_name(t), "has no block layout known to inferkit");
  return detail::ggml_traits(static_cast<std::uint32_t>(t))->block_bytes;
}

/// Bytes of a row of `n` elements. Throws std::invalid_argument when `n` is not a multiple of
/// the block size or the layout is unknown.
inline std::uint64_t ggml_row_bytes(GgmlType t, std::uint64_t n) {
  const std::uint32_t bs = ggml_block_size(t);
  require(n % bs == 0, "row length", n,
          "must be a multiple of " + std::to_string(bs) + " (the block size of " + ggml_type_name(t) + ")");
  return n / bs * ggml_block_bytes(t);
}

}  // namespace inferkit
