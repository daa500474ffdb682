// mla_decode: a small decoder with DeepSeek-V2-Lite's multi-head latent attention (16 heads,
// kv_lora_rank 512, RoPE 64, nope 128, v 128) and random weights, running `eval` and
// `generate` over a bf16 latent cache (kv/latent_cache.hpp): per token and layer the cache
// keeps one 576-value latent row instead of 16 heads of keys and values.
//
//   layer: x -> RMSNorm -> q = W_q x (per head q_nope, q_pe), [c; k_pe] = W_dkv x ->
//          RMSNorm(c), RoPE(q_pe, k_pe) -> append [c; k_pe] to the latent cache ->
//          mla_attention (absorbed: W_UK into q, W_UV after the weighted sum) -> W_o + residual
//          -> SwiGLU FFN + residual;  logits = E RMSNorm(x) (tied embedding)
//
//   inferkit-mla-decode eval [tokens] [threads]      the mean negative log-likelihood of a
//        fixed token sequence, teacher-forced twice: one prefill pass over the whole sequence
//        (absorbed prefill) and token by token over the latent cache (absorbed decode); both
//        lines print the NLL and must agree to float rounding.
//   inferkit-mla-decode generate [tokens] [threads]  greedy generation from token 1: a prefill
//        of the first 4 tokens, then one decode step per token; prints the tokens and the
//        cache's bytes against materialized K/V.
//
// The model code (matrices, norms, FFN) is plain C++; attention, RoPE and the cache are inferkit.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <inferkit/attention/mla.hpp>
#include <inferkit/attention/rope.hpp>
#include <inferkit/core/half.hpp>
#include <inferkit/kv/latent_cache.hpp>
#include <inferkit/kv/memory_planner.hpp>

namespace {

constexpr int kVocab = 256, kDim = 256, kHidden = 512, kLayers = 2;
constexpr inferkit::MlaShape kShape{
    .num_heads = 16, .kv_lora_rank = 512, .qk_nope_dim = 128, .qk_rope_dim = 64, .v_head_dim = 128};
constexpr int kH = 16, kRank = 512, kRope = 64, kNope = 128, kV = 128, kQd = kNope + kRope;
using Vec = std::vector<float>;

// A [rows x cols] row-major matrix of N(0, 1 / cols) values from a fixed linear congruential
// generator (seeded per matrix): the same model everywhere.
Vec matrix(unsigned id, int rows, int cols) {
  Vec w(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  std::uint64_t s = 0x9E3779B97F4A7C15ull * (id + 1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
  for (float& x : w) {  // sum of 4 uniforms, centred: close enough to normal for random weights
    float u = 0;
    for (int k = 0; k < 4; ++k) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      u += static_cast<float>(s >> 40) / 16777216.0f;
    }
    x = (u - 2.0f) * 1.7320508f * scale;
  }
  return w;
}

// Y [n x rows] = X [n x cols] W^T for W [rows x cols].
void matmul(const Vec& w, const float* x, int n, int rows, int cols, float* y) {
#pragma omp parallel for schedule(static) if (static_cast <long>(n) * rows * cols > 100000)
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < n; ++t) {
      float acc = 0;
      for (int c = 0; c < cols; ++c) acc += w[static_cast<std::size_t>(r) * cols + c] * x[t * cols + c];
      y[t * rows + r] = acc;
    }
}

// RMSNorm with unit gain of each of n rows of width d (x may alias y).
void rmsnorm(const float* x, int n, int d, float* y) {
  for (int t = 0; t < n; ++t) {
    float ss = 0;
    for (int i = 0; i < d; ++i) ss += x[t * d + i] * x[t * d + i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + 1e-6f);
    for (int i = 0; i < d; ++i) y[t * d + i] = x[t * d + i] * inv;
  }
}

struct Layer {
  Vec wq = {}, wdkv = {}, wuk = {}, wuv = {}, wo = {}, w1 = {}, w2 = {}, w3 = {};
};

struct Model {
  Vec embed = matrix(0, kVocab, kDim);
  std::vector<Layer> layers;
  Model() {
    for (unsigned l = 0; l < kLayers; ++l) {
      const unsigned b = 10 * (l + 1);
      layers.push_back({matrix(b, kH * kQd, kDim), matrix(b + 1, kRank + kRope, kDim), matrix(b + 2, kH * kNope, kRank),
                        matrix(b + 3, kH * kV, kRank), matrix(b + 4, kDim, kH * kV), matrix(b + 5, kHidden, kDim),
                        matrix(b + 6, kDim, kHidden), matrix(b + 7, kHidden, kDim)});
    }
  }

