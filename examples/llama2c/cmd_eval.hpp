#pragma once
// `inferkit-llama2c eval`: the flags of flag_table() turned into a cache policy and a
// teacher-forced evaluation (eval.hpp), or with steering flags a steered-vs-plain comparison
// (steering.hpp); prints one line of `name value` pairs.
//
//   return llama2c::cmd_eval(cli::parse_flags(llama2c::flag_table(), "eval", argc, argv, 2));

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bounds.hpp"
#include "cmd_common.hpp"
#include "eval.hpp"
#include "flag_table.hpp"

namespace llama2c {

/// --eval-range A:B (either side may be empty: the first predicted position, the end).
inline std::pair<Index, Index> eval_range(const cli::Flags& a, Index size) {
  Index first = 1, last = size;
  if (!a.has("--eval-range")) return {first, last};
  const std::string r = a.text("--eval-range");
  const auto colon = r.find(':');
  if (colon == std::string::npos) throw std::invalid_argument("--eval-range must be A:B");
  try {
    if (colon > 0) first = std::stol(r.substr(0, colon));
    if (colon + 1 < r.size()) last = std::stol(r.substr(colon + 1));
  } catch (const std::exception&) {
    throw std::invalid_argument("--eval-range = '" + r + "' is invalid: must be A:B with integers");
  }
  return {first, last};
}

/// The eval subcommand (see flag_table()).
inline int cmd_eval(const cli::Flags& a) {
  auto model = Model::load_any(a.text("--model"));
  const std::size_t weight_bytes = apply_quant_flags(a, model);
  apply_moe_flags(a, model);
  const auto ids = parse_ids(read_file(a.text("--eval-ids"), "--eval-ids"), "--eval-ids");
  if (ids.size() < 2) throw std::invalid_argument("--eval-ids needs at least 2 tokens");
  const auto [first, last] = eval_range(a, static_cast<Index>(ids.size()));
  CacheOptions c;
  const std::string kind = a.text("--cache");
  c.kind = kind == "window"        ? CacheKind::kWindow
           : kind == "sink-window" ? CacheKind::kSinkWindow
           : kind == "paged"       ? CacheKind::kPaged
                                   : CacheKind::kDense;
  c.window = a.integer("--window");
  c.sinks = a.integer("--sinks");
  c.positions =
      a.text("--positions") == "cache" ? inferkit::PositionPolicy::kCache : inferkit::PositionPolicy::kOriginal;
  c.quant = quant_config(a, model.config().head_size());
  {  // the positions and KV bytes the file and flags ask for, bounded before any allocation
    const Config& mc = model.config();
    if (ids.size() > std::size_t(kMaxPositions))
      throw std::invalid_argument("--eval-ids: " + std::to_string(ids.size()) +
                                  " tokens is invalid: positions are int32, at most 2^31-1");
    const bool window = c.kind == CacheKind::kWindow || c.kind == CacheKind::kSinkWindow;
    const auto quant = c.quant && c.kind == CacheKind::kPaged
                           ? std::optional(paged_quant(*c.quant, a.integer("--page-size")))
                           : c.quant;
    const double kv = kv_bytes_per_token(mc.n_layers, mc.n_kv_heads, mc.head_size(), quant);
    if (window)  // a window cache holds its slots from the start
      require_fits_memory("--window", c.window,
                          double(c.window + (c.kind == CacheKind::kSinkWindow ? c.sinks : 0)) * kv,
                          "the window's slots of KV cache");
    else
      require_fits_memory("--eval-ids", static_cast<long long>(ids.size()), double(ids.size()) * kv,
                          "the file's positions of KV cache");
  }
  c.arithmetic = attn_arith(a);
  c.sink_logits = sink_logits_flag(a, model.config().n_heads);
  c.batch_invariant = a.has("--batch-invariant");
  // --cache paged: one sequence's pages from a block pool (quantized pages with --kv-quant,
  // under paged_quant's specs: no residual, per-channel key groups within a page).
  const Index page = a.integer("--page-size");
  inferkit::BlockPoolConfig pc{model.config().n_layers, model.config().n_kv_heads, model.config().head_size(), page,
                               static_cast<Index>(ids.size()) / page + 1};
  std::optional<inferkit::BlockPool<float>> fpool;
  std::optional<inferkit::BlockPool<inferkit::QuantizedKv>> qpool;
  if (c.kind == CacheKind::kPaged) {
    if (c.quant) {
      pc.quant = paged_quant(*c.quant, page);
      c.quant_pool = &qpool.emplace(pc);
    } else {
      c.pool = &fpool.emplace(pc);
    }
  }
  const auto tok = tokenizer_flag(a, model.config().vocab_size);
  if (const auto steer = steering_spec(a, tok ? &*tok : nullptr)) {  // NLL and token-set probability, without and with
    const auto sv = build_steering_vector(model, *steer);
    std::fprintf(stderr, "%s\n", describe(*steer, sv).c_str());
    const auto plan = make_plan(model, *steer, sv.v);
    const auto set = parse_ids(a.has("--steer-tokens") ? a.text("--steer-tokens") : "", "--steer-tokens");
    const auto e = evaluate_steering(model, ids, plan, set, c, first, last);
    std::printf(
        "steering predicted %ld layer %d scale %g ablate %d v_norm %.6g state_norm %.6g nll_base %.6f nll_steered %.6f "
        "nll_shift %.6f p_set_base %.6f p_set_steered %.6f p_set_shift %.6f\n",
        static_cast<long>(e.count), steer->layer, double(steer->scale), steer->ablate ? 1 : 0, sv.v_norm,
        sv.mean_state_norm, e.nll_base, e.nll_steered, e.nll_steered - e.nll_base, e.set_prob_base, e.set_prob_steered,
        e.set_prob_steered - e.set_prob_base);
    return 0;
  }
  // A chunk longer than the file runs the same single chunk: clamped, so its logits fit.
  const Index chunk = std::min<Index>(a.integer("--eval-chunk"), static_cast<Index>(ids.size()));
  {  // a chunk's logits rows and forward()'s activations (x, xb, q, att, k, v, h1, h3 rows)
    const Config& mc = model.config();
    const double row = double(mc.vocab_size) + 4.0 * mc.dim + 2.0 * mc.kv_dim() + 2.0 * mc.hidden_dim;
    require_fits_memory("--eval-chunk", chunk, double(chunk) * row * sizeof(float),
                        "a chunk's rows of logits (" + std::to_string(mc.vocab_size) + " each) and activations");
  }
  const auto r = evaluate(model, ids, c, first, last, chunk);
  std::printf("tokens %zu predicted %ld mean_nll %.6f ppl %.4f kv_bytes %.0f weight_bytes %zu attn_arith %s\n",
              ids.size(), static_cast<long>(r.count), r.mean_nll, r.ppl(), r.kv_bytes, weight_bytes,
              arithmetic_flag_name(c.arithmetic));
  if (model.config().moe()) std::printf("%s\n", model.moe_ffn().totals.describe().c_str());
  return 0;
}

}  // namespace llama2c
