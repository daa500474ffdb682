// Scheduler token-tree drafts (serving/scheduler.hpp set_draft_tree, issue 31): the tree's rows
// get their KV blocks before the pass, complete() compacts the accepted path and returns the
// rejected rows' blocks. Against the fake model of serving_test_util.hpp (a token's K/V row
// hashes its whole prefix, read back from the cache): every request's output equals the request
// served alone by literal rules (a wrong compaction moves a wrong row and changes every later
// token), and the pool's used blocks equal the blocks the running tables (and the trie) hold
// after every step: a lost or leaked block fails the count.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "serving/serving_test_util.hpp"

using inferkit::Index;
using inferkit::RequestId;
using inferkit::TokenId;
using inferkit::TokenTree;

namespace {

constexpr int kTreeVocab = 16;

// The fake model over tree rows: row 0 (the root, the last fed token) reads h from the cache
// row before it; node i reads its parent's row, which this pass wrote at slot position + parent
// position. Writes each row at slot position + u; greedy verification walks the children while
// one holds the model's token (draw index draw_index + depth), then emits the model's token.
std::pair<std::vector<TokenId>, Index> run_tree_row(inferkit::BlockPool<float>& pool,
                                                    const inferkit::ScheduledSequence<float>& s,
                                                    const inferkit::ContextIdentity& id) {
  const TokenTree& tree = *s.tree;
  std::vector<std::uint64_t> h(static_cast<std::size_t>(tree.size() + 1));
  for (Index u = 0; u <= tree.size(); ++u) {
    const Index slot = s.position + u, depth = u == 0 ? 0 : tree.depth(u - 1), q = s.position + depth;
    REQUIRE(s.tokens[static_cast<std::size_t>(u)] == (u == 0 ? s.context.back() : tree.token(u - 1)));
    std::uint64_t prev;
    if (u == 0) {
      if (q == 0) {
        prev = test::identity_hash(id);
      } else {
        const test::Row r = test::read_row(pool, *s.table, q - 1);
        REQUIRE(r.k[1] == float(q - 1));  // the cache row of the position before the root
        prev = test::row_hash(r.k, r.v);
      }
    } else {
      const Index parent_slot = s.position + (tree.parent(u - 1) + 1);
      const test::Row r = test::read_row(pool, *s.table, parent_slot);
      REQUIRE(r.k[1] == float(q - 1));
      prev = test::row_hash(r.k, r.v);
    }
    const TokenId t = s.tokens[static_cast<std::size_t>(u)];
    h[static_cast<std::size_t>(u)] = test::step_hash(prev, t, q);
    test::write_row(*s.table, slot, test::make_row(t, q, h[static_cast<std::size_t>(u)]));
  }
  std::vector<TokenId> out;
  Index pos = 0;  // tree position
  for (Index depth = 0;; ++depth) {
    const TokenId t = test::next_token(h[static_cast<std::size_t>(pos)], s.seed, s.draw_index + depth, kTreeVocab);
    out.push_back(t);
    Index next = -1;
    for (Index c = tree.first_child(pos); c >= 0; c = tree.next_sibling(c))
      if (tree.token(c) == t) next = c;
    if (next < 0) break;
    pos = next + 1;
  }
  return {out, static_cast<Index>(out.size())};
}

// A random tree with distinct siblings; with probability 3/4 the true continuation `truth`
// (possibly cut short) is one of its branches, at a random sibling rank.
TokenTree random_tree(std::mt19937& rng, const std::vector<TokenId>& truth) {
  const auto uni = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  std::vector<TokenId> tok;
  std::vector<Index> par;
  const auto child_tokens = [&](Index parent) {
    std::set<TokenId> used;
    for (std::size_t i = 0; i < tok.size(); ++i)
      if (par[i] == parent) used.insert(tok[i]);
    return used;
  };
  const int n = uni(1, 24);
  const bool plant = uni(0, 3) > 0 && !truth.empty();
  const int plant_at = uni(0, n);  // nodes added before the true path
  const auto add_random = [&] {
    const Index parent =
        tok.empty() || uni(0, 2) == 0 ? TokenTree::kRoot : static_cast<Index>(uni(0, int(tok.size()) - 1));
    const auto used = child_tokens(parent);
    const TokenId t = static_cast<TokenId>(uni(0, kTreeVocab - 1));
    if (used.count(t) == 0 && tok.size() < 60) {
      tok.push_back(t);
      par.push_back(parent);
    }
  };
  for (int i = 0; i < plant_at; ++i) add_random();
  if (plant) {
    Index parent = TokenTree::kRoot;
    const int len = uni(1, static_cast<int>(std::min<std::size_t>(truth.size(), 6)));
    for (int j = 0; j < len; ++j) {
      Index found = -1;
      for (std::size_t i = 0; i < tok.size(); ++i)
        if (par[i] == parent && tok[i] == truth[static_cast<std::size_t>(j)]) found = static_cast<Index>(i);
      if (found < 0) {
        tok.push_back(truth[static_cast<std::size_t>(j)]);
        par.push_back(parent);
        found = static_cast<Index>(tok.size()) - 1;
      }
      parent = found;
    }
  }
  for (int i = plant_at; i < n; ++i) add_random();
  return TokenTree::from_topological(tok, par);
}

struct TreeRequest {
  inferkit::RequestParams params;
  test::SoloResult solo;
};

// Distinct blocks held by the running requests' tables.
std::set<inferkit::BlockId> held_blocks(const inferkit::Scheduler<float>& sched) {
  std::set<inferkit::BlockId> b;
  for (RequestId id : sched.running_ids()) {
    const auto info = sched.info(id);
    for (inferkit::BlockId x : info.table->blocks()) b.insert(x);
  }
  return b;
}

void run_soak(bool use_trie, Index blocks, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const auto uni = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  const Index page = 4;
  test::ServeHarness h(page, blocks, {.max_batched_tokens = 48, .max_sequences = 4}, use_trie);
  std::map<RequestId, TreeRequest> live;
  std::vector<std::vector<TokenId>> systems{{3, 1, 4, 1, 5, 9, 2}, {2, 7, 1, 8, 2, 8}};
  Index tree_rows = 0, accepted = 0, compacted = 0;
  for (int step = 0; step < 600; ++step) {
    if (step < 400 && uni(0, 2) == 0) {
      inferkit::RequestParams p;
      p.prompt = systems[static_cast<std::size_t>(uni(0, 1))];
      for (int i = uni(0, 5); i > 0; --i) p.prompt.push_back(static_cast<TokenId>(uni(0, kTreeVocab - 1)));
      p.max_new_tokens = uni(1, 20);
      p.seed = rng();
      if (h.sched.blocks_needed(static_cast<Index>(p.prompt.size()), p.max_new_tokens) <= blocks) {
        const RequestId id = h.add(p);
        live.emplace(id, TreeRequest{p, test::serve_alone(p, kTreeVocab)});
      }
    }
    if (step >= 400 && h.sched.idle()) break;
    // Trees for the running requests about to decode: random branches around the truth.
    for (RequestId id : h.sched.running_ids()) {
      const auto info = h.sched.info(id);
      if (info.state != inferkit::RequestState::kDecoding || uni(0, 4) == 0) continue;
      const auto& solo = live.at(id).solo.generated;
      const std::vector<TokenId> truth(solo.begin() + static_cast<std::ptrdiff_t>(info.generated.size()), solo.end());
      h.sched.set_draft_tree(id, random_tree(rng, truth));
    }
    auto& plan = h.sched.schedule();
    // Every row, the tree's included, has its slots committed before the pass.
    for (const auto& s : plan.sequences) REQUIRE(s.table->num_tokens() == s.position + s.num_tokens);
    if (!use_trie) REQUIRE(static_cast<Index>(held_blocks(h.sched).size()) == h.pool.used_blocks());
    if (!plan.empty()) {
      std::vector<TokenId> tokens;
      std::vector<Index> counts;
      for (const auto& s : plan.sequences) {
        if (!s.sample) {  // a prefill chunk: the plain fake model
          inferkit::BatchPlan<float> one;
          one.sequences.push_back(s);
          test::run_plan(
              h.pool, one, [&](RequestId r) { return h.params.at(r).identity; }, kTreeVocab);
          continue;
        }
        if (s.tree) {
          ++tree_rows;
          const auto [out, c] = run_tree_row(h.pool, s, h.params.at(s.id).identity);
          accepted += c - 1;
          // The accepted path is not the first branch: the rows move.
          bool first_branch = true;
          for (Index j = 0; j + 1 < c; ++j)
            first_branch = first_branch && s.tree->token(j) == out[static_cast<std::size_t>(j)];
          compacted += !first_branch;
          tokens.insert(tokens.end(), out.begin(), out.end());
          counts.push_back(c);
        } else {
          inferkit::BatchPlan<float> one;
          one.sequences.push_back(s);
          const auto [t, c] = test::run_plan(
              h.pool, one, [&](RequestId r) { return h.params.at(r).identity; }, kTreeVocab);
          tokens.insert(tokens.end(), t.begin(), t.end());
          counts.push_back(c[0]);
        }
      }
      for (const auto& f : h.sched.complete(tokens, counts)) h.done.emplace(f.id, f);
    }
    // After complete(): rejected rows' blocks are back in the pool.
    if (!use_trie) REQUIRE(static_cast<Index>(held_blocks(h.sched).size()) == h.pool.used_blocks());
    for (RequestId id : h.sched.running_ids()) {
      const auto info = h.sched.info(id);
      REQUIRE(static_cast<Index>(info.table->blocks().size()) == (info.table->num_tokens() + page - 1) / page);
    }
  }
  REQUIRE(h.sched.idle());
  for (const auto& [id, t] : live) {
    INFO("request " << id);
    CHECK(h.matches_alone(id));
  }
  if (use_trie) h.trie.evict(blocks);
  CHECK(h.pool.used_blocks() == 0);  // every block returned
  CHECK(tree_rows > 50);
  CHECK(accepted > tree_rows / 4);
  CHECK(compacted > 10);
  INFO("tree rows " << tree_rows << ", accepted " << accepted << ", compacted " << compacted);
}

}  // namespace

