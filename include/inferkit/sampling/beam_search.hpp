#pragma once
// Beam search as a step function the model loop drives (the model code owns the forward pass).
// Each step takes the log-probabilities of every live beam (after the caller's processors) and
// returns which beams continue with which tokens, so the caller can reorder or fork its caches
// (e.g. through the prefix trie's copy-on-write), plus any hypotheses that finished.
//
// Semantics follow Hugging Face's beam scorer:
// - candidates (beam, token) score beam_sum + logprob; the best 2 * num_beams are taken in order
//   (score descending, then lowest beam, then lowest token); an EOS candidate among the first
//   num_beams finishes a hypothesis, the others fill the next num_beams live beams;
// - finished hypotheses are ranked by a length-normalized score, len = generated tokens
//   including EOS, prompt excluded: none (sum), kHuggingFace sum / len^alpha, or
//   kGnmt (Wu et al. 2016) sum / ((5 + len) / 6)^alpha; the best num_beams are kept;
// - early stopping: kTrue stops once num_beams hypotheses exist; kHeuristic also stops when the
//   best live beam, normalized at the current length, cannot beat the worst kept hypothesis;
//   kNever uses the best score reachable by max_new_tokens (for alpha > 0);
// - EOS is not allowed before min_new_tokens; at max_new_tokens live beams become hypotheses.
// Partial selection per beam (the best 2 * num_beams tokens of each row), never a sort of
// beams x vocabulary.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/logits.hpp"
#include "inferkit/sampling/top_k.hpp"

namespace inferkit {

enum class LengthPenalty { kNone, kHuggingFace, kGnmt };
enum class EarlyStopping { kTrue, kHeuristic, kNever };

/// Beam search parameters (Hugging Face semantics, file comment).
struct BeamSearchOptions {
  Index num_beams = 4;                                              ///< live beams kept (>= 1)
  LengthPenalty length_penalty_mode = LengthPenalty::kHuggingFace;  ///< length normalization of hypothesis scores
  double length_penalty = 1.0;                                      ///< length penalty exponent alpha (alpha)
  EarlyStopping early_stopping = EarlyStopping::kHeuristic;         ///< when the search stops (file comment)
  Index max_new_tokens = 32;                                        ///< generated tokens at most (>= 1)
  Index min_new_tokens = 0;                                         ///< generated tokens before EOS is allowed
  std::vector<TokenId> eos_token_ids{};                             ///< ids that end a hypothesis
};

/// A finished hypothesis.
struct BeamHypothesis {
  std::vector<TokenId> tokens;  ///< generated tokens (EOS included when it ended the hypothesis)
  double sum_logprob = 0.0;     ///< sum of the tokens' log-probabilities
  double score = 0.0;           ///< length-normalized
};

/// What one step decided: new live beam j continues previous live beam parent[j] with token[j].
struct BeamStep {
  std::vector<Index> parent;             ///< previous live beam of each new live beam
  std::vector<TokenId> token;            ///< token appended to each new live beam
  std::vector<BeamHypothesis> finished;  ///< hypotheses completed at this step
  bool done = false;                     ///< no more steps needed
};

/// Normalized score of a hypothesis with `len` generated tokens.
inline double beam_score(double sum_logprob, Index len, LengthPenalty mode, double alpha) {
  switch (mode) {
    case LengthPenalty::kNone:
      return sum_logprob;
    case LengthPenalty::kHuggingFace:
      return sum_logprob / std::pow(static_cast<double>(len), alpha);
    case LengthPenalty::kGnmt:
      return sum_logprob / std::pow((5.0 + static_cast<double>(len)) / 6.0, alpha);
  }
  return sum_logprob;
}

/// Beam search as a step machine: the caller scores the live beams, step() decides (file comment).
class BeamSearch {
 public:
  /// @throws std::invalid_argument naming a bad option.
  explicit BeamSearch(BeamSearchOptions opt) : opt_(std::move(opt)) {
    require(opt_.num_beams >= 1, "num_beams", opt_.num_beams, "must be >= 1");
    require(opt_.max_new_tokens >= 1, "max_new_tokens", opt_.max_new_tokens, "must be >= 1");
    require(opt_.min_new_tokens >= 0 && opt_.min_new_tokens <= opt_.max_new_tokens, "min_new_tokens",
            opt_.min_new_tokens, "must be in [0, max_new_tokens]");
    require(std::isfinite(opt_.length_penalty), "length_penalty", opt_.length_penalty, "must be finite");
    live_.push_back({});  // the prompt: one live beam with nothing generated
    live_sum_.push_back(0.0);
  }

  /// Live beams the model must score at the next step (1 at the start).
  Index num_live() const { return static_cast<Index>(live_.size()); }
  /// Generated tokens of live beam b.
  const std::vector<TokenId>& live_tokens(Index b) const { return live_[static_cast<std::size_t>(b)]; }
  double live_sum_logprob(Index b) const {
    return live_sum_[static_cast<std::size_t>(b)];
  }                                       ///< sum of log-probabilities of live beam b
  Index steps() const { return steps_; }  ///< steps taken
  bool done() const { return done_; }     ///< true when no more steps are needed

