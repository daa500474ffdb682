#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "inferkit/kv/dense_cache.hpp"
#include "inferkit/kv/quantized_cache.hpp"
#include "inferkit/kv/sink_window_cache.hpp"
#include "kv/kv_test_util.hpp"

using inferkit::Index;

TEST_CASE("dense cache: append, grow, truncate, and attention over it equals over the raw tensors", "[kv][dense]") {
  const Index layers = 2, hkv = 2, hq = 4, d = 16, tokens = 70;
  const auto k = test::random_normal(tokens * hkv * d, 1), v = test::random_normal(tokens * hkv * d, 2);
  inferkit::DenseKvCache<inferkit::BFloat16> cache(layers, hkv, d, 8);  // grows past 8
  for (Index l = 0; l < layers; ++l)
    for (Index t = 0; t < tokens; t += 10)
      cache.append(l, inferkit::Tensor3View<const float>(k.data() + t * hkv * d, 10, hkv, d),
                   inferkit::Tensor3View<const float>(v.data() + t * hkv * d, 10, hkv, d));
  CHECK(cache.length(1) == tokens);
  CHECK(cache.capacity() >= tokens);
  // The same values, converted, through DenseKv directly.
  const auto kb = test::to_storage<inferkit::BFloat16>(k), vb = test::to_storage<inferkit::BFloat16>(v);
  const auto q = test::random_normal(hq * d, 3);
  std::vector<float> a(hq * d), b(hq * d);
  inferkit::Tensor3View<const float> qv(q.data(), 1, hq, d);
  inferkit::attention(qv, cache.source(1), inferkit::Tensor3View<float>(a.data(), 1, hq, d));
  inferkit::attention(qv,
                      inferkit::DenseKv<inferkit::BFloat16>({kb.data(), tokens, hkv, d}, {vb.data(), tokens, hkv, d}),
                      inferkit::Tensor3View<float>(b.data(), 1, hq, d));
  CHECK(a == b);
  cache.truncate(50);
  CHECK(cache.length(0) == 50);
  CHECK_THROWS_WITH(cache.truncate(60), Catch::Contains("length = 60"));
  inferkit::DenseKvCache<float> fixed(1, 1, 4, 2, inferkit::CacheGrowth::kFixed);
  std::vector<float> row(3 * 4, 1.0f);
  CHECK_THROWS_WITH(fixed.append(0, {row.data(), 3, 1, 4}, {row.data(), 3, 1, 4}), Catch::Contains("fixed capacity"));
  CHECK(cache.bytes_per_token() == 2.0 * layers * hkv * d * 2);
}

namespace {
// Dequantized copy of every token of a quantized cache's layer, through its block view.
void dequantized(const inferkit::QuantizedKvCache& c, Index layer, std::vector<float>& k, std::vector<float>& v) {
  test::dequantized_rows(c.source(layer), k, v);
}
}  // namespace

