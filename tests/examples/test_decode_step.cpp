// examples/decode_step: runs the program and recomputes every step it prints in double
// precision, written here from the layer's equations (RMSNorm, adjacent-pair RoPE at base
// 10000, grouped-query causal softmax attention, SwiGLU, tied classifier), teacher-forced with
// the tokens it printed: head 0's attention output must match, and each sampled token must be
// one of the 8 most probable (the example samples with top-k 8).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.hpp"

namespace {

constexpr int kVocab = 64, kDim = 32, kHidden = 64, kHeads = 4, kKvHeads = 2, kHeadDim = 8, kTopK = 8;
using Mat = std::vector<std::vector<double>>;

// The example's weight formula (the inputs; computed in float as the example does).
Mat weights(int id, int rows, int cols) {
  Mat w(static_cast<std::size_t>(rows), std::vector<double>(static_cast<std::size_t>(cols)));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      w[r][c] = std::sin(1.0f + 0.9f * float(id) + 0.37f * float(r) + 0.23f * float(c) + 0.011f * float(r * c)) /
                std::sqrt(float(cols));
  return w;
}

std::vector<double> times(const Mat& w, const std::vector<double>& x) {
  std::vector<double> y(w.size(), 0.0);
  for (std::size_t r = 0; r < w.size(); ++r)
    for (std::size_t c = 0; c < x.size(); ++c) y[r] += w[r][c] * x[c];
  return y;
}

std::vector<double> rms(const std::vector<double>& x) {
  double ss = 0;
  for (double v : x) ss += v * v;
  std::vector<double> y(x);
  for (double& v : y) v /= std::sqrt(ss / double(x.size()) + 1e-5);
  return y;
}

// Rotates each head's adjacent pairs (2i, 2i + 1) by pos * 10000^(-2i / head_dim).
void rope(std::vector<double>& x, int heads, int pos) {
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < kHeadDim / 2; ++i) {
      const double a = pos * std::pow(10000.0, -2.0 * i / kHeadDim);
      double& x0 = x[h * kHeadDim + 2 * i];
      double& x1 = x[h * kHeadDim + 2 * i + 1];
      const double r0 = x0 * std::cos(a) - x1 * std::sin(a), r1 = x0 * std::sin(a) + x1 * std::cos(a);
      x0 = r0;
      x1 = r1;
    }
}

struct Step {
  int pos = 0, token = 0, next = 0;
  std::vector<double> attn0;
};

std::vector<Step> run_example() {
  const auto [status, out] = cli_test::shell(INFERKIT_DECODE_STEP_BINARY);
  REQUIRE(status == 0);
  std::vector<Step> steps;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    Step s;
    std::string w;
    in >> w >> s.pos >> w >> s.token >> w;
    REQUIRE(w == "attn0");
    s.attn0.resize(kHeadDim);
    for (double& v : s.attn0) in >> v;
    in >> w >> s.next;
    REQUIRE(w == "next");
    REQUIRE(in);
    steps.push_back(s);
  }
  return steps;
}

}  // namespace

TEST_CASE("decode_step: every step equals a double-precision recomputation of the layer", "[example][decode_step]") {
  const auto steps = run_example();
  REQUIRE(steps.size() == 12);
  const Mat embed = weights(0, kVocab, kDim), wq = weights(1, kDim, kDim), wk = weights(2, kKvHeads * kHeadDim, kDim),
            wv = weights(3, kKvHeads * kHeadDim, kDim), wo = weights(4, kDim, kDim), w1 = weights(5, kHidden, kDim),
            w3 = weights(6, kHidden, kDim), w2 = weights(7, kDim, kHidden);
  std::vector<std::vector<double>> keys, values;  // per position, [kv heads * head_dim]
  double worst = 0;
  for (std::size_t t = 0; t < steps.size(); ++t) {
    const Step& s = steps[t];
    INFO("position " << t);
    CHECK(s.pos == static_cast<int>(t));
    CHECK(s.token == (t == 0 ? 1 : steps[t - 1].next));  // it feeds what it sampled, after BOS
    std::vector<double> x = embed[static_cast<std::size_t>(s.token)];
    const auto xn = rms(x);
    auto q = times(wq, xn), k = times(wk, xn), v = times(wv, xn);
    rope(q, kHeads, s.pos);
    rope(k, kKvHeads, s.pos);
    keys.push_back(k);
    values.push_back(v);
    std::vector<double> att(kDim, 0.0);
    for (int h = 0; h < kHeads; ++h) {
      const int g = h / (kHeads / kKvHeads);  // grouped-query: consecutive query heads share a KV head
      std::vector<double> score;
      for (const auto& key : keys) {
        double d = 0;
        for (int i = 0; i < kHeadDim; ++i) d += q[h * kHeadDim + i] * key[g * kHeadDim + i];
        score.push_back(d / std::sqrt(double(kHeadDim)));
      }
      const double mx = *std::max_element(score.begin(), score.end());
      double z = 0;
      for (double& sc : score) z += (sc = std::exp(sc - mx));
      for (std::size_t p = 0; p < score.size(); ++p)
        for (int i = 0; i < kHeadDim; ++i) att[h * kHeadDim + i] += score[p] / z * values[p][g * kHeadDim + i];
    }
    for (int i = 0; i < kHeadDim; ++i) {
      worst = std::max(worst, std::abs(att[i] - s.attn0[static_cast<std::size_t>(i)]));
      CHECK(s.attn0[static_cast<std::size_t>(i)] == Approx(att[i]).margin(1e-4));
    }
    const auto o = times(wo, att);
    for (int i = 0; i < kDim; ++i) x[i] += o[i];
    const auto xf = rms(x);
    auto h1 = times(w1, xf);
    const auto h3 = times(w3, xf);
    for (int i = 0; i < kHidden; ++i) h1[i] = h1[i] / (1.0 + std::exp(-h1[i])) * h3[i];
    const auto f = times(w2, h1);
    for (int i = 0; i < kDim; ++i) x[i] += f[i];
    const auto logits = times(embed, rms(x));
    // Top-k 8: the sampled token's logit is at least the 8th largest (a 1e-4 margin for ties).
    std::vector<double> sorted(logits);
    std::sort(sorted.rbegin(), sorted.rend());
    REQUIRE(s.next >= 0);
    REQUIRE(s.next < kVocab);
    CHECK(logits[static_cast<std::size_t>(s.next)] >= sorted[kTopK - 1] - 1e-4);
  }
  INFO("largest attention difference " << worst);
  CHECK(worst < 1e-4);
}
