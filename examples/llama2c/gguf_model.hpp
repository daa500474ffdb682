#pragma once
// Model::from_gguf: the runner's one model structure (llama2c.hpp) filled from a GGUF file, so
// .gguf and llama2.c .bin files run the same forward pass.
//
//   const auto m = llama2c::Model::from_gguf(inferkit::GgufFile::open("tinyllama-f16.gguf"));
//   // or llama2c::Model::load_any(path), which reads either format by its magic
//
// Architectures (`general.architecture`; any other is refused by name):
//   llama  Llama 2 / 3 / 3.x, Mistral, TinyLlama, llama2.c conversions. RoPE on adjacent pairs
//          (2i, 2i+1): llama.cpp's rope type NORM for this architecture, and its HF converter
//          permutes the rows of Q and K so that adjacent pairs reproduce Hugging Face's
//          half-split rotation. The optional `rope_freqs.weight` [head_size / 2] divides each
//          pair's frequency (Llama 3.1's long-context scaling, precomputed by the converter).
//   qwen2  Q, K and V biases (`attn_{q,k,v}.bias`); RoPE on half-split pairs (i, i + d/2),
//          llama.cpp's rope type NEOX (the converter does not permute Qwen's Q and K).
//   qwen3  no biases; per-head RMSNorm of Q and K (`attn_q_norm`, `attn_k_norm` [head_size])
//          before RoPE; half-split pairs; n_heads * head_size may differ from dim
//          (`<arch>.attention.key_length`).
// The classifier is `output.weight`, or the token embedding when the file has none (tied).
// Shapes in GGUF list the fastest-varying dimension first: a projection W [out x in] of
// y = W x is stored with dims {in, out}, the row-major layout the runner keeps.
//
// Weights: from_gguf(shared_ptr) (what load_any() calls) keeps every matrix in the file's type
// when any matrix is not F32: F16, BF16 and the block types run zero-copy from the mapping as
// GgmlWeights views (ggml_matvec / ggml_matmul widen F16 / BF16 in registers), so the resident
// memory is about the file's size (a 1.03B-parameter F16 file: 2.0 GB mapped, not 5.9 GB of
// widened floats). An all-F32 file, and from_gguf(const GgufFile&), copy into float matrices
// (F16 / BF16 widened exactly: every 16-bit value is a float), which the float-only features
// (--weights int8 / int4, SmoothQuant) need; any other type is refused there naming the tensor
// and its type. Every key's and tensor's shape is checked against the header before anything is
// allocated.
//
// save_gguf() writes a model back (the runner's `convert`, `make-random --out x.gguf`).

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llama2c.hpp"

namespace llama2c {

namespace detail {

/// The architecture `general.architecture` names; throws naming the name for any other.
inline Arch gguf_arch(const inferkit::GgufFile& f) {
  const std::string a = f.get<std::string>("general.architecture");
  if (a == "llama") return Arch::kLlama;
  if (a == "qwen2") return Arch::kQwen2;
  if (a == "qwen3") return Arch::kQwen3;
  throw std::invalid_argument("llama2c: GGUF '" + f.name() + "': general.architecture = '" + a +
                              "' is not supported (llama, qwen2 and qwen3 are)");
}

/// A positive int metadata value `<arch>.<key>` (required unless `fallback` is given).
inline int gguf_dim(const inferkit::GgufFile& f, const std::string& key, std::optional<int> fallback = std::nullopt) {
  const auto v = f.find_integer<std::int64_t>(key);
  if (!v && fallback) return *fallback;
  const std::int64_t x = v ? *v : f.get_integer<std::int64_t>(key);  // throws naming the missing key
  if (x <= 0 || x > (std::int64_t{1} << 30))
    throw std::invalid_argument("llama2c: GGUF '" + f.name() + "': " + key + " = " + std::to_string(x) +
                                " is invalid: must be in [1, 2^30]");
  return static_cast<int>(x);
}

/// Tensor `name`, after checking its dims are {in, out} = {cols, rows}.
inline inferkit::GgufTensor gguf_shaped_tensor(const inferkit::GgufFile& f, const std::string& name, std::uint64_t cols,
                                               std::uint64_t rows) {
  const inferkit::GgufTensor t = f.tensor(name);
  const auto& d = t.info().dims;
  if (d[0] != cols || t.info().rows() != rows || (rows > 1 && d[1] != rows))
    throw std::invalid_argument("llama2c: GGUF '" + f.name() + "': tensor '" + name + "' has dims {" +
                                std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) +
                                ", " + std::to_string(d[3]) + "}, the header's shape needs {" + std::to_string(cols) +
                                ", " + std::to_string(rows) + "}");
  return t;
}

/// Converts tensor `name` (dims {in, out} = {cols, rows}) into `dst` [rows x cols] of floats.
inline void gguf_copy_tensor(const inferkit::GgufFile& f, const std::string& name, std::uint64_t cols,
                             std::uint64_t rows, float* dst) {
  const inferkit::GgufTensor t = gguf_shaped_tensor(f, name, cols, rows);
  const std::size_t n = static_cast<std::size_t>(cols * rows);
  switch (t.type()) {
    case inferkit::GgmlType::kF32: {
      const auto v = t.values<float>();
      std::copy(v.begin(), v.end(), dst);
      return;
    }
    case inferkit::GgmlType::kF16: {
      const auto v = t.values<inferkit::Float16>();
      for (std::size_t i = 0; i < n; ++i) dst[i] = inferkit::to_float(v[i]);
      return;
    }
    case inferkit::GgmlType::kBF16: {
      const auto v = t.values<inferkit::BFloat16>();
      for (std::size_t i = 0; i < n; ++i) dst[i] = inferkit::to_float(v[i]);
      return;
    }
    default:
      throw std::invalid_argument("llama2c: GGUF '" + f.name() + "': tensor '" + name + "' has type " +
                                  inferkit::ggml_type_name(t.type()) +
                                  ", which the float loader does not read (F32, F16 and BF16; Model::load_any "
                                  "and from_gguf(shared_ptr) run quantized files)");
  }
}

}  // namespace detail

