// inferkit-llama2c: a llama2.c-format model runner built from inferkit.
//
//   inferkit-llama2c generate --model M [--steps N] [--seed S] [--temperature T] [--top-k K]
//       [--top-p P] [--min-p M] [--repeat-penalty R] [--repeat-last-n N] [--prompt-ids "1 5 9"]
//       [--print-ids] [--beams N --length-penalty A --length-penalty-mode hf|gnmt|none]
//       [--contrastive K --alpha A] [--draft PATH | --draft-layers N] [--draft-k K]
//       [--prompts FILE [--page-size P] [--kv-quant ...]] (prefix reuse over a (quantized) block pool)
//   inferkit-llama2c eval --model M --eval-ids FILE [--eval-range A:B] [--eval-chunk N (tokens per forward)]
//       [--cache dense|window|sink-window|paged] [--window W] [--sinks N] [--positions original|cache]
//       [--page-size P] (paged; with --kv-quant the pool holds quantized pages, llama2c::paged_quant)
//       [--batch-invariant] (attention bits independent of the page size)
//       [--kv-quant none|int8|int4|kivi4|kivi2] [--kv-quant-k ...] [--kv-quant-v ...]
//   generate (plain sampling) and eval also take [--attn-arith exact|fast]: the decode attention
//       arithmetic (inferkit::AttentionArithmetic; fast = kReduced, see attention/options.hpp)
//   generate and eval also take [--weights f32|int8|int4] [--act-int8] [--outlier-threshold T]
//       [--smooth ALPHA --calib-ids FILE] (quant_weights.hpp; the draft model stays float)
//   generate and eval also take --steer-pos FILE --steer-neg FILE --steer-layer L
//       [--steer-scale S] [--steer-ablate] [--steer-unit] [--steer-preserve-norm]
//       [--steer-reduce mean|last] [--steer-positions all|prompt|generated|A:B]
//       [--steer-tokens "ids" (eval)] [--tokenizer T (text prompt files)]; see steering.hpp
//   generate also takes the decoding-rule flags of sampling_flags.hpp: --sampler-order,
//       --xtc-threshold/-probability, --dry-*, --mirostat 1|2 --mirostat-tau/-eta,
//       --dynatemp-range/-exp, --top-n-sigma, --epsilon-cutoff, --eta-cutoff, --min-new-tokens, ...
//   generate also takes --context-parallel [--cp-shard-tokens S] and --expert-parallel (MoE
//       models) under mpirun (built with MPI): each rank holds a token range of the KV cache
//       (context_parallel.hpp), resp. a range of the experts (expert_parallel.hpp); rank 0 prints
//   inferkit-llama2c serve --model M (--trace FILE [--tokenizer T] | --synthetic N [--rate R]
//       [--shared-prefixes S] [--prefix-len L] [--prompt-len A:B] [--output-len A:B]
//       [--workload-seed S] [--temperature T] [--top-k K] [--top-p P])
//       [--max-batched-tokens B] [--max-seqs S] [--chunk C|none] [--max-prefill-tokens T]
//       [--page-size P] [--kv-blocks N]
//       [--policy fcfs|lpm] [--deterministic] [--no-prefix-cache] [--static-batch N]
//       [--kv-quant ...] (quantized pages) [--threads T] [--virtual-time MS] [--out FILE];
//       see serve.hpp and trace.hpp. Writes one
//       JSON line per request (output ids, timings) to --out or stdout, the summary to stderr.
//   inferkit-llama2c make-random --out PATH [--dim 288] [--hidden 768] [--layers 6] [--heads 6]
//       [--kv-heads 6] [--vocab 32000] [--seq-len 256] [--seed 1]
//       [--experts E --experts-per-token K [--router topk-softmax|softmax-topk|sigmoid]]: an MoE
//       checkpoint (moe_model.hpp's header extension; --hidden is then per expert)
//   generate and eval on an MoE checkpoint also take [--router MODE] [--capacity-factor F]
//       [--overflow-policy arrival|priority] [--reroute] [--moe-threads N]; eval prints the drop
//       rate and load statistics (moe_model.hpp)
// Generation starts from BOS = 1 like llama2.c; tokens per second go to stderr.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "quant_weights.hpp"
#include "runner.hpp"
#include "sampling_flags.hpp"
#include "serve.hpp"
#include "steering.hpp"
#include "tokenizer.hpp"
#ifdef INFERKIT_LLAMA2C_MPI
#include "context_parallel.hpp"
#include "expert_parallel.hpp"
#endif

