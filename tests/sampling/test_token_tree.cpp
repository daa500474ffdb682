#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "inferkit/sampling/token_tree.hpp"

using Catch::Contains;
using inferkit::Index;
using inferkit::TokenId;
using inferkit::TokenTree;

TEST_CASE("token tree: depths, ancestor masks, children and draft rows", "[sampling][token_tree]") {
  //        root
  //       /    \            node: 0 1 2 3 4
  //      0      3           parent: -1 0 1 -1 3  ... plus node 2's sibling
  //      |      |
  //      1      4
  //      |
  //      2
  const std::vector<TokenId> tokens{10, 11, 12, 13, 14};
  const std::vector<Index> parents{-1, 0, 1, -1, 3};
  const TokenTree t(tokens, parents);
  REQUIRE(t.size() == 5);
  CHECK(t.depth(0) == 1);
  CHECK(t.depth(2) == 3);
  CHECK(t.depth(4) == 2);
  CHECK(t.max_depth() == 3);
  CHECK(t.ancestor_mask(2) == 0b00111u);
  CHECK(t.ancestor_mask(4) == 0b11000u);
  CHECK(t.max_children() == 2);  // the root's
  CHECK(t.child_count(0) == 2);
  CHECK(t.first_child(0) == 0);
  CHECK(t.next_sibling(0) == 3);
  CHECK(t.next_sibling(3) == -1);
  CHECK(t.first_child(3) == -1);  // node 2 (position 3) is a leaf
  // Expanded positions in order: root (0), node 0 (1), node 1 (2), node 3 (4).
  CHECK(t.expanded_count() == 4);
  CHECK(t.draft_row(0) == 0);
  CHECK(t.draft_row(1) == 1);
  CHECK(t.draft_row(2) == 2);
  CHECK(t.draft_row(3) == -1);
  CHECK(t.draft_row(4) == 3);
  CHECK(t.draft_row(5) == -1);
  CHECK(t.draw_blocks() == 8);  // (3 + 1) depths x 2 ranks
  const TokenTree c = TokenTree::chain(tokens);
  CHECK(c.max_depth() == 5);
  CHECK(c.expanded_count() == 5);
  CHECK(c.draw_blocks() == 6);
  CHECK(c.ancestor_mask(4) == 0b11111u);
}

TEST_CASE("token tree: ancestor masks equal a walk up the parents on random trees", "[sampling][token_tree]") {
  std::mt19937 gen(8);
  for (int trial = 0; trial < 200; ++trial) {
    TokenTree t;
    std::vector<Index> path;
    const Index n = 1 + Index(gen() % TokenTree::kMaxNodes);
    for (Index i = 0; i < n; ++i) {
      path.resize(gen() % (path.size() + 1));
      t.add(path.empty() ? TokenTree::kRoot : path.back(), TokenId(gen() % 50));
      path.push_back(i);
    }
    for (Index i = 0; i < n; ++i) {
      std::uint64_t mask = 0;
      Index depth = 0;
      for (Index a = i; a != TokenTree::kRoot; a = t.parent(a)) {
        mask |= std::uint64_t{1} << a;
        ++depth;
      }
      CHECK(t.ancestor_mask(i) == mask);
      CHECK(t.depth(i) == depth);
      // Depth-first order: a subtree is the contiguous range after its root.
      Index end = i + 1;
      while (end < n && ((t.ancestor_mask(end) >> i) & 1u)) ++end;
      for (Index j = end; j < n; ++j) CHECK_FALSE(((t.ancestor_mask(j) >> i) & 1u));
    }
    Index counted = 0;  // children lists cover every node once
    for (Index u = 0; u <= n; ++u)
      for (Index ch = t.first_child(u); ch >= 0; ch = t.next_sibling(ch)) {
        CHECK(t.parent(ch) + 1 == u);
        ++counted;
      }
    CHECK(counted == n);
  }
}

TEST_CASE("token tree rejects broken order, negative tokens and a 65th node", "[sampling][token_tree][errors]") {
  TokenTree t;
  CHECK_THROWS_WITH(t.add(0, 1), Contains("parent = 0"));  // no node 0 yet
  t.add(TokenTree::kRoot, 1);
  t.add(0, 2);
  t.add(TokenTree::kRoot, 3);
  CHECK_THROWS_WITH(t.add(1, 4), Contains("depth-first order"));  // node 1's subtree is closed
  CHECK_THROWS_WITH(t.add(2, -1), Contains("token = -1"));
  const std::vector<TokenId> tok{1, 2};
  const std::vector<Index> par{-1};
  CHECK_THROWS_WITH(TokenTree(tok, par), Contains("parents.size() = 1"));
  const std::vector<TokenId> many(64, 5);
  TokenTree full = TokenTree::chain(many);
  CHECK_THROWS_WITH(full.add(63, 5), Contains("tree size = 65"));
  CHECK_THROWS_WITH(full.depth(64), Contains("node = 64"));
  CHECK_THROWS_WITH(full.first_child(66), Contains("position = 66"));
}