/// The Config a GGUF file's metadata and tensor shapes describe (no weight is read).
inline Config gguf_config(const inferkit::GgufFile& f) {
  using detail::gguf_dim;
  Config c;
  c.arch = detail::gguf_arch(f);
  const std::string p = std::string(arch_name(c.arch)) + ".";
  c.dim = gguf_dim(f, p + "embedding_length");
  c.hidden_dim = gguf_dim(f, p + "feed_forward_length");
  c.n_layers = gguf_dim(f, p + "block_count");
  c.n_heads = gguf_dim(f, p + "attention.head_count");
  c.n_kv_heads = gguf_dim(f, p + "attention.head_count_kv", c.n_heads);
  c.seq_len = gguf_dim(f, p + "context_length", 2048);
  const int default_head = c.dim % c.n_heads == 0 ? c.dim / c.n_heads : 0;
  const int key_length = gguf_dim(f, p + "attention.key_length", default_head);
  if (key_length == 0)
    throw std::invalid_argument("llama2c: GGUF '" + f.name() + "': " + p + "attention.key_length is missing and " + p +
                                "attention.head_count = " + std::to_string(c.n_heads) + " does not divide " + p +
                                "embedding_length = " + std::to_string(c.dim));
  const int value_length = gguf_dim(f, p + "attention.value_length", key_length);
  if (value_length != key_length)
    throw std::invalid_argument("llama2c: GGUF '" + f.name() + "': " + p +
                                "attention.value_length = " + std::to_string(value_length) +
                                " is not supported: must equal attention.key_length = " + std::to_string(key_length));
  if (key_length != default_head) c.head_dim = key_length;
  const int rotary = gguf_dim(f, p + "rope.dimension_count", c.head_size());
  if (rotary != c.head_size())
    throw std::invalid_argument(
        "llama2c: GGUF '" + f.name() + "': " + p + "rope.dimension_count = " + std::to_string(rotary) +
        " is not supported: the runner rotates whole heads (head size " + std::to_string(c.head_size()) + ")");
  if (const auto scaling = f.find<std::string>(p + "rope.scaling.type"); scaling && *scaling != "none")
    throw std::invalid_argument("llama2c: GGUF '" + f.name() + "': " + p + "rope.scaling.type = '" + *scaling +
                                "' is not supported (only the rope_freqs tensor's scaling is)");
  if (const auto base = f.find<float>(p + "rope.freq_base")) c.rope_base = *base;
  if (const auto eps = f.find<float>(p + "attention.layer_norm_rms_epsilon")) c.rms_eps = *eps;
  c.rope_style = c.arch == Arch::kLlama ? inferkit::RopeStyle::kAdjacentPairs : inferkit::RopeStyle::kHalfSplit;
  const inferkit::GgufTensor embd = f.tensor("token_embd.weight");
  const std::uint64_t vocab = embd.info().rows();
  if (vocab == 0 || vocab > (std::uint64_t{1} << 30))
    throw std::invalid_argument("llama2c: GGUF '" + f.name() + "': tensor 'token_embd.weight' has " +
                                std::to_string(vocab) + " rows (the vocabulary): must be in [1, 2^30]");
  c.vocab_size = static_cast<int>(vocab);
  c.shared_classifier = !f.find_tensor("output.weight").has_value();
  if (const auto rf = f.find_tensor("rope_freqs.weight")) {
    detail::gguf_shaped_tensor(f, "rope_freqs.weight", static_cast<std::uint64_t>(c.head_size() / 2),
                               1);  // then allocate
    c.rope_freq_factors.resize(static_cast<std::size_t>(c.head_size() / 2));
    detail::gguf_copy_tensor(f, "rope_freqs.weight", c.rope_freq_factors.size(), 1, c.rope_freq_factors.data());
  }
  if (f.contains("tokenizer.ggml.tokens")) {  // BOS as the vocabulary's tokenizer adds it (none: -1)
    const inferkit::Vocabulary v = inferkit::vocabulary_from_gguf(f);
    c.bos = v.add_bos() ? v.bos() : -1;
    if (c.bos >= c.vocab_size)
      throw std::invalid_argument("llama2c: GGUF '" + f.name() +
                                  "': tokenizer.ggml.bos_token_id = " + std::to_string(c.bos) +
                                  " is outside the model's vocabulary of " + std::to_string(c.vocab_size));
  }
  return c;
}

