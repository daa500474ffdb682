#pragma once
// A fake deterministic "model" for scheduler tests, independent of the scheduler's code.
// Token q of a sequence has the prefix hash h_q = mix(h_{q-1}, token, q), h_{-1} = hash of the
// context identity, so h_q fixes the identity and every token up to q. Its K row is
// [token, q, h_q bits 0-15, bits 16-31] and its V row [bits 32-47, bits 48-63, token + 1, 7]
// (small integers, exact in float). The forward reads h_{q-1} back from the cache (so a wrong
// cache gives a wrong token), writes row q, and a sampled row's token is
// mix(h_q, seed, draw) % vocab: what a request generates depends on its whole token sequence,
// its identity, its seed and the draw index only.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/serving/batch_plan.hpp"
#include "inferkit/serving/request.hpp"

namespace test {

inline std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline std::uint64_t identity_hash(const inferkit::ContextIdentity& id) {
  std::uint64_t h = 0x1234567;
  for (char c : id.key()) h = splitmix(h ^ static_cast<unsigned char>(c));
  return h;
}
inline std::uint64_t step_hash(std::uint64_t prev, inferkit::TokenId t, inferkit::Index q) {
  return splitmix(prev ^ splitmix(static_cast<std::uint64_t>(t) * 1000003u + static_cast<std::uint64_t>(q)));
}
inline inferkit::TokenId next_token(std::uint64_t h, std::uint64_t seed, inferkit::Index draw, int vocab) {
  return static_cast<inferkit::TokenId>(splitmix(h ^ splitmix(seed * 31 + static_cast<std::uint64_t>(draw))) %
                                        static_cast<std::uint64_t>(vocab));
}

constexpr inferkit::Index kHeadDim = 4;

struct Row {
  float k[4], v[4];
};
inline Row make_row(inferkit::TokenId t, inferkit::Index q, std::uint64_t h) {
  return {{float(t), float(q), float(h & 0xFFFF), float((h >> 16) & 0xFFFF)},
          {float((h >> 32) & 0xFFFF), float((h >> 48) & 0xFFFF), float(t + 1), 7.0f}};
}
inline std::uint64_t row_hash(const float* k, const float* v) {
  return std::uint64_t(k[2]) | (std::uint64_t(k[3]) << 16) | (std::uint64_t(v[0]) << 32) | (std::uint64_t(v[1]) << 48);
}

// A quantized pool stores each 16-bit row value as four 4-bit digits, one per channel (head_dim
// 16): integers in [0, 15] survive int8 and 4-bit (per token or per channel) quantization within
// half a step, so rounding the decoded channels gives the row back exactly.
constexpr inferkit::Index kQuantHeadDim = 16;
template <class T>
constexpr inferkit::Index head_dim_of = inferkit::kQuantizedPool<T> ? kQuantHeadDim : kHeadDim;

/// Reads row q of a table (layer 0, head 0).
template <class T>
Row read_row(const inferkit::BlockPool<T>& pool, const inferkit::BlockTable<T>& t, inferkit::Index q) {
  const inferkit::Index page = pool.page_size();
  Row r;
  if constexpr (inferkit::kQuantizedPool<T>) {
    const auto src = t.source(0);
    inferkit::Index b = 0, first = 0;  // the block holding token q
    while (first + src.block(0, b).num_tokens <= q) first += src.block(0, b++).num_tokens;
    const auto blk = src.block(0, b);
    float kd[kQuantHeadDim], vd[kQuantHeadDim];
    const auto kr = blk.keys.load_f32(q - first, 1, kQuantHeadDim, kd, kQuantHeadDim, true);
    const auto vr = blk.values.load_f32(q - first, 1, kQuantHeadDim, vd, kQuantHeadDim, true);
    for (int i = 0; i < 4; ++i) {
      int kv = 0, vv = 0;
      for (int j = 0; j < 4; ++j) {
        kv |= static_cast<int>(std::lround(kr.data[4 * i + j])) << (4 * j);
        vv |= static_cast<int>(std::lround(vr.data[4 * i + j])) << (4 * j);
      }
      r.k[i] = float(kv);
      r.v[i] = float(vv);
    }
  } else {
    const inferkit::BlockId b = t.blocks()[static_cast<std::size_t>(q / page)];
    for (int i = 0; i < 4; ++i) {
      r.k[i] = static_cast<float>(pool.key_rows(b, 0, 0)[(q % page) * kHeadDim + i]);
      r.v[i] = static_cast<float>(pool.value_rows(b, 0, 0)[(q % page) * kHeadDim + i]);
    }
  }
  return r;
}

/// Writes row q of a table (layer 0, head 0).
template <class T>
void write_row(inferkit::BlockTable<T>& t, inferkit::Index q, const Row& row) {
  if constexpr (inferkit::kQuantizedPool<T>) {
    float k[kQuantHeadDim], v[kQuantHeadDim];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        k[4 * i + j] = float((static_cast<int>(row.k[i]) >> (4 * j)) & 15);
        v[4 * i + j] = float((static_cast<int>(row.v[i]) >> (4 * j)) & 15);
      }
    t.write_at(0, q, {k, 1, 1, kQuantHeadDim}, {v, 1, 1, kQuantHeadDim});
  } else {
    t.write_at(0, q, {row.k, 1, 1, kHeadDim}, {row.v, 1, 1, kHeadDim});
  }
}

