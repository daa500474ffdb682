#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "inferkit/sampling/tree_builder.hpp"
#include "sampling_test_util.hpp"

using Catch::Contains;
using inferkit::Index;
using inferkit::TokenId;
using inferkit::TokenTree;

namespace {

// A Markov draft: the distribution after a path depends on its last token.
struct MarkovDraft {
  std::vector<test::Dist> rows;
  const test::Dist& after(TokenId last) const { return rows[std::size_t(last)]; }
};

MarkovDraft random_draft(std::size_t v, unsigned seed) {
  std::mt19937 gen(seed);
  MarkovDraft d;
  for (std::size_t s = 0; s < v; ++s) d.rows.push_back(test::random_dist(v, gen, 0.3));
  return d;
}

// The k most probable tokens of a row with positive probability (ties to the lower id).
std::vector<TokenId> top(const test::Dist& d, Index k) {
  std::vector<TokenId> ids;
  for (std::size_t i = 0; i < d.size(); ++i)
    if (d[i] > 0) ids.push_back(TokenId(i));
  std::stable_sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) { return d[a] > d[b]; });
  if (Index(ids.size()) > k) ids.resize(std::size_t(k));
  return ids;
}

// Every path of length 1..depth whose each step is in the top-k of the previous token's row,
// with its fp64 probability product.
void enumerate(const MarkovDraft& d, TokenId last, Index k, Index depth, std::vector<TokenId>& path, double prob,
               std::vector<std::pair<double, std::vector<TokenId>>>& out) {
  if (Index(path.size()) == depth) return;
  for (TokenId t : top(d.after(last), k)) {
    path.push_back(t);
    const double pr = prob * double(d.after(last)[std::size_t(t)]);
    out.push_back({pr, path});
    enumerate(d, t, k, depth, path, pr, out);
    path.pop_back();
  }
}

TokenTree build_with(const MarkovDraft& d, TokenId ctx, const inferkit::DraftTreeOptions& o, Index* expansions) {
  inferkit::DraftTreeBuilder b(o, d.after(ctx));
  *expansions = 0;
  for (auto wave = b.next_to_expand(); !wave.empty(); wave = b.next_to_expand())
    for (Index c : wave) {
      b.expand(c, d.after(b.token(c)));
      ++*expansions;
    }
  return b.build();
}

std::vector<TokenId> root_path(const TokenTree& t, Index i) {
  std::vector<TokenId> p;
  for (Index a = i; a != TokenTree::kRoot; a = t.parent(a)) p.insert(p.begin(), t.token(a));
  return p;
}

}  // namespace

TEST_CASE("draft tree builder: unlimited expansion keeps the max_nodes most probable top-k paths",
          "[sampling][tree_builder]") {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const MarkovDraft d = random_draft(7, seed);
    inferkit::DraftTreeOptions o;
    o.top_k = 3;
    o.expand_width = 1000;  // every candidate expanded: the full top-k tree
    o.max_depth = 4;
    o.max_nodes = 1 + Index(seed * 7 % 64);
    Index expansions = 0;
    const TokenTree t = build_with(d, 2, o, &expansions);
    std::vector<std::pair<double, std::vector<TokenId>>> all;
    std::vector<TokenId> path;
    enumerate(d, 2, o.top_k, o.max_depth, path, 1.0, all);
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    const std::size_t m = std::min(all.size(), std::size_t(o.max_nodes));
    REQUIRE(t.size() == Index(m));
    // The tree's paths are the m best; a tie at the cut may swap equal-probability paths only.
    const double cut = all[m - 1].first;
    std::vector<double> got;
    for (Index i = 0; i < t.size(); ++i) {
      const auto p = root_path(t, i);
      double pr = 1.0;
      TokenId last = 2;
      for (TokenId x : p) {
        pr *= double(d.after(last)[std::size_t(x)]);
        last = x;
      }
      CHECK(pr >= cut * (1 - 1e-9));
      got.push_back(pr);
    }
    std::sort(got.rbegin(), got.rend());
    for (std::size_t j = 0; j < m; ++j) CHECK(got[j] == Approx(all[j].first).epsilon(1e-9));
  }
}