namespace detail {

/// Checks that `f` holds every tensor `c` needs, with the shape it needs, before anything is
/// allocated: the model's buffers are then bounded by the file's size, whatever its header says.
/// Throws std::invalid_argument naming block_count, or the first missing or misshapen tensor.
inline void gguf_check_tensors(const inferkit::GgufFile& f, const Config& c) {
  const std::uint64_t d = c.dim, h = c.hidden_dim, qd = c.q_dim(), kv = c.kv_dim(), hs = c.head_size();
  const std::uint64_t per_layer = 9 + (c.qkv_bias() ? 3 : 0) + (c.qk_norm() ? 2 : 0);
  if (per_layer * static_cast<std::uint64_t>(c.n_layers) > f.tensors().size())
    throw std::invalid_argument("llama2c: GGUF '" + f.name() + "': " + arch_name(c.arch) +
                                ".block_count = " + std::to_string(c.n_layers) + " needs " + std::to_string(per_layer) +
                                " tensors a layer, but the file has " + std::to_string(f.tensors().size()) +
                                " tensors");
  const auto need = [&](const std::string& name, std::uint64_t cols, std::uint64_t rows) {
    gguf_shaped_tensor(f, name, cols, rows);
  };
  need("token_embd.weight", d, static_cast<std::uint64_t>(c.vocab_size));
  need("output_norm.weight", d, 1);
  if (!c.shared_classifier) need("output.weight", d, static_cast<std::uint64_t>(c.vocab_size));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    need(b + "attn_norm.weight", d, 1);
    need(b + "ffn_norm.weight", d, 1);
    need(b + "attn_q.weight", d, qd);
    need(b + "attn_k.weight", d, kv);
    need(b + "attn_v.weight", d, kv);
    need(b + "attn_output.weight", qd, d);
    need(b + "ffn_gate.weight", d, h);
    need(b + "ffn_down.weight", h, d);
    need(b + "ffn_up.weight", d, h);
    if (c.qkv_bias()) {
      need(b + "attn_q.bias", qd, 1);
      need(b + "attn_k.bias", kv, 1);
      need(b + "attn_v.bias", kv, 1);
    }
    if (c.qk_norm()) {
      need(b + "attn_q_norm.weight", hs, 1);
      need(b + "attn_k_norm.weight", hs, 1);
    }
  }
}

}  // namespace detail

