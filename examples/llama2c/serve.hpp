#pragma once
// The serving loop of `inferkit-llama2c serve`: requests arrive on a clock (a trace's
// arrival_ms, or a synthetic Poisson trace), inferkit's Scheduler plans every iteration
// (continuous batching, chunked prefill, prefix-aware admission, preemption by recompute), the
// batched forward (batch_forward.hpp) runs the plan's rows in one pass over the model, and each
// sampled row is drawn with its request's own SamplerChain and SamplerState. Per request it
// records the output ids and the time of every token; the summary gives throughput, TTFT and
// time-between-tokens percentiles, prefix-cache savings and preemptions.
//
// Sampling: the token after a request's tokens t (prompt + generated so far) is drawn as
// generate() draws it alone: chain.sample(logits, t, state, CounterRng(seed), draw = t.size()).
// The state lives here, keyed by the request, and the scheduler keeps the generated tokens
// across a preemption, so a preempted and resumed request continues exactly where it was.
//
// Static batching (ServeOptions::static_batch = N, the baseline): requests in arrival order
// form groups of N; a group starts when its last member has arrived and the previous group has
// finished completely, and runs to completion (finished slots stay empty).
//
// KV pages: float, or with ServeOptions::kv_quant quantized (BlockPool<QuantizedKv>, the specs
// of paged_quant()): the prefix trie then caches quantized pages as they are. Per-channel (KIVI)
// keys: prefill chunks end at whole key groups, so each request's output is that of a one-shot
// prefill over the dense quantized cache (a chunk cut inside a group would let its queries attend
// float keys the one-shot prefill quantized). A request preempted by recompute prefills its
// generated tokens again in one pass, so from there on it continues as if prompt + generated had
// been its prompt (decoding attended those keys in float while their groups filled).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "batch_forward.hpp"
#include "bounds.hpp"
#include "sampling_config.hpp"
#include "serving_workload.hpp"
#include "trace.hpp"

namespace llama2c {

/// Time source of the serving loop (ms since the start of the run).
class ServeClock {
 public:
  virtual ~ServeClock() = default;
  /// The current time.
  virtual double now_ms() = 0;
  /// Blocks (or jumps) until `ms` (nothing runs before the next arrival).
  virtual void wait_until(double ms) = 0;
  /// Called once after each iteration (virtual clocks advance here).
  virtual void iteration_done() {}
};

/// Wall-clock time (std::chrono::steady_clock) since construction.
class WallClock final : public ServeClock {
 public:
  double now_ms() override {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }
  void wait_until(double ms) override {
    const double wait = ms - now_ms();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wait));
  }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

/// Virtual time: every iteration takes `ms_per_iteration`; waiting jumps. Runs are then
/// reproducible whatever the machine's speed (tests).
class IterationClock final : public ServeClock {
 public:
  explicit IterationClock(double ms_per_iteration = 1.0) : step_(ms_per_iteration) {}
  double now_ms() override { return t_; }
  void wait_until(double ms) override { t_ = std::max(t_, ms); }
  void iteration_done() override { t_ += step_; }

 private:
  double t_ = 0, step_;
};

/// How `serve()` runs.
struct ServeOptions {
  /// Budget, sequence cap, prefill chunk, chunked / unchunked prefill, policy (serving/scheduler.hpp).
  inferkit::SchedulerConfig scheduler{.max_batched_tokens = 512, .max_sequences = 64};
  Index page_size = 16;  ///< tokens per KV block
  Index kv_blocks = 0;   ///< KV blocks in the pool; 0 = every running request at its longest
  /// If set, the pool holds quantized pages (paged_quant(*kv_quant, page_size)): prefix reuse,
  /// preemption and batching as over float pages, each block 3-6x smaller.
  std::optional<inferkit::KvQuantConfig> kv_quant;
  bool prefix_cache = true;             ///< reuse cached prefixes through a PrefixTrie
  bool deterministic = false;           ///< batch-invariant attention and fixed-order matmuls (batch_forward.hpp)
  Index static_batch = 0;               ///< > 0: the static-batching baseline with groups of this size
  int num_threads = 0;                  ///< threads of attention and the fixed-order matmuls (0 = OpenMP's default)
  std::string fingerprint = "llama2c";  ///< model identity for the prefix cache
  ServeClock* clock = nullptr;          ///< nullptr: wall-clock time
  /// If set, sees every sampled row's logits before sampling: (request index in the trace,
  /// generated tokens so far, logits [vocab]).
  std::function<void(Index request, Index generated, std::span<const float> logits)> on_logits;
};