/// Prefix hashes h_0..h_{n-1} of a token sequence under an identity (the reference).
inline std::vector<std::uint64_t> prefix_hashes(const inferkit::ContextIdentity& id,
                                                const std::vector<inferkit::TokenId>& s) {
  std::vector<std::uint64_t> h(s.size());
  std::uint64_t prev = identity_hash(id);
  for (std::size_t q = 0; q < s.size(); ++q) prev = h[q] = step_hash(prev, s[q], static_cast<inferkit::Index>(q));
  return h;
}

/// The request served alone: its output and finish reason, by literal rules (no scheduler code).
struct SoloResult {
  std::vector<inferkit::TokenId> output;
  inferkit::FinishReason reason;
  std::vector<inferkit::TokenId> generated;  // including a dropped stop sequence
};
inline SoloResult serve_alone(const inferkit::RequestParams& p, int vocab) {
  std::vector<inferkit::TokenId> s = p.prompt, gen;
  std::uint64_t h = identity_hash(p.identity);
  for (std::size_t q = 0; q < s.size(); ++q) h = step_hash(h, s[q], static_cast<inferkit::Index>(q));
  for (;;) {
    const inferkit::TokenId t = next_token(h, p.seed, static_cast<inferkit::Index>(gen.size()), vocab);
    gen.push_back(t);
    h = step_hash(h, t, static_cast<inferkit::Index>(s.size()));
    s.push_back(t);
    bool eos = false;
    for (auto e : p.eos_token_ids) eos = eos || e == t;
    if (eos) return {gen, inferkit::FinishReason::kEos, gen};
    for (const auto& stop : p.stop_sequences) {
      if (stop.size() > gen.size()) continue;
      bool match = true;
      for (std::size_t i = 0; i < stop.size(); ++i) match = match && gen[gen.size() - stop.size() + i] == stop[i];
      if (match) {
        std::vector<inferkit::TokenId> out = gen;
        if (!p.keep_stop_sequence) out.resize(gen.size() - stop.size());
        return {out, inferkit::FinishReason::kStopSequence, gen};
      }
    }
    if (static_cast<inferkit::Index>(gen.size()) == p.max_new_tokens)
      return {gen, inferkit::FinishReason::kLength, gen};
  }
}