TEST_CASE("quantized attention equals the fp64 reference on the dequantized values", "[kv][quantized]") {
  const Index hkv = 2, hq = 8, d = 64, tokens = 300;
  auto k = test::random_normal(tokens * hkv * d, 5), v = test::random_normal(tokens * hkv * d, 6);
  for (Index t = 0; t < tokens; ++t) k[(t * hkv) * d + 7] *= 20.0f;  // an outlier channel
  const auto q = test::random_normal(3 * hq * d, 7);
  const std::pair<const char*, double> schemes[] = {{"int8", 0.3}, {"int4", 0.5}, {"kivi4", 0.5}, {"kivi2", 3.0}};
  for (const auto& [preset, bound] : schemes) {
    INFO(preset);
    inferkit::QuantizedKvCache cache(1, hkv, d, inferkit::kv_quant_preset(preset));
    for (Index t = 0; t < tokens; ++t)  // one token at a time, as in decoding
      cache.append(0, {k.data() + t * hkv * d, 1, hkv, d}, {v.data() + t * hkv * d, 1, hkv, d});
    std::vector<float> kd, vd;
    dequantized(cache, 0, kd, vd);
    std::vector<float> got(3 * hq * d), ref(got.size()), exact(got.size());
    inferkit::Tensor3View<const float> qv(q.data(), 3, hq, d);
    inferkit::attention(qv, cache.source(0), {got.data(), 3, hq, d});
    inferkit::attention_reference(qv,
                                  inferkit::DenseKv<float>({kd.data(), tokens, hkv, d}, {vd.data(), tokens, hkv, d}),
                                  {ref.data(), 3, hq, d}, {});
    CHECK(test::max_abs_diff(got, ref) < 2e-5);
    inferkit::attention_reference(qv, inferkit::DenseKv<float>({k.data(), tokens, hkv, d}, {v.data(), tokens, hkv, d}),
                                  {exact.data(), 3, hq, d}, {});
    const double err = test::max_abs_diff(got, exact);
    CHECK(err < bound);  // lossy, but bounded (reported per scheme in docs/performance.md)
  }
}

TEST_CASE("KIVI flushes a per-channel key group exactly when the tail overflows", "[kv][quantized]") {
  const Index d = 32;
  inferkit::KvQuantConfig cfg = inferkit::kv_quant_preset("kivi4");  // group 32, residual 32
  inferkit::QuantizedKvCache cache(1, 1, d, cfg);
  std::vector<float> row(d, 0.5f);
  const auto bytes_at = [&] { return cache.bytes_in_use(); };
  std::size_t last = 0;
  for (Index t = 1; t <= 96; ++t) {
    for (Index i = 0; i < d; ++i) row[i] = std::sin(float(t * d + i));
    cache.append(0, {row.data(), 1, 1, d}, {row.data(), 1, 1, d});
    const auto blk = cache.source(0).block(0, 0);
    const Index kq = blk.keys.stream->quantized, vq = blk.values.stream->quantized;
    // Keys: groups of 32 leave once 64 are in the tail (tokens 64 and 96); values one by one past 32.
    CHECK(kq == (t < 64 ? 0 : (t < 96 ? 32 : 64)));
    CHECK(vq == std::max<Index>(0, t - 32));
    CHECK(blk.keys.stream->tail_tokens == t - kq);
    if (t == 31 || t == 32 || t == 33) CHECK(bytes_at() > last);
    last = bytes_at();
  }
  // Tokens already quantized read back identically after more appends (never re-quantized).
  std::vector<float> k1, v1, k2, v2;
  dequantized(cache, 0, k1, v1);
  const auto blk = cache.source(0).block(0, 0);
  const Index kq = blk.keys.stream->quantized, vq = blk.values.stream->quantized;
  for (int i = 0; i < 40; ++i) cache.append(0, {row.data(), 1, 1, d}, {row.data(), 1, 1, d});
  dequantized(cache, 0, k2, v2);
  CHECK(std::equal(k1.begin(), k1.begin() + kq * d, k2.begin()));
  CHECK(std::equal(v1.begin(), v1.begin() + vq * d, v2.begin()));
}

TEST_CASE("quantized bytes per token include scales and zero-points", "[kv][quantized]") {
  const Index d = 128;
  // int4 asymmetric group 32: 4 bits + (2 + 2 bytes) / 32 per element = 5 bits.
  inferkit::QuantizedKvCache int4(1, 1, d, inferkit::kv_quant_preset("int4"));
  CHECK(int4.quantized_bytes_per_token() == Approx(2 * d * 5.0 / 8.0));
  // int8 symmetric group 32: 8 bits + 2 bytes / 32 = 8.5 bits.
  inferkit::QuantizedKvCache int8(1, 1, d, inferkit::kv_quant_preset("int8"));
  CHECK(int8.quantized_bytes_per_token() == Approx(2 * d * 8.5 / 8.0));
  std::vector<float> row(d, 1.0f);
  int8.append(0, {row.data(), 1, 1, d}, {row.data(), 1, 1, d});
  CHECK(int8.bytes_in_use() == static_cast<std::size_t>(2 * (d + 2 * d / 32)));
  CHECK_THROWS_WITH(inferkit::kv_quant_preset("int3"), Catch::Contains("kv_quant = int3"));
}

