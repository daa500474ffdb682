#pragma once
// A llama2.c-format model runner built from inferkit. The model itself (weights, RMSNorm,
// matmuls with Eigen, SwiGLU, the layer loop) lives here, as it would in your own code; every
// attention, KV cache and decoding step is an inferkit call.
//
// Checkpoint format (llama2.c legacy, version 0, float32): 7 int32 (dim, hidden_dim, n_layers,
// n_heads, n_kv_heads, vocab_size -- negative means an unshared classifier --, seq_len), then
// token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, two unused RoPE
// tables (seq_len * head_size / 2 floats each), and the classifier if unshared. Matrices are
// row-major (out x in). RoPE: adjacent pairs, base 10000, computed from the position.
// Mixture-of-experts checkpoints extend this header (moe_model.hpp); Model::load refuses them
// with an error saying so, Model::load_any reads both.

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <istream>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <inferkit/attention/reference.hpp>
#include <inferkit/inferkit.hpp>
#include <inferkit/quant/ggml_matvec.hpp>
#include <inferkit/quant/ggml_weights.hpp>

#include "bounds.hpp"
#include "moe_model.hpp"
#include "threads.hpp"

namespace llama2c {

using inferkit::Index;
using inferkit::TokenId;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<const RowMatrix>;
using VectorMap = Eigen::Map<const Eigen::VectorXf>;

/// The architectures the model runs: llama2.c checkpoints and GGUF `llama` are kLlama; GGUF
/// `qwen2` adds Q/K/V biases, `qwen3` a per-head RMSNorm of Q and K before RoPE.
enum class Arch { kLlama, kQwen2, kQwen3 };

/// The GGUF `general.architecture` name of an architecture.
inline const char* arch_name(Arch a) { return a == Arch::kLlama ? "llama" : a == Arch::kQwen2 ? "qwen2" : "qwen3"; }

struct Config {
  int dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;
  int n_experts = 0, experts_per_token = 0;  // MoE checkpoints (moe_model.hpp); 0 = dense FFN
  inferkit::RouterScoring router = inferkit::RouterScoring::topk_softmax;  // MoE: default router mode
  // What GGUF models set (llama2.c checkpoints keep the defaults, the format's fixed choices).
  Arch arch = Arch::kLlama;
  int head_dim = 0;  // 0 = dim / n_heads (Qwen3 has n_heads * head_dim != dim)
  inferkit::RopeStyle rope_style = inferkit::RopeStyle::kAdjacentPairs;
  double rope_base = 10000.0;
  float rms_eps = 1e-5f;
  std::vector<float> rope_freq_factors;  // Llama 3.x `rope_freqs`: head_size / 2 divisors, or empty
  TokenId bos = 1;  // every sequence starts with it (llama2.c's "<s>"); -1: none (a vocabulary that adds no BOS)
  bool moe() const { return n_experts > 0; }
  int head_size() const { return head_dim > 0 ? head_dim : dim / n_heads; }
  int q_dim() const { return head_size() * n_heads; }
  int kv_dim() const { return head_size() * n_kv_heads; }
  bool qkv_bias() const { return arch == Arch::kQwen2; }
  bool qk_norm() const { return arch == Arch::kQwen3; }
  /// The model's RoPE (the factors are a view into this Config: keep it alive while rotating).
  inferkit::RopeOptions rope() const { return {rope_style, rope_base, 0, rope_freq_factors}; }
};

/// The shape of llama2.c's stories15M (dim 288, hidden 768, 6 layers, 6 heads, vocab 32000), the
/// benchmarks' random model.
inline Config stories15M_shape(int seq_len = 256) {
  Config c;
  c.dim = 288;
  c.hidden_dim = 768;
  c.n_layers = 6;
  c.n_heads = 6;
  c.n_kv_heads = 6;
  c.vocab_size = 32000;
  c.seq_len = seq_len;
  return c;
}

/// The model's linear maps: the per-layer projections and the classifier.
enum class Proj { kQ, kK, kV, kO, kW1, kW2, kW3, kClassifier };

/// Runs a model's projections in place of its float matrices (quant_weights.hpp: quantized
/// weights through inferkit's quant/ primitives). project() writes y = W x for projection `p`
/// of layer `layer` (the classifier ignores `layer`).
class ProjectionHook {
 public:
  virtual ~ProjectionHook() = default;
  virtual void project(Proj p, int layer, const float* x, float* y) const = 0;
};

/// The weights, owned in one float buffer; matrices are Eigen maps into it. A GGUF model whose
/// matrices are not all F32 (F16, BF16, Q8_0, Q4_K, ...) is ggml-backed instead: every projection, the
/// classifier and the token embedding are GgmlWeights views into the mapped file (kept alive by
/// the model), run by ggml_matvec / ggml_matmul; the float buffer then holds the norms only.
class Model {
 public:
  /// Reads a dense legacy checkpoint; an MoE checkpoint is refused (use load_any).
  static Model load(const std::string& path) { return load_file(path, false); }
  /// Reads a dense or an MoE checkpoint (moe_model.hpp's header extension).
  static Model load_any(const std::string& path) { return load_file(path, true); }

  /// load() / load_any() of a file: allow_moe selects which.
  /// A GGUF file (its first four bytes "GGUF") goes to from_gguf() (gguf_model.hpp).
  static Model load_file(const std::string& path, bool allow_moe) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::invalid_argument("llama2c: cannot open model file '" + path + "'");
    char magic[4] = {};
    if (f.read(magic, 4) && std::string_view(magic, 4) == "GGUF")
      return from_gguf(std::make_shared<const inferkit::GgufFile>(inferkit::GgufFile::open(path)));
    f.clear();
    return load(f, path, allow_moe);
  }

  /// The model a GGUF file describes (architectures llama, qwen2, qwen3; gguf_model.hpp), with
  /// float weights (F32 / F16 / BF16 tensors; quantized ones are refused by name).
  static Model from_gguf(const inferkit::GgufFile& file);
  /// The same, but a file with a matrix that is not F32 (F16, BF16 or a block type) gives a
  /// ggml-backed model (zero-copy views into `file`, which the model keeps alive).
  static Model from_gguf(std::shared_ptr<const inferkit::GgufFile> file);

  /// A model of shape `c` whose weights are all zero, to be filled through the mutable views
  /// (the GGUF reader, tests). Throws std::invalid_argument for an invalid shape.
  static Model zeros(Config c) {
    validate(c, "model");
    if (weight_floats_approx(c) * sizeof(float) > physical_memory_bytes())
      throw std::invalid_argument(
          "llama2c: a model of dim " + std::to_string(c.dim) + ", " + std::to_string(c.n_layers) + " layers needs " +
          bytes_text(weight_floats_approx(c) * sizeof(float)) + ", more than this machine's memory");
    Model m(std::move(c));
    m.map();
    return m;
  }

