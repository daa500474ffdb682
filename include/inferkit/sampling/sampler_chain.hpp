#pragma once
// A sampler chain: processors applied in the order the user adds them, then a categorical draw
// (or greedy, when a temperature of 0 is in the chain). Order changes results and the big
// implementations disagree, so the presets say which order they reproduce (stages that are
// no-ops for the given parameters are left out, so describe() shows what runs):
//   inferkit_default = huggingface: transformers' generate() order,
//       sequence_bias -> repetition_penalty -> frequency_presence_penalty -> dry -> bad_words ->
//       min_new_tokens -> exponential_decay_length_penalty -> begin_suppress_tokens ->
//       temperature (dynamic_temperature when dynatemp_range > 0) -> top_n_sigma -> top_k ->
//       top_p -> min_p -> typical_p -> epsilon_cutoff -> eta_cutoff -> xtc -> draw
//     (rules transformers lacks sit where their kind does: DRY with the penalties, top-n-sigma
//     first among the truncations as in llama.cpp, XTC after every truncation as in llama.cpp);
//   llama_cpp: llama.cpp's common sampler default order,
//       [HF logit rules: sequence_bias, bad_words, min_new_tokens, exponential decay,
//       begin_suppress, where llama.cpp puts its logit bias] -> penalties -> dry -> top_n_sigma ->
//       top_k -> typical_p -> top_p -> min_p -> [epsilon_cutoff -> eta_cutoff] -> xtc ->
//       temperature / dynamic temperature -> draw   (temperature last);
//   with mirostat = 1 or 2 both presets end in temperature -> mirostat -> draw and leave out the
//   truncation rules, as llama.cpp does; llama_cpp also leaves out the penalties and DRY
//   (llama.cpp builds its Mirostat chain from temperature alone, after its logit bias).
// The history passed to sample() is what the history rules see: penalties (each with an
// optional last_n window), DRY (its penalty_last_n window), bad words and sequence bias (its
// tail). Stateful rules (Mirostat's mu; min_new_tokens, the decay penalty and begin-suppress
// tokens, which count generated tokens) read a SamplerState the caller owns: make it with
// make_state(), pass it to sample(), then accept() the token (sampler_state.hpp).

#include <cmath>
#include <cstdint>
#include <initializer_list>
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
#include "inferkit/sampling/dry.hpp"
#include "inferkit/sampling/dynamic_temperature.hpp"
#include "inferkit/sampling/epsilon_eta.hpp"
#include "inferkit/sampling/length_rules.hpp"
#include "inferkit/sampling/min_p.hpp"
#include "inferkit/sampling/mirostat.hpp"
#include "inferkit/sampling/no_repeat_ngram.hpp"
#include "inferkit/sampling/penalties.hpp"
#include "inferkit/sampling/sampler_state.hpp"
#include "inferkit/sampling/sequence_bias.hpp"
#include "inferkit/sampling/temperature.hpp"
#include "inferkit/sampling/token_masks.hpp"
#include "inferkit/sampling/top_k.hpp"
#include "inferkit/sampling/top_n_sigma.hpp"
#include "inferkit/sampling/top_p.hpp"
#include "inferkit/sampling/typical.hpp"
#include "inferkit/sampling/xtc.hpp"

