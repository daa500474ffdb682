// Fuzzes the paged KV bookkeeping (BlockPool, BlockTable, PrefixTrie) with random operation
// sequences against a simple model, under a pool far too small: requests that match, reserve
// (evicting when the pool is full), write, commit and insert or extend; appends, truncations,
// forks (table copies), share_page, finishes, evictions, allocate_evicting, and misuse
// (bad block ids, bad pages, bad shapes) that must be std::invalid_argument / out_of_range.
// Invariants after every operation (those of tests/kv/test_prefix_trie.cpp's model test, plus
// content): every block's reference count equals its holders (tables, the trie, blocks the
// test holds); used_blocks() counts exactly the held blocks; pinned paths stay cached; a matched
// or shared page holds the K/V of exactly the tokens it was matched for; every committed token
// of every table reads back its own K/V (copy-on-write never leaks a write into a shared block).

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/prefix_trie.hpp"

using inferkit::BlockId;
using inferkit::Index;
using inferkit::TokenId;

namespace {

using Pool = inferkit::BlockPool<float>;
using Table = inferkit::BlockTable<float>;
using Trie = inferkit::PrefixTrie<float>;

const inferkit::ContextIdentity kIds[] = {{"m"}, {"m", "lora"}, {"m2"}};

// K/V of token t of a sequence: a hash of its identity and tokens[0..t] (exact in float).
std::vector<float> kv_values(std::size_t id, const std::vector<TokenId>& tokens) {
  std::vector<float> v(tokens.size());
  std::uint64_t h = 0x9E37 + id;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    h = (h ^ static_cast<std::uint64_t>(tokens[t] + 1)) * 0x100000001B3ull;
    v[t] = static_cast<float>((h >> 20) & 0xFFFFF);
  }
  return v;
}

struct Seq {
  std::unique_ptr<Table> table;
  Trie::Handle handle;
  std::size_t id = 0;
  std::vector<TokenId> tokens;  // committed tokens
  std::vector<TokenId> pinned;  // the tokens of the trie path its handle pins
};

struct World {
  Pool pool;
  Trie trie;
  Index page;
  std::vector<Seq> seqs;
  std::vector<BlockId> own;  // blocks the test holds itself (allocate_evicting)
  World(Index page_size, Index blocks) : pool({1, 1, 1, page_size, blocks}), trie(pool), page(page_size) {}
  ~World() {
    for (Seq& s : seqs) trie.release(s.handle);
    seqs.clear();
    for (BlockId b : own) pool.release(b);
  }

  float key(const Table& t, Index pos) const {
    return pool.key_rows(t.blocks()[static_cast<std::size_t>(pos / page)], 0, 0)[pos % page];
  }
  float value(const Table& t, Index pos) const {
    return pool.value_rows(t.blocks()[static_cast<std::size_t>(pos / page)], 0, 0)[pos % page];
  }

  // Blocks `blocks` hold the K/V of pages first, first + 1, ... of `tokens` under identity `id`.
  void check_pages(std::size_t id, const std::vector<TokenId>& tokens, std::span<const BlockId> blocks,
                   std::size_t first = 0) const {
    const std::vector<float> want = kv_values(id, tokens);
    for (std::size_t b = 0; b < blocks.size(); ++b)
      for (Index s = 0; s < page; ++s) {
        const std::size_t t = (first + b) * static_cast<std::size_t>(page) + static_cast<std::size_t>(s);
        FUZZ_CHECK(t < want.size());
        FUZZ_CHECK(pool.key_rows(blocks[b], 0, 0)[s] == want[t]);
        FUZZ_CHECK(pool.value_rows(blocks[b], 0, 0)[s] == -want[t]);
      }
  }

  void check() const {
    const Index max_blocks = pool.config().max_blocks;
    std::vector<Index> holders(static_cast<std::size_t>(max_blocks), 0);
    for (const Seq& s : seqs) {
      const Table& t = *s.table;
      FUZZ_CHECK(t.num_tokens() == static_cast<Index>(s.tokens.size()));
      FUZZ_CHECK(static_cast<Index>(t.blocks().size()) == (t.num_tokens() + page - 1) / page);
      const std::vector<float> want = kv_values(s.id, s.tokens);
      for (Index p = 0; p < t.num_tokens(); ++p) {
        FUZZ_CHECK(key(t, p) == want[static_cast<std::size_t>(p)]);
        FUZZ_CHECK(value(t, p) == -want[static_cast<std::size_t>(p)]);
      }
      for (BlockId b : t.blocks()) ++holders[static_cast<std::size_t>(b)];
      if (s.handle.deepest >= 0) FUZZ_CHECK(trie.peek(kIds[s.id], s.pinned) == static_cast<Index>(s.pinned.size()));
    }
    for (BlockId b : own) ++holders[static_cast<std::size_t>(b)];
    Index used = 0;
    for (BlockId b = 0; b < max_blocks; ++b) {
      const Index expect = holders[static_cast<std::size_t>(b)] + (trie.holds_block(b) ? 1 : 0);
      FUZZ_CHECK(pool.refcount(b) == expect);
      used += expect > 0;
    }
    FUZZ_CHECK(pool.used_blocks() == used);
    FUZZ_CHECK(pool.free_blocks() == max_blocks - used);
    FUZZ_CHECK(trie.cached_pages() <= used);
  }

