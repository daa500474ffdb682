#pragma once
// SamplingParams: the common knobs of a decoding request in one struct (values of 1 or 0 mean
// "off"; defaults follow llama.cpp where it has the knob), from which the presets (presets.hpp)
// build a SamplerChain in Hugging Face's or llama.cpp's order.
//   const SamplingParams p{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f};
//   p.validate();   // the presets call it: every field is checked, used by a stage or not
// validate() throws std::invalid_argument naming the field and its value (the names below).

#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/logits.hpp"
#include "inferkit/sampling/processor.hpp"

namespace inferkit {

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
  std::vector<TokenId> eos_token_ids{};            ///< EOS ids for min_new_tokens, the decay penalty and bad words
  Index min_new_tokens = 0;                        ///< 0 = off
  Index exponential_decay_start = 0;               ///< generated tokens before the EOS boost starts
  float exponential_decay_factor = 1.0f;           ///< 1 = off
  std::vector<std::vector<TokenId>> bad_words{};   ///< banned sequences (HF bad_words_ids)
  std::vector<SequenceBiasEntry> sequence_bias{};  ///< biased sequences (HF sequence_bias)
  std::vector<TokenId> begin_suppress_tokens{};    ///< banned at the first generated token

  /// Checks every field, including those whose stage a preset would leave out, with the
  /// validate() hook of the rule it feeds; throws std::invalid_argument naming the first bad one.
  void validate() const {
    Temperature{temperature}.validate();
    TopP{top_p, min_keep}.validate();
    MinP{min_p, min_keep}.validate();
    Typical{typical_p, min_keep}.validate();
    RepetitionPenalty{repetition_penalty, penalty_last_n}.validate();
    FrequencyPresencePenalty{frequency_penalty, presence_penalty, penalty_last_n}.validate();
    DynamicTemperature{temperature, dynatemp_range, dynatemp_exponent}.validate();
    TopNSigma{top_n_sigma}.validate();
    Xtc{xtc_threshold, xtc_probability, min_keep}.validate();
    Dry{dry_multiplier, dry_base, dry_allowed_length, dry_penalty_last_n, dry_sequence_breakers}.validate();
    require(mirostat >= 0 && mirostat <= 2, "mirostat", mirostat, "must be 0 (off), 1 or 2");
    Mirostat{mirostat == 0 ? 2 : mirostat, mirostat_tau, mirostat_eta, 100}.validate();
    if (epsilon_cutoff != 0.0f) EpsilonCutoff{epsilon_cutoff, min_keep}.validate();
    if (eta_cutoff != 0.0f) EtaCutoff{eta_cutoff, min_keep}.validate();
    MinNewTokens{min_new_tokens, eos_token_ids}.validate();
    ExponentialDecayLengthPenalty{exponential_decay_start, exponential_decay_factor, eos_token_ids}.validate();
    BadWords{bad_words, eos_token_ids}.validate();
    SequenceBias{sequence_bias}.validate();
    for (std::size_t i = 0; i < eos_token_ids.size(); ++i)
      require(eos_token_ids[i] >= 0, "eos_token_ids[" + std::to_string(i) + "]", eos_token_ids[i], "must be >= 0");
    BeginSuppressTokens{begin_suppress_tokens}.validate();
  }
};

}  // namespace inferkit