namespace inferkit {

/// Temperature stage: logits / value (0 = greedy).
struct Temperature {
  float value = 1.0f;  ///< T >= 0
};
/// Top-k stage.
struct TopK {
  Index k = 0;  ///< tokens kept; <= 0 keeps all
};
/// Top-p stage.
struct TopP {
  float p = 1.0f;      ///< nucleus mass in [0, 1]; 0 keeps the min_keep most probable
  Index min_keep = 1;  ///< at least this many stay
};
/// Min-p stage.
struct MinP {
  float p = 0.0f;      ///< fraction of the largest probability a token needs, in [0, 1]
  Index min_keep = 1;  ///< at least this many stay
};
/// Locally typical stage.
struct Typical {
  float mass = 1.0f;   ///< typical mass in (0, 1]
  Index min_keep = 1;  ///< at least this many stay
};
/// Repetition penalty over the last `last_n` history tokens.
struct RepetitionPenalty {
  float penalty = 1.0f;  ///< > 0 (1 = off)
  Index last_n = -1;     ///< history window: -1 = all passed, 0 = none
};
/// Frequency / presence penalties over the last `last_n` history tokens.
struct FrequencyPresencePenalty {
  float frequency = 0.0f;  ///< subtracted per occurrence
  float presence = 0.0f;   ///< subtracted once when present
  Index last_n = -1;       ///< history window: -1 = all passed, 0 = none
};
/// No-repeat n-gram stage.
struct NoRepeatNgram {
  Index n = 0;  ///< n-gram size, >= 1
};
/// Additive per-token logit bias.
struct LogitBias {
  std::vector<TokenBias> biases{};  ///< (token, bias) pairs
};
/// Tokens set to -inf.
struct BannedTokens {
  std::vector<TokenId> tokens{};  ///< banned ids
};
/// Tokens kept (all others -inf).
struct AllowedTokens {
  std::vector<TokenId> tokens{};  ///< allowed ids
};
/// Top-n-sigma stage (top_n_sigma.hpp).
struct TopNSigma {
  float n = -1.0f;  ///< standard deviations below the max; <= 0 = off
};

/// One stage of a chain. Xtc, Dry, Mirostat, DynamicTemperature, EpsilonCutoff, EtaCutoff and
/// the sequence rules are defined in their own headers.
using Processor = std::variant<Temperature, TopK, TopP, MinP, Typical, RepetitionPenalty, FrequencyPresencePenalty,
                               NoRepeatNgram, LogitBias, BannedTokens, AllowedTokens, DynamicTemperature, TopNSigma,
                               Xtc, Dry, Mirostat, EpsilonCutoff, EtaCutoff, MinNewTokens,
                               ExponentialDecayLengthPenalty, BadWords, SequenceBias, BeginSuppressTokens>;

/// Parameters of the presets (the common knobs; 1 / 0 values mean "off"). Defaults follow
/// llama.cpp where it has the knob.
struct SamplingParams {
  float temperature = 1.0f;         ///< T >= 0 (0 = greedy; 1 = off)
  Index top_k = 0;                  ///< <= 0 = off
  float top_p = 1.0f;               ///< 1 = off; 0 keeps the min_keep most probable (llama.cpp, HF)
  float min_p = 0.0f;               ///< 0 = off
  float typical_p = 1.0f;           ///< 1 = off
  float repetition_penalty = 1.0f;  ///< 1 = off
  float frequency_penalty = 0.0f;   ///< 0 = off
  float presence_penalty = 0.0f;    ///< 0 = off
  Index min_keep = 1;               ///< floor of top-p, min-p, typical, epsilon, eta and XTC
  Index penalty_last_n = -1;        ///< history window of the three penalties: -1 = all passed, 0 = none
  float dynatemp_range = 0.0f;      ///< dynamic temperature's delta (0 = plain temperature)
  float dynatemp_exponent = 1.0f;   ///< dynamic temperature's exponent
  float top_n_sigma = -1.0f;        ///< <= 0 = off
  float xtc_probability = 0.0f;     ///< 0 = off
  float xtc_threshold = 0.1f;       ///< XTC's probability threshold
  float dry_multiplier = 0.0f;      ///< 0 = off
  float dry_base = 1.75f;           ///< DRY's growth base, >= 1
  Index dry_allowed_length = 2;     ///< DRY's free repeat length
  Index dry_penalty_last_n = -1;    ///< DRY's window: -1 = all of the history passed, 0 = off
  std::vector<std::vector<TokenId>> dry_sequence_breakers{};  ///< DRY's breakers (token sequences)
  int mirostat = 0;                                           ///< 0 = off, 1 or 2
  float mirostat_tau = 5.0f;                                  ///< Mirostat's target surprise (bits)
  float mirostat_eta = 0.1f;                                  ///< Mirostat's learning rate
  float epsilon_cutoff = 0.0f;                                ///< 0 = off, else in (0, 1)
  float eta_cutoff = 0.0f;                                    ///< 0 = off, else in (0, 1)
  std::vector<TokenId> eos_tokens{};               ///< EOS ids for min_new_tokens, the decay penalty and bad words
  Index min_new_tokens = 0;                        ///< 0 = off
  Index exponential_decay_start = 0;               ///< generated tokens before the EOS boost starts
  float exponential_decay_factor = 1.0f;           ///< 1 = off
  std::vector<std::vector<TokenId>> bad_words{};   ///< banned sequences (HF bad_words_ids)
  std::vector<SequenceBiasEntry> sequence_bias{};  ///< biased sequences (HF sequence_bias)
  std::vector<TokenId> begin_suppress_tokens{};    ///< banned at the first generated token
};

/// An ordered list of processors and the final draw. const member functions are thread-safe
/// (the chain is immutable once built); a SamplerState belongs to one request.
class SamplerChain {
 public:
  SamplerChain() = default;

