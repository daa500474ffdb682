// Stop rules, cancel in every state, and every rejected input of the scheduler.

#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <utility>
#include <vector>

#include "inferkit/serving/request.hpp"
#include "inferkit/serving/scheduler.hpp"
#include "serving/serving_test_util.hpp"

using inferkit::FinishReason;
using inferkit::Index;
using inferkit::RequestId;
using inferkit::RequestState;
using inferkit::TokenId;

TEST_CASE("stop rules: EOS kept, stop sequences dropped unless kept, order EOS > stop sequence > length",
          "[serving][stop]") {
  inferkit::RequestParams p{
      .prompt = {1}, .max_new_tokens = 4, .eos_token_ids = {9, 8}, .stop_sequences = {{3, 4}, {4}}};
  using V = std::vector<TokenId>;
  CHECK_FALSE(inferkit::check_stop(p, V{}).has_value());
  CHECK_FALSE(inferkit::check_stop(p, V{5}).has_value());
  auto s = inferkit::check_stop(p, V{5, 8});
  REQUIRE(s);
  CHECK((s->reason == FinishReason::kEos && s->trim == 0));
  s = inferkit::check_stop(p, V{3, 4});  // both stop sequences end here: the first listed wins
  REQUIRE(s);
  CHECK((s->reason == FinishReason::kStopSequence && s->stop_sequence == 0 && s->trim == 2));
  s = inferkit::check_stop(p, V{5, 4});
  REQUIRE(s);
  CHECK((s->stop_sequence == 1 && s->trim == 1));
  s = inferkit::check_stop(p, V{5, 5, 5, 4});  // stop sequence and length at once: the stop sequence
  REQUIRE(s);
  CHECK(s->reason == FinishReason::kStopSequence);
  s = inferkit::check_stop(p, V{5, 5, 5, 5});
  REQUIRE(s);
  CHECK(s->reason == FinishReason::kLength);
  p.keep_stop_sequence = true;
  CHECK(inferkit::check_stop(p, V{3, 4})->trim == 0);
  CHECK(std::string(inferkit::finish_reason_name(FinishReason::kStopSequence)) == "stop_sequence");
}

TEST_CASE("a stop sequence must lie within the generated tokens, not reach into the prompt", "[serving][stop]") {
  // The prompt ends with 4; generating 5 completes [4, 5] only across the boundary.
  test::ServeHarness h(4, 32, {.max_batched_tokens = 8, .max_sequences = 2}, false);
  inferkit::RequestParams rp{.prompt = {1, 4}, .max_new_tokens = 3};
  for (rp.seed = 0; test::serve_alone(rp, 16).generated[0] != 5; ++rp.seed) {}
  rp.stop_sequences = {{4, 5}};
  const RequestId a = h.add(rp);
  h.drain();
  CHECK(h.done.at(a).reason == FinishReason::kLength);
  CHECK(h.done.at(a).output.size() == 3);
  CHECK(h.matches_alone(a));
}

