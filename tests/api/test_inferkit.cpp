// API ergonomics (issue 19): the forms a new user writes first must compile and do what they
// say. Each case would not compile (or would throw) before its fix; results are checked against
// independent references (fp64 attention, closed-form quantization bounds, naive RoPE, the
// appended values themselves).

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "inferkit/attention/attention.hpp"
#include "inferkit/attention/kv_copy.hpp"
#include "inferkit/attention/reference.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/dense_cache.hpp"
#include "inferkit/kv/memory_planner.hpp"
#include "inferkit/kv/quantized_cache.hpp"
#include "inferkit/kv/sink_window_cache.hpp"

namespace {

using inferkit::Index;
using inferkit::MatrixView;
using inferkit::Tensor3View;

// Values with at most 8 significant bits: exact in bfloat16, so a bf16 cache must return them.
std::vector<float> bf16_exact(std::size_t n, std::uint32_t seed) {
  auto v = test::random_normal(n, seed);
  for (float& x : v) x = std::round(x * 16.0f) / 16.0f;
  return v;
}

}  // namespace

TEST_CASE("attention, attention_varlen and attention_batch take options without an LSE view", "[api][attention]") {
  const Index tq = 5, tk = 9, hq = 4, hkv = 2, d = 16;
  auto q = test::random_normal(tq * hq * d, 1);
  auto k = test::random_normal(tk * hkv * d, 2), v = test::random_normal(tk * hkv * d, 3);
  // Mutable views everywhere: q and out convert, k and v deduce T.
  const Tensor3View<float> qv(q.data(), tq, hq, d), kv_k(k.data(), tk, hkv, d), kv_v(v.data(), tk, hkv, d);
  inferkit::DenseKv src(kv_k, kv_v);
  static_assert(std::is_same_v<decltype(src), inferkit::DenseKv<float>>);

  std::vector<float> got(q.size()), causal(q.size()), ref(q.size());
  inferkit::attention(qv, src, {got.data(), tq, hq, d}, {.causal = false});
  inferkit::attention(qv, src, {causal.data(), tq, hq, d});
  inferkit::AttentionOptions non_causal;
  non_causal.causal = false;
  inferkit::attention_reference(qv, src, {ref.data(), tq, hq, d}, {}, non_causal);
  CHECK(test::max_abs_diff(got, ref) < 2e-5);
  CHECK(test::max_abs_diff(causal, ref) > 1e-2);  // the option reached the kernel

  // Varlen over the same K/V split into two sequences, mutable views, no LSE.
  const std::vector<std::int32_t> cu_q{0, 2, 5}, cu_k{0, 4, 9};
  std::vector<float> var(q.size());
  inferkit::attention_varlen(qv, cu_q, kv_k, kv_v, cu_k, {var.data(), tq, hq, d}, {.causal = false, .window = 3});
  inferkit::AttentionOptions win = non_causal;
  win.window = 3;
  std::vector<float> var_ref(q.size());
  for (int b = 0; b < 2; ++b) {
    const inferkit::DenseKv part(kv_k.slice0(cu_k[b], cu_k[b + 1] - cu_k[b]),
                                 kv_v.slice0(cu_k[b], cu_k[b + 1] - cu_k[b]));
    inferkit::attention_reference(Tensor3View<const float>(qv.slice0(cu_q[b], cu_q[b + 1] - cu_q[b])), part,
                                  Tensor3View<float>(var_ref.data(), tq, hq, d).slice0(cu_q[b], cu_q[b + 1] - cu_q[b]),
                                  {}, win);
  }
  CHECK(test::max_abs_diff(var, var_ref) < 2e-5);

  // Same through attention_batch (both offset types), no LSE.
  std::vector<inferkit::DenseKv<float>> sources;
  for (int b = 0; b < 2; ++b)
    sources.emplace_back(kv_k.slice0(cu_k[b], cu_k[b + 1] - cu_k[b]), kv_v.slice0(cu_k[b], cu_k[b + 1] - cu_k[b]));
  std::vector<float> batch(q.size()), batch_idx(q.size());
  inferkit::attention_batch(qv, std::span<const std::int32_t>(cu_q), sources, {batch.data(), tq, hq, d},
                            {.causal = false, .window = 3});
  const std::vector<Index> cu_idx{0, 2, 5};
  inferkit::attention_batch(qv, std::span<const Index>(cu_idx), sources, {batch_idx.data(), tq, hq, d},
                            {.causal = false, .window = 3});
  CHECK(test::max_abs_diff(batch, var_ref) < 2e-5);
  CHECK(test::max_abs_diff(batch_idx, var_ref) < 2e-5);

  // 16-bit mutable views deduce too; explicit template arguments keep working.
  auto kb = test::to_storage<inferkit::BFloat16>(k), vb = test::to_storage<inferkit::BFloat16>(v);
  const Tensor3View<inferkit::BFloat16> kbv(kb.data(), tk, hkv, d), vbv(vb.data(), tk, hkv, d);
  std::vector<float> b16(q.size()), b16_explicit(q.size()), b16_ref(q.size());
  inferkit::attention_varlen(qv, std::vector<std::int32_t>{0, tq}, kbv, vbv, std::vector<std::int32_t>{0, tk},
                             {b16.data(), tq, hq, d});
  inferkit::attention_varlen<inferkit::BFloat16>(qv, std::vector<std::int32_t>{0, tq}, kbv, vbv,
                                                 std::vector<std::int32_t>{0, tk}, {b16_explicit.data(), tq, hq, d});
  inferkit::attention_reference(qv, inferkit::DenseKv(kbv, vbv), {b16_ref.data(), tq, hq, d}, {});
  CHECK(test::max_abs_diff(b16, b16_ref) < 2e-5);
  CHECK(b16 == b16_explicit);
  const std::vector<std::int32_t> pos{0, 2, 4, 6, 8, 10, 12, 14, 16};
  static_assert(std::is_same_v<decltype(inferkit::DenseKv(kbv, vbv, pos)), inferkit::DenseKv<inferkit::BFloat16>>);
}

