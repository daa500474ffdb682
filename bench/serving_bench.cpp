// Serving benchmarks (issue 13, section 5). Sections:
//   1. Scheduler overhead (this file's first part): one scheduler iteration (schedule() plus
//      complete() with sampled tokens from a stand-in sampler, and add_request() for each
//      arrival) in a steady state of 256 running requests over the synthetic workload of
//      examples/llama2c/serving_workload.hpp (prompts 32..512 tokens, half from 16 shared system prompts,
//      outputs 16..256; every finished request is replaced by a new one, W wait), page 16,
//      budget 2048 tokens, prefix trie on. No model runs: the time is the scheduler's alone.
//        serving/inferkit/overhead/policy:P/waiting:W   P = 0 FCFS, 1 LPM; W = 64 or 1024
//        serving/naive/overhead/policy:P/waiting:W      the same rules written the obvious way: each
//          iteration rescans every request, sorts the waiting queue (LPM: re-matches every
//          waiting prompt against the trie), and feeds a completed page by re-inserting and
//          re-matching the request's whole sequence from the root.
//        serving/forward_proxy/stories15M/rows:256  the matrix products of one batched forward
//          of a stories15M-shaped model (dim 288, hidden 768, 6 layers, vocab 32000) over 256
//          rows with Eigen, 2 threads: a lower bound of the iteration the scheduler plans
//          (attention and sampling come on top), to state the overhead as a fraction.
//      Counters: rows (tokens planned per iteration), running, admitted (per iteration).
//   2. Throughput benchmarks (continuous vs sequential vs static batching, chunked vs
//      unchunked) belong below, on the same workload (ServingWorkload).
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <algorithm>
#include <memory>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/serving/scheduler.hpp"
#include "llama2c/serving_workload.hpp"

namespace {

using inferkit::BlockId;
using inferkit::Index;
using inferkit::RequestParams;
using inferkit::TokenId;

constexpr Index kPage = 16, kBlocks = 20000, kRunning = 256, kBudget = 2048;

inferkit::BlockPool<float> make_pool() { return inferkit::BlockPool<float>({1, 1, 1, kPage, kBlocks}); }

// Requests pre-drawn from the workload (drawing random prompts is not the scheduler's cost);
// the benchmarks cycle through them, copying each as a caller would hand it over.
class RequestSource {
 public:
  RequestSource() {
    llama2c::ServingWorkload work;
    for (int i = 0; i < 2048; ++i) reqs_.push_back(work.next());
  }
  RequestParams next() {
    RequestParams p = reqs_[next_++ % reqs_.size()];
    p.seed = next_;  // distinct sampling per request
    return p;
  }

 private:
  std::vector<RequestParams> reqs_;
  std::size_t next_ = 0;
};

// A stand-in for sampling: a token from (seed, draw index), as cheap as it gets.
TokenId fake_token(std::uint64_t seed, Index draw) {
  std::uint64_t x = seed ^ (static_cast<std::uint64_t>(draw) * 0x9E3779B97F4A7C15ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return static_cast<TokenId>((x >> 33) % 32000);
}

// ---------------------------------------------------------------------------------------------
// The naive baseline: the scheduler's rules with full rescans instead of incremental state.
class NaiveScheduler {
 public:
  struct Row {
    std::size_t req;
    Index position, n;
    bool sample;
  };

  NaiveScheduler(inferkit::BlockPool<float>& pool, inferkit::PrefixTrie<float>& trie, bool lpm)
      : pool_(&pool), trie_(&trie), lpm_(lpm) {}

  void add(RequestParams p) {
    auto r = std::make_unique<Req>(*pool_);
    r->tokens = std::move(p.prompt);
    r->prompt_len = static_cast<Index>(r->tokens.size());
    r->p = std::move(p);
    r->arrival = next_arrival_++;
    reqs_.push_back(std::move(r));
  }

  const std::vector<Row>& schedule() {
    rows_.clear();
    Index budget = kBudget;
    // Rescan: classify every request.
    std::vector<std::size_t> running, waiting;
    for (std::size_t i = 0; i < reqs_.size(); ++i) (reqs_[i]->running ? running : waiting).push_back(i);
    std::sort(running.begin(), running.end(),
              [&](std::size_t a, std::size_t b) { return reqs_[a]->admitted < reqs_[b]->admitted; });
    for (std::size_t i : running) {  // decode rows
      Req& r = *reqs_[i];
      if (pending(r) == 1 && generated(r) > 0) {
        grow(r, 1);
        rows_.push_back({i, r.computed, 1, true});
        --budget;
      }
    }
    for (std::size_t i : running) {  // partial prefills
      Req& r = *reqs_[i];
      if (budget == 0) break;
      if (pending(r) == 1 && generated(r) > 0) continue;
      const Index n = std::min(pending(r), budget);
      grow(r, n);
      rows_.push_back({i, r.computed, n, r.computed + n == static_cast<Index>(r.tokens.size())});
      budget -= n;
    }
    // Waiting order: re-sorted (LPM: every prompt re-matched) each iteration.
    std::vector<std::pair<Index, std::size_t>> order;
    for (std::size_t i : waiting) order.push_back({lpm_ ? -trie_->peek(reqs_[i]->p.identity, reqs_[i]->tokens) : 0, i});
    std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : reqs_[a.second]->arrival < reqs_[b.second]->arrival;
    });
    Index n_running = static_cast<Index>(running.size());
    for (const auto& [rank, i] : order) {
      if (budget == 0 || n_running >= kRunning) break;
      Req& r = *reqs_[i];
      auto m = trie_->match(r.p.identity, r.tokens);
      const Index len = static_cast<Index>(r.tokens.size());
      if (m.tokens == len) {  // keep it simple here: drop the last page instead of copy-on-write
        trie_->release(m.handle);
        m = trie_->match(r.p.identity, std::span<const TokenId>(r.tokens).first(static_cast<std::size_t>(len - 1)));
      }
      r.table.assign_prefix(m.blocks, m.tokens);
      r.handle = m.handle;
      r.computed = m.tokens;
      r.fed_pages = m.tokens / kPage;
      r.running = true;
      r.admitted = next_admission_++;
      ++n_running;
      const Index n = std::min(pending(r), budget);
      grow(r, n);
      rows_.push_back({i, r.computed, n, r.computed + n == len});
      budget -= n;
    }
    return rows_;
  }