/// One request's outcome.
struct RequestResult {
  std::vector<TokenId> output;                                      ///< generated ids (EOS kept)
  double arrival_ms = 0;                                            ///< its arrival time
  std::vector<double> token_ms;                                     ///< time each generated token was sampled
  Index preemptions = 0;                                            ///< times it was preempted and recomputed
  inferkit::FinishReason reason = inferkit::FinishReason::kLength;  ///< why it stopped
  double ttft_ms() const { return token_ms.empty() ? 0.0 : token_ms.front() - arrival_ms; }  ///< time to first token
};

/// Summary of a run.
struct ServeSummary {
  Index requests = 0, output_tokens = 0, iterations = 0;  ///< counts
  double seconds = 0;                                     ///< from the first arrival to the last token (clock time)
  double throughput = 0;                                  ///< output tokens per second
  double ttft_p50_ms = 0, ttft_p99_ms = 0;                ///< time to first token
  double tbt_p50_ms = 0, tbt_p99_ms = 0;                  ///< time between consecutive tokens of a request
  Index prefill_computed = 0, prefill_saved = 0;          ///< prefill rows run; prompt tokens the prefix cache skipped
  Index preemptions = 0, evicted_pages = 0;               ///< scheduler counters
};

/// A run's results, request by request in trace order, and its summary.
struct ServeReport {
  std::vector<RequestResult> results;  ///< same order as the trace
  ServeSummary summary;                ///< throughput, latencies, prefix savings, preemptions
};

/// The value below which `p` (0..1) of `v` lies (nearest rank); 0 for an empty v.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank > 0 ? rank - 1 : 0)];
}

/// A synthetic trace: the serving benchmarks' workload (serving_workload.hpp: prompts
/// sharing system prompts, per-request seeds) with Poisson arrivals at `rate` requests/s (0:
/// all at time 0) and the given sampling.
inline std::vector<TraceRequest> synthetic_trace(Index n, double rate, const ServingWorkloadConfig& w,
                                                 const SamplingConfig& sampling) {
  if (n < 1) throw std::invalid_argument("--synthetic = " + std::to_string(n) + " is invalid: must be >= 1");
  if (!(rate >= 0) || !std::isfinite(rate))
    throw std::invalid_argument("--rate = " + std::to_string(rate) + " is invalid: must be >= 0");
  ServingWorkload work(w);
  std::mt19937_64 rng(w.seed ^ 0x5eedULL);
  std::exponential_distribution<double> gap(rate > 0 ? rate : 1.0);
  std::vector<TraceRequest> out;
  double t = 0;
  for (Index i = 0; i < n; ++i) {
    auto p = work.next();
    TraceRequest r;
    r.arrival_ms = t;
    if (rate > 0) t += 1000.0 * gap(rng);
    r.prompt = std::move(p.prompt);
    r.max_new_tokens = p.max_new_tokens;
    r.sampling = sampling;
    r.sampling.seed = p.seed;
    out.push_back(std::move(r));
  }
  return out;
}

namespace detail {
template <class T>
ServeReport serve_on(const Model& m, const std::vector<TraceRequest>& trace, const ServeOptions& o,
                     const inferkit::SchedulerConfig& sc, inferkit::BlockPool<T>& pool,
                     std::vector<inferkit::SamplerChain>& chains, std::vector<inferkit::SamplerState>& states);
}  // namespace detail

