// The runner's GGUF models (examples/llama2c/gguf_model.hpp): llama.cpp's own conversion of
// stories260K gives llama2.c's reference greedy ids; tiny random models of each architecture,
// written here with inferkit's GgufWriter under the GGUF tensor names, give the logits of an
// fp64 reference forward written below from the architectures' equations (not the runner's
// code); unknown architectures and tensor types are refused by name.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <inferkit/quant/ggml_quantize.hpp>

#include "cli_util.hpp"
#include "llama2c/generate.hpp"
#include "llama2c/llama2c.hpp"
#include "llama2c/serve.hpp"

using cli_test::read_ids;
using cli_test::run_cli;
using cli_test::temp_path;
using llama2c::Index;
using llama2c::TokenId;

namespace {

// ---- a tiny model: its shape, weights (exact in F16 and BF16: multiples of 1/256 below 1) ----

struct Tiny {
  std::string arch = "llama";
  int dim = 32, hidden = 48, layers = 2, heads = 4, kv_heads = 2, head = 8, vocab = 40;
  bool tied = false, rope_freqs = false;
  double base = 10000.0, eps = 1e-5;
  inferkit::GgmlType type = inferkit::GgmlType::kF32;
  // name -> (dims fastest first, values row-major)
  struct T {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::vector<float> v;
    std::vector<std::byte> q;  // quantized types: the blocks written (v holds their dequantization)
  };
  std::vector<T> tensors;

