// The runner's command line (examples/llama2c/flags.hpp, flag_table.hpp): the table is
// consistent (names, defaults, bounds, rules), every flag of the runner before the table
// exists under the same spelling in the same subcommands (the lists below were copied from
// the old main.cpp's accepted sets), the table's defaults are the library's and the loops'
// defaults, the parser rejects each kind of bad command line with a message naming the flag
// and the value, and --help lists exactly a subcommand's flags.

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "llama2c/beam.hpp"
#include "llama2c/contrastive.hpp"
#include "llama2c/flag_table.hpp"
#include "llama2c/sampling_flags.hpp"
#include "llama2c/serve.hpp"

namespace {

namespace cli = llama2c::cli;
using Catch::Contains;

// The old main.cpp's accepted flags per subcommand (value flags and switches together).
const std::set<std::string> kOldSampling = {
    "--sampler-order",  "--typical",      "--frequency-penalty",  "--presence-penalty",   "--min-keep",
    "--dynatemp-range", "--dynatemp-exp", "--top-n-sigma",        "--xtc-threshold",      "--xtc-probability",
    "--dry-multiplier", "--dry-base",     "--dry-allowed-length", "--dry-penalty-last-n", "--dry-breakers",
    "--mirostat",       "--mirostat-tau", "--mirostat-eta",       "--epsilon-cutoff",     "--eta-cutoff",
    "--min-new-tokens", "--exp-decay",    "--bad-words",          "--sequence-bias",      "--begin-suppress"};
const std::set<std::string> kOldSteering = {
    "--steer-pos",       "--steer-neg",    "--steer-layer",  "--steer-scale", "--steer-reduce",
    "--steer-positions", "--steer-tokens", "--steer-ablate", "--steer-unit",  "--steer-preserve-norm"};
const std::set<std::string> kOldQuant = {"--weights", "--outlier-threshold", "--smooth", "--calib-ids", "--act-int8"};
const std::set<std::string> kOldMoe = {"--router", "--capacity-factor", "--overflow-policy", "--moe-threads",
                                       "--reroute"};

std::set<std::string> united(std::set<std::string> a, std::initializer_list<std::set<std::string>> more) {
  for (const auto& m : more) a.insert(m.begin(), m.end());
  return a;
}

std::set<std::string> old_generate() {
  auto s = united({"--model",
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
                   "--spec",  // added with token trees and n-gram drafts (issue 31)
                   "--spec-nodes",
                   "--spec-top-k",
                   "--prompts",
                   "--page-size",
                   "--prompt",
                   "--tokenizer",
                   "--attn-arith",
                   "--kv-quant",
                   "--kv-quant-k",
                   "--kv-quant-v",
                   "--cp-shard-tokens",
                   "--print-ids",
                   "--context-parallel",
                   "--expert-parallel"},
                  {kOldSteering, kOldQuant, kOldSampling, kOldMoe});
  s.erase("--steer-tokens");  // the one change: generate took it only to reject it (an eval flag)
  s.insert("--grammar");      // added: constrained decoding (issue 30)
  s.insert("--json-schema");
  s.insert("--spec-ngram-min");  // added: prompt lookup's suffix lengths (issue 31)
  s.insert("--spec-ngram-max");
  s.insert("--sink-logit");  // added: learned attention-sink logits (issue 32)
  return s;
}
std::set<std::string> old_eval() {
  auto s = united(
      {"--model", "--eval-ids", "--eval-range", "--eval-chunk", "--cache", "--window", "--sinks", "--positions",
       "--kv-quant", "--kv-quant-k", "--kv-quant-v", "--tokenizer", "--attn-arith", "--page-size", "--batch-invariant"},
      {kOldSteering, kOldQuant, kOldMoe});
  s.insert("--sink-logit");  // added: learned attention-sink logits (issue 32)
  return s;
}
const std::set<std::string> kOldServe = {"--model",
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
                                         "--kv-quant-v",
                                         "--deterministic",
                                         "--no-prefix-cache"};
const std::set<std::string> kOldMakeRandom = {"--out",
                                              "--dim",
                                              "--hidden",
                                              "--layers",
                                              "--heads",
                                              "--kv-heads",
                                              "--vocab",
                                              "--seq-len",
                                              "--seed",
                                              "--experts",
                                              "--experts-per-token",
                                              "--router",
                                              "--type",  // added with GGUF output (issue 28)
                                              "--vocab-from"};
const std::set<std::string> kTokenize = {"--model", "--text", "--ids"};
const std::set<std::string> kConvert = {"--model", "--out", "--type", "--vocab-from"};
const std::set<std::string> kBench = {"--model", "--threads", "--pp", "--tg", "--reps"};

std::set<std::string> table_flags(cli::Commands c) {
  std::set<std::string> s;
  for (const auto& f : llama2c::flag_table().flags)
    if (f.commands & c) s.insert(std::string(f.name));
  return s;
}

// Parses a command line given as one string (words split at spaces).
cli::Flags parse(const std::string& command, const std::string& line) {
  std::vector<std::string> words{"inferkit-llama2c", command};
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  return cli::parse_flags(llama2c::flag_table(), command, static_cast<int>(argv.size()), argv.data(), 2);
}

std::string parse_error(const std::string& command, const std::string& line) {
  try {
    parse(command, line);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(parsed)";
}

}  // namespace

TEST_CASE("flag table: every flag declared once, defaults valid, rules over declared flags", "[example][cli]") {
  const cli::FlagTable& t = llama2c::flag_table();
  REQUIRE(t.commands.size() == 8);
  CHECK(t.command("generate") == llama2c::kGenerate);
  CHECK(t.command("eval") == llama2c::kEval);
  CHECK(t.command("serve") == llama2c::kServe);
  CHECK(t.command("make-random") == llama2c::kMakeRandom);
  CHECK(t.command("tokenize") == llama2c::kTokenize);
  CHECK(t.command("convert") == llama2c::kConvert);
  CHECK(t.command("bench") == llama2c::kBench);
  CHECK(t.command("quantize") == llama2c::kQuantize);
  const cli::Commands all = (cli::Commands{1} << t.commands.size()) - 1;
  std::set<std::string_view> names;
  for (const auto& f : t.flags) {
    INFO(f.name);
    CHECK(names.insert(f.name).second);
    CHECK(f.name.substr(0, 2) == "--");
    CHECK(f.commands != 0);
    CHECK((f.commands & ~all) == 0);
    CHECK((f.required & ~f.commands) == 0);
    CHECK(!f.help.empty());
    CHECK(!f.group.empty());
    CHECK(f.min <= f.max);
    CHECK((f.kind == cli::ValueKind::kChoice) == (!f.choices.empty() && f.kind != cli::ValueKind::kInteger));
    std::vector<std::string_view> defaults{f.default_value};
    for (const auto& v : f.variants) {
      CHECK((v.commands & ~f.commands) == 0);
      defaults.push_back(v.default_value);
    }
    for (std::string_view d : defaults)
      if (!d.empty()) CHECK_NOTHROW(cli::detail::check_value(f, std::string(d)));
    if (f.kind == cli::ValueKind::kSwitch) CHECK(f.default_value.empty());
  }
  for (const auto& r : t.rules) {
    CHECK(r.commands != 0);
    std::vector<std::string_view> conditions = r.flags;
    conditions.insert(conditions.end(), r.others.begin(), r.others.end());
    CHECK(!r.flags.empty());
    for (std::string_view c : conditions) {
      INFO(c);
      const auto eq = c.find('=');
      const cli::FlagSpec* f = t.find(c.substr(0, eq));
      REQUIRE(f != nullptr);
      CHECK((f->commands & r.commands) != 0);  // taken where the rule applies
      if (eq != std::string_view::npos) CHECK_NOTHROW(cli::detail::check_value(*f, std::string(c.substr(eq + 1))));
    }
  }
}

TEST_CASE("flag table: the runner's flags keep their spelling and subcommands", "[example][cli]") {
  CHECK(table_flags(llama2c::kGenerate) == old_generate());
  CHECK(table_flags(llama2c::kEval) == old_eval());
  CHECK(table_flags(llama2c::kServe) == kOldServe);
  CHECK(table_flags(llama2c::kMakeRandom) == kOldMakeRandom);
  CHECK(table_flags(llama2c::kTokenize) == kTokenize);
  CHECK(table_flags(llama2c::kConvert) == kConvert);
  CHECK(table_flags(llama2c::kBench) == kBench);
}

TEST_CASE("flag table: defaults are the library's and the loops' own", "[example][cli]") {
  // generate with no sampling flag samples with inferkit's SamplingParams defaults.
  const auto g = parse("generate", "--model m.bin");
  llama2c::SamplingConfig s;
  llama2c::apply_sampling_flags(g, s);
  const inferkit::SamplingParams p = s.params, d{};
  CHECK(p.temperature == d.temperature);
  CHECK(p.top_k == d.top_k);
  CHECK(p.top_p == d.top_p);
  CHECK(p.min_p == d.min_p);
  CHECK(p.typical_p == d.typical_p);
  CHECK(p.repetition_penalty == d.repetition_penalty);
  CHECK(p.frequency_penalty == d.frequency_penalty);
  CHECK(p.presence_penalty == d.presence_penalty);
  CHECK(p.min_keep == d.min_keep);
  CHECK(p.dynatemp_range == d.dynatemp_range);
  CHECK(p.dynatemp_exponent == d.dynatemp_exponent);
  CHECK(p.top_n_sigma == d.top_n_sigma);
  CHECK(p.xtc_probability == d.xtc_probability);
  CHECK(p.xtc_threshold == d.xtc_threshold);
  CHECK(p.dry_multiplier == d.dry_multiplier);
  CHECK(p.dry_base == d.dry_base);
  CHECK(p.dry_allowed_length == d.dry_allowed_length);
  CHECK(p.dry_penalty_last_n == d.dry_penalty_last_n);
  CHECK(p.dry_sequence_breakers == d.dry_sequence_breakers);
  CHECK(p.mirostat == d.mirostat);
  CHECK(p.mirostat_tau == d.mirostat_tau);
  CHECK(p.mirostat_eta == d.mirostat_eta);
  CHECK(p.epsilon_cutoff == d.epsilon_cutoff);
  CHECK(p.eta_cutoff == d.eta_cutoff);
  CHECK(p.min_new_tokens == d.min_new_tokens);
  CHECK(p.exponential_decay_factor == d.exponential_decay_factor);
  CHECK(p.bad_words.empty());
  CHECK(p.sequence_bias.empty());
  CHECK(p.begin_suppress_tokens.empty());
  CHECK(p.eos_token_ids.empty());
  const llama2c::SamplingConfig sd;
  CHECK(s.repeat_last_n == sd.repeat_last_n);
  CHECK(s.seed == sd.seed);
  CHECK(s.llama_cpp_order == sd.llama_cpp_order);
  // The loops' option structs.
  const llama2c::BeamOptions bo;
  CHECK(g.real("--length-penalty") == bo.length_penalty);
  CHECK(g.text("--length-penalty-mode") == "hf");
  CHECK(bo.mode == inferkit::LengthPenalty::kHuggingFace);
  CHECK(g.real("--alpha") == llama2c::ContrastiveOptions{}.alpha);
  const auto sv = parse("serve", "--model m.bin --synthetic 1");
  const llama2c::ServeOptions so;
  CHECK(sv.integer("--max-batched-tokens") == so.scheduler.max_batched_tokens);
  CHECK(sv.integer("--max-seqs") == so.scheduler.max_sequences);
  CHECK(sv.integer("--page-size") == so.page_size);
  CHECK(sv.integer("--kv-blocks") == so.kv_blocks);
  CHECK(sv.integer("--static-batch") == so.static_batch);
  const llama2c::ServingWorkloadConfig w;
  CHECK(sv.text("--prompt-len") == std::to_string(w.prompt_min) + ":" + std::to_string(w.prompt_max));
  CHECK(sv.text("--output-len") == std::to_string(w.output_min) + ":" + std::to_string(w.output_max));
  CHECK(sv.integer("--shared-prefixes") == w.shared_prefixes);
  CHECK(sv.integer("--prefix-len") == w.prefix_tokens);
  CHECK(sv.integer("--workload-seed") == w.seed);
  // make-random: stories15M's shape (llama2.c's), weight seed 1, its own --seed default.
  const auto mr = parse("make-random", "--out x.bin");
  const llama2c::Config c15 = llama2c::stories15M_shape();
  CHECK(mr.integer("--dim") == c15.dim);
  CHECK(mr.integer("--hidden") == c15.hidden_dim);
  CHECK(mr.integer("--layers") == c15.n_layers);
  CHECK(mr.integer("--heads") == c15.n_heads);
  CHECK(mr.integer("--vocab") == c15.vocab_size);
  CHECK(mr.integer("--seq-len") == c15.seq_len);
  CHECK(mr.integer("--seed") == 1);
  CHECK(g.integer("--seed") == 42);
  CHECK(mr.text("--router") == llama2c::router_mode_name(llama2c::Config{}.router));
}

TEST_CASE("flag parser: every bad command line names the flag and the value", "[example][cli][errors]") {
  const std::string m = "--model m.bin ";
  CHECK_THAT(parse_error("generate", m + "--bogus 1"), Contains("unknown flag '--bogus'"));
  CHECK_THAT(parse_error("generate", m + "--threads 4"),
             Contains("generate does not take --threads 4 (serve and bench do)"));
  CHECK_THAT(parse_error("eval", m + "--eval-ids x --steps 3"),
             Contains("eval does not take --steps 3 (generate does)"));
  CHECK_THAT(parse_error("generate", m + "--steps"), Contains("flag --steps needs a value"));
  CHECK_THAT(parse_error("generate", m + "--steps x"),
             Contains("--steps = 'x' is invalid: must be an integer in [1, 2^31-1]"));
  CHECK_THAT(parse_error("generate", m + "--steps 0"),
             Contains("--steps = 0 is invalid: must be an integer in [1, 2^31-1]"));
  CHECK_THAT(parse_error("generate", m + "--steps 2147483648"), Contains("--steps = 2147483648 is invalid"));
  CHECK_THAT(parse_error("generate", m + "--steps 99999999999999999999"),
             Contains("--steps = '99999999999999999999' is invalid"));
  CHECK_THAT(parse_error("generate", m + "--draft-layers 1 --draft-k 8"),
             Contains("--draft-k = 8 is invalid: must be an integer in [1, 7]"));
  CHECK_THAT(parse_error("generate", m + "--temperature warm"),
             Contains("--temperature = 'warm' is invalid: must be a number"));
  CHECK_THAT(parse_error("eval", m + "--eval-ids x --cache nope"),
             Contains("--cache = 'nope' is invalid: must be dense, window, sink-window or paged"));
  CHECK_THAT(parse_error("serve", m + "--synthetic 2 --threads 65535"),
             Contains("--threads = 65535 is invalid: must be 0 (OpenMP's default) or 1..1024"));
  CHECK_THAT(parse_error("serve", m + "--synthetic 2 --threads -1"), Contains("--threads = -1 is invalid"));
  CHECK_THAT(parse_error("eval", m + "--eval-ids x --moe-threads 2000"), Contains("--moe-threads = 2000 is invalid"));
  CHECK_THAT(parse_error("serve", m + "--synthetic 2 --chunk nine"),
             Contains("--chunk = 'nine' is invalid: must be an integer in [0, 2^31-1] or none"));
  CHECK_NOTHROW(parse("serve", m + "--synthetic 2 --chunk none"));
  // Required flags.
  CHECK_THAT(parse_error("generate", ""), Contains("generate needs --model PATH"));
  CHECK_THAT(parse_error("eval", m), Contains("eval needs --eval-ids FILE"));
  CHECK_THAT(parse_error("make-random", "--dim 8"), Contains("make-random needs --out FILE"));
  // Each kind of rule.
  CHECK_THAT(parse_error("generate", m + "--prompt hi --prompt-ids 5"),
             Contains("give --prompt or --prompt-ids, not both"));
  CHECK_THAT(parse_error("generate", m + "--steer-layer 1"), Contains("--steer-layer needs"));  // needs
  CHECK_THAT(parse_error("generate", m + "--draft-k 3"),
             Contains("--draft-k needs --draft, --draft-layers or --spec ngram"));  // one of
  CHECK_THAT(
      parse_error("generate", m + "--beams 2 --contrastive 3"),
      Contains("--beams and --contrastive exclude each other (generate runs one decoding mode)"));  // at most one
  CHECK_THAT(parse_error("generate", m + "--alpha 0.5"), Contains("--alpha needs --contrastive"));
  CHECK_THAT(parse_error("generate", m + "--attn-arith reduced --beams 2"),
             Contains("--attn-arith reduced works with plain sampling only, not with --beams"));  // flag=value
  CHECK_NOTHROW(parse("generate", m + "--attn-arith exact --beams 2"));
  CHECK_THAT(parse_error("generate", m + "--kv-quant int8"), Contains("--kv-quant needs --prompts"));
  CHECK_THAT(parse_error("eval", m + "--eval-ids x --page-size 8"), Contains("--page-size needs --cache paged"));
  CHECK_NOTHROW(parse("eval", m + "--eval-ids x --page-size 8 --cache paged"));
  CHECK_THAT(parse_error("make-random", "--out x --experts 8"),
             Contains("--experts and --experts-per-token go together"));
  CHECK_THAT(parse_error("make-random", "--out x --router sigmoid"), Contains("--router needs --experts"));
  CHECK_THAT(parse_error("serve", m), Contains("serve needs one of --trace FILE or --synthetic N"));  // exactly one
  CHECK_THAT(parse_error("serve", m + "--trace t --synthetic 3"),
             Contains("serve needs one of --trace FILE or --synthetic N"));
  CHECK_THAT(parse_error("serve", m + "--trace t --top-k 3"), Contains("--top-k applies to --synthetic only"));
  CHECK_THAT(parse_error("generate", m + "--steer-pos p --steer-neg n --steer-layer 0 --draft-layers 1"),
             Contains("steering works with plain sampling only, not with --draft-layers"));
  // The last of a repeated flag wins (as before the table).
  CHECK(parse("generate", m + "--steps 3 --steps 5").integer("--steps") == 5);
}

TEST_CASE("flag parser: reading an undeclared flag, or one the subcommand does not take, is a logic error",
          "[example][cli]") {
  const auto g = parse("generate", "--model m.bin");
  CHECK_THROWS_AS(g.has("--no-such-flag"), std::logic_error);
  CHECK_THROWS_AS(g.integer("--threads"), std::logic_error);  // a serve flag
  CHECK_THROWS_AS(g.real("--steps"), std::logic_error);       // an integer flag read as a number
  CHECK_THROWS_AS(g.integer("--beams"), std::logic_error);    // no default: has() first
  CHECK(g.integer("--steps") == 256);
}

TEST_CASE("runner --help: generated from the table, every flag of the subcommand once, lines within 100 columns",
          "[example][cli]") {
  const cli::FlagTable& t = llama2c::flag_table();
  for (const auto& [name, bit, old] : std::vector<std::tuple<std::string, cli::Commands, std::set<std::string>>>{
           {"generate", llama2c::kGenerate, old_generate()},
           {"eval", llama2c::kEval, old_eval()},
           {"serve", llama2c::kServe, kOldServe},
           {"make-random", llama2c::kMakeRandom, kOldMakeRandom},
           {"tokenize", llama2c::kTokenize, kTokenize},
           {"convert", llama2c::kConvert, kConvert},
           {"bench", llama2c::kBench, kBench}}) {
    INFO(name);
    const std::string h = cli::help(t, name);
    std::set<std::string> listed;
    std::istringstream lines(h);
    for (std::string line; std::getline(lines, line);) {
      CHECK(line.size() <= 100);
      if (line.rfind("  --", 0) == 0) {
        std::istringstream words(line);
        std::string flag;
        words >> flag;
        CHECK(listed.insert(flag).second);
      }
    }
    CHECK(listed == old);
    CHECK_THAT(h, Contains("usage: inferkit-llama2c " + name));
  }
  // The notes after a flag's help (wrapped lines joined).
  std::string g;
  {
    std::istringstream words(cli::help(t, "generate"));
    for (std::string w; words >> w;) g += (g.empty() ? "" : " ") + w;
  }
  CHECK_THAT(g, Contains("--steps N"));
  CHECK_THAT(
      g, Contains("--steps N tokens to generate (per prompt with --prompts) (default 256; integer in [1, 2^31-1])"));
  CHECK_THAT(g, Contains("--draft-k K speculative decoding: tokens drafted per round (default 4; integer in [1, 7])"));
  CHECK_THAT(g, Contains("--attn-arith exact|reduced"));
  CHECK_THAT(cli::help(t, "make-random"), Contains("seed of the random weights (default 1)"));
  const std::string top = cli::help(t);
  for (const char* c : {"generate", "eval", "serve", "make-random"}) CHECK_THAT(top, Contains(std::string("  ") + c));
}
