#pragma once
// TokenMasker: the tokens a grammar state allows, for one Grammar and one TokenTrie, shared by
// every request using that grammar. mask(state) = the tokens whose bytes keep the output a prefix
// of a sentence, plus the end-of-generation ids exactly when the state is complete.
//
//   auto masker = std::make_shared<inferkit::TokenMasker>(grammar, trie);
//   inferkit::TokenBitset mask(trie->vocab_size());
//   masker->fill_mask(inferkit::ByteMatcher(*grammar), mask);
//
// How: a state's stacks are alternatives, so a token is allowed when some stack allows it, and
// what a stack allows depends mostly on its top few frames. For each stack the masker walks the
// trie (TokenTrie: a rejected byte skips its subtree) from the stack's top kContextFrames frames
// with kUnknownContext below them, once per distinct top, and caches the result: the tokens
// allowed whatever lies below (a bitset) and the few whose bytes outlive the known frames (a
// list, "context-dependent" in XGrammar's terms, Dong et al. 2024, section 3.2). A mask is then
// the OR of cached bitsets plus a check of the listed tokens against the full stack. Stacks no
// deeper than kContextFrames are cached whole (exact, nothing listed). A state inside a UTF-8
// character (a byte-fallback token ended mid-character) walks the trie from the full state.
// A walk interns the matcher states it meets and fills their byte transitions on first use
// (detail::WalkStates, a lazily built DFA): a cold walk inside a JSON string would visit nearly
// every trie node (216,962 at 102,400 tokens) but meets ~17 states, so a node costs a table
// read, not a ByteMatcher::step. Where a node's byte loops on the state it leads to (string
// content), the walk checks the node's summary (TokenTrie::Summary: the bytes below it) and,
// when every one of them loops too, accepts the subtree's tokens without visiting it: ~11,000
// nodes instead of 216,962 for that walk.
// The cache holds at most kMaskCacheEntries tops (then it is cleared: correctness never depends
// on it); it is guarded by a mutex, so one masker serves threads.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/grammar/byte_matcher.hpp"
#include "inferkit/grammar/grammar.hpp"
#include "inferkit/grammar/token_bitset.hpp"
#include "inferkit/grammar/token_trie.hpp"

