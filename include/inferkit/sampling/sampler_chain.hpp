#pragma once
// A sampler chain: decoding rules (processor.hpp lists them; each is one struct in its own
// header, decoding_rule.hpp says what it carries) applied in the order the user adds them, then
// a categorical draw (or greedy, when a temperature of 0 is in the chain). Order changes results;
// presets.hpp builds the chains of Hugging Face's and llama.cpp's orders from SamplingParams.
//   SamplerChain chain;
//   chain.add(RepetitionPenalty{1.1f, 64}).add(Temperature{0.8f}).add(TopK{40}).add(TopP{0.95f});
//   const TokenId t = chain.sample(logits, history, CounterRng(seed, request), draw_index);
// The chain runs each stage with one std::visit over its hooks and knows no rule by name: what it
// checks (a stateful stage needs a SamplerState, a stage reading the random stream needs one,
// one stage of a kind with kOnePerChain or its own State) it reads from the rules' hooks.
// The history passed to sample() is what the history rules see: penalties (each with an
// optional last_n window), DRY (its penalty_last_n window), bad words and sequence bias (its
// tail). Stateful rules (Mirostat's mu; min_new_tokens, the decay penalty and begin-suppress
// tokens, which count generated tokens) read a SamplerState the caller owns: make it with
// make_state(), pass it to sample(), then accept() the token (sampler_state.hpp).

#include <cmath>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/philox.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/categorical.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/processor.hpp"
#include "inferkit/sampling/sampler_state.hpp"

namespace inferkit {

/// An ordered list of processors and the final draw. const member functions are thread-safe
/// (the chain is immutable once built); a SamplerState belongs to one request.
class SamplerChain {
 public:
  SamplerChain() = default;

  /// Appends a processor after validating its parameters (its validate() hook). A chain holds
  /// at most one stage of a rule with its own State (one Mirostat: one mu per request) or with
  /// kOnePerChain (one XTC: its coin is words 2-3 of the draw's Philox block); a second one is
  /// std::invalid_argument.
  SamplerChain& add(Processor p) {
    bool stateful = false, needs_rng = false;
    std::uint64_t state = 0;
    std::visit(
        [&](const auto& q) {
          using R = std::decay_t<decltype(q)>;
          q.validate();
          if constexpr (RuleWithState<R> || requires { R::kOnePerChain; }) {
            bool again = false;
            for (const Processor& s : processors_) again = again || std::holds_alternative<R>(s);
            if (again) throw_second_stage<R>();
          }
          if constexpr (RuleWithState<R>) state = std::uint64_t{1} << kRuleStateIndex<typename R::State>;
          stateful = R::kStateful;
          needs_rng = rule_needs_rng(q);
        },
        p);
    processors_.push_back(std::move(p));
    stateful_ = stateful_ || stateful;
    needs_rng_ = needs_rng_ || needs_rng;
    required_states_ |= state;
    return *this;
  }

  /// The stages in the order they run.
  const std::vector<Processor>& processors() const { return processors_; }

  /// The order that runs, e.g. "repetition_penalty(1.1) -> temperature(0.8) -> top_k(40) -> draw".
  std::string describe() const {
    std::string s;
    for (const Processor& p : processors_) s += std::visit([](const auto& q) { return q.describe(); }, p) + " -> ";
    return s + "draw";
  }

  /// True when a stage reads a SamplerState (a rule with kStateful: Mirostat, min_new_tokens,
  /// the exponential decay length penalty, begin-suppress tokens): such chains need the
  /// overloads taking a state.
  bool stateful() const { return stateful_; }

  /// A fresh per-request state for this chain: `generated` tokens already accepted (0 at
  /// admission) and each stage's own state at its initial value (Mirostat: mu = 2 tau). Throws
  /// for generated < 0.
  SamplerState make_state(Index generated = 0) const {
    require(generated >= 0, "generated", generated, "must be >= 0");
    SamplerState st;
    st.generated_ = generated;
    for (const Processor& p : processors_)
      std::visit(
          [&](const auto& q) {
            if constexpr (RuleWithState<std::decay_t<decltype(q)>>) st.set_rule_state(q.initial_state());
          },
          p);
    return st;
  }

  /// Applies every processor in order, in place; filtered tokens end as -inf. Throws
  /// std::invalid_argument for a stateful chain or one with a stage that reads the random stream
  /// (an active XTC stage): use the overload below.
  void apply(std::span<float> logits, std::span<const TokenId> history = {}) const {
    require_stateless();
    if (needs_rng_) throw_needs_rng();
    Candidates c(logits);
    run(c, {history, 0, nullptr, 0}, nullptr);
    c.materialize();
  }

