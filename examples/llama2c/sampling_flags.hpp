#pragma once
// generate's decoding-rule flags read into a SamplingConfig (the flags themselves, their
// defaults and help are declared in flag_table.hpp, group "Sampling"; llama.cpp's names where
// it has the rule, Hugging Face's otherwise). This file holds the mapping and the parsers of
// the list-valued flags: malformed lists name the flag and the piece they reject.
//
//   llama2c::SamplingConfig s;
//   llama2c::apply_sampling_flags(flags, s);  // flags: cli::Flags of generate

#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "flags.hpp"
#include "sampling_config.hpp"

namespace llama2c {

namespace detail {
/// Whitespace-separated token ids of `text`; `flag` names the source in errors.
inline std::vector<TokenId> id_list(const std::string& text, const std::string& flag) {
  std::istringstream in(text);
  std::vector<TokenId> ids;
  std::string tok;
  while (in >> tok) {
    std::size_t used = 0;
    long v = -1;
    try {
      v = std::stol(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size() || v < 0 || v > std::numeric_limits<TokenId>::max())
      throw std::invalid_argument(flag + ": '" + tok + "' is not a token id");
    ids.push_back(static_cast<TokenId>(v));
  }
  return ids;
}

/// ';'-separated non-empty id lists ("1 2;3").
inline std::vector<std::vector<TokenId>> id_lists(const std::string& text, const std::string& flag) {
  std::vector<std::vector<TokenId>> out;
  std::istringstream in(text);
  std::string part;
  while (std::getline(in, part, ';')) {
    auto ids = id_list(part, flag);
    if (ids.empty()) throw std::invalid_argument(flag + ": empty sequence in '" + text + "'");
    out.push_back(std::move(ids));
  }
  return out;
}

inline float real_of(const std::string& text, const std::string& flag) {
  std::size_t used = 0;
  float v = 0.0f;
  try {
    v = std::stof(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty()) throw std::invalid_argument(flag + ": '" + text + "' is not a number");
  return v;
}

}  // namespace detail

/// Reads the flags above from `a` into `s`: the classic five (temperature, top-k, top-p, min-p,
/// repetition penalty), the penalty window and the seed, then every other decoding rule
/// (parameter ranges are checked by the chain's presets, make_chain()).
inline void apply_sampling_flags(const cli::Flags& a, SamplingConfig& s) {
  inferkit::SamplingParams& p = s.params;
  p.temperature = a.real("--temperature");
  p.top_k = a.integer("--top-k");
  p.top_p = a.real("--top-p");
  p.min_p = a.real("--min-p");
  p.repetition_penalty = a.real("--repeat-penalty");
  s.repeat_last_n = a.integer("--repeat-last-n");
  s.seed = static_cast<std::uint64_t>(a.integer("--seed"));
  s.llama_cpp_order = a.text("--sampler-order") == "llama.cpp";
  p.typical_p = a.real("--typical");
  p.frequency_penalty = a.real("--frequency-penalty");
  p.presence_penalty = a.real("--presence-penalty");
  p.min_keep = a.integer("--min-keep");
  p.dynatemp_range = a.real("--dynatemp-range");
  p.dynatemp_exponent = a.real("--dynatemp-exp");
  p.top_n_sigma = a.real("--top-n-sigma");
  p.xtc_threshold = a.real("--xtc-threshold");
  p.xtc_probability = a.real("--xtc-probability");
  p.dry_multiplier = a.real("--dry-multiplier");
  p.dry_base = a.real("--dry-base");
  p.dry_allowed_length = a.integer("--dry-allowed-length");
  p.dry_penalty_last_n = a.integer("--dry-penalty-last-n");
  if (a.has("--dry-breakers")) p.dry_sequence_breakers = detail::id_lists(a.text("--dry-breakers"), "--dry-breakers");
  p.mirostat = static_cast<int>(a.integer("--mirostat"));
  p.mirostat_tau = a.real("--mirostat-tau");
  p.mirostat_eta = a.real("--mirostat-eta");
  p.epsilon_cutoff = a.real("--epsilon-cutoff");
  p.eta_cutoff = a.real("--eta-cutoff");
  p.min_new_tokens = a.integer("--min-new-tokens");
  if (a.has("--exp-decay")) {
    const std::string v = a.text("--exp-decay");
    const auto colon = v.find(':');
    if (colon == std::string::npos)
      throw std::invalid_argument("--exp-decay = '" + v + "' is invalid: must be START:FACTOR");
    const auto start = detail::id_list(v.substr(0, colon), "--exp-decay");
    if (start.size() != 1)
      throw std::invalid_argument("--exp-decay = '" + v + "' is invalid: START must be one integer");
    p.exponential_decay_start = start[0];
    p.exponential_decay_factor = detail::real_of(v.substr(colon + 1), "--exp-decay");
  }
  if (a.has("--bad-words")) p.bad_words = detail::id_lists(a.text("--bad-words"), "--bad-words");
  if (a.has("--sequence-bias")) {
    std::istringstream in(a.text("--sequence-bias"));
    std::string part;
    while (std::getline(in, part, ';')) {
      const auto eq = part.find('=');
      if (eq == std::string::npos) throw std::invalid_argument("--sequence-bias: '" + part + "' is not IDS=BIAS");
      auto ids = detail::id_list(part.substr(0, eq), "--sequence-bias");
      if (ids.empty()) throw std::invalid_argument("--sequence-bias: '" + part + "' has no token ids");
      p.sequence_bias.push_back({std::move(ids), detail::real_of(part.substr(eq + 1), "--sequence-bias")});
    }
  }
  if (a.has("--begin-suppress"))
    p.begin_suppress_tokens = detail::id_list(a.text("--begin-suppress"), "--begin-suppress");
  if (p.min_new_tokens > 0 || p.exponential_decay_factor != 1.0f || !p.bad_words.empty()) p.eos_token_ids = {kEos};
}

}  // namespace llama2c
