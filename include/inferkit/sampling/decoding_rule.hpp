#pragma once
// The interface every decoding rule implements: a rule is one struct holding its parameters and
// its hooks (llama.cpp's llama_sampler_i keeps a sampler's name, apply, accept and reset together;
// FlashInfer's attention variants are structs of hooks; both the model here). A SamplerChain
// holds rules in a std::variant (processor.hpp) and calls these hooks with one std::visit, so it
// knows no rule by name.
//
// Every rule R has:
//   static constexpr std::string_view kName      its name, the start of describe()'s text;
//   static constexpr bool kStateful              true when apply() reads the request's
//                                                SamplerState (step.generated or its own State);
//   void validate() const                        throws std::invalid_argument naming the bad
//                                                parameter (the chain calls it in add());
//   std::string describe() const                 e.g. "top_k(40)" (describe_rule below);
//   void apply(Candidates&, const StepInputs&) const          the rule on one step's candidates.
// A rule that keeps its own per-request state (Mirostat's mu; a grammar matcher) also has
//   using State = ...;                           copyable, ==, serializable (RuleState below);
//   State initial_state() const                  the state at admission (make_state());
//   void apply(Candidates&, const StepInputs&, const State&) const   instead of the apply above;
//   void accept(State&, const AcceptedToken&) const                  after each committed token.
// Optional:
//   void rollback(State&, std::size_t n) const   undoes the last n accepted tokens (speculative
//                                                decoding; SamplerChain::rollback); a rule with a
//                                                State and no such hook cannot be rolled back;
//   bool needs_rng() const                       true when apply() reads step.rng (XTC's coin);
//   static constexpr std::string_view kOnePerChain   a chain holds at most one such stage; the
//                                                text says why (a rule with a State is always one
//                                                per chain: the request holds one State per type).
// Example (the whole of top-k's rule, top_k.hpp):
//   struct TopK {
//     Index k = 0;
//     static constexpr std::string_view kName = "top_k";
//     static constexpr bool kStateful = false;
//     void validate() const {}
//     std::string describe() const { return describe_rule(kName, {double(k)}); }
//     void apply(Candidates& c, const StepInputs&) const { apply_top_k(c, k); }
//   };
// The contract of a hook: apply() acts on the candidates only (and reads what StepInputs gives);
// it never allocates per call beyond what the rule's free function does, and it is const: one
// chain serves many requests from many threads. Per-request data lives in the State.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/philox.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

/// What one step of a chain may read besides the candidates.
struct StepInputs {
  std::span<const TokenId> history{};  ///< the request's tokens as the caller passed them
  Index generated = 0;                 ///< tokens accepted since the prompt (SamplerState::generated())
  const CounterRng* rng = nullptr;     ///< the request's stream; null in apply() without one
  std::uint64_t draw_index = 0;        ///< this step's draw index of `rng`
};

/// What a rule's accept() hook learns about a committed token.
struct AcceptedToken {
  TokenId token = -1;          ///< the token committed
  bool drawn = false;          ///< true when it is the token the last sample() drew
  float surprise_bits = 0.0f;  ///< -log2 p(token) under the draw's distribution (when drawn)
};

/// "name(v1, v2, ...)": the values printed as a default std::ostream prints a double.
inline std::string describe_rule(std::string_view name, std::initializer_list<double> values) {
  std::ostringstream s;
  s << name << "(";
  const char* sep = "";
  for (double v : values) {
    s << sep << v;
    sep = ", ";
  }
  s << ")";
  return s.str();
}

/// The last `last_n` tokens of a history (-1 = all of it, 0 = none).
inline std::span<const TokenId> history_tail(std::span<const TokenId> history, Index last_n) {
  if (last_n < 0 || static_cast<std::size_t>(last_n) >= history.size()) return history;
  return history.subspan(history.size() - static_cast<std::size_t>(last_n));
}

/// A rule's own per-request state: copyable (a copy forks a beam), comparable, and serialized by
/// SamplerState::to_bytes() as a record (tag, payload). kTag is unique among registered states
/// and never reused; read() throws std::invalid_argument naming the malformed field.
template <class S>
concept RuleState = std::copyable<S> && std::equality_comparable<S> &&
    requires(const S& s, std::vector<std::uint8_t>& out, std::span<const std::uint8_t> in) {
  { S::kTag } -> std::convertible_to<std::uint16_t>;
  s.write(out);
  { S::read(in) } -> std::same_as<S>;
};

/// The hooks every rule has (see the header comment).
template <class R>
concept DecodingRuleBase = std::copyable<R> && requires(const R& r) {
  { R::kName } -> std::convertible_to<std::string_view>;
  { R::kStateful } -> std::convertible_to<bool>;
  r.validate();
  { r.describe() } -> std::convertible_to<std::string>;
};

/// True when the rule keeps its own per-request state.
template <class R>
concept RuleWithState = requires {
  typename R::State;
};

/// A complete rule: the common hooks and the apply (and state hooks) of its kind.
template <class R>
concept DecodingRule = DecodingRuleBase<R> &&
    ((RuleWithState<R> && RuleState<typename R::State> && R::kStateful &&
      requires(const R& r, Candidates& c, const StepInputs& in, typename R::State& s, const AcceptedToken& t) {
        { r.initial_state() } -> std::same_as<typename R::State>;
        r.apply(c, in, std::as_const(s));
        r.accept(s, t);
      }) ||
     (!RuleWithState<R> && requires(const R& r, Candidates& c, const StepInputs& in) { r.apply(c, in); }));

/// True when SamplerChain::rollback can undo the rule's tokens: it keeps no state of its own, or
/// its State has the optional rollback() hook.
template <class R>
constexpr bool rule_can_rollback() {
  if constexpr (RuleWithState<R>) return requires(const R& r, typename R::State& s, std::size_t n) {
      r.rollback(s, n);
    };
  else
    return true;
}

/// True when the rule reads step.rng at this setting (the optional needs_rng() hook).
template <class R>
bool rule_needs_rng(const R& r) {
  if constexpr (requires { r.needs_rng(); })
    return r.needs_rng();
  else
    return false;
}

}  // namespace inferkit