namespace {

using llama2c::Index;
using llama2c::TokenId;

// --flag value pairs (and bare switches) after the subcommand, checked against a known set.
class Args {
 public:
  Args(int argc, char** argv, int first, const std::set<std::string>& values, const std::set<std::string>& switches) {
    for (int i = first; i < argc; ++i) {
      const std::string a = argv[i];
      if (switches.count(a)) {
        flags_[a].assign(1, '1');  // not = "1": GCC 12 -Wrestrict false positive (bug 105329)
      } else if (values.count(a)) {
        if (i + 1 >= argc) throw std::invalid_argument("flag " + a + " needs a value");
        flags_[a] = argv[++i];
      } else {
        throw std::invalid_argument("unknown flag '" + a + "'");
      }
    }
  }
  bool has(const std::string& f) const { return flags_.count(f) != 0; }
  // The flag's value read whole by parse (std::stol / std::stof style), or def when absent.
  template <class T, class Parse>
  T parsed(const std::string& f, T def, Parse parse, const char* what) const {
    if (!has(f)) return def;
    try {
      std::size_t used = 0;
      const T v = parse(flags_.at(f), &used);
      if (used == flags_.at(f).size()) return v;
    } catch (const std::exception&) {}
    throw std::invalid_argument(f + " = '" + flags_.at(f) + "' is invalid: must be " + what);
  }
  std::string str(const std::string& f, const std::string& def = "") const { return has(f) ? flags_.at(f) : def; }
  long integer(const std::string& f, long def) const {
    return parsed(
        f, def, [](const std::string& v, std::size_t* used) { return std::stol(v, used); }, "an integer");
  }
  float real(const std::string& f, float def) const {
    return parsed(
        f, def, [](const std::string& v, std::size_t* used) { return std::stof(v, used); }, "a number");
  }