  /// One step: logprobs [num_live, V], row b for live beam b.
  BeamStep step(MatrixView<const float> logprobs) {
    require(!done_, "step", steps_, "called after the search finished");
    require(logprobs.rows() == num_live(), "logprobs.rows()", logprobs.rows(),
            "must equal num_live() (" + std::to_string(num_live()) + ")");
    const Index vocab = logprobs.cols(), B = opt_.num_beams, take = 2 * B;
    for (std::size_t i = 0; i < opt_.eos_token_ids.size(); ++i)
      require_index(opt_.eos_token_ids[i], vocab, "eos_token_ids[" + std::to_string(i) + "]");
    const Index len = steps_ + 1;  // generated tokens after this step
    const bool eos_allowed = len > opt_.min_new_tokens;

    struct Cand {
      double score;
      Index beam;
      TokenId token;
    };
    std::vector<Cand> cands;
    for (Index b = 0; b < num_live(); ++b) {
      const auto row = logprobs.row(b);
      (void)scan_logits(row, "logprobs[" + std::to_string(b) + "]");  // NaN, +inf or all -inf: error
      // Best `take` tokens of this row (a superset of its share of the global best), EOS
      // masked out when it is not yet allowed.
      std::vector<float> masked;
      std::span<const float> r = row;
      if (!eos_allowed && !opt_.eos_token_ids.empty()) {
        masked.assign(row.begin(), row.end());
        for (TokenId e : opt_.eos_token_ids)
          masked[static_cast<std::size_t>(e)] = -std::numeric_limits<float>::infinity();
        r = masked;
      }
      const std::vector<TokenId> best = take >= vocab ? all_finite(r) : detail::select_top_k_dense(r, take);
      for (TokenId t : best)
        if (r[static_cast<std::size_t>(t)] > -std::numeric_limits<float>::infinity())
          cands.push_back({live_sum_[static_cast<std::size_t>(b)] + double(r[static_cast<std::size_t>(t)]), b, t});
    }
    std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& c) {
      return a.score > c.score || (a.score == c.score && (a.beam < c.beam || (a.beam == c.beam && a.token < c.token)));
    });
    if (static_cast<Index>(cands.size()) > take) cands.resize(static_cast<std::size_t>(take));

    BeamStep out;
    std::vector<std::vector<TokenId>> next;
    std::vector<double> next_sum;
    for (std::size_t rank = 0; rank < cands.size() && static_cast<Index>(next.size()) < B; ++rank) {
      const Cand& c = cands[rank];
      const bool eos =
          std::find(opt_.eos_token_ids.begin(), opt_.eos_token_ids.end(), c.token) != opt_.eos_token_ids.end();
      if (eos) {
        if (static_cast<Index>(rank) >= B) continue;  // an EOS below the first num_beams does not finish
        BeamHypothesis h{live_[static_cast<std::size_t>(c.beam)], c.score, 0.0};
        h.tokens.push_back(c.token);
        h.score = beam_score(c.score, len, opt_.length_penalty_mode, opt_.length_penalty);
        add_hypothesis(h);
        out.finished.push_back(std::move(h));
        continue;
      }
      std::vector<TokenId> toks = live_[static_cast<std::size_t>(c.beam)];
      toks.push_back(c.token);
      next.push_back(std::move(toks));
      next_sum.push_back(c.score);
      out.parent.push_back(c.beam);
      out.token.push_back(c.token);
    }
    live_ = std::move(next);
    live_sum_ = std::move(next_sum);
    steps_ = len;

    const bool at_max = steps_ >= opt_.max_new_tokens;
    if (live_.empty() || at_max || is_done()) {
      if (at_max || live_.empty()) {  // live beams become hypotheses at the length limit
        for (std::size_t b = 0; b < live_.size(); ++b)
          add_hypothesis({live_[b], live_sum_[b],
                          beam_score(live_sum_[b], steps_, opt_.length_penalty_mode, opt_.length_penalty)});
      }
      done_ = true;
    }
    out.done = done_;
    return out;
  }

  /// The best hypotheses found so far (at most num_beams), best first; after done(), the
  /// n-best list.
  std::vector<BeamHypothesis> finished() const {
    std::vector<BeamHypothesis> h = hyps_;
    std::stable_sort(h.begin(), h.end(),
                     [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
    return h;
  }

 private:
  static std::vector<TokenId> all_finite(std::span<const float> r) {
    std::vector<TokenId> ids;
    for (std::size_t i = 0; i < r.size(); ++i)
      if (r[i] > -std::numeric_limits<float>::infinity()) ids.push_back(static_cast<TokenId>(i));
    return ids;
  }

  void add_hypothesis(const BeamHypothesis& h) {
    if (static_cast<Index>(hyps_.size()) < opt_.num_beams) {
      hyps_.push_back(h);
      return;
    }
    auto worst = std::min_element(hyps_.begin(), hyps_.end(),
                                  [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score < b.score; });
    if (h.score > worst->score) *worst = h;
  }

  double worst_kept() const {
    double w = std::numeric_limits<double>::infinity();
    for (const auto& h : hyps_) w = std::min(w, h.score);
    return w;
  }

  bool is_done() const {
    if (static_cast<Index>(hyps_.size()) < opt_.num_beams) return false;
    if (opt_.early_stopping == EarlyStopping::kTrue) return true;
    const double best_sum = *std::max_element(live_sum_.begin(), live_sum_.end());
    Index len = steps_;
    if (opt_.early_stopping == EarlyStopping::kNever && opt_.length_penalty > 0.0 &&
        opt_.length_penalty_mode != LengthPenalty::kNone)
      len = opt_.max_new_tokens;
    const double best_possible = beam_score(best_sum, len, opt_.length_penalty_mode, opt_.length_penalty);
    return worst_kept() >= best_possible;
  }

  BeamSearchOptions opt_;
  std::vector<std::vector<TokenId>> live_;
  std::vector<double> live_sum_;
  std::vector<BeamHypothesis> hyps_;
  Index steps_ = 0;
  bool done_ = false;
};

}  // namespace inferkit
