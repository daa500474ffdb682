#pragma once
// The synthetic serving workload of `inferkit-llama2c serve --synthetic` and of the serving
// benchmarks (bench/serving_bench.cpp, bench/serving_engine_bench.cpp; benchmarks may include
// examples/, never the other way round): prompts of 32..512 tokens whose first half comes from
// one of 16 shared system prompts, outputs of 16..256 tokens, each request with its own seed.
// Deterministic for a given config; an endless source of requests so steady-state benchmarks
// can replace every finished request by a new one.
//
//   llama2c::ServingWorkload work({.prompt_min = 4, .prompt_max = 9});
//   inferkit::RequestParams r = work.next();

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <inferkit/serving/request.hpp>

namespace llama2c {

using inferkit::Index;
using inferkit::RequestParams;
using inferkit::TokenId;

/// Shape of the synthetic serving workload.
struct ServingWorkloadConfig {
  Index prompt_min = 32, prompt_max = 512;  ///< prompt length, uniform
  Index output_min = 16, output_max = 256;  ///< max_new_tokens, uniform
  int shared_prefixes = 16;                 ///< system prompts (each prompt_max tokens long)
  double shared_fraction = 0.5;             ///< leading fraction of a prompt taken from its system prompt
  Index prefix_tokens = 0;  ///< > 0: leading tokens taken from the system prompt instead (clipped to the prompt)
  int vocab = 32000;
  unsigned seed = 1;
};

/// Draws requests of the workload one after another (same config, same sequence).
class ServingWorkload {
 public:
  explicit ServingWorkload(ServingWorkloadConfig c = {}) : c_(c), rng_(c.seed) {
    for (int s = 0; s < c_.shared_prefixes; ++s) {
      std::vector<TokenId> p(static_cast<std::size_t>(std::max(c_.prompt_max, c_.prefix_tokens)));
      for (auto& t : p) t = token();
      systems_.push_back(std::move(p));
    }
  }
  const ServingWorkloadConfig& config() const { return c_; }

  /// The next request (prompt, max_new_tokens, seed); no stop rules but the length.
  RequestParams next() {
    RequestParams p;
    const Index len = uniform(c_.prompt_min, c_.prompt_max);
    const Index shared = c_.shared_prefixes <= 0 ? 0
                         : c_.prefix_tokens > 0  ? std::min(len, c_.prefix_tokens)
                                                 : static_cast<Index>(static_cast<double>(len) * c_.shared_fraction);
    if (shared > 0) {
      const auto& sys = systems_[static_cast<std::size_t>(uniform(0, c_.shared_prefixes - 1))];
      p.prompt.assign(sys.begin(), sys.begin() + shared);
    }
    while (static_cast<Index>(p.prompt.size()) < len) p.prompt.push_back(token());
    p.max_new_tokens = uniform(c_.output_min, c_.output_max);
    p.seed = rng_();
    p.identity = {"bench-model"};
    return p;
  }

 private:
  Index uniform(Index lo, Index hi) {
    return lo + static_cast<Index>(rng_() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  TokenId token() { return static_cast<TokenId>(rng_() % static_cast<std::uint64_t>(c_.vocab)); }

  ServingWorkloadConfig c_;
  std::mt19937_64 rng_;
  std::vector<std::vector<TokenId>> systems_;
};

}  // namespace llama2c