  // Runs tokens [pos0, pos0 + n) through every layer, appending their latent rows to the cache,
  // and writes their logits [n x kVocab].
  void forward(const std::vector<int>& tokens, int pos0, inferkit::LatentCache<inferkit::BFloat16>& cache, int threads,
               Vec& logits) const {
    const int n = static_cast<int>(tokens.size());
    Vec x(static_cast<std::size_t>(n) * kDim), xn(x.size()), q(static_cast<std::size_t>(n) * kH * kQd);
    Vec lat(static_cast<std::size_t>(n) * (kRank + kRope)), att(static_cast<std::size_t>(n) * kH * kV), h(x.size());
    Vec c(static_cast<std::size_t>(n) * kRank), kpe(static_cast<std::size_t>(n) * kRope);
    Vec h1(static_cast<std::size_t>(n) * kHidden), h3(h1.size());
    for (int t = 0; t < n; ++t)
      std::copy_n(embed.begin() + static_cast<long>(tokens[t]) * kDim, kDim, x.begin() + static_cast<long>(t) * kDim);
    std::vector<std::int32_t> positions(static_cast<std::size_t>(n));
    for (int t = 0; t < n; ++t) positions[t] = pos0 + t;
    for (int l = 0; l < kLayers; ++l) {
      const Layer& L = layers[static_cast<std::size_t>(l)];
      rmsnorm(x.data(), n, kDim, xn.data());
      matmul(L.wq, xn.data(), n, kH * kQd, kDim, q.data());
      matmul(L.wdkv, xn.data(), n, kRank + kRope, kDim, lat.data());
      for (int t = 0; t < n; ++t) {
        std::copy_n(lat.begin() + static_cast<long>(t) * (kRank + kRope), kRank,
                    c.begin() + static_cast<long>(t) * kRank);
        std::copy_n(lat.begin() + static_cast<long>(t) * (kRank + kRope) + kRank, kRope,
                    kpe.begin() + static_cast<long>(t) * kRope);
      }
      rmsnorm(c.data(), n, kRank, c.data());  // DeepSeek's kv_a_layernorm (unit gain)
      // RoPE on the q_pe part of every head (a strided view) and on the shared k_pe.
      inferkit::apply_rope(inferkit::Tensor3View<float>(q.data() + kNope, n, kH, kRope, kH * kQd, kQd), positions);
      inferkit::apply_rope(inferkit::Tensor3View<float>(kpe.data(), n, 1, kRope), positions);
      cache.append(l, {c.data(), n, kRank}, {kpe.data(), n, kRope});
      const inferkit::MlaWeights w{{L.wuk.data(), kH, kNope, kRank}, {L.wuv.data(), kH, kV, kRank}};
      inferkit::mla_attention(kShape, {q.data(), n, kH, kQd}, cache.source(l), w, {att.data(), n, kH, kV},
                              {.num_threads = threads});
      matmul(L.wo, att.data(), n, kDim, kH * kV, h.data());
      for (std::size_t i = 0; i < x.size(); ++i) x[i] += h[i];
      rmsnorm(x.data(), n, kDim, xn.data());
      matmul(L.w1, xn.data(), n, kHidden, kDim, h1.data());
      matmul(L.w3, xn.data(), n, kHidden, kDim, h3.data());
      for (std::size_t i = 0; i < h1.size(); ++i) h1[i] = h1[i] / (1.0f + std::exp(-h1[i])) * h3[i];  // SwiGLU
      matmul(L.w2, h1.data(), n, kDim, kHidden, h.data());
      for (std::size_t i = 0; i < x.size(); ++i) x[i] += h[i];
    }
    rmsnorm(x.data(), n, kDim, xn.data());
    logits.resize(static_cast<std::size_t>(n) * kVocab);
    matmul(embed, xn.data(), n, kVocab, kDim, logits.data());
  }
};

inferkit::LatentCache<inferkit::BFloat16> new_cache() {
  return inferkit::LatentCache<inferkit::BFloat16>({.layers = kLayers, .kv_lora_rank = kRank, .rope_dim = kRope});
}

// -log softmax(logits)[target].
double nll(const float* logits, int target) {
  double m = logits[0];
  for (int i = 1; i < kVocab; ++i) m = std::max(m, double(logits[i]));
  double z = 0;
  for (int i = 0; i < kVocab; ++i) z += std::exp(double(logits[i]) - m);
  return m + std::log(z) - double(logits[target]);
}

int argmax(const float* logits) {
  int best = 0;
  for (int i = 1; i < kVocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int parse(const char* s, int lo, int hi, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) {
    std::fprintf(stderr, "mla_decode: %s must be an integer in [%d, %d], got '%s'\n", what, lo, hi, s);
    std::exit(2);
  }
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "generate";
  if (mode != "eval" && mode != "generate") {
    std::fprintf(stderr, "usage: inferkit-mla-decode eval|generate [tokens 2..512] [threads 0..64]\n");
    return 2;
  }
  const int n = argc > 2 ? parse(argv[2], 2, 512, "tokens") : 24;
  const int threads = argc > 3 ? parse(argv[3], 0, 64, "threads") : 0;
  const Model model;
  Vec logits;
  if (mode == "eval") {
    std::vector<int> seq(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) seq[i] = (37 * i * i + 11 * i + 1) % kVocab;  // a fixed sequence
    auto prefill_cache = new_cache();
    model.forward(seq, 0, prefill_cache, threads, logits);
    double total = 0;
    for (int i = 0; i + 1 < n; ++i) total += nll(logits.data() + static_cast<long>(i) * kVocab, seq[i + 1]);
    std::printf("eval prefill tokens %d nll %.6f\n", n, total / (n - 1));
    auto decode_cache = new_cache();
    total = 0;
    for (int i = 0; i + 1 < n; ++i) {
      model.forward({seq[i]}, i, decode_cache, threads, logits);
      total += nll(logits.data(), seq[i + 1]);
    }
    std::printf("eval decode tokens %d nll %.6f\n", n, total / (n - 1));
    return 0;
  }
  auto cache = new_cache();
  std::vector<int> tokens = {1, 17, 42, 99};
  model.forward(tokens, 0, cache, threads, logits);  // the prompt in one prefill chunk
  int next = argmax(logits.data() + static_cast<long>(tokens.size() - 1) * kVocab);
  std::printf("generate");
  for (int t : tokens) std::printf(" %d", t);
  while (static_cast<int>(tokens.size()) < n) {
    tokens.push_back(next);
    std::printf(" %d", next);
    if (static_cast<int>(tokens.size()) == n) break;
    model.forward({next}, static_cast<int>(tokens.size()) - 1, cache, threads, logits);
    next = argmax(logits.data());
  }
  const inferkit::LatentCachePlan plan{.layers = kLayers,
                                       .kv_lora_rank = kRank,
                                       .rope_dim = kRope,
                                       .num_heads = kH,
                                       .qk_nope_dim = kNope,
                                       .v_head_dim = kV};
  std::printf("\ncache tokens %lld bytes %zu materialized_bf16_bytes %.0f\n", static_cast<long long>(cache.length(0)),
              cache.bytes(), inferkit::materialized_mla_kv_bytes(plan, cache.length(0), 1, 2.0));
  return 0;
}