  /// Appends a processor after validating its parameters. A chain holds at most one Mirostat
  /// stage (one mu) and at most one XTC stage (its coin is words 2-3 of the draw's Philox
  /// block); a second one is std::invalid_argument.
  SamplerChain& add(Processor p) {
    std::visit([](const auto& q) { validate(q); }, p);
    if (std::holds_alternative<Mirostat>(p))
      require(find<Mirostat>() == nullptr, "processors", "a second mirostat",
              "a chain holds at most one mirostat stage");
    if (std::holds_alternative<Xtc>(p))
      require(find<Xtc>() == nullptr, "processors", "a second xtc",
              "a chain holds at most one xtc stage (its coin is words 2-3 of the draw's Philox block)");
    processors_.push_back(std::move(p));
    return *this;
  }

  /// The stages in the order they run.
  const std::vector<Processor>& processors() const { return processors_; }

  /// The order that runs, e.g. "repetition_penalty(1.1) -> temperature(0.8) -> top_k(40) -> draw".
  std::string describe() const {
    std::ostringstream s;
    for (const Processor& p : processors_) s << std::visit([](const auto& q) { return name(q); }, p) << " -> ";
    s << "draw";
    return s.str();
  }

  /// True when a stage reads a SamplerState (Mirostat, min_new_tokens, the exponential decay
  /// length penalty, begin-suppress tokens): such chains need the overloads taking a state.
  bool stateful() const {
    return find<Mirostat>() || find<MinNewTokens>() || find<ExponentialDecayLengthPenalty>() ||
           find<BeginSuppressTokens>();
  }

  /// A fresh per-request state for this chain: `generated` tokens already accepted (0 at
  /// admission) and, with a Mirostat stage, mu = 2 tau. Throws for generated < 0.
  SamplerState make_state(Index generated = 0) const {
    require(generated >= 0, "generated", generated, "must be >= 0");
    SamplerState st;
    st.generated_ = generated;
    if (const Mirostat* m = find<Mirostat>()) {
      st.has_mu_ = true;
      st.mu_ = mirostat_initial_mu(*m);
    }
    return st;
  }

  /// Applies every processor in order, in place; filtered tokens end as -inf. Throws
  /// std::invalid_argument for a stateful chain or one with an active XTC stage (which needs
  /// the request's random stream): use the overload below.
  void apply(std::span<float> logits, std::span<const TokenId> history = {}) const {
    require_stateless();
    if (const Xtc* x = find<Xtc>())
      require(x->probability == 0.0f, "rng", "none",
              "an xtc stage draws a coin: use apply(logits, history, state, rng, draw_index)");
    Candidates c(logits);
    run(c, {history, nullptr, nullptr, 0});
    c.materialize();
  }

  /// Applies every processor in order, in place, for a request with state `state` (read only)
  /// and draw `draw_index` of `rng` (XTC's coin). The state must come from this chain's
  /// make_state() (or carry Mirostat's mu when the chain has a Mirostat stage).
  void apply(std::span<float> logits, std::span<const TokenId> history, const SamplerState& state,
             const CounterRng& rng, std::uint64_t draw_index) const {
    check_state(state);
    Candidates c(logits);
    run(c, {history, &state, &rng, draw_index});
    c.materialize();
  }

