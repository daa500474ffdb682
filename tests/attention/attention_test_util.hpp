#pragma once
// Helpers for attention tests: random tensors, a case description, and the comparison of the
// tiled kernels with the fp64 reference (attention/reference.hpp).

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "inferkit/attention/attention.hpp"
#include "inferkit/attention/reference.hpp"
#include "inferkit/core/convert.hpp"

namespace test {}  // namespace test
using inferkit::Index;
namespace test {

using inferkit::Index;

inline std::vector<float> random_normal(std::size_t n, std::uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

template <class T>
std::vector<T> to_storage(const std::vector<float>& f) {
  std::vector<T> out(f.size());
  inferkit::convert(f.data(), out.data(), f.size());
  return out;
}

struct Case {
  Index tq = 1, tk = 1, hq = 1, hkv = 1, d = 8;
  inferkit::AttentionOptions opt{};
  std::uint32_t seed = 1;

  std::string describe() const {
    std::ostringstream s;
    s << "Tq=" << tq << " Tk=" << tk << " Hq=" << hq << " Hkv=" << hkv << " d=" << d << " causal=" << opt.causal
      << " window=" << opt.window << " alibi=" << (opt.alibi || !opt.alibi_slopes.empty()) << " softcap=" << opt.softcap
      << " split=" << opt.kv_split_tokens << " seed=" << seed;
    return s.str();
  }
};

struct Result {
  std::vector<float> out, lse;
};

/// Runs the kernel (or the reference) on K/V stored as T in a [tokens, heads, d] layout.
template <class T>
Result run_case(const Case& c, bool reference, std::int32_t first_position = 0) {
  const auto q = random_normal(static_cast<std::size_t>(c.tq * c.hq * c.d), c.seed);
  const auto k = to_storage<T>(random_normal(static_cast<std::size_t>(c.tk * c.hkv * c.d), c.seed + 1));
  const auto v = to_storage<T>(random_normal(static_cast<std::size_t>(c.tk * c.hkv * c.d), c.seed + 2));
  Result r{std::vector<float>(q.size(), -7.0f), std::vector<float>(static_cast<std::size_t>(c.tq * c.hq), -7.0f)};
  inferkit::Tensor3View<const float> qv(q.data(), c.tq, c.hq, c.d);
  inferkit::DenseKv<T> kv(inferkit::Tensor3View<const T>(k.data(), c.tk, c.hkv, c.d),
                          inferkit::Tensor3View<const T>(v.data(), c.tk, c.hkv, c.d), first_position);
  inferkit::Tensor3View<float> ov(r.out.data(), c.tq, c.hq, c.d);
  inferkit::MatrixView<float> lv(r.lse.data(), c.tq, c.hq);
  if (reference)
    inferkit::attention_reference(qv, kv, ov, lv, c.opt);
  else
    inferkit::attention(qv, kv, ov, lv, c.opt);
  return r;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return INFINITY;
      continue;
    }
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  }
  return m;
}

/// Kernel vs fp64 reference on the same (possibly 16-bit) K/V.
template <class T = float>
void check_against_reference(const Case& c, double tol = 2e-5, std::int32_t first_position = 0) {
  INFO(c.describe());
  const Result got = run_case<T>(c, false, first_position);
  const Result ref = run_case<T>(c, true, first_position);
  CHECK(max_abs_diff(got.out, ref.out) <= tol);
  CHECK(max_abs_diff(got.lse, ref.lse) <= tol * 4);
}

}  // namespace test