TEST_CASE("cancel in every state releases everything the request held", "[serving][cancel]") {
  test::ServeHarness h(2, 32, {.max_batched_tokens = 6, .max_sequences = 4, .max_prefill_chunk = 4});
  const std::vector<TokenId> shared{1, 2, 3, 4};
  h.add({.prompt = shared, .max_new_tokens = 1});
  h.drain();  // the trie holds 2 pages
  const Index trie_pages = h.trie.cached_pages();
  const auto only_trie_left = [&] {
    CHECK(h.pool.used_blocks() == h.trie.cached_pages());
    CHECK(h.trie.evict(0) == 0);
  };
  // Waiting.
  const RequestId w = h.add({.prompt = {7, 7}, .max_new_tokens = 3});
  CHECK(h.sched.cancel(w));
  CHECK_FALSE(h.sched.contains(w));
  CHECK(h.sched.idle());
  // Prefilling (matched the shared pages, pinned them, holds a chunk).
  auto long_prompt = shared;
  for (int i = 0; i < 9; ++i) long_prompt.push_back(static_cast<TokenId>(10 + i));
  const RequestId p = h.add({.prompt = long_prompt, .max_new_tokens = 3});
  h.step();
  REQUIRE(h.sched.info(p).state == RequestState::kPrefilling);
  CHECK(h.sched.info(p).pinned_tokens >= 4);
  CHECK(h.trie.evict(100) == 0);  // everything cached is pinned by p
  CHECK(h.sched.cancel(p));
  only_trie_left();
  // Decoding.
  const RequestId d = h.add({.prompt = {5}, .max_new_tokens = 9});
  h.step();
  h.step();
  REQUIRE(h.sched.info(d).state == RequestState::kDecoding);
  CHECK(h.sched.cancel(d));
  only_trie_left();
  // In flight: the plan's table stays valid for the forward; released at complete().
  const RequestId f = h.add({.prompt = {6, 6, 6}, .max_new_tokens = 9});
  const RequestId g = h.add({.prompt = {8}, .max_new_tokens = 2});
  auto& plan = h.sched.schedule();
  REQUIRE(plan.sequences.size() == 2);
  CHECK(h.sched.cancel(f));
  CHECK_FALSE(h.sched.contains(f));
  CHECK_FALSE(h.sched.cancel(f));
  CHECK_THROWS_AS(h.sched.info(f), std::out_of_range);
  h.finish_step(plan);  // the fake model writes f's rows, complete() ignores its token
  CHECK_FALSE(h.done.count(f));
  h.drain();
  CHECK(h.matches_alone(g));
  only_trie_left();
  // Preempted (waiting again, holding nothing).
  test::ServeHarness t(2, 6, {.max_batched_tokens = 8, .max_sequences = 4});
  const RequestId a = t.add({.prompt = {1, 2, 3}, .max_new_tokens = 8});
  const RequestId b = t.add({.prompt = {4, 5, 6}, .max_new_tokens = 8});
  RequestId victim = -1;
  for (int i = 0; i < 20 && victim < 0; ++i) {
    auto& q = t.sched.schedule();
    if (!q.preempted.empty()) victim = q.preempted[0];
    t.finish_step(q);
  }
  REQUIRE(victim == b);
  CHECK(t.sched.info(b).state == RequestState::kWaiting);
  CHECK(t.sched.cancel(b));
  t.drain();
  CHECK(t.matches_alone(a));
  CHECK_FALSE(t.done.count(b));
  t.trie.evict(100);
  CHECK(t.pool.used_blocks() == 0);
  CHECK(trie_pages == 2);
  CHECK(h.sched.stats().cancelled == 4);
}

