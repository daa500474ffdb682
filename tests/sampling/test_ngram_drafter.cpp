#include <catch2/catch.hpp>

#include <random>
#include <set>
#include <vector>

#include "inferkit/sampling/ngram_drafter.hpp"

using Catch::Contains;
using inferkit::Index;
using inferkit::TokenId;
using inferkit::TokenTree;

namespace {

// Naive rescan: for n = n_max .. n_min, every earlier end position e (latest first) whose n tokens
// equal the context's last n tokens.
inferkit::NgramMatch naive_find(const std::vector<TokenId>& c, const inferkit::NgramDrafterOptions& o) {
  inferkit::NgramMatch m;
  const Index len = Index(c.size());
  for (Index n = std::min(o.n_max, len); n >= o.n_min; --n) {
    for (Index e = len - 2; e >= n - 1 && Index(m.ends.size()) < o.max_branches; --e) {
      bool same = true;
      for (Index j = 0; j < n && same; ++j) same = c[std::size_t(e - j)] == c[std::size_t(len - 1 - j)];
      if (same) m.ends.push_back(e);
    }
    if (!m.ends.empty()) {
      m.n = n;
      return m;
    }
  }
  return m;
}

// The set of root paths a naive trie of the continuations holds under the node budget.
std::set<std::vector<TokenId>> naive_paths(const std::vector<TokenId>& c, const inferkit::NgramMatch& m,
                                           const inferkit::NgramDrafterOptions& o) {
  std::set<std::vector<TokenId>> paths;
  for (Index e : m.ends) {
    std::vector<TokenId> path;
    for (Index j = e + 1; j < std::min(Index(c.size()), e + 1 + o.max_depth); ++j) {
      path.push_back(c[std::size_t(j)]);
      if (!paths.count(path)) {
        if (Index(paths.size()) >= o.max_nodes) break;
        paths.insert(path);
      }
    }
  }
  return paths;
}

std::set<std::vector<TokenId>> tree_paths(const TokenTree& t) {
  std::set<std::vector<TokenId>> paths;
  for (Index i = 0; i < t.size(); ++i) {
    std::vector<TokenId> path;
    for (Index a = i; a != TokenTree::kRoot; a = t.parent(a)) path.insert(path.begin(), t.token(a));
    paths.insert(path);
  }
  return paths;
}

}  // namespace

TEST_CASE("n-gram drafter: the incremental index equals a naive rescan on random sequences",
          "[sampling][ngram_drafter]") {
  std::mt19937 gen(31);
  for (int trial = 0; trial < 40; ++trial) {
    inferkit::NgramDrafterOptions o;
    o.n_min = 1 + Index(gen() % 3);
    o.n_max = o.n_min + Index(gen() % 4);
    o.max_depth = 1 + Index(gen() % 8);
    o.max_branches = 1 + Index(gen() % 5);
    o.max_nodes = 1 + Index(gen() % 40);
    const unsigned vocab = 2 + gen() % 6;  // small vocabularies repeat a lot
    inferkit::NgramDrafter d(o);
    std::vector<TokenId> c;
    long matched = 0;
    for (int step = 0; step < 400; ++step) {
      // Occasionally copy an earlier stretch, as generated text repeats its prompt.
      if (c.size() > 10 && gen() % 10 == 0) {
        const std::size_t from = gen() % (c.size() - 5), n = 1 + gen() % 5;
        for (std::size_t j = 0; j < n; ++j) {
          c.push_back(c[from + j]);
          d.push(c.back());
        }
      } else {
        c.push_back(TokenId(gen() % vocab));
        d.push(c.back());
      }
      const auto got = d.find();
      const auto want = naive_find(c, o);
      REQUIRE(got.n == want.n);
      REQUIRE(got.ends == want.ends);
      matched += got.n > 0;
      const TokenTree t = d.draft();
      REQUIRE(tree_paths(t) == naive_paths(c, want, o));
      CHECK(t.size() == Index(tree_paths(t).size()));  // a trie: no two nodes spell the same path
      CHECK(t.max_depth() <= o.max_depth);
    }
    CHECK(matched > 100);
  }
}

TEST_CASE("n-gram drafter: hand-checked drafts", "[sampling][ngram_drafter]") {
  inferkit::NgramDrafterOptions o;
  o.n_min = 1;
  o.n_max = 3;
  o.max_depth = 3;
  inferkit::NgramDrafter d(o);
  // "5 6 7 8 | 5 6 9 | 5 6": the suffix "5 6" occurred twice; continuations "9 5 6" (latest)
  // and "7 8 5", merged under the root.
  d.extend(std::vector<TokenId>{5, 6, 7, 8, 5, 6, 9, 5, 6});
  const auto m = d.find();
  CHECK(m.n == 2);
  CHECK(m.ends == std::vector<Index>{5, 1});
  const TokenTree t = d.draft();
  CHECK(std::vector<TokenId>(t.tokens().begin(), t.tokens().end()) == std::vector<TokenId>{9, 5, 6, 7, 8, 5});
  CHECK(std::vector<Index>(t.parents().begin(), t.parents().end()) == std::vector<Index>{-1, 0, 1, -1, 3, 4});
  inferkit::NgramDrafter empty(o);
  CHECK(empty.draft().empty());
  empty.push(3);
  CHECK(empty.find().n == 0);  // a single token has no earlier occurrence
}

TEST_CASE("n-gram drafter rejects bad options and tokens", "[sampling][ngram_drafter][errors]") {
  inferkit::NgramDrafterOptions o;
  o.n_min = 0;
  CHECK_THROWS_WITH(inferkit::NgramDrafter(o), Contains("n_min = 0"));
  o = {};
  o.n_max = 1;
  CHECK_THROWS_WITH(inferkit::NgramDrafter(o), Contains("n_max = 1"));
  o = {};
  o.max_nodes = 65;
  CHECK_THROWS_WITH(inferkit::NgramDrafter(o), Contains("max_nodes = 65"));
  inferkit::NgramDrafter d;
  CHECK_THROWS_WITH(d.push(-2), Contains("token = -2"));
}

TEST_CASE("token tree from nodes in topological order is reordered depth-first", "[sampling][token_tree]") {
  // Input: 0:a(root) 1:b(root) 2:c(0) 3:d(1) 4:e(2) 5:f(0): depth-first output a c e f b d.
  const std::vector<TokenId> tok{1, 2, 3, 4, 5, 6};
  const std::vector<Index> par{-1, -1, 0, 1, 2, 0};
  std::vector<Index> order;
  const TokenTree t = TokenTree::from_topological(tok, par, &order);
  CHECK(order == std::vector<Index>{0, 2, 4, 5, 1, 3});
  CHECK(std::vector<TokenId>(t.tokens().begin(), t.tokens().end()) == std::vector<TokenId>{1, 3, 5, 6, 2, 4});
  CHECK(std::vector<Index>(t.parents().begin(), t.parents().end()) == std::vector<Index>{-1, 0, 1, 0, -1, 4});
  const std::vector<Index> bad{-1, 1, 0, 1, 2, 0};
  CHECK_THROWS_WITH(TokenTree::from_topological(tok, bad), Contains("parents[1] = 1"));
}
