// attention_batch: a packed batch of per-sequence KV sources (paged block tables) against the
// fp64 reference run on each sequence alone.
#include <random>

#include "attention/batch_test_util.hpp"

namespace {

using inferkit::AttentionOptions;

struct BatchRun {
  std::vector<std::int32_t> cu;
  std::vector<float> q;
  test::Result got;
};

// Runs attention_batch over the batch's sequences with the given query counts and compares
// every sequence with the reference.
template <class T>
BatchRun check_batch(const test::PagedBatch<T>& batch, const std::vector<Index>& counts, Index hq,
                     const AttentionOptions& opt, std::uint32_t seed, double tol = 2e-5) {
  BatchRun run;
  run.cu = test::offsets(counts);
  const Index total = run.cu.back(), d = batch.d;
  run.q = test::random_normal(static_cast<std::size_t>(total * hq * d), seed);
  run.got = {std::vector<float>(run.q.size(), -9.0f), std::vector<float>(static_cast<std::size_t>(total * hq), -9.0f)};
  const auto sources = batch.sources();
  inferkit::attention_batch({run.q.data(), total, hq, d}, run.cu, sources, {run.got.out.data(), total, hq, d},
                            {run.got.lse.data(), total, hq}, opt);
  const test::Result ref = test::reference_batch(run.q, hq, d, run.cu, sources, opt);
  for (std::size_t b = 0; b < counts.size(); ++b) {
    INFO("sequence " << b << ": " << counts[b] << " queries over " << sources[b].num_tokens() << " tokens");
    const auto rows = [&](const std::vector<float>& v, Index width) {
      return std::vector<float>(v.begin() + run.cu[b] * width, v.begin() + run.cu[b + 1] * width);
    };
    CHECK(test::max_abs_diff(rows(run.got.out, hq * d), rows(ref.out, hq * d)) <= tol);
    CHECK(test::max_abs_diff(rows(run.got.lse, hq), rows(ref.lse, hq)) <= tol * 5);
  }
  return run;
}

std::vector<AttentionOptions> option_variants() {
  std::vector<AttentionOptions> v(5);
  v[1].alibi = true;
  v[1].window = 29;
  v[2].softcap = 2.5f;
  v[2].kv_split_tokens = 40;  // several decode splits per sequence
  v[3].causal = false;
  v[4].window = 1;
  v[4].num_threads = 1;
  return v;
}

}  // namespace

TEST_CASE("batch of paged sequences equals each sequence alone (pages 1, 5, 16; lengths 0 and 1)",
          "[attention][batch]") {
  const std::vector<Index> tokens{0, 1, 37, 130, 64, 300, 2, 0, 77};
  const std::vector<Index> counts{0, 1, 5, 40, 1, 8, 2, 3, 0};  // 3 queries over no tokens: fully masked
  for (Index page : {1, 5, 16}) {
    test::PagedBatch<float> batch(2, 24, page, 700);
    for (std::size_t s = 0; s < tokens.size(); ++s) {
      batch.add();
      batch.append(s, tokens[s], static_cast<std::uint32_t>(100 + s));
    }
    for (const AttentionOptions& opt : option_variants()) {
      INFO("page " << page << " causal " << opt.causal << " window " << opt.window << " alibi " << opt.alibi
                   << " softcap " << opt.softcap);
      const BatchRun run = check_batch(batch, counts, 8, opt, static_cast<std::uint32_t>(page));
      // Sequence 7 has no tokens: its rows are zeros with LSE -inf.
      for (Index i = run.cu[7] * 8; i < run.cu[8] * 8; ++i)
        CHECK(run.got.lse[static_cast<std::size_t>(i)] == -INFINITY);
    }
  }
}

TEST_CASE("batch with 16-bit pages, MHA and MQA", "[attention][batch]") {
  test::PagedBatch<inferkit::BFloat16> bf(1, 20, 16, 100);
  for (std::size_t s = 0; s < 3; ++s) {
    bf.add();
    bf.append(s, 50 + 70 * static_cast<Index>(s), static_cast<std::uint32_t>(7 + s));
  }
  check_batch(bf, {1, 30, 4}, 4, {}, 1);  // MQA: 4 query heads read one KV head
  test::PagedBatch<inferkit::Float16> f16(3, 16, 5, 100);
  for (std::size_t s = 0; s < 2; ++s) {
    f16.add();
    f16.append(s, 90, static_cast<std::uint32_t>(9 + s));
  }
  check_batch(f16, {12, 1}, 3, {}, 2);  // MHA
}

TEST_CASE("forked sequences sharing prefix blocks", "[attention][batch]") {
  test::PagedBatch<float> batch(2, 16, 16, 100);
  batch.add();
  batch.append(0, 40, 1);  // 2.5 pages: the third is partially filled
  const std::size_t b = batch.fork(0), c = batch.fork(0);
  batch.append(b, 9, 2);  // copies the shared partial page before writing
  batch.append(c, 30, 3);
  batch.append(0, 3, 4);
  REQUIRE(batch.tables[b].blocks()[0] == batch.tables[0].blocks()[0]);
  REQUIRE(batch.tables[c].blocks()[1] == batch.tables[0].blocks()[1]);
  REQUIRE(batch.pool->refcount(batch.tables[0].blocks()[0]) == 3);
  REQUIRE(batch.tables[b].blocks()[2] != batch.tables[0].blocks()[2]);
  for (const AttentionOptions& opt : option_variants()) check_batch(batch, {3, 1, 20}, 4, opt, 5);
}

