// serve_loop: continuous batching with inferkit's Scheduler over a toy one-layer model. The
// whole serving engine is the loop in main():
//
//   add the requests that arrived -> plan = scheduler.schedule() -> forward(plan) (every
//   scheduled row of every request in one batch; K/V written to each request's pages) ->
//   sample each sampled row with its request's own sampler -> scheduler.complete(tokens)
//
// The scheduler decides everything else: which requests run, prefill chunks under the token
// budget, decode rows, paged KV memory, prefix reuse (a PrefixTrie over the same pool) and
// preemption when the pool runs out. Usage: serve_loop [token budget] [KV pages] (16, 64).
// Prints each request as it finishes (prompt, output, preemptions) and the scheduler's totals.
// The weights are a formula, so tests/examples/test_serve_loop.cpp can recompute every output.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include <inferkit/attention/attention.hpp>
#include <inferkit/attention/rope.hpp>
#include <inferkit/kv/prefix_trie.hpp>
#include <inferkit/sampling/presets.hpp>
#include <inferkit/serving/scheduler.hpp>

namespace {

using inferkit::Index;
using inferkit::TokenId;
using Vec = std::vector<float>;
constexpr int kVocab = 48, kDim = 16, kHeads = 2, kKvHeads = 1, kHeadDim = kDim / kHeads, kKvDim = kKvHeads * kHeadDim;

// Matrix `id` [rows x cols], row-major: a smooth formula scaled by 1/sqrt(cols).
Vec matrix(int id, int rows, int cols) {
  Vec w(static_cast<std::size_t>(rows * cols));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      w[static_cast<std::size_t>(r * cols + c)] =
          std::sin(0.5f + 1.3f * float(id) + 0.29f * float(r) + 0.31f * float(c) + 0.017f * float(r * c)) /
          std::sqrt(float(cols));
  return w;
}

// One attention layer with a tied classifier: logits = E rmsnorm(x + Wo attention(x)).
struct ToyModel {
  Vec embed = matrix(0, kVocab, kDim), wq = matrix(1, kDim, kDim), wk = matrix(2, kKvDim, kDim),
      wv = matrix(3, kKvDim, kDim), wo = matrix(4, kDim, kDim);
};

// y[rows x out] = x[rows x in] W^T, W row-major [out x in].
void matmul(const float* x, Index rows, Index in, const Vec& w, Index out, float* y) {
  for (Index t = 0; t < rows; ++t)
    for (Index o = 0; o < out; ++o) {
      float s = 0;
      for (Index i = 0; i < in; ++i) s += w[static_cast<std::size_t>(o * in + i)] * x[t * in + i];
      y[t * out + o] = s;
    }
}

void rmsnorm(float* x, Index n) {
  float ss = 0;
  for (Index i = 0; i < n; ++i) ss += x[i] * x[i];
  for (Index i = 0; i < n; ++i) x[i] /= std::sqrt(ss / float(n) + 1e-5f);
}

// The batched forward of one plan: writes the logits of plan.logit_rows, in order, to `logits`.
void forward(const ToyModel& m, const inferkit::BatchPlan<float>& plan, Vec& logits) {
  const Index n = plan.num_tokens();
  Vec x(static_cast<std::size_t>(n * kDim)), xn, q(x.size()), k(static_cast<std::size_t>(n * kKvDim)), v(k.size()),
      att(x.size());
  std::vector<std::int32_t> pos(static_cast<std::size_t>(n));
  for (Index t = 0; t < n; ++t) {
    const TokenId id = plan.token_ids[static_cast<std::size_t>(t)];
    std::copy_n(m.embed.begin() + id * kDim, kDim, x.begin() + t * kDim);
    pos[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(plan.positions[static_cast<std::size_t>(t)]);
  }
  xn = x;
  for (Index t = 0; t < n; ++t) rmsnorm(xn.data() + t * kDim, kDim);
  matmul(xn.data(), n, kDim, m.wq, kDim, q.data());
  matmul(xn.data(), n, kDim, m.wk, kKvDim, k.data());
  matmul(xn.data(), n, kDim, m.wv, kKvDim, v.data());
  inferkit::apply_rope(inferkit::Tensor3View<float>(q.data(), n, kHeads, kHeadDim), pos);
  inferkit::apply_rope(inferkit::Tensor3View<float>(k.data(), n, kKvHeads, kHeadDim), pos);
  // Each request's rows write their K/V into its own pages, then attend to them in one call.
  std::vector<inferkit::BlockTable<float>::Source> sources;
  for (const auto& s : plan.sequences) {
    s.table->write_at(0, s.position, {k.data() + s.offset * kKvDim, s.num_tokens, kKvHeads, kHeadDim},
                      {v.data() + s.offset * kKvDim, s.num_tokens, kKvHeads, kHeadDim});
    sources.push_back(s.table->source(0));
  }
  inferkit::attention_batch(inferkit::Tensor3View<const float>(q.data(), n, kHeads, kHeadDim),
                            std::span<const Index>(plan.cu_q), sources,
                            inferkit::Tensor3View<float>(att.data(), n, kHeads, kHeadDim));
  logits.assign(plan.logit_rows.size() * kVocab, 0.0f);
  Vec y(kDim);
  for (std::size_t r = 0; r < plan.logit_rows.size(); ++r) {  // only the rows that are sampled
    const Index t = plan.logit_rows[r];
    matmul(att.data() + t * kDim, 1, kDim, m.wo, kDim, y.data());
    for (Index i = 0; i < kDim; ++i) y[i] += x[t * kDim + i];
    rmsnorm(y.data(), kDim);
    matmul(y.data(), 1, kDim, m.embed, kVocab, logits.data() + r * kVocab);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Index budget = argc > 1 ? std::atol(argv[1]) : 16, pages = argc > 2 ? std::atol(argv[2]) : 64;
  const ToyModel model;
  inferkit::BlockPool<float> pool(
      {.layers = 1, .kv_heads = kKvHeads, .head_dim = kHeadDim, .page_size = 4, .max_blocks = pages});
  inferkit::PrefixTrie<float> trie(pool);  // pages of a shared prompt prefix are computed once
  inferkit::Scheduler<float> scheduler(pool, &trie, {.max_batched_tokens = budget, .max_sequences = 4});
  // Six requests sharing a 9-token system prompt, one arriving per iteration; even ones greedy,
  // odd ones sampled at temperature 0.9 from the top 8.
  constexpr int kRequests = 6;
  std::vector<inferkit::SamplerChain> samplers;
  std::vector<inferkit::SamplerState> states;
  std::vector<inferkit::RequestParams> requests;
  for (int i = 0; i < kRequests; ++i) {
    inferkit::RequestParams r;
    r.prompt = {1, 7, 3, 9, 12, 4, 8, 30, 2};
    for (int j = 0; j <= i; ++j) r.prompt.push_back(static_cast<TokenId>((5 * i + 11 * j) % kVocab));
    r.max_new_tokens = 6 + 2 * i;
    r.seed = 100 + static_cast<std::uint64_t>(i);
    r.identity = {"toy-model"};
    inferkit::SamplingParams p;
    p.temperature = i % 2 ? 0.9f : 0.0f;
    p.top_k = 8;
    samplers.push_back(inferkit::presets::huggingface(p));
    states.push_back(samplers.back().make_state());
    requests.push_back(r);
  }
  std::vector<Index> index_of(kRequests);  // request id -> index above (ids count from 0)
  Vec logits;
  int finished = 0;
  for (int iteration = 0; finished < kRequests; ++iteration) {
    if (iteration < kRequests)
      index_of.at(static_cast<std::size_t>(scheduler.add_request(requests[iteration]))) = iteration;
    auto& plan = scheduler.schedule();
    if (plan.empty()) continue;
    forward(model, plan, logits);
    std::vector<TokenId> sampled;
    std::size_t row = 0;
    for (const auto& s : plan.sequences) {
      if (!s.sample) continue;
      const Index i = index_of[static_cast<std::size_t>(s.id)];
      std::span<float> lg(logits.data() + row++ * kVocab, kVocab);
      // Token number draw_index of the request: draw draw_index of its seed, whatever its batch.
      const TokenId t = samplers[i].sample(lg, s.context, states[i], inferkit::CounterRng(s.seed), s.draw_index);
      samplers[i].accept(states[i], t);
      sampled.push_back(t);
    }
    for (const auto& f : scheduler.complete(sampled)) {
      const Index i = index_of[static_cast<std::size_t>(f.id)];
      std::printf("request %ld temperature %g prompt", static_cast<long>(i), i % 2 ? 0.9 : 0.0);
      for (TokenId t : requests[i].prompt) std::printf(" %d", t);
      std::printf(" output");
      for (TokenId t : f.output) std::printf(" %d", t);
      std::printf(" preemptions %ld\n", static_cast<long>(f.preemptions));
      ++finished;
    }
  }
  const auto& st = scheduler.stats();
  std::printf("iterations %llu prefill_tokens %llu cached_tokens %llu preemptions %llu\n",
              static_cast<unsigned long long>(st.iterations), static_cast<unsigned long long>(st.prefill_tokens),
              static_cast<unsigned long long>(st.cached_tokens), static_cast<unsigned long long>(st.preemptions));
}