TEST_CASE("sink + window keeps the sinks and the newest tokens, oldest evicted first", "[kv][sink_window]") {
  const Index d = 8, sinks = 2, window = 4;
  inferkit::SinkWindowCache<float> cache(1, 1, d, sinks, window, inferkit::PositionPolicy::kOriginal);
  std::vector<float> row(d);
  for (std::int32_t t = 0; t < 11; ++t) {
    std::fill(row.begin(), row.end(), float(t));
    const std::int32_t pos = t;
    cache.append(0, {row.data(), 1, 1, d}, {row.data(), 1, 1, d}, std::span<const std::int32_t>(&pos, 1));
  }
  CHECK(cache.size(0) == 6);
  CHECK(cache.seen(0) == 11);
  CHECK(cache.newest_position(0) == 10);
  // Read every token in block order: sinks 0, 1 then 7, 8, 9, 10 with their original positions.
  const auto src = cache.source(0);
  std::vector<float> values;
  std::vector<std::int32_t> positions;
  std::vector<float> scratch(window * d);
  for (Index b = 0; b < src.num_blocks(); ++b) {
    const auto blk = src.block(0, b);
    const auto r = blk.values.load_f32(0, blk.num_tokens, d, scratch.data(), d, true);
    for (Index t = 0; t < blk.num_tokens; ++t) {
      values.push_back(r.data[t * r.stride]);
      positions.push_back(blk.positions[t]);
    }
  }
  CHECK(values == std::vector<float>{0, 1, 7, 8, 9, 10});
  CHECK(positions == std::vector<std::int32_t>{0, 1, 7, 8, 9, 10});
}

TEST_CASE("sink + window with cache positions equals recomputing the window at slot positions", "[kv][sink_window]") {
  const Index hkv = 2, hq = 4, d = 16, sinks = 3, window = 20, steps = 57;
  const inferkit::RopeOptions rope{inferkit::RopeStyle::kHalfSplit, 10000.0, 0};
  inferkit::SinkWindowCache<float> cache(1, hkv, d, sinks, window, inferkit::PositionPolicy::kCache, rope);
  const auto k = test::random_normal(steps * hkv * d, 1), v = test::random_normal(steps * hkv * d, 2);
  for (std::int32_t t = 0; t < steps; ++t)
    cache.append(0, {k.data() + t * hkv * d, 1, hkv, d}, {v.data() + t * hkv * d, 1, hkv, d},
                 std::span<const std::int32_t>(&t, 1));
  // Direct recomputation: the kept tokens (sinks 0..2, then steps-20..steps-1) in age order,
  // keys rotated at their slot positions 0..22.
  std::vector<std::int32_t> kept;
  for (std::int32_t t = 0; t < sinks; ++t) kept.push_back(t);
  for (std::int32_t t = steps - window; t < steps; ++t) kept.push_back(t);
  const Index n = static_cast<Index>(kept.size());
  std::vector<float> kk(n * hkv * d), vv(n * hkv * d);
  for (Index i = 0; i < n; ++i) {
    std::copy_n(k.begin() + kept[i] * hkv * d, hkv * d, kk.begin() + i * hkv * d);
    std::copy_n(v.begin() + kept[i] * hkv * d, hkv * d, vv.begin() + i * hkv * d);
  }
  inferkit::apply_rope(inferkit::Tensor3View<float>(kk.data(), n, hkv, d), 0, rope);
  auto q = test::random_normal(hq * d, 3);
  inferkit::apply_rope(inferkit::Tensor3View<float>(q.data(), 1, hq, d), static_cast<std::int32_t>(n - 1), rope);
  std::vector<float> got(hq * d), ref(hq * d);
  inferkit::AttentionOptions opt;
  opt.alibi = true;  // distances follow the slot positions too
  inferkit::attention(inferkit::Tensor3View<const float>(q.data(), 1, hq, d), cache.source(0), {got.data(), 1, hq, d},
                      {}, opt);
  inferkit::attention_reference(inferkit::Tensor3View<const float>(q.data(), 1, hq, d),
                                inferkit::DenseKv<float>({kk.data(), n, hkv, d}, {vv.data(), n, hkv, d}),
                                {ref.data(), 1, hq, d}, {}, opt);
  CHECK(test::max_abs_diff(got, ref) < 2e-5);
  CHECK(cache.newest_position(0) == n - 1);
}