inline Model Model::from_gguf(const inferkit::GgufFile& f) {
  Config c = gguf_config(f);
  validate(c, "GGUF '" + f.name() + "'");
  detail::gguf_check_tensors(f, c);
  // The float copy: at most twice the file (F16 / BF16 widened) plus llama2.c's RoPE tables
  // (context_length x head size floats), which only a corrupt context_length makes large.
  const double need = weight_floats_approx(c) * sizeof(float), file = double(f.file().size());
  if (need > 2.0 * file + double(64 << 20))
    throw std::invalid_argument("llama2c: GGUF '" + f.name() + "': " + arch_name(c.arch) +
                                ".context_length = " + std::to_string(c.seq_len) +
                                " is invalid for a float model: its weights and RoPE "
                                "tables need " +
                                bytes_text(need) + ", more than twice the file's " + bytes_text(file) + " + 64 MiB");
  Model m = Model::zeros(c);  // validates the shape and bounds its size by the machine's memory
  const std::uint64_t d = c.dim, h = c.hidden_dim, qd = c.q_dim(), kv = c.kv_dim(), hs = c.head_size();
  const auto copy = [&](const std::string& name, std::uint64_t cols, std::uint64_t rows, float* dst) {
    detail::gguf_copy_tensor(f, name, cols, rows, dst);
  };
  copy("token_embd.weight", d, static_cast<std::uint64_t>(c.vocab_size), m.mutable_embedding());
  copy("output_norm.weight", d, 1, m.mutable_rms_final());
  if (!c.shared_classifier)
    copy("output.weight", d, static_cast<std::uint64_t>(c.vocab_size), m.mutable_matrix(Proj::kClassifier, 0).data());
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    copy(b + "attn_norm.weight", d, 1, m.mutable_rms_att(l));
    copy(b + "ffn_norm.weight", d, 1, m.mutable_rms_ffn(l));
    copy(b + "attn_q.weight", d, qd, m.mutable_matrix(Proj::kQ, l).data());
    copy(b + "attn_k.weight", d, kv, m.mutable_matrix(Proj::kK, l).data());
    copy(b + "attn_v.weight", d, kv, m.mutable_matrix(Proj::kV, l).data());
    copy(b + "attn_output.weight", qd, d, m.mutable_matrix(Proj::kO, l).data());
    copy(b + "ffn_gate.weight", d, h, m.mutable_matrix(Proj::kW1, l).data());
    copy(b + "ffn_down.weight", h, d, m.mutable_matrix(Proj::kW2, l).data());
    copy(b + "ffn_up.weight", d, h, m.mutable_matrix(Proj::kW3, l).data());
    if (c.qkv_bias()) {
      copy(b + "attn_q.bias", qd, 1, m.mutable_bias(Proj::kQ, l));
      copy(b + "attn_k.bias", kv, 1, m.mutable_bias(Proj::kK, l));
      copy(b + "attn_v.bias", kv, 1, m.mutable_bias(Proj::kV, l));
    }
    if (c.qk_norm()) {
      copy(b + "attn_q_norm.weight", hs, 1, m.mutable_q_norm(l));
      copy(b + "attn_k_norm.weight", hs, 1, m.mutable_k_norm(l));
    }
  }
  return m;
}

namespace detail {

/// The tensor names of layer l's projections in Proj order (kQ .. kW3).
inline std::array<std::string, 7> gguf_projection_names(int l) {
  const std::string b = "blk." + std::to_string(l) + ".";
  return {b + "attn_q.weight",   b + "attn_k.weight",   b + "attn_v.weight", b + "attn_output.weight",
          b + "ffn_gate.weight", b + "ffn_down.weight", b + "ffn_up.weight"};
}

}  // namespace detail

