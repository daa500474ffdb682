#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "inferkit/attention/alibi.hpp"
#include "inferkit/attention/gqa.hpp"
#include "inferkit/attention/rope.hpp"

TEST_CASE("RoPE equals a direct complex rotation for both pair conventions", "[attention][rope]") {
  const Index tokens = 5, heads = 3, d = 10;
  const auto x0 = test::random_normal(tokens * heads * d, 11);
  for (auto style : {inferkit::RopeStyle::kAdjacentPairs, inferkit::RopeStyle::kHalfSplit}) {
    for (Index rotary : {0, 6}) {
      std::vector<float> x = x0;
      const std::vector<std::int32_t> pos{0, 1, 7, 4096, 1000000};
      inferkit::apply_rope(inferkit::Tensor3View<float>(x.data(), tokens, heads, d), pos,
                           {.style = style, .base = 500000.0, .rotary_dim = rotary});
      const Index rd = rotary == 0 ? d : rotary, half = rd / 2;
      for (Index t = 0; t < tokens; ++t)
        for (Index h = 0; h < heads; ++h) {
          const float* in = x0.data() + (t * heads + h) * d;
          const float* got = x.data() + (t * heads + h) * d;
          for (Index i = 0; i < half; ++i) {
            const Index a = style == inferkit::RopeStyle::kAdjacentPairs ? 2 * i : i;
            const Index b = style == inferkit::RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half;
            const double theta = double(pos[t]) * std::pow(500000.0, -2.0 * double(i) / double(rd));
            const std::complex<double> z = std::complex<double>(in[a], in[b]) * std::polar(1.0, theta);
            CHECK(got[a] == Approx(z.real()).margin(1e-5));
            CHECK(got[b] == Approx(z.imag()).margin(1e-5));
          }
          for (Index k = rd; k < d; ++k) CHECK(got[k] == in[k]);  // past rotary_dim: untouched
        }
    }
  }
}

TEST_CASE("RoPE with a first position equals explicit consecutive positions", "[attention][rope]") {
  auto a = test::random_normal(4 * 2 * 8, 3), b = a;
  inferkit::apply_rope(inferkit::Tensor3View<float>(a.data(), 4, 2, 8), 100);
  const std::vector<std::int32_t> pos{100, 101, 102, 103};
  inferkit::apply_rope(inferkit::Tensor3View<float>(b.data(), 4, 2, 8), pos);
  CHECK(a == b);
  CHECK_THROWS_WITH(inferkit::apply_rope(inferkit::Tensor3View<float>(a.data(), 4, 2, 8), 0, {.rotary_dim = 3}),
                    Catch::Contains("rotary_dim = 3"));
  CHECK_THROWS_WITH(inferkit::apply_rope(inferkit::Tensor3View<float>(a.data(), 4, 2, 8), 0, {.base = 0.5}),
                    Catch::Contains("base = 0.5"));
}

TEST_CASE("RoPE frequency factors divide each pair's angle (Llama 3.1's rope_freqs)", "[attention][rope]") {
  // Pair i at position p with factor f_i rotates by p * base^(-2i/d) / f_i: with every factor 2,
  // position 2p rotates as position p does without factors.
  const Index d = 8;
  const auto x0 = test::random_normal(2 * d, 5);
  std::vector<float> a = x0, b = x0;
  const std::vector<float> twos(d / 2, 2.0f);
  const std::vector<std::int32_t> doubled{6, 4000}, plain{3, 2000};
  inferkit::apply_rope(inferkit::Tensor3View<float>(a.data(), 2, 1, d), doubled, {.freq_factors = twos});
  inferkit::apply_rope(inferkit::Tensor3View<float>(b.data(), 2, 1, d), plain);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-5));
  const std::vector<float> short_factors(3, 1.0f), bad{1.0f, 0.0f, 1.0f, 1.0f};
  CHECK_THROWS_WITH(
      inferkit::apply_rope(inferkit::Tensor3View<float>(a.data(), 2, 1, d), plain, {.freq_factors = short_factors}),
      Catch::Contains("freq_factors.size()"));
  CHECK_THROWS_WITH(inferkit::apply_rope(inferkit::Tensor3View<float>(a.data(), 2, 1, d), plain, {.freq_factors = bad}),
                    Catch::Contains("freq_factors[1]"));
}

