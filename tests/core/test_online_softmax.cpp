#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "inferkit/core/online_softmax.hpp"

using inferkit::SoftmaxStats;

namespace {
struct Reference {
  std::vector<double> out;
  double lse;
};
// Direct softmax-weighted sum in double: the independent oracle.
Reference softmax_weighted(const std::vector<float>& s, const std::vector<std::vector<float>>& v, std::size_t d) {
  double m = -INFINITY;
  for (float x : s) m = std::max<double>(m, x);
  Reference r{std::vector<double>(d, 0.0), -INFINITY};
  if (m == -INFINITY) return r;
  double z = 0;
  for (std::size_t j = 0; j < s.size(); ++j) {
    const double w = std::exp(double(s[j]) - m);
    z += w;
    for (std::size_t k = 0; k < d; ++k) r.out[k] += w * v[j][k];
  }
  for (auto& x : r.out) x /= z;
  r.lse = m + std::log(z);
  return r;
}
}  // namespace

TEST_CASE("online softmax over a split equals the direct softmax", "[core][online_softmax]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 4);
  const std::size_t d = 19, n = 57;
  std::vector<float> s(n);
  std::vector<std::vector<float>> v(n, std::vector<float>(d));
  for (std::size_t j = 0; j < n; ++j) {
    s[j] = (j % 11 == 3) ? -INFINITY : nd(rng);
    for (auto& x : v[j]) x = nd(rng);
  }
  const Reference ref = softmax_weighted(s, v, d);
  for (std::size_t split : {0u, 1u, 20u, 56u, 57u}) {
    SoftmaxStats a, b;
    std::vector<float> acc_a(d, 0.0f), acc_b(d, 0.0f), out(d);
    for (std::size_t j = 0; j < n; ++j) {
      if (j < split)
        inferkit::online_softmax_add(a, acc_a, s[j], v[j]);
      else
        inferkit::online_softmax_add(b, acc_b, s[j], v[j]);
    }
    inferkit::online_softmax_merge(a, acc_a, b, acc_b);
    const float lse = inferkit::online_softmax_finish(a, acc_a, out);
    CHECK(lse == Approx(ref.lse).epsilon(1e-5));
    for (std::size_t k = 0; k < d; ++k) CHECK(out[k] == Approx(ref.out[k]).margin(1e-5));
  }
}

TEST_CASE("merge_attention_states combines normalized partials by their LSE", "[core][online_softmax]") {
  // Closed form: partial A has weight e^1, partial B weight e^3.
  std::vector<float> a{1, 2}, b{3, -1}, out(2);
  const float lse = inferkit::merge_attention_states(a, 1.0f, b, 3.0f, out);
  const double wa = std::exp(1.0), wb = std::exp(3.0);
  CHECK(lse == Approx(std::log(wa + wb)));
  CHECK(out[0] == Approx((wa * 1 + wb * 3) / (wa + wb)));
  CHECK(out[1] == Approx((wa * 2 - wb * 1) / (wa + wb)));
  // Aliasing the output with an input is allowed.
  inferkit::merge_attention_states(a, 1.0f, b, 3.0f, a);
  CHECK(a[0] == Approx(out[0]));
}

TEST_CASE("empty states merge to zeros and -inf, never NaN", "[core][online_softmax]") {
  std::vector<float> a{0, 0}, b{0, 0}, out{7, 7};
  const float lse = inferkit::merge_attention_states(a, -INFINITY, b, -INFINITY, out);
  CHECK(lse == -INFINITY);
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 0.0f);
  // One empty side leaves the other unchanged.
  std::vector<float> c{4, 5};
  CHECK(inferkit::merge_attention_states(a, -INFINITY, c, 2.5f, out) == 2.5f);
  CHECK(out[0] == 4.0f);
  CHECK(out[1] == 5.0f);

  SoftmaxStats e1, e2;
  std::vector<float> acc1(3, 0.0f), acc2(3, 0.0f), res(3, 9.0f);
  inferkit::online_softmax_merge(e1, acc1, e2, acc2);
  CHECK(inferkit::online_softmax_finish(e1, acc1, res) == -INFINITY);
  for (float x : res) CHECK(x == 0.0f);
}

TEST_CASE("online softmax rejects NaN and mismatched sizes", "[core][online_softmax]") {
  SoftmaxStats st;
  std::vector<float> acc(2, 0.0f), v(2, 1.0f), v3(3, 1.0f), out(2);
  CHECK_THROWS_WITH(inferkit::online_softmax_add(st, acc, NAN, v), Catch::Contains("score = nan"));
  CHECK_THROWS_WITH(inferkit::online_softmax_add(st, acc, 0.0f, v3), Catch::Contains("value.size() = 3"));
  CHECK_THROWS_WITH(inferkit::merge_attention_states(acc, NAN, v, 0.0f, out), Catch::Contains("lse_a = nan"));
  CHECK_THROWS_AS(inferkit::merge_attention_states(acc, 0.0f, v3, 0.0f, out), std::invalid_argument);
}

