#include <catch2/catch.hpp>

#include "inferkit/kv/memory_planner.hpp"

TEST_CASE("memory planner reproduces hand-computed figures", "[kv][planner]") {
  // Llama-2-7B: 32 layers, dim 4096, 32 heads (MHA), hidden 11008, vocab 32000, untied.
  inferkit::ModelShape llama7b{32, 4096, 11008, 32, 32, 32000, 0, false, 2.0};
  CHECK(inferkit::parameter_count(llama7b) == Approx(6738415616.0));  // the published 6.74B
  inferkit::CachePolicy f16;
  // 2 (K, V) x 32 layers x 4096 (32 heads x 128) x 2 bytes = 512 KiB per token; 4096 tokens = 2 GiB.
  CHECK(inferkit::kv_bytes_per_token(llama7b, f16) == 524288.0);
  CHECK(inferkit::plan_memory(llama7b, 4096, 1, f16).kv_cache == Approx(2.0 * (1 << 30)));
  // GQA 32 / 8 heads: a quarter.
  auto gqa = llama7b;
  gqa.kv_heads = 8;
  CHECK(inferkit::kv_bytes_per_token(gqa, f16) == 524288.0 / 4);
  // int4 group 32: 4.5 bits with a binary16 scale only, 5 bits with a binary16 minimum as well.
  inferkit::CachePolicy q4;
  q4.kind = inferkit::CacheKind::kQuantized;
  q4.quant = {inferkit::QuantSpec{4, true, 32}, inferkit::QuantSpec{4, true, 32}};
  CHECK(inferkit::kv_bytes_per_token(llama7b, q4) == Approx(2.0 * 32 * 4096 * 4.5 / 8));
  q4.quant = inferkit::kv_quant_preset("int4");
  CHECK(inferkit::kv_bytes_per_token(llama7b, q4) == Approx(2.0 * 32 * 4096 * 5.0 / 8));
  // A sink + window cache holds at most n_sink + window tokens.
  inferkit::CachePolicy sw;
  sw.kind = inferkit::CacheKind::kSinkWindow;
  sw.n_sink = 4;
  sw.window = 1020;
  CHECK(inferkit::plan_memory(llama7b, 100000, 2, sw).kv_cache == Approx(524288.0 * 1024 * 2));
  // Weights at 2 bytes per parameter.
  CHECK(inferkit::plan_memory(llama7b, 0, 1, f16).weights == Approx(6738415616.0 * 2));
  CHECK_THROWS_WITH(inferkit::plan_memory(llama7b, 10, 0, f16), Catch::Contains("batch = 0"));
}