  // Sampled tokens for the rows with `sample`, in order. Returns finished requests.
  int complete(const std::vector<TokenId>& sampled) {
    std::size_t k = 0;
    int finished = 0;
    for (const Row& row : rows_) {
      Req& r = *reqs_[row.req];
      r.computed = row.position + row.n;
      if (row.sample) r.tokens.push_back(sampled[k++]);
      if (r.computed / kPage > r.fed_pages) {  // a page completed: re-insert and re-pin from the root
        const auto done =
            std::span<const TokenId>(r.tokens).first(static_cast<std::size_t>(r.computed / kPage * kPage));
        trie_->insert(r.p.identity, done, r.table.blocks());
        auto m = trie_->match(r.p.identity, done);
        if (r.handle.deepest >= 0) trie_->release(r.handle);
        r.handle = m.handle;
        r.fed_pages = r.computed / kPage;
      }
      if (generated(r) >= r.p.max_new_tokens) {
        if (r.handle.deepest >= 0) trie_->release(r.handle);
        r.table.clear();
        r.done = true;
        ++finished;
      }
    }
    std::erase_if(reqs_, [](const std::unique_ptr<Req>& r) { return r->done; });
    return finished;
  }

  std::uint64_t seed_of(const Row& row) const { return reqs_[row.req]->p.seed; }
  Index draw_of(const Row& row) const { return generated(*reqs_[row.req]); }
  Index running() const {
    return static_cast<Index>(std::count_if(reqs_.begin(), reqs_.end(), [](const auto& r) { return r->running; }));
  }
  ~NaiveScheduler() {
    for (auto& r : reqs_)
      if (r->handle.deepest >= 0) trie_->release(r->handle);
  }

 private:
  struct Req {
    explicit Req(inferkit::BlockPool<float>& pool) : table(pool) {}
    RequestParams p;
    std::vector<TokenId> tokens;
    Index prompt_len = 0, computed = 0, fed_pages = 0;
    inferkit::BlockTable<float> table;
    inferkit::PrefixTrie<float>::Handle handle;
    bool running = false, done = false;
    std::uint64_t arrival = 0, admitted = 0;
  };
  static Index pending(const Req& r) { return static_cast<Index>(r.tokens.size()) - r.computed; }
  static Index generated(const Req& r) { return static_cast<Index>(r.tokens.size()) - r.prompt_len; }
  void grow(Req& r, Index n) {
    while (!r.table.reserve(n))
      if (trie_->evict(1) == 0)
        throw std::runtime_error("naive scheduler: pool exhausted (the benchmark pool holds the workload)");
    r.table.commit(n);
  }

  inferkit::BlockPool<float>* pool_;
  inferkit::PrefixTrie<float>* trie_;
  bool lpm_;
  std::vector<std::unique_ptr<Req>> reqs_;
  std::vector<Row> rows_;
  std::uint64_t next_arrival_ = 0, next_admission_ = 1;
};

// ---------------------------------------------------------------------------------------------
// 1. Scheduler overhead.