  /// Reads a checkpoint from a seekable binary stream (a file, or memory); `name` names it in
  /// errors; MoE checkpoints only with allow_moe. Throws std::invalid_argument for a bad header
  /// or a size that does not match it.
  static Model load(std::istream& f, const std::string& name, bool allow_moe = false) {
    const std::string path = name;
    f.seekg(0, std::ios::end);
    const auto bytes = static_cast<std::size_t>(f.tellg());
    f.seekg(0);
    if (bytes < 7 * sizeof(std::int32_t))
      throw std::invalid_argument("llama2c: model file '" + path + "' is truncated: " + std::to_string(bytes) +
                                  " bytes, no header");
    std::int32_t h[7];
    f.read(reinterpret_cast<char*>(h), sizeof(h));
    if (h[5] == std::numeric_limits<std::int32_t>::min())  // a negative vocab_size flags an unshared classifier
      throw std::invalid_argument("llama2c: " + path + ": vocab_size = " + std::to_string(h[5]) +
                                  " is invalid: |vocab_size| must be < 2^31");
    Config c;
    c.dim = h[0], c.hidden_dim = h[1], c.n_layers = h[2], c.n_heads = h[3], c.n_kv_heads = h[4];
    c.vocab_size = std::abs(h[5]), c.seq_len = h[6], c.shared_classifier = h[5] > 0;
    std::size_t header = sizeof(h);
    if (h[1] == kMoeMarker) {
      if (!allow_moe)
        throw std::invalid_argument(
            "llama2c: model file '" + path +
            "' is a mixture-of-experts checkpoint (the MoE header "
            "extension of moe_model.hpp), not a dense llama2.c checkpoint: read it with Model::load_any");
      std::int32_t x[5] = {};
      if (bytes < sizeof(h) + sizeof(x))
        throw std::invalid_argument("llama2c: MoE model file '" + path + "' is truncated: " + std::to_string(bytes) +
                                    " bytes, no room for the MoE header extension");
      f.read(reinterpret_cast<char*>(x), sizeof(x));
      if (x[0] != kMoeVersion)
        throw std::invalid_argument("llama2c: MoE model file '" + path +
                                    "': header extension version = " + std::to_string(x[0]) +
                                    " is invalid: this reader knows version " + std::to_string(kMoeVersion));
      if (x[4] < 0 || x[4] > 2)
        throw std::invalid_argument("llama2c: MoE model file '" + path + "': router mode = " + std::to_string(x[4]) +
                                    " is invalid: must be 0, 1 or 2");
      c.hidden_dim = x[1];
      c.n_experts = x[2];
      c.experts_per_token = x[3];
      c.router = static_cast<inferkit::RouterScoring>(x[4]);
      header += sizeof(x);
    }
    validate(c, path);
    // Compare the header's size with the file's before allocating: a corrupt header may ask for
    // more memory than exists (or than size_t counts), and the file cannot hold it anyway.
    const double approx = weight_floats_approx(c) * sizeof(float) + double(header);
    if (approx > static_cast<double>(bytes) * (1.0 + 1e-9) + 64.0) {
      char need[32];
      std::snprintf(need, sizeof(need), "%.6g", approx);
      throw std::invalid_argument("llama2c: model file '" + path + "' is truncated: " + std::to_string(bytes) +
                                  " bytes, the header's shape needs " + need);
    }
    if (approx > physical_memory_bytes())
      throw std::invalid_argument("llama2c: model file '" + path + "': its weights need " + bytes_text(approx) +
                                  ", more than this machine's memory (" + bytes_text(physical_memory_bytes()) + ")");
    Model m(c);
    const std::size_t need = m.data_.size() * sizeof(float) + header;
    if (bytes < need)
      throw std::invalid_argument("llama2c: model file '" + path + "' is truncated: " + std::to_string(bytes) +
                                  " bytes, the header's shape needs " + std::to_string(need));
    if (bytes > need)
      throw std::invalid_argument(
          "llama2c: model file '" + path + "' has " + std::to_string(bytes - need) +
          " unexpected trailing bytes for its header's shape (not a version-0 float32 checkpoint?)");
    f.read(reinterpret_cast<char*>(m.data_.data()), static_cast<std::streamsize>(m.data_.size() * sizeof(float)));
    m.map();
    return m;
  }