TEST_CASE("scheduler errors name the parameter and the value", "[serving][errors]") {
  inferkit::BlockPool<float> pool({1, 1, 4, 4, 10});
  inferkit::PrefixTrie<float> trie(pool);
  using S = inferkit::Scheduler<float>;
  CHECK_THROWS_WITH(S(pool, &trie, {.max_sequences = 0}), Catch::Contains("max_sequences = 0"));
  CHECK_THROWS_WITH(S(pool, &trie, {.max_batched_tokens = 8, .max_sequences = 16}),
                    Catch::Contains("max_batched_tokens = 8") && Catch::Contains("max_sequences (16)"));
  CHECK_THROWS_WITH(S(pool, &trie, {.max_prefill_chunk = -1}), Catch::Contains("max_prefill_chunk = -1"));
  CHECK_THROWS_WITH(S(pool, &trie, {.starvation_iterations = -2}), Catch::Contains("starvation_iterations = -2"));
  inferkit::BlockPool<float> other({1, 1, 4, 8, 10});
  inferkit::PrefixTrie<float> other_trie(other);
  CHECK_THROWS_WITH(S(pool, &other_trie, {}), Catch::Contains("trie page_size = 8"));

  S s(pool, &trie, {.max_batched_tokens = 8, .max_sequences = 2});
  CHECK_THROWS_WITH(s.add_request({.prompt = {}}), Catch::Contains("prompt.size() = 0"));
  CHECK_THROWS_WITH(s.add_request({.prompt = {1, -3}}), Catch::Contains("prompt[1] = -3"));
  CHECK_THROWS_WITH(s.add_request({.prompt = {1}, .max_new_tokens = 0}), Catch::Contains("max_new_tokens = 0"));
  CHECK_THROWS_WITH(s.add_request({.prompt = {1}, .eos_token_ids = {2, -1}}), Catch::Contains("eos_token_ids[1] = -1"));
  CHECK_THROWS_WITH(s.add_request({.prompt = {1}, .stop_sequences = {{1}, {}}}),
                    Catch::Contains("stop_sequences[1].size() = 0"));
  CHECK_THROWS_WITH(s.add_request({.prompt = {1}, .stop_sequences = {{1, -5}}}),
                    Catch::Contains("stop_sequences[0][1] = -5"));
  // 10 blocks of 4 tokens: prompt 30 + 12 new needs ceil(41 / 4) = 11 blocks; 30 + 11 fits exactly.
  CHECK_THROWS_WITH(s.add_request({.prompt = std::vector<TokenId>(30, 1), .max_new_tokens = 12}),
                    Catch::Contains("prompt.size() + max_new_tokens = 42") && Catch::Contains("11 KV blocks") &&
                        Catch::Contains("could never run"));
  CHECK_NOTHROW(s.add_request({.prompt = std::vector<TokenId>(30, 1), .max_new_tokens = 11}));
  S u(pool, nullptr, {.max_batched_tokens = 8, .max_sequences = 2, .chunked_prefill = false});
  CHECK_THROWS_WITH(
      u.add_request({.prompt = std::vector<TokenId>(6, 1), .max_new_tokens = 4}),
      Catch::Contains("prompt.size() + max_new_tokens = 10") && Catch::Contains("without chunked prefill"));

  CHECK_THROWS_AS(s.set_draft(99, std::vector<TokenId>{1}), std::out_of_range);
  CHECK_THROWS_WITH(s.set_draft(0, std::vector<TokenId>{1, -1}), Catch::Contains("draft[1] = -1"));
  CHECK_THROWS_AS(s.info(42), std::out_of_range);
  CHECK_THROWS_AS(s.complete(std::vector<TokenId>{}), std::logic_error);
  CHECK_THROWS_WITH(s.schedule({.reserve_draft_tokens = -1}), Catch::Contains("reserve_draft_tokens = -1"));
}

TEST_CASE("complete() rejects reports that do not fit the plan and changes nothing", "[serving][errors]") {
  test::ServeHarness h(4, 32, {.max_batched_tokens = 16, .max_sequences = 2}, false);
  inferkit::RequestParams rp{.prompt = {1, 2}, .max_new_tokens = 6, .seed = 3};
  const auto solo = test::serve_alone(rp, test::ServeHarness::kVocab);
  const RequestId a = h.add(rp);
  const RequestId b = h.add({.prompt = {3}, .max_new_tokens = 6});
  auto& p = h.sched.schedule();
  CHECK_THROWS_AS(h.sched.schedule(), std::logic_error);  // the previous plan is still in flight
  using V = std::vector<TokenId>;
  using C = std::vector<Index>;
  CHECK_THROWS_WITH(h.sched.complete(V{1}), Catch::Contains("tokens.size() = 1"));
  CHECK_THROWS_WITH(h.sched.complete(V{1, 2, 3}), Catch::Contains("tokens.size() = 3"));
  CHECK_THROWS_WITH(h.sched.complete(V{1, -2}), Catch::Contains("tokens[1] = -2"));
  CHECK_THROWS_WITH(h.sched.complete(V{1, 2}, C{1}), Catch::Contains("counts.size() = 1"));
  CHECK_THROWS_WITH(h.sched.complete(V{1, 2, 3}, C{2, 1}),
                    Catch::Contains("counts[0] = 2") && Catch::Contains("1 to 1 tokens"));
  CHECK(h.sched.info(a).generated.empty());  // nothing changed
  h.finish_step(p);
  CHECK(h.sched.info(a).generated.size() == 1);
  // A speculative row: accepted tokens must equal the drafts fed.
  h.sched.set_draft(a, V{solo.generated[1], 0});
  auto& q = h.sched.schedule();
  REQUIRE(q.sequences[0].draft_tokens == 2);
  const TokenId wrong = static_cast<TokenId>((solo.generated[1] + 1) % 16);
  CHECK_THROWS_WITH(h.sched.complete(V{wrong, 5, 7}, C{2, 1}),
                    Catch::Contains("tokens[0]") && Catch::Contains("must equal its draft"));
  CHECK_THROWS_WITH(h.sched.complete(V{1, 2, 3, 4, 5}, C{4, 1}), Catch::Contains("counts[0] = 4"));
  CHECK(h.sched.info(a).cached_tokens == 2);
  h.finish_step(q);
  h.drain();
  CHECK(h.matches_alone(a));
  CHECK(h.matches_alone(b));
}