TEST_CASE("one 2,000-token chunk batched with 63 decode rows (k + 1 = 2..5 for some)", "[attention][batch]") {
  const Index hq = 4, hkv = 2, d = 16;
  test::PagedBatch<float> batch(hkv, d, 16, 2500);
  std::mt19937 rng(11);
  std::vector<Index> counts;
  batch.add();
  batch.append(0, 96 + 2000, 1);  // 96 cached tokens, then the chunk's 2,000 (already appended)
  counts.push_back(2000);
  for (int s = 1; s <= 63; ++s) {
    batch.add();
    const Index rows = s % 8 == 0 ? 2 + s / 8 % 4 : 1;  // speculative verification rows
    batch.append(static_cast<std::size_t>(s), rows + static_cast<Index>(rng() % 500),
                 static_cast<std::uint32_t>(10 + s));
    counts.push_back(rows);
  }
  AttentionOptions opt;
  opt.alibi = true;  // (windows and the other options: the tests above)
  check_batch(batch, counts, hq, opt, 3);
}

TEST_CASE("batch with explicit query positions", "[attention][batch]") {
  test::PagedBatch<float> batch(1, 8, 5, 100);
  for (std::size_t s = 0; s < 3; ++s) {
    batch.add();
    batch.append(s, 60, static_cast<std::uint32_t>(s + 1));
  }
  // Sequence 0: 2 queries in the middle of its tokens; 1: 12 queries, some repeated and some
  // past the last token; 2: 1 query at position 0.
  std::vector<std::int32_t> pos{20, 31, 59, 3, 3, 70, 40, 41, 42, 0, 59, 61, 12, 30, 0};
  AttentionOptions opt;
  opt.query_positions = pos;
  opt.alibi = true;
  check_batch(batch, {2, 12, 1}, 2, opt, 6);
  opt.window = 9;
  check_batch(batch, {2, 12, 1}, 2, opt, 7);
}

TEST_CASE("batch rejects inconsistent inputs, naming the parameter", "[attention][batch][errors]") {
  using Catch::Contains;
  test::PagedBatch<float> batch(2, 8, 4, 50);
  for (std::size_t s = 0; s < 2; ++s) {
    batch.add();
    batch.append(s, 10, 1);
  }
  const auto src = batch.sources();
  std::vector<float> q(5 * 4 * 8), out(q.size()), lse(5 * 4);
  inferkit::Tensor3View<const float> qv(q.data(), 5, 4, 8);
  inferkit::Tensor3View<float> ov(out.data(), 5, 4, 8);
  const std::vector<std::int32_t> cu{0, 2, 5};
  CHECK_NOTHROW(inferkit::attention_batch(qv, cu, src, ov));
  // Index offsets (serving's BatchPlan::cu_q) give the same result and the same errors.
  const std::vector<float> by_int32 = out;
  std::fill(out.begin(), out.end(), -1.0f);
  inferkit::attention_batch(qv, std::vector<Index>{0, 2, 5}, src, ov);
  CHECK(out == by_int32);
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, std::vector<Index>{0, 2, 4}, src, ov), Contains("cu_q.back() = 4"));
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, std::vector<std::int32_t>{0, 5}, src, ov),
                    Contains("cu_q.size() = 2"));
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, std::vector<std::int32_t>{0, 2, 4}, src, ov),
                    Contains("cu_q.back() = 4"));
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, std::vector<std::int32_t>{0, 6, 5}, src, ov),
                    Contains("cu_q[2] = 5"));
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, std::vector<std::int32_t>{1, 2, 5}, src, ov),
                    Contains("cu_q[0] = 1"));
  AttentionOptions opt;
  const std::vector<std::int32_t> pos{1, 2, 3};
  opt.query_positions = pos;
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, cu, src, ov, {}, opt), Contains("query_positions.size() = 3"));
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, cu, src, ov, {lse.data(), 5, 3}), Contains("lse.cols() = 3"));
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, cu, src, inferkit::Tensor3View<float>(out.data(), 4, 4, 8)),
                    Contains("out.dim0() = 4"));
  // Head counts and head_dim must agree across sources and with q.
  test::PagedBatch<float> other(4, 8, 4, 10), wide(2, 16, 4, 10);
  other.add();
  wide.add();
  const std::vector mixed{src[0], other.sources()[0]};
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, cu, mixed, ov), Contains("kv[1].num_kv_heads() = 4"));
  const std::vector mixed_dim{src[0], wide.sources()[0]};
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, cu, mixed_dim, ov), Contains("kv[1].head_dim() = 16"));
  const std::vector<float> q3(5 * 3 * 8);
  std::vector<float> o3(q3.size());
  CHECK_THROWS_WITH(inferkit::attention_batch(inferkit::Tensor3View<const float>(q3.data(), 5, 3, 8), cu, src,
                                              inferkit::Tensor3View<float>(o3.data(), 5, 3, 8)),
                    Contains("num_q_heads = 3"));
  // An empty batch is valid with no queries.
  const std::vector<inferkit::BlockTable<float>::Source> none;
  CHECK_NOTHROW(inferkit::attention_batch(qv.slice0(0, 0), std::vector<std::int32_t>{0}, none, ov.slice0(0, 0)));
  CHECK_THROWS_WITH(inferkit::attention_batch(qv, std::vector<std::int32_t>{0}, none, ov), Contains("cu_q.back() = 0"));
}