TEST_CASE("quantized sink + window equals the fp64 reference on its dequantized kept tokens",
          "[kv][sink_window][quantized]") {
  const Index hkv = 2, hq = 4, d = 32, sinks = 2, window = 13, steps = 40;
  const inferkit::RopeOptions rope{inferkit::RopeStyle::kAdjacentPairs, 10000.0, 0};
  for (const char* preset : {"int8", "int4"}) {
    const auto cfg = inferkit::kv_quant_preset(preset, d);
    for (auto policy : {inferkit::PositionPolicy::kOriginal, inferkit::PositionPolicy::kCache}) {
      INFO(preset << (policy == inferkit::PositionPolicy::kCache ? ", cache positions" : ", original positions"));
      inferkit::QuantizedSinkWindowCache cache(1, hkv, d, sinks, window, policy, rope, cfg.keys, cfg.values);
      const auto k = test::random_normal(steps * hkv * d, 4), v = test::random_normal(steps * hkv * d, 5);
      for (std::int32_t t = 0; t < steps; ++t)
        cache.append(0, {k.data() + t * hkv * d, 1, hkv, d}, {v.data() + t * hkv * d, 1, hkv, d},
                     std::span<const std::int32_t>(&t, 1));
      // Kept tokens in age order, each group dequantized with the codec's own decode().
      std::vector<std::int32_t> kept;
      for (std::int32_t t = 0; t < sinks; ++t) kept.push_back(t);
      for (std::int32_t t = steps - window; t < steps; ++t) kept.push_back(t);
      const Index n = static_cast<Index>(kept.size());
      const auto roundtrip = [&](const float* x, const inferkit::QuantSpec& s, float* out) {
        for (Index g = 0; g < d / s.group_size; ++g) {
          const auto p = inferkit::choose_params(x + g * s.group_size, s.group_size, 1, s);
          for (Index i = 0; i < s.group_size; ++i)
            out[g * s.group_size + i] = inferkit::decode(inferkit::encode(x[g * s.group_size + i], p, s), p, s);
        }
      };
      std::vector<float> kk(n * hkv * d), vv(n * hkv * d);
      std::vector<std::int32_t> pos(n);
      for (Index i = 0; i < n; ++i) {
        pos[i] = policy == inferkit::PositionPolicy::kCache ? static_cast<std::int32_t>(i) : kept[i];
        for (Index h = 0; h < hkv; ++h) {
          roundtrip(k.data() + (kept[i] * hkv + h) * d, cfg.keys, kk.data() + (i * hkv + h) * d);
          roundtrip(v.data() + (kept[i] * hkv + h) * d, cfg.values, vv.data() + (i * hkv + h) * d);
        }
      }
      // kOriginal stores keys as given (the caller rotated them, or not); kCache rotates on read.
      if (policy == inferkit::PositionPolicy::kCache)
        inferkit::apply_rope(inferkit::Tensor3View<float>(kk.data(), n, hkv, d), 0, rope);
      const auto q = test::random_normal(hq * d, 6);
      const std::int32_t qpos =
          policy == inferkit::PositionPolicy::kCache ? static_cast<std::int32_t>(n - 1) : steps - 1;
      inferkit::AttentionOptions opt;
      opt.alibi = true;
      opt.query_positions = std::span<const std::int32_t>(&qpos, 1);
      std::vector<float> got(hq * d), ref(hq * d);
      inferkit::attention(inferkit::Tensor3View<const float>(q.data(), 1, hq, d), cache.source(0),
                          {got.data(), 1, hq, d}, {}, opt);
      const inferkit::DenseKv<float> dense({kk.data(), n, hkv, d}, {vv.data(), n, hkv, d}, pos);
      inferkit::attention_reference(inferkit::Tensor3View<const float>(q.data(), 1, hq, d), dense,
                                    {ref.data(), 1, hq, d}, {}, opt);
      CHECK(test::max_abs_diff(got, ref) < 2e-5);
      CHECK(cache.newest_position(0) == qpos);
    }
    const inferkit::QuantizedSinkWindowCache small(1, 1, d, 1, 3, inferkit::PositionPolicy::kOriginal, {}, cfg.keys,
                                                   cfg.values);
    const std::size_t per_row =
        static_cast<std::size_t>(d * cfg.keys.bits / 8 + (d / cfg.keys.group_size) * cfg.keys.meta_bytes());
    CHECK(small.bytes() == 2 * 4 * per_row);
  }
  const auto kivi = inferkit::kv_quant_preset("kivi4", d);
  CHECK_THROWS_WITH(inferkit::QuantizedSinkWindowCache(1, 1, d, 1, 3, inferkit::PositionPolicy::kOriginal, {},
                                                       kivi.keys, kivi.values),
                    Catch::Contains("axis = per-channel"));
}