 private:
  std::map<std::string, std::string> flags_;
};

std::vector<TokenId> parse_ids(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::vector<TokenId> ids;
  std::string tok;
  while (in >> tok) {
    try {
      std::size_t used = 0;
      const long v = std::stol(tok, &used);
      if (used != tok.size()) throw std::invalid_argument("");
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

void print_ids(const std::vector<TokenId>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
  std::printf("\n");
}

// --kv-quant sets keys and values; --kv-quant-k / --kv-quant-v override one side (with no
// --kv-quant, both sides must then be given).
std::optional<inferkit::KvQuantConfig> quant_config(const Args& a, Index head_dim) {
  const std::string both = a.str("--kv-quant", "none");
  const bool k = a.has("--kv-quant-k"), v = a.has("--kv-quant-v");
  if (both == "none" && !k && !v) return std::nullopt;
  if (both == "none" && !(k && v))
    throw std::invalid_argument("--kv-quant-k and --kv-quant-v go together unless --kv-quant sets both sides");
  inferkit::KvQuantConfig cfg = both == "none" ? inferkit::KvQuantConfig{} : inferkit::kv_quant_preset(both, head_dim);
  if (k) cfg.keys = inferkit::kv_quant_preset(a.str("--kv-quant-k"), head_dim).keys;
  if (v) cfg.values = inferkit::kv_quant_preset(a.str("--kv-quant-v"), head_dim).values;
  return cfg;
}

// --weights / --act-int8 / --outlier-threshold / --smooth / --calib-ids: quantizes the model's
// projections in place (quant_weights.hpp); returns the bytes they read per token.
std::size_t apply_quant_flags(const Args& a, llama2c::Model& m) {
  if (m.config().moe()) {
    for (const char* f : {"--weights", "--act-int8", "--outlier-threshold", "--smooth", "--calib-ids"})
      if (a.has(f))
        throw std::invalid_argument(std::string(f) + " is not supported for MoE models (the experts stay float)");
    return 0;
  }
  llama2c::QuantOptions q;
  const std::string w = a.str("--weights", "f32");
  if (w == "f32")
    q.weights = llama2c::WeightFormat::kF32;
  else if (w == "int8")
    q.weights = llama2c::WeightFormat::kInt8;
  else if (w == "int4")
    q.weights = llama2c::WeightFormat::kInt4;
  else
    throw std::invalid_argument("--weights = '" + w + "' is invalid: must be f32, int8 or int4");
  q.act_int8 = a.has("--act-int8");
  if (a.has("--outlier-threshold")) q.outlier_threshold = a.real("--outlier-threshold", 6.0f);
  if (a.has("--smooth")) q.smooth_alpha = a.real("--smooth", 0.5f);
  if (a.has("--calib-ids")) {
    std::ifstream f(a.str("--calib-ids"));
    if (!f) throw std::invalid_argument("cannot open --calib-ids file '" + a.str("--calib-ids") + "'");
    std::stringstream text;
    text << f.rdbuf();
    q.calib_ids = parse_ids(text.str(), "--calib-ids");
    for (TokenId t : q.calib_ids)
      if (t < 0 || t >= m.config().vocab_size)
        throw std::invalid_argument("--calib-ids: token " + std::to_string(t) + " is outside the vocabulary");
  }
  return llama2c::quantize_model(m, q);
}
const std::vector<std::string> kQuantValueFlags = {"--weights", "--outlier-threshold", "--smooth", "--calib-ids"};

// --router / --capacity-factor / --overflow-policy / --reroute / --moe-threads: how an MoE
// checkpoint routes (moe_model.hpp); an error on a dense model.
const std::vector<std::string> kMoeValueFlags = {"--router", "--capacity-factor", "--overflow-policy", "--moe-threads"};
const std::vector<std::string> kMoeSwitches = {"--reroute"};
void apply_moe_flags(const Args& a, const llama2c::Model& m) {
  if (!m.config().moe()) {
    for (const auto& f : kMoeValueFlags)
      if (a.has(f)) throw std::invalid_argument(f + " needs an MoE model (make-random --experts)");
    for (const auto& f : kMoeSwitches)
      if (a.has(f)) throw std::invalid_argument(f + " needs an MoE model (make-random --experts)");
    return;
  }
  llama2c::MoeOptions& o = m.moe_ffn().options;
  if (a.has("--router")) o.scoring = llama2c::parse_router_mode(a.str("--router"));
  o.capacity_factor = a.real("--capacity-factor", 0.0f);
  if (!std::isfinite(o.capacity_factor)) throw std::invalid_argument("--capacity-factor must be finite");
  const std::string p = a.str("--overflow-policy", "arrival");
  if (p == "arrival")
    o.policy = inferkit::OverflowPolicy::arrival_order;
  else if (p == "priority")
    o.policy = inferkit::OverflowPolicy::priority;
  else
    throw std::invalid_argument("--overflow-policy = '" + p + "' is invalid: must be arrival or priority");
  o.reroute = a.has("--reroute");
  o.threads = static_cast<int>(a.integer("--moe-threads", 0));
  if (o.threads < 0) throw std::invalid_argument("--moe-threads must be >= 0");
}
const std::vector<std::string> kQuantSwitches = {"--act-int8"};

std::set<std::string> with(std::set<std::string> flags, const std::vector<std::string>& more) {
  flags.insert(more.begin(), more.end());
  return flags;
}

// The --steer-* flags (steering.hpp); nullopt when none is given.
std::optional<llama2c::SteeringSpec> steering_spec(const Args& a, const llama2c::Tokenizer* tok) {
  if (!a.has("--steer-pos") && !a.has("--steer-neg")) {
    for (const auto& f : llama2c::kSteeringValueFlags)
      if (a.has(f)) throw std::invalid_argument(f + " needs --steer-pos and --steer-neg");
    for (const auto& f : llama2c::kSteeringSwitches)
      if (a.has(f)) throw std::invalid_argument(f + " needs --steer-pos and --steer-neg");
    return std::nullopt;
  }
  if (!a.has("--steer-pos") || !a.has("--steer-neg"))
    throw std::invalid_argument("--steer-pos and --steer-neg go together");
  if (!a.has("--steer-layer")) throw std::invalid_argument("steering needs --steer-layer L");
  llama2c::SteeringSpec s;
  s.positive = llama2c::read_prompt_lines(a.str("--steer-pos"), tok, "--steer-pos");
  s.negative = llama2c::read_prompt_lines(a.str("--steer-neg"), tok, "--steer-neg");
  s.layer = static_cast<int>(a.integer("--steer-layer", 0));
  s.scale = a.real("--steer-scale", 1.0f);
  s.ablate = a.has("--steer-ablate");
  s.unit = a.has("--steer-unit");
  s.preserve_norm = a.has("--steer-preserve-norm");
  const std::string reduce = a.str("--steer-reduce", "mean");
  if (reduce == "mean")
    s.reduction = inferkit::TokenReduction::kMeanOverPositions;
  else if (reduce == "last")
    s.reduction = inferkit::TokenReduction::kLastToken;
  else
    throw std::invalid_argument("--steer-reduce = '" + reduce + "' is invalid: must be mean or last");
  s.positions = llama2c::parse_positions(a.str("--steer-positions", "all"));
  return s;
}

// --attn-arith exact|fast: the decode attention arithmetic.
inferkit::AttentionArithmetic attn_arith(const Args& a) {
  const std::string v = a.str("--attn-arith", "exact");
  if (v == "exact") return inferkit::AttentionArithmetic::kExact;
  if (v == "fast") return inferkit::AttentionArithmetic::kReduced;
  throw std::invalid_argument("--attn-arith = '" + v + "' is invalid: must be exact or fast");
}

int cmd_generate(int argc, char** argv) {
  const Args a(argc, argv, 2,
               with(with(with(with({"--model",
                                    "--steps",
                                    "--seed",
                                    "--temperature",
                                    "--top-k",
                                    "--top-p",
                                    "--min-p",
                                    "--repeat-penalty",
                                    "--repeat-last-n",
                                    "--prompt-ids",
                                    "--beams",
                                    "--length-penalty",
                                    "--length-penalty-mode",
                                    "--contrastive",
                                    "--alpha",
                                    "--draft",
                                    "--draft-layers",
                                    "--draft-k",
                                    "--prompts",
                                    "--page-size",
                                    "--prompt",
                                    "--tokenizer",
                                    "--attn-arith",
                                    "--kv-quant",
                                    "--kv-quant-k",
                                    "--kv-quant-v",
                                    "--cp-shard-tokens"},
                                   llama2c::kSteeringValueFlags),
                              kQuantValueFlags),
                         llama2c::kSamplingValueFlags),
                    kMoeValueFlags),
               with(with(with({"--print-ids", "--context-parallel", "--expert-parallel"}, llama2c::kSteeringSwitches),
                         kQuantSwitches),
                    kMoeSwitches));
  if (!a.has("--model")) throw std::invalid_argument("generate needs --model PATH");
  const auto arithmetic = attn_arith(a);  // checked before any work
  auto model = llama2c::Model::load_any(a.str("--model"));
  apply_quant_flags(a, model);
  apply_moe_flags(a, model);
  const Index steps = a.integer("--steps", 256);
  if (steps < 1) throw std::invalid_argument("--steps must be >= 1");
  llama2c::SamplingConfig s;
  s.params.temperature = a.real("--temperature", 1.0f);
  s.params.top_k = a.integer("--top-k", 0);
  s.params.top_p = a.real("--top-p", 1.0f);
  s.params.min_p = a.real("--min-p", 0.0f);
  s.params.repetition_penalty = a.real("--repeat-penalty", 1.0f);
  s.repeat_last_n = a.integer("--repeat-last-n", 64);
  s.seed = static_cast<std::uint64_t>(a.integer("--seed", 42));
  s.arithmetic = arithmetic;
  if (s.arithmetic != inferkit::AttentionArithmetic::kExact)
    for (const char* f : {"--prompts", "--beams", "--contrastive", "--draft", "--draft-layers"})
      if (a.has(f))
        throw std::invalid_argument(std::string("--attn-arith fast works with plain sampling only, not with ") + f);
  llama2c::apply_sampling_flags(a, s);
  llama2c::make_chain(s);  // validates the sampling parameters before any work
  std::optional<llama2c::Tokenizer> tok;
  if (a.has("--tokenizer")) tok = llama2c::Tokenizer::load(a.str("--tokenizer"), model.config().vocab_size);
  if (a.has("--prompt") && !tok) throw std::invalid_argument("--prompt needs --tokenizer (or give --prompt-ids)");
  if (a.has("--prompt") && a.has("--prompt-ids"))
    throw std::invalid_argument("give --prompt or --prompt-ids, not both");
  const auto prompt =
      a.has("--prompt") ? tok->encode(a.str("--prompt")) : parse_ids(a.str("--prompt-ids"), "--prompt-ids");
  llama2c::GenerateStats st;
  std::vector<TokenId> out;
  const auto steer = steering_spec(a, tok ? &*tok : nullptr);
  if (steer) {
    for (const char* f : {"--prompts", "--beams", "--contrastive", "--draft", "--draft-layers", "--steer-tokens",
                          "--context-parallel", "--expert-parallel"})
      if (a.has(f)) throw std::invalid_argument(std::string("steering works with plain sampling only, not with ") + f);
  }
  for (const char* f : {"--kv-quant", "--kv-quant-k", "--kv-quant-v"})
    if (a.has(f) && !a.has("--prompts"))
      throw std::invalid_argument(std::string("generate reads ") + f + " only with --prompts (the paged cache)");
  if (a.has("--context-parallel") || a.has("--expert-parallel")) {
    for (const char* f : {"--prompts", "--beams", "--contrastive", "--draft", "--draft-layers"})
      if (a.has(f))
        throw std::invalid_argument(
            std::string("--context-parallel / --expert-parallel work with plain sampling only, not with ") + f);
  }
  if (a.has("--cp-shard-tokens") && !a.has("--context-parallel"))
    throw std::invalid_argument("--cp-shard-tokens needs --context-parallel");
  if (a.has("--prompts")) {  // prefix reuse over a file of prompts, one per line
    std::ifstream f(a.str("--prompts"));
    if (!f) throw std::invalid_argument("cannot open --prompts file '" + a.str("--prompts") + "'");
    std::vector<std::vector<TokenId>> prompts;
    std::string line;
    while (std::getline(f, line))
      if (line.find_first_not_of(" \t\r") != std::string::npos) prompts.push_back(parse_ids(line, "--prompts"));
    const Index page = a.integer("--page-size", 16);
    if (page < 1) throw std::invalid_argument("--page-size must be >= 1");
    llama2c::PrefixReuseStats ps;
    const auto t0 = std::chrono::steady_clock::now();
    const auto outs = llama2c::serve_prompts(model, prompts, steps, s, page, a.str("--model"), true, &ps,
                                             quant_config(a, model.config().head_size()));
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& o : outs) {
      if (a.has("--print-ids")) print_ids(o);
      out.insert(out.end(), o.begin(), o.end());
    }
    std::fprintf(stderr, "prefix reuse: prefill tokens computed %ld, saved %ld (%.1f%%)\n",
                 static_cast<long>(ps.prefill_computed), static_cast<long>(ps.prefill_saved),
                 100.0 * double(ps.prefill_saved) / double(std::max<Index>(1, ps.prefill_computed + ps.prefill_saved)));
    std::fprintf(stderr, "%zu tokens in %.3f s: %.1f tokens/s\n", out.size(), st.seconds,
                 double(out.size()) / st.seconds);
    return 0;
  }
  if (steer) {  // plain sampling with a residual hook
    const auto sv = llama2c::build_steering_vector(model, *steer);
    std::fprintf(stderr, "%s\n", llama2c::describe(*steer, sv).c_str());
    const auto plan = llama2c::make_plan(model, *steer, sv.v);
    const auto hook = llama2c::steering_hook(plan, 1 + static_cast<Index>(prompt.size()));
    out = llama2c::generate(model, prompt, steps, s, &st, {.hook = &hook});
  } else if (a.has("--beams")) {
    llama2c::BeamOptions bo{.beams = static_cast<Index>(a.integer("--beams", 4)),
                            .length_penalty = a.real("--length-penalty", 1.0f)};
    const std::string mode = a.str("--length-penalty-mode", "hf");
    if (mode == "hf")
      bo.mode = inferkit::LengthPenalty::kHuggingFace;
    else if (mode == "gnmt")
      bo.mode = inferkit::LengthPenalty::kGnmt;
    else if (mode == "none")
      bo.mode = inferkit::LengthPenalty::kNone;
    else
      throw std::invalid_argument("--length-penalty-mode = '" + mode + "' is invalid: must be hf, gnmt or none");
    out = llama2c::generate_beam(model, prompt, steps, bo, &st);
  } else if (a.has("--contrastive")) {
    out = llama2c::generate_contrastive(
        model, prompt, steps,
        {.k = static_cast<Index>(a.integer("--contrastive", 4)), .alpha = a.real("--alpha", 0.6f)}, &st);
  } else if (a.has("--draft") || a.has("--draft-layers")) {
    const Index k = a.integer("--draft-k", 4);
    if (k < 1 || k > 7) throw std::invalid_argument("--draft-k must be in [1, 7]");
    std::optional<llama2c::Model> draft;
    if (a.has("--draft")) draft = llama2c::Model::load_any(a.str("--draft"));
    const int layers = static_cast<int>(a.integer("--draft-layers", model.config().n_layers));
    if (!draft && (layers < 1 || layers > model.config().n_layers))
      throw std::invalid_argument("--draft-layers must be in [1, " + std::to_string(model.config().n_layers) + "]");
    out = llama2c::generate_speculative(model, draft ? &*draft : nullptr, layers, prompt, steps, k, s, &st);
    std::fprintf(stderr, "speculative: acceptance %.3f, tokens per target pass %.2f (k = %ld)\n",
                 st.drafted ? double(st.accepted) / double(st.drafted) : 0.0,
                 st.target_passes ? double(out.size()) / double(st.target_passes) : 0.0, static_cast<long>(k));
  } else if (a.has("--context-parallel") || a.has("--expert-parallel")) {
#ifdef INFERKIT_LLAMA2C_MPI
    int ranks = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    llama2c::CacheOptions copt;
    std::optional<llama2c::ContextParallelShard> shard;
    if (a.has("--context-parallel")) {
      const Index per = a.integer("--cp-shard-tokens", (model.config().seq_len + ranks - 1) / ranks);
      if (per < 1 || per > std::numeric_limits<std::int32_t>::max())
        throw std::invalid_argument("--cp-shard-tokens must be >= 1");
      shard.emplace(MPI_COMM_WORLD, static_cast<std::int32_t>(per));
      copt.shard = &*shard;
    }
    std::optional<llama2c::ExpertParallelMoe> experts;
    if (a.has("--expert-parallel")) {
      if (!model.config().moe())
        throw std::invalid_argument("--expert-parallel needs an MoE model (make-random --experts)");
      experts.emplace(MPI_COMM_WORLD, model.config().n_experts);
      model.moe_ffn().parallel = &*experts;
    }
    out = llama2c::generate(model, prompt, steps, s, &st, {.cache = copt});
    if (model.config().moe()) model.moe_ffn().parallel = nullptr;
#else
    throw std::invalid_argument(
        "--context-parallel / --expert-parallel need inferkit-llama2c built with MPI (INFERKIT_WITH_MPI)");
#endif
  } else {
    out = llama2c::generate(model, prompt, steps, s, &st);
  }
  if (a.has("--print-ids")) print_ids(out);
  if (tok) {  // the text, as llama2.c prints it
    std::string text;
    TokenId prev = llama2c::kBos;
    for (TokenId t : prompt) text += tok->decode(std::exchange(prev, t), t);
    for (TokenId t : out) text += tok->decode(std::exchange(prev, t), t);
    std::printf("%s\n", text.c_str());
  }
  if (model.config().moe()) std::fprintf(stderr, "%s\n", model.moe_ffn().totals.describe().c_str());
  std::fprintf(stderr, "%zu tokens in %.3f s: %.1f tokens/s\n", out.size(), st.seconds,
               double(out.size()) / st.seconds);
  return 0;
}

int cmd_eval(int argc, char** argv) {
  const Args a(argc, argv, 2,
               with(with(with({"--model", "--eval-ids", "--eval-range", "--eval-chunk", "--cache", "--window",
                               "--sinks", "--positions", "--kv-quant", "--kv-quant-k", "--kv-quant-v", "--tokenizer",
                               "--attn-arith", "--page-size"},
                              llama2c::kSteeringValueFlags),
                         kQuantValueFlags),
                    kMoeValueFlags),
               with(with(with({"--batch-invariant"}, llama2c::kSteeringSwitches), kQuantSwitches), kMoeSwitches));
  if (!a.has("--model")) throw std::invalid_argument("eval needs --model PATH");
  if (!a.has("--eval-ids")) throw std::invalid_argument("eval needs --eval-ids FILE");
  const auto arithmetic = attn_arith(a);  // checked before any work
  auto model = llama2c::Model::load_any(a.str("--model"));
  const std::size_t weight_bytes = apply_quant_flags(a, model);
  apply_moe_flags(a, model);
  std::ifstream f(a.str("--eval-ids"));
  if (!f) throw std::invalid_argument("cannot open --eval-ids file '" + a.str("--eval-ids") + "'");
  std::stringstream text;
  text << f.rdbuf();
  const auto ids = parse_ids(text.str(), "--eval-ids");
  if (ids.size() < 2) throw std::invalid_argument("--eval-ids needs at least 2 tokens");
  Index first = 1, last = static_cast<Index>(ids.size());
  if (a.has("--eval-range")) {
    const std::string r = a.str("--eval-range");
    const auto colon = r.find(':');
    if (colon == std::string::npos) throw std::invalid_argument("--eval-range must be A:B");
    try {
      if (colon > 0) first = std::stol(r.substr(0, colon));
      if (colon + 1 < r.size()) last = std::stol(r.substr(colon + 1));
    } catch (const std::exception&) {
      throw std::invalid_argument("--eval-range = '" + r + "' is invalid: must be A:B with integers");
    }
  }
  llama2c::CacheOptions c;
  const std::string kind = a.str("--cache", "dense");
  if (kind == "dense")
    c.kind = llama2c::CacheKind::kDense;
  else if (kind == "window")
    c.kind = llama2c::CacheKind::kWindow;
  else if (kind == "sink-window")
    c.kind = llama2c::CacheKind::kSinkWindow;
  else if (kind == "paged")
    c.kind = llama2c::CacheKind::kPaged;
  else
    throw std::invalid_argument("--cache = '" + kind + "' is invalid: must be dense, window, sink-window or paged");
  if (a.has("--page-size") && kind != "paged") throw std::invalid_argument("--page-size goes with --cache paged");
  c.window = a.integer("--window", 64);
  c.sinks = a.integer("--sinks", 4);
  const std::string pos = a.str("--positions", "original");
  if (pos == "original")
    c.positions = inferkit::PositionPolicy::kOriginal;
  else if (pos == "cache")
    c.positions = inferkit::PositionPolicy::kCache;
  else
    throw std::invalid_argument("--positions = '" + pos + "' is invalid: must be original or cache");
  c.quant = quant_config(a, model.config().head_size());
  c.arithmetic = arithmetic;
  c.batch_invariant = a.has("--batch-invariant");
  // --cache paged: one sequence's pages from a block pool (quantized pages with --kv-quant,
  // under llama2c::paged_quant's specs: no residual, per-channel key groups within a page).
  const Index page = a.integer("--page-size", 16);
  if (page < 1) throw std::invalid_argument("--page-size must be >= 1");
  inferkit::BlockPoolConfig pc{model.config().n_layers, model.config().n_kv_heads, model.config().head_size(), page,
                               static_cast<Index>(ids.size()) / page + 1};
  std::optional<inferkit::BlockPool<float>> fpool;
  std::optional<inferkit::BlockPool<inferkit::QuantizedKv>> qpool;
  if (c.kind == llama2c::CacheKind::kPaged) {
    if (c.quant) {
      pc.quant = llama2c::paged_quant(*c.quant, page);
      c.quant_pool = &qpool.emplace(pc);
    } else {
      c.pool = &fpool.emplace(pc);
    }
  }
  std::optional<llama2c::Tokenizer> tok;
  if (a.has("--tokenizer")) tok = llama2c::Tokenizer::load(a.str("--tokenizer"), model.config().vocab_size);
  if (const auto steer = steering_spec(a, tok ? &*tok : nullptr)) {  // NLL and token-set probability, without and with
    const auto sv = llama2c::build_steering_vector(model, *steer);
    std::fprintf(stderr, "%s\n", llama2c::describe(*steer, sv).c_str());
    const auto plan = llama2c::make_plan(model, *steer, sv.v);
    const auto set = parse_ids(a.str("--steer-tokens"), "--steer-tokens");
    const auto e = llama2c::evaluate_steering(model, ids, plan, set, c, first, last);
    std::printf(
        "steering predicted %ld layer %d scale %g ablate %d v_norm %.6g state_norm %.6g nll_base %.6f nll_steered %.6f "
        "nll_shift %.6f p_set_base %.6f p_set_steered %.6f p_set_shift %.6f\n",
        static_cast<long>(e.count), steer->layer, double(steer->scale), steer->ablate ? 1 : 0, sv.v_norm,
        sv.mean_state_norm, e.nll_base, e.nll_steered, e.nll_steered - e.nll_base, e.set_prob_base, e.set_prob_steered,
        e.set_prob_steered - e.set_prob_base);
    return 0;
  }
  if (a.has("--tokenizer")) throw std::invalid_argument("eval reads --tokenizer only for text steering prompts");
  const auto r = llama2c::evaluate(model, ids, c, first, last, a.integer("--eval-chunk", 1));
  std::printf("tokens %zu predicted %ld mean_nll %.6f ppl %.4f kv_bytes %.0f weight_bytes %zu attn_arith %s\n",
              ids.size(), static_cast<long>(r.count), r.mean_nll, r.ppl(), r.kv_bytes, weight_bytes,
              inferkit::arithmetic_name(c.arithmetic));
  if (model.config().moe()) std::printf("%s\n", model.moe_ffn().totals.describe().c_str());
  return 0;
}

// "A:B" with integers A <= B.
std::pair<Index, Index> int_range(const Args& a, const std::string& flag, std::pair<Index, Index> def) {
  if (!a.has(flag)) return def;
  const std::string r = a.str(flag);
  const auto colon = r.find(':');
  try {
    if (colon != std::string::npos) {
      std::size_t u1 = 0, u2 = 0;
      const std::string lo = r.substr(0, colon), hi = r.substr(colon + 1);
      const long x = std::stol(lo, &u1), y = std::stol(hi, &u2);
      if (u1 == lo.size() && u2 == hi.size() && x >= 1 && x <= y) return {x, y};
    }
  } catch (const std::exception&) {}
  throw std::invalid_argument(flag + " = '" + r + "' is invalid: must be A:B with integers 1 <= A <= B");
}

int cmd_serve(int argc, char** argv) {
  const Args a(argc, argv, 2,
               {"--model",
                "--trace",
                "--tokenizer",
                "--synthetic",
                "--rate",
                "--shared-prefixes",
                "--prefix-len",
                "--prompt-len",
                "--output-len",
                "--workload-seed",
                "--temperature",
                "--top-k",
                "--top-p",
                "--max-batched-tokens",
                "--max-seqs",
                "--chunk",
                "--max-prefill-tokens",
                "--page-size",
                "--kv-blocks",
                "--policy",
                "--static-batch",
                "--threads",
                "--virtual-time",
                "--out",
                "--kv-quant",
                "--kv-quant-k",
                "--kv-quant-v"},
               {"--deterministic", "--no-prefix-cache"});
  if (!a.has("--model")) throw std::invalid_argument("serve needs --model PATH");
  if (a.has("--trace") == a.has("--synthetic"))
    throw std::invalid_argument("serve needs one of --trace FILE or --synthetic N");
  const auto model = llama2c::Model::load(a.str("--model"));
  const int vocab = model.config().vocab_size;
  std::vector<llama2c::TraceRequest> trace;
  if (a.has("--trace")) {
    for (const char* f : {"--rate", "--shared-prefixes", "--prefix-len", "--prompt-len", "--output-len",
                          "--workload-seed", "--temperature", "--top-k", "--top-p"})
      if (a.has(f))
        throw std::invalid_argument(std::string(f) +
                                    " applies to --synthetic only (a trace gives each request's values)");
    std::optional<llama2c::Tokenizer> tok;
    if (a.has("--tokenizer")) tok = llama2c::Tokenizer::load(a.str("--tokenizer"), vocab);
    std::ifstream f(a.str("--trace"));
    if (!f) throw std::invalid_argument("cannot open --trace file '" + a.str("--trace") + "'");
    trace = llama2c::parse_trace(f, {.vocab_size = vocab, .tokenizer = tok ? &*tok : nullptr});
  } else {
    if (a.has("--tokenizer")) throw std::invalid_argument("--tokenizer applies to --trace text prompts only");
    llama2c::ServingWorkloadConfig w;
    std::tie(w.prompt_min, w.prompt_max) = int_range(a, "--prompt-len", {32, 512});
    std::tie(w.output_min, w.output_max) = int_range(a, "--output-len", {16, 256});
    w.shared_prefixes = static_cast<int>(a.integer("--shared-prefixes", 16));
    if (w.shared_prefixes < 0) throw std::invalid_argument("--shared-prefixes must be >= 0");
    w.prefix_tokens = a.integer("--prefix-len", 0);
    if (w.prefix_tokens < 0) throw std::invalid_argument("--prefix-len must be >= 0 (0: half of each prompt)");
    w.vocab = vocab;
    w.seed = static_cast<unsigned>(a.integer("--workload-seed", 1));
    llama2c::SamplingConfig s;
    s.params.temperature = a.real("--temperature", 1.0f);
    s.params.top_k = a.integer("--top-k", 0);
    s.params.top_p = a.real("--top-p", 1.0f);
    llama2c::make_chain(s);
    trace = llama2c::synthetic_trace(a.integer("--synthetic", 0), a.real("--rate", 0.0f), w, s);
  }
  llama2c::ServeOptions o;
  o.scheduler.max_batched_tokens = a.integer("--max-batched-tokens", 512);
  o.scheduler.max_sequences = a.integer("--max-seqs", 64);
  const std::string chunk = a.str("--chunk", "0");
  if (chunk == "none")
    o.scheduler.chunked_prefill = false;
  else
    o.scheduler.max_prefill_chunk = a.integer("--chunk", 0);
  o.scheduler.max_prefill_tokens = a.integer("--max-prefill-tokens", 0);
  const std::string policy = a.str("--policy", "fcfs");
  if (policy == "fcfs")
    o.scheduler.policy = inferkit::SchedulingPolicy::kFcfs;
  else if (policy == "lpm")
    o.scheduler.policy = inferkit::SchedulingPolicy::kLongestPrefixMatch;
  else
    throw std::invalid_argument("--policy = '" + policy + "' is invalid: must be fcfs or lpm");
  o.page_size = a.integer("--page-size", 16);
  o.kv_blocks = a.integer("--kv-blocks", 0);
  o.kv_quant = quant_config(a, model.config().head_size());
  o.prefix_cache = !a.has("--no-prefix-cache");
  o.deterministic = a.has("--deterministic");
  o.static_batch = a.integer("--static-batch", 0);
  o.threads = static_cast<int>(a.integer("--threads", 0));
  if (o.threads < 0) throw std::invalid_argument("--threads must be >= 0 (0: OpenMP's default)");
  if (o.threads > 0) Eigen::setNbThreads(o.threads);  // the default mode's matmuls
  o.fingerprint = a.str("--model");
  std::optional<llama2c::IterationClock> virtual_clock;
  if (a.has("--virtual-time")) {
    const float ms = a.real("--virtual-time", 1.0f);
    if (!(ms > 0)) throw std::invalid_argument("--virtual-time must be > 0 (ms per iteration)");
    o.clock = &virtual_clock.emplace(ms);
  }
  const auto rep = llama2c::serve(model, trace, o);
  if (a.has("--out")) {
    std::ofstream f(a.str("--out"));
    if (!f) throw std::invalid_argument("cannot write --out file '" + a.str("--out") + "'");
    llama2c::write_results(f, rep);
  } else {
    llama2c::write_results(std::cout, rep);
  }
  std::fprintf(stderr, "%s\n", llama2c::summary_line(rep.summary).c_str());
  return 0;
}

int cmd_make_random(int argc, char** argv) {
  const Args a(argc, argv, 2,
               {"--out", "--dim", "--hidden", "--layers", "--heads", "--kv-heads", "--vocab", "--seq-len", "--seed",
                "--experts", "--experts-per-token", "--router"},
               {});
  if (!a.has("--out")) throw std::invalid_argument("make-random needs --out PATH");
  llama2c::Config c;
  c.dim = static_cast<int>(a.integer("--dim", 288));
  c.hidden_dim = static_cast<int>(a.integer("--hidden", 768));
  c.n_layers = static_cast<int>(a.integer("--layers", 6));
  c.n_heads = static_cast<int>(a.integer("--heads", 6));
  c.n_kv_heads = static_cast<int>(a.integer("--kv-heads", c.n_heads));
  c.vocab_size = static_cast<int>(a.integer("--vocab", 32000));
  c.seq_len = static_cast<int>(a.integer("--seq-len", 256));
  if (a.has("--experts") != a.has("--experts-per-token"))
    throw std::invalid_argument("--experts and --experts-per-token go together");
  if (a.has("--router") && !a.has("--experts")) throw std::invalid_argument("--router needs --experts");
  c.n_experts = static_cast<int>(a.integer("--experts", 0));
  c.experts_per_token = static_cast<int>(a.integer("--experts-per-token", 0));
  if (a.has("--experts") && c.n_experts < 1) throw std::invalid_argument("--experts must be >= 1");
  if (a.has("--router")) c.router = llama2c::parse_router_mode(a.str("--router"));
  llama2c::Model::random(c, static_cast<std::uint64_t>(a.integer("--seed", 1))).save(a.str("--out"));
  std::printf("wrote %s: dim %d hidden %d layers %d heads %d kv_heads %d vocab %d seq_len %d", a.str("--out").c_str(),
              c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len);
  if (c.moe())
    std::printf(" experts %d experts_per_token %d router %s", c.n_experts, c.experts_per_token,
                llama2c::router_mode_name(c.router));
  std::printf("\n");
  return 0;
}

}  // namespace

#ifdef INFERKIT_LLAMA2C_MPI
// MPI is initialized only for the distributed flags (so the binary runs without mpirun
// otherwise); every rank but 0 prints nothing on stdout.
struct MpiSession {
  bool active = false;
  MpiSession(int& argc, char**& argv) {
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--context-parallel" || std::string(argv[i]) == "--expert-parallel") active = true;
    if (!active) return;
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) std::fclose(stdout);
  }
  ~MpiSession() {
    if (active) MPI_Finalize();
  }
  // An error on one rank ends the job on every rank (the others may wait in a collective).
  void abort() const {
    if (active) MPI_Abort(MPI_COMM_WORLD, 1);
  }
};
#endif

int main(int argc, char** argv) {
#ifdef INFERKIT_LLAMA2C_MPI
  MpiSession mpi(argc, argv);
#endif
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "generate") return cmd_generate(argc, argv);
    if (cmd == "eval") return cmd_eval(argc, argv);
    if (cmd == "make-random") return cmd_make_random(argc, argv);
    if (cmd == "serve") return cmd_serve(argc, argv);
    std::fprintf(stderr,
                 "usage: inferkit-llama2c generate|eval|serve|make-random [flags] (see the comment atop main.cpp)\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "inferkit-llama2c: %s\n", e.what());
#ifdef INFERKIT_LLAMA2C_MPI
    mpi.abort();
#endif
    return 1;
  }
}