  /// A model of any shape with random weights (normal, scaled by 1/sqrt(fan-in)).
  static Model random(Config c, std::uint64_t seed) {
    validate(c, "random model");
    const double bytes = weight_floats_approx(c) * sizeof(float), memory = physical_memory_bytes();
    if (bytes > memory)  // checked in double before weight_floats() could overflow size_t
      throw std::invalid_argument(
          "llama2c: random model: dim = " + std::to_string(c.dim) + ", hidden_dim = " + std::to_string(c.hidden_dim) +
          ", n_layers = " + std::to_string(c.n_layers) + ", vocab_size = " + std::to_string(c.vocab_size) +
          ", seq_len = " + std::to_string(c.seq_len) + ", n_experts = " + std::to_string(c.n_experts) +
          " is invalid: its weights need " + bytes_text(bytes) + ", more than this machine's memory (" +
          bytes_text(memory) + ")");
    Model m(c);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& x : m.data_) x = nd(rng) * 0.25f;
    m.map();
    for (int l = 0; l < c.n_layers; ++l) {  // norms near 1 keep activations tame
      for (int i = 0; i < c.dim; ++i) {
        m.rms_att_[static_cast<std::size_t>(l * c.dim + i)] = 1.0f;
        m.rms_ffn_[static_cast<std::size_t>(l * c.dim + i)] = 1.0f;
      }
    }
    for (int i = 0; i < c.dim; ++i) m.rms_final_[static_cast<std::size_t>(i)] = 1.0f;
    return m;
  }

  void save(const std::string& path) const {
    std::ofstream f(path, std::ios::binary);
    if (!f) throw std::invalid_argument("llama2c: cannot write '" + path + "'");
    save(f);
  }

  /// Writes the checkpoint (the format load_any() reads) to a binary stream.
  void save(std::ostream& f) const {
    if (c_.arch != Arch::kLlama || c_.head_dim != 0 || c_.rope_style != inferkit::RopeStyle::kAdjacentPairs ||
        c_.rope_base != 10000.0 || c_.rms_eps != 1e-5f || !c_.rope_freq_factors.empty())
      throw std::invalid_argument(std::string("llama2c: a ") + arch_name(c_.arch) +
                                  " model with its own head size, RoPE or epsilon has no llama2.c checkpoint form");
    const std::int32_t h[7] = {c_.dim,        c_.moe() ? kMoeMarker : c_.hidden_dim,
                               c_.n_layers,   c_.n_heads,
                               c_.n_kv_heads, c_.shared_classifier ? c_.vocab_size : -c_.vocab_size,
                               c_.seq_len};
    f.write(reinterpret_cast<const char*>(h), sizeof(h));
    if (c_.moe()) {
      const std::int32_t x[5] = {kMoeVersion, c_.hidden_dim, c_.n_experts, c_.experts_per_token,
                                 static_cast<std::int32_t>(c_.router)};
      f.write(reinterpret_cast<const char*>(x), sizeof(x));
    }
    f.write(reinterpret_cast<const char*>(data_.data()), static_cast<std::streamsize>(data_.size() * sizeof(float)));
  }

  const Config& config() const { return c_; }

  // Weight views.
  /// Token t's embedding row (float models; a ggml-backed model throws: use embed()).
  const float* embedding(TokenId t) const {
    require_float("token_embd.weight");
    return data_.data() + static_cast<std::size_t>(t) * c_.dim;
  }
  /// Writes token t's embedding [dim] to `out` (dequantized when the table is quantized).
  void embed(TokenId t, float* out) const {
    if (!ggml_backed()) {
      std::copy_n(embedding(t), c_.dim, out);
      return;
    }
    inferkit::ggml_dequantize_row(ggml_.back(), t, std::span<float>(out, static_cast<std::size_t>(c_.dim)));
  }
  /// Whether the projections are GgmlWeights views into a mapped GGUF file (class comment).
  bool ggml_backed() const { return !ggml_.empty(); }
  /// Projection p of layer l of a ggml-backed model (the classifier ignores l).
  const inferkit::GgmlWeights& ggml_weights(Proj p, int l) const {
    const std::size_t L = static_cast<std::size_t>(c_.n_layers);
    return p == Proj::kClassifier ? ggml_[7 * L] : ggml_[static_cast<std::size_t>(l) * 7 + static_cast<std::size_t>(p)];
  }
  VectorMap rms_att(int l) const { return VectorMap(rms_att_ + l * c_.dim, c_.dim); }
  VectorMap rms_ffn(int l) const { return VectorMap(rms_ffn_ + l * c_.dim, c_.dim); }
  VectorMap rms_final() const { return VectorMap(rms_final_, c_.dim); }
  MatrixMap wq(int l) const {
    require_float("wq");
    return MatrixMap(wq_ + static_cast<std::size_t>(l) * c_.q_dim() * c_.dim, c_.q_dim(), c_.dim);
  }
  MatrixMap wk(int l) const {
    require_float("wk");
    return MatrixMap(wk_ + static_cast<std::size_t>(l) * c_.kv_dim() * c_.dim, c_.kv_dim(), c_.dim);
  }
  MatrixMap wv(int l) const {
    require_float("wv");
    return MatrixMap(wv_ + static_cast<std::size_t>(l) * c_.kv_dim() * c_.dim, c_.kv_dim(), c_.dim);
  }
  MatrixMap wo(int l) const {
    require_float("wo");
    return MatrixMap(wo_ + static_cast<std::size_t>(l) * c_.dim * c_.q_dim(), c_.dim, c_.q_dim());
  }
  /// Layer l's bias of Q, K or V (qwen2), or nullptr when the architecture has none.
  const float* bias(Proj p, int l) const {
    if (!c_.qkv_bias()) return nullptr;
    const std::size_t L = static_cast<std::size_t>(l);
    if (p == Proj::kQ) return bq_ + L * c_.q_dim();
    if (p == Proj::kK) return bk_ + L * c_.kv_dim();
    if (p == Proj::kV) return bv_ + L * c_.kv_dim();
    return nullptr;
  }
  /// Layer l's per-head RMSNorm weights [head_size] of Q / K (qwen3), or nullptr.
  const float* q_norm(int l) const {
    return q_norm_ ? q_norm_ + static_cast<std::size_t>(l) * c_.head_size() : nullptr;
  }
  const float* k_norm(int l) const {
    return k_norm_ ? k_norm_ + static_cast<std::size_t>(l) * c_.head_size() : nullptr;
  }
  MatrixMap w1(int l) const {
    require_float("w1");
    return MatrixMap(w1_ + static_cast<std::size_t>(l) * c_.hidden_dim * c_.dim, c_.hidden_dim, c_.dim);
  }
  MatrixMap w2(int l) const {
    require_float("w2");
    return MatrixMap(w2_ + static_cast<std::size_t>(l) * c_.dim * c_.hidden_dim, c_.dim, c_.hidden_dim);
  }
  MatrixMap w3(int l) const {
    require_float("w3");
    return MatrixMap(w3_ + static_cast<std::size_t>(l) * c_.hidden_dim * c_.dim, c_.hidden_dim, c_.dim);
  }
  MatrixMap wcls() const {
    require_float("output.weight");
    return MatrixMap(wcls_, c_.vocab_size, c_.dim);
  }
  /// Layer l's router and experts (MoE checkpoints only).
  MoeLayerView moe_layer(int l) const {
    const std::size_t E = c_.n_experts, h = c_.hidden_dim, d = c_.dim;
    return {router_ + l * E * d,
            w1_ + l * E * h * d,
            w2_ + l * E * d * h,
            w3_ + l * E * h * d,
            c_.n_experts,
            c_.hidden_dim,
            c_.dim};
  }
  /// The MoE FFN's options, statistics and workspace (MoE checkpoints only).
  MoeFfn& moe_ffn() const { return *moe_; }
  MatrixMap matrix(Proj p, int l) const {
    if (c_.moe() && (p == Proj::kW1 || p == Proj::kW2 || p == Proj::kW3))
      throw std::invalid_argument("llama2c: an MoE model has no dense FFN matrices (w1, w2, w3 are per expert)");
    switch (p) {
      case Proj::kQ:
        return wq(l);
      case Proj::kK:
        return wk(l);
      case Proj::kV:
        return wv(l);
      case Proj::kO:
        return wo(l);
      case Proj::kW1:
        return w1(l);
      case Proj::kW2:
        return w2(l);
      case Proj::kW3:
        return w3(l);
      case Proj::kClassifier:
        break;
    }
    return wcls();
  }
  // Writable views, for transforms that fold factors into the weights (SmoothQuant).
  Eigen::Map<RowMatrix> mutable_matrix(Proj p, int l) {
    const MatrixMap m = matrix(p, l);
    return Eigen::Map<RowMatrix>(const_cast<float*>(m.data()), m.rows(), m.cols());
  }
  float* mutable_rms_att(int l) { return rms_att_ + l * c_.dim; }
  float* mutable_rms_ffn(int l) { return rms_ffn_ + l * c_.dim; }
  float* mutable_rms_final() { return rms_final_; }
  float* mutable_embedding() { return data_.data(); }  ///< [vocab x dim]
  float* mutable_bias(Proj p, int l) { return const_cast<float*>(bias(p, l)); }
  float* mutable_q_norm(int l) { return const_cast<float*>(q_norm(l)); }
  float* mutable_k_norm(int l) { return const_cast<float*>(k_norm(l)); }

  /// y = W x through the installed hook, or the float matrix (Eigen) when there is none.
  void project(Proj p, int l, const float* x, float* y) const {
    if (projections_) return projections_->project(p, l, x, y);
    if (ggml_backed()) {
      const inferkit::GgmlWeights& w = ggml_weights(p, l);
      inferkit::ggml_matvec(w, std::span<const float>(x, static_cast<std::size_t>(w.cols())),
                            std::span<float>(y, static_cast<std::size_t>(w.rows())),
                            threads_for(2.0 * double(w.rows()) * double(w.cols())));
      return;
    }
    const MatrixMap m = matrix(p, l);
    Eigen::Map<Eigen::VectorXf>(y, m.rows()).noalias() = m * VectorMap(x, m.cols());
  }
  void set_projections(std::shared_ptr<const ProjectionHook> hook) { projections_ = std::move(hook); }
  const ProjectionHook* projections() const { return projections_.get(); }

 private:
  // float_matrices = false: a ggml-backed model, whose buffer holds the RMSNorm weights only.
  explicit Model(Config config, bool float_matrices = true)
      : c_(std::move(config)), data_(float_matrices ? weight_floats(c_) : norm_floats(c_)) {
    float_matrices_ = float_matrices;
    const Config& c = c_;
    if (c.moe()) {
      moe_ = std::make_shared<MoeFfn>();
      moe_->options.scoring = c.router;
    }
  }

  static void validate(const Config& c, const std::string& what) {
    const auto bad = [&](const std::string& field, long v, const std::string& rule) {
      throw std::invalid_argument("llama2c: " + what + ": " + field + " = " + std::to_string(v) +
                                  " is invalid: " + rule);
    };
    if (c.dim <= 0) bad("dim", c.dim, "must be > 0");
    if (c.hidden_dim <= 0) bad("hidden_dim", c.hidden_dim, "must be > 0");
    if (c.n_layers <= 0) bad("n_layers", c.n_layers, "must be > 0");
    if (c.n_heads <= 0 || (c.head_dim == 0 && c.dim % c.n_heads != 0))
      bad("n_heads", c.n_heads, "must be > 0 and divide dim (unless head_dim is given)");
    if (c.head_dim < 0) bad("head_dim", c.head_dim, "must be >= 0 (0 = dim / n_heads)");
    if (c.head_size() <= 0 || c.head_size() % 2 != 0) bad("head_size", c.head_size(), "must be even and > 0 for RoPE");
    if (!c.rope_freq_factors.empty() && c.rope_freq_factors.size() != static_cast<std::size_t>(c.head_size() / 2))
      bad("rope_freq_factors.size()", static_cast<long>(c.rope_freq_factors.size()),
          "must be head_size / 2 = " + std::to_string(c.head_size() / 2));
    if (!(c.rope_base > 1.0) || !std::isfinite(c.rope_base))
      bad("rope_base", static_cast<long>(c.rope_base), "must be finite and > 1");
    if (!(c.rms_eps > 0.0f) || !std::isfinite(c.rms_eps))
      bad("rms_eps (x 1e9)", static_cast<long>(c.rms_eps * 1e9f), "must be finite and > 0");
    if (c.moe() && c.arch != Arch::kLlama) bad("n_experts", c.n_experts, "MoE needs the llama architecture");
    if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
      bad("n_kv_heads", c.n_kv_heads, "must be > 0 and divide n_heads");
    if (c.vocab_size <= 0) bad("vocab_size", c.vocab_size, "must be non-zero");
    if (c.seq_len <= 0) bad("seq_len", c.seq_len, "must be > 0");
    if (c.n_experts < 0) bad("n_experts", c.n_experts, "must be >= 0 (0 = dense)");
    if (c.moe() && (c.experts_per_token < 1 || c.experts_per_token > c.n_experts))
      bad("experts_per_token", c.experts_per_token, "must be in [1, n_experts = " + std::to_string(c.n_experts) + "]");
  }
  // weight_floats() in double: never overflows (the shape may come from a corrupt header).
  static double weight_floats_approx(const Config& c) {
    const double d = c.dim, h = c.hidden_dim, L = c.n_layers, kv = c.kv_dim(), v = c.vocab_size, E = c.n_experts;
    const double qd = c.q_dim();
    const double ffn = c.moe() ? L * E * d + 3 * L * E * h * d : 3 * L * h * d;  // as weight_floats()
    return v * d * (c.shared_classifier ? 1 : 2) + L * d + L * qd * d + 2 * L * kv * d + L * d * qd + L * d + ffn + d +
           2.0 * c.seq_len * (c.head_size() / 2);
  }
  static std::size_t weight_floats(const Config& c) {
    const std::size_t d = c.dim, h = c.hidden_dim, L = c.n_layers, kv = c.kv_dim(), v = c.vocab_size;
    const std::size_t E = c.n_experts, qd = c.q_dim();
    const std::size_t ffn = c.moe() ? L * E * d + 3 * L * E * h * d : 3 * L * h * d;  // MoE: router + experts
    std::size_t n = v * d + L * d + L * qd * d + 2 * L * kv * d + L * d * qd + L * d + ffn + d +
                    2 * static_cast<std::size_t>(c.seq_len) * (c.head_size() / 2);
    if (!c.shared_classifier) n += v * d;
    return n;
  }
  static std::size_t norm_floats(const Config& c) {
    return (2 * static_cast<std::size_t>(c.n_layers) + 1) * static_cast<std::size_t>(c.dim);
  }
  // Throws when the model is ggml-backed: its float matrices (`what`) are not held.
  void require_float(const char* what) const {
    if (ggml_backed())
      throw std::invalid_argument(std::string("llama2c: the model's weights are ") +
                                  inferkit::ggml_type_name(ggml_weights(Proj::kQ, 0).type()) +
                                  " GGUF tensors (ggml-backed): the float matrix " + what +
                                  " is not held; this needs a float model (an F32 GGUF or a llama2.c checkpoint)");
  }
  // The architecture's extra vectors (extra_): Q/K/V biases, then the per-head Q/K norm weights.
  static std::size_t extra_floats(const Config& c) {
    const std::size_t L = c.n_layers;
    return (c.qkv_bias() ? L * (static_cast<std::size_t>(c.q_dim()) + 2 * c.kv_dim()) : 0) +
           (c.qk_norm() ? 2 * L * static_cast<std::size_t>(c.head_size()) : 0);
  }
  void map() {
    const std::size_t d = c_.dim, h = c_.hidden_dim, L = c_.n_layers, kv = c_.kv_dim(), v = c_.vocab_size;
    const std::size_t qd = c_.q_dim(), hs = c_.head_size();
    extra_.assign(extra_floats(c_), 0.0f);
    float* e = extra_.data();
    if (c_.qkv_bias()) {
      bq_ = e, bk_ = bq_ + L * qd, bv_ = bk_ + L * kv;
      e = bv_ + L * kv;
    }
    if (c_.qk_norm()) q_norm_ = e, k_norm_ = e + L * hs;
    const std::size_t m = float_matrices_ ? 1 : 0;  // a ggml-backed model's buffer has no matrices
    float* p = data_.data() + m * v * d;
    const auto take = [&](std::size_t n) {
      float* q = p;
      p += n;
      return q;
    };
    rms_att_ = take(L * d);
    wq_ = take(m * L * qd * d);
    wk_ = take(m * L * kv * d);
    wv_ = take(m * L * kv * d);
    wo_ = take(m * L * d * qd);
    rms_ffn_ = take(L * d);
    const std::size_t E = c_.moe() ? static_cast<std::size_t>(c_.n_experts) : 1;
    if (c_.moe()) router_ = take(L * E * d);
    w1_ = take(m * L * E * h * d);
    w2_ = take(m * L * E * d * h);
    w3_ = take(m * L * E * h * d);
    rms_final_ = take(d);
    take(m * 2 * static_cast<std::size_t>(c_.seq_len) * (c_.head_size() / 2));  // legacy RoPE tables
    wcls_ = c_.shared_classifier ? data_.data() : take(m * v * d);
  }

  Config c_;
  std::vector<float> data_;
  float *rms_att_ = nullptr, *wq_ = nullptr, *wk_ = nullptr, *wv_ = nullptr, *wo_ = nullptr, *rms_ffn_ = nullptr;
  float *w1_ = nullptr, *w2_ = nullptr, *w3_ = nullptr, *rms_final_ = nullptr, *wcls_ = nullptr, *router_ = nullptr;
  std::vector<float> extra_;  // the architecture's biases and Q/K norms (extra_floats())
  float *bq_ = nullptr, *bk_ = nullptr, *bv_ = nullptr, *q_norm_ = nullptr, *k_norm_ = nullptr;
  std::shared_ptr<const ProjectionHook> projections_;
  // ggml-backed models: 7 projections per layer, the classifier, then the token embedding, all
  // views into *gguf_ (empty for float models).
  std::vector<inferkit::GgmlWeights> ggml_;
  bool float_matrices_ = true;  // false: data_ holds the norms only (norm_floats())
  std::shared_ptr<const inferkit::GgufFile> gguf_;
  std::shared_ptr<MoeFfn> moe_;  // shared by copies of the model (the workspace is not copied)

  friend class ModelBuilder;
};