namespace inferkit {

/// Frames of a stack's top a cached mask is keyed by (file comment).
inline constexpr std::size_t kContextFrames = 4;
/// Most stack tops the masker caches before it starts over.
inline constexpr std::size_t kMaskCacheEntries = 2048;

/// What one trie walk from a state found: the tokens accepted and, when the walk started above
/// kUnknownContext, the tokens whose outcome depends on what lies below.
struct TrieWalkResult {
  TokenBitset accepted;            ///< allowed whatever lies below
  std::vector<TokenId> dependent;  ///< decided only by the full stack
};

/// For each ASCII byte, the lowest ASCII byte every character class of `g` treats alike (in all
/// of them or in none; partition refinement over the classes' ASCII masks). A matcher's step on
/// an ASCII byte tests class membership only, so equal representatives give equal steps.
inline std::array<std::uint8_t, 128> ascii_representatives(const Grammar& g) {
  std::vector<std::array<std::uint64_t, 2>> blocks{{~std::uint64_t{0}, ~std::uint64_t{0}}};
  for (std::size_t i = 0; i < g.class_count(); ++i) {
    const CharClass& c = g.chars(static_cast<std::uint32_t>(i));
    const std::uint64_t m0 = c.ascii_word(0), m1 = c.ascii_word(1);
    for (std::size_t k = 0, nb = blocks.size(); k < nb; ++k) {
      const std::array<std::uint64_t, 2> in{blocks[k][0] & m0, blocks[k][1] & m1};
      const std::array<std::uint64_t, 2> out{blocks[k][0] & ~m0, blocks[k][1] & ~m1};
      if ((in[0] | in[1]) != 0 && (out[0] | out[1]) != 0) {
        blocks[k] = in;
        blocks.push_back(out);
      }
    }
  }
  std::array<std::uint8_t, 128> rep{};
  for (const auto& b : blocks) {
    const int lo = b[0] != 0 ? std::countr_zero(b[0]) : 64 + std::countr_zero(b[1]);
    for (int w = 0; w < 2; ++w)
      for (std::uint64_t x = b[w]; x != 0; x &= x - 1)
        rep[64 * w + std::countr_zero(x)] = static_cast<std::uint8_t>(lo);
  }
  return rep;
}

namespace detail {

/// The matcher states one trie walk meets, interned, with their byte transitions filled in on
/// first use (a lazily built DFA, the subset construction run only where the walk goes). A walk
/// visits up to every trie node (~420,000 at 102,400 tokens) but meets few distinct states: inside
/// a JSON string most bytes lead back to the state they left. So a node costs one table read, not
/// a ByteMatcher::step (which copies and re-expands stacks).
class WalkStates {
 public:
  /// A transition: the next state (dead() when no known stack accepts the byte), whether some
  /// known stack accepted it, whether a kUnknownContext top met it.
  struct Step {
    std::uint32_t next;
    bool ok;
    bool hit;
  };
  /// `reps`: ascii_representatives() of the grammar (computed here when null).
  explicit WalkStates(const ByteMatcher& start, const std::array<std::uint8_t, 128>* reps = nullptr)
      : rep_(reps ? *reps : ascii_representatives(start.grammar())) {
    intern(ByteMatcher(start.grammar(), std::vector<GrammarStack>{}));  // 0: dead
    intern(ByteMatcher(start));                                         // 1: start
  }
  static constexpr std::uint32_t dead() { return 0; }
  static constexpr std::uint32_t start() { return 1; }
  /// Whether every byte below a node with summary `sm` leaves state `s` as it is, accepted: then
  /// every token there is accepted and the walk takes the subtree whole. ASCII bytes: their
  /// transitions lead back to `s`. Bytes >= 0x80 (only under a well-formed subtree): every stack
  /// of `s` has a class holding every non-ASCII character or none (so all of them act alike, and
  /// every prefix of one is viable) and one such character (U+00E9) leads back to `s`.
  /// Whether byte `b` leads from `s` back to `s`, accepted (for a byte >= 0x80, the last of a
  /// character: whether every non-ASCII character does, absorbs_multibyte).
  bool loops(std::uint32_t s, std::uint8_t b) {
    if (b >= 0x80) return absorbs_multibyte(s);
    const Step t = step(s, b);
    return t.ok && t.next == s;
  }
  bool absorbs(std::uint32_t s, const TokenTrie::Summary& sm) {
    if (sm.non_ascii && (!sm.well_formed || !absorbs_multibyte(s))) return false;
    for (int w = 0; w < 2; ++w)  // a byte already known to leave: no transition filled
      if ((sm.ascii[w] & info_[s].known[w] & ~info_[s].stay[w]) != 0) return false;
    for (int w = 0; w < 2; ++w) {
      for (std::uint64_t need = sm.ascii[w] & ~info_[s].known[w]; need != 0; need &= need - 1) {
        const auto b = static_cast<std::uint8_t>(64 * w + std::countr_zero(need));
        const Step t = step(s, b);  // may grow info_: index it afterwards
        const std::uint64_t bit = std::uint64_t{1} << (b & 63);
        info_[s].known[w] |= bit;
        if (!t.ok || t.next != s) return false;  // stop at the first: fills cost a ByteMatcher step
        info_[s].stay[w] |= bit;
      }
    }
    return true;
  }
  Step step(std::uint32_t s, std::uint8_t b) {
    const std::size_t at = std::size_t{s} * 256 + b;
    std::int32_t code = trans_[at];
    if (code < 0) [[unlikely]] {
      if (b < 128 && rep_[b] != b) {  // the same step as its representative's
        const std::size_t ra = std::size_t{s} * 256 + rep_[b];
        if (trans_[ra] < 0) {
          const std::int32_t rc = fill(s, rep_[b]);
          trans_[ra] = rc;
        }
        code = trans_[ra];
      } else {
        code = fill(s, b);  // may grow trans_: store by index afterwards
      }
      trans_[at] = code;
    }
    const auto c = static_cast<std::uint32_t>(code);
    return {c >> 2, (c & 2) != 0, (c & 1) != 0};
  }
  std::size_t size() const { return states_.size(); }  ///< states met so far