/// Serves `trace` on `m` (see the header comment). Throws std::invalid_argument for a bad option
/// or a request that can never run (naming the request index and field).
inline ServeReport serve(const Model& m, const std::vector<TraceRequest>& trace, const ServeOptions& o) {
  const Config& c = m.config();
  if (o.page_size < 1)
    throw std::invalid_argument("--page-size = " + std::to_string(o.page_size) + " is invalid: must be >= 1");
  if (o.kv_blocks < 0)
    throw std::invalid_argument("--kv-blocks = " + std::to_string(o.kv_blocks) + " is invalid: must be >= 0");
  if (o.static_batch < 0)
    throw std::invalid_argument("--static-batch = " + std::to_string(o.static_batch) + " is invalid: must be >= 0");
  inferkit::require_thread_count("--threads", o.num_threads);
  inferkit::SchedulerConfig sc = o.scheduler;
  if (o.kv_quant) {  // KIVI pages: chunks end at whole key groups (SchedulerConfig::prefill_chunk_alignment)
    const inferkit::KvQuantConfig pq = paged_quant(*o.kv_quant, o.page_size);
    if (pq.keys.axis == inferkit::QuantAxis::kPerChannel)
      sc.prefill_chunk_alignment = std::lcm(std::max<Index>(1, sc.prefill_chunk_alignment), pq.keys.group_size);
  }
  if (o.static_batch > 0) {  // the whole group runs at once
    sc.max_sequences = o.static_batch;
    sc.max_batched_tokens =
        std::max(sc.max_batched_tokens, sc.max_sequences + std::max<Index>(1, sc.prefill_chunk_alignment) - 1);
  }
  const Index n = static_cast<Index>(trace.size());
  std::vector<inferkit::SamplerChain> chains;
  std::vector<inferkit::SamplerState> states;
  // Every size is checked against what memory holds before the pool is allocated: each
  // request's KV at its longest, then the pool.
  const double memory = physical_memory_bytes();
  const double kv_token =
      kv_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_size(),
                         o.kv_quant ? std::optional(paged_quant(*o.kv_quant, o.page_size)) : std::nullopt);
  Index longest = 1, total = 0;
  for (Index i = 0; i < n; ++i) {
    const TraceRequest& r = trace[static_cast<std::size_t>(i)];
    const std::string at =
        "request " + std::to_string(i) + (r.line > 0 ? " (trace line " + std::to_string(r.line) + ")" : "") + ": ";
    if (r.prompt.empty()) throw std::invalid_argument(at + "prompt.size() = 0 is invalid: must be >= 1");
    for (TokenId t : r.prompt)
      if (t < 0 || t >= c.vocab_size)
        throw std::invalid_argument(at + "prompt token " + std::to_string(t) + " is outside the vocabulary [0, " +
                                    std::to_string(c.vocab_size) + ")");
    if (r.max_new_tokens < 1 || r.max_new_tokens > kMaxPositions - static_cast<Index>(r.prompt.size()))
      throw std::invalid_argument(at + "max_new_tokens = " + std::to_string(r.max_new_tokens) +
                                  " is invalid: must be >= 1, and prompt + max_new_tokens at most 2^31-1 positions");
    check_request_fits(r, i, kv_token, memory);
    const Index need =
        inferkit::ceil_div<Index>(static_cast<Index>(r.prompt.size()) + r.max_new_tokens - 1, o.page_size);
    longest = std::max(longest, need);
    total += need;
    chains.push_back(make_chain(r.sampling));
    states.push_back(chains.back().make_state());
  }
  // Default pool: every running request at its longest (min in double: longest * max_sequences may overflow).
  const Index blocks =
      o.kv_blocks > 0
          ? o.kv_blocks
          : std::max<Index>(1, static_cast<Index>(std::min(double(total), double(longest) * double(sc.max_sequences))));
  const double pool_bytes = double(blocks) * double(o.page_size) * kv_token;
  if (pool_bytes > memory)
    throw std::invalid_argument("--kv-blocks = " + std::to_string(o.kv_blocks) + " is invalid: " +
                                (o.kv_blocks > 0 ? std::string("its pages")
                                                 : "the default pool (every running request at its longest: " +
                                                       std::to_string(blocks) + " pages)") +
                                " of " + std::to_string(o.page_size) + " tokens need " + bytes_text(pool_bytes) +
                                ", more than this machine's memory (" + bytes_text(memory) + ")" +
                                (o.kv_blocks > 0 ? "" : ": give --kv-blocks (a smaller pool preempts)"));
  inferkit::BlockPoolConfig pc{c.n_layers, c.n_kv_heads, c.head_size(), o.page_size, blocks};
  if (o.kv_quant) {
    pc.quant = paged_quant(*o.kv_quant, o.page_size);
    inferkit::BlockPool<inferkit::QuantizedKv> pool(pc);
    return detail::serve_on(m, trace, o, sc, pool, chains, states);
  }
  inferkit::BlockPool<float> pool(pc);
  return detail::serve_on(m, trace, o, sc, pool, chains, states);
}

