// Targeted tests of each scheduling rule: budget split order, chunk boundaries, sequence cap,
// prefix reuse (partial and full), preemption order, LPM order and its starvation bound,
// speculative rows, and pages fed to the trie while decoding.

#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "inferkit/serving/scheduler.hpp"
#include "serving/serving_test_util.hpp"

using inferkit::BlockId;
using inferkit::Index;
using inferkit::RequestId;
using inferkit::RequestState;
using inferkit::TokenId;

namespace {

std::vector<TokenId> iota_tokens(Index n, TokenId first = 0) {
  std::vector<TokenId> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

}  // namespace

TEST_CASE("budget split: decode rows, then partial prefills, then admissions; chunks bounded by budget and cap",
          "[serving]") {
  test::ServeHarness h(4, 64, {.max_batched_tokens = 10, .max_sequences = 8, .max_prefill_chunk = 0}, false);
  const RequestId a = h.add({.prompt = {1, 2, 3}, .max_new_tokens = 20});
  auto& p1 = h.sched.schedule();
  REQUIRE(p1.sequences.size() == 1);
  CHECK(p1.sequences[0].prefill);
  CHECK(p1.sequences[0].sample);
  CHECK(p1.num_admitted == 1);
  CHECK(p1.logit_rows == std::vector<Index>{2});
  h.finish_step(p1);
  CHECK(h.sched.info(a).state == RequestState::kDecoding);

  const RequestId b = h.add({.prompt = iota_tokens(20, 100), .max_new_tokens = 2});
  const RequestId c = h.add({.prompt = iota_tokens(5, 200), .max_new_tokens = 2});
  auto& p2 = h.sched.schedule();
  REQUIRE(p2.sequences.size() == 2);  // a decodes, b takes the other 9 tokens, c waits
  CHECK((p2.sequences[0].id == a && !p2.sequences[0].prefill && p2.sequences[0].num_tokens == 1 &&
         p2.sequences[0].position == 3));
  CHECK((p2.sequences[1].id == b && p2.sequences[1].position == 0 && p2.sequences[1].num_tokens == 9 &&
         !p2.sequences[1].sample));
  CHECK(p2.num_tokens() == 10);
  CHECK(p2.logit_rows == std::vector<Index>{0});  // only a's row is sampled
  CHECK(std::vector<TokenId>(p2.token_ids.begin() + 1, p2.token_ids.end()) == iota_tokens(9, 100));
  CHECK(h.sched.info(c).state == RequestState::kWaiting);
  h.finish_step(p2);
  CHECK(h.sched.info(b).state == RequestState::kPrefilling);
  CHECK(h.sched.info(b).cached_tokens == 9);

  auto& p3 = h.sched.schedule();  // a, b's second chunk (9 of its 11), nothing for c
  REQUIRE(p3.sequences.size() == 2);
  CHECK((p3.sequences[1].id == b && p3.sequences[1].position == 9 && p3.sequences[1].num_tokens == 9));
  CHECK(p3.num_admitted == 0);
  h.finish_step(p3);
  auto& p4 = h.sched.schedule();  // a, b's last 2 tokens (sampled), c admitted with 5 of the 7 left
  REQUIRE(p4.sequences.size() == 3);
  CHECK((p4.sequences[1].id == b && p4.sequences[1].num_tokens == 2 && p4.sequences[1].sample));
  CHECK((p4.sequences[2].id == c && p4.sequences[2].num_tokens == 5 && p4.sequences[2].sample));
  CHECK(p4.num_decode == 1);
  CHECK(p4.num_prefill == 2);
  CHECK(p4.cu_q == std::vector<Index>{0, 1, 3, 8});
  CHECK(p4.logit_rows == std::vector<Index>{0, 2, 7});
  h.finish_step(p4);
  h.drain();
  for (RequestId id : {a, b, c}) CHECK(h.matches_alone(id));
  CHECK(h.pool.used_blocks() == 0);  // no trie: everything went back at finish
}

TEST_CASE("max_prefill_chunk splits prompts at fixed boundaries; unchunked prefill runs whole or waits", "[serving]") {
  test::ServeHarness h(3, 64, {.max_batched_tokens = 16, .max_sequences = 4, .max_prefill_chunk = 5}, false);
  const RequestId a = h.add({.prompt = iota_tokens(13, 1), .max_new_tokens = 3});
  std::vector<Index> starts;
  for (int i = 0; i < 3; ++i) {
    auto& p = h.sched.schedule();
    REQUIRE(p.sequences.size() == 1);
    starts.push_back(p.sequences[0].position);
    CHECK(p.sequences[0].num_tokens == std::min<Index>(5, 13 - p.sequences[0].position));
    CHECK(p.sequences[0].sample == (i == 2));
    h.finish_step(p);
  }
  CHECK(starts == std::vector<Index>{0, 5, 10});
  h.drain();
  CHECK(h.matches_alone(a));

  test::ServeHarness u(4, 64, {.max_batched_tokens = 12, .max_sequences = 4, .chunked_prefill = false}, false);
  const RequestId x = u.add({.prompt = iota_tokens(8, 1), .max_new_tokens = 2});
  const RequestId y = u.add({.prompt = iota_tokens(6, 50), .max_new_tokens = 2});
  auto& q = u.sched.schedule();  // x whole (8); y's 6 do not fit in the 4 left: it waits whole
  REQUIRE(q.sequences.size() == 1);
  CHECK(q.sequences[0].num_tokens == 8);
  u.finish_step(q);
  auto& q2 = u.sched.schedule();
  REQUIRE(q2.sequences.size() == 2);
  CHECK((q2.sequences[1].id == y && q2.sequences[1].num_tokens == 6 && q2.sequences[1].sample));
  u.finish_step(q2);
  u.drain();
  CHECK(u.matches_alone(x));
  CHECK(u.matches_alone(y));
}

TEST_CASE("max_prefill_tokens caps an iteration's prefill tokens over all requests, not its decode rows", "[serving]") {
  test::ServeHarness h(4, 128, {.max_batched_tokens = 24, .max_sequences = 6, .max_prefill_tokens = 7}, true);
  std::vector<RequestId> ids;
  for (int i = 0; i < 6; ++i)
    ids.push_back(h.add({.prompt = iota_tokens(5 + 3 * i, static_cast<TokenId>(20 * i)), .max_new_tokens = 6}));
  bool capped = false, beside = false;
  while (!h.sched.idle()) {
    auto& p = h.sched.schedule();
    Index prefill = 0, decode = 0;
    for (const auto& s : p.sequences) (s.prefill ? prefill : decode) += s.num_tokens;
    CHECK(prefill <= 7);
    capped = capped || prefill == 7;
    beside = beside || (prefill == 7 && decode >= 2);
    h.finish_step(p);
  }
  CHECK(capped);  // the cap was reached, so it did cut
  CHECK(beside);  // requests decoded beside a capped prefill (decode rows are not capped)
  for (RequestId id : ids) CHECK(h.matches_alone(id));
  using Catch::Matchers::Contains;
  inferkit::BlockPool<float> pool({1, 1, test::kHeadDim, 4, 16});
  using S = inferkit::Scheduler<float>;
  CHECK_THROWS_WITH(S(pool, nullptr, {.max_batched_tokens = 64, .max_sequences = 8, .max_prefill_tokens = -1}),
                    Contains("max_prefill_tokens = -1"));
  CHECK_THROWS_WITH(
      S(pool, nullptr,
        {.max_batched_tokens = 64, .max_sequences = 8, .max_prefill_tokens = 16, .chunked_prefill = false}),
      Contains("needs chunked_prefill"));
  CHECK_THROWS_WITH(
      S(pool, nullptr,
        {.max_batched_tokens = 64, .max_sequences = 8, .max_prefill_tokens = 3, .prefill_chunk_alignment = 4}),
      Contains("max_prefill_tokens = 3"));
}

TEST_CASE("prefill_chunk_alignment: unfinished chunks end at multiples of it, after a cached prefix too", "[serving]") {
  // Budget 10 with two decode rows leaves 8, 7 or 9: chunks are cut back to multiples of 4 of
  // the sequence's tokens; the chunk that finishes a prompt ends where the prompt ends.
  test::ServeHarness h(
      4, 64, {.max_batched_tokens = 10, .max_sequences = 3, .max_prefill_chunk = 6, .prefill_chunk_alignment = 4},
      true);
  const RequestId a = h.add({.prompt = iota_tokens(3, 1), .max_new_tokens = 30});
  const RequestId b = h.add({.prompt = iota_tokens(23, 100), .max_new_tokens = 3});
  std::vector<Index> ends;
  while (h.sched.info(b).state != RequestState::kDecoding) {
    auto& p = h.sched.schedule();
    for (const auto& s : p.sequences)
      if (s.id == b && s.prefill) {
        CHECK(s.position % 4 == 0);
        ends.push_back(s.position + s.num_tokens);
      }
    h.finish_step(p);
  }
  REQUIRE(!ends.empty());
  CHECK(ends.back() == 23);
  for (std::size_t i = 0; i + 1 < ends.size(); ++i) CHECK(ends[i] % 4 == 0);
  CHECK(ends.front() == 4);  // 6 allowed by the cap, cut to 4 (a's prompt took 3 of the budget)
  // A second request with b's prompt starts after the cached whole pages (a multiple of the
  // page, 4) and keeps the alignment.
  const RequestId c = h.add({.prompt = iota_tokens(23, 100), .max_new_tokens = 2});
  auto& p = h.sched.schedule();
  bool seen = false;
  for (const auto& s : p.sequences)
    if (s.id == c) {
      seen = true;
      CHECK(s.position == 20);  // 5 cached pages of the 22 tokens before the last
      CHECK(s.position + s.num_tokens == 23);
    }
  CHECK(seen);
  h.finish_step(p);
  h.drain();
  for (RequestId id : {a, b, c}) CHECK(h.matches_alone(id));
}

TEST_CASE("prefill_chunk_alignment needs room for an aligned chunk", "[serving][errors]") {
  using Catch::Matchers::Contains;
  inferkit::BlockPool<float> pool({1, 1, test::kHeadDim, 4, 16});
  using S = inferkit::Scheduler<float>;
  CHECK_THROWS_WITH(S(pool, nullptr, {.max_batched_tokens = 10, .max_sequences = 8, .prefill_chunk_alignment = 4}),
                    Contains("max_batched_tokens = 10") && Contains("prefill_chunk_alignment - 1 (11)"));
  CHECK_THROWS_WITH(
      S(pool, nullptr,
        {.max_batched_tokens = 64, .max_sequences = 8, .max_prefill_chunk = 3, .prefill_chunk_alignment = 4}),
      Contains("max_prefill_chunk = 3"));
  CHECK_THROWS_WITH(S(pool, nullptr, {.max_batched_tokens = 64, .max_sequences = 8, .prefill_chunk_alignment = -2}),
                    Contains("prefill_chunk_alignment = -2"));
  CHECK_NOTHROW(S(pool, nullptr, {.max_batched_tokens = 11, .max_sequences = 8, .prefill_chunk_alignment = 4}));
}

TEST_CASE("max_sequences caps running requests; the next one is admitted when one finishes", "[serving]") {
  test::ServeHarness h(4, 64, {.max_batched_tokens = 32, .max_sequences = 2}, false);
  const RequestId a = h.add({.prompt = {1}, .max_new_tokens = 2});
  const RequestId b = h.add({.prompt = {2}, .max_new_tokens = 5});
  const RequestId c = h.add({.prompt = {3}, .max_new_tokens = 1});
  auto& p = h.sched.schedule();
  CHECK(p.sequences.size() == 2);
  CHECK(h.sched.info(c).state == RequestState::kWaiting);
  h.finish_step(p);
  const auto f = h.step();  // a generates its second token and finishes
  REQUIRE(f.size() == 1);
  CHECK(f[0].id == a);
  auto& p3 = h.sched.schedule();
  REQUIRE(p3.sequences.size() == 2);
  CHECK((p3.sequences[0].id == b && p3.sequences[1].id == c));
  h.finish_step(p3);
  h.drain();
  for (RequestId id : {a, b, c}) CHECK(h.matches_alone(id));
}

TEST_CASE("prefix reuse: whole cached pages are skipped; a fully cached prompt recomputes its last page",
          "[serving][trie]") {
  for (Index page : {1, 4}) {
    INFO("page " << page);
    test::ServeHarness h(page, 64, {.max_batched_tokens = 64, .max_sequences = 4});
    const auto prompt = iota_tokens(8, 3);
    const RequestId x = h.add({.prompt = prompt, .max_new_tokens = 1});
    h.drain();
    REQUIRE(h.matches_alone(x));
    CHECK(h.trie.cached_pages() == 8 / page);
    CHECK(h.pool.used_blocks() == 8 / page);  // the trie keeps the finished request's pages

    // Same prompt plus 2 tokens: the 8 cached tokens are skipped.
    auto longer = prompt;
    longer.push_back(1);
    longer.push_back(2);
    const RequestId y = h.add({.prompt = longer, .max_new_tokens = 2, .seed = 5});
    auto& p = h.sched.schedule();
    REQUIRE(p.sequences.size() == 1);
    CHECK(p.sequences[0].position == 8);
    CHECK(p.sequences[0].num_tokens == 2);
    h.finish_step(p);
    h.drain();
    CHECK(h.matches_alone(y));

    // The very same prompt, cached whole: its last token must be computed for its logits, so
    // only the pages before it are matched (the last page is recomputed: 8 tokens, page 4 ->
    // position 4; page 1 -> position 7); once recomputed, the cached copy of that page is shared
    // and the request's own copy freed.
    const auto before = h.sched.stats().cached_tokens;
    const Index used = h.pool.used_blocks();
    const RequestId z = h.add({.prompt = prompt, .max_new_tokens = 3, .seed = 9});
    auto& q = h.sched.schedule();
    REQUIRE(q.sequences.size() == 1);
    const auto& s = q.sequences[0];
    const Index skip = (8 - 1) / page * page;
    CHECK(s.position == skip);
    CHECK(s.num_tokens == 8 - skip);
    CHECK(s.sample);
    CHECK(h.sched.stats().cached_tokens - before == static_cast<std::uint64_t>(skip));
    CHECK(h.pool.used_blocks() == used + 1);  // a private page for the recomputed tokens
    const BlockId own = h.sched.info(z).table->blocks().back();
    h.finish_step(q);
    CHECK(h.pool.refcount(own) == 0);  // deduplicated against the cached page
    CHECK(h.pool.used_blocks() == used);
    CHECK(h.sched.info(z).pinned_tokens == 8);
    h.drain();
    CHECK(h.matches_alone(z));
  }
}

TEST_CASE("another identity never reuses the cache", "[serving][trie]") {
  test::ServeHarness h(2, 64, {.max_batched_tokens = 64, .max_sequences = 4});
  const auto prompt = iota_tokens(6, 1);
  h.add({.prompt = prompt, .max_new_tokens = 1, .identity = {"m"}});
  h.drain();
  const RequestId y = h.add({.prompt = prompt, .max_new_tokens = 2, .identity = {"m", "adapter"}});
  auto& p = h.sched.schedule();
  CHECK(p.sequences[0].position == 0);
  h.finish_step(p);
  h.drain();
  CHECK(h.matches_alone(y));
}

TEST_CASE("pages are fed to the trie as they fill, while decoding, and pinned by their request", "[serving][trie]") {
  test::ServeHarness h(2, 64, {.max_batched_tokens = 8, .max_sequences = 2});
  const RequestId a = h.add({.prompt = {5, 6, 7}, .max_new_tokens = 6});
  std::vector<Index> pinned;
  while (h.sched.contains(a)) {
    h.step();
    if (h.sched.contains(a)) pinned.push_back(h.sched.info(a).pinned_tokens);
  }
  // Cached after each step: 3, 4, 5, 6, 7, 8 tokens; pinned: the full pages of those.
  CHECK(pinned == std::vector<Index>{2, 4, 4, 6, 6});
  CHECK(h.matches_alone(a));
  CHECK(h.trie.cached_pages() == 4);  // 8 computed tokens (the last generated one is never fed)
  CHECK(h.trie.evict(100) == 4);
  CHECK(h.pool.used_blocks() == 0);
}

TEST_CASE(
    "memory pressure: unpinned trie pages are evicted first, then the most recently admitted request is preempted",
    "[serving][preempt]") {
  // Page 2, 8 blocks. x leaves 2 unpinned pages in the trie; a and b then grow until the pool
  // is full.
  test::ServeHarness h(2, 8, {.max_batched_tokens = 16, .max_sequences = 4});
  h.add({.prompt = {9, 9, 9, 9}, .max_new_tokens = 1});
  h.drain();
  REQUIRE(h.trie.cached_pages() == 2);
  const RequestId a = h.add({.prompt = {1, 2, 3}, .max_new_tokens = 10, .seed = 1});
  const RequestId b = h.add({.prompt = {4, 5, 6}, .max_new_tokens = 10, .seed = 2});
  bool evicted_before_preemption = false;
  RequestId victim = -1;
  Index victim_generated = -1;
  for (int i = 0; i < 20 && victim < 0; ++i) {
    auto& p = h.sched.schedule();
    if (!p.preempted.empty()) {
      REQUIRE(p.preempted.size() == 1);
      victim = p.preempted[0];
      victim_generated = static_cast<Index>(h.sched.info(victim).generated.size());
      CHECK(p.num_admitted == 0);  // no admissions in an iteration that preempted
      for (const auto& s : p.sequences) CHECK(s.id != victim);
    } else if (h.sched.stats().evicted_pages == 2) {
      evicted_before_preemption = true;
    }
    CHECK(h.sched.stats().preemptions == (victim < 0 ? 0u : 1u));
    h.finish_step(p);
  }
  CHECK(evicted_before_preemption);
  CHECK(victim == b);  // admitted after a
  CHECK(h.sched.info(b).state == RequestState::kWaiting);
  CHECK(static_cast<Index>(h.sched.info(b).generated.size()) == victim_generated);  // generated tokens kept
  // b resumes by prefilling prompt + generated, drawing from where it stopped.
  bool resumed = false;
  while (!h.sched.idle()) {
    auto& p = h.sched.schedule();
    for (const auto& s : p.sequences)
      if (s.id == b && !resumed && s.prefill) {
        resumed = true;
        CHECK(s.draw_index == victim_generated);
        CHECK(static_cast<Index>(s.context.size()) == 3 + victim_generated);
      }
    h.finish_step(p);
  }
  CHECK(resumed);
  CHECK(h.matches_alone(a));
  CHECK(h.matches_alone(b));
  CHECK(h.done.at(b).preemptions >= 1);
}

TEST_CASE("a prefill chunk that needs memory preempts a younger request whose decode row was already planned",
          "[serving][preempt]") {
  // a (28-token prompt) prefills in chunks of 8; b (admitted after a) decodes. When a's last
  // chunk needs the pool's last blocks, b is preempted and its planned decode row leaves the plan.
  test::ServeHarness h(4, 8, {.max_batched_tokens = 10, .max_sequences = 2, .max_prefill_chunk = 8});
  const RequestId a = h.add({.prompt = iota_tokens(28, 1), .max_new_tokens = 1});
  const RequestId b = h.add({.prompt = {40, 41}, .max_new_tokens = 6});
  bool seen = false;
  for (int i = 0; i < 10 && !seen; ++i) {
    auto& p = h.sched.schedule();
    if (!p.preempted.empty()) {
      seen = true;
      CHECK(p.preempted == std::vector<RequestId>{b});
      REQUIRE(p.sequences.size() == 1);
      CHECK((p.sequences[0].id == a && p.sequences[0].prefill));
      CHECK(p.num_decode == 0);
    }
    h.finish_step(p);
  }
  CHECK(seen);
  h.drain();
  CHECK(h.matches_alone(a));
  CHECK(h.matches_alone(b));
}

TEST_CASE("LPM admits the longest cached prefix first; a request waiting past the bound goes first", "[serving][lpm]") {
  for (Index bound : {100, 1}) {
    INFO("starvation bound " << bound);
    test::ServeHarness h(2, 64,
                         {.max_batched_tokens = 16,
                          .max_sequences = 1,
                          .policy = inferkit::SchedulingPolicy::kLongestPrefixMatch,
                          .starvation_iterations = bound});
    const auto system = iota_tokens(8, 20);
    h.add({.prompt = system, .max_new_tokens = 1});
    h.drain();
    auto half = std::vector<TokenId>(system.begin(), system.begin() + 4), full = system;
    half.push_back(1);
    full.push_back(2);
    const RequestId w0 = h.add({.prompt = {7, 7, 7}, .max_new_tokens = 3});
    const RequestId w1 = h.add({.prompt = half, .max_new_tokens = 3});
    const RequestId w2 = h.add({.prompt = full, .max_new_tokens = 3});
    std::vector<RequestId> order;
    while (!h.sched.idle()) {
      auto& p = h.sched.schedule();
      for (Index i = static_cast<Index>(p.sequences.size()) - p.num_admitted;
           i < static_cast<Index>(p.sequences.size()); ++i)
        order.push_back(p.sequences[static_cast<std::size_t>(i)].id);
      h.finish_step(p);
    }
    if (bound == 100)
      CHECK(order == std::vector<RequestId>{w2, w1, w0});
    else
      CHECK(order == std::vector<RequestId>{w2, w0, w1});  // w0 and w1 both starve; w0 waited first (arrived first)
    for (RequestId id : {w0, w1, w2}) CHECK(h.matches_alone(id));
  }
}

TEST_CASE("LPM hints follow the trie: a waiting request's cached prefix is refreshed round robin", "[serving][lpm]") {
  // One running slot. r, v, w arrive together into an empty trie (all hints 0); while r runs,
  // its pages enter the trie. w shares r's prompt: refreshed, its hint lets it pass v (which
  // arrived first and matches nothing); without refreshes the stale hints keep arrival order.
  for (Index refresh : {1, 0}) {
    INFO("refresh " << refresh);
    test::ServeHarness h(2, 64,
                         {.max_batched_tokens = 16,
                          .max_sequences = 1,
                          .policy = inferkit::SchedulingPolicy::kLongestPrefixMatch,
                          .starvation_iterations = 1000,
                          .lpm_refresh_per_iteration = refresh});
    const auto prompt = iota_tokens(6, 30);
    auto shared = prompt;
    shared.push_back(0);
    const RequestId r = h.add({.prompt = prompt, .max_new_tokens = 4});
    const RequestId v = h.add({.prompt = {1, 2, 3}, .max_new_tokens = 2});
    const RequestId w = h.add({.prompt = shared, .max_new_tokens = 2});
    CHECK(h.sched.waiting_ids() == std::vector<RequestId>{r, v, w});  // no hints yet: arrival order
    std::vector<RequestId> order;
    while (!h.sched.idle()) {
      auto& p = h.sched.schedule();
      for (Index i = static_cast<Index>(p.sequences.size()) - p.num_admitted;
           i < static_cast<Index>(p.sequences.size()); ++i)
        order.push_back(p.sequences[static_cast<std::size_t>(i)].id);
      h.finish_step(p);
    }
    if (refresh > 0)
      CHECK(order == std::vector<RequestId>{r, w, v});
    else
      CHECK(order == std::vector<RequestId>{r, v, w});
    for (RequestId id : {r, v, w}) CHECK(h.matches_alone(id));
    // A request that arrives once the pages exist gets its hint at once.
    h.add({.prompt = {1, 2, 3, 4}, .max_new_tokens = 1});
    const RequestId x = h.add({.prompt = shared, .max_new_tokens = 1});
    CHECK(h.sched.waiting_ids().front() == x);
  }
}

TEST_CASE("speculative rows: supplied drafts and reserved slots, accepted prefix kept, table rolled back",
          "[serving][speculative]") {
  test::ServeHarness h(4, 64, {.max_batched_tokens = 16, .max_sequences = 2}, false);
  inferkit::RequestParams rp{.prompt = {3, 1, 4}, .max_new_tokens = 12, .seed = 77};
  const auto solo = test::serve_alone(rp, test::ServeHarness::kVocab);
  const RequestId a = h.add(rp);
  h.step();  // prefill: generated 1
  // Supplied drafts: the true next two tokens, then a wrong one.
  std::vector<TokenId> d{solo.generated[1], solo.generated[2], static_cast<TokenId>((solo.generated[3] + 1) % 16)};
  h.sched.set_draft(a, d);
  auto& p = h.sched.schedule();
  REQUIRE(p.sequences.size() == 1);
  const auto& s = p.sequences[0];
  CHECK(s.num_tokens == 4);
  CHECK(s.draft_tokens == 3);
  CHECK(s.draw_index == 1);
  CHECK(p.logit_rows == std::vector<Index>{0, 1, 2, 3});
  CHECK(std::vector<TokenId>(s.tokens.begin() + 1, s.tokens.end()) == d);
  CHECK(s.table->num_tokens() == 3 + 4);
  h.finish_step(p);  // accepts 2 drafts, corrects the third
  CHECK(h.sched.info(a).generated.size() == 4);
  CHECK(h.sched.info(a).cached_tokens == 3 + 3);  // the rejected draft's row is rolled back
  CHECK(h.sched.stats().accepted_draft_tokens == 2);
  // Reserved slots the caller fills after planning.
  auto& q = h.sched.schedule({.reserve_draft_tokens = 2});
  REQUIRE(q.sequences.size() == 1);
  auto& t = q.sequences[0];
  CHECK(t.draft_tokens == 2);
  CHECK(t.tokens[1] == inferkit::kDraftSlot);
  t.tokens[1] = solo.generated[4];
  t.tokens[2] = solo.generated[5];
  h.finish_step(q);  // both accepted plus a bonus
  CHECK(h.sched.info(a).generated.size() == 7);
  // Drafts never run past max_new_tokens: 5 left, so at most 4 drafts.
  h.sched.set_draft(a, std::vector<TokenId>(9, 0));
  auto& r = h.sched.schedule();
  CHECK(r.sequences[0].draft_tokens == 4);
  h.finish_step(r);
  h.drain();
  CHECK(h.matches_alone(a));
}

TEST_CASE("speculative tokens past a stop rule are discarded", "[serving][speculative]") {
  test::ServeHarness h(4, 64, {.max_batched_tokens = 16, .max_sequences = 2}, false);
  // Find a seed whose second generated token can serve as the EOS id.
  inferkit::RequestParams rp{.prompt = {2, 7}, .max_new_tokens = 10};
  test::SoloResult plain;
  for (rp.seed = 1;; ++rp.seed) {
    plain = test::serve_alone(rp, test::ServeHarness::kVocab);
    if (plain.generated[1] != plain.generated[0] && plain.generated[2] != plain.generated[1]) break;
  }
  rp.eos_token_ids = {plain.generated[1]};
  const RequestId a = h.add(rp);
  h.step();
  h.sched.set_draft(a, std::vector<TokenId>{plain.generated[1], plain.generated[2], plain.generated[3]});
  const auto f = h.step();  // all drafts accepted, but the first is EOS: the rest are dropped
  REQUIRE(f.size() == 1);
  CHECK(f[0].output == std::vector<TokenId>{plain.generated[0], plain.generated[1]});
  CHECK(f[0].reason == inferkit::FinishReason::kEos);
  CHECK(h.matches_alone(a));
  CHECK(h.pool.used_blocks() == 0);
}
