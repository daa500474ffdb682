#pragma once
// What the subcommands (cmd_*.hpp) share: reading token-id files and lists, the flags of the
// KV encoding, the quantized weights, the MoE options and steering turned into the runner's
// option structs, and printing ids. Every error names the flag and the value it rejects.
//
//   const auto ids = llama2c::parse_ids(llama2c::read_file(f.text("--eval-ids"), "--eval-ids"), "--eval-ids");

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "flags.hpp"
#include "llama2c.hpp"
#include "quant_weights.hpp"
#include "steering.hpp"
#include "tokenizer.hpp"

namespace llama2c {

/// The whole file `path` (named `flag` in errors).
inline std::string read_file(const std::string& path, const std::string& flag) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument("cannot open " + flag + " file '" + path + "'");
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

/// Whitespace-separated token ids (any TokenId value; the model checks the vocabulary).
inline std::vector<TokenId> parse_ids(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::vector<TokenId> ids;
  std::string tok;
  while (in >> tok) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(tok, &used);
      if (used != tok.size() || v < std::numeric_limits<TokenId>::min() || v > std::numeric_limits<TokenId>::max())
        throw std::invalid_argument("");
      ids.push_back(static_cast<TokenId>(v));
    } catch (const std::exception&) {
      std::string shown = tok.substr(0, 24);  // printable, short: the file may be binary
      for (char& ch : shown)
        if (ch < 32 || ch > 126) ch = '?';
      throw std::invalid_argument(what + ": '" + shown + "' is not a token id");
    }
  }
  return ids;
}

inline void print_ids(const std::vector<TokenId>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
  std::printf("\n");
}

/// "A:B" with integers 1 <= A <= B (a flag's value or default).
inline std::pair<Index, Index> int_range(const cli::Flags& a, const std::string& flag) {
  const std::string r = a.text(flag);
  const auto colon = r.find(':');
  try {
    if (colon != std::string::npos) {
      std::size_t u1 = 0, u2 = 0;
      const std::string lo = r.substr(0, colon), hi = r.substr(colon + 1);
      const long long x = std::stoll(lo, &u1), y = std::stoll(hi, &u2);
      if (u1 == lo.size() && u2 == hi.size() && x >= 1 && x <= y) return {x, y};
    }
  } catch (const std::exception&) {}
  throw std::invalid_argument(flag + " = '" + r + "' is invalid: must be A:B with integers 1 <= A <= B");
}

/// --attn-arith exact|reduced.
inline inferkit::AttentionArithmetic attn_arith(const cli::Flags& a) {
  return a.text("--attn-arith") == "reduced" ? inferkit::AttentionArithmetic::kReduced
                                             : inferkit::AttentionArithmetic::kExact;
}

/// --sink-logit S or S1,...,SH: one sink logit per query head (empty when the flag is absent).
/// Each value is a whole number text of std::stof, finite or -inf.
inline std::vector<float> sink_logits_flag(const cli::Flags& a, int n_heads) {
  if (!a.has("--sink-logit")) return {};
  const std::string text = a.text("--sink-logit");
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("--sink-logit = '" + text + "' is invalid: " + why);
  };
  std::vector<float> v;
  for (std::size_t b = 0;;) {
    const std::size_t e = std::min(text.find(',', b), text.size());
    const std::string item = text.substr(b, e - b);
    float x = 0;
    std::size_t used = 0;
    try {
      x = std::stof(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size()) throw bad("'" + item + "' is not a number");
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity())
      throw bad("'" + item + "' must be finite or -inf (no sink)");
    v.push_back(x);
    if (e == text.size()) break;
    b = e + 1;
  }
  if (v.size() == 1) v.assign(static_cast<std::size_t>(n_heads), v[0]);
  if (v.size() != static_cast<std::size_t>(n_heads))
    throw bad("gives " + std::to_string(v.size()) + " values; the model has " + std::to_string(n_heads) +
              " query heads (give one value or one per head)");
  return v;
}

/// The name --attn-arith gives an arithmetic.
inline const char* arithmetic_flag_name(inferkit::AttentionArithmetic a) {
  return a == inferkit::AttentionArithmetic::kExact ? "exact" : "reduced";
}

/// --kv-quant sets keys and values; --kv-quant-k / --kv-quant-v override one side (with no
/// --kv-quant, both sides must then be given). nullopt: float KV.
inline std::optional<inferkit::KvQuantConfig> quant_config(const cli::Flags& a, Index head_dim) {
  const std::string both = a.text("--kv-quant");
  const bool k = a.has("--kv-quant-k"), v = a.has("--kv-quant-v");
  if (both == "none" && !k && !v) return std::nullopt;
  if (both == "none" && !(k && v))
    throw std::invalid_argument("--kv-quant-k and --kv-quant-v go together unless --kv-quant sets both sides");
  inferkit::KvQuantConfig cfg = both == "none" ? inferkit::KvQuantConfig{} : inferkit::kv_quant_preset(both, head_dim);
  if (k) cfg.keys = inferkit::kv_quant_preset(a.text("--kv-quant-k"), head_dim).keys;
  if (v) cfg.values = inferkit::kv_quant_preset(a.text("--kv-quant-v"), head_dim).values;
  return cfg;
}