/// The sequence a prompt is fed as: the model's BOS (unless Config::bos is -1), then the prompt.
/// Throws std::invalid_argument when that leaves nothing to feed.
inline std::vector<TokenId> start_sequence(const Config& c, const std::vector<TokenId>& prompt) {
  std::vector<TokenId> seq;
  if (c.bos >= 0) seq.push_back(c.bos);
  seq.insert(seq.end(), prompt.begin(), prompt.end());
  if (seq.empty())
    throw std::invalid_argument("llama2c: the model's vocabulary adds no BOS token: give a non-empty prompt");
  return seq;
}

// ---- caches -------------------------------------------------------------------------------

enum class CacheKind { kDense, kWindow, kSinkWindow, kPaged };

/// Context parallelism (context_parallel.hpp, built with MPI): this process stores only the
/// positions [first(), end()) of the sequence, the other ranks the rest, and attend() runs
/// inferkit's context-parallel attention over every rank's shard.
class ShardedAttention {
 public:
  virtual ~ShardedAttention() = default;
  /// First position this process stores.
  virtual std::int32_t first() const = 0;
  /// One past the last position it stores.
  virtual std::int32_t end() const = 0;
  /// out = attention of q over all ranks' shards; `shard` is this rank's, at global positions.
  virtual void attend(inferkit::Tensor3View<const float> q, const inferkit::ShiftedKv<inferkit::DenseKv<float>>& shard,
                      inferkit::Tensor3View<float> out) const = 0;
};