namespace {

// Everything a caller can observe of a scheduler, its pool and its trie.
struct Observed {
  std::vector<std::uint64_t> stats;
  std::vector<Index> counts;  // iteration, waiting, running, pool used / free, trie pages
  std::vector<RequestId> running, waiting;
  std::vector<std::vector<Index>> requests;  // per id: state, prompt, cached, pinned, preemptions, waited, table
  std::vector<std::vector<TokenId>> generated;
  std::vector<Index> refcounts;
  bool operator==(const Observed&) const = default;
};

Observed observe(const test::ServeHarness& h, RequestId last_id) {
  Observed o;
  const auto& s = h.sched.stats();
  o.stats = {s.iterations,
             s.admissions,
             s.preemptions,
             s.finished,
             s.cancelled,
             s.prefill_tokens,
             s.cached_tokens,
             s.decode_tokens,
             s.draft_tokens,
             s.accepted_draft_tokens,
             s.evicted_pages,
             h.trie.stats().inserted_pages,
             h.trie.stats().evictions};
  o.counts = {h.sched.iteration(),  h.sched.num_waiting(), h.sched.num_running(),
              h.pool.used_blocks(), h.pool.free_blocks(),  h.trie.cached_pages()};
  o.running = h.sched.running_ids();
  o.waiting = h.sched.waiting_ids();
  for (RequestId id = 0; id <= last_id; ++id) {
    if (!h.sched.contains(id)) continue;
    const auto i = h.sched.info(id);
    std::vector<Index> r{id,
                         static_cast<Index>(i.state),
                         i.prompt_tokens,
                         i.cached_tokens,
                         i.pinned_tokens,
                         i.preemptions,
                         i.waited_iterations,
                         i.table ? 1 : 0};
    if (i.table) {
      r.push_back(i.table->num_tokens());
      for (auto b : i.table->blocks()) r.push_back(b);
    }
    o.requests.push_back(r);
    o.generated.emplace_back(i.generated.begin(), i.generated.end());
  }
  for (inferkit::BlockId b = 0; b < h.pool.config().max_blocks; ++b) o.refcounts.push_back(h.pool.refcount(b));
  return o;
}

// Reports that do not fit the plan, derived from the right one: each must throw and change nothing.
std::vector<std::pair<std::vector<TokenId>, std::vector<Index>>> bad_reports(const inferkit::BatchPlan<float>& plan,
                                                                             const std::vector<TokenId>& tokens,
                                                                             const std::vector<Index>& counts) {
  std::vector<std::pair<std::vector<TokenId>, std::vector<Index>>> bad;
  if (tokens.empty()) return bad;
  auto t = tokens;
  t.pop_back();
  bad.push_back({t, counts});  // one token short (the last sequence's)
  t = tokens;
  t.push_back(1);
  bad.push_back({t, counts});  // one too many
  t = tokens;
  t.back() = -1;
  bad.push_back({t, counts});  // only the last sequence's token is bad: nothing may be applied before it
  auto c = counts;
  c.push_back(1);
  bad.push_back({tokens, c});  // a count too many
  c = counts;
  c.back() = 0;
  t = tokens;
  t.pop_back();
  bad.push_back({t, c});  // a count of 0 (tokens consistent with it)
  // The last sampled sequence takes one token more than its drafts allow.
  Index drafts = 0;
  for (const auto& s : plan.sequences)
    if (s.sample) drafts = s.draft_tokens;
  c = counts;
  c.back() = 2 + drafts;
  t = tokens;
  for (Index i = 1; i < c.back(); ++i) t.push_back(0);
  bad.push_back({t, c});
  // An accepted draft that is not the draft the forward fed.
  Index at = 0;
  std::size_t k = 0;
  for (const auto& s : plan.sequences) {
    if (!s.sample) continue;
    if (counts[k] >= 2) {
      t = tokens;
      t[static_cast<std::size_t>(at)] = static_cast<TokenId>((t[static_cast<std::size_t>(at)] + 1) % 16);
      bad.push_back({t, counts});
    }
    at += counts[k++];
  }
  return bad;
}

}  // namespace