  /// Applies every processor in order, in place, for a request with state `state` (read only)
  /// and draw `draw_index` of `rng` (XTC's coin). The state must come from this chain's
  /// make_state() (or hold the state of every stage that keeps one, e.g. Mirostat's mu).
  void apply(std::span<float> logits, std::span<const TokenId> history, const SamplerState& state,
             const CounterRng& rng, std::uint64_t draw_index) const {
    check_state(state);
    Candidates c(logits);
    run(c, {history, state.generated_, &rng, draw_index}, &state);
    c.materialize();
  }

  /// Applies the processors (in place, as apply()) and draws a token with draw `draw_index` of
  /// `rng`. `distribution`, if non-empty, receives the final normalized distribution. Throws
  /// std::invalid_argument for a stateful chain (use the overload taking a SamplerState).
  TokenId sample(std::span<float> logits, std::span<const TokenId> history, const CounterRng& rng,
                 std::uint64_t draw_index, std::span<float> distribution = {}) const {
    require_stateless();
    Candidates c(logits);
    run(c, {history, 0, &rng, draw_index}, nullptr);
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
    run(c, {history, state.generated_, &rng, draw_index}, &state);
    double p = 1.0;
    const TokenId t = sample_categorical(c, rng, draw_index, distribution, &p);
    c.materialize();
    state.has_drawn_ = true;
    state.drawn_ = t;
    state.drawn_surprise_ = static_cast<float>(-std::log2(p));
    return t;
  }

  /// Commits `token` as the request's next token: generated += 1, and every stage with its own
  /// state sees it through its accept() hook, told whether it is the token the last sample()
  /// drew (Mirostat then applies mu -= eta (surprise - tau); a token the chain did not draw,
  /// forced or chosen by speculative verification, leaves mu unchanged). Throws
  /// std::out_of_range for a negative token and std::invalid_argument for a state that lacks a
  /// stage's state.
  void accept(SamplerState& state, TokenId token) const {
    check_state(state);
    if (token < 0) throw_out_of_range("token", token, "must be >= 0");
    if (required_states_ != 0) {
      const AcceptedToken accepted{token, state.has_drawn_ && state.drawn_ == token, state.drawn_surprise_};
      for (const Processor& p : processors_)
        std::visit(
            [&](const auto& q) {
              using R = std::decay_t<decltype(q)>;
              if constexpr (RuleWithState<R>) q.accept(state.rule_state_mut<typename R::State>(), accepted);
            },
            p);
    }
    state.has_drawn_ = false;
    state.drawn_ = -1;
    state.drawn_surprise_ = 0.0f;
    ++state.generated_;
  }

  /// True when rollback() can undo tokens of this chain's states: every stage that keeps its own
  /// state has a rollback() hook (the grammar stage does; Mirostat does not: its mu is not a
  /// function of the tokens, so copy the state before drafting instead).
  bool can_rollback() const {
    bool ok = true;
    for (const Processor& p : processors_)
      std::visit([&](const auto& q) { ok = ok && rule_can_rollback<std::decay_t<decltype(q)>>(); }, p);
    return ok;
  }

  /// Undoes the last `n` accept()s of `state` (speculative decoding rejected drafted tokens):
  /// generated -= n, the pending draw is dropped, and every stage keeping its own state undoes
  /// the tokens through its rollback() hook (the grammar stage rewinds its matcher). The rules
  /// reading the history see the caller's history, which the caller truncates. The result equals
  /// a state that accepted only the tokens kept. Throws std::invalid_argument, the state
  /// unchanged, for n > generated(), a hook's own bound (the grammar: more than it kept since
  /// admission), or a chain that cannot roll back (can_rollback(); the message names the stage).
  void rollback(SamplerState& state, std::size_t n) const {
    check_state(state);
    if (!can_rollback()) {
      const auto stuck = [](const auto& q) { return !rule_can_rollback<std::decay_t<decltype(q)>>(); };
      throw_invalid_argument("rollback", "the " + stage_names(stuck) + " stage",
                             "keeps a state without a rollback hook: copy the SamplerState before the tokens instead");
    }
    require(n <= static_cast<std::size_t>(state.generated_), "rollback count", n,
            "must be at most the tokens accepted (" + std::to_string(state.generated_) + ")");
    if (n == 0) return;
    for (const Processor& p : processors_)  // at most one rule with a hook per state type; each checks first
      std::visit(
          [&](const auto& q) {
            using R = std::decay_t<decltype(q)>;
            if constexpr (RuleWithState<R> && rule_can_rollback<R>())
              q.rollback(state.rule_state_mut<typename R::State>(), n);
          },
          p);
    state.has_drawn_ = false;
    state.drawn_ = -1;
    state.drawn_surprise_ = 0.0f;
    state.generated_ -= static_cast<Index>(n);
  }

