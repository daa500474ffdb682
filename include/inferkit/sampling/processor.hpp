#pragma once
// The registered decoding rules: `Processor`, the variant a SamplerChain holds one stage in, and
// the list of the rules' own state types (RuleStates) a SamplerState holds. This is the one list
// of rule types: adding a rule is its header (one struct with the hooks of decoding_rule.hpp)
// plus its #include and its line in `Processor` below; the chain, describe(), validation,
// make_state(), accept() and the state's serialization pick it up from here.
//   SamplerChain().add(TopK{40}).add(TopP{0.95f});   // each argument converts to a Processor
// The order of the list is not the order a chain runs (that is the order of add()); it fixes
// only the variant's indices, which nothing persists.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "inferkit/sampling/allowed_tokens.hpp"
#include "inferkit/sampling/bad_words.hpp"
#include "inferkit/sampling/banned_tokens.hpp"
#include "inferkit/sampling/begin_suppress_tokens.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/dry.hpp"
#include "inferkit/sampling/dynamic_temperature.hpp"
#include "inferkit/sampling/epsilon_cutoff.hpp"
#include "inferkit/sampling/eta_cutoff.hpp"
#include "inferkit/sampling/exponential_decay_length_penalty.hpp"
#include "inferkit/sampling/frequency_presence_penalty.hpp"
#include "inferkit/sampling/grammar_constraint.hpp"
#include "inferkit/sampling/logit_bias.hpp"
#include "inferkit/sampling/min_new_tokens.hpp"
#include "inferkit/sampling/min_p.hpp"
#include "inferkit/sampling/mirostat.hpp"
#include "inferkit/sampling/no_repeat_ngram.hpp"
#include "inferkit/sampling/repetition_penalty.hpp"
#include "inferkit/sampling/sequence_bias.hpp"
#include "inferkit/sampling/temperature.hpp"
#include "inferkit/sampling/top_k.hpp"
#include "inferkit/sampling/top_n_sigma.hpp"
#include "inferkit/sampling/top_p.hpp"
#include "inferkit/sampling/typical.hpp"
#include "inferkit/sampling/xtc.hpp"

namespace inferkit {

/// One stage of a chain: any registered rule (one line per rule).
using Processor = std::variant<Temperature,                    // temperature.hpp
                               TopK,                           // top_k.hpp
                               TopP,                           // top_p.hpp
                               MinP,                           // min_p.hpp
                               Typical,                        // typical.hpp
                               RepetitionPenalty,              // repetition_penalty.hpp
                               FrequencyPresencePenalty,       // frequency_presence_penalty.hpp
                               NoRepeatNgram,                  // no_repeat_ngram.hpp
                               LogitBias,                      // logit_bias.hpp
                               BannedTokens,                   // banned_tokens.hpp
                               AllowedTokens,                  // allowed_tokens.hpp
                               DynamicTemperature,             // dynamic_temperature.hpp
                               TopNSigma,                      // top_n_sigma.hpp
                               Xtc,                            // xtc.hpp
                               Dry,                            // dry.hpp
                               Mirostat,                       // mirostat.hpp
                               EpsilonCutoff,                  // epsilon_cutoff.hpp
                               EtaCutoff,                      // eta_cutoff.hpp
                               MinNewTokens,                   // min_new_tokens.hpp
                               ExponentialDecayLengthPenalty,  // exponential_decay_length_penalty.hpp
                               BadWords,                       // bad_words.hpp
                               SequenceBias,                   // sequence_bias.hpp
                               BeginSuppressTokens,            // begin_suppress_tokens.hpp
                               GrammarConstraint>;             // grammar_constraint.hpp

namespace detail {

template <class V>
struct AllRules;
template <class... Rs>
struct AllRules<std::variant<Rs...>> : std::bool_constant<(DecodingRule<Rs> && ...)> {};

/// std::tuple<R::State> for a rule with its own state, std::tuple<> otherwise.
template <class R>
struct StateOf {
  using type = std::tuple<>;
};
template <RuleWithState R>
struct StateOf<R> {
  using type = std::tuple<typename R::State>;
};

template <class V>
struct StatesOf;
template <class... Rs>
struct StatesOf<std::variant<Rs...>> {
  using type = decltype(std::tuple_cat(std::declval<typename StateOf<Rs>::type>()...));
};

template <class T, class Tuple>
struct TypeCount;
template <class T, class... Ts>
struct TypeCount<T, std::tuple<Ts...>>
    : std::integral_constant<std::size_t, (std::size_t{std::is_same_v<T, Ts>} + ... + 0)> {};

template <class Tuple>
struct DistinctStates;
template <class... Ss>
struct DistinctStates<std::tuple<Ss...>> : std::bool_constant<((TypeCount<Ss, std::tuple<Ss...>>::value == 1) && ...)> {
};

/// True when no two state types share a record tag.
template <class... Ss>
constexpr bool distinct_tags(const std::tuple<Ss...>*) {
  constexpr std::uint16_t tags[] = {static_cast<std::uint16_t>(Ss::kTag)..., 0};
  for (std::size_t i = 0; i < sizeof...(Ss); ++i)
    for (std::size_t j = i + 1; j < sizeof...(Ss); ++j)
      if (tags[i] == tags[j]) return false;
  return true;
}

template <class Tuple>
struct OptionalEach;
template <class... Ss>
struct OptionalEach<std::tuple<Ss...>> {
  using type = std::tuple<std::optional<Ss>...>;
};

/// Position of S in the tuple of state types.
template <class S, class Tuple>
struct StateIndex;
template <class S, class... Ss>
struct StateIndex<S, std::tuple<S, Ss...>> : std::integral_constant<std::size_t, 0> {};
template <class S, class T, class... Ss>
struct StateIndex<S, std::tuple<T, Ss...>>
    : std::integral_constant<std::size_t, 1 + StateIndex<S, std::tuple<Ss...>>::value> {};

}  // namespace detail

static_assert(detail::AllRules<Processor>::value,
              "every alternative of Processor must be a DecodingRule (decoding_rule.hpp lists the hooks)");

/// The state types of the registered rules that keep their own (today Mirostat's), in
/// registration order.
using RuleStateTypes = typename detail::StatesOf<Processor>::type;
static_assert(detail::DistinctStates<RuleStateTypes>::value,
              "each rule state type belongs to one registered rule (a SamplerState holds one of each)");
static_assert(detail::distinct_tags(static_cast<const RuleStateTypes*>(nullptr)),
              "each rule state type needs its own record tag (kTag) in SamplerState's bytes");
static_assert(std::tuple_size_v<RuleStateTypes> <= 64, "SamplerChain keeps a 64-bit mask of required states");

/// What a SamplerState holds for them: one optional state per type.
using RuleStates = typename detail::OptionalEach<RuleStateTypes>::type;

/// Position of state type S in RuleStateTypes.
template <class S>
inline constexpr std::size_t kRuleStateIndex = detail::StateIndex<S, RuleStateTypes>::value;

}  // namespace inferkit