TEST_CASE("scheduler tree drafts: outputs equal serving alone, no block lost (no trie)", "[serving][tree]") {
  run_soak(false, 64, 1);
  run_soak(false, 20, 2);  // tight: preemptions, and compactions that find no spare block
}

TEST_CASE("scheduler tree drafts: outputs equal serving alone with the prefix trie", "[serving][tree]") {
  run_soak(true, 64, 3);
  run_soak(true, 24, 4);
}

TEST_CASE("scheduler tree drafts: clipped to max_new_tokens and the budget; bad trees rejected", "[serving][tree]") {
  test::ServeHarness h(4, 64, {.max_batched_tokens = 8, .max_sequences = 2}, false);
  inferkit::RequestParams p;
  p.prompt = {1, 2, 3};
  p.max_new_tokens = 3;
  p.seed = 5;
  const RequestId id = h.add(p);
  h.step();  // prefill: the first token
  REQUIRE(h.sched.info(id).state == inferkit::RequestState::kDecoding);
  // A chain of depth 5, then 9 more children of the root.
  TokenTree tree;
  Index a = tree.add(TokenTree::kRoot, 0);
  for (int d = 0; d < 4; ++d) a = tree.add(a, static_cast<TokenId>(d + 1));
  for (TokenId t = 5; t < 14; ++t) tree.add(TokenTree::kRoot, t);
  h.sched.set_draft_tree(id, tree);
  auto& plan = h.sched.schedule();
  REQUIRE(plan.sequences.size() == 1);
  const auto& s = plan.sequences[0];
  REQUIRE(s.tree != nullptr);
  CHECK(s.tree->max_depth() == 1);  // room: max_new_tokens - generated - 1 = 1
  CHECK(s.num_tokens == 8);         // the budget: the root and 7 nodes
  CHECK(s.tree->size() == 7);
  for (Index j = 0; j < s.tree->size(); ++j)
    CHECK(plan.positions[static_cast<std::size_t>(s.offset + 1 + j)] == s.position + 1);
  // A reported path that is not in the tree names the token.
  CHECK_THROWS_WITH(h.sched.complete(std::vector<TokenId>{15, 0}, std::vector<Index>{2}),
                    Catch::Contains("tokens[0] = 15") && Catch::Contains("child, in the draft tree"));
  const auto [out, c] = run_tree_row(h.pool, s, p.identity);
  h.sched.complete(out, std::vector<Index>{c});
  TokenTree dup;
  dup.add(TokenTree::kRoot, 4);
  dup.add(TokenTree::kRoot, 4);
  if (h.sched.contains(id))
    CHECK_THROWS_WITH(h.sched.set_draft_tree(id, dup),
                      Catch::Contains("tree.token(1) = 4") && Catch::Contains("sibling"));
  CHECK_THROWS_AS(h.sched.set_draft_tree(99, tree), std::out_of_range);
}