inline Model Model::from_gguf(std::shared_ptr<const inferkit::GgufFile> file) {
  const inferkit::GgufFile& f = *file;
  bool file_typed = false;  // a matrix that is not F32: every matrix stays in the file's type
  for (const auto& t : f.tensors())
    if (t.dims[1] > 1 && t.type != inferkit::GgmlType::kF32) file_typed = true;
  if (!file_typed) return from_gguf(f);
  Config c = gguf_config(f);
  validate(c, "GGUF '" + f.name() + "'");
  detail::gguf_check_tensors(f, c);  // before the norms are allocated
  Model m(c, false);                 // norms only: the matrices stay in the mapped file
  m.map();
  const std::uint64_t d = c.dim, h = c.hidden_dim, qd = c.q_dim(), kv = c.kv_dim(), hs = c.head_size();
  const auto V = static_cast<std::uint64_t>(c.vocab_size);
  const auto view = [&](const std::string& name, std::uint64_t cols, std::uint64_t rows) {
    const inferkit::GgufTensor t = detail::gguf_shaped_tensor(f, name, cols, rows);
    return inferkit::GgmlWeights::view(t.type(), static_cast<Index>(rows), static_cast<Index>(cols), t.bytes(), name);
  };
  const auto copy = [&](const std::string& name, std::uint64_t cols, float* dst) {
    detail::gguf_copy_tensor(f, name, cols, 1, dst);
  };
  const std::uint64_t in[7] = {d, d, d, qd, d, h, d}, out[7] = {qd, kv, kv, d, h, d, h};
  m.ggml_.reserve(7 * static_cast<std::size_t>(c.n_layers) + 2);
  copy("output_norm.weight", d, m.mutable_rms_final());
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    copy(b + "attn_norm.weight", d, m.mutable_rms_att(l));
    copy(b + "ffn_norm.weight", d, m.mutable_rms_ffn(l));
    const auto names = detail::gguf_projection_names(l);
    for (std::size_t p = 0; p < 7; ++p) m.ggml_.push_back(view(names[p], in[p], out[p]));
    if (c.qkv_bias()) {
      copy(b + "attn_q.bias", qd, m.mutable_bias(Proj::kQ, l));
      copy(b + "attn_k.bias", kv, m.mutable_bias(Proj::kK, l));
      copy(b + "attn_v.bias", kv, m.mutable_bias(Proj::kV, l));
    }
    if (c.qk_norm()) {
      copy(b + "attn_q_norm.weight", hs, m.mutable_q_norm(l));
      copy(b + "attn_k_norm.weight", hs, m.mutable_k_norm(l));
    }
  }
  inferkit::GgmlWeights embd = view("token_embd.weight", d, V);
  m.ggml_.push_back(c.shared_classifier ? embd : view("output.weight", d, V));
  m.ggml_.push_back(std::move(embd));
  m.gguf_ = std::move(file);
  return m;
}

/// What save_gguf() writes besides the weights.
struct GgufSaveOptions {
  /// The element type of the matrices (F32, F16 or BF16); norms, biases and RoPE factors stay F32,
  /// as llama.cpp's converters keep them.
  inferkit::GgmlType type = inferkit::GgmlType::kF32;
  /// If set, every `tokenizer.*` key of this file is copied (a vocabulary, so text works and
  /// llama.cpp loads the file).
  const inferkit::GgufFile* vocabulary = nullptr;
  std::string name = "inferkit";  ///< general.name
};

