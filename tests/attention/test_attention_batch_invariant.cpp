// Batch-invariant mode (AttentionOptions::batch_invariant): every query row's output and LSE bits
// equal those of the same row computed in one whole-prompt call, whatever the chunking (1, 7,
// 64, 333 tokens: decode and prefill paths), the batch mates, the thread count, the source's
// page size; and the whole-prompt result matches the fp64 reference.
#include <bit>
#include <random>

#include "attention/batch_test_util.hpp"

namespace {

using inferkit::AttentionOptions;
using Source = inferkit::BlockTable<float>::Source;

constexpr Index kHq = 8, kHkv = 2, kD = 24;  // head_dim off the vector width: padded columns

struct Prompt {
  Index t;
  std::vector<float> q, k, v;
  explicit Prompt(Index tokens, std::uint32_t seed)
      : t(tokens),
        q(test::random_normal(static_cast<std::size_t>(t * kHq * kD), seed)),
        k(test::random_normal(static_cast<std::size_t>(t * kHkv * kD), seed + 1)),
        v(test::random_normal(static_cast<std::size_t>(t * kHkv * kD), seed + 2)) {}
  inferkit::DenseKv<float> dense(Index n) const { return {{k.data(), n, kHkv, kD}, {v.data(), n, kHkv, kD}}; }
  /// Appends tokens [from, to) to a table.
  void append(inferkit::BlockTable<float>& table, Index from, Index to) const {
    REQUIRE(table.reserve(to - from));
    table.write(0, {k.data() + from * kHkv * kD, to - from, kHkv, kD},
                {v.data() + from * kHkv * kD, to - from, kHkv, kD});
    table.commit(to - from);
  }
};

/// Index of the first float whose bits differ, or -1.
Index first_difference(const float* a, const float* b, Index n) {
  for (Index i = 0; i < n; ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return i;
  return -1;
}

/// Other sequences to batch the probe with: paged, of assorted lengths and query counts.
struct Noise {
  test::PagedBatch<float> batch{kHkv, kD, 16, 400};
  std::vector<Index> counts;
  explicit Noise(std::uint32_t seed) {
    std::mt19937 rng(seed);
    const Index lengths[] = {0, 1, 300, 400, 64, 17, 150};
    for (std::size_t s = 0; s < std::size(lengths); ++s) {
      batch.add();
      batch.append(s, lengths[s], seed + static_cast<std::uint32_t>(s));
      counts.push_back(std::min<Index>(lengths[s], s == 2 ? 40 : static_cast<Index>(rng() % 13)));
    }
  }
};

/// Runs the probe's query rows [a, b) against `probe` (explicit positions when `positions`),
/// inserted at `slot` among the noise sequences, and returns its rows' out and LSE.
test::Result run_in_batch(const Prompt& pr, Index a, Index b, const Source& probe, const Noise& noise, std::size_t slot,
                          AttentionOptions opt, bool positions, std::uint32_t seed) {
  std::vector<Source> sources = noise.batch.sources();
  std::vector<Index> counts = noise.counts;
  sources.insert(sources.begin() + static_cast<std::ptrdiff_t>(slot), probe);
  counts.insert(counts.begin() + static_cast<std::ptrdiff_t>(slot), b - a);
  const auto cu = test::offsets(counts);
  const Index total = cu.back();
  std::vector<float> q = test::random_normal(static_cast<std::size_t>(total * kHq * kD), seed);
  std::copy(pr.q.begin() + a * kHq * kD, pr.q.begin() + b * kHq * kD, q.begin() + cu[slot] * kHq * kD);
  std::vector<std::int32_t> pos;
  if (positions) {
    for (std::size_t s = 0; s < sources.size(); ++s)
      for (Index i = 0; i < counts[s]; ++i)
        pos.push_back(s == slot ? static_cast<std::int32_t>(a + i)
                                : static_cast<std::int32_t>(sources[s].num_tokens() - counts[s] + i));
    opt.query_positions = pos;
  }
  std::vector<float> out(q.size()), lse(static_cast<std::size_t>(total * kHq));
  inferkit::attention_batch({q.data(), total, kHq, kD}, cu, sources, {out.data(), total, kHq, kD},
                            {lse.data(), total, kHq}, opt);
  return {std::vector<float>(out.begin() + cu[slot] * kHq * kD, out.begin() + cu[slot + 1] * kHq * kD),
          std::vector<float>(lse.begin() + cu[slot] * kHq, lse.begin() + cu[slot + 1] * kHq)};
}

void check_rows(const test::Result& whole, Index a, const test::Result& got) {
  const Index n_out = static_cast<Index>(got.out.size()), n_lse = static_cast<Index>(got.lse.size());
  const Index d_out = first_difference(whole.out.data() + a * kHq * kD, got.out.data(), n_out);
  const Index d_lse = first_difference(whole.lse.data() + a * kHq, got.lse.data(), n_lse);
  INFO("first differing output float " << d_out << " (row " << (d_out < 0 ? -1 : a + d_out / (kHq * kD)) << ")");
  CHECK(d_out == -1);
  INFO("first differing LSE " << d_lse);
  CHECK(d_lse == -1);
}

struct Variant {
  const char* name;
  AttentionOptions opt;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  AttentionOptions base;
  base.batch_invariant = true;
  base.kv_split_tokens = 128;  // several splits over a 520-token prompt
  v.push_back({"causal", base});
  AttentionOptions o = base;
  o.alibi = true;
  o.window = 150;
  v.push_back({"alibi + window", o});
  o = base;
  o.softcap = 3.0f;
  o.kv_split_tokens = 0;  // the default split (1,024 tokens: one split here)
  v.push_back({"softcap, default split", o});
  o = base;
  o.causal = false;
  o.window = 90;
  v.push_back({"window without causal", o});
  return v;
}

}  // namespace

TEST_CASE("batch-invariant rows are bitwise equal across chunkings, batch mixes, paths and threads",
          "[attention][invariant]") {
  const Prompt pr(520, 31);
  const Noise noise(5);
  for (const Variant& var : variants()) {
    INFO(var.name);
    AttentionOptions opt = var.opt;
    opt.num_threads = 1;
    // The whole prompt in one call over a dense source: the bits every other run must give.
    test::Result whole{std::vector<float>(pr.q.size()), std::vector<float>(static_cast<std::size_t>(pr.t * kHq))};
    inferkit::attention({pr.q.data(), pr.t, kHq, kD}, pr.dense(pr.t), {whole.out.data(), pr.t, kHq, kD},
                        {whole.lse.data(), pr.t, kHq}, opt);
    test::Result ref{std::vector<float>(pr.q.size()), std::vector<float>(static_cast<std::size_t>(pr.t * kHq))};
    inferkit::attention_reference({pr.q.data(), pr.t, kHq, kD}, pr.dense(pr.t), {ref.out.data(), pr.t, kHq, kD},
                                  {ref.lse.data(), pr.t, kHq}, opt);
    CHECK(test::max_abs_diff(whole.out, ref.out) < 2e-5);
    CHECK(test::max_abs_diff(whole.lse, ref.lse) < 1e-4);

    std::uint32_t seed = 100;
    for (Index chunk : {1, 7, 64, 333}) {
      INFO("chunks of " << chunk);
      const Index page = chunk == 7 ? 5 : 16;
      inferkit::BlockPool<float> pool({1, kHkv, kD, page, 400});
      inferkit::BlockTable<float> grown(pool);  // the prompt's cache as chunked prefill fills it
      inferkit::BlockTable<float> full(pool);   // the whole prompt cached (queries at explicit positions)
      pr.append(full, 0, pr.t);
      for (Index a = 0; a < pr.t; a += chunk) {
        const Index b = std::min(pr.t, a + chunk);
        INFO("rows [" << a << ", " << b << ")");
        opt.num_threads = seed % 4 == 0 ? 2 : 1;  // (2 threads for a quarter of the calls: forking is what costs here)
        const std::size_t slot = seed % (noise.counts.size() + 1);
        // Single tokens and chunks of 7: a sample, always including the rows at split edges.
        const bool probe = chunk > 7 || (a / chunk) % (chunk == 1 ? 23 : 3) == 0 || a % 128 < chunk + 1;
        if (opt.causal) {  // chunked prefill: the chunk's K/V appended, then attended
          pr.append(grown, a, b);
          if (probe) check_rows(whole, a, run_in_batch(pr, a, b, grown.source(0), noise, slot, opt, false, seed++));
        }
        if (probe && (chunk > 1 || a % 3 == 0))  // any mask: the same rows against the whole prompt's cache
          check_rows(whole, a, run_in_batch(pr, a, b, full.source(0), noise, slot, opt, true, seed++));
      }
    }
  }
}

TEST_CASE("batch-invariant bits do not depend on the source's page size or the entry point", "[attention][invariant]") {
  const Prompt pr(300, 41);
  AttentionOptions opt;
  opt.batch_invariant = true;
  opt.kv_split_tokens = 64;
  opt.alibi = true;
  for (const bool decode : {false, true}) {
    const Index tq = decode ? 3 : 40, q0 = pr.t - tq;
    const inferkit::Tensor3View<const float> qv(pr.q.data() + q0 * kHq * kD, tq, kHq, kD);
    test::Result dense{std::vector<float>(static_cast<std::size_t>(tq * kHq * kD)),
                       std::vector<float>(static_cast<std::size_t>(tq * kHq))};
    inferkit::attention(qv, pr.dense(pr.t), {dense.out.data(), tq, kHq, kD}, {dense.lse.data(), tq, kHq}, opt);
    for (Index page : {1, 5, 16, 64, 100}) {
      INFO("page " << page << (decode ? " decode" : " prefill"));
      inferkit::BlockPool<float> pool({1, kHkv, kD, page, 400});
      inferkit::BlockTable<float> table(pool);
      pr.append(table, 0, pr.t);
      test::Result paged = dense;
      inferkit::attention(qv, table.source(0), {paged.out.data(), tq, kHq, kD}, {paged.lse.data(), tq, kHq}, opt);
      check_rows(dense, 0, paged);
    }
    // attention_varlen over the same K/V in a packed batch with another sequence.
    const std::vector<std::int32_t> cu_q{0, 2, 2 + static_cast<std::int32_t>(tq)},
        cu_k{0, 5, 5 + static_cast<std::int32_t>(pr.t)};
    std::vector<float> q2(static_cast<std::size_t>((2 + tq) * kHq * kD)),
        k2(static_cast<std::size_t>((5 + pr.t) * kHkv * kD)), v2(k2.size());
    std::copy(qv.data(), qv.data() + tq * kHq * kD, q2.begin() + 2 * kHq * kD);
    std::copy(pr.k.begin(), pr.k.end(), k2.begin() + 5 * kHkv * kD);
    std::copy(pr.v.begin(), pr.v.end(), v2.begin() + 5 * kHkv * kD);
    std::vector<float> o2(q2.size()), l2(static_cast<std::size_t>((2 + tq) * kHq));
    inferkit::attention_varlen<float>({q2.data(), 2 + tq, kHq, kD}, cu_q, {k2.data(), 5 + pr.t, kHkv, kD},
                                      {v2.data(), 5 + pr.t, kHkv, kD}, cu_k, {o2.data(), 2 + tq, kHq, kD},
                                      {l2.data(), 2 + tq, kHq}, opt);
    check_rows(
        dense, 0,
        {std::vector<float>(o2.begin() + 2 * kHq * kD, o2.end()), std::vector<float>(l2.begin() + 2 * kHq, l2.end())});
  }
}

TEST_CASE("batch-invariant mode checks its split size", "[attention][invariant][errors]") {
  const Prompt pr(10, 1);
  std::vector<float> out(pr.q.size());
  AttentionOptions opt;
  opt.batch_invariant = true;
  opt.kv_split_tokens = 100;
  CHECK_THROWS_WITH(
      inferkit::attention({pr.q.data(), pr.t, kHq, kD}, pr.dense(pr.t), {out.data(), pr.t, kHq, kD}, {}, opt),
      Catch::Contains("kv_split_tokens = 100"));
  opt.kv_split_tokens = 192;
  CHECK_NOTHROW(
      inferkit::attention({pr.q.data(), pr.t, kHq, kD}, pr.dense(pr.t), {out.data(), pr.t, kHq, kD}, {}, opt));
}