struct CacheOptions {
  CacheKind kind = CacheKind::kDense;
  Index window = 0, sinks = 0;
  inferkit::PositionPolicy positions = inferkit::PositionPolicy::kOriginal;
  std::optional<inferkit::KvQuantConfig> quant;                      // dense, or window / sink with per-token specs
  inferkit::BlockPool<float>* pool = nullptr;                        // kPaged: blocks come from this shared pool
  inferkit::BlockPool<inferkit::QuantizedKv>* quant_pool = nullptr;  // kPaged over quantized pages (instead of pool)
  bool naive_attention = false;  // baseline runs: inferkit's fp64 reference instead of the kernels
  inferkit::AttentionArithmetic arithmetic = inferkit::AttentionArithmetic::kExact;  // --attn-arith
  std::vector<float> sink_logits;  // --sink-logit: AttentionOptions::sink_logits, one per query head, or empty
  // Batch-invariant attention (AttentionOptions::batch_invariant): bits independent of the page
  // size, so a paged cache's logits equal a dense cache's bit for bit (quantized caches
  // included: a rounding difference upstream would otherwise flip codes downstream).
  bool batch_invariant = false;
  const ShardedAttention* shard = nullptr;  // kDense float only: keep a token range, attend across ranks
};

/// A KV quantization config made pageable at `page_size` (BlockPool<QuantizedKv>): no residual
/// (the paged cache's float tail is the per-channel key group still filling), per-channel key
/// groups of gcd(group_size, page_size) tokens so a group never spans pages. The dense quantized
/// cache under the same config stores the same codes.
inline inferkit::KvQuantConfig paged_quant(inferkit::KvQuantConfig q, Index page_size) {
  q.keys.residual = q.values.residual = 0;
  if (q.keys.axis == inferkit::QuantAxis::kPerChannel) q.keys.group_size = std::gcd(q.keys.group_size, page_size);
  return q;
}

/// The KV cache of one sequence under the chosen policy.
class Cache {
 public:
  Cache(const Config& c, const CacheOptions& o) : opt_(o) {
    const Index L = c.n_layers, H = c.n_kv_heads, D = c.head_size();
    if (o.shard && (o.kind != CacheKind::kDense || o.quant || o.naive_attention))
      throw std::invalid_argument("llama2c: context parallelism needs the dense float cache and inferkit's attention");
    if (o.shard && !o.sink_logits.empty())
      throw std::invalid_argument("llama2c: --sink-logit does not work with context parallelism");
    if (!o.sink_logits.empty() && static_cast<Index>(o.sink_logits.size()) != c.n_heads)
      throw std::invalid_argument("llama2c: --sink-logit needs one logit per query head (" + std::to_string(c.n_heads) +
                                  "), got " + std::to_string(o.sink_logits.size()));
    if (o.kind == CacheKind::kPaged) {
      if (o.quant_pool)
        impl_.emplace<inferkit::BlockTable<inferkit::QuantizedKv>>(*o.quant_pool);
      else if (o.pool)
        impl_.emplace<inferkit::BlockTable<float>>(*o.pool);
      else
        throw std::invalid_argument("llama2c: a paged cache needs a block pool");
    } else if (o.kind == CacheKind::kDense) {
      if (o.quant)
        impl_.emplace<inferkit::QuantizedKvCache>(L, H, D, *o.quant);
      else
        impl_.emplace<inferkit::DenseKvCache<float>>(L, H, D, 64);
    } else {
      const Index sinks = o.kind == CacheKind::kWindow ? 0 : o.sinks;
      const inferkit::RopeOptions rope = c.rope();
      if (o.quant)
        impl_.emplace<inferkit::QuantizedSinkWindowCache>(L, H, D, sinks, o.window, o.positions, rope, o.quant->keys,
                                                          o.quant->values);
      else
        impl_.emplace<inferkit::SinkWindowCache<float>>(L, H, D, sinks, o.window, o.positions, rope);
    }
  }