TEST_CASE("int8 / int4 / kivi presets fit head_dim 80; explicit groups that do not say how to fix it",
          "[api][kv][quantized]") {
  const Index layers = 1, hkv = 2, d = 80, tokens = 40;
  const auto k = test::random_normal(tokens * hkv * d, 4), v = test::random_normal(tokens * hkv * d, 5);
  for (const char* preset : {"int8", "int4", "kivi4"}) {
    INFO(preset);
    inferkit::QuantizedKvCache cache(layers, hkv, d, inferkit::kv_quant_preset(preset));
    CHECK(cache.config().values.group_size == 16);  // gcd(32, 80)
    cache.append(0, {k.data(), tokens, hkv, d}, {v.data(), tokens, hkv, d});
    // Every dequantized value lies within half a step of its input; a step is at most the
    // group's range over the code levels, rounded up to binary16 (factor 1 + 2^-10).
    const auto& spec = cache.config().values;
    for (Index h = 0; h < hkv; ++h) {
      std::vector<float> vals(tokens * d);
      inferkit::copy_kv_head(cache.source(0), h, {}, MatrixView<float>(vals.data(), tokens, d));
      double worst = 0;
      for (Index t = 0; t < tokens; ++t)
        for (Index g = 0; g < d / 16; ++g) {
          double lo = INFINITY, hi = -INFINITY, amax = 0;
          for (Index i = 0; i < 16; ++i) {
            const double x = v[(t * hkv + h) * d + g * 16 + i];
            lo = std::min(lo, x), hi = std::max(hi, x), amax = std::max(amax, std::abs(x));
          }
          const double step =
              (spec.symmetric ? amax / ((1 << (spec.bits - 1)) - 1) : (hi - lo) / ((1 << spec.bits) - 1)) *
              (1 + std::ldexp(1.0, -10));
          for (Index i = 0; i < 16; ++i) {
            const double err = std::abs(double(vals[t * d + g * 16 + i]) - v[(t * hkv + h) * d + g * 16 + i]);
            worst = std::max(worst, err / (0.5 * step + 1e-6));
          }
        }
      CHECK(worst <= 1.0);
    }
    // The planner accounts for the group the cache uses.
    const inferkit::ModelShape shape{
        .layers = layers, .dim = 2 * d, .hidden_dim = 4, .q_heads = 2, .kv_heads = hkv, .vocab = 4};
    const inferkit::CachePolicy policy{.kind = inferkit::CacheKind::kQuantized,
                                       .quant = inferkit::kv_quant_preset(preset)};
    CHECK(inferkit::kv_bytes_per_token(shape, policy) == Approx(cache.quantized_bytes_per_token()));
  }
  inferkit::QuantSpec fixed{};  // group 32, used as given
  CHECK_THROWS_WITH(inferkit::QuantizedKvCache(1, 2, 80, {fixed, fixed}),
                    Catch::Contains("head_dim = 80") && Catch::Contains("group_size dividing head_dim (e.g. 16)"));
  CHECK_THROWS_WITH(inferkit::QuantizedKvCache(1, 2, 80, inferkit::kv_quant_preset("int8", 64)),
                    Catch::Contains("keys.group_size (32)"));
  // The sink + window cache fits its per-token specs too.
  inferkit::QuantizedSinkWindowCache sw({.layers = 1,
                                         .kv_heads = hkv,
                                         .head_dim = d,
                                         .n_sink = 1,
                                         .window = 4,
                                         .quant = inferkit::kv_quant_preset("int4")});
  CHECK(sw.bytes() == 2 * hkv * 5 * (d / 2 + (d / 16) * 4));
}

