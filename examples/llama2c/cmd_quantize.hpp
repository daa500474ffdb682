#pragma once
// `inferkit-llama2c quantize`: a GGUF file's matrices rewritten in a ggml block type by
// inferkit's ggml_quantize; the _m mixes pick each tensor's type with ggml_mix_type (more bits
// for attn_v / ffn_down on some layers, Q6_K for output.weight). 1-D tensors (norms, biases,
// RoPE factors) stay F32, and so does a matrix whose rows no block divides (stories260K's
// hidden 172); every metadata key is copied, so the vocabulary travels along.
//
//   inferkit-llama2c quantize --model model-f16.gguf --qtype q4_k_m --out model-q4_k_m.gguf

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <inferkit/quant/ggml_quantize.hpp>

#include "flag_table.hpp"
#include "llama2c.hpp"

namespace llama2c {

/// The type of tensor `name` (dims `dims`, fastest first) under --qtype `q` for a model of `n_layers`.
inline inferkit::GgmlType quantize_type(const std::string& q, const std::string& name,
                                        const std::vector<std::uint64_t>& dims, int n_layers) {
  using inferkit::GgmlType;
  const auto n_dims = static_cast<int>(dims.size());
  if (q == "q3_k_m" || q == "q4_k_m" || q == "q5_k_m") {
    const auto mix = q == "q3_k_m"   ? inferkit::GgmlMix::kQ3_K_M
                     : q == "q4_k_m" ? inferkit::GgmlMix::kQ4_K_M
                                     : inferkit::GgmlMix::kQ5_K_M;
    const GgmlType t = inferkit::ggml_mix_type(mix, name, n_layers, n_dims, static_cast<Index>(dims[0]));
    return dims[0] % 32 == 0 ? t : GgmlType::kF32;
  }
  if (n_dims < 2) return GgmlType::kF32;
  const GgmlType t = q == "q4_0"   ? GgmlType::kQ4_0
                     : q == "q4_1" ? GgmlType::kQ4_1
                     : q == "q5_0" ? GgmlType::kQ5_0
                     : q == "q5_1" ? GgmlType::kQ5_1
                     : q == "q2_k" ? GgmlType::kQ2_K
                     : q == "q3_k" ? GgmlType::kQ3_K
                     : q == "q4_k" ? GgmlType::kQ4_K
                     : q == "q5_k" ? GgmlType::kQ5_K
                     : q == "q6_k" ? GgmlType::kQ6_K
                                   : GgmlType::kQ8_0;
  const GgmlType r = dims[0] % 256 == 0 ? t : inferkit::ggml_fallback_type(t);  // K-quants need rows of 256
  return dims[0] % 32 == 0 ? r : GgmlType::kF32;  // rows no block type divides stay F32 (exact)
}

/// Writes GGUF `in` to `out` with its matrices in --qtype `q` (file comment). Every tensor is
/// read as floats through the runner's loader checks (F32 / F16 / BF16 sources).
inline void quantize_gguf(const std::string& in, const std::string& out, const std::string& q, int threads) {
  const inferkit::GgufFile f = inferkit::GgufFile::open(in);
  const Config c = gguf_config(f);  // refuses an unknown architecture before any work
  inferkit::GgufWriter w;
  for (const auto& kv : f.metadata())
    if (kv.key != "general.alignment") w.set(kv.key, kv.value);
  std::vector<inferkit::GgmlWeights> blocks;  // alive until write()
  std::vector<std::vector<float>> floats;
  blocks.reserve(f.tensors().size());
  floats.reserve(f.tensors().size());
  for (const auto& t : f.tensors()) {
    const std::uint64_t cols = t.dims[0], rows = t.rows();
    std::vector<std::uint64_t> dims(t.dims.begin(), t.dims.begin() + static_cast<std::ptrdiff_t>(t.n_dims));
    auto& v = floats.emplace_back(static_cast<std::size_t>(cols * rows));
    detail::gguf_copy_tensor(f, t.name, cols, rows, v.data());
    const inferkit::GgmlType type = quantize_type(q, t.name, dims, c.n_layers);
    if (type == inferkit::GgmlType::kF32) {
      w.add_tensor<float>(t.name, dims, v);
      continue;
    }
    const auto& b = blocks.emplace_back(inferkit::ggml_quantize(
        type, inferkit::MatrixView<const float>(v.data(), static_cast<Index>(rows), static_cast<Index>(cols)), t.name,
        threads));
    w.add_tensor(t.name, type, dims, b.bytes());
    floats.back() = {};  // the float copy is no longer needed
  }
  w.write(out);
}

/// The quantize subcommand (see flag_table()).
inline int cmd_quantize(const cli::Flags& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string in = a.text("--model"), out = a.text("--out"), q = a.text("--qtype");
  quantize_gguf(in, out, q, 1);
  std::printf("wrote %s: matrices %s (%.3f s)\n", out.c_str(), q.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace llama2c