/// --weights / --act-int8 / --outlier-threshold / --smooth / --calib-ids: quantizes the model's
/// projections in place (quant_weights.hpp); returns the bytes they read per token.
inline std::size_t apply_quant_flags(const cli::Flags& a, Model& m) {
  if (m.config().moe()) {
    for (const char* f : {"--weights", "--act-int8", "--outlier-threshold", "--smooth", "--calib-ids"})
      if (a.has(f))
        throw std::invalid_argument(std::string(f) + " is not supported for MoE models (the experts stay float)");
    return 0;
  }
  if (m.ggml_backed()) {  // the file's blocks run as they are; these flags repack float weights
    const bool float_weights = !a.has("--weights") || a.text("--weights") == "f32";
    for (const char* f : {"--weights", "--act-int8", "--outlier-threshold", "--smooth", "--calib-ids"})
      if (a.has(f) && (std::string_view(f) != "--weights" || !float_weights))
        throw std::invalid_argument(std::string(f) + " needs float weights, but tensor '" +
                                    m.ggml_weights(Proj::kQ, 0).name() + "' is " +
                                    inferkit::ggml_type_name(m.ggml_weights(Proj::kQ, 0).type()) +
                                    " (a GGUF whose matrices are not F32 runs them in the file's type)");
    return 0;
  }
  QuantOptions q;
  const std::string w = a.text("--weights");
  q.weights = w == "int8" ? WeightFormat::kInt8 : w == "int4" ? WeightFormat::kInt4 : WeightFormat::kF32;
  q.act_int8 = a.has("--act-int8");
  if (a.has("--outlier-threshold")) q.outlier_threshold = a.real("--outlier-threshold");
  if (a.has("--smooth")) q.smooth_alpha = a.real("--smooth");
  if (a.has("--calib-ids")) {
    q.calib_ids = parse_ids(read_file(a.text("--calib-ids"), "--calib-ids"), "--calib-ids");
    for (TokenId t : q.calib_ids)
      if (t < 0 || t >= m.config().vocab_size)
        throw std::invalid_argument("--calib-ids: token " + std::to_string(t) + " is outside the vocabulary");
  }
  return quantize_model(m, q);
}

/// --router / --capacity-factor / --overflow-policy / --reroute / --moe-threads: how an MoE
/// checkpoint routes (moe_model.hpp); an error on a dense model.
inline void apply_moe_flags(const cli::Flags& a, const Model& m) {
  if (!m.config().moe()) {
    for (const char* f : {"--router", "--capacity-factor", "--overflow-policy", "--moe-threads", "--reroute"})
      if (a.has(f)) throw std::invalid_argument(std::string(f) + " needs an MoE model (make-random --experts)");
    return;
  }
  MoeOptions& o = m.moe_ffn().options;
  if (a.has("--router")) o.scoring = parse_router_mode(a.text("--router"));
  o.capacity_factor = a.real("--capacity-factor");
  if (!std::isfinite(o.capacity_factor)) throw std::invalid_argument("--capacity-factor must be finite");
  o.policy = a.text("--overflow-policy") == "priority" ? inferkit::OverflowPolicy::priority
                                                       : inferkit::OverflowPolicy::arrival_order;
  o.reroute = a.has("--reroute");
  o.num_threads = a.threads("--moe-threads");
}

/// The tokenizer of --tokenizer for a model of `vocab_size` tokens, if given.
inline std::optional<Tokenizer> tokenizer_flag(const cli::Flags& a, int vocab_size) {
  if (!a.has("--tokenizer")) return std::nullopt;
  return Tokenizer::load(a.text("--tokenizer"), vocab_size);
}

/// The --steer-* flags (steering.hpp); nullopt when none is given. flag_table()'s rules have
/// checked which go together.
inline std::optional<SteeringSpec> steering_spec(const cli::Flags& a, const Tokenizer* tok) {
  if (!a.has("--steer-pos")) return std::nullopt;
  SteeringSpec s;
  s.positive = read_prompt_lines(a.text("--steer-pos"), tok, "--steer-pos");
  s.negative = read_prompt_lines(a.text("--steer-neg"), tok, "--steer-neg");
  s.layer = static_cast<int>(a.integer("--steer-layer"));
  s.scale = a.real("--steer-scale");
  s.ablate = a.has("--steer-ablate");
  s.unit = a.has("--steer-unit");
  s.preserve_norm = a.has("--steer-preserve-norm");
  s.reduction = a.text("--steer-reduce") == "last" ? inferkit::TokenReduction::kLastToken
                                                   : inferkit::TokenReduction::kMeanOverPositions;
  s.positions = parse_positions(a.text("--steer-positions"));
  return s;
}

}  // namespace llama2c