  bool bias() const { return arch == "qwen2"; }
  bool qk_norm() const { return arch == "qwen3"; }
  const std::vector<float>& w(const std::string& name) const {
    for (const auto& t : tensors)
      if (t.name == name) return t.v;
    FAIL("no tensor " << name);
    return tensors[0].v;
  }
};

Tiny make_tiny(Tiny m, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> k(-60, 60);
  const auto add = [&](const std::string& name, std::uint64_t cols, std::uint64_t rows, float center = 0.0f) {
    Tiny::T t{name, rows > 1 ? std::vector<std::uint64_t>{cols, rows} : std::vector<std::uint64_t>{cols}, {}};
    for (std::uint64_t i = 0; i < cols * rows; ++i) t.v.push_back(center + float(k(rng)) / 256.0f);
    m.tensors.push_back(std::move(t));
  };
  const std::uint64_t d = m.dim, qd = m.heads * m.head, kv = m.kv_heads * m.head, h = m.hidden;
  add("token_embd.weight", d, m.vocab);
  add("output_norm.weight", d, 1, 1.0f);
  if (!m.tied) add("output.weight", d, m.vocab);
  if (m.rope_freqs) {  // Llama 3.1's factors: 1 for high frequencies, up to 8 for low ones
    Tiny::T t{"rope_freqs.weight", {std::uint64_t(m.head / 2)}, {}};
    for (int i = 0; i < m.head / 2; ++i) t.v.push_back(1.0f + 7.0f * float(i) / float(m.head / 2 - 1));
    m.tensors.push_back(std::move(t));
  }
  for (int l = 0; l < m.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", d, 1, 1.0f);
    add(b + "attn_q.weight", d, qd);
    add(b + "attn_k.weight", d, kv);
    add(b + "attn_v.weight", d, kv);
    add(b + "attn_output.weight", qd, d);
    if (m.bias()) {
      add(b + "attn_q.bias", qd, 1);
      add(b + "attn_k.bias", kv, 1);
      add(b + "attn_v.bias", kv, 1);
    }
    if (m.qk_norm()) {
      add(b + "attn_q_norm.weight", m.head, 1, 1.0f);
      add(b + "attn_k_norm.weight", m.head, 1, 1.0f);
    }
    add(b + "ffn_norm.weight", d, 1, 1.0f);
    add(b + "ffn_gate.weight", d, h);
    add(b + "ffn_up.weight", d, h);
    add(b + "ffn_down.weight", h, d);
  }
  return m;
}

// Writes the model with GgufWriter; matrices in m.type, vectors (norms, biases, factors) in F32
// as llama.cpp's converters keep them.
void write_tiny(const Tiny& m, const std::string& path) {
  inferkit::GgufWriter w;
  const std::string p = m.arch + ".";
  w.set("general.architecture", m.arch);
  w.set<std::uint32_t>(p + "embedding_length", m.dim);
  w.set<std::uint32_t>(p + "feed_forward_length", m.hidden);
  w.set<std::uint32_t>(p + "block_count", m.layers);
  w.set<std::uint32_t>(p + "attention.head_count", m.heads);
  w.set<std::uint32_t>(p + "attention.head_count_kv", m.kv_heads);
  w.set<std::uint32_t>(p + "context_length", 64);
  if (m.head * m.heads != m.dim) w.set<std::uint32_t>(p + "attention.key_length", m.head);
  w.set<float>(p + "rope.freq_base", float(m.base));
  w.set<float>(p + "attention.layer_norm_rms_epsilon", float(m.eps));
  std::vector<std::vector<inferkit::Float16>> f16;
  std::vector<std::vector<inferkit::BFloat16>> bf16;
  f16.reserve(m.tensors.size());
  bf16.reserve(m.tensors.size());
  for (const auto& t : m.tensors) {
    if (!t.q.empty()) {
      w.add_tensor(t.name, m.type, t.dims, t.q);
    } else if (t.dims.size() == 1 || m.type == inferkit::GgmlType::kF32) {
      w.add_tensor<float>(t.name, t.dims, t.v);
    } else if (m.type == inferkit::GgmlType::kF16) {
      auto& h = f16.emplace_back();
      for (float x : t.v) h.push_back(inferkit::to_float16(x));
      w.add_tensor<inferkit::Float16>(t.name, t.dims, h);
    } else {
      auto& h = bf16.emplace_back();
      for (float x : t.v) h.push_back(inferkit::to_bfloat16(x));
      w.add_tensor<inferkit::BFloat16>(t.name, t.dims, h);
    }
  }
  w.write(path);
}

// A quantized type: every matrix becomes ggml_quantize's blocks, and its values the blocks'
// dequantization (ggml_dequantize_row), so the reference runs on exactly the weights the file holds.
Tiny quantize_tiny(Tiny m) {
  for (auto& t : m.tensors) {
    if (t.dims.size() == 1) continue;
    const auto rows = Index(t.dims[1]), cols = Index(t.dims[0]);
    const auto q = inferkit::ggml_quantize(m.type, inferkit::MatrixView<const float>(t.v.data(), rows, cols), t.name);
    t.q.assign(q.bytes().begin(), q.bytes().end());
    for (Index r = 0; r < rows; ++r)
      inferkit::ggml_dequantize_row(q, r, std::span<float>(t.v.data() + r * cols, std::size_t(cols)));
  }
  return m;
}

bool is_block_type(inferkit::GgmlType t) {
  return t != inferkit::GgmlType::kF32 && t != inferkit::GgmlType::kF16 && t != inferkit::GgmlType::kBF16;
}

// ---- the fp64 reference forward, from the equations ----------------------------------------

using Vec = std::vector<double>;

Vec matvec(const std::vector<float>& w, const Vec& x, std::size_t rows) {  // y = W x, W [rows x x.size()]
  Vec y(rows, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < x.size(); ++c) y[r] += double(w[r * x.size() + c]) * x[c];
  return y;
}

Vec rms(const Vec& x, const float* g, double eps) {  // x / sqrt(mean(x^2) + eps) * g
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * double(g[i]);
  return y;
}

// RoPE (Su et al. 2021) on one head at position pos: llama rotates (2i, 2i+1), qwen2 / qwen3
// (i, i + d/2); pair i's angle is pos * base^(-2i/d) / factor_i.
void rope(double* v, int d, int pos, const Tiny& m) {
  const bool adjacent = m.arch == "llama";
  for (int i = 0; i < d / 2; ++i) {
    double freq = std::pow(m.base, -2.0 * i / d);
    if (m.rope_freqs) freq /= double(m.w("rope_freqs.weight")[std::size_t(i)]);
    const double a = pos * freq, c = std::cos(a), s = std::sin(a);
    const int i0 = adjacent ? 2 * i : i, i1 = adjacent ? 2 * i + 1 : i + d / 2;
    const double x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * c - x1 * s;
    v[i1] = x0 * s + x1 * c;
  }
}

// Logits [tokens x vocab] of a causal pass over `ids` from position 0.
std::vector<Vec> reference_logits(const Tiny& m, const std::vector<TokenId>& ids) {
  const std::size_t n = ids.size(), d = m.dim, hd = m.head, qd = m.heads * hd, kvd = m.kv_heads * hd;
  std::vector<Vec> x(n, Vec(d));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t i = 0; i < d; ++i) x[t][i] = m.w("token_embd.weight")[std::size_t(ids[t]) * d + i];
  for (int l = 0; l < m.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    std::vector<Vec> q(n), k(n), v(n);
    for (std::size_t t = 0; t < n; ++t) {
      const Vec xn = rms(x[t], m.w(b + "attn_norm.weight").data(), m.eps);
      q[t] = matvec(m.w(b + "attn_q.weight"), xn, qd);
      k[t] = matvec(m.w(b + "attn_k.weight"), xn, kvd);
      v[t] = matvec(m.w(b + "attn_v.weight"), xn, kvd);
      if (m.bias()) {
        for (std::size_t i = 0; i < qd; ++i) q[t][i] += m.w(b + "attn_q.bias")[i];
        for (std::size_t i = 0; i < kvd; ++i)
          k[t][i] += m.w(b + "attn_k.bias")[i], v[t][i] += m.w(b + "attn_v.bias")[i];
      }
      for (int h = 0; h < m.heads; ++h) {
        double* qh = q[t].data() + std::size_t(h) * hd;
        if (m.qk_norm()) {
          const Vec y = rms(Vec(qh, qh + hd), m.w(b + "attn_q_norm.weight").data(), m.eps);
          std::copy(y.begin(), y.end(), qh);
        }
        rope(qh, int(hd), int(t), m);
      }
      for (int h = 0; h < m.kv_heads; ++h) {
        double* kh = k[t].data() + std::size_t(h) * hd;
        if (m.qk_norm()) {
          const Vec y = rms(Vec(kh, kh + hd), m.w(b + "attn_k_norm.weight").data(), m.eps);
          std::copy(y.begin(), y.end(), kh);
        }
        rope(kh, int(hd), int(t), m);
      }
    }
    for (std::size_t t = 0; t < n; ++t) {
      Vec att(qd, 0.0);
      for (int h = 0; h < m.heads; ++h) {
        const std::size_t g = std::size_t(h / (m.heads / m.kv_heads));  // grouped-query: the head's KV head
        Vec s(t + 1);
        double mx = -1e300, z = 0;
        for (std::size_t u = 0; u <= t; ++u) {
          s[u] = 0;
          for (std::size_t i = 0; i < hd; ++i) s[u] += q[t][h * hd + i] * k[u][g * hd + i];
          s[u] /= std::sqrt(double(hd));
          mx = std::max(mx, s[u]);
        }
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (std::size_t u = 0; u <= t; ++u)
          for (std::size_t i = 0; i < hd; ++i) att[h * hd + i] += s[u] / z * v[u][g * hd + i];
      }
      const Vec o = matvec(m.w(b + "attn_output.weight"), att, d);
      for (std::size_t i = 0; i < d; ++i) x[t][i] += o[i];
      const Vec xn = rms(x[t], m.w(b + "ffn_norm.weight").data(), m.eps);
      Vec g = matvec(m.w(b + "ffn_gate.weight"), xn, std::size_t(m.hidden));
      const Vec u = matvec(m.w(b + "ffn_up.weight"), xn, std::size_t(m.hidden));
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];  // SwiGLU
      const Vec f = matvec(m.w(b + "ffn_down.weight"), g, d);
      for (std::size_t i = 0; i < d; ++i) x[t][i] += f[i];
    }
  }
  std::vector<Vec> out(n);
  const auto& cls = m.tied ? m.w("token_embd.weight") : m.w("output.weight");
  for (std::size_t t = 0; t < n; ++t)
    out[t] = matvec(cls, rms(x[t], m.w("output_norm.weight").data(), m.eps), std::size_t(m.vocab));
  return out;
}

