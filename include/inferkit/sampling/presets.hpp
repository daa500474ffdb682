#pragma once
// The presets: SamplerChains built from SamplingParams in the order of a big implementation,
// since order changes results and the implementations disagree. Stages that are no-ops for the
// given parameters are left out, so describe() shows what runs.
//   const SamplerChain chain = presets::huggingface({.temperature = 0.8f, .top_k = 40, .top_p = 0.95f});
// Which one to take: huggingface() is inferkit's default order (temperature before the
// truncations, as Hugging Face and vLLM do); take llama_cpp() to reproduce llama.cpp's sampler.
//   huggingface: transformers' generate() order,
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
// Both validate every parameter first (SamplingParams::validate()).

#include "inferkit/sampling/processor.hpp"
#include "inferkit/sampling/sampler_chain.hpp"
#include "inferkit/sampling/sampling_params.hpp"

namespace inferkit {

namespace detail {
inline void preset_penalties(SamplerChain& c, const SamplingParams& p) {
  if (p.repetition_penalty != 1.0f) c.add(RepetitionPenalty{p.repetition_penalty, p.penalty_last_n});
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
    c.add(FrequencyPresencePenalty{p.frequency_penalty, p.presence_penalty, p.penalty_last_n});
}
inline void preset_dry(SamplerChain& c, const SamplingParams& p) {
  if (p.dry_multiplier != 0.0f && p.dry_penalty_last_n != 0)
    c.add(Dry{p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n, p.dry_sequence_breakers});
}
inline void preset_length_rules(SamplerChain& c, const SamplingParams& p) {
  if (p.min_new_tokens > 0) c.add(MinNewTokens{p.min_new_tokens, p.eos_token_ids});
  if (p.exponential_decay_factor != 1.0f)
    c.add(ExponentialDecayLengthPenalty{p.exponential_decay_start, p.exponential_decay_factor, p.eos_token_ids});
  if (!p.begin_suppress_tokens.empty()) c.add(BeginSuppressTokens{p.begin_suppress_tokens});
}
inline void preset_temperature(SamplerChain& c, const SamplingParams& p) {
  if (p.dynatemp_range > 0.0f)
    c.add(DynamicTemperature{p.temperature, p.dynatemp_range, p.dynatemp_exponent});
  else if (p.temperature != 1.0f)
    c.add(Temperature{p.temperature});
}
inline void preset_cutoffs(SamplerChain& c, const SamplingParams& p) {
  if (p.epsilon_cutoff > 0.0f) c.add(EpsilonCutoff{p.epsilon_cutoff, p.min_keep});
  if (p.eta_cutoff > 0.0f) c.add(EtaCutoff{p.eta_cutoff, p.min_keep});
}
inline void preset_mirostat(SamplerChain& c, const SamplingParams& p) {  // llama.cpp: plain temperature, then Mirostat
  if (p.temperature != 1.0f) c.add(Temperature{p.temperature});
  c.add(Mirostat{p.mirostat, p.mirostat_tau, p.mirostat_eta, 100});
}
}  // namespace detail

namespace presets {

/// Hugging Face's order, inferkit's default (see the header comment); validates every parameter.
inline SamplerChain huggingface(const SamplingParams& p) {
  p.validate();
  SamplerChain c;
  if (!p.sequence_bias.empty()) c.add(SequenceBias{p.sequence_bias});
  detail::preset_penalties(c, p);
  detail::preset_dry(c, p);
  if (!p.bad_words.empty()) c.add(BadWords{p.bad_words, p.eos_token_ids});
  detail::preset_length_rules(c, p);
  if (p.mirostat != 0) {
    detail::preset_mirostat(c, p);
    return c;
  }
  detail::preset_temperature(c, p);
  if (p.top_n_sigma > 0.0f) c.add(TopNSigma{p.top_n_sigma});
  if (p.top_k > 0) c.add(TopK{p.top_k});
  if (p.top_p < 1.0f) c.add(TopP{p.top_p, p.min_keep});
  if (p.min_p > 0.0f) c.add(MinP{p.min_p, p.min_keep});
  if (p.typical_p < 1.0f) c.add(Typical{p.typical_p, p.min_keep});
  detail::preset_cutoffs(c, p);
  if (p.xtc_probability > 0.0f) c.add(Xtc{p.xtc_threshold, p.xtc_probability, p.min_keep});
  return c;
}

/// llama.cpp's common sampler order (see the header comment); validates every parameter.
inline SamplerChain llama_cpp(const SamplingParams& p) {
  p.validate();
  SamplerChain c;
  if (!p.sequence_bias.empty()) c.add(SequenceBias{p.sequence_bias});
  if (!p.bad_words.empty()) c.add(BadWords{p.bad_words, p.eos_token_ids});
  detail::preset_length_rules(c, p);
  if (p.mirostat != 0) {
    detail::preset_mirostat(c, p);
    return c;
  }
  detail::preset_penalties(c, p);
  detail::preset_dry(c, p);
  if (p.top_n_sigma > 0.0f) c.add(TopNSigma{p.top_n_sigma});
  if (p.top_k > 0) c.add(TopK{p.top_k});
  if (p.typical_p < 1.0f) c.add(Typical{p.typical_p, p.min_keep});
  if (p.top_p < 1.0f) c.add(TopP{p.top_p, p.min_keep});
  if (p.min_p > 0.0f) c.add(MinP{p.min_p, p.min_keep});
  detail::preset_cutoffs(c, p);
  if (p.xtc_probability > 0.0f) c.add(Xtc{p.xtc_threshold, p.xtc_probability, p.min_keep});
  detail::preset_temperature(c, p);
  return c;
}

}  // namespace presets

}  // namespace inferkit
