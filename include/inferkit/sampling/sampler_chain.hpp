#pragma once
// A sampler chain: processors applied in the order the user adds them, then a categorical draw
// (or greedy, when a temperature of 0 is in the chain). Order changes results and the big
// implementations disagree, so the presets say which order they reproduce:
//   inferkit_default: penalties -> temperature -> top-k -> top-p -> min-p -> typical -> draw
//   huggingface:      the same order: transformers' generate() applies its processors
//                     (repetition penalty, ...), then temperature, top-k, top-p, min-p, typical
//   llama_cpp:        penalties -> top-k -> typical -> top-p -> min-p -> temperature -> draw
//                     (llama.cpp's common sampler default order, temperature last)
// Stages that are no-ops for the given parameters are left out, so describe() shows what runs.
// The history passed to sample() is what the penalties see: window it (last N, with or without
// the prompt) before passing it.

#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/philox.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/categorical.hpp"
#include "inferkit/sampling/min_p.hpp"
#include "inferkit/sampling/no_repeat_ngram.hpp"
#include "inferkit/sampling/penalties.hpp"
#include "inferkit/sampling/temperature.hpp"
#include "inferkit/sampling/token_masks.hpp"
#include "inferkit/sampling/top_k.hpp"
#include "inferkit/sampling/top_p.hpp"
#include "inferkit/sampling/typical.hpp"

namespace inferkit {

struct Temperature { float value = 1.0f; };
struct TopK { Index k = 0; };
struct TopP { float p = 1.0f; Index min_keep = 1; };
struct MinP { float p = 0.0f; Index min_keep = 1; };
struct Typical { float mass = 1.0f; Index min_keep = 1; };
struct RepetitionPenalty { float penalty = 1.0f; };
struct FrequencyPresencePenalty { float frequency = 0.0f; float presence = 0.0f; };
struct NoRepeatNgram { Index n = 0; };
struct LogitBias { std::vector<TokenBias> biases{}; };
struct BannedTokens { std::vector<TokenId> tokens{}; };
struct AllowedTokens { std::vector<TokenId> tokens{}; };

using Processor = std::variant<Temperature, TopK, TopP, MinP, Typical, RepetitionPenalty, FrequencyPresencePenalty,
                               NoRepeatNgram, LogitBias, BannedTokens, AllowedTokens>;

/// Parameters of the presets (the common knobs; 1 / 0 values mean "off").
struct SamplingParams {
  float temperature = 1.0f;
  Index top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float typical_p = 1.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  Index min_keep = 1;
};

class SamplerChain {
 public:
  SamplerChain() = default;

  /// Appends a processor after validating its parameters.
  SamplerChain& add(Processor p) {
    std::visit([](const auto& q) { validate(q); }, p);
    processors_.push_back(std::move(p));
    return *this;
  }

  const std::vector<Processor>& processors() const { return processors_; }

  /// The order that runs, e.g. "repetition_penalty(1.1) -> temperature(0.8) -> top_k(40) -> draw".
  std::string describe() const {
    std::ostringstream s;
    for (const Processor& p : processors_) s << std::visit([](const auto& q) { return name(q); }, p) << " -> ";
    s << "draw";
    return s.str();
  }

  /// Applies every processor in order, in place; filtered tokens end as -inf.
  void apply(std::span<float> logits, std::span<const TokenId> history = {}) const {
    Candidates c(logits);
    run(c, history);
    c.materialize();
  }

  /// Applies the processors (in place, as apply()) and draws a token with draw `draw_index` of
  /// `rng`. `distribution`, if non-empty, receives the final normalized distribution.
  TokenId sample(std::span<float> logits, std::span<const TokenId> history, const CounterRng& rng,
                 std::uint64_t draw_index, std::span<float> distribution = {}) const {
    Candidates c(logits);
    run(c, history);
    const TokenId t = sample_categorical(c, rng, draw_index, distribution);
    c.materialize();
    return t;
  }