  /// Applies the processors (in place, as apply()) and draws a token with draw `draw_index` of
  /// `rng`. `distribution`, if non-empty, receives the final normalized distribution. Throws
  /// std::invalid_argument for a stateful chain (use the overload taking a SamplerState).
  TokenId sample(std::span<float> logits, std::span<const TokenId> history, const CounterRng& rng,
                 std::uint64_t draw_index, std::span<float> distribution = {}) const {
    require_stateless();
    Candidates c(logits);
    run(c, {history, nullptr, &rng, draw_index});
    const TokenId t = sample_categorical(c, rng, draw_index, distribution);
    c.materialize();
    return t;
  }

  /// As sample() above for a request with state `state`: the stages read it, and the drawn
  /// token and its surprise are recorded in it until accept() commits them. Any chain may be
  /// sampled this way.
  TokenId sample(std::span<float> logits, std::span<const TokenId> history, SamplerState& state, const CounterRng& rng,
                 std::uint64_t draw_index, std::span<float> distribution = {}) const {
    check_state(state);
    Candidates c(logits);
    run(c, {history, &state, &rng, draw_index});
    double p = 1.0;
    const TokenId t = sample_categorical(c, rng, draw_index, distribution, &p);
    c.materialize();
    state.has_drawn_ = true;
    state.drawn_ = t;
    state.drawn_surprise_ = static_cast<float>(-std::log2(p));
    return t;
  }

  /// Commits `token` as the request's next token: generated += 1 and, when `token` is the one
  /// the last sample() drew, Mirostat's mu -= eta (surprise - tau). A token the chain did not
  /// draw (forced, or chosen by speculative verification) leaves mu unchanged. Throws
  /// std::out_of_range for a negative token and std::invalid_argument for a state without mu on
  /// a Mirostat chain.
  void accept(SamplerState& state, TokenId token) const {
    check_state(state);
    if (token < 0) throw_out_of_range("token", token, "must be >= 0");
    if (const Mirostat* m = find<Mirostat>(); m && state.has_drawn_ && state.drawn_ == token)
      state.mu_ = mirostat_update(*m, state.mu_, state.drawn_surprise_);
    state.has_drawn_ = false;
    state.drawn_ = -1;
    state.drawn_surprise_ = 0.0f;
    ++state.generated_;
  }

  /// Rows of a batch in parallel: row r uses CounterRng(seed, streams[r]) and histories[r]
  /// (histories may be empty: no history for any row). The result does not depend on threads.
  /// Throws std::invalid_argument for a stateful chain (use the overload taking states).
  void sample_batch(MatrixView<float> logits, std::span<const std::span<const TokenId>> histories, std::uint64_t seed,
                    std::span<const std::uint64_t> streams, std::uint64_t draw_index, std::span<TokenId> out,
                    int num_threads = 0) const {
    require_stateless();
    batch(logits, histories, {}, seed, streams, draw_index, out, num_threads);
  }

  /// As above with one state per row (states[r] records row r's draw; accept() each row's token
  /// afterwards). The result does not depend on the thread count.
  void sample_batch(MatrixView<float> logits, std::span<const std::span<const TokenId>> histories,
                    std::span<SamplerState> states, std::uint64_t seed, std::span<const std::uint64_t> streams,
                    std::uint64_t draw_index, std::span<TokenId> out, int num_threads = 0) const {
    require(static_cast<Index>(states.size()) == logits.rows(), "states.size()", states.size(),
            "must equal the number of rows (" + std::to_string(logits.rows()) + ")");
    batch(logits, histories, states, seed, streams, draw_index, out, num_threads);
  }

  // ---- presets --------------------------------------------------------------------------

  /// Hugging Face's order (see the header comment); validates every parameter.
  static SamplerChain inferkit_default(const SamplingParams& p) {
    validate(p);
    SamplerChain c;
    if (!p.sequence_bias.empty()) c.add(SequenceBias{p.sequence_bias});
    c.add_penalties(p);
    c.add_dry(p);
    if (!p.bad_words.empty()) c.add(BadWords{p.bad_words, p.eos_tokens});
    c.add_length_rules(p);
    if (p.mirostat != 0) {
      c.add_mirostat(p);
      return c;
    }
    c.add_temperature(p);
    if (p.top_n_sigma > 0.0f) c.add(TopNSigma{p.top_n_sigma});
    if (p.top_k > 0) c.add(TopK{p.top_k});
    if (p.top_p < 1.0f) c.add(TopP{p.top_p, p.min_keep});
    if (p.min_p > 0.0f) c.add(MinP{p.min_p, p.min_keep});
    if (p.typical_p < 1.0f) c.add(Typical{p.typical_p, p.min_keep});
    c.add_cutoffs(p);
    if (p.xtc_probability > 0.0f) c.add(Xtc{p.xtc_threshold, p.xtc_probability, p.min_keep});
    return c;
  }