// The runner's logits for `ids`, fed as one chunk, must match the reference.
// Block types: int8 activations (ggml_matvec) against the dequantized weights; `bound` is the
// worst |logit - fp64| allowed, relative to the largest |logit|.
void check_against_reference(const Tiny& shape, std::uint64_t seed, double bound = 2e-5) {
  const Tiny m = is_block_type(shape.type) ? quantize_tiny(make_tiny(shape, seed)) : make_tiny(shape, seed);
  const std::string path = temp_path(m.arch + "_" + inferkit::ggml_type_name(m.type) + ".gguf");
  write_tiny(m, path);
  const auto model = llama2c::Model::load_any(path);
  CHECK(model.config().head_size() == m.head);
  CHECK(model.config().shared_classifier == m.tied);
  const std::vector<TokenId> ids = {1, 7, 39, 0, 22, 13, 5, 30, 2, 17};
  llama2c::Cache cache(model.config(), {});
  std::vector<float> logits(ids.size() * std::size_t(m.vocab));
  llama2c::forward(model, cache, ids.data(), Index(ids.size()), 0, logits.data());
  const auto ref = reference_logits(m, ids);
  double worst = 0, scale = 0;
  for (std::size_t t = 0; t < ids.size(); ++t)
    for (int v = 0; v < m.vocab; ++v) {
      worst =
          std::max(worst, std::abs(double(logits[t * std::size_t(m.vocab) + std::size_t(v)]) - ref[t][std::size_t(v)]));
      scale = std::max(scale, std::abs(ref[t][std::size_t(v)]));
    }
  INFO(m.arch << " " << inferkit::ggml_type_name(m.type) << ": worst |logit - fp64| " << worst << ", largest |logit| "
              << scale);
  CHECK(scale > 0.5);                   // the model does something
  CHECK(worst < bound * scale + 1e-5);  // float32 arithmetic over a handful of dot products
  // Every type but F32 stays in the file's type, zero-copy: the projections are views of the
  // mapped file (no owned bytes, the file's element type), so the resident memory is the file's.
  CHECK(model.ggml_backed() == (m.type != inferkit::GgmlType::kF32));
  if (model.ggml_backed()) {
    for (const auto p : {llama2c::Proj::kQ, llama2c::Proj::kW2, llama2c::Proj::kClassifier}) {
      CHECK(model.ggml_weights(p, 1).type() == m.type);
      CHECK(!model.ggml_weights(p, 1).owns_data());
    }
  }
  if (model.ggml_backed()) {  // batched prefill (ggml_matmul) and one-token steps (ggml_matvec)
    std::vector<float> chunk(logits.size());
    llama2c::Cache c2(model.config(), {});
    llama2c::forward(model, c2, ids.data(), Index(ids.size()), 0, chunk.data(), {.batched = true});
    double gap = 0;
    for (std::size_t i = 0; i < chunk.size(); ++i) gap = std::max(gap, std::abs(double(chunk[i]) - logits[i]));
    INFO("batched vs one-token: " << gap);
    CHECK(gap < 1e-4 * scale + 1e-5);
  }
  std::filesystem::remove(path);
}

}  // namespace

