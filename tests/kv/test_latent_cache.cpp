// kv/latent_cache.hpp: the rows a LatentCache holds (float exact, int8 within half a step of
// the closed-form symmetric rounding), its bytes, truncate, and the memory plan's latent and
// materialized bytes (closed forms).
#include <catch2/catch.hpp>

#include <vector>

#include "attention/mla_test_util.hpp"
#include "inferkit/kv/latent_cache.hpp"
#include "inferkit/kv/memory_planner.hpp"

using inferkit::Index;
using test::stored_rows;

TEST_CASE("latent cache: rows, int8 rounding bound, bytes, truncate and the memory plan", "[kv][mla]") {
  const Index rank = 64, rope = 32, n = 50;
  const auto c = test::random_normal(n * rank, 5), k = test::random_normal(n * rope, 6);
  inferkit::LatentCache<inferkit::LatentInt8> i8({.layers = 1, .kv_lora_rank = rank, .rope_dim = rope});
  i8.append(0, {c.data(), n, rank}, {k.data(), n, rope});
  const auto rows = stored_rows(i8.source(0), rank + rope);
  for (Index t = 0; t < n; ++t)
    for (Index g = 0; g < (rank + rope) / 32; ++g) {
      // Symmetric 8-bit codes: |x - x^| <= step / 2 with step = max|x| / 127 (binary16, rounded up: 1.001x).
      double amax = 0;
      const auto x = [&](Index i) { return i < rank ? c[t * rank + i] : k[t * rope + i - rank]; };
      for (Index i = g * 32; i < g * 32 + 32; ++i) amax = std::max(amax, double(std::abs(x(i))));
      for (Index i = g * 32; i < g * 32 + 32; ++i)
        CHECK(std::abs(rows[t * (rank + rope) + i] - x(i)) <= amax / 127 / 2 * 1.002 + 1e-7);
    }
  CHECK(i8.row_bytes() == 96 + 3 * 4);
  CHECK(i8.bytes() == static_cast<std::size_t>(n * (96 + 12)));
  i8.truncate(0, 20);
  CHECK(i8.length(0) == 20);
  CHECK(i8.source(0).num_tokens() == 20);
  CHECK(stored_rows(i8.source(0), rank + rope) == std::vector<float>(rows.begin(), rows.begin() + 20 * 96));

  inferkit::LatentCache<float> f({.layers = 1, .kv_lora_rank = rank, .rope_dim = rope});
  f.append(0, {c.data(), n, rank}, {k.data(), n, rope});
  const auto frows = stored_rows(f.source(0), rank + rope);
  for (Index t = 0; t < n; ++t) {
    CHECK(frows[t * 96 + 5] == c[t * rank + 5]);
    CHECK(frows[t * 96 + rank + 7] == k[t * rope + 7]);
  }
  // DeepSeek-V2-Lite, 27 layers, bf16: 576 * 2 bytes a token and layer against 16 x 320 x 2 materialized.
  const inferkit::LatentCachePlan plan{.layers = 27,
                                       .kv_lora_rank = 512,
                                       .rope_dim = 64,
                                       .num_heads = 16,
                                       .qk_nope_dim = 128,
                                       .v_head_dim = 128,
                                       .format = inferkit::LatentFormat::kBF16};
  CHECK(inferkit::latent_cache_bytes(plan, 8192, 2) == 27.0 * 1152 * 8192 * 2);
  CHECK(inferkit::materialized_mla_kv_bytes(plan, 8192, 2, 2.0) == 27.0 * 16 * 320 * 2 * 8192 * 2);
  CHECK(inferkit::materialized_mla_kv_bytes(plan, 1, 1, 2.0) / inferkit::latent_cache_bytes(plan, 1, 1) > 7.0);
}