  /// transformers' order for these processors is inferkit's default order.
  static SamplerChain huggingface(const SamplingParams& p) { return inferkit_default(p); }

  /// llama.cpp's common sampler order (see the header comment); validates every parameter.
  static SamplerChain llama_cpp(const SamplingParams& p) {
    validate(p);
    SamplerChain c;
    if (!p.sequence_bias.empty()) c.add(SequenceBias{p.sequence_bias});
    if (!p.bad_words.empty()) c.add(BadWords{p.bad_words, p.eos_tokens});
    c.add_length_rules(p);
    if (p.mirostat != 0) {
      c.add_mirostat(p);
      return c;
    }
    c.add_penalties(p);
    c.add_dry(p);
    if (p.top_n_sigma > 0.0f) c.add(TopNSigma{p.top_n_sigma});
    if (p.top_k > 0) c.add(TopK{p.top_k});
    if (p.typical_p < 1.0f) c.add(Typical{p.typical_p, p.min_keep});
    if (p.top_p < 1.0f) c.add(TopP{p.top_p, p.min_keep});
    if (p.min_p > 0.0f) c.add(MinP{p.min_p, p.min_keep});
    c.add_cutoffs(p);
    if (p.xtc_probability > 0.0f) c.add(Xtc{p.xtc_threshold, p.xtc_probability, p.min_keep});
    c.add_temperature(p);
    return c;
  }

 private:
  /// What a stage may read besides the candidates.
  struct StepInputs {
    std::span<const TokenId> history;
    const SamplerState* state;  // null: stateless call (stateful stages were rejected)
    const CounterRng* rng;      // null: apply() without a stream (XTC was rejected)
    std::uint64_t draw_index;
  };

  template <class Q>
  const Q* find() const {
    for (const Processor& p : processors_)
      if (const Q* q = std::get_if<Q>(&p)) return q;
    return nullptr;
  }

  void require_stateless() const {
    require(!stateful(), "state", "none",
            "this chain has stateful stages (mirostat, min_new_tokens, exponential decay, begin-suppress): "
            "use the overload taking a SamplerState from make_state()");
  }

  void check_state(const SamplerState& state) const {
    if (find<Mirostat>())
      require(state.has_mu_, "state", "no mirostat mu",
              "this chain has a mirostat stage: make the state with make_state()");
  }

  void batch(MatrixView<float> logits, std::span<const std::span<const TokenId>> histories,
             std::span<SamplerState> states, std::uint64_t seed, std::span<const std::uint64_t> streams,
             std::uint64_t draw_index, std::span<TokenId> out, int num_threads) const {
    (void)num_threads;  // unused without OpenMP
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
        const auto h = histories.empty() ? std::span<const TokenId>{} : histories[r];
        const CounterRng rng(seed, streams[r]);
        out[r] = states.empty() ? sample(logits.row(r), h, rng, draw_index)
                                : sample(logits.row(r), h, states[static_cast<std::size_t>(r)], rng, draw_index);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    }
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  void add_penalties(const SamplingParams& p) {
    if (p.repetition_penalty != 1.0f) add(RepetitionPenalty{p.repetition_penalty, p.penalty_last_n});
    if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
      add(FrequencyPresencePenalty{p.frequency_penalty, p.presence_penalty, p.penalty_last_n});
  }
  void add_dry(const SamplingParams& p) {
    if (p.dry_multiplier != 0.0f && p.dry_penalty_last_n != 0)
      add(Dry{p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n, p.dry_sequence_breakers});
  }
  void add_length_rules(const SamplingParams& p) {
    if (p.min_new_tokens > 0) add(MinNewTokens{p.min_new_tokens, p.eos_tokens});
    if (p.exponential_decay_factor != 1.0f)
      add(ExponentialDecayLengthPenalty{p.exponential_decay_start, p.exponential_decay_factor, p.eos_tokens});
    if (!p.begin_suppress_tokens.empty()) add(BeginSuppressTokens{p.begin_suppress_tokens});
  }
  void add_temperature(const SamplingParams& p) {
    if (p.dynatemp_range > 0.0f)
      add(DynamicTemperature{p.temperature, p.dynatemp_range, p.dynatemp_exponent});
    else if (p.temperature != 1.0f)
      add(Temperature{p.temperature});
  }
  void add_cutoffs(const SamplingParams& p) {
    if (p.epsilon_cutoff > 0.0f) add(EpsilonCutoff{p.epsilon_cutoff, p.min_keep});
    if (p.eta_cutoff > 0.0f) add(EtaCutoff{p.eta_cutoff, p.min_keep});
  }
  void add_mirostat(const SamplingParams& p) {  // llama.cpp: plain temperature, then Mirostat
    if (p.temperature != 1.0f) add(Temperature{p.temperature});
    add(Mirostat{p.mirostat, p.mirostat_tau, p.mirostat_eta, 100});
  }