  /// Rows of a batch in parallel: row r uses CounterRng(seed, streams[r]) and histories[r]
  /// (histories may be empty: no history for any row). The result does not depend on threads.
  void sample_batch(MatrixView<float> logits, std::span<const std::span<const TokenId>> histories, std::uint64_t seed,
                    std::span<const std::uint64_t> streams, std::uint64_t draw_index, std::span<TokenId> out,
                    int num_threads = 0) const {
    const Index rows = logits.rows();
    require(histories.empty() || static_cast<Index>(histories.size()) == rows, "histories.size()", histories.size(),
            "must be 0 or the number of rows (" + std::to_string(rows) + ")");
    require(static_cast<Index>(streams.size()) == rows, "streams.size()", streams.size(),
            "must equal the number of rows (" + std::to_string(rows) + ")");
    require(static_cast<Index>(out.size()) == rows, "out.size()", out.size(),
            "must equal the number of rows (" + std::to_string(rows) + ")");
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(rows));
#pragma omp parallel for num_threads(resolve_threads(num_threads)) schedule(dynamic) if (rows > 1)
    for (Index r = 0; r < rows; ++r) {
      try {
        out[r] = sample(logits.row(r), histories.empty() ? std::span<const TokenId>{} : histories[r],
                        CounterRng(seed, streams[r]), draw_index);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    }
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  // ---- presets --------------------------------------------------------------------------

  static SamplerChain inferkit_default(const SamplingParams& p) {
    validate(p);
    SamplerChain c;
    c.add_penalties(p);
    if (p.temperature != 1.0f) c.add(Temperature{p.temperature});
    if (p.top_k > 0) c.add(TopK{p.top_k});
    if (p.top_p < 1.0f) c.add(TopP{p.top_p, p.min_keep});
    if (p.min_p > 0.0f) c.add(MinP{p.min_p, p.min_keep});
    if (p.typical_p < 1.0f) c.add(Typical{p.typical_p, p.min_keep});
    return c;
  }

  /// transformers' order for these processors is inferkit's default order.
  static SamplerChain huggingface(const SamplingParams& p) { return inferkit_default(p); }

  static SamplerChain llama_cpp(const SamplingParams& p) {
    validate(p);
    SamplerChain c;
    c.add_penalties(p);
    if (p.top_k > 0) c.add(TopK{p.top_k});
    if (p.typical_p < 1.0f) c.add(Typical{p.typical_p, p.min_keep});
    if (p.top_p < 1.0f) c.add(TopP{p.top_p, p.min_keep});
    if (p.min_p > 0.0f) c.add(MinP{p.min_p, p.min_keep});
    if (p.temperature != 1.0f) c.add(Temperature{p.temperature});
    return c;
  }

 private:
  void add_penalties(const SamplingParams& p) {
    if (p.repetition_penalty != 1.0f) add(RepetitionPenalty{p.repetition_penalty});
    if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
      add(FrequencyPresencePenalty{p.frequency_penalty, p.presence_penalty});
  }

  void run(Candidates& c, std::span<const TokenId> history) const {
    for (const Processor& p : processors_) {
      std::visit(
          [&](const auto& q) {
            using Q = std::decay_t<decltype(q)>;
            if constexpr (std::is_same_v<Q, Temperature>) apply_temperature(c, q.value);
            else if constexpr (std::is_same_v<Q, TopK>) apply_top_k(c, q.k);
            else if constexpr (std::is_same_v<Q, TopP>) apply_top_p(c, q.p, q.min_keep);
            else if constexpr (std::is_same_v<Q, MinP>) apply_min_p(c, q.p, q.min_keep);
            else if constexpr (std::is_same_v<Q, Typical>) apply_typical(c, q.mass, q.min_keep);
            else if constexpr (std::is_same_v<Q, RepetitionPenalty>) apply_repetition_penalty(c, history, q.penalty);
            else if constexpr (std::is_same_v<Q, FrequencyPresencePenalty>)
              apply_frequency_presence_penalty(c, history, q.frequency, q.presence);
            else if constexpr (std::is_same_v<Q, NoRepeatNgram>) apply_no_repeat_ngram(c, history, q.n);
            else if constexpr (std::is_same_v<Q, LogitBias>) apply_logit_bias(c, q.biases);
            else if constexpr (std::is_same_v<Q, BannedTokens>) apply_banned_tokens(c, q.tokens);
            else apply_allowed_tokens(c, q.tokens);
          },
          p);
    }
  }

  /// Every preset parameter is checked, including those whose stage would be left out.
  static void validate(const SamplingParams& p) {
    validate_temperature(p.temperature);
    validate_top_p(p.top_p, p.min_keep);
    validate_min_p(p.min_p, p.min_keep);
    validate_typical(p.typical_p, p.min_keep);
    validate(RepetitionPenalty{p.repetition_penalty});
    validate(FrequencyPresencePenalty{p.frequency_penalty, p.presence_penalty});
  }
  static void validate(const Temperature& q) { validate_temperature(q.value); }
  static void validate(const TopK&) {}
  static void validate(const TopP& q) { validate_top_p(q.p, q.min_keep); }
  static void validate(const MinP& q) { validate_min_p(q.p, q.min_keep); }
  static void validate(const Typical& q) { validate_typical(q.mass, q.min_keep); }
  static void validate(const RepetitionPenalty& q) {
    require(std::isfinite(q.penalty) && q.penalty > 0.0f, "repetition_penalty", q.penalty, "must be finite and > 0 (1 = off)");
  }
  static void validate(const FrequencyPresencePenalty& q) {
    require(std::isfinite(q.frequency), "frequency_penalty", q.frequency, "must be finite");
    require(std::isfinite(q.presence), "presence_penalty", q.presence, "must be finite");
  }
  static void validate(const NoRepeatNgram& q) { require(q.n >= 1, "no_repeat_ngram_size", q.n, "must be >= 1"); }
  static void validate(const LogitBias&) {}
  static void validate(const BannedTokens&) {}
  static void validate(const AllowedTokens&) {}

  static std::string fmt(const char* n, double v) {
    std::ostringstream s;
    s << n << "(" << v << ")";
    return s.str();
  }
  static std::string name(const Temperature& q) { return fmt("temperature", q.value); }
  static std::string name(const TopK& q) { return fmt("top_k", double(q.k)); }
  static std::string name(const TopP& q) { return fmt("top_p", q.p); }
  static std::string name(const MinP& q) { return fmt("min_p", q.p); }
  static std::string name(const Typical& q) { return fmt("typical_p", q.mass); }
  static std::string name(const RepetitionPenalty& q) { return fmt("repetition_penalty", q.penalty); }
  static std::string name(const FrequencyPresencePenalty& q) {
    std::ostringstream s;
    s << "frequency_presence_penalty(" << q.frequency << ", " << q.presence << ")";
    return s.str();
  }
  static std::string name(const NoRepeatNgram& q) { return fmt("no_repeat_ngram", double(q.n)); }
  static std::string name(const LogitBias& q) { return fmt("logit_bias", double(q.biases.size())); }
  static std::string name(const BannedTokens& q) { return fmt("banned_tokens", double(q.tokens.size())); }
  static std::string name(const AllowedTokens& q) { return fmt("allowed_tokens", double(q.tokens.size())); }

  std::vector<Processor> processors_;
};

}  // namespace inferkit