  // Reserves room for n more tokens, evicting unpinned pages while the pool is full.
  bool reserve(Table& t, Index n) {
    for (;;) {
      const std::vector<BlockId> before = t.blocks();
      const Index tokens = t.num_tokens();
      if (t.reserve(n)) return true;
      FUZZ_CHECK(t.num_tokens() == tokens && t.blocks().size() == before.size());
      if (trie.evict(1) == 0) return false;
    }
  }

  // Writes and commits tokens `more` after the sequence's committed ones (room reserved).
  void append(Seq& s, const std::vector<TokenId>& more) {
    std::vector<TokenId> all = s.tokens;
    all.insert(all.end(), more.begin(), more.end());
    const std::vector<float> v = kv_values(s.id, all);
    std::vector<float> k(v.begin() + static_cast<std::ptrdiff_t>(s.tokens.size()), v.end()), neg(k);
    for (float& x : neg) x = -x;
    const Index n = static_cast<Index>(more.size());
    s.table->write(0, {k.data(), n, 1, 1}, {neg.data(), n, 1, 1});
    s.table->commit(n);
    s.tokens = std::move(all);
  }
};

std::vector<TokenId> any_tokens(FuzzedDataProvider& in, Index max_n) {
  std::vector<TokenId> t(static_cast<std::size_t>(in.ConsumeIntegralInRange<Index>(0, max_n)));
  for (auto& x : t) x = in.ConsumeIntegralInRange<TokenId>(0, 2);  // a tiny alphabet: prefixes repeat
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  World w(in.ConsumeIntegralInRange<Index>(1, 4), in.ConsumeIntegralInRange<Index>(1, 20));
  const Index page = w.page;
  std::vector<std::vector<TokenId>> systems(2);
  for (auto& s : systems) s = any_tokens(in, 3 * page);
  for (int step = 0; step < 200 && in.remaining_bytes() > 0; ++step) {
    const int op = in.ConsumeIntegralInRange<int>(0, 11);
    Seq* s = w.seqs.empty() ? nullptr : &w.seqs[in.ConsumeIntegralInRange<std::size_t>(0, w.seqs.size() - 1)];
    switch (op) {
      case 0:
      case 1: {  // a request: match, prefill the rest, insert or extend page by page
        Seq n;
        n.id = in.ConsumeIntegralInRange<std::size_t>(0, 2);
        std::vector<TokenId> toks = in.ConsumeBool() ? systems[in.ConsumeBool()] : std::vector<TokenId>{};
        const auto extra = any_tokens(in, 2 * page + 1);
        toks.insert(toks.end(), extra.begin(), extra.end());
        auto m = w.trie.match(kIds[n.id], toks);
        FUZZ_CHECK(m.tokens == static_cast<Index>(m.blocks.size()) * page &&
                   m.tokens <= static_cast<Index>(toks.size()));
        w.check_pages(n.id, toks, m.blocks);
        n.table = std::make_unique<Table>(w.pool);
        n.table->assign_prefix(m.blocks, m.tokens);
        n.handle = m.handle;
        n.tokens.assign(toks.begin(), toks.begin() + m.tokens);
        n.pinned = n.tokens;
        const std::vector<TokenId> rest(toks.begin() + m.tokens, toks.end());
        if (!w.reserve(*n.table, static_cast<Index>(rest.size()))) {
          w.trie.release(n.handle);
          break;
        }
        w.append(n, rest);
        if (in.ConsumeBool()) {
          FUZZ_CHECK(w.trie.insert(kIds[n.id], n.tokens, n.table->blocks()) >= 0);
          FUZZ_CHECK(w.trie.peek(kIds[n.id], n.tokens) == (static_cast<Index>(n.tokens.size()) / page) * page);
        }
        w.seqs.push_back(std::move(n));
        break;
      }
      case 2: {  // append to a running sequence
        if (!s) break;
        const auto more = any_tokens(in, 2 * page);
        if (w.reserve(*s->table, static_cast<Index>(more.size()))) w.append(*s, more);
        break;
      }
      case 3: {  // truncate (sometimes out of range: documented error)
        if (!s) break;
        const Index n = in.ConsumeIntegralInRange<Index>(-1, static_cast<Index>(s->tokens.size()) + 1);
        if (fuzz::ok([&] { s->table->truncate(n); })) s->tokens.resize(static_cast<std::size_t>(n));
        break;
      }
      case 4: {  // fork: a copy of the table shares every block
        if (!s) break;
        Seq f;
        f.table = std::make_unique<Table>(*s->table);
        f.id = s->id;
        f.tokens = s->tokens;
        w.seqs.push_back(std::move(f));
        break;
      }
      case 5: {  // finish
        if (!s) break;
        w.trie.release(s->handle);
        w.trie.release(s->handle);  // the handle was reset: a no-op
        std::swap(*s, w.seqs.back());
        w.seqs.pop_back();
        break;
      }
      case 6:
        w.trie.evict(in.ConsumeIntegralInRange<Index>(0, 5));
        break;
      case 7: {  // the test holds a block of its own for a while
        if (in.ConsumeBool() || w.own.empty()) {
          if (auto b = w.trie.allocate_evicting()) w.own.push_back(*b);
        } else {
          w.pool.release(w.own.back());
          w.own.pop_back();
        }
        break;
      }
      case 8: {  // feed the next full page to the trie below the pinned path, share its block
        if (!s || (s->handle.deepest < 0 && !s->pinned.empty()) ||
            s->pinned.size() + static_cast<std::size_t>(page) > s->tokens.size())
          break;
        const std::size_t at = s->pinned.size();
        if (!std::equal(s->pinned.begin(), s->pinned.end(), s->tokens.begin())) break;  // truncated below the pin
        const std::span<const TokenId> pg(s->tokens.data() + at, static_cast<std::size_t>(page));
        const Index pidx = static_cast<Index>(at) / page;
        const BlockId mine = s->table->blocks()[static_cast<std::size_t>(pidx)];
        const BlockId held = w.trie.extend(kIds[s->id], s->handle, pg, mine);
        s->pinned.insert(s->pinned.end(), pg.begin(), pg.end());
        w.check_pages(s->id, s->pinned, std::span<const BlockId>(&held, 1), static_cast<std::size_t>(pidx));
        if (held != mine) s->table->share_page(pidx, held);
        break;
      }
      case 9: {  // share_page with another sequence's copy of the same page
        if (w.seqs.size() < 2) break;
        Seq& a = w.seqs[in.ConsumeIntegralInRange<std::size_t>(0, w.seqs.size() - 1)];
        Seq& b = w.seqs[in.ConsumeIntegralInRange<std::size_t>(0, w.seqs.size() - 1)];
        const Index pages = static_cast<Index>(std::min(a.tokens.size(), b.tokens.size())) / page;
        if (a.id != b.id || pages == 0) break;
        const Index p = in.ConsumeIntegralInRange<Index>(0, pages - 1);
        if (!std::equal(a.tokens.begin(), a.tokens.begin() + (p + 1) * page, b.tokens.begin())) break;
        a.table->share_page(p, b.table->blocks()[static_cast<std::size_t>(p)]);
        break;
      }
      case 10: {  // misuse: documented errors, and nothing changes
        const Index max_blocks = w.pool.config().max_blocks;
        const BlockId bad =
            in.ConsumeBool() ? -1 : static_cast<BlockId>(in.ConsumeIntegralInRange<Index>(0, max_blocks));
        if (bad < 0 || bad >= max_blocks || w.pool.refcount(bad) == 0) {
          FUZZ_CHECK(!fuzz::ok([&] { w.pool.retain(bad); }));
          FUZZ_CHECK(!fuzz::ok([&] { w.pool.release(bad); }));
          if (s) FUZZ_CHECK(!fuzz::ok([&] { s->table->share_page(0, bad); }));
        }
        if (s) {
          FUZZ_CHECK(!fuzz::ok([&] { s->table->share_page(static_cast<Index>(s->tokens.size()) / page, 0); }));
          const float x[2] = {1.0f, 2.0f};
          FUZZ_CHECK(!fuzz::ok([&] { s->table->write(0, {x, 1, 1, 2}, {x, 1, 1, 2}); }));  // wrong head_dim
          FUZZ_CHECK(!fuzz::ok([&] {
            s->table->write(in.ConsumeBool() ? 1 : -1, {x, 1, 1, 1}, {x, 1, 1, 1});
          }));  // no such layer
          FUZZ_CHECK(!fuzz::ok([&] { s->table->commit(-1); }));
          FUZZ_CHECK(!fuzz::ok([&] { (void)s->table->source(1); }));
          Trie::Handle h;
          const std::vector<TokenId> short_page(static_cast<std::size_t>(page) + 1, 0);
          FUZZ_CHECK(!fuzz::ok([&] { w.trie.extend(kIds[0], h, short_page, 0); }));
        }
        break;
      }
      default: {  // a request that only matches and lets go
        const std::size_t id = in.ConsumeIntegralInRange<std::size_t>(0, 2);
        const std::vector<TokenId> toks = systems[in.ConsumeBool()];
        auto m = w.trie.match(kIds[id], toks);
        w.check_pages(id, toks, m.blocks);
        w.trie.release(m.handle);
        break;
      }
    }
    w.check();
  }
  return 0;
}