TEST_CASE("stories260K.gguf (llama.cpp's conversion) gives llama2.c's reference greedy ids", "[example][gguf]") {
  const char* gguf = std::getenv("INFERKIT_TEST_GGUF");
  if (!gguf) {
    WARN("INFERKIT_TEST_GGUF is not set: skipped");
    return;
  }
  const auto dir = std::filesystem::path(gguf).parent_path();
  const auto expect = read_ids((dir / "stories260K_greedy256.txt").string());
  REQUIRE(expect.size() == 256);
  const auto m = llama2c::Model::load_any(gguf);
  CHECK(m.config().dim == 64);
  CHECK(m.config().n_kv_heads == 4);
  CHECK_FALSE(m.config().shared_classifier);  // the converter writes output.weight
  llama2c::SamplingConfig s;
  s.params.temperature = 0;
  CHECK(llama2c::generate(m, {}, 256, s) == expect);
}

TEST_CASE("GGUF llama, qwen2 and qwen3 models match an fp64 reference forward", "[example][gguf]") {
  SECTION("llama F32, untied, Llama 3 rope_freqs") {
    Tiny t;
    t.rope_freqs = true;
    t.base = 500000.0;
    check_against_reference(t, 1);
  }
  SECTION("llama F16, tied, MHA") {
    Tiny t;
    t.type = inferkit::GgmlType::kF16;
    t.tied = true;
    t.kv_heads = 4;
    check_against_reference(t, 2);
  }
  SECTION("llama BF16") {
    Tiny t;
    t.type = inferkit::GgmlType::kBF16;
    check_against_reference(t, 3);
  }
  SECTION("qwen2: Q/K/V biases, half-split RoPE") {
    Tiny t;
    t.arch = "qwen2";
    t.base = 1000000.0;
    t.eps = 1e-6;
    t.tied = true;
    check_against_reference(t, 4);
  }
  SECTION("qwen3: per-head Q/K RMSNorm, head_size * heads != dim") {
    Tiny t;
    t.arch = "qwen3";
    t.head = 16;  // 4 heads x 16 = 64 != dim 32
    t.type = inferkit::GgmlType::kF16;
    t.eps = 1e-6;
    check_against_reference(t, 5);
  }
}

TEST_CASE(
    "GGUF Q8_0 / Q4_0 / Q4_1 models run zero-copy within a bound of the fp64 forward over their dequantized weights",
    "[example][gguf]") {
  // The one approximation left is ggml_matvec's int8 activations (one scale per 32 values, about
  // 1/254 relative per input), measured at 2.6-2.8% of the largest logit after two layers; with
  // float activations (ggml_matvec_float in place of ggml_matvec) the same files gave 1e-6.
  Tiny t;
  t.hidden = 64;  // rows of blocks of 32
  SECTION("Q8_0, untied") {
    t.type = inferkit::GgmlType::kQ8_0;
    check_against_reference(t, 21, 4e-2);
  }
  SECTION("Q4_0, tied (the classifier is the quantized embedding)") {
    t.type = inferkit::GgmlType::kQ4_0;
    t.tied = true;
    check_against_reference(t, 22, 4e-2);
  }
  SECTION("qwen2 Q4_1: biases stay F32") {
    t.arch = "qwen2";
    t.type = inferkit::GgmlType::kQ4_1;
    check_against_reference(t, 23, 4e-2);
  }
}