  /// Whether keys must be stored un-rotated (rotated on read at cache positions).
  bool rotates_on_read() const {
    return opt_.kind != CacheKind::kDense && opt_.positions == inferkit::PositionPolicy::kCache;
  }

  void append(Index layer, const float* k, const float* v, Index tokens, Index kv_heads, Index head, std::int32_t pos) {
    if (opt_.shard) {  // keep only this rank's positions
      const Index lo = std::clamp<Index>(opt_.shard->first() - pos, 0, tokens);
      const Index hi = std::clamp<Index>(Index{opt_.shard->end()} - pos, lo, tokens);
      auto& dense = std::get<inferkit::DenseKvCache<float>>(impl_);
      if (hi > lo && dense.length(layer) != pos + lo - opt_.shard->first())
        throw std::logic_error("llama2c: a context-parallel shard must receive its positions in order");
      const Index off = lo * kv_heads * head;
      if (hi > lo)
        dense.append(layer, inferkit::Tensor3View<const float>(k + off, hi - lo, kv_heads, head),
                     inferkit::Tensor3View<const float>(v + off, hi - lo, kv_heads, head));
      return;
    }
    const inferkit::Tensor3View<const float> kt(k, tokens, kv_heads, head), vt(v, tokens, kv_heads, head);
    std::visit(
        [&](auto& c) {
          using C = std::decay_t<decltype(c)>;
          if constexpr (kIsSinkWindow<C>) {
            std::vector<std::int32_t> p(static_cast<std::size_t>(tokens));
            for (Index i = 0; i < tokens; ++i) p[static_cast<std::size_t>(i)] = pos + static_cast<std::int32_t>(i);
            c.append(layer, kt, vt, p);
          } else if constexpr (kIsTable<C>) {
            if (layer == 0) {  // the step's tokens get their slots (all layers) before layer 0 attends
              if (!c.reserve(tokens)) throw std::runtime_error("llama2c: the block pool is exhausted");
              c.commit(tokens);
            }
            c.write_at(layer, c.num_tokens() - tokens, kt, vt);
          } else {
            c.append(layer, kt, vt);
          }
        },
        impl_);
  }

  /// Position the newest query of a layer sits at (after its K/V were appended).
  std::int32_t query_position(Index layer, std::int32_t pos) const {
    if (const auto* sw = std::get_if<inferkit::SinkWindowCache<float>>(&impl_)) return sw->newest_position(layer);
    if (const auto* sw = std::get_if<inferkit::QuantizedSinkWindowCache>(&impl_)) return sw->newest_position(layer);
    return pos;
  }

  /// out = attention of the tokens' queries over the layer's cache; `flops` (0 = unknown) sizes
  /// the parallel region (threads_for()).
  void attend(Index layer, const float* q, float* out, Index tokens, Index heads, Index head, double flops = 0) const {
    if (opt_.shard) {
      const auto& dense = std::get<inferkit::DenseKvCache<float>>(impl_);
      return opt_.shard->attend(inferkit::Tensor3View<const float>(q, tokens, heads, head),
                                inferkit::ShiftedKv(dense.source(layer), opt_.shard->first()),
                                inferkit::Tensor3View<float>(out, tokens, heads, head));
    }
    std::visit(
        [&](const auto& c) {
          const inferkit::Tensor3View<const float> qv(q, tokens, heads, head);
          const inferkit::Tensor3View<float> ov(out, tokens, heads, head);
          if (opt_.naive_attention)
            inferkit::attention_reference(qv, c.source(layer), ov, {}, {.sink_logits = opt_.sink_logits});
          else {
            inferkit::AttentionOptions ao;
            ao.num_threads = flops > 0 ? threads_for(flops) : runner_threads();
            ao.arithmetic = opt_.arithmetic;
            ao.batch_invariant = opt_.batch_invariant;
            ao.sink_logits = opt_.sink_logits;
            inferkit::attention(qv, c.source(layer), ov, {}, ao);
          }
        },
        impl_);
  }

  /// out = tree attention (inferkit::tree_attention) of a token tree's rows, whose K/V follow the
  /// cached `prefix` in tree-position order: row u sees the prefix and its own root path. Float
  /// dense and paged caches only (a quantized cache takes a tree's rows only once verified).
  void attend_tree(Index layer, const float* q, float* out, Index rows, Index heads, Index head, Index prefix,
                   std::span<const Index> parents, double flops) const {
    if (opt_.shard) throw std::invalid_argument("llama2c: token-tree rows do not work with context parallelism");
    std::visit(
        [&](const auto& c) {
          using C = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<C, inferkit::DenseKvCache<float>> ||
                        std::is_same_v<C, inferkit::BlockTable<float>>) {
            inferkit::AttentionOptions ao;
            ao.num_threads = threads_for(flops);
            ao.batch_invariant = opt_.batch_invariant;
            ao.sink_logits = opt_.sink_logits;
            inferkit::tree_attention(inferkit::Tensor3View<const float>(q, rows, heads, head), c.source(layer), prefix,
                                     parents, inferkit::Tensor3View<float>(out, rows, heads, head), ao);
          } else {
            throw std::invalid_argument("llama2c: token-tree rows need a float dense or paged KV cache");
          }
        },
        impl_);
  }

  /// Keeps the cached prefix, the tree's root row and the rows of the accepted nodes (a root path,
  /// VerifyResult::path) at consecutive positions, dropping the rejected rows
  /// (inferkit::compact_tree_path). Throws std::runtime_error when a paged cache's pool runs out.
  void compact_tree(Index prefix, std::span<const Index> accepted_nodes) {
    if (auto* d = std::get_if<inferkit::DenseKvCache<float>>(&impl_))
      return inferkit::compact_tree_path(*d, prefix, accepted_nodes);
    if (auto* t = std::get_if<inferkit::BlockTable<float>>(&impl_)) {
      if (!inferkit::compact_tree_path(*t, prefix, accepted_nodes))
        throw std::runtime_error("llama2c: the block pool is exhausted (token-tree compaction)");
      return;
    }
    throw std::invalid_argument("llama2c: token-tree compaction needs a float dense or paged KV cache");
  }

  /// The paged cache's block table (kPaged only; T = QuantizedKv over a quant_pool).
  template <class T = float>
  inferkit::BlockTable<T>& table() {
    return std::get<inferkit::BlockTable<T>>(impl_);
  }

  void truncate(Index length) {
    if (opt_.shard)
      throw std::invalid_argument("llama2c: truncation (speculative decoding) does not work with context parallelism");
    if (auto* d = std::get_if<inferkit::DenseKvCache<float>>(&impl_)) return d->truncate(length);
    if (auto* t = std::get_if<inferkit::BlockTable<float>>(&impl_)) return t->truncate(length);
    if (auto* t = std::get_if<inferkit::BlockTable<inferkit::QuantizedKv>>(&impl_)) return t->truncate(length);
    throw std::invalid_argument("llama2c: truncation (speculative decoding) needs a dense float cache");
  }

  /// KV bytes the cache holds now (codes, metadata and full-precision tails when quantized).
  double bytes_held(const Config& c) const {
    const double per_token = 2.0 * c.n_layers * c.kv_dim() * sizeof(float);
    if (const auto* q = std::get_if<inferkit::QuantizedKvCache>(&impl_)) return static_cast<double>(q->bytes_in_use());
    if (const auto* d = std::get_if<inferkit::DenseKvCache<float>>(&impl_))
      return per_token * static_cast<double>(d->length(0));
    if (const auto* t = std::get_if<inferkit::BlockTable<float>>(&impl_))
      return per_token * static_cast<double>(t->num_tokens());
    if (const auto* t = std::get_if<inferkit::BlockTable<inferkit::QuantizedKv>>(&impl_))  // whole pages + the key tail
      return static_cast<double>(t->blocks().size() * opt_.quant_pool->block_bytes() + t->tail_bytes());
    if (const auto* w = std::get_if<inferkit::QuantizedSinkWindowCache>(&impl_)) return static_cast<double>(w->bytes());
    const auto& w = std::get<inferkit::SinkWindowCache<float>>(impl_);
    return per_token * static_cast<double>(w.size(0));
  }

 private:
  CacheOptions opt_;
  template <class C>
  static constexpr bool kIsSinkWindow =
      std::is_same_v<C, inferkit::SinkWindowCache<float>> || std::is_same_v<C, inferkit::QuantizedSinkWindowCache>;
  template <class C>
  static constexpr bool kIsTable =
      std::is_same_v<C, inferkit::BlockTable<float>> || std::is_same_v<C, inferkit::BlockTable<inferkit::QuantizedKv>>;

  std::variant<inferkit::DenseKvCache<float>, inferkit::QuantizedKvCache, inferkit::SinkWindowCache<float>,
               inferkit::BlockTable<float>, inferkit::QuantizedSinkWindowCache,
               inferkit::BlockTable<inferkit::QuantizedKv>>
      impl_{std::in_place_index<0>, 1, 1, 2, 1};
};