TEST_CASE("complete(): a rejected report leaves the scheduler, its pool and its trie exactly as they were",
          "[serving][errors]") {
  // Two schedulers run the same workload (LPM over a shared prefix, speculative drafts, a pool
  // small enough to preempt); before each right report, the second is handed every bad report
  // derived from it. Each must throw and change nothing observable, and the two must stay equal.
  const inferkit::SchedulerConfig cfg{.max_batched_tokens = 12,
                                      .max_sequences = 3,
                                      .max_prefill_chunk = 5,
                                      .policy = inferkit::SchedulingPolicy::kLongestPrefixMatch,
                                      .starvation_iterations = 3};
  test::ServeHarness a(4, 6, cfg), b(4, 6, cfg);
  std::vector<inferkit::RequestParams> reqs;
  for (int i = 0; i < 7; ++i) {
    std::vector<TokenId> prompt{1, 2, 3, 4, 5};
    for (int j = 0; j <= i % 3; ++j) prompt.push_back(static_cast<TokenId>(6 + i + j));
    reqs.push_back(
        {.prompt = prompt, .max_new_tokens = 7 + i % 4, .eos_token_ids = {15}, .seed = static_cast<std::uint64_t>(i)});
  }
  RequestId last = -1;
  Index rejected = 0, speculative = 0;
  const auto identity = [](test::ServeHarness& h) {
    return [p = &h](RequestId id) { return p->params.at(id).identity; };
  };
  for (int it = 0; it < 200 && (it < 8 || !a.sched.idle()); ++it) {
    if (it < 7) {
      last = a.add(reqs[static_cast<std::size_t>(it)]);
      REQUIRE(b.add(reqs[static_cast<std::size_t>(it)]) == last);
    }
    for (test::ServeHarness* h : {&a, &b})  // drafts: the first running request guesses two tokens
      for (RequestId id : h->sched.running_ids())
        if (h->sched.info(id).state == RequestState::kDecoding) {
          h->sched.set_draft(id, std::vector<TokenId>{static_cast<TokenId>(it % 16), 3});
          break;
        }
    auto& pa = a.sched.schedule();
    auto& pb = b.sched.schedule();
    REQUIRE(pa.token_ids == pb.token_ids);
    if (pa.empty()) continue;
    const auto [ta, ca] = test::run_plan(a.pool, pa, identity(a), test::ServeHarness::kVocab);
    const auto [tb, cb] = test::run_plan(b.pool, pb, identity(b), test::ServeHarness::kVocab);
    REQUIRE(ta == tb);
    for (const auto& s : pb.sequences) speculative += s.draft_tokens > 0 ? 1 : 0;
    for (const auto& [bt, bc] : bad_reports(pb, tb, cb)) {
      const Observed before = observe(b, last);
      CHECK_THROWS_AS(b.sched.complete(bt, bc), std::invalid_argument);
      REQUIRE(observe(b, last) == before);
      ++rejected;
    }
    const auto fa = a.sched.complete(ta, ca);
    const auto fb = b.sched.complete(tb, cb);
    REQUIRE(fa.size() == fb.size());
    for (std::size_t i = 0; i < fa.size(); ++i) {
      CHECK(fa[i].output == fb[i].output);
      a.done.emplace(fa[i].id, fa[i]);
      b.done.emplace(fb[i].id, fb[i]);
    }
    REQUIRE(observe(a, last) == observe(b, last));
  }
  CHECK(a.sched.idle());
  CHECK(b.sched.idle());
  CHECK(a.sched.stats().preemptions > 0);  // the workload reached the interesting states
  CHECK(speculative > 0);
  CHECK(rejected > 50);
  for (RequestId id = 0; id <= last; ++id) CHECK(b.matches_alone(id));
}