/// The serve loop over a pool of float or quantized pages (serve() validated the trace and
/// built one chain and sampler state per request).
template <class T>
ServeReport detail::serve_on(const Model& m, const std::vector<TraceRequest>& trace, const ServeOptions& o,
                             const inferkit::SchedulerConfig& sc, inferkit::BlockPool<T>& pool,
                             std::vector<inferkit::SamplerChain>& chains, std::vector<inferkit::SamplerState>& states) {
  const Config& c = m.config();
  const Index n = static_cast<Index>(trace.size());
  std::unique_ptr<inferkit::PrefixTrie<T>> trie;
  if (o.prefix_cache) trie = std::make_unique<inferkit::PrefixTrie<T>>(pool);
  inferkit::Scheduler<T> sched(pool, trie.get(), sc);
  BatchForward fwd(m, {.deterministic = o.deterministic, .num_threads = o.num_threads});
  WallClock wall;
  ServeClock& clock = o.clock ? *o.clock : wall;

  // Arrival order (stable), then admission as the clock passes each arrival.
  std::vector<Index> order(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) {
    return trace[static_cast<std::size_t>(a)].arrival_ms < trace[static_cast<std::size_t>(b)].arrival_ms;
  });
  ServeReport rep;
  rep.results.resize(static_cast<std::size_t>(n));
  std::unordered_map<inferkit::RequestId, Index> index_of;
  const inferkit::ContextIdentity identity{o.fingerprint, "", "rope=adjacent,base=10000,f32"};
  const auto add = [&](Index i) {
    const TraceRequest& r = trace[static_cast<std::size_t>(i)];
    inferkit::RequestParams p;
    p.prompt = r.prompt;
    p.max_new_tokens = r.max_new_tokens;
    p.eos_token_ids = r.eos_token_ids;
    p.seed = r.sampling.seed;
    p.identity = identity;
    try {
      index_of[sched.add_request(std::move(p))] = i;
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("request " + std::to_string(i) + ": " + e.what());
    }
    rep.results[static_cast<std::size_t>(i)].arrival_ms = r.arrival_ms;
  };
  const double start = n > 0 ? trace[static_cast<std::size_t>(order[0])].arrival_ms : 0.0;
  clock.wait_until(start);
  std::size_t next = 0;
  Index done = 0;
  std::vector<float> logits;
  std::vector<TokenId> sampled;
  std::vector<Index> sampled_req;
  double last_token = start;
  while (done < n) {
    if (o.static_batch > 0) {
      if (sched.idle()) {
        const std::size_t end = std::min(order.size(), next + static_cast<std::size_t>(o.static_batch));
        clock.wait_until(trace[static_cast<std::size_t>(order[end - 1])].arrival_ms);
        for (; next < end; ++next) add(order[next]);
      }
    } else {
      if (sched.idle() && next < order.size())
        clock.wait_until(trace[static_cast<std::size_t>(order[next])].arrival_ms);
      const double now = clock.now_ms();
      for (; next < order.size() && trace[static_cast<std::size_t>(order[next])].arrival_ms <= now; ++next)
        add(order[next]);
    }
    auto& plan = sched.schedule();
    if (plan.empty()) throw std::logic_error("llama2c serve: the scheduler planned nothing with requests pending");
    logits.resize(plan.logit_rows.size() * static_cast<std::size_t>(c.vocab_size));
    fwd.run(plan, logits.data());
    sampled.clear();
    sampled_req.clear();
    std::size_t row = 0;
    for (const auto& s : plan.sequences) {
      if (!s.sample) continue;
      const Index i = index_of.at(s.id);
      std::span<float> lg(logits.data() + row++ * static_cast<std::size_t>(c.vocab_size),
                          static_cast<std::size_t>(c.vocab_size));
      if (o.on_logits) o.on_logits(i, s.draw_index, lg);
      const auto& chain = chains[static_cast<std::size_t>(i)];
      auto& state = states[static_cast<std::size_t>(i)];
      const inferkit::CounterRng rng(s.seed);
      const TokenId t = chain.sample(lg, s.context, state, rng, s.context.size());
      chain.accept(state, t);
      sampled.push_back(t);
      sampled_req.push_back(i);
    }
    const auto finished = sched.complete(sampled);
    clock.iteration_done();
    const double now = clock.now_ms();
    for (Index i : sampled_req) rep.results[static_cast<std::size_t>(i)].token_ms.push_back(now);
    for (const auto& f : finished) {
      const Index i = index_of.at(f.id);
      RequestResult& r = rep.results[static_cast<std::size_t>(i)];
      r.output = f.output;
      r.token_ms.resize(std::min(r.token_ms.size(), f.output.size()));  // tokens past a dropped stop sequence
      r.preemptions = f.preemptions;
      r.reason = f.reason;
      index_of.erase(f.id);
      ++done;
    }
    if (!sampled_req.empty()) last_token = now;
  }
  ServeSummary& s = rep.summary;
  std::vector<double> ttft, tbt;
  for (const auto& r : rep.results) {
    s.output_tokens += static_cast<Index>(r.output.size());
    if (!r.token_ms.empty()) ttft.push_back(r.ttft_ms());
    for (std::size_t k = 1; k < r.token_ms.size(); ++k) tbt.push_back(r.token_ms[k] - r.token_ms[k - 1]);
  }
  const auto& st = sched.stats();
  s.requests = n;
  s.iterations = static_cast<Index>(st.iterations);
  s.seconds = (last_token - start) / 1000.0;
  s.throughput = s.seconds > 0 ? double(s.output_tokens) / s.seconds : 0.0;
  s.ttft_p50_ms = percentile(ttft, 0.5);
  s.ttft_p99_ms = percentile(ttft, 0.99);
  s.tbt_p50_ms = percentile(tbt, 0.5);
  s.tbt_p99_ms = percentile(tbt, 0.99);
  s.prefill_computed = static_cast<Index>(st.prefill_tokens);
  s.prefill_saved = static_cast<Index>(st.cached_tokens);
  s.preemptions = static_cast<Index>(st.preemptions);
  s.evicted_pages = static_cast<Index>(st.evicted_pages);
  return rep;
}