 private:
  std::int32_t fill(std::uint32_t s, std::uint8_t b) {
    ByteMatcher next = states_[s];
    bool hit = false;
    const bool ok = states_[s].step(b, next, &hit);
    const std::uint32_t to = ok ? intern(std::move(next)) : dead();
    return static_cast<std::int32_t>(to << 2 | std::uint32_t{ok} << 1 | std::uint32_t{hit});
  }
  std::uint32_t intern(ByteMatcher m) {
    const std::size_t h = m.hash();
    for (auto [it, e] = index_.equal_range(h); it != e; ++it)
      if (states_[it->second] == m) return it->second;
    const auto id = static_cast<std::uint32_t>(states_.size());
    states_.push_back(std::move(m));
    index_.emplace(h, id);
    trans_.resize(states_.size() * 256, -1);
    info_.emplace_back();
    return id;
  }
  bool absorbs_multibyte(std::uint32_t s) {
    if (info_[s].multibyte < 0) {
      const ByteMatcher& m = states_[s];
      bool all = m.pending_bytes() == 0 && !m.stacks().empty();
      for (const GrammarStack& st : m.stacks()) {
        if (!all) break;
        if (st.empty() || st.back() == kUnknownContext) {
          all = false;
          break;
        }
        // all of non-ASCII or none of it (a stack that takes no such character just drops out)
        const CharClass& c = m.grammar().chars(m.grammar().element(st.back()).index);
        all = (c.covers(0x80, 0xD7FF) && c.covers(0xE000, kMaxCodePoint)) || !c.intersects(0x80, kMaxCodePoint);
      }
      if (all) {
        ByteMatcher after = m;
        all = after.accept_bytes("\xC3\xA9") && after == m;
      }
      info_[s].multibyte = all ? 1 : 0;
    }
    return info_[s].multibyte == 1;
  }
  struct Info {
    std::uint64_t known[2] = {0, 0};  // ASCII bytes whose transition absorbs() has looked at
    std::uint64_t stay[2] = {0, 0};   // those of them leading back to this state, accepted
    int multibyte = -1;               // absorbs_multibyte(): -1 not known yet
  };
  std::vector<Info> info_;
  std::array<std::uint8_t, 128> rep_;
  std::vector<ByteMatcher> states_;
  std::unordered_multimap<std::size_t, std::uint32_t> index_;
  std::vector<std::int32_t> trans_;  // state x byte -> next << 2 | ok << 1 | hit; -1 not yet known
};

}  // namespace detail

/// What a trie walk cost: distinct matcher states met, trie nodes visited, subtrees taken whole.
struct TrieWalkStats {
  std::size_t states = 0;    ///< matcher states interned
  std::size_t nodes = 0;     ///< trie nodes stepped through
  std::size_t subtrees = 0;  ///< subtrees whose tokens were all accepted without visiting them
};

/// Walks `trie` from `start` (file comment of token_trie.hpp): every token whose bytes `start`
/// accepts goes to `out.accepted`; a token rejected by all known stacks after one with
/// kUnknownContext on top met a byte goes to `out.dependent`. `out.accepted` must have the trie's
/// vocabulary size; it is added to, not cleared. `take_subtrees`: accept a subtree whole where
/// every byte below leaves the state as it was (WalkStates::absorbs; false: visit every node, the
/// plain walk). `ascii_reps`: ascii_representatives() of the grammar, when the caller keeps it.
/// Returns what the walk cost.
inline TrieWalkStats walk_token_trie(const TokenTrie& trie, const ByteMatcher& start, TrieWalkResult& out,
                                     bool take_subtrees = true,
                                     const std::array<std::uint8_t, 128>* ascii_reps = nullptr) {
  require(out.accepted.size() == trie.vocab_size(), "trie walk bitset size", out.accepted.size(),
          "must equal the vocabulary size " + std::to_string(trie.vocab_size()));
  // Raw pointers and one word per depth (state << 1 | dependent): a byte-typed store would alias
  // everything and make the compiler reload every pointer per node.
  const TokenTrie::Node* const nodes = trie.nodes().data();
  const std::size_t count = trie.nodes().size();
  const TokenId* const tokens = trie.tokens().data();
  std::uint64_t* const accepted = out.accepted.word_data();
  const TokenTrie::Summary* const summaries = trie.summaries().data();
  // Summaries assume the walk starts on a character boundary.
  take_subtrees = take_subtrees && start.pending_bytes() == 0;
  detail::WalkStates states(start, ascii_reps);
  std::vector<std::uint32_t> level(trie.max_depth() + 1, detail::WalkStates::start() << 1);
  TrieWalkStats stats;
  for (std::size_t i = 0; i < count;) {
    const TokenTrie::Node& n = nodes[i];
    ++stats.nodes;
    const std::uint32_t parent = level[n.depth - 1];
    const detail::WalkStates::Step st = states.step(parent >> 1, n.byte);
    const std::uint32_t dep = (parent & 1) | std::uint32_t{st.hit};
    if (!st.ok && dep == 0) {
      i = n.subtree_end;
      continue;
    }
    // Only where the node's own byte would loop on the state it led to (string or identifier
    // content); elsewhere the check would fill transitions the walk never needs.
    if (take_subtrees && st.ok && n.summary != TokenTrie::kNoSummary && states.loops(st.next, n.byte) &&
        states.absorbs(st.next, summaries[n.summary])) {
      const std::uint32_t end = trie.subtree_token_end(i);
      for (std::uint32_t k = n.token_begin; k < end; ++k) {
        const auto t = static_cast<std::uint32_t>(tokens[k]);
        accepted[t >> 6] |= std::uint64_t{1} << (t & 63);
      }
      i = n.subtree_end;
      ++stats.subtrees;
      continue;
    }
    level[n.depth] = st.next << 1 | dep;  // dead when the known stacks are: the context below decides
    if (n.token_begin != n.token_end) {
      if (st.ok) {
        for (std::uint32_t k = n.token_begin; k < n.token_end; ++k) {
          const auto t = static_cast<std::uint32_t>(tokens[k]);
          accepted[t >> 6] |= std::uint64_t{1} << (t & 63);
        }
      } else {
        out.dependent.insert(out.dependent.end(), tokens + n.token_begin, tokens + n.token_end);
      }
    }
    ++i;
  }
  stats.states = states.size();
  return stats;
}

/// Masks for one grammar and vocabulary, cached by stack top (file comment).
class TokenMasker {
 public:
  /// A masker for `grammar` over `trie`'s vocabulary (both shared, never null: std::invalid_argument).
  TokenMasker(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie)
      : grammar_(std::move(grammar)), trie_(std::move(trie)) {
    require(grammar_ != nullptr, "grammar", "null", "must be given");
    require(trie_ != nullptr, "token trie", "null", "must be given");
    ascii_reps_ = ascii_representatives(*grammar_);
  }