  /// The last `last_n` tokens of the history (-1 = all, 0 = none).
  static std::span<const TokenId> window(std::span<const TokenId> h, Index last_n) {
    if (last_n < 0 || static_cast<std::size_t>(last_n) >= h.size()) return h;
    return h.subspan(h.size() - static_cast<std::size_t>(last_n));
  }

  void run(Candidates& c, const StepInputs& in) const {
    const std::span<const TokenId> history = in.history;
    for (const Processor& p : processors_) {
      std::visit(
          [&](const auto& q) {
            using Q = std::decay_t<decltype(q)>;
            if constexpr (std::is_same_v<Q, Temperature>)
              apply_temperature(c, q.value);
            else if constexpr (std::is_same_v<Q, TopK>)
              apply_top_k(c, q.k);
            else if constexpr (std::is_same_v<Q, TopP>)
              apply_top_p(c, q.p, q.min_keep);
            else if constexpr (std::is_same_v<Q, MinP>)
              apply_min_p(c, q.p, q.min_keep);
            else if constexpr (std::is_same_v<Q, Typical>)
              apply_typical(c, q.mass, q.min_keep);
            else if constexpr (std::is_same_v<Q, RepetitionPenalty>) {
              if (q.last_n != 0) apply_repetition_penalty(c, window(history, q.last_n), q.penalty);
            } else if constexpr (std::is_same_v<Q, FrequencyPresencePenalty>) {
              if (q.last_n != 0)
                apply_frequency_presence_penalty(c, window(history, q.last_n), q.frequency, q.presence);
            } else if constexpr (std::is_same_v<Q, NoRepeatNgram>)
              apply_no_repeat_ngram(c, history, q.n);
            else if constexpr (std::is_same_v<Q, LogitBias>)
              apply_logit_bias(c, q.biases);
            else if constexpr (std::is_same_v<Q, BannedTokens>)
              apply_banned_tokens(c, q.tokens);
            else if constexpr (std::is_same_v<Q, AllowedTokens>)
              apply_allowed_tokens(c, q.tokens);
            else if constexpr (std::is_same_v<Q, DynamicTemperature>)
              apply_dynamic_temperature(c, q);
            else if constexpr (std::is_same_v<Q, TopNSigma>)
              apply_top_n_sigma(c, q.n);
            else if constexpr (std::is_same_v<Q, Xtc>) {
              if (q.probability > 0.0f) apply_xtc(c, q, *in.rng, in.draw_index);
            } else if constexpr (std::is_same_v<Q, Dry>)
              apply_dry(c, history, q);
            else if constexpr (std::is_same_v<Q, Mirostat>)
              apply_mirostat(c, q, in.state->mu_);
            else if constexpr (std::is_same_v<Q, EpsilonCutoff>)
              apply_epsilon_cutoff(c, q);
            else if constexpr (std::is_same_v<Q, EtaCutoff>)
              apply_eta_cutoff(c, q);
            else if constexpr (std::is_same_v<Q, MinNewTokens>)
              apply_min_new_tokens(c, q, in.state->generated_);
            else if constexpr (std::is_same_v<Q, ExponentialDecayLengthPenalty>)
              apply_exponential_decay_length_penalty(c, q, in.state->generated_);
            else if constexpr (std::is_same_v<Q, BadWords>)
              apply_bad_words(c, history, q);
            else if constexpr (std::is_same_v<Q, SequenceBias>)
              apply_sequence_bias(c, history, q);
            else
              apply_begin_suppress_tokens(c, q, in.state->generated_);
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
    validate(RepetitionPenalty{p.repetition_penalty, p.penalty_last_n});
    validate(FrequencyPresencePenalty{p.frequency_penalty, p.presence_penalty, p.penalty_last_n});
    validate_dynamic_temperature({p.temperature, p.dynatemp_range, p.dynatemp_exponent});
    validate_top_n_sigma(p.top_n_sigma);
    validate_xtc({p.xtc_threshold, p.xtc_probability, p.min_keep});
    validate_dry({p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n, p.dry_sequence_breakers});
    require(p.mirostat >= 0 && p.mirostat <= 2, "mirostat", p.mirostat, "must be 0 (off), 1 or 2");
    validate_mirostat({p.mirostat == 0 ? 2 : p.mirostat, p.mirostat_tau, p.mirostat_eta, 100});
    if (p.epsilon_cutoff != 0.0f) validate_cutoff(p.epsilon_cutoff, p.min_keep, "epsilon_cutoff");
    if (p.eta_cutoff != 0.0f) validate_cutoff(p.eta_cutoff, p.min_keep, "eta_cutoff");
    validate_min_new_tokens({p.min_new_tokens, p.eos_tokens});
    validate_exponential_decay({p.exponential_decay_start, p.exponential_decay_factor, p.eos_tokens});
    validate_bad_words({p.bad_words, p.eos_tokens});
    validate_sequence_bias({p.sequence_bias});
    for (std::size_t i = 0; i < p.eos_tokens.size(); ++i)
      require(p.eos_tokens[i] >= 0, "eos_tokens[" + std::to_string(i) + "]", p.eos_tokens[i], "must be >= 0");
    for (std::size_t i = 0; i < p.begin_suppress_tokens.size(); ++i)
      require(p.begin_suppress_tokens[i] >= 0, "begin_suppress_tokens[" + std::to_string(i) + "]",
              p.begin_suppress_tokens[i], "must be >= 0");
  }
  static void validate_last_n(Index last_n) {
    require(last_n >= -1, "penalty_last_n", last_n, "must be >= -1 (-1 = all of the history, 0 = none)");
  }
  static void validate(const Temperature& q) { validate_temperature(q.value); }
  static void validate(const TopK&) {}
  static void validate(const TopP& q) { validate_top_p(q.p, q.min_keep); }
  static void validate(const MinP& q) { validate_min_p(q.p, q.min_keep); }
  static void validate(const Typical& q) { validate_typical(q.mass, q.min_keep); }
  static void validate(const RepetitionPenalty& q) {
    require(std::isfinite(q.penalty) && q.penalty > 0.0f, "repetition_penalty", q.penalty,
            "must be finite and > 0 (1 = off)");
    validate_last_n(q.last_n);
  }
  static void validate(const FrequencyPresencePenalty& q) {
    require(std::isfinite(q.frequency), "frequency_penalty", q.frequency, "must be finite");
    require(std::isfinite(q.presence), "presence_penalty", q.presence, "must be finite");
    validate_last_n(q.last_n);
  }
  static void validate(const NoRepeatNgram& q) { require(q.n >= 1, "no_repeat_ngram_size", q.n, "must be >= 1"); }
  static void validate(const LogitBias&) {}
  static void validate(const BannedTokens&) {}
  static void validate(const AllowedTokens&) {}
  static void validate(const DynamicTemperature& q) { validate_dynamic_temperature(q); }
  static void validate(const TopNSigma& q) { validate_top_n_sigma(q.n); }
  static void validate(const Xtc& q) { validate_xtc(q); }
  static void validate(const Dry& q) { validate_dry(q); }
  static void validate(const Mirostat& q) { validate_mirostat(q); }
  static void validate(const EpsilonCutoff& q) { validate_cutoff(q.epsilon, q.min_keep, "epsilon_cutoff"); }
  static void validate(const EtaCutoff& q) { validate_cutoff(q.epsilon, q.min_keep, "eta_cutoff"); }
  static void validate(const MinNewTokens& q) { validate_min_new_tokens(q); }
  static void validate(const ExponentialDecayLengthPenalty& q) { validate_exponential_decay(q); }
  static void validate(const BadWords& q) { validate_bad_words(q); }
  static void validate(const SequenceBias& q) { validate_sequence_bias(q); }
  static void validate(const BeginSuppressTokens& q) {
    for (std::size_t i = 0; i < q.tokens.size(); ++i)
      require(q.tokens[i] >= 0, "begin_suppress_tokens[" + std::to_string(i) + "]", q.tokens[i], "must be >= 0");
  }

  static std::string fmt(const char* n, std::initializer_list<double> values) {
    std::ostringstream s;
    s << n << "(";
    const char* sep = "";
    for (double v : values) {
      s << sep << v;
      sep = ", ";
    }
    s << ")";
    return s.str();
  }
  static std::string fmt(const char* n, double v) { return fmt(n, {v}); }
  static std::string name(const Temperature& q) { return fmt("temperature", q.value); }
  static std::string name(const TopK& q) { return fmt("top_k", double(q.k)); }
  static std::string name(const TopP& q) { return fmt("top_p", q.p); }
  static std::string name(const MinP& q) { return fmt("min_p", q.p); }
  static std::string name(const Typical& q) { return fmt("typical_p", q.mass); }
  static std::string name(const RepetitionPenalty& q) {
    return q.last_n < 0 ? fmt("repetition_penalty", q.penalty)
                        : fmt("repetition_penalty", {q.penalty, double(q.last_n)});
  }
  static std::string name(const FrequencyPresencePenalty& q) {
    return q.last_n < 0 ? fmt("frequency_presence_penalty", {q.frequency, q.presence})
                        : fmt("frequency_presence_penalty", {q.frequency, q.presence, double(q.last_n)});
  }
  static std::string name(const NoRepeatNgram& q) { return fmt("no_repeat_ngram", double(q.n)); }
  static std::string name(const LogitBias& q) { return fmt("logit_bias", double(q.biases.size())); }
  static std::string name(const BannedTokens& q) { return fmt("banned_tokens", double(q.tokens.size())); }
  static std::string name(const AllowedTokens& q) { return fmt("allowed_tokens", double(q.tokens.size())); }
  static std::string name(const DynamicTemperature& q) {
    return fmt("dynamic_temperature", {q.temperature, q.range, q.exponent});
  }
  static std::string name(const TopNSigma& q) { return fmt("top_n_sigma", q.n); }
  static std::string name(const Xtc& q) { return fmt("xtc", {q.threshold, q.probability}); }
  static std::string name(const Dry& q) {
    return fmt("dry", {q.multiplier, q.base, double(q.allowed_length), double(q.penalty_last_n)});
  }
  static std::string name(const Mirostat& q) {
    return q.version == 1 ? fmt("mirostat_v1", {q.tau, q.eta, double(q.m)}) : fmt("mirostat_v2", {q.tau, q.eta});
  }
  static std::string name(const EpsilonCutoff& q) { return fmt("epsilon_cutoff", q.epsilon); }
  static std::string name(const EtaCutoff& q) { return fmt("eta_cutoff", q.epsilon); }
  static std::string name(const MinNewTokens& q) { return fmt("min_new_tokens", double(q.min_new_tokens)); }
  static std::string name(const ExponentialDecayLengthPenalty& q) {
    return fmt("exponential_decay_length_penalty", {double(q.start_index), q.decay_factor});
  }
  static std::string name(const BadWords& q) { return fmt("bad_words", double(q.sequences.size())); }
  static std::string name(const SequenceBias& q) { return fmt("sequence_bias", double(q.entries.size())); }
  static std::string name(const BeginSuppressTokens& q) {
    return fmt("begin_suppress_tokens", double(q.tokens.size()));
  }

  std::vector<Processor> processors_;
};

}  // namespace inferkit