/// Writes one JSON line per request: index, output ids, arrival, TTFT, finish time, token
/// times (ms), preemptions and finish reason.
inline void write_results(std::ostream& out, const ServeReport& rep) {
  char buf[64];
  const auto num = [&](double v) {
    std::snprintf(buf, sizeof(buf), "%.3f", v);
    return std::string(buf);
  };
  for (std::size_t i = 0; i < rep.results.size(); ++i) {
    const RequestResult& r = rep.results[i];
    out << "{\"request\": " << i << ", \"output_ids\": [";
    for (std::size_t k = 0; k < r.output.size(); ++k) out << (k ? ", " : "") << r.output[k];
    out << "], \"arrival_ms\": " << num(r.arrival_ms) << ", \"ttft_ms\": " << num(r.ttft_ms())
        << ", \"finish_ms\": " << num(r.token_ms.empty() ? r.arrival_ms : r.token_ms.back()) << ", \"token_ms\": [";
    for (std::size_t k = 0; k < r.token_ms.size(); ++k) out << (k ? ", " : "") << num(r.token_ms[k]);
    out << "], \"preemptions\": " << r.preemptions << ", \"finish_reason\": \""
        << inferkit::finish_reason_name(r.reason) << "\"}\n";
  }
}

/// The summary as one line of `name value` pairs (scripts/serve_sweep.sh reads it).
inline std::string summary_line(const ServeSummary& s) {
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "serve: requests %ld output_tokens %ld iterations %ld seconds %.3f throughput %.1f ttft_p50_ms %.2f "
      "ttft_p99_ms %.2f tbt_p50_ms %.2f tbt_p99_ms %.2f prefill_computed %ld prefill_saved %ld preemptions %ld "
      "evicted_pages %ld",
      static_cast<long>(s.requests), static_cast<long>(s.output_tokens), static_cast<long>(s.iterations), s.seconds,
      s.throughput, s.ttft_p50_ms, s.ttft_p99_ms, s.tbt_p50_ms, s.tbt_p99_ms, static_cast<long>(s.prefill_computed),
      static_cast<long>(s.prefill_saved), static_cast<long>(s.preemptions), static_cast<long>(s.evicted_pages));
  return buf;
}

}  // namespace llama2c