  /// Writes mask(state) into `mask` (resized to the vocabulary and cleared first).
  void fill_mask(const ByteMatcher& state, TokenBitset& mask) const {
    if (mask.size() != trie_->vocab_size()) mask = TokenBitset(trie_->vocab_size());
    mask.clear();
    if (state.pending_bytes() != 0) {  // inside a character: walk from the whole state
      TrieWalkResult r{std::move(mask), {}};
      walk_token_trie(*trie_, state, r, true, &ascii_reps_);
      mask = std::move(r.accepted);
    } else {
      for (const GrammarStack& s : state.stacks()) {
        if (s.empty()) continue;
        const std::shared_ptr<const TrieWalkResult> top = cached(s);
        mask |= top->accepted;
        if (top->dependent.empty()) continue;
        const ByteMatcher from(*grammar_, {s});
        for (const TokenId t : top->dependent) {
          if (mask.test(t)) continue;
          ByteMatcher probe = from;
          if (probe.accept_bytes(trie_->bytes(t))) mask.set(t);
        }
      }
    }
    if (state.is_complete())
      for (const TokenId e : trie_->eos_ids()) mask.set(e);
  }

  /// Whether `id` is allowed in `state` (the same answer fill_mask gives, for one token).
  bool allows(const ByteMatcher& state, TokenId id) const {
    require_index(id, trie_->vocab_size(), "token id");
    if (trie_->is_eos(id)) return state.is_complete();
    const std::string_view b = trie_->bytes(id);
    if (b.empty()) return false;
    ByteMatcher probe = state;
    return probe.accept_bytes(b);
  }

  const Grammar& grammar() const { return *grammar_; }  ///< the grammar masked
  const TokenTrie& trie() const { return *trie_; }      ///< the vocabulary's trie
  /// Stack tops cached now (for benchmarks and tests of the cache).
  std::size_t cached_tops() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_.size();
  }

 private:
  struct KeyHash {
    std::size_t operator()(const GrammarStack& k) const {
      std::size_t h = 1469598103934665603ull;
      for (const std::uint32_t v : k) h = (h ^ v) * 1099511628211ull;
      return h;
    }
  };

  std::shared_ptr<const TrieWalkResult> cached(const GrammarStack& s) const {
    GrammarStack key;
    if (s.size() <= kContextFrames) {
      key = s;
    } else {
      key.push_back(kUnknownContext);
      key.insert(key.end(), s.end() - static_cast<std::ptrdiff_t>(kContextFrames), s.end());
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = cache_.find(key);
      if (it != cache_.end()) return it->second;
    }
    auto r = std::make_shared<TrieWalkResult>(TrieWalkResult{TokenBitset(trie_->vocab_size()), {}});
    walk_token_trie(*trie_, ByteMatcher(*grammar_, {key}), *r, true, &ascii_reps_);
    std::lock_guard<std::mutex> lock(mutex_);
    if (cache_.size() >= kMaskCacheEntries) cache_.clear();
    cache_.emplace(std::move(key), r);
    return r;
  }

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  std::array<std::uint8_t, 128> ascii_reps_{};  // ascii_representatives(*grammar_)
  mutable std::mutex mutex_;
  mutable std::unordered_map<GrammarStack, std::shared_ptr<const TrieWalkResult>, KeyHash> cache_;
};

}  // namespace inferkit