TEST_CASE("config-struct constructors build the caches their positional forms build", "[api][kv]") {
  const Index hkv = 2, d = 8, n = 11;
  const auto k = bf16_exact(n * hkv * d, 6), v = bf16_exact(n * hkv * d, 7);
  const Tensor3View<const float> kv_k(k.data(), n, hkv, d), kv_v(v.data(), n, hkv, d);

  SECTION("dense: values come back as appended; fixed capacity is honoured") {
    inferkit::DenseKvCache<inferkit::BFloat16> cache({.layers = 2, .kv_heads = hkv, .head_dim = d, .capacity = 4});
    cache.append(1, kv_k, kv_v);
    CHECK(cache.layers() == 2);
    CHECK(cache.length(0) == 0);
    std::vector<float> keys(n * d), values(n * d);
    std::vector<std::int32_t> pos(n);
    for (Index h = 0; h < hkv; ++h) {
      CHECK(inferkit::copy_kv_head(cache.source(1), h, {keys.data(), n, d}, {values.data(), n, d}, pos) == n);
      for (Index t = 0; t < n; ++t) {
        CHECK(pos[t] == t);
        for (Index i = 0; i < d; ++i) {
          CHECK(keys[t * d + i] == k[(t * hkv + h) * d + i]);
          CHECK(values[t * d + i] == v[(t * hkv + h) * d + i]);
        }
      }
    }
    inferkit::DenseKvCache<float> fixed(
        {.layers = 1, .kv_heads = hkv, .head_dim = d, .capacity = 3, .growth = inferkit::CacheGrowth::kFixed});
    CHECK_THROWS_WITH(fixed.append(0, kv_k, kv_v), Catch::Contains("fixed capacity (3)"));
    CHECK_THROWS_WITH(inferkit::DenseKvCache<float>({.layers = 1, .head_dim = d}), Catch::Contains("kv_heads = 0"));
  }

  SECTION("quantized: the config's specs are used") {
    inferkit::QuantizedKvCache cache(
        {.layers = 1, .kv_heads = hkv, .head_dim = d, .quant = inferkit::kv_quant_preset("kivi2")});
    CHECK(cache.config().keys.axis == inferkit::QuantAxis::kPerChannel);
    CHECK(cache.config().values.bits == 2);
    CHECK(cache.config().values.group_size == 8);
    CHECK_THROWS_WITH(inferkit::QuantizedKvCache({.kv_heads = 1, .head_dim = d}), Catch::Contains("layers = 0"));
  }

  SECTION("sink + window with cache positions: kept tokens, rotated on read at slot positions") {
    const Index sinks = 2, window = 4;
    const inferkit::RopeOptions rope{inferkit::RopeStyle::kHalfSplit, 500.0, 6};
    inferkit::SinkWindowCache<float> cache({.layers = 1,
                                            .kv_heads = hkv,
                                            .head_dim = d,
                                            .n_sink = sinks,
                                            .window = window,
                                            .positions = inferkit::PositionPolicy::kCache,
                                            .rope = rope});
    std::vector<std::int32_t> orig(n);
    for (Index t = 0; t < n; ++t) orig[t] = static_cast<std::int32_t>(100 + t);
    cache.append(0, kv_k, kv_v, orig);
    std::vector<Index> kept{0, 1};
    for (Index t = n - window; t < n; ++t) kept.push_back(t);
    const Index m = static_cast<Index>(kept.size());
    std::vector<float> keys(m * d), values(m * d);
    std::vector<std::int32_t> pos(m);
    for (Index h = 0; h < hkv; ++h) {
      inferkit::copy_kv_head(cache.source(0), h, {keys.data(), m, d}, {values.data(), m, d}, pos);
      for (Index i = 0; i < m; ++i) {
        CHECK(pos[i] == i);
        const float* x = k.data() + (kept[i] * hkv + h) * d;
        for (Index j = 0; j < d; ++j) {
          double want = x[j];
          if (j < 6) {  // half-split pairs (j, j + 3) of the 6 rotary dims, angle i * 500^(-2p/6)
            const Index p = j % 3, a = p, b = p + 3;
            const double ang = double(i) * std::pow(500.0, -2.0 * double(p) / 6.0);
            want = j < 3 ? x[a] * std::cos(ang) - x[b] * std::sin(ang) : x[a] * std::sin(ang) + x[b] * std::cos(ang);
          }
          CHECK(keys[i * d + j] == Approx(want).margin(1e-5));
          CHECK(values[i * d + j] == v[(kept[i] * hkv + h) * d + j]);
        }
      }
    }
    CHECK_THROWS_WITH(inferkit::SinkWindowCache<float>({.layers = 1, .kv_heads = 1, .head_dim = d}),
                      Catch::Contains("window = 0"));
  }

  SECTION("quantized sink + window: original positions, per-channel specs refused") {
    inferkit::QuantizedSinkWindowCache cache({.layers = 1, .kv_heads = hkv, .head_dim = d, .n_sink = 1, .window = 3});
    std::vector<std::int32_t> orig(n);
    for (Index t = 0; t < n; ++t) orig[t] = static_cast<std::int32_t>(7 * t);
    cache.append(0, kv_k, kv_v, orig);
    std::vector<std::int32_t> pos(4);
    inferkit::copy_kv_head(cache.source(0), 1, {}, {}, pos);
    CHECK(pos == std::vector<std::int32_t>{0, 7 * (n - 3), 7 * (n - 2), 7 * (n - 1)});
    CHECK_THROWS_WITH(
        inferkit::QuantizedSinkWindowCache(
            {.layers = 1, .kv_heads = 1, .head_dim = d, .window = 2, .quant = inferkit::kv_quant_preset("kivi4")}),
        Catch::Contains("per-channel"));
  }
}