TEST_CASE("GGUF models: an unknown architecture and an unsupported tensor type are refused by name",
          "[example][gguf]") {
  SECTION("architecture") {
    Tiny t = make_tiny({}, 6);
    t.arch = "gpt2";
    const std::string path = temp_path("gpt2.gguf");
    write_tiny(t, path);
    CHECK_THROWS_WITH(llama2c::Model::load_any(path), Catch::Contains("general.architecture = 'gpt2'"));
    std::filesystem::remove(path);
  }
  SECTION("tensor type") {
    const Tiny t = make_tiny({}, 7);
    const std::string src = temp_path("f32.gguf");
    write_tiny(t, src);
    const auto file = inferkit::GgufFile::open(src);
    const inferkit::GgufWriter w = inferkit::GgufWriter::from(file);
    // blk.1.ffn_up as Q8_0: blocks of 32 = a binary16 scale and 32 int8 codes (34 bytes)
    std::vector<std::byte> q8(std::size_t(t.hidden) * (std::size_t(t.dim) / 32) * 34, std::byte{0});
    inferkit::GgufWriter out;
    for (const auto& kv : w.metadata()) out.set(kv.key, kv.value);
    for (const auto& x : w.tensors())
      if (x.name == "blk.1.ffn_up.weight")
        out.add_tensor(x.name, inferkit::GgmlType::kQ8_0, x.dims, q8);
      else
        out.add_tensor(x.name, x.type, x.dims, x.data);
    const std::string path = temp_path("q8.gguf");
    out.write(path);
    // the float loader refuses it; load_any runs it (ggml-backed)
    CHECK_THROWS_WITH(llama2c::Model::from_gguf(inferkit::GgufFile::open(path)),
                      Catch::Contains("'blk.1.ffn_up.weight'") && Catch::Contains("Q8_0"));
    CHECK(llama2c::Model::load_any(path).ggml_backed());
    std::filesystem::remove(path);
  }
  SECTION("a block type the ggml kernels lack (Q8_1)") {
    const Tiny t = make_tiny({}, 8);
    const std::string src = temp_path("f32b.gguf");
    write_tiny(t, src);
    const auto file = inferkit::GgufFile::open(src);
    inferkit::GgufWriter out;
    for (const auto& kv : file.metadata()) out.set(kv.key, kv.value);
    std::vector<std::byte> q81(std::size_t(t.dim) * (std::size_t(t.dim) / 32) * 36, std::byte{0});
    const inferkit::GgufWriter w = inferkit::GgufWriter::from(file);
    for (const auto& x : w.tensors())
      if (x.name == "blk.0.attn_q.weight")
        out.add_tensor(x.name, inferkit::GgmlType::kQ8_1, x.dims, q81);
      else
        out.add_tensor(x.name, x.type, x.dims, x.data);
    const std::string path = temp_path("q81.gguf");
    out.write(path);
    CHECK_THROWS_WITH(llama2c::Model::load_any(path),
                      Catch::Contains("'blk.0.attn_q.weight'") && Catch::Contains("Q8_1"));
    std::filesystem::remove(path);
    std::filesystem::remove(src);
    std::filesystem::remove(src);
  }
  SECTION("a header asking for more than the file holds: refused before anything is allocated") {
    // Each case sets one key of a valid 2-layer file; the model would need gigabytes.
    const Tiny t = make_tiny({}, 9);
    const std::string src = temp_path("header_src.gguf"), path = temp_path("header.gguf");
    write_tiny(t, src);
    const std::vector<std::tuple<std::string, std::uint32_t, std::string>> cases = {
        {"llama.block_count", 1u << 28, "llama.block_count = 268435456 needs 9 tensors a layer"},
        {"llama.context_length", 1u << 30, "llama.context_length = 1073741824 is invalid for a float model"},
        {"llama.embedding_length", 1u << 20, "tensor 'token_embd.weight' has dims {32, 40"},
        {"llama.feed_forward_length", 1u << 30, "tensor 'blk.0.ffn_gate.weight' has dims {32, 48"}};
    for (const auto& [key, value, message] : cases) {
      INFO(key);
      {
        const auto file = inferkit::GgufFile::open(src);
        inferkit::GgufWriter w = inferkit::GgufWriter::from(file);
        w.set<std::uint32_t>(key, value);
        w.write(path);
      }
      CHECK_THROWS_WITH(llama2c::Model::load_any(path), Catch::Contains(message));
    }
    std::filesystem::remove(path);
    std::filesystem::remove(src);
  }
}

namespace {

// The lines of `out` made only of ids (the CLI's --print-ids line), as one list.
std::vector<TokenId> id_lines(const std::string& out) {
  std::istringstream lines(out);
  std::string l;
  std::vector<TokenId> got;
  while (std::getline(lines, l))
    if (!l.empty() && l.find_first_not_of("0123456789 ") == std::string::npos) {
      std::istringstream in(l);
      TokenId t;
      while (in >> t) got.push_back(t);
    }
  return got;
}

}  // namespace

