#pragma once
// `inferkit-llama2c serve`: a trace file (trace.hpp) or a synthetic workload
// (serving_workload.hpp) served by serve.hpp's loop under the scheduler flags; one JSON line
// per request to --out or stdout, the summary line to stderr.
//
//   return llama2c::cmd_serve(cli::parse_flags(llama2c::flag_table(), "serve", argc, argv, 2));

#include <Eigen/Core>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bounds.hpp"
#include "cmd_common.hpp"
#include "flag_table.hpp"
#include "serve.hpp"

namespace llama2c {

/// The requests of --trace FILE, or of --synthetic N.
inline std::vector<TraceRequest> serve_requests(const cli::Flags& a, const Model& model) {
  const int vocab = model.config().vocab_size;
  if (a.has("--trace")) {
    // --tokenizer, else the GGUF model's own vocabulary; BOS as the model's tokenizer adds it
    const auto text = TextCodec::open(a.text("--model"), a.has("--tokenizer") ? a.text("--tokenizer") : "", vocab);
    std::ifstream f(a.text("--trace"));
    if (!f) throw std::invalid_argument("cannot open --trace file '" + a.text("--trace") + "'");
    // The model's token bytes serve both text prompts and requests with a grammar or json_schema.
    return parse_trace(f, {.vocab_size = vocab,
                           .text = text ? &*text : nullptr,
                           .bos = model.config().bos,
                           .grammar_trie = text ? grammar_trie(&*text, vocab) : nullptr});
  }
  ServingWorkloadConfig w;
  std::tie(w.prompt_min, w.prompt_max) = int_range(a, "--prompt-len");
  std::tie(w.output_min, w.output_max) = int_range(a, "--output-len");
  w.shared_prefixes = static_cast<int>(a.integer("--shared-prefixes"));
  w.prefix_tokens = a.integer("--prefix-len");
  w.vocab = vocab;
  w.seed = static_cast<unsigned>(a.integer("--workload-seed"));
  {  // the synthetic prompts and system prompts, bounded before they are drawn
    // Each request also holds its TraceRequest, its sampler chain and state and its result in
    // serve() (their inline parts; the heap parts of the chain and state are a few small
    // vectors), so even 2-token prompts cost a few hundred bytes a request.
    constexpr double kPerRequest =
        sizeof(TraceRequest) + sizeof(inferkit::SamplerChain) + sizeof(inferkit::SamplerState) + sizeof(RequestResult);
    const double prompt_bytes = double(w.prompt_max) * sizeof(TokenId);
    require_fits_memory("--synthetic", a.integer("--synthetic"),
                        double(a.integer("--synthetic")) * (prompt_bytes + kPerRequest),
                        "prompts of up to " + std::to_string(w.prompt_max) + " tokens (--prompt-len) and " +
                            std::to_string(long(kPerRequest)) + " bytes of state per request");
    require_fits_memory("--shared-prefixes", w.shared_prefixes,
                        double(w.shared_prefixes) * double(std::max(w.prompt_max, w.prefix_tokens)) * sizeof(TokenId),
                        "system prompts of " + std::to_string(std::max(w.prompt_max, w.prefix_tokens)) + " tokens");
  }
  SamplingConfig s;
  s.params.temperature = a.real("--temperature");
  s.params.top_k = a.integer("--top-k");
  s.params.top_p = a.real("--top-p");
  make_chain(s);
  return synthetic_trace(a.integer("--synthetic"), a.real("--rate"), w, s);
}

/// The serve subcommand (see flag_table()).
inline int cmd_serve(const cli::Flags& a) {
  const auto model = Model::load(a.text("--model"));  // GGUF in any type: batch_forward.hpp runs its blocks
  const auto trace = serve_requests(a, model);
  ServeOptions o;
  o.scheduler.max_batched_tokens = a.integer("--max-batched-tokens");
  o.scheduler.max_sequences = a.integer("--max-seqs");
  if (a.text("--chunk") == "none")
    o.scheduler.chunked_prefill = false;
  else
    o.scheduler.max_prefill_chunk = a.integer("--chunk");
  o.scheduler.max_prefill_tokens = a.integer("--max-prefill-tokens");
  o.scheduler.policy =
      a.text("--policy") == "lpm" ? inferkit::SchedulingPolicy::kLongestPrefixMatch : inferkit::SchedulingPolicy::kFcfs;
  o.page_size = a.integer("--page-size");
  o.kv_blocks = a.integer("--kv-blocks");
  o.kv_quant = quant_config(a, model.config().head_size());
  o.prefix_cache = !a.has("--no-prefix-cache");
  o.deterministic = a.has("--deterministic");
  o.static_batch = a.integer("--static-batch");
  o.num_threads = a.threads("--threads");
  set_runner_threads(o.num_threads);  // OpenMP and the default mode's matmuls (threads.hpp sizes each region)
  o.fingerprint = a.text("--model");
  std::optional<IterationClock> virtual_clock;
  if (a.has("--virtual-time")) {
    const float ms = a.real("--virtual-time");
    if (!(ms > 0)) throw std::invalid_argument("--virtual-time must be > 0 (ms per iteration)");
    o.clock = &virtual_clock.emplace(ms);
  }
  const auto rep = serve(model, trace, o);
  if (a.has("--out")) {
    std::ofstream f(a.text("--out"));
    if (!f) throw std::invalid_argument("cannot write --out file '" + a.text("--out") + "'");
    write_results(f, rep);
  } else {
    write_results(std::cout, rep);
  }
  std::fprintf(stderr, "%s\n", summary_line(rep.summary).c_str());
  return 0;
}

}  // namespace llama2c