TEST_CASE("merge_attention_states over whole tensors merges every row by its LSE", "[core][online_softmax]") {
  // [T = 2, H = 3, d = 5]: row (t, h) of A has value t + h + k / 8 and LSE t - h, B its negation
  // and LSE h / 2; the closed form is the LSE-weighted mean.
  const inferkit::Index T = 2, H = 3, D = 5;
  std::vector<float> a(T * H * D), b(T * H * D), out(T * H * D), la(T * H), lb(T * H), lo(T * H);
  for (inferkit::Index t = 0; t < T; ++t)
    for (inferkit::Index h = 0; h < H; ++h) {
      la[t * H + h] = float(t - h);
      lb[t * H + h] = h == 1 ? -INFINITY : float(h) / 2;  // one empty side
      for (inferkit::Index k = 0; k < D; ++k) {
        a[(t * H + h) * D + k] = float(t + h) + float(k) / 8;
        b[(t * H + h) * D + k] = -a[(t * H + h) * D + k];
      }
    }
  using inferkit::MatrixView;
  using inferkit::Tensor3View;
  inferkit::merge_attention_states(
      Tensor3View<const float>(a.data(), T, H, D), MatrixView<const float>(la.data(), T, H),
      Tensor3View<const float>(b.data(), T, H, D), MatrixView<const float>(lb.data(), T, H),
      Tensor3View<float>(out.data(), T, H, D), MatrixView<float>(lo.data(), T, H));
  for (inferkit::Index t = 0; t < T; ++t)
    for (inferkit::Index h = 0; h < H; ++h) {
      const double wa = std::exp(double(la[t * H + h])), wb = h == 1 ? 0.0 : std::exp(double(lb[t * H + h]));
      CHECK(lo[t * H + h] == Approx(std::log(wa + wb)).margin(1e-6));
      for (inferkit::Index k = 0; k < D; ++k) {
        const double x = a[(t * H + h) * D + k];
        CHECK(out[(t * H + h) * D + k] == Approx((wa * x - wb * x) / (wa + wb)).margin(1e-6));
      }
    }
  CHECK_THROWS_WITH(inferkit::merge_attention_states(
                        Tensor3View<const float>(a.data(), T, H, D), MatrixView<const float>(la.data(), T, H - 1),
                        Tensor3View<const float>(b.data(), T, H, D), MatrixView<const float>(lb.data(), T, H),
                        Tensor3View<float>(out.data(), T, H, D)),
                    Catch::Contains("lse_a.cols() = 2"));
}

TEST_CASE("merge_attention_states over n partials equals the fp64 softmax of their union", "[core][online_softmax]") {
  // n partials of one [T = 1, H = 2, d = 4] batch, each the exact softmax over its own scores; the
  // merge must give the softmax over all scores. n = 5000 one-key partials checks that the error
  // does not grow with n (the LSE is not rounded per merge).
  using inferkit::MatrixView;
  using inferkit::Tensor3View;
  const std::size_t D = 4;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{5000}}) {
    std::mt19937 rng(static_cast<unsigned>(n));
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<std::vector<float>> o(n, std::vector<float>(2 * D)), l(n, std::vector<float>(2));
    std::vector<std::vector<float>> scores(2);
    std::vector<std::vector<std::vector<float>>> values(2);
    for (std::size_t i = 0; i < n; ++i) {
      for (int h = 0; h < 2; ++h) {
        if (h == 1 && i % 3 == 1) {  // some partials see no key of head 1
          l[i][1] = -INFINITY;
          continue;
        }
        std::vector<float> s{nd(rng), nd(rng)};
        std::vector<std::vector<float>> v{std::vector<float>(D), std::vector<float>(D)};
        for (auto& row : v)
          for (auto& x : row) x = nd(rng);
        const Reference r = softmax_weighted(s, v, D);  // the partial, rounded to float as attention() returns it
        for (std::size_t k = 0; k < D; ++k) o[i][h * D + k] = static_cast<float>(r.out[k]);
        l[i][h] = static_cast<float>(r.lse);
        scores[h].insert(scores[h].end(), s.begin(), s.end());
        values[h].insert(values[h].end(), v.begin(), v.end());
      }
    }
    std::vector<Tensor3View<const float>> ov;
    std::vector<MatrixView<const float>> lv;
    for (std::size_t i = 0; i < n; ++i) {
      ov.emplace_back(o[i].data(), 1, 2, D);
      lv.emplace_back(l[i].data(), 1, 2);
    }
    std::vector<float> out(2 * D, -7.0f), lse(2, -7.0f);
    inferkit::merge_attention_states(ov, lv, Tensor3View<float>(out.data(), 1, 2, D),
                                     MatrixView<float>(lse.data(), 1, 2));
    for (int h = 0; h < 2; ++h) {
      INFO("n = " << n << ", head " << h);
      if (scores[h].empty()) {
        CHECK(lse[h] == -INFINITY);
        for (std::size_t k = 0; k < D; ++k) CHECK(out[h * D + k] == 0.0f);
        continue;
      }
      const Reference r = softmax_weighted(scores[h], values[h], D);
      CHECK(lse[h] == Approx(r.lse).margin(4e-6));
      for (std::size_t k = 0; k < D; ++k) CHECK(out[h * D + k] == Approx(r.out[k]).margin(4e-6));
    }
  }
  std::vector<float> a(8), la(2), out(8);
  const Tensor3View<const float> av(a.data(), 1, 2, 4);
  const MatrixView<const float> lv(la.data(), 1, 2), lv1(la.data(), 1, 1);
  const std::vector<Tensor3View<const float>> os{av, av};
  const std::vector<MatrixView<const float>> ls{lv, lv1};
  CHECK_THROWS_WITH(inferkit::merge_attention_states(os, ls, Tensor3View<float>(out.data(), 1, 2, 4)),
                    Catch::Contains("lse[1].rows() = 1"));
  CHECK_THROWS_WITH(
      inferkit::merge_attention_states(os, std::span(ls).first(1), Tensor3View<float>(out.data(), 1, 2, 4)),
      Catch::Contains("lse.size() = 1"));
  la[0] = NAN;
  CHECK_THROWS_WITH(inferkit::merge_attention_states(std::span(os).first(1), std::span(ls).first(1),
                                                     Tensor3View<float>(out.data(), 1, 2, 4)),
                    Catch::Contains("lse = nan"));
}