/// Runs a plan through the fake model: writes every fed row's K/V (reading h_{q-1} from the
/// cache), and for sampled sequences verifies drafts greedily (accept while the draft equals the
/// model's token). Returns (tokens, counts) for Scheduler::complete(). `identity_of(id)` and
/// `seed` come from the plan / the test's records.
template <class T, class IdentityOf>
std::pair<std::vector<inferkit::TokenId>, std::vector<inferkit::Index>> run_plan(inferkit::BlockPool<T>& pool,
                                                                                 const inferkit::BatchPlan<T>& plan,
                                                                                 IdentityOf identity_of, int vocab) {
  std::vector<inferkit::TokenId> tokens;
  std::vector<inferkit::Index> counts;
  for (const auto& s : plan.sequences) {
    std::vector<std::uint64_t> h(static_cast<std::size_t>(s.num_tokens));
    for (inferkit::Index j = 0; j < s.num_tokens; ++j) {
      const inferkit::Index q = s.position + j;
      std::uint64_t prev;
      if (q == 0) {
        prev = identity_hash(identity_of(s.id));
      } else {
        const Row r = read_row(pool, *s.table, q - 1);
        if (r.k[1] != float(q - 1)) throw std::runtime_error("fake model: cache row at the wrong position");
        prev = row_hash(r.k, r.v);
      }
      const inferkit::TokenId t = s.tokens[static_cast<std::size_t>(j)];
      h[static_cast<std::size_t>(j)] = step_hash(prev, t, q);
      const Row row = make_row(t, q, h[static_cast<std::size_t>(j)]);
      write_row(*s.table, q, row);
    }
    if (!s.sample) continue;
    const inferkit::Index first = s.num_tokens - 1 - s.draft_tokens;
    inferkit::Index c = 0;
    for (inferkit::Index i = 0; i <= s.draft_tokens; ++i) {
      const inferkit::TokenId t = next_token(h[static_cast<std::size_t>(first + i)], s.seed, s.draw_index + i, vocab);
      tokens.push_back(t);
      ++c;
      if (i == s.draft_tokens || s.tokens[static_cast<std::size_t>(first + i + 1)] != t)
        break;  // rejected: t corrects it
    }
    counts.push_back(c);
  }
  return {tokens, counts};
}

}  // namespace test

#include <map>

#include "inferkit/serving/scheduler.hpp"

namespace test {

/// A scheduler over a pool (and trie) with the fake model: add requests, step, collect outputs.
struct ServeHarness {
  static constexpr int kVocab = 16;
  inferkit::BlockPool<float> pool;
  inferkit::PrefixTrie<float> trie;
  inferkit::Scheduler<float> sched;
  std::map<inferkit::RequestId, inferkit::RequestParams> params;
  std::map<inferkit::RequestId, inferkit::FinishedRequest> done;

  ServeHarness(inferkit::Index page, inferkit::Index blocks, inferkit::SchedulerConfig c, bool use_trie = true)
      : pool({1, 1, kHeadDim, page, blocks}), trie(pool), sched(pool, use_trie ? &trie : nullptr, c) {}

  inferkit::RequestId add(inferkit::RequestParams p) {
    const inferkit::RequestId id = sched.add_request(p);
    params.emplace(id, std::move(p));
    return id;
  }
  /// Runs the fake model on a plan and completes it.
  std::vector<inferkit::FinishedRequest> finish_step(inferkit::BatchPlan<float>& plan) {
    if (plan.empty()) return {};
    const auto [tokens, counts] = run_plan(
        pool, plan, [&](inferkit::RequestId id) { return params.at(id).identity; }, kVocab);
    auto f = sched.complete(tokens, counts);
    for (const auto& r : f) done.emplace(r.id, r);
    return f;
  }
  std::vector<inferkit::FinishedRequest> step() { return finish_step(sched.schedule()); }
  /// Steps until idle (at most `limit` iterations).
  void drain(int limit = 10000) {
    for (int i = 0; i < limit && !sched.idle(); ++i) step();
  }
  /// Whether request `id` finished with exactly what it produces served alone.
  bool matches_alone(inferkit::RequestId id) const {
    const auto it = done.find(id);
    if (it == done.end()) return false;
    const SoloResult s = serve_alone(params.at(id), kVocab);
    return it->second.output == s.output && it->second.reason == s.reason;
  }
};

}  // namespace test