// ---- forward ------------------------------------------------------------------------------

inline void rmsnorm(float* out, const float* x, const float* w, int n, float eps = 1e-5f) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + double(eps)));
  for (int i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}
inline void rmsnorm(float* out, const float* x, const VectorMap& w, int n, float eps = 1e-5f) {
  rmsnorm(out, x, w.data(), n, eps);
}

/// What the architecture does to a chunk's projected Q and K [n x heads x head_size] and V before
/// RoPE: qwen2 adds the biases of Q, K and V; qwen3 RMS-normalizes every head of Q and K with its
/// weights (Qwen3's q_norm / k_norm). Nothing for llama.
inline void finish_qkv(const Model& m, int l, Index n, float* q, float* k, float* v) {
  const Config& c = m.config();
  const Index qd = c.q_dim(), kvd = c.kv_dim(), hs = c.head_size();
  if (c.qkv_bias()) {
    const float *bq = m.bias(Proj::kQ, l), *bk = m.bias(Proj::kK, l), *bv = m.bias(Proj::kV, l);
    for (Index t = 0; t < n; ++t) {
      for (Index i = 0; i < qd; ++i) q[t * qd + i] += bq[i];
      for (Index i = 0; i < kvd; ++i) k[t * kvd + i] += bk[i], v[t * kvd + i] += bv[i];
    }
  }
  if (c.qk_norm()) {
    for (Index r = 0; r < n * c.n_heads; ++r)
      rmsnorm(q + r * hs, q + r * hs, m.q_norm(l), static_cast<int>(hs), c.rms_eps);
    for (Index r = 0; r < n * c.n_kv_heads; ++r)
      rmsnorm(k + r * hs, k + r * hs, m.k_norm(l), static_cast<int>(hs), c.rms_eps);
  }
}

/// SwiGLU in place: h1[i] = silu(h1[i]) * h3[i] over one row of n hidden units.
inline void swiglu(float* h1, const float* h3, int n) {
  for (int i = 0; i < n; ++i) {
    const float a = h1[i];
    h1[i] = a / (1.0f + std::exp(-a)) * h3[i];
  }
}

/// Called after each layer with the residual stream of the chunk (row t at position
/// first_position + t): it may read the rows (capture hidden states) or edit them (steering).
using ResidualHook = std::function<void(int layer, std::int32_t first_position, inferkit::MatrixView<float> residual)>;

/// What forward() does besides writing logits (designated initializers:
/// `forward(m, cache, ids, n, pos, logits, {.hidden = h})`).
struct ForwardOptions {
  /// Layers to run: the first `layers` (a self-speculative draft, or the states up to a
  /// steering layer); -1 = all. The cache must have at least this many layers.
  int layers = -1;
  /// If set, receives the last hidden state of every token [n x dim], after the final RMSNorm
  /// (contrastive search's degeneration penalty).
  float* hidden = nullptr;
  /// If set, sees (and may edit) the residual stream after each layer (steering, captures).
  const ResidualHook* hook = nullptr;
  /// Prefill: every projection of the chunk is one matrix-matrix product (Eigen GEMM) instead of
  /// one matrix-vector product per token (float weights without a ProjectionHook; the dense
  /// FFN). The logits then differ from the one-token steps by rounding only.
  bool batched = false;
  /// Token-tree rows (speculative verification): the n tokens are the tree's root (the last
  /// context token) then its nodes in depth-first order (n = tree->size() + 1); row u sits at
  /// position pos + depth(u) and attends the cache's first `pos` tokens plus its own root path
  /// (Cache::attend_tree). The rows' K/V stay in the cache after the prefix, in row order, until
  /// Cache::compact_tree() keeps the accepted path.
  const inferkit::TokenTree* tree = nullptr;
};