TEST_CASE("sink + window rejects bad shapes by name before sizing anything", "[kv][sink_window][errors]") {
  using inferkit::PositionPolicy;
  CHECK_THROWS_WITH(inferkit::SinkWindowCache<float>(-1, 1, 8, 1, 4, PositionPolicy::kOriginal),
                    Catch::Contains("layers = -1"));
  CHECK_THROWS_WITH(inferkit::SinkWindowCache<float>(1, 1, 8, 1, 0, PositionPolicy::kOriginal),
                    Catch::Contains("window = 0"));
  CHECK_THROWS_WITH(inferkit::SinkWindowCache<float>(1, 1, 8, -2, 4, PositionPolicy::kOriginal),
                    Catch::Contains("n_sink = -2"));
  const auto int8 = inferkit::kv_quant_preset("int8", 8);
  CHECK_THROWS_WITH(
      inferkit::QuantizedSinkWindowCache(1, -3, 8, 1, 4, PositionPolicy::kOriginal, {}, int8.keys, int8.values),
      Catch::Contains("kv_heads = -3"));
  CHECK_THROWS_WITH(
      inferkit::QuantizedSinkWindowCache(1, 1, 12, 1, 4, PositionPolicy::kOriginal, {}, int8.keys, int8.values),
      Catch::Contains("head_dim = 12"));
}

TEST_CASE("dense and quantized caches reject bad shapes by name before sizing anything", "[kv][errors]") {
  CHECK_THROWS_WITH(inferkit::DenseKvCache<float>(-1, 1, 8, 4), Catch::Contains("layers = -1"));
  CHECK_THROWS_WITH(inferkit::DenseKvCache<float>(1, 0, 8, 4), Catch::Contains("kv_heads = 0"));
  CHECK_THROWS_WITH(inferkit::QuantizedKvCache(-2, 1, 32, inferkit::kv_quant_preset("int8")),
                    Catch::Contains("layers = -2"));
  CHECK_THROWS_WITH(inferkit::QuantizedKvCache(1, -1, 32, inferkit::kv_quant_preset("int8")),
                    Catch::Contains("kv_heads = -1"));
}