void BM_overhead_inferkit(benchmark::State& state) {
  auto pool = make_pool();
  inferkit::PrefixTrie<float> trie(pool);
  const auto policy =
      state.range(0) ? inferkit::SchedulingPolicy::kLongestPrefixMatch : inferkit::SchedulingPolicy::kFcfs;
  inferkit::Scheduler<float> sched(pool, &trie,
                                   {.max_batched_tokens = kBudget, .max_sequences = kRunning, .policy = policy});
  RequestSource work;
  for (Index i = 0; i < kRunning + state.range(1); ++i) sched.add_request(work.next());
  std::vector<TokenId> sampled;
  double rows = 0, running = 0, admitted = 0;
  const auto iteration = [&] {
    auto& plan = sched.schedule();
    sampled.clear();
    for (const auto& s : plan.sequences)
      if (s.sample) sampled.push_back(fake_token(s.seed, s.draw_index));
    const auto done = sched.complete(sampled);
    for (std::size_t i = 0; i < done.size(); ++i) sched.add_request(work.next());
    return &plan;
  };
  for (int i = 0; i < 400; ++i) iteration();  // reach the steady state
  for (auto _ : state) {
    const auto* plan = iteration();
    rows += static_cast<double>(plan->num_tokens());
    admitted += static_cast<double>(plan->num_admitted);
    running += static_cast<double>(sched.num_running());
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["rows"] = rows / n;
  state.counters["running"] = running / n;
  state.counters["admitted"] = admitted / n;
}

void BM_overhead_naive(benchmark::State& state) {
  auto pool = make_pool();
  inferkit::PrefixTrie<float> trie(pool);
  NaiveScheduler sched(pool, trie, state.range(0) != 0);
  RequestSource work;
  for (Index i = 0; i < kRunning + state.range(1); ++i) sched.add(work.next());
  std::vector<TokenId> sampled;
  double rows = 0, running = 0;
  const auto iteration = [&] {
    const auto& plan = sched.schedule();
    sampled.clear();
    Index tokens = 0;
    for (const auto& row : plan) {
      tokens += row.n;
      if (row.sample) sampled.push_back(fake_token(sched.seed_of(row), sched.draw_of(row)));
    }
    const int done = sched.complete(sampled);
    for (int i = 0; i < done; ++i) sched.add(work.next());
    return tokens;
  };
  for (int i = 0; i < 400; ++i) iteration();
  for (auto _ : state) {
    rows += static_cast<double>(iteration());
    running += static_cast<double>(sched.running());
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["rows"] = rows / n;
  state.counters["running"] = running / n;
}

// The matrix products of one batched forward: per layer x[rows, 288] times wqkv [288, 864],
// wo [288, 288], w1|w3 [288, 1536], w2 [768, 288]; then the classifier [288, 32000].
void BM_forward_proxy(benchmark::State& state) {
  const Index rows = state.range(0), dim = 288, hidden = 768, layers = 6, vocab = 32000;
  Eigen::setNbThreads(2);
  using M = Eigen::MatrixXf;
  const M x = M::Random(rows, dim), h = M::Random(rows, hidden);
  std::vector<M> w;
  for (Index l = 0; l < layers; ++l) {
    w.push_back(M::Random(dim, 3 * dim));
    w.push_back(M::Random(dim, dim));
    w.push_back(M::Random(dim, 2 * hidden));
    w.push_back(M::Random(hidden, dim));
  }
  const M cls = M::Random(dim, vocab);
  M y1(rows, 3 * dim), y2(rows, dim), y3(rows, 2 * hidden), y4(rows, dim), logits(rows, vocab);
  for (auto _ : state) {
    for (Index l = 0; l < layers; ++l) {
      y1.noalias() = x * w[static_cast<std::size_t>(4 * l)];
      y2.noalias() = x * w[static_cast<std::size_t>(4 * l + 1)];
      y3.noalias() = x * w[static_cast<std::size_t>(4 * l + 2)];
      y4.noalias() = h * w[static_cast<std::size_t>(4 * l + 3)];
    }
    logits.noalias() = x * cls;
    benchmark::DoNotOptimize(logits.data());
  }
  inferkit::bench::set_gflops(
      state, 2.0 * double(rows) *
                 double(layers * (dim * 3 * dim + dim * dim + dim * 2 * hidden + hidden * dim) + dim * vocab));
}

BENCHMARK(BM_overhead_inferkit)
    ->Name("serving/inferkit/overhead")
    ->ArgNames({"policy", "waiting"})
    ->ArgsProduct({{0, 1}, {64, 1024}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_overhead_naive)
    ->Name("serving/naive/overhead")
    ->ArgNames({"policy", "waiting"})
    ->ArgsProduct({{0, 1}, {64, 1024}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_forward_proxy)
    ->Name("serving/forward_proxy/stories15M")
    ->ArgName("rows")
    ->Arg(256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---------------------------------------------------------------------------------------------
// 2. Throughput benchmarks go here.

}  // namespace