TEST_CASE("ALiBi slopes follow the closed form", "[attention][alibi]") {
  // Powers of two: 2^(-8(h+1)/n).
  const auto s8 = inferkit::alibi_slopes(8);
  for (int h = 0; h < 8; ++h) CHECK(s8[h] == Approx(std::pow(2.0, -(h + 1))));
  const auto s1 = inferkit::alibi_slopes(1);
  CHECK(s1[0] == Approx(std::pow(2.0, -8.0)));
  // 12 heads: the 8 slopes of 8 heads, then every other slope of 16 heads: 2^-0.5, 2^-1.5, ...
  const auto s12 = inferkit::alibi_slopes(12);
  for (int h = 0; h < 8; ++h) CHECK(s12[h] == Approx(std::pow(2.0, -(h + 1))));
  for (int j = 0; j < 4; ++j) CHECK(s12[8 + j] == Approx(std::pow(2.0, -(2 * j + 1) / 2.0)));
  // 64 heads: 2^(-(h+1)/8); BLOOM's first slope for 64 heads is 2^-0.125.
  const auto s64 = inferkit::alibi_slopes(64);
  CHECK(s64[0] == Approx(std::pow(2.0, -0.125)));
  CHECK(s64[63] == Approx(std::pow(2.0, -8.0)));
  CHECK_THROWS_WITH(inferkit::alibi_slopes(0), Catch::Contains("num_heads = 0"));
}

TEST_CASE("GQA maps query heads to KV heads and rejects uneven groups", "[attention][gqa]") {
  const inferkit::HeadGroups gqa(32, 8);
  CHECK(gqa.group_size() == 4);
  CHECK(gqa.kv_head(0) == 0);
  CHECK(gqa.kv_head(3) == 0);
  CHECK(gqa.kv_head(4) == 1);
  CHECK(gqa.kv_head(31) == 7);
  CHECK(gqa.first_q_head(2) == 8);
  CHECK(inferkit::HeadGroups(8, 1).kv_head(7) == 0);  // MQA
  CHECK(inferkit::HeadGroups(8, 8).kv_head(5) == 5);  // MHA
  CHECK_THROWS_WITH(inferkit::HeadGroups(6, 4), Catch::Contains("num_q_heads = 6") && Catch::Contains("multiple"));
}

TEST_CASE("GQA attention equals MHA with each KV head repeated", "[attention][gqa]") {
  const Index tq = 20, tk = 50, hq = 6, hkv = 2, d = 16;
  const auto q = test::random_normal(tq * hq * d, 1);
  const auto k = test::random_normal(tk * hkv * d, 2), v = test::random_normal(tk * hkv * d, 3);
  std::vector<float> k_rep(tk * hq * d), v_rep(tk * hq * d);
  for (Index t = 0; t < tk; ++t)
    for (Index h = 0; h < hq; ++h)
      for (Index i = 0; i < d; ++i) {
        k_rep[(t * hq + h) * d + i] = k[(t * hkv + h / 3) * d + i];
        v_rep[(t * hq + h) * d + i] = v[(t * hkv + h / 3) * d + i];
      }
  std::vector<float> gqa(q.size()), mha(q.size());
  inferkit::Tensor3View<const float> qv(q.data(), tq, hq, d);
  inferkit::attention(qv, inferkit::DenseKv<float>({k.data(), tk, hkv, d}, {v.data(), tk, hkv, d}),
                      inferkit::Tensor3View<float>(gqa.data(), tq, hq, d));
  inferkit::attention(qv, inferkit::DenseKv<float>({k_rep.data(), tk, hq, d}, {v_rep.data(), tk, hq, d}),
                      inferkit::Tensor3View<float>(mha.data(), tq, hq, d));
  CHECK(test::max_abs_diff(gqa, mha) < 1e-6);
}

TEST_CASE("a per-head [heads, tokens, dim] cache layout works through strides", "[attention][layout]") {
  const Index tq = 1, tk = 300, hq = 4, hkv = 2, d = 16;
  const auto q = test::random_normal(tq * hq * d, 1);
  const auto k = test::random_normal(tk * hkv * d, 2), v = test::random_normal(tk * hkv * d, 3);
  // Same data re-laid out as [heads, tokens, dim]; the view gives token stride d, head stride tk*d.
  std::vector<float> kh(k.size()), vh(v.size());
  for (Index t = 0; t < tk; ++t)
    for (Index h = 0; h < hkv; ++h)
      for (Index i = 0; i < d; ++i) {
        kh[(h * tk + t) * d + i] = k[(t * hkv + h) * d + i];
        vh[(h * tk + t) * d + i] = v[(t * hkv + h) * d + i];
      }
  std::vector<float> a(q.size()), b(q.size());
  inferkit::Tensor3View<const float> qv(q.data(), tq, hq, d);
  inferkit::attention(qv, inferkit::DenseKv<float>({k.data(), tk, hkv, d}, {v.data(), tk, hkv, d}),
                      inferkit::Tensor3View<float>(a.data(), tq, hq, d));
  inferkit::attention(qv,
                      inferkit::DenseKv<float>({kh.data(), tk, hkv, d, d, tk * d}, {vh.data(), tk, hkv, d, d, tk * d}),
                      inferkit::Tensor3View<float>(b.data(), tq, hq, d));
  CHECK(a == b);
}
