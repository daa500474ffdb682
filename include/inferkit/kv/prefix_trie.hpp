#pragma once
// Exact-prefix reuse over paged KV blocks (in the spirit of SGLang's RadixAttention and vLLM's
// prefix caching): a trie whose edges are whole pages of token ids, rooted at a context identity
// (model, adapter, RoPE/config fingerprint, caller salt, the pool's KV encoding), so the same tokens under another
// identity never match. Each node holds the pool block with that page's K/V (the trie retains
// it).
//   match(identity, tokens): the longest cached prefix (whole pages), its blocks, and a handle
//     that pins the path (pin counts walk up to the root) until release(handle);
//   insert(identity, tokens, blocks): after prefill, stores the full pages not cached yet;
//   evict(n): frees unpinned leaves in least-recently-used order from an intrusive list kept
//     incrementally, O(1) per freed block whatever the tree size, never a scan of the tree:
//     a new or released leaf enters as the most recent; a parent whose last child was just
//     evicted enters as the least recent when it was last used together with that child (the
//     usual case: it was reached through it), else as the most recent. A pinned node is never
//     evicted; a block a sequence still holds stays alive in the pool after its node is evicted
//     (the node only drops the trie's reference).
// Single writer: match, insert, release and evict must not run concurrently.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/kv/block_pool.hpp"

namespace inferkit {

/// What makes cached K/V reusable: pages match only under the same identity.
struct ContextIdentity {
  /// Model fingerprint (weights hash, name + revision, ...).
  std::string model{};  // model fingerprint (weights hash, name + revision, ...)
  /// LoRA / adapter fingerprint, empty for none.
  std::string adapter{};  // LoRA / adapter fingerprint, empty for none
  /// RoPE and other config that changes K/V (base, scaling, dtype, ...).
  std::string config{};  // RoPE and other config that changes K/V (base, scaling, dtype, ...)
  /// Any further separation the caller wants (tenant, ...).
  std::uint64_t salt = 0;
  /// The KV encoding of the cached pages (BlockPool::kv_encoding(): "f32", "q:k8sg32t,v8sg32t",
  /// ...); empty means the trie's own pool's. A trie only ever stores pages under its pool's
  /// encoding, so a request for another encoding (a float request on an int8 trie) never matches.
  std::string kv_encoding{};
  /// The identity as one unambiguous string (length-prefixed fields, then the KV encoding).
  std::string key() const {
    return std::to_string(model.size()) + ':' + model + '|' + std::to_string(adapter.size()) + ':' + adapter + '|' +
           std::to_string(config.size()) + ':' + config + '|' + std::to_string(salt) + '|' + kv_encoding;
  }
};

/// Counters of a PrefixTrie.
struct PrefixTrieStats {
  std::uint64_t lookups = 0, hits = 0, matched_tokens = 0, inserted_pages = 0, evictions = 0;
  /// Pages cached.
  Index nodes = 0;  // pages cached
};

template <class T = float>
/// Exact-prefix reuse over a BlockPool: a page trie per context identity, pinning, LRU eviction (file comment). Single
/// writer.
class PrefixTrie {
 public:
  /// Index of a trie node.
  using NodeId = std::int32_t;

  /// Pins a matched path until released (or destroyed through release()).
  struct Handle {
    /// Deepest pinned node; -1: nothing pinned.
    NodeId deepest = -1;  // -1: nothing pinned
  };
  /// The result of match().
  struct Match {
    /// Matched prefix length in tokens (a multiple of page_size).
    Index tokens = 0;  // matched prefix length (a multiple of page_size)
    /// The matched pages' blocks, in order.
    std::vector<BlockId> blocks;  // its blocks, in order
    /// Pins the matched path until release().
    Handle handle;
  };

