#pragma once
// The generate subcommand's flags for inferkit's decoding rules beyond the classic set (issue 20),
// with llama.cpp's names where it has the rule and Hugging Face's otherwise:
//   --sampler-order inferkit|hf|llama.cpp   preset order (inferkit = hf, the default)
//   --typical P  --frequency-penalty F  --presence-penalty P  --min-keep N
//   --dynatemp-range R  --dynatemp-exp E    dynamic temperature around --temperature
//   --top-n-sigma N
//   --xtc-threshold T  --xtc-probability P
//   --dry-multiplier M  --dry-base B  --dry-allowed-length N  --dry-penalty-last-n N
//   --dry-breakers "IDS;IDS..."             sequence breakers as token ids ("13;29871 13")
//   --mirostat 1|2  --mirostat-tau T  --mirostat-eta E
//   --epsilon-cutoff E  --eta-cutoff E
//   --min-new-tokens N  --exp-decay START:FACTOR  (EOS = token 2, llama2.c's "</s>")
//   --bad-words "IDS;IDS..."  --sequence-bias "IDS=BIAS;..."  --begin-suppress "IDS"
// The flag parser of main.cpp is passed in (has / str / integer / real), so this file holds only
// the mapping. Malformed lists name the flag and the piece they reject.

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sampling_config.hpp"

namespace llama2c {

/// The value flags this file reads (main.cpp adds them to its accepted set).
inline const std::vector<std::string> kSamplingValueFlags = {
    "--sampler-order",  "--typical",      "--frequency-penalty",  "--presence-penalty",   "--min-keep",
    "--dynatemp-range", "--dynatemp-exp", "--top-n-sigma",        "--xtc-threshold",      "--xtc-probability",
    "--dry-multiplier", "--dry-base",     "--dry-allowed-length", "--dry-penalty-last-n", "--dry-breakers",
    "--mirostat",       "--mirostat-tau", "--mirostat-eta",       "--epsilon-cutoff",     "--eta-cutoff",
    "--min-new-tokens", "--exp-decay",    "--bad-words",          "--sequence-bias",      "--begin-suppress"};

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
    if (used != tok.size() || v < 0) throw std::invalid_argument(flag + ": '" + tok + "' is not a token id");
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

/// Reads the flags above from `a` into `s` (parameter ranges are checked by the chain's presets).
template <class Flags>
void apply_sampling_flags(const Flags& a, SamplingConfig& s) {
  inferkit::SamplingParams& p = s.params;
  const std::string order = a.str("--sampler-order", "inferkit");
  if (order == "llama.cpp")
    s.llama_cpp_order = true;
  else if (order != "inferkit" && order != "hf")
    throw std::invalid_argument("--sampler-order = '" + order + "' is invalid: must be inferkit, hf or llama.cpp");
  p.typical_p = a.real("--typical", p.typical_p);
  p.frequency_penalty = a.real("--frequency-penalty", p.frequency_penalty);
  p.presence_penalty = a.real("--presence-penalty", p.presence_penalty);
  p.min_keep = a.integer("--min-keep", p.min_keep);
  p.dynatemp_range = a.real("--dynatemp-range", p.dynatemp_range);
  p.dynatemp_exponent = a.real("--dynatemp-exp", p.dynatemp_exponent);
  p.top_n_sigma = a.real("--top-n-sigma", p.top_n_sigma);
  p.xtc_threshold = a.real("--xtc-threshold", p.xtc_threshold);
  p.xtc_probability = a.real("--xtc-probability", p.xtc_probability);
  p.dry_multiplier = a.real("--dry-multiplier", p.dry_multiplier);
  p.dry_base = a.real("--dry-base", p.dry_base);
  p.dry_allowed_length = a.integer("--dry-allowed-length", p.dry_allowed_length);
  p.dry_penalty_last_n = a.integer("--dry-penalty-last-n", p.dry_penalty_last_n);
  if (a.has("--dry-breakers")) p.dry_sequence_breakers = detail::id_lists(a.str("--dry-breakers"), "--dry-breakers");
  p.mirostat = static_cast<int>(a.integer("--mirostat", p.mirostat));
  p.mirostat_tau = a.real("--mirostat-tau", p.mirostat_tau);
  p.mirostat_eta = a.real("--mirostat-eta", p.mirostat_eta);
  p.epsilon_cutoff = a.real("--epsilon-cutoff", p.epsilon_cutoff);
  p.eta_cutoff = a.real("--eta-cutoff", p.eta_cutoff);
  p.min_new_tokens = a.integer("--min-new-tokens", p.min_new_tokens);
  if (a.has("--exp-decay")) {
    const std::string v = a.str("--exp-decay");
    const auto colon = v.find(':');
    if (colon == std::string::npos)
      throw std::invalid_argument("--exp-decay = '" + v + "' is invalid: must be START:FACTOR");
    const auto start = detail::id_list(v.substr(0, colon), "--exp-decay");
    if (start.size() != 1)
      throw std::invalid_argument("--exp-decay = '" + v + "' is invalid: START must be one integer");
    p.exponential_decay_start = start[0];
    p.exponential_decay_factor = detail::real_of(v.substr(colon + 1), "--exp-decay");
  }
  if (a.has("--bad-words")) p.bad_words = detail::id_lists(a.str("--bad-words"), "--bad-words");
  if (a.has("--sequence-bias")) {
    std::istringstream in(a.str("--sequence-bias"));
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
    p.begin_suppress_tokens = detail::id_list(a.str("--begin-suppress"), "--begin-suppress");
  if (p.min_new_tokens > 0 || p.exponential_decay_factor != 1.0f || !p.bad_words.empty()) p.eos_token_ids = {kEos};
}

}  // namespace llama2c