  /// Rows of a batch in parallel: row r uses CounterRng(seed, streams[r]) and histories[r]
  /// (histories may be empty: no history for any row). The result does not depend on
  /// num_threads (0 = OpenMP's default, at most kMaxThreads). Throws std::invalid_argument for a
  /// stateful chain (use the overload taking states).
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

 private:
  /// Runs every stage on the candidates: one visit per stage, calling the rule's apply() hook
  /// (with the rule's own state when it keeps one; `state` is null only for stateless chains).
  void run(Candidates& c, const StepInputs& in, const SamplerState* state) const {
    for (const Processor& p : processors_)
      std::visit(
          [&](const auto& q) {
            using R = std::decay_t<decltype(q)>;
            if constexpr (RuleWithState<R>)
              q.apply(c, in, *state->rule_state<typename R::State>());
            else
              q.apply(c, in);
          },
          p);
  }

  template <class R>
  [[noreturn]] static void throw_second_stage() {
    std::string why;
    if constexpr (requires { R::kOnePerChain; })
      why = std::string(R::kOnePerChain);
    else
      why = "a request holds one state of its kind";
    const std::string name(R::kName);
    throw_invalid_argument("processors", "a second " + name,
                           "a chain holds at most one " + name + " stage (" + why + ")");
  }

  void require_stateless() const {
    if (stateful_) throw_needs_state();
  }

  // The error paths, out of line so that their messages are not built into every caller.
  [[noreturn, gnu::noinline, gnu::cold]] void throw_needs_state() const {
    const auto stateful = [](const auto& q) { return std::decay_t<decltype(q)>::kStateful; };
    throw_invalid_argument("state", "none",
                           "this chain has stateful stages (" + stage_names(stateful) +
                               "): use the overload taking a SamplerState from make_state()");
  }
  [[noreturn, gnu::noinline, gnu::cold]] void throw_needs_rng() const {
    const auto reads_rng = [](const auto& q) { return rule_needs_rng(q); };
    throw_invalid_argument("rng", "none",
                           "the " + stage_names(reads_rng) +
                               " stage reads the request's random stream: use apply(logits, history, state, rng, "
                               "draw_index)");
  }

  /// The kName of every stage for which pred(rule) is true, comma-separated (error messages).
  template <class Pred>
  std::string stage_names(Pred pred) const {
    std::string names;
    for (const Processor& p : processors_)
      std::visit(
          [&](const auto& q) {
            if (pred(q)) names += (names.empty() ? "" : ", ") + std::string(std::decay_t<decltype(q)>::kName);
          },
          p);
    return names;
  }

  /// The state must hold the own state of every stage that keeps one.
  void check_state(const SamplerState& state) const {
    if ((state.held_states() & required_states_) != required_states_) throw_missing_state(state);
  }
  [[noreturn, gnu::noinline, gnu::cold]] void throw_missing_state(const SamplerState& state) const {
    for (const Processor& p : processors_)
      std::visit(
          [&](const auto& q) {
            using R = std::decay_t<decltype(q)>;
            if constexpr (RuleWithState<R>) {
              const std::string name(R::kName);
              require(state.rule_state<typename R::State>() != nullptr, "state", "no " + name + " state",
                      "this chain has a " + name + " stage: make the state with make_state()");
            }
          },
          p);
    throw_invalid_argument("state", "its rule states", "do not match this chain's stages");  // not reached
  }

  void batch(MatrixView<float> logits, std::span<const std::span<const TokenId>> histories,
             std::span<SamplerState> states, std::uint64_t seed, std::span<const std::uint64_t> streams,
             std::uint64_t draw_index, std::span<TokenId> out, int num_threads) const {
    require_thread_count("num_threads", num_threads);
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

  std::vector<Processor> processors_;
  bool stateful_ = false;              // a stage reads the SamplerState
  bool needs_rng_ = false;             // a stage reads the request's random stream
  std::uint64_t required_states_ = 0;  // bit kRuleStateIndex<S>: a stage keeps state S
};

}  // namespace inferkit