  /// An empty trie over `pool` (which must outlive it), pages of pool.page_size() tokens, storing
  /// pages under the pool's KV encoding only.
  explicit PrefixTrie(BlockPool<T>& pool) : pool_(&pool), page_(pool.page_size()), encoding_(pool.kv_encoding()) {}
  ~PrefixTrie() {
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].alive && nodes_[i].block >= 0) pool_->release(nodes_[i].block);
  }
  PrefixTrie(const PrefixTrie&) = delete;
  PrefixTrie& operator=(const PrefixTrie&) = delete;

  /// Tokens per page.
  Index page_size() const { return page_; }
  /// Counters since construction.
  const PrefixTrieStats& stats() const { return stats_; }

  /// The longest cached prefix of `tokens` under `id` (whole pages), its blocks, and a handle that
  /// pins the path until release(handle); touches the path for LRU and counts the lookup.
  Match match(const ContextIdentity& id, std::span<const TokenId> tokens) {
    ++stats_.lookups;
    ++clock_;
    Match m;
    const auto r = roots_.find(root_key(id));
    if (r == roots_.end()) return m;
    NodeId cur = r->second;
    for (Index p = 0; (p + 1) * page_ <= static_cast<Index>(tokens.size()); ++p) {
      const NodeId child =
          find_child(cur, tokens.subspan(static_cast<std::size_t>(p * page_), static_cast<std::size_t>(page_)));
      if (child < 0) break;
      cur = child;
      m.blocks.push_back(nodes_[static_cast<std::size_t>(cur)].block);
    }
    m.tokens = static_cast<Index>(m.blocks.size()) * page_;
    if (m.tokens > 0) {
      ++stats_.hits;
      stats_.matched_tokens += static_cast<std::uint64_t>(m.tokens);
      m.handle.deepest = cur;
      for (NodeId n = cur; n >= 0; n = nodes_[static_cast<std::size_t>(n)].parent) {  // pin and touch the path
        Node& node = nodes_[static_cast<std::size_t>(n)];
        if (linked(n)) unlink(n);  // pinned: not a candidate until released
        ++node.pins;
        node.last_access = clock_;
      }
    }
    return m;
  }

  /// Cached prefix length of `tokens` without pinning, touching or counting (for inspection).
  Index peek(const ContextIdentity& id, std::span<const TokenId> tokens) const {
    const auto r = roots_.find(root_key(id));
    if (r == roots_.end()) return 0;
    NodeId cur = r->second;
    Index p = 0;
    for (; (p + 1) * page_ <= static_cast<Index>(tokens.size()); ++p) {
      cur = find_child(cur, tokens.subspan(static_cast<std::size_t>(p * page_), static_cast<std::size_t>(page_)));
      if (cur < 0) break;
    }
    return p * page_;
  }

  /// Unpins a match's path; its leaves become evictable again.
  void release(Handle& h) {
    for (NodeId n = h.deepest; n >= 0; n = nodes_[static_cast<std::size_t>(n)].parent) {
      Node& node = nodes_[static_cast<std::size_t>(n)];
      require(node.pins > 0, "handle", h.deepest, "released twice");
      --node.pins;
      if (evictable(node)) link_back(n);
    }
    h.deepest = -1;
  }

  /// Stores the full pages of `tokens` (with their blocks, one per page) that are not cached
  /// yet; pages already cached keep their block. Returns the number of pages added.
  Index insert(const ContextIdentity& id, std::span<const TokenId> tokens, std::span<const BlockId> blocks) {
    const Index pages = static_cast<Index>(tokens.size()) / page_;
    require(static_cast<Index>(blocks.size()) >= pages, "blocks.size()", blocks.size(),
            "must cover every full page of tokens (" + std::to_string(pages) + ")");
    ++clock_;
    NodeId cur = root(id);
    Index added = 0;
    for (Index p = 0; p < pages; ++p) {
      const auto page = tokens.subspan(static_cast<std::size_t>(p * page_), static_cast<std::size_t>(page_));
      NodeId child = find_child(cur, page);
      if (child < 0) {
        child = new_node(cur, page, blocks[static_cast<std::size_t>(p)]);
        ++added;
      }
      nodes_[static_cast<std::size_t>(child)].last_access = clock_;
      cur = child;
    }
    if (evictable(nodes_[static_cast<std::size_t>(cur)])) {  // the path's leaf is the most recent now
      if (linked(cur)) unlink(cur);
      link_back(cur);
    }
    stats_.inserted_pages += static_cast<std::uint64_t>(added);
    return added;
  }

  /// Appends one page below a pinned path and moves the pin onto it, so a running sequence
  /// feeds its pages to the trie as they fill in O(page) each, without re-walking its prefix
  /// (insert() + match() would cost O(sequence) per page). `h` is a match's handle, or an empty
  /// handle to start at the root of `id` (with a non-empty handle `id` must be the identity it
  /// was matched under). A page already cached keeps its block and is pinned; otherwise `block`
  /// (holding that page's K/V) is stored and retained. Returns the block the trie holds for the
  /// page: `block` when it was added, else the cached one (the caller may then share that block
  /// and free its own copy). Throws std::invalid_argument when `page` is not page_size() tokens.
  BlockId extend(const ContextIdentity& id, Handle& h, std::span<const TokenId> page, BlockId block) {
    if (static_cast<Index>(page.size()) != page_) [[unlikely]]
      throw_invalid_argument("page.size()", page.size(), "must be the page size (" + std::to_string(page_) + ")");
    ++clock_;
    NodeId parent = h.deepest;
    if (parent < 0) {  // an empty handle pins from the root, as match() does
      parent = root(id);
      ++nodes_[static_cast<std::size_t>(parent)].pins;
    }
    NodeId child = find_child(parent, page);
    if (child < 0) {
      child = new_node(parent, page, block);
      ++stats_.inserted_pages;
    }
    if (linked(child)) unlink(child);  // pinned: not an eviction candidate until released
    Node& n = nodes_[static_cast<std::size_t>(child)];
    ++n.pins;
    n.last_access = clock_;
    h.deepest = child;
    return n.block;
  }

  /// Evicts up to `max_blocks` least recently used unpinned leaves; returns how many went.
  Index evict(Index max_blocks) {
    Index freed = 0;
    while (freed < max_blocks && lru_head_ >= 0) {
      remove_node(lru_head_);
      ++freed;
    }
    stats_.evictions += static_cast<std::uint64_t>(freed);
    return freed;
  }

  /// Allocates a block, evicting least recently used pages when the pool is full.
  std::optional<BlockId> allocate_evicting() {
    if (auto b = pool_->allocate()) return b;
    while (evict(1) == 1)
      if (auto b = pool_->allocate()) return b;
    return std::nullopt;
  }

  /// Pages cached.
  Index cached_pages() const { return stats_.nodes; }
  /// True when some node holds block b.
  bool holds_block(BlockId b) const {
    for (const Node& n : nodes_)
      if (n.alive && n.block == b) return true;
    return false;
  }
  /// Approximate bytes of trie bookkeeping (nodes, page tokens, edge index).
  std::size_t metadata_bytes() const {
    return nodes_.capacity() * sizeof(Node) + tokens_.capacity() * sizeof(TokenId) +
           edges_.bucket_count() * sizeof(void*) +
           edges_.size() * (sizeof(typename Edges::value_type) + 2 * sizeof(void*));
  }

 private:
  struct Node {
    NodeId parent = -1;
    BlockId block = -1;  // -1 for a root
    Index pins = 0, children = 0;
    std::uint64_t last_access = 0;
    std::uint64_t hash = 0;       // of its page: eviction finds its edge without rehashing
    NodeId prev = -1, next = -1;  // eviction list links
    bool alive = false, in_list = false;
  };
  struct EdgeKey {
    NodeId parent;
    std::uint64_t hash;
    bool operator==(const EdgeKey& o) const { return parent == o.parent && hash == o.hash; }
  };
  struct EdgeHash {
    std::size_t operator()(const EdgeKey& k) const {
      return std::hash<std::uint64_t>()(k.hash ^ (std::uint64_t(k.parent) * 0x9E3779B97F4A7C15ull));
    }
  };
  using Edges = std::unordered_multimap<EdgeKey, NodeId, EdgeHash>;

  static std::uint64_t page_hash(std::span<const TokenId> page) {
    // Two ids per 64-bit multiply-xorshift step; equality is always checked on the tokens.
    std::uint64_t h = 0x9E3779B97F4A7C15ull ^ page.size();
    std::size_t i = 0;
    for (; i + 2 <= page.size(); i += 2) {
      h ^= static_cast<std::uint32_t>(page[i]) |
           (static_cast<std::uint64_t>(static_cast<std::uint32_t>(page[i + 1])) << 32);
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 31;
    }
    if (i < page.size()) {
      h ^= static_cast<std::uint32_t>(page[i]);
      h *= 0x94D049BB133111EBull;
      h ^= h >> 29;
    }
    return h;
  }

  // The identity's key with the KV encoding made explicit (empty = the pool's).
  std::string root_key(const ContextIdentity& id) const {
    if (!id.kv_encoding.empty()) return id.key();
    ContextIdentity full = id;
    full.kv_encoding = encoding_;
    return full.key();
  }

  NodeId root(const ContextIdentity& id) {
    if (!id.kv_encoding.empty() && id.kv_encoding != encoding_) [[unlikely]]
      throw_invalid_argument("identity.kv_encoding", id.kv_encoding,
                             "must be empty or the pool's encoding (" + encoding_ + "): pages are stored under it");
    const std::string k = root_key(id);
    const auto it = roots_.find(k);
    if (it != roots_.end()) return it->second;
    const NodeId r = alloc_node();
    nodes_[static_cast<std::size_t>(r)] = Node{};
    nodes_[static_cast<std::size_t>(r)].alive = true;
    roots_.emplace(k, r);
    return r;
  }

  NodeId find_child(NodeId parent, std::span<const TokenId> page) const {
    const auto range = edges_.equal_range(EdgeKey{parent, page_hash(page)});
    for (auto it = range.first; it != range.second; ++it)
      if (std::equal(page.begin(), page.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(it->second) * page_))
        return it->second;
    return -1;
  }

  NodeId alloc_node() {
    if (!free_nodes_.empty()) {
      const NodeId n = free_nodes_.back();
      free_nodes_.pop_back();
      return n;
    }
    nodes_.emplace_back();
    tokens_.resize(nodes_.size() * static_cast<std::size_t>(page_));
    return static_cast<NodeId>(nodes_.size() - 1);
  }

  NodeId new_node(NodeId parent, std::span<const TokenId> page, BlockId block) {
    pool_->retain(block);
    const NodeId n = alloc_node();
    Node fresh;
    fresh.parent = parent;
    fresh.block = block;
    fresh.last_access = clock_;
    fresh.hash = page_hash(page);
    fresh.alive = true;
    nodes_[static_cast<std::size_t>(n)] = fresh;
    if (linked(parent)) unlink(parent);  // the parent has a child now
    std::copy(page.begin(), page.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(n) * page_);
    edges_.emplace(EdgeKey{parent, fresh.hash}, n);
    ++nodes_[static_cast<std::size_t>(parent)].children;
    ++stats_.nodes;
    return n;
  }

  bool evictable(const Node& n) const { return n.alive && n.block >= 0 && n.children == 0 && n.pins == 0; }

  bool linked(NodeId id) const { return nodes_[static_cast<std::size_t>(id)].in_list; }
  void unlink(NodeId id) {
    Node& n = nodes_[static_cast<std::size_t>(id)];
    (n.prev >= 0 ? nodes_[static_cast<std::size_t>(n.prev)].next : lru_head_) = n.next;
    (n.next >= 0 ? nodes_[static_cast<std::size_t>(n.next)].prev : lru_tail_) = n.prev;
    n.prev = n.next = -1;
    n.in_list = false;
  }
  void link_back(NodeId id) {  // as the most recently used
    Node& n = nodes_[static_cast<std::size_t>(id)];
    n.prev = lru_tail_;
    n.next = -1;
    (lru_tail_ >= 0 ? nodes_[static_cast<std::size_t>(lru_tail_)].next : lru_head_) = id;
    lru_tail_ = id;
    n.in_list = true;
  }
  void link_front(NodeId id) {  // as the least recently used
    Node& n = nodes_[static_cast<std::size_t>(id)];
    n.prev = -1;
    n.next = lru_head_;
    (lru_head_ >= 0 ? nodes_[static_cast<std::size_t>(lru_head_)].prev : lru_tail_) = id;
    lru_head_ = id;
    n.in_list = true;
  }

  void remove_node(NodeId id) {
    if (linked(id)) unlink(id);
    Node& n = nodes_[static_cast<std::size_t>(id)];
    const std::uint64_t time = n.last_access;
    const auto range = edges_.equal_range(EdgeKey{n.parent, n.hash});
    for (auto it = range.first; it != range.second; ++it)
      if (it->second == id) {
        edges_.erase(it);
        break;
      }
    pool_->release(n.block);
    const NodeId parent = n.parent;
    n.alive = false;
    n.block = -1;
    free_nodes_.push_back(id);
    --stats_.nodes;
    Node& p = nodes_[static_cast<std::size_t>(parent)];
    --p.children;
    if (evictable(p) && !p.in_list) {  // a parent whose last child went is a leaf now
      if (p.last_access <= time)
        link_front(parent);
      else
        link_back(parent);
    }
  }

  BlockPool<T>* pool_;
  Index page_;
  std::string encoding_;  // the pool's KV encoding, part of every root's key
  std::vector<Node> nodes_;
  std::vector<TokenId> tokens_;  // page tokens of node i at [i * page, (i + 1) * page)
  std::vector<NodeId> free_nodes_;
  Edges edges_;
  std::unordered_map<std::string, NodeId> roots_;
  NodeId lru_head_ = -1, lru_tail_ = -1;  // evictable leaves, least recent first
  std::uint64_t clock_ = 0;
  PrefixTrieStats stats_;
};

// Fields declared together on one line, documented here.
/// @var PrefixTrieStats::lookups
/// match() calls.

/// @var PrefixTrieStats::hits
/// match() calls that matched at least one page.

/// @var PrefixTrieStats::matched_tokens
/// Tokens matched over all lookups.

/// @var PrefixTrieStats::inserted_pages
/// Pages inserted.

/// @var PrefixTrieStats::evictions
/// Pages evicted.

}  // namespace inferkit
