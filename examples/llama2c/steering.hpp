#pragma once
// Activation steering in the llama2.c runner, built on inferkit/steering: a steering vector
// from contrastive prompt pairs (the mean difference of their residual streams after a layer),
// a residual hook that applies an inferkit::SteeringPlan inside forward(), and an evaluation
// that compares the NLL of held-out text and the probability of a token set with and without
// steering.
//
// Semantics of the CLI flags (declared in flag_table.hpp, read by cmd_common.hpp):
//   --steer-pos / --steer-neg FILE  one prompt per line (token ids, or text with --tokenizer);
//                                   blank lines are skipped and line i of one file pairs with
//                                   line i of the other. Each prompt is fed after BOS; BOS's
//                                   state is the same for every prompt and is left out.
//   --steer-layer L                 the layer (0-based) whose output residual stream gives the
//                                   vector and receives the addition
//   --steer-scale S                 addition: h += S * v (default 1, v the raw mean difference,
//                                   or the unit vector with --steer-unit); ablation: the
//                                   fraction of the component along v removed (default 1)
//   --steer-ablate                  directional ablation along v after every layer (Arditi et
//                                   al. 2024 also ablate the embedding output; this hook starts
//                                   after layer 0), instead of the addition at layer L
//   --steer-reduce mean|last        the prompt's states averaged (default) or its last token
//   --steer-positions all|prompt|generated|A:B   where edits apply (default all); eval counts
//                                   positions before its first scored one as the prompt
//   --steer-preserve-norm           rescale each edited state to its norm before the edit
//   --steer-tokens "ids"            eval: the token set whose probability is reported

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <inferkit/steering/contrastive_vector.hpp>
#include <inferkit/steering/steering_plan.hpp>

#include "llama2c.hpp"
#include "sampling_config.hpp"
#include "tokenizer.hpp"

