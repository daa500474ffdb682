// decode_step: one transformer layer generating tokens one at a time with a KV cache and a
// sampler, the loop every decoder engine runs per token:
//
//   embed the token -> RMSNorm -> q, k, v -> RoPE -> append k, v to the cache -> attention of q
//   over every cached position -> output projection + residual -> SwiGLU FFN + residual ->
//   logits (tied embedding) -> sample the next token
//
// The model code (matrices, norm, FFN) is plain C++ here, as in your engine; the attention,
// the cache, RoPE and the sampler are inferkit calls. The weights come from a formula instead
// of a checkpoint, so the program runs anywhere and tests/examples/test_decode_step.cpp can
// recompute every step in double precision. Each line printed: the position, the token fed,
// head 0's attention output, the token sampled.
#include <cmath>
#include <cstdio>
#include <vector>

#include <inferkit/attention/attention.hpp>
#include <inferkit/attention/rope.hpp>
#include <inferkit/kv/dense_cache.hpp>
#include <inferkit/sampling/presets.hpp>

namespace {

constexpr int kVocab = 64, kDim = 32, kHidden = 64, kHeads = 4, kKvHeads = 2, kHeadDim = kDim / kHeads, kSteps = 12;
using Vec = std::vector<float>;

// Matrix `id` [rows x cols], row-major: a smooth formula scaled by 1/sqrt(cols).
Vec matrix(int id, int rows, int cols) {
  Vec w(static_cast<std::size_t>(rows * cols));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      w[static_cast<std::size_t>(r * cols + c)] =
          std::sin(1.0f + 0.9f * float(id) + 0.37f * float(r) + 0.23f * float(c) + 0.011f * float(r * c)) /
          std::sqrt(float(cols));
  return w;
}

// y = W x, W row-major [y.size() x x.size()].
void matvec(const Vec& w, const Vec& x, Vec& y) {
  for (std::size_t r = 0; r < y.size(); ++r) {
    float s = 0;
    for (std::size_t c = 0; c < x.size(); ++c) s += w[r * x.size() + c] * x[c];
    y[r] = s;
  }
}

// RMSNorm with unit gain: x / sqrt(mean(x^2) + 1e-5).
Vec rmsnorm(const Vec& x) {
  float ss = 0;
  for (float v : x) ss += v * v;
  Vec out(x);
  for (float& v : out) v /= std::sqrt(ss / float(x.size()) + 1e-5f);
  return out;
}

}  // namespace

int main() {
  const Vec embed = matrix(0, kVocab, kDim), wq = matrix(1, kDim, kDim), wk = matrix(2, kKvHeads * kHeadDim, kDim),
            wv = matrix(3, kKvHeads * kHeadDim, kDim), wo = matrix(4, kDim, kDim), w1 = matrix(5, kHidden, kDim),
            w3 = matrix(6, kHidden, kDim), w2 = matrix(7, kDim, kHidden);
  inferkit::DenseKvCache<float> cache(/*layers=*/1, kKvHeads, kHeadDim, /*capacity=*/kSteps);
  inferkit::SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 8;
  const inferkit::SamplerChain sampler = inferkit::presets::huggingface(params);
  inferkit::SamplerState state = sampler.make_state();
  const inferkit::CounterRng rng(/*seed=*/7);  // draw i of seed 7: the same tokens on every run
  std::vector<inferkit::TokenId> tokens{1};    // BOS
  Vec q(kDim), k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim), att(kDim), h(kDim), h1(kHidden), h3(kHidden);
  Vec logits(kVocab);
  for (std::int32_t pos = 0; pos < kSteps; ++pos) {
    const inferkit::TokenId token = tokens.back();
    Vec x(embed.begin() + token * kDim, embed.begin() + (token + 1) * kDim);
    const Vec xn = rmsnorm(x);
    matvec(wq, xn, q), matvec(wk, xn, k), matvec(wv, xn, v);
    inferkit::apply_rope(inferkit::Tensor3View<float>(q.data(), 1, kHeads, kHeadDim), pos);
    inferkit::apply_rope(inferkit::Tensor3View<float>(k.data(), 1, kKvHeads, kHeadDim), pos);
    cache.append(0, inferkit::Tensor3View<const float>(k.data(), 1, kKvHeads, kHeadDim),
                 inferkit::Tensor3View<const float>(v.data(), 1, kKvHeads, kHeadDim));
    // Softmax(q k^T / sqrt(d)) v over positions 0..pos; query heads 2h, 2h+1 share KV head h.
    inferkit::attention(inferkit::Tensor3View<const float>(q.data(), 1, kHeads, kHeadDim), cache.source(0),
                        inferkit::Tensor3View<float>(att.data(), 1, kHeads, kHeadDim));
    matvec(wo, att, h);
    for (int i = 0; i < kDim; ++i) x[i] += h[i];
    const Vec xf = rmsnorm(x);
    matvec(w1, xf, h1), matvec(w3, xf, h3);
    for (int i = 0; i < kHidden; ++i) h1[i] = h1[i] / (1.0f + std::exp(-h1[i])) * h3[i];  // SwiGLU
    matvec(w2, h1, h);
    for (int i = 0; i < kDim; ++i) x[i] += h[i];
    matvec(embed, rmsnorm(x), logits);
    const inferkit::TokenId next = sampler.sample(logits, tokens, state, rng, tokens.size());
    sampler.accept(state, next);
    std::printf("pos %d token %d attn0", pos, token);
    for (int i = 0; i < kHeadDim; ++i) std::printf(" %.7g", att[i]);
    std::printf(" next %d\n", next);
    tokens.push_back(next);
  }
}