/// Runs `n` consecutive tokens starting at position `pos` through the model (options.layers of
/// it), appending their K/V to the cache, and writes the logits of every token to `logits`
/// [n x vocab]. Each token's matmuls are the same matrix-vector products as in a one-token
/// step, so a chunk gives the same logits as feeding its tokens one at a time (unless
/// options.batched asks for matrix-matrix products).
inline void forward(const Model& m, Cache& cache, const TokenId* tokens, Index n, std::int32_t pos, float* logits,
                    const ForwardOptions& options = {}) {
  const Config& c = m.config();
  const ResidualHook* hook = options.hook;
  float* hidden = options.hidden;
  const int L = options.layers < 0 ? c.n_layers : options.layers, D = c.dim, hs = c.head_size(), kvd = c.kv_dim();
  if (options.layers < -1 || options.layers > c.n_layers)
    throw std::invalid_argument("llama2c: ForwardOptions::layers = " + std::to_string(options.layers) +
                                " is invalid: must be -1 (all) or in [0, " + std::to_string(c.n_layers) + "]");
  for (Index t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
      throw std::out_of_range("llama2c: token " + std::to_string(tokens[t]) + " is outside the vocabulary [0, " +
                              std::to_string(c.vocab_size) + ")");
  const float eps = c.rms_eps;
  RowMatrix x(n, D), xb(n, D), q(n, c.q_dim()), k(n, kvd), v(n, kvd), att(n, c.q_dim()),
      h1(c.moe() ? 0 : n, c.hidden_dim), h3(c.moe() ? 0 : n, c.hidden_dim);
  Eigen::RowVectorXf tmp(D);
  for (Index t = 0; t < n; ++t) m.embed(tokens[t], x.row(t).data());
  const inferkit::TokenTree* tree = options.tree;
  if (tree && (n != tree->size() + 1 || cache.rotates_on_read()))
    throw std::invalid_argument(
        "llama2c: ForwardOptions::tree needs n = tree nodes + 1 = " + std::to_string(tree->size() + 1) + " rows (got " +
        std::to_string(n) + ") and a cache storing rotated keys");
  const std::vector<Index> parents =
      tree ? std::vector<Index>(tree->parents().begin(), tree->parents().end()) : std::vector<Index>{};
  std::vector<std::int32_t> positions(static_cast<std::size_t>(n));
  for (Index t = 0; t < n; ++t)
    positions[static_cast<std::size_t>(t)] =
        pos + static_cast<std::int32_t>(tree ? (t == 0 ? 0 : tree->depth(t - 1)) : t);
  const inferkit::RopeOptions rope = c.rope();
  const bool gemm = options.batched && n > 1 && !m.projections();
  RowMatrix o(gemm ? n : 0, D);
  // out = in W_p^T: one GEMM over the chunk, or one matrix-vector product per token.
  const auto project_rows = [&](Proj p, int l, const RowMatrix& in, RowMatrix& out) {
    if (m.ggml_backed()) {  // int8 activations against the file's blocks (ggml_matvec.hpp)
      const inferkit::GgmlWeights& w = m.ggml_weights(p, l);
      inferkit::ggml_matmul(w, inferkit::MatrixView<const float>(in.data(), in.rows(), in.cols()),
                            inferkit::MatrixView<float>(out.data(), out.rows(), out.cols()),
                            threads_for(2.0 * double(n) * double(w.rows()) * double(w.cols())));
      return;
    }
    const MatrixMap w = m.matrix(p, l);
    eigen_threads_for(2.0 * double(n) * double(w.rows()) * double(w.cols()));
    out.noalias() = in * w.transpose();
  };
  for (int l = 0; l < L; ++l) {
    for (Index t = 0; t < n; ++t) {
      rmsnorm(xb.row(t).data(), x.row(t).data(), m.rms_att(l), D, eps);
      if (gemm) continue;
      m.project(Proj::kQ, l, xb.row(t).data(), q.row(t).data());
      m.project(Proj::kK, l, xb.row(t).data(), k.row(t).data());
      m.project(Proj::kV, l, xb.row(t).data(), v.row(t).data());
    }
    if (gemm) {
      project_rows(Proj::kQ, l, xb, q);
      project_rows(Proj::kK, l, xb, k);
      project_rows(Proj::kV, l, xb, v);
    }
    finish_qkv(m, l, n, q.data(), k.data(), v.data());
    if (!cache.rotates_on_read())
      inferkit::apply_rope(inferkit::Tensor3View<float>(k.data(), n, c.n_kv_heads, hs), positions, rope);
    cache.append(l, k.data(), v.data(), n, c.n_kv_heads, hs, pos);
    // Queries sit where the cache says the newest tokens are (cache positions in a streaming cache).
    std::vector<std::int32_t> qpos(static_cast<std::size_t>(n));
    const std::int32_t last = cache.query_position(l, pos + static_cast<std::int32_t>(n - 1));
    for (Index t = 0; t < n; ++t) qpos[static_cast<std::size_t>(t)] = last - static_cast<std::int32_t>(n - 1 - t);
    if (tree) qpos = positions;  // tree rows: prefix + depth
    inferkit::apply_rope(inferkit::Tensor3View<float>(q.data(), n, c.n_heads, hs), qpos, rope);
    const double attn_flops = 4.0 * double(n) * double(pos + n) * double(c.q_dim());  // QK^T and PV
    if (tree)
      cache.attend_tree(l, q.data(), att.data(), n, c.n_heads, hs, pos, parents, attn_flops);
    else
      cache.attend(l, q.data(), att.data(), n, c.n_heads, hs, attn_flops);
    if (gemm && !c.moe()) {
      project_rows(Proj::kO, l, att, o);
      x += o;
      for (Index t = 0; t < n; ++t) rmsnorm(xb.row(t).data(), x.row(t).data(), m.rms_ffn(l), D, eps);
      project_rows(Proj::kW1, l, xb, h1);
      project_rows(Proj::kW3, l, xb, h3);
      for (Index t = 0; t < n; ++t) swiglu(h1.row(t).data(), h3.row(t).data(), c.hidden_dim);
      project_rows(Proj::kW2, l, h1, o);
      x += o;
      if (hook && *hook) (*hook)(l, pos, inferkit::MatrixView<float>(x.data(), n, D));
      continue;
    }
    for (Index t = 0; t < n; ++t) {
      m.project(Proj::kO, l, att.row(t).data(), tmp.data());
      x.row(t) += tmp;
      rmsnorm(xb.row(t).data(), x.row(t).data(), m.rms_ffn(l), D, eps);
      if (c.moe()) continue;  // the chunk's MoE FFN runs below, all tokens at once
      m.project(Proj::kW1, l, xb.row(t).data(), h1.row(t).data());
      m.project(Proj::kW3, l, xb.row(t).data(), h3.row(t).data());
      swiglu(h1.row(t).data(), h3.row(t).data(), c.hidden_dim);
      m.project(Proj::kW2, l, h1.row(t).data(), tmp.data());
      x.row(t) += tmp;
    }
    if (c.moe()) m.moe_ffn().run(m.moe_layer(l), c.experts_per_token, xb.data(), x.data(), n);
    if (hook && *hook) (*hook)(l, pos, inferkit::MatrixView<float>(x.data(), n, D));
  }
  for (Index t = 0; t < n; ++t) {
    rmsnorm(xb.row(t).data(), x.row(t).data(), m.rms_final(), D, eps);
    if (hidden) std::copy_n(xb.row(t).data(), D, hidden + t * D);  // the last hidden state, normalized
    if (!gemm) m.project(Proj::kClassifier, 0, xb.row(t).data(), logits + t * c.vocab_size);
  }
  if (gemm && m.ggml_backed()) {
    RowMatrix out(n, c.vocab_size);
    project_rows(Proj::kClassifier, 0, xb, out);
    std::copy_n(out.data(), out.size(), logits);
  } else if (gemm) {
    Eigen::Map<RowMatrix> out(logits, n, c.vocab_size);
    eigen_threads_for(2.0 * double(n) * double(c.vocab_size) * double(D));
    out.noalias() = xb * m.wcls().transpose();
  }
  Eigen::setNbThreads(runner_threads());
}

}  // namespace llama2c

#include "gguf_model.hpp"  // Model::from_gguf