TEST_CASE("convert: stories260K.bin written as GGUF by the runner gives the reference greedy ids", "[example][gguf]") {
  const std::string bin = cli_test::test_model();
  if (bin.empty()) {
    WARN("INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  const auto expect = read_ids((std::filesystem::path(bin).parent_path() / "stories260K_greedy256.txt").string());
  const std::string out = temp_path("converted.gguf");
  const auto [status, log] = run_cli("convert --model " + bin + " --out " + out);
  INFO(log);
  REQUIRE(status == 0);
  const auto f = inferkit::GgufFile::open(out);
  CHECK(f.get<std::string>("general.architecture") == "llama");
  CHECK_FALSE(f.find_tensor("output.weight").has_value());  // llama2.c's shared classifier: tied
  const auto [gs, gen] = run_cli("generate --model " + out + " --temperature 0 --steps 256 --print-ids");
  REQUIRE(gs == 0);
  CHECK(id_lines(gen) == expect);
  std::filesystem::remove(out);
}

TEST_CASE("text in, text out: a GGUF model with llama.cpp's SentencePiece vocabulary", "[example][gguf]") {
  const char* dir = std::getenv("INFERKIT_TEST_VOCAB_DIR");
  if (!dir) {
    WARN("INFERKIT_TEST_VOCAB_DIR is not set: skipped");
    return;
  }
  const std::string vocab = std::string(dir) + "/ggml-vocab-llama-spm.gguf";
  // llama.cpp's ids for "Hello world" and " Hello world!" (ggml-vocab-llama-spm.gguf.out), BOS = 1 first.
  auto [ts, tok] = run_cli("tokenize --model " + vocab + " --text \"Hello world\"");
  REQUIRE(ts == 0);
  CHECK(id_lines(tok) == std::vector<TokenId>{1, 15043, 3186});
  std::tie(ts, tok) = run_cli("tokenize --model " + vocab + " --text \" Hello world!\"");
  CHECK(id_lines(tok) == std::vector<TokenId>{1, 29871, 15043, 3186, 29991});
  std::tie(ts, tok) = run_cli("tokenize --model " + vocab + " --ids \"15043 29892 3186 29991\"");
  CHECK(tok == "Hello, world!\n");
  CHECK_THAT(run_cli("tokenize --model " + vocab).second, Catch::Contains("tokenize needs one of --text"));

  // The same random weights as a llama2.c checkpoint and as GGUF with the vocabulary: the text
  // prompt must run exactly as llama.cpp's ids of it do on the checkpoint.
  const std::string shape =
      "--dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 --vocab 32000 --seq-len 64 --seed 9";
  const std::string bin = temp_path("spm.bin"), gguf = temp_path("spm.gguf");
  REQUIRE(run_cli("make-random " + shape + " --out " + bin).first == 0);
  REQUIRE(run_cli("make-random " + shape + " --out " + gguf + " --vocab-from " + vocab).first == 0);
  const auto [bs, by_ids] =
      run_cli("generate --model " + bin + " --prompt-ids \"15043 3186\" --temperature 0 --steps 12 --print-ids");
  REQUIRE(bs == 0);
  const auto [gs, by_text] =
      run_cli("generate --model " + gguf + " --prompt \"Hello world\" --temperature 0 --steps 12 --print-ids");
  INFO(by_text);
  REQUIRE(gs == 0);
  const auto ids = id_lines(by_ids);
  REQUIRE(ids.size() == 12);
  CHECK(id_lines(by_text) == ids);
  // The streamed text: the prompt, then the generated tokens' text (decoded by the vocabulary).
  std::string id_text;
  for (TokenId t : ids) id_text += " " + std::to_string(t);
  const auto [ds, decoded] = run_cli("tokenize --model " + vocab + " --ids \"" + id_text + "\"");
  REQUIRE(ds == 0);
  CHECK(by_text.rfind("Hello world", 0) == 0);
  CHECK(by_text.find(decoded.substr(0, decoded.size() - 1)) != std::string::npos);
  std::filesystem::remove(bin);
  std::filesystem::remove(gguf);
}

TEST_CASE("batched prefill (one GEMM per projection) gives the one-token logits up to rounding", "[example][gguf]") {
  Tiny shape;
  shape.arch = "qwen2";
  const Tiny t = make_tiny(shape, 11);
  const std::string path = temp_path("batched.gguf");
  write_tiny(t, path);
  const auto m = llama2c::Model::load_any(path);
  const std::vector<TokenId> ids = {3, 9, 27, 1, 0, 38, 12, 5, 19, 33, 2, 8};
  const auto V = std::size_t(t.vocab);
  std::vector<float> chunk(ids.size() * V), one(ids.size() * V);
  llama2c::Cache c1(m.config(), {}), c2(m.config(), {});
  llama2c::forward(m, c1, ids.data(), Index(ids.size()), 0, chunk.data(), {.batched = true});
  for (std::size_t i = 0; i < ids.size(); ++i) llama2c::forward(m, c2, &ids[i], 1, std::int32_t(i), one.data() + i * V);
  const auto ref = reference_logits(t, ids);
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    CHECK(chunk[i] == Approx(one[i]).margin(1e-5));
    CHECK(double(chunk[i]) == Approx(ref[i / V][i % V]).margin(1e-4));
  }
  std::filesystem::remove(path);
}

TEST_CASE("bench prints pp and tg rows; serve gives the same tokens on 1 and 2 threads", "[example][gguf]") {
  const char* gguf = std::getenv("INFERKIT_TEST_GGUF");
  if (!gguf) {
    WARN("INFERKIT_TEST_GGUF is not set: skipped");
    return;
  }
  const auto [bs, bench] = run_cli(std::string("bench --model ") + gguf + " --pp 32 --tg 8 --reps 2 --threads 1");
  INFO(bench);
  REQUIRE(bs == 0);
  CHECK_THAT(bench, Catch::Contains("| 1 | pp32 |") && Catch::Contains("| 1 | tg8 |"));
  // Output ids (not timings) of every request, for a thread count.
  const auto serve_ids = [&](int threads) {
    const auto [s, out] =
        cli_test::shell(std::string(INFERKIT_LLAMA2C_BINARY) + " serve --model " + gguf +
                        " --synthetic 6 --temperature 0 --threads " + std::to_string(threads) + " 2>/dev/null");
    REQUIRE(s == 0);
    std::vector<std::string> ids;
    std::istringstream lines(out);
    for (std::string l; std::getline(lines, l);)
      if (const auto a = l.find("\"output_ids\""); a != std::string::npos)
        ids.push_back(l.substr(a, l.find(']', a) - a));
    return ids;
  };
  const auto one = serve_ids(1);
  CHECK(one.size() == 6);
  CHECK(serve_ids(2) == one);
}

TEST_CASE("quantize: stories260K.gguf in Q8_0 runs, its greedy ids share a prefix with the F32 ids",
          "[example][gguf]") {
  const char* gguf = std::getenv("INFERKIT_TEST_GGUF");
  if (!gguf) {
    WARN("INFERKIT_TEST_GGUF is not set: skipped");
    return;
  }
  const auto expect = read_ids((std::filesystem::path(gguf).parent_path() / "stories260K_greedy256.txt").string());
  const std::string out = temp_path("q8_0.gguf");
  const auto [qs, qlog] = run_cli(std::string("quantize --model ") + gguf + " --qtype q8_0 --out " + out);
  INFO(qlog);
  REQUIRE(qs == 0);
  const auto f = inferkit::GgufFile::open(out);
  CHECK(f.tensor("blk.0.attn_q.weight").type() == inferkit::GgmlType::kQ8_0);
  CHECK(f.tensor("blk.0.ffn_down.weight").type() == inferkit::GgmlType::kF32);  // rows of 172: no block divides
  CHECK(f.tensor("blk.0.attn_norm.weight").type() == inferkit::GgmlType::kF32);
  CHECK(f.get<std::string>("general.architecture") == "llama");
  const auto [gs, gen] = run_cli("generate --model " + out + " --temperature 0 --steps 256 --print-ids");
  REQUIRE(gs == 0);
  const auto got = id_lines(gen);
  REQUIRE(got.size() == expect.size());
  std::size_t same = 0;
  while (same < got.size() && got[same] == expect[same]) ++same;
  INFO("greedy prefix shared with F32: " << same << " of 256");
  CHECK(same >= 8);  // measured 10: the int8 activations of a 260K-parameter model flip an argmax early
  CHECK_THAT(run_cli("generate --model " + out + " --weights int8 --steps 4").second,
             Catch::Contains("--weights") && Catch::Contains("Q8_0"));
  std::filesystem::remove(out);
}

TEST_CASE("serve on quantized and F16 GGUF models: every greedy output equals generate(), on 1 and 2 threads",
          "[example][gguf][serve]") {
  // serve's batched forward runs ggml_matmul over the iteration's rows (prefill chunks and
  // decode rows of several requests at once); generate() runs the same file one request alone
  // (one prefill chunk, then ggml_matvec steps over a dense cache). Greedy ids must agree.
  Tiny shape;
  shape.hidden = 64;  // rows of blocks of 32
  shape.vocab = 64;
  for (const auto type : {inferkit::GgmlType::kQ8_0, inferkit::GgmlType::kQ4_0, inferkit::GgmlType::kF16}) {
    shape.type = type;
    shape.tied = type == inferkit::GgmlType::kQ4_0;
    INFO(inferkit::ggml_type_name(type));
    const Tiny t = is_block_type(type) ? quantize_tiny(make_tiny(shape, 31)) : make_tiny(shape, 31);
    const std::string path = temp_path(std::string("serve_") + inferkit::ggml_type_name(type) + ".gguf");
    write_tiny(t, path);
    const auto m = llama2c::Model::load_any(path);
    REQUIRE(m.ggml_backed());
    std::mt19937 rng(5);
    std::vector<llama2c::TraceRequest> trace;
    for (int i = 0; i < 6; ++i) {
      llama2c::TraceRequest r;
      r.arrival_ms = 1.0 * i;
      r.prompt = {m.config().bos};
      for (int k = 0; k < 2 + 3 * i; ++k) r.prompt.push_back(TokenId(rng() % 64));
      r.max_new_tokens = 4 + i;
      r.sampling.params.temperature = 0.0f;
      trace.push_back(r);
    }
    llama2c::SamplingConfig greedy;
    greedy.params.temperature = 0.0f;
    std::vector<std::vector<TokenId>> alone;
    for (const auto& r : trace)
      alone.push_back(
          llama2c::generate(m, std::vector<TokenId>(r.prompt.begin() + 1, r.prompt.end()), r.max_new_tokens, greedy));
    for (const bool deterministic : {false, true})
      for (const int threads : {1, 2}) {
        INFO("threads " << threads << (deterministic ? ", deterministic" : ""));
        llama2c::IterationClock clock(1.0);
        llama2c::ServeOptions o;
        o.scheduler.max_batched_tokens = 12;  // prefills chunked, and mixed with other requests' decode rows
        o.scheduler.max_sequences = 4;
        o.scheduler.max_prefill_chunk = 5;
        o.page_size = 4;
        o.deterministic = deterministic;
        o.num_threads = threads;
        o.clock = &clock;
        llama2c::set_runner_threads(threads);
        const auto rep = llama2c::serve(m, trace, o);
        llama2c::set_runner_threads(0);
        REQUIRE(rep.results.size() == trace.size());
        for (std::size_t i = 0; i < trace.size(); ++i) {
          INFO("request " << i);
          CHECK(rep.results[i].output == alone[i]);
        }
      }
    std::filesystem::remove(path);
  }
}

TEST_CASE("serve traces with text prompts: BOS as the GGUF vocabulary's add_bos says", "[example][gguf][serve]") {
  const char* dir = std::getenv("INFERKIT_TEST_VOCAB_DIR");
  if (!dir) {
    WARN("INFERKIT_TEST_VOCAB_DIR is not set: skipped");
    return;
  }
  // SentencePiece (Llama: add_bos true, BOS 1) and GPT-2 (no BOS): llama.cpp's ids of "Hello
  // world" (the vocabularies' .out files), with BOS first where the vocabulary adds it.
  const std::vector<std::tuple<std::string, int, std::vector<TokenId>>> cases = {
      {"ggml-vocab-llama-spm.gguf", 32000, {1, 15043, 3186}}, {"ggml-vocab-gpt-2.gguf", 50257, {15496, 995}}};
  for (const auto& [file, vocab, ids] : cases) {
    INFO(file);
    const std::string gguf = temp_path("trace_" + file), trace = temp_path("trace_" + file + ".jsonl");
    REQUIRE(run_cli("make-random --dim 32 --hidden 64 --layers 1 --heads 2 --kv-heads 1 --seq-len 64 --seed 3 --type "
                    "f16 --vocab " +
                    std::to_string(vocab) + " --out " + gguf + " --vocab-from " + std::string(dir) + "/" + file)
                .first == 0);
    std::string id_list;
    for (TokenId t : ids) id_list += (id_list.empty() ? "" : ", ") + std::to_string(t);
    {
      std::ofstream f(trace);
      f << R"({"prompt": "Hello world", "max_new_tokens": 6, "temperature": 0})"
        << "\n"
        << R"({"prompt_ids": [)" << id_list << R"(], "max_new_tokens": 6, "temperature": 0})"
        << "\n";
    }
    const auto [s, out] = cli_test::shell(std::string(INFERKIT_LLAMA2C_BINARY) + " serve --model " + gguf +
                                          " --trace " + trace + " --virtual-time 1 2>&1");
    INFO(out);
    REQUIRE(s == 0);
    std::vector<std::string> got;
    std::istringstream lines(out);
    for (std::string l; std::getline(lines, l);)
      if (const auto a = l.find("\"output_ids\""); a != std::string::npos)
        got.push_back(l.substr(a, l.find(']', a) - a));
    REQUIRE(got.size() == 2);
    CHECK(got[0] == got[1]);  // the text prompt encodes (with or without BOS) to exactly the listed ids
    std::filesystem::remove(gguf);
    std::filesystem::remove(trace);
  }
}
