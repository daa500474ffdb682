#include <catch2/catch.hpp>

#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
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

TEST_CASE("memory planner: a paged cache is whole pages, quantized pages as the pool stores them",
          "[kv][planner][paged]") {
  // A small shape so the pool can be built: the plan equals the pool's and table's own bytes.
  inferkit::ModelShape m{2, 128, 256, 4, 2, 100, 64, true, 4.0};
  const inferkit::Index context = 70, page = 16, batch = 3;
  for (const char* preset : {"int8", "int4", "kivi4"}) {
    INFO(preset);
    inferkit::CachePolicy c;
    c.kind = inferkit::CacheKind::kPaged;
    c.page_size = page;
    c.paged_quantized = true;
    c.quant = inferkit::kv_quant_preset(preset, 64);
    c.quant.keys.residual = c.quant.values.residual = 0;
    if (c.quant.keys.axis == inferkit::QuantAxis::kPerChannel) c.quant.keys.group_size = page;
    inferkit::BlockPoolConfig pc{m.layers, m.kv_heads, 64, page, 100};
    pc.quant = c.quant;
    inferkit::BlockPool<inferkit::QuantizedKv> pool(pc);
    inferkit::BlockTable<inferkit::QuantizedKv> table(pool);
    REQUIRE(table.reserve(context));
    const double per_sequence = double(pool.bytes_in_use() + table.tail_bytes());
    CHECK(inferkit::plan_memory(m, context, batch, c).kv_cache == Approx(per_sequence * batch));
  }
  inferkit::CachePolicy f32;
  f32.kind = inferkit::CacheKind::kPaged;
  f32.element_bytes = 4;
  f32.page_size = page;
  // 5 pages of 16 tokens x 2 (K, V) x 2 layers x 2 heads x 64 x 4 bytes.
  CHECK(inferkit::plan_memory(m, context, 1, f32).kv_cache == Approx(80.0 * 2 * 2 * 2 * 64 * 4));
  inferkit::CachePolicy bad = f32;
  bad.paged_quantized = true;
  bad.quant = inferkit::kv_quant_preset("kivi4", 64);
  CHECK_THROWS_WITH(inferkit::plan_memory(m, context, 1, bad), Catch::Contains("keys.residual"));
}