TEST_CASE("copy_kv_head reads paged sources in token order and checks its outputs", "[api][kv]") {
  const Index hkv = 2, d = 8, n = 21;
  const auto k = bf16_exact(n * hkv * d, 8), v = bf16_exact(n * hkv * d, 9);
  inferkit::BlockPool<inferkit::Float16> pool(
      {.layers = 1, .kv_heads = hkv, .head_dim = d, .page_size = 4, .max_blocks = 8});
  inferkit::BlockTable<inferkit::Float16> table(pool);
  REQUIRE(table.reserve(n));
  table.write(0, {k.data(), n, hkv, d}, {v.data(), n, hkv, d});
  table.commit(n);
  std::vector<float> keys(n * 12, -1.0f);  // row stride 12 > head_dim
  inferkit::copy_kv_head(table.source(0), 1, MatrixView<float>(keys.data(), n, d, 12), {});
  for (Index t = 0; t < n; ++t)
    for (Index j = 0; j < 12; ++j) CHECK(keys[t * 12 + j] == (j < d ? k[(t * hkv + 1) * d + j] : -1.0f));

  std::vector<float> small((n - 1) * d);
  CHECK_THROWS_WITH(inferkit::copy_kv_head(table.source(0), 0, {small.data(), n - 1, d}, {}),
                    Catch::Contains("keys.rows() = 20"));
  std::vector<std::int32_t> pos(3);
  CHECK_THROWS_WITH(inferkit::copy_kv_head(table.source(0), 0, {}, {}, pos), Catch::Contains("positions.size() = 3"));
  CHECK_THROWS_AS(inferkit::copy_kv_head(table.source(0), 2, {}, {}), std::out_of_range);
}