namespace llama2c {

/// What to steer with: prompt pairs, the layer, and how the vector is applied.
struct SteeringSpec {
  std::vector<std::vector<TokenId>> positive, negative;  // prompts without BOS
  int layer = 0;
  float scale = 1.0f;
  bool ablate = false;
  bool unit = false;  // normalize v to unit length
  bool preserve_norm = false;
  inferkit::TokenReduction reduction = inferkit::TokenReduction::kMeanOverPositions;
  inferkit::PositionSelection positions = inferkit::PositionSelection::all();
};

/// A steering vector and the scales it should be judged against.
struct SteeringVector {
  std::vector<float> v;
  Index pairs = 0;
  double v_norm = 0.0;
  double mean_state_norm = 0.0;  // mean norm of the reduced prompt states at the layer
};

/// Residual stream after `layer` for `tokens` fed from position 0 into a fresh dense cache:
/// [tokens.size(), dim], row-major. Runs only layers 0..layer.
inline std::vector<float> layer_states(const Model& m, const std::vector<TokenId>& tokens, int layer) {
  inferkit::require_index(layer, m.config().n_layers, "layer");
  const Index n = static_cast<Index>(tokens.size()), D = m.config().dim;
  std::vector<float> states(static_cast<std::size_t>(n * D)),
      logits(static_cast<std::size_t>(n * m.config().vocab_size));
  const ResidualHook capture = [&](int l, std::int32_t, inferkit::MatrixView<float> x) {
    if (l == layer)
      for (Index t = 0; t < n; ++t) std::copy_n(x.row_ptr(t), D, states.data() + t * D);
  };
  Cache cache(m.config(), {});
  forward(m, cache, tokens.data(), n, 0, logits.data(), {.layers = layer + 1, .hook = &capture});
  return states;
}

/// The mean difference over the spec's pairs of the (BOS-less) prompt states after its layer.
inline SteeringVector build_steering_vector(const Model& m, const SteeringSpec& spec) {
  inferkit::require_index(spec.layer, m.config().n_layers, "--steer-layer");
  inferkit::require(!spec.positive.empty(), "positive prompts", spec.positive.size(), "must be > 0");
  inferkit::require(spec.negative.size() == spec.positive.size(), "negative prompts", spec.negative.size(),
                    "must equal the positive prompts (" + std::to_string(spec.positive.size()) + ")");
  const Index D = m.config().dim;
  inferkit::ContrastiveVectorBuilder builder(D, {.reduction = spec.reduction, .normalize = spec.unit});
  const auto states_of = [&](const std::vector<TokenId>& prompt, const char* side, std::size_t i) {
    inferkit::require(!prompt.empty(), std::string(side) + " prompt " + std::to_string(i) + " length", prompt.size(),
                      "must be > 0");
    std::vector<TokenId> seq = start_sequence(m.config(), prompt);
    return layer_states(m, seq, spec.layer);
  };
  for (std::size_t i = 0; i < spec.positive.size(); ++i) {
    const auto p = states_of(spec.positive[i], "positive", i), q = states_of(spec.negative[i], "negative", i);
    const Index tp = static_cast<Index>(spec.positive[i].size()), tq = static_cast<Index>(spec.negative[i].size());
    builder.add_pair(inferkit::MatrixView<const float>(p.data() + D, tp, D),
                     inferkit::MatrixView<const float>(q.data() + D, tq, D));
  }
  SteeringVector out;
  out.v = builder.vector();
  out.pairs = builder.num_pairs();
  double s = 0;
  for (float x : out.v) s += double(x) * x;
  out.v_norm = std::sqrt(s);
  out.mean_state_norm = builder.mean_state_norm();
  return out;
}

/// The plan of a spec: an addition of scale * v at its layer, or an ablation of v after every
/// layer, over the spec's positions.
inline inferkit::SteeringPlan make_plan(const Model& m, const SteeringSpec& spec, const std::vector<float>& v) {
  inferkit::SteeringPlan plan(m.config().n_layers, m.config().dim);
  std::vector<Index> layers{spec.layer};
  if (spec.ablate) {
    layers.clear();
    for (int l = 0; l < m.config().n_layers; ++l) layers.push_back(l);
  }
  plan.add({.kind = spec.ablate ? inferkit::EditKind::kAblate : inferkit::EditKind::kAdd,
            .vector = v,
            .scale = spec.scale,
            .preserve_norm = spec.preserve_norm,
            .layers = layers,
            .positions = spec.positions});
  return plan;
}

/// A forward() hook applying `plan` to one sequence whose prompt (BOS included) has
/// `prompt_length` tokens. The plan must outlive the hook.
inline ResidualHook steering_hook(const inferkit::SteeringPlan& plan, Index prompt_length) {
  return [&plan, prompt_length](int layer, std::int32_t first, inferkit::MatrixView<float> x) {
    if (plan.acts_at(layer)) plan.apply(layer, x, {.first_position = first, .prompt_length = prompt_length});
  };
}

/// Held-out evaluation with and without steering.
struct SteeringEval {
  Index count = 0;                                 // predicted positions
  double nll_base = 0, nll_steered = 0;            // mean NLL (nats)
  double set_prob_base = 0, set_prob_steered = 0;  // mean probability mass of the token set
};

/// Teacher-forced evaluation (as evaluate(): ids fed one at a time under the cache policy,
/// positions [first, last) predicted), run twice in lockstep: without a hook and with the plan
/// (the prompt being positions < first). Also the mean probability of `token_set` at each
/// predicted position.
inline SteeringEval evaluate_steering(const Model& m, const std::vector<TokenId>& ids,
                                      const inferkit::SteeringPlan& plan, const std::vector<TokenId>& token_set,
                                      const CacheOptions& copt, Index first, Index last) {
  const Index V = m.config().vocab_size;
  const std::set<TokenId> set(token_set.begin(), token_set.end());  // each token once
  for (TokenId t : set) inferkit::require_index(t, V, "--steer-tokens id");
  const ResidualHook hook = steering_hook(plan, first);
  Cache base(m.config(), copt), steered(m.config(), copt);
  std::vector<float> a(static_cast<std::size_t>(V)), b(static_cast<std::size_t>(V));
  SteeringEval r;
  const auto score = [&](std::span<float> logits, TokenId next, double& nll, double& set_prob) {
    log_softmax(logits);
    nll -= logits[static_cast<std::size_t>(next)];
    for (TokenId t : set) set_prob += std::exp(double(logits[static_cast<std::size_t>(t)]));
  };
  for (std::size_t t = 0; t + 1 < ids.size(); ++t) {
    const auto pos = static_cast<std::int32_t>(t);
    forward(m, base, &ids[t], 1, pos, a.data());
    forward(m, steered, &ids[t], 1, pos, b.data(), {.hook = &hook});
    const Index target = static_cast<Index>(t + 1);
    if (target < first || target >= last) continue;
    score(a, ids[t + 1], r.nll_base, r.set_prob_base);
    score(b, ids[t + 1], r.nll_steered, r.set_prob_steered);
    ++r.count;
  }
  if (r.count) {
    const double n = static_cast<double>(r.count);
    r.nll_base /= n;
    r.nll_steered /= n;
    r.set_prob_base /= n;
    r.set_prob_steered /= n;
  }
  return r;
}

/// Prompts of a file, one per non-blank line: token ids, or text encoded by `tok` when given.
inline std::vector<std::vector<TokenId>> read_prompt_lines(const std::string& path, const Tokenizer* tok,
                                                           const std::string& flag) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument("cannot open " + flag + " file '" + path + "'");
  std::vector<std::vector<TokenId>> prompts;
  std::string line;
  for (int number = 1; std::getline(f, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (tok) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      prompts.push_back(tok->encode(line));
      continue;
    }
    std::istringstream in(line);
    std::string word;
    std::vector<TokenId> ids;
    while (in >> word) {
      std::size_t used = 0;
      long v = -1;
      try {
        v = std::stol(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != word.size() || used == 0)
        throw std::invalid_argument(flag + " file '" + path + "' line " + std::to_string(number) + ": '" +
                                    word.substr(0, 24) + "' is not a token id (give --tokenizer for text prompts)");
      ids.push_back(static_cast<TokenId>(v));
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

/// "all", "prompt", "generated" or "A:B" (positions [A, B)).
inline inferkit::PositionSelection parse_positions(const std::string& text) {
  if (text == "all") return inferkit::PositionSelection::all();
  if (text == "prompt") return inferkit::PositionSelection::prompt();
  if (text == "generated") return inferkit::PositionSelection::generated();
  const auto colon = text.find(':');
  try {
    if (colon != std::string::npos) {
      std::size_t ua = 0, ub = 0;
      const long a = std::stol(text.substr(0, colon), &ua), b = std::stol(text.substr(colon + 1), &ub);
      if (ua == colon && ub == text.size() - colon - 1) {
        const auto sel = inferkit::PositionSelection::range(a, b);
        sel.validate();
        return sel;
      }
    }
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).rfind("inferkit:", 0) == 0) throw;
  } catch (const std::out_of_range&) {}
  throw std::invalid_argument("--steer-positions = '" + text + "' is invalid: must be all, prompt, generated or A:B");
}

/// One line for stderr: what the vector is and how big the edit is against the states.
inline std::string describe(const SteeringSpec& spec, const SteeringVector& sv) {
  char buf[320];
  std::snprintf(
      buf, sizeof(buf), "steering: %ld pairs at layer %d (%s), |v| = %.4g, mean |h| = %.4g, %s scale %g%s%s",
      static_cast<long>(sv.pairs), spec.layer,
      spec.reduction == inferkit::TokenReduction::kLastToken ? "last token" : "mean over positions", sv.v_norm,
      sv.mean_state_norm, spec.ablate ? "ablation after every layer," : "addition,", double(spec.scale),
      spec.ablate ? ""
                  : (" (|s v| / |h| = " +
                     std::to_string(std::abs(spec.scale) * sv.v_norm / std::max(sv.mean_state_norm, 1e-30)) + ")")
                        .c_str(),
      spec.preserve_norm ? ", norm preserved" : "");
  return buf;
}

}  // namespace llama2c