/// Writes `m` as a GGUF file of its architecture (the layout from_gguf() reads, with the names
/// and keys llama.cpp uses). Throws std::invalid_argument for an MoE model, a type other than
/// F32 / F16 / BF16, or a vocabulary smaller than the model's.
inline void save_gguf(const Model& m, const std::string& path, const GgufSaveOptions& o = {}) {
  using inferkit::GgmlType;
  const Config& c = m.config();
  if (c.moe()) throw std::invalid_argument("llama2c: save_gguf: mixture-of-experts models have no GGUF form here");
  if (o.type != GgmlType::kF32 && o.type != GgmlType::kF16 && o.type != GgmlType::kBF16)
    throw std::invalid_argument("llama2c: save_gguf: type " + inferkit::ggml_type_name(o.type) +
                                " is not written here (F32, F16 and BF16 are)");
  inferkit::GgufWriter w;
  const std::string p = std::string(arch_name(c.arch)) + ".";
  w.set("general.architecture", std::string(arch_name(c.arch)));
  w.set("general.name", o.name);
  // llama.cpp's llama_ftype: 0 all F32, 1 mostly F16, 32 mostly BF16
  w.set<std::uint32_t>("general.file_type", o.type == GgmlType::kF32 ? 0 : o.type == GgmlType::kF16 ? 1 : 32);
  w.set<std::uint32_t>(p + "context_length", static_cast<std::uint32_t>(c.seq_len));
  w.set<std::uint32_t>(p + "embedding_length", static_cast<std::uint32_t>(c.dim));
  w.set<std::uint32_t>(p + "feed_forward_length", static_cast<std::uint32_t>(c.hidden_dim));
  w.set<std::uint32_t>(p + "block_count", static_cast<std::uint32_t>(c.n_layers));
  w.set<std::uint32_t>(p + "attention.head_count", static_cast<std::uint32_t>(c.n_heads));
  w.set<std::uint32_t>(p + "attention.head_count_kv", static_cast<std::uint32_t>(c.n_kv_heads));
  if (c.head_dim > 0) {
    w.set<std::uint32_t>(p + "attention.key_length", static_cast<std::uint32_t>(c.head_dim));
    w.set<std::uint32_t>(p + "attention.value_length", static_cast<std::uint32_t>(c.head_dim));
  }
  w.set<std::uint32_t>(p + "rope.dimension_count", static_cast<std::uint32_t>(c.head_size()));
  w.set<float>(p + "rope.freq_base", static_cast<float>(c.rope_base));
  w.set<float>(p + "attention.layer_norm_rms_epsilon", c.rms_eps);
  if (o.vocabulary) {
    const auto tokens = o.vocabulary->find_value("tokenizer.ggml.tokens");
    if (tokens && tokens->type() == inferkit::GgufValueType::kArray &&
        tokens->as<inferkit::GgufArray>("tokenizer.ggml.tokens").size() < static_cast<std::size_t>(c.vocab_size))
      throw std::invalid_argument("llama2c: save_gguf: the vocabulary of '" + o.vocabulary->name() + "' has " +
                                  std::to_string(tokens->as<inferkit::GgufArray>("tokenizer.ggml.tokens").size()) +
                                  " tokens, fewer than the model's " + std::to_string(c.vocab_size));
    for (const auto& kv : o.vocabulary->metadata())
      if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
  }
  std::vector<std::vector<std::uint16_t>> narrow;  // the 16-bit copies, alive until write()
  narrow.reserve(static_cast<std::size_t>(9 * c.n_layers + 3));
  const auto add = [&](const std::string& name, const float* v, std::uint64_t cols, std::uint64_t rows) {
    const std::vector<std::uint64_t> dims = rows > 1 ? std::vector<std::uint64_t>{cols, rows} : std::vector{cols};
    const std::size_t n = static_cast<std::size_t>(cols * rows);
    if (rows == 1 || o.type == GgmlType::kF32) {
      w.add_tensor<float>(name, dims, std::span<const float>(v, n));
      return;
    }
    auto& h = narrow.emplace_back(n);
    for (std::size_t i = 0; i < n; ++i)
      h[i] = o.type == GgmlType::kF16 ? inferkit::to_float16(v[i]).bits : inferkit::to_bfloat16(v[i]).bits;
    w.add_tensor(name, o.type, dims, std::as_bytes(std::span<const std::uint16_t>(h)));
  };
  const std::uint64_t d = c.dim, h = c.hidden_dim, qd = c.q_dim(), kv = c.kv_dim(), hs = c.head_size();
  const auto V = static_cast<std::uint64_t>(c.vocab_size);
  add("token_embd.weight", m.embedding(0), d, V);
  add("output_norm.weight", m.rms_final().data(), d, 1);
  if (!c.shared_classifier) add("output.weight", m.wcls().data(), d, V);
  if (!c.rope_freq_factors.empty()) add("rope_freqs.weight", c.rope_freq_factors.data(), c.rope_freq_factors.size(), 1);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", m.rms_att(l).data(), d, 1);
    add(b + "attn_q.weight", m.wq(l).data(), d, qd);
    add(b + "attn_k.weight", m.wk(l).data(), d, kv);
    add(b + "attn_v.weight", m.wv(l).data(), d, kv);
    add(b + "attn_output.weight", m.wo(l).data(), qd, d);
    if (c.qkv_bias()) {
      add(b + "attn_q.bias", m.bias(Proj::kQ, l), qd, 1);
      add(b + "attn_k.bias", m.bias(Proj::kK, l), kv, 1);
      add(b + "attn_v.bias", m.bias(Proj::kV, l), kv, 1);
    }
    if (c.qk_norm()) {
      add(b + "attn_q_norm.weight", m.q_norm(l), hs, 1);
      add(b + "attn_k_norm.weight", m.k_norm(l), hs, 1);
    }
    add(b + "ffn_norm.weight", m.rms_ffn(l).data(), d, 1);
    add(b + "ffn_gate.weight", m.w1(l).data(), d, h);
    add(b + "ffn_up.weight", m.w3(l).data(), d, h);
    add(b + "ffn_down.weight", m.w2(l).data(), h, d);
  }
  w.write(path);
}

}  // namespace llama2c