TEST_CASE("draft tree builder: expansion waves follow EAGLE-2's per-depth top expand_width",
          "[sampling][tree_builder]") {
  const MarkovDraft d = random_draft(9, 77);
  inferkit::DraftTreeOptions o;
  o.top_k = 4;
  o.expand_width = 2;
  o.max_depth = 5;
  o.max_nodes = 20;
  inferkit::DraftTreeBuilder b(o, d.after(0));
  Index waves = 0;
  for (auto wave = b.next_to_expand(); !wave.empty(); wave = b.next_to_expand()) {
    ++waves;
    CHECK(Index(wave.size()) <= o.expand_width);
    // The wave holds the most valuable candidates of its depth.
    const Index depth = b.depth(wave[0]);
    double worst_in = 0.0;
    for (Index c : wave) {
      CHECK(b.depth(c) == depth);
      worst_in = std::min(worst_in, b.log_value(c));
    }
    for (Index c = 0; c < b.candidates(); ++c)
      if (b.depth(c) == depth && std::find(wave.begin(), wave.end(), c) == wave.end())
        CHECK(b.log_value(c) <= worst_in);
    for (Index c : wave) {
      // log value = sum of logs of the draft probabilities along the path (fp64 reference)
      double lv = 0.0;
      TokenId last = 0;
      for (TokenId x : b.path(c)) {
        lv += std::log(double(d.after(last)[std::size_t(x)]));
        last = x;
      }
      CHECK(b.log_value(c) == Approx(lv).epsilon(1e-12));
      b.expand(c, d.after(b.token(c)));
    }
  }
  CHECK(waves == o.max_depth - 1);
  std::vector<Index> picked;
  const TokenTree t = b.build(&picked);
  REQUIRE(Index(picked.size()) == t.size());
  for (Index i = 0; i < t.size(); ++i) {
    CHECK(t.token(i) == b.token(picked[std::size_t(i)]));
    CHECK(t.depth(i) == b.depth(picked[std::size_t(i)]));
    // every node is among the top_k of its parent's draft row
    const TokenId from = t.parent(i) == TokenTree::kRoot ? 0 : t.token(t.parent(i));
    const auto allowed = top(d.after(from), o.top_k);
    CHECK(std::find(allowed.begin(), allowed.end(), t.token(i)) != allowed.end());
  }
}

TEST_CASE("draft tree builder rejects bad options and rows", "[sampling][tree_builder][errors]") {
  const std::vector<float> row{0.5f, 0.25f, 0.25f};
  inferkit::DraftTreeOptions o;
  o.max_nodes = 65;
  CHECK_THROWS_WITH(inferkit::DraftTreeBuilder(o, row), Contains("max_nodes = 65"));
  o = {};
  o.top_k = 0;
  CHECK_THROWS_WITH(inferkit::DraftTreeBuilder(o, row), Contains("top_k = 0"));
  o = {};
  const std::vector<float> bad{0.5f, std::nanf(""), 0.5f};
  CHECK_THROWS_WITH(inferkit::DraftTreeBuilder(o, bad), Contains("probs[1] = nan"));
  inferkit::DraftTreeBuilder b(o, row);
  CHECK(b.candidates() == 3);
  b.expand(0, row);
  CHECK_THROWS_WITH(b.expand(0, row), Contains("expanded already"));
  CHECK_THROWS_WITH(b.expand(99, row), Contains("candidate = 99"));
  o.max_depth = 1;
  inferkit::DraftTreeBuilder shallow(o, row);
  CHECK(shallow.next_to_expand().empty());
  CHECK_THROWS_WITH(shallow.expand(0, row), Contains("max_depth"));
}
