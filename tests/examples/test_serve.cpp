// `inferkit-llama2c serve`: the trace parser's errors, the fixed-order GEMM against an fp64
// product, and, on stories260K (INFERKIT_TEST_MODEL), every request's output under batching,
// chunking, prefix reuse and forced preemption against the one-request runner (generate()),
// and bitwise identical logits in deterministic mode across chunkings, batch mixes and threads.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>

#include "examples/cli_util.hpp"
#include "llama2c/generate.hpp"
#include "llama2c/serve.hpp"

using cli_test::run_cli;
using cli_test::test_model;

using llama2c::Index;
using llama2c::TokenId;

namespace {

// The error message of parsing `line` as line `n` (empty when it parses).
std::string trace_error(const std::string& line, Index n = 3, int vocab = 512) {
  try {
    llama2c::parse_trace_line(line, n, {.vocab_size = vocab});
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// A small trace over stories260K's vocabulary: prompts start with BOS, several share a prefix
// of `shared` tokens, lengths vary; greedy unless `temperature` > 0.
std::vector<llama2c::TraceRequest> small_trace(int n, Index shared, float temperature, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<TokenId> system(static_cast<std::size_t>(shared));
  for (auto& t : system) t = static_cast<TokenId>(3 + rng() % 500);
  std::vector<llama2c::TraceRequest> out;
  for (int i = 0; i < n; ++i) {
    llama2c::TraceRequest r;
    r.arrival_ms = 2.0 * i;  // a few arrive while others run
    r.prompt = {llama2c::kBos};
    if (i % 3 != 2) r.prompt.insert(r.prompt.end(), system.begin(), system.end());
    const int own = 1 + static_cast<int>(rng() % 11);
    for (int k = 0; k < own; ++k) r.prompt.push_back(static_cast<TokenId>(3 + rng() % 500));
    r.max_new_tokens = 3 + static_cast<Index>(rng() % 14);
    r.sampling.params.temperature = temperature;
    r.sampling.params.top_p = temperature > 0 ? 0.9f : 1.0f;
    r.sampling.seed = 100 + static_cast<std::uint64_t>(i);
    out.push_back(std::move(r));
  }
  return out;
}

struct Run {
  llama2c::ServeReport report;
  std::map<std::pair<Index, Index>, std::vector<float>> logits;  // (request, generated) -> logits
};

Run serve_run(const llama2c::Model& m, const std::vector<llama2c::TraceRequest>& trace, llama2c::ServeOptions o,
              bool keep_logits = false) {
  llama2c::IterationClock clock(1.0);
  o.clock = &clock;
  Run run;
  if (keep_logits)
    o.on_logits = [&](Index r, Index g, std::span<const float> lg) { run.logits[{r, g}].assign(lg.begin(), lg.end()); };
  run.report = llama2c::serve(m, trace, o);
  return run;
}

llama2c::ServeOptions options(Index budget, Index seqs, Index chunk, Index page, Index blocks, bool det) {
  llama2c::ServeOptions o;
  o.scheduler.max_batched_tokens = budget;
  o.scheduler.max_sequences = seqs;
  o.scheduler.max_prefill_chunk = chunk;
  o.page_size = page;
  o.kv_blocks = blocks;
  o.deterministic = det;
  return o;
}

}  // namespace

TEST_CASE("trace parser: a bad line names its line number and field", "[example][serve][errors]") {
  const auto has = [](const std::string& msg, const std::string& field) {
    INFO(msg);
    CHECK(msg.find("trace line 3") != std::string::npos);
    CHECK(msg.find("\"" + field + "\"") != std::string::npos);
  };
  has(trace_error(R"({"prompt_ids": [1, 2], "max_new_tokens": 0})"), "max_new_tokens");
  has(trace_error(R"({"prompt_ids": [1, 2], "max_new_tokens": 2.5})"), "max_new_tokens");
  has(trace_error(R"({"prompt_ids": [1, 2]})"), "max_new_tokens");
  has(trace_error(R"({"prompt_ids": [1, -2], "max_new_tokens": 4})"), "prompt_ids[1]");
  has(trace_error(R"({"prompt_ids": [1, 512], "max_new_tokens": 4})"), "prompt_ids[1]");
  has(trace_error(R"({"prompt_ids": [], "max_new_tokens": 4})"), "prompt_ids");
  has(trace_error(R"({"prompt_ids": [1, 2, "max_new_tokens": 4})"), "prompt_ids[2]");
  has(trace_error(R"({"prompt_ids": [1], "max_new_tokens": 4, "temperature": -1})"), "temperature");
  has(trace_error(R"({"prompt_ids": [1], "max_new_tokens": 4, "top_p": 0})"), "top_p");
  has(trace_error(R"({"prompt_ids": [1], "max_new_tokens": 4, "seed": -3})"), "seed");
  has(trace_error(R"({"prompt_ids": [1], "max_new_tokens": 4, "arrival_ms": "soon"})"), "arrival_ms");
  has(trace_error(R"({"prompt_ids": [1], "max_new_tokens": 4, "colour": 1})"), "colour");
  has(trace_error(R"({"prompt_ids": [1], "max_new_tokens": 4, "max_new_tokens": 5})"), "max_new_tokens");
  has(trace_error(R"({"prompt": "Once", "max_new_tokens": 4})"), "prompt");  // no tokenizer
  has(trace_error(R"({"prompt": "a\qb", "max_new_tokens": 4})"), "prompt");  // bad escape
  has(trace_error(R"({"prompt_ids": [1], "max_new_tokens": 4} trailing)"), "(line)");
  has(trace_error(R"([1, 2, 3])"), "(line)");
  has(trace_error(R"({"prompt_ids": [1], "max_new_tokens": 4)"), "max_new_tokens");  // unclosed
  has(trace_error(R"({"prompt_ids": [1], "max_new_tokens": 99999999999999999999})"), "max_new_tokens");
  has(trace_error(R"({"prompt_ids": [1], "max_new_tokens": 4, "eos_token_ids": [2, {}]})"), "eos_token_ids[1]");
  has(trace_error(std::string("{\"prompt_ids\": [1], \"max_new_tokens\": 4, \"prompt\x01\": 1}")), "(key)");

  // Truncations of a valid line fail cleanly (never crash), each naming line 3.
  const std::string good =
      R"({"arrival_ms": 1.5e1, "prompt_ids": [1, 7, 9], "max_new_tokens": 8, "temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repetition_penalty": 1.1, "repeat_last_n": 32, "seed": 18446744073709551615, "eos_token_ids": [2]})";
  for (std::size_t cut = 1; cut < good.size(); ++cut) {
    const std::string msg = trace_error(good.substr(0, cut));
    INFO(good.substr(0, cut));
    REQUIRE(msg.find("trace line 3, field \"") != std::string::npos);
  }
  const auto r = llama2c::parse_trace_line(good, 3, {.vocab_size = 512});
  REQUIRE(r);
  CHECK(r->arrival_ms == 15.0);
  CHECK(r->prompt == std::vector<TokenId>{1, 7, 9});
  CHECK(r->max_new_tokens == 8);
  CHECK(r->sampling.params.temperature == 0.7f);
  CHECK(r->sampling.params.top_k == 40);
  CHECK(r->sampling.params.min_p == 0.05f);
  CHECK(r->sampling.repeat_last_n == 32);
  CHECK(r->sampling.seed == 18446744073709551615ull);
  CHECK(r->eos_token_ids == std::vector<TokenId>{2});
  CHECK_FALSE(llama2c::parse_trace_line("  \t\r", 4));

  std::istringstream in(
      "{\"prompt_ids\": [1], \"max_new_tokens\": 2}\n\n{\"prompt_ids\": [1, 2], \"max_new_tokens\": 2, \"top_k\": "
      "-1}\n");
  try {
    llama2c::parse_trace(in);
    FAIL("no error");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("trace line 3, field \"top_k\"") != std::string::npos);
  }
}

TEST_CASE("fixed-order GEMM: fp64 product, and a row's bits whatever the batch", "[example][serve]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (const auto& [out, in] : {std::pair{37, 29}, std::pair{64, 64}, std::pair{5, 172}}) {
    llama2c::RowMatrix w(out, in);
    for (Index i = 0; i < w.size(); ++i) w.data()[i] = nd(rng);
    const llama2c::TransposedMatrix wt{llama2c::MatrixMap(w.data(), out, in)};
    const Index rows = 61;
    llama2c::RowMatrix x(rows, in), y(rows, out);
    for (Index i = 0; i < x.size(); ++i) x.data()[i] = nd(rng);
    llama2c::fixed_order_gemm(x.data(), rows, in, wt, y.data(), out, 2);
    for (Index r = 0; r < rows; ++r)
      for (Index o = 0; o < out; ++o) {
        double ref = 0, mag = 0;
        for (Index k = 0; k < in; ++k) {
          ref += double(x(r, k)) * double(w(o, k));
          mag += std::abs(double(x(r, k)) * double(w(o, k)));
        }
        REQUIRE(std::abs(double(y(r, o)) - ref) <= 1e-6 * mag + 1e-30);
      }
    // Each row alone, and rows 3..9 as a batch of 7 (another tile split), on one thread.
    for (Index r = 0; r < rows; ++r) {
      std::vector<float> alone(static_cast<std::size_t>(out));
      llama2c::fixed_order_gemm(x.row(r).data(), 1, in, wt, alone.data(), out, 1);
      for (Index o = 0; o < out; ++o) REQUIRE(alone[static_cast<std::size_t>(o)] == y(r, o));
    }
    llama2c::RowMatrix y7(7, out);
    llama2c::fixed_order_gemm(x.row(3).data(), 7, in, wt, y7.data(), out, 1);
    for (Index r = 0; r < 7; ++r)
      for (Index o = 0; o < out; ++o) REQUIRE(y7(r, o) == y(r + 3, o));
  }
}

TEST_CASE("serve: every greedy output equals the request served alone by generate()", "[example][serve][model]") {
  const std::string path = test_model();
  if (path.empty()) {
    WARN("INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  const auto m = llama2c::Model::load(path);
  const auto trace = small_trace(10, 20, 0.0f, 1);
  std::vector<std::vector<TokenId>> alone;
  llama2c::SamplingConfig greedy;
  greedy.params.temperature = 0.0f;
  for (const auto& r : trace)
    alone.push_back(
        llama2c::generate(m, std::vector<TokenId>(r.prompt.begin() + 1, r.prompt.end()), r.max_new_tokens, greedy));

  struct Case {
    const char* name;
    llama2c::ServeOptions o;
    bool expect_saved, expect_preempted;
  };
  std::vector<Case> cases = {
      {"batched, whole prefills", options(256, 16, 0, 16, 0, false), true, false},
      {"chunks of 5, page 4", options(64, 8, 5, 4, 0, false), true, false},
      {"chunks of 3 under a 12-token budget, no prefix cache", options(12, 4, 3, 8, 0, false), false, false},
      {"tiny pool: preemption by recompute", options(64, 8, 0, 4, 20, false), true, true},
      {"deterministic, chunks of 7, tiny pool", options(48, 6, 7, 4, 20, true), true, true},
  };
  cases[2].o.prefix_cache = false;
  cases.push_back({"static batches of 4", options(128, 8, 0, 8, 0, false), true, false});
  cases.back().o.static_batch = 4;
  cases.push_back({"lpm policy", options(40, 5, 0, 4, 0, false), true, false});
  cases.back().o.scheduler.policy = inferkit::SchedulingPolicy::kLongestPrefixMatch;
  for (const auto& c : cases) {
    INFO(c.name);
    const auto run = serve_run(m, trace, c.o);
    for (std::size_t i = 0; i < trace.size(); ++i) {
      INFO("request " << i);
      REQUIRE(run.report.results[i].output == alone[i]);
      REQUIRE(run.report.results[i].token_ms.size() == alone[i].size());
    }
    if (c.expect_saved)
      CHECK(run.report.summary.prefill_saved > 0);
    else
      CHECK(run.report.summary.prefill_saved == 0);
    if (c.expect_preempted)
      CHECK(run.report.summary.preemptions > 0);
    else
      CHECK(run.report.summary.preemptions == 0);
  }
}

TEST_CASE("serve --kv-quant: every greedy output equals generate() over the dense quantized cache",
          "[example][serve][model][quantized]") {
  const std::string path = test_model();
  if (path.empty()) {
    WARN("INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  const auto m = llama2c::Model::load(path);
  const auto trace = small_trace(10, 20, 0.0f, 3);
  llama2c::SamplingConfig greedy;
  greedy.params.temperature = 0.0f;
  for (const char* preset : {"int8", "int4", "kivi4"})
    for (Index page : {4, 16}) {
      INFO(preset << " page " << page);
      const auto q = inferkit::kv_quant_preset(preset, m.config().head_size());
      // The reference: each request alone, prefilled in one chunk, over the dense quantized
      // cache with the pageable specs (the same codes as the pages hold).
      llama2c::CacheOptions dense;
      dense.quant = llama2c::paged_quant(q, page);
      std::vector<std::vector<TokenId>> alone;
      for (const auto& r : trace)
        alone.push_back(llama2c::generate(m, std::vector<TokenId>(r.prompt.begin() + 1, r.prompt.end()),
                                          r.max_new_tokens, greedy, nullptr, {.cache = dense}));
      for (const bool tiny : {false, true}) {
        INFO((tiny ? "tiny pool: preemption by recompute" : "batched, chunked"));
        // Chunks of 5, or of a whole key group (KIVI: 4 at page 4, 16 at page 16).
        const Index chunk = std::max<Index>(
            5, dense.quant->keys.axis == inferkit::QuantAxis::kPerChannel ? dense.quant->keys.group_size : 0);
        auto o = tiny ? options(64, 8, 0, page, 80 / page, false) : options(64, 8, chunk, page, 0, false);
        o.kv_quant = q;
        const auto run = serve_run(m, trace, o);
        // Per-channel keys: a preempted request recomputes its generated tokens as one
        // prefill, whose key groups are quantized before they attend, while decoding attended
        // them in float: from there on its output is that of a one-shot prefill (serve.hpp).
        const bool per_channel = q.keys.axis == inferkit::QuantAxis::kPerChannel;
        for (std::size_t i = 0; i < trace.size(); ++i) {
          INFO("request " << i << " preempted " << run.report.results[i].preemptions);
          if (per_channel && run.report.results[i].preemptions > 0) {
            CHECK(run.report.results[i].output.size() == alone[i].size());
            continue;
          }
          REQUIRE(run.report.results[i].output == alone[i]);
        }
        CHECK(run.report.summary.prefill_saved > 0);  // quantized pages reused through the trie
        if (tiny) CHECK(run.report.summary.preemptions > 0);
      }
    }
}

TEST_CASE("serve --deterministic: bitwise identical logits across chunkings, batch mixes and threads",
          "[example][serve][model]") {
  const std::string path = test_model();
  if (path.empty()) {
    WARN("INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  const auto m = llama2c::Model::load(path);
  for (const float temperature : {0.0f, 0.8f}) {
    INFO("temperature " << temperature);
    const auto trace = small_trace(8, 16, temperature, 2);
    // Reference: each request alone (a one-request trace), whole prefill.
    std::vector<Run> alone;
    for (const auto& r : trace) alone.push_back(serve_run(m, {r}, options(256, 1, 0, 16, 0, true), true));
    auto threads1 = options(32, 6, 3, 4, 0, true);
    threads1.num_threads = 1;
    auto no_cache = options(256, 10, 0, 16, 0, true);
    no_cache.prefix_cache = false;
    const std::vector<std::pair<const char*, llama2c::ServeOptions>> configs = {
        {"all batched, whole prefills", options(256, 10, 0, 16, 0, true)},
        {"chunks of 1", options(16, 10, 1, 16, 0, true)},
        {"chunks of 3, page 4, 1 thread", threads1},
        {"chunks of 7, page 5, tiny pool (preemption)", options(40, 6, 7, 5, 14, true)},
        {"no prefix cache", no_cache},
    };
    for (const auto& [name, o] : configs) {
      INFO(name);
      const auto run = serve_run(m, trace, o, true);
      if (std::string(name).find("preemption") != std::string::npos) CHECK(run.report.summary.preemptions > 0);
      for (std::size_t i = 0; i < trace.size(); ++i) {
        INFO("request " << i);
        REQUIRE(run.report.results[i].output == alone[i].report.results[0].output);
        for (Index g = 0; g < static_cast<Index>(alone[i].report.results[0].output.size()); ++g) {
          const auto& want = alone[i].logits.at({0, g});
          const auto& got = run.logits.at({static_cast<Index>(i), g});
          REQUIRE(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
        }
      }
    }
    // The independent check: deterministic logits stay within float error of the one-token runner.
    if (temperature == 0.0f) {
      const auto& r = trace[0];
      llama2c::Cache cache(m.config(), {});
      std::vector<TokenId> seq = r.prompt;
      const auto& out = alone[0].report.results[0].output;
      std::vector<float> lg(static_cast<std::size_t>(m.config().vocab_size));
      for (std::size_t t = 0; t < seq.size(); ++t)
        llama2c::forward(m, cache, &seq[t], 1, static_cast<std::int32_t>(t), lg.data());
      for (std::size_t g = 0; g < out.size(); ++g) {
        const auto& det = alone[0].logits.at({0, static_cast<Index>(g)});
        for (std::size_t v = 0; v < lg.size(); ++v) REQUIRE(std::abs(det[v] - lg[v]) <= 1e-4f * (1 + std::abs(lg[v])));
        llama2c::forward(m, cache, &out[g], 1, static_cast<std::int32_t>(seq.size() + g), lg.data());
      }
    }
  }
}

TEST_CASE("serve CLI: synthetic runs print the summary; a bad trace line exits with line and field",
          "[example][serve][errors]") {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string model = dir + "/inferkit_serve_random.bin", trace = dir + "/inferkit_serve_trace.jsonl";
  llama2c::Config c;
  c.dim = 32;
  c.hidden_dim = 48;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 64;
  c.seq_len = 64;
  llama2c::Model::random(c, 3).save(model);
  {
    std::ofstream f(trace);
    f << "{\"prompt_ids\": [1, 5, 9], \"max_new_tokens\": 3, \"temperature\": 0}\n"
      << "{\"arrival_ms\": 1, \"prompt_ids\": [1, 5, 70], \"max_new_tokens\": 3}\n";
  }
  auto [status, out] = run_cli("serve --model " + model + " --trace " + trace);
  CHECK(status == 1);
  CHECK(out.find("trace line 2, field \"prompt_ids[2]\"") != std::string::npos);
  std::tie(status, out) =
      run_cli("serve --model " + model + " --synthetic 6 --prompt-len 4:9 --output-len 2:5 --vocab-x 1");
  CHECK(status == 1);
  CHECK(out.find("unknown flag '--vocab-x'") != std::string::npos);
  std::tie(status, out) = run_cli(
      "serve --model " + model +
      " --synthetic 6 --rate 500 --prompt-len 4:9 --output-len 2:5 --chunk 3 "
      "--max-seqs 3 --max-batched-tokens 8 --max-prefill-tokens 5 --page-size 4 --virtual-time 2 --out /dev/null");
  CHECK(status == 0);
  CHECK(out.find("serve: requests 6 output_tokens") != std::string::npos);
  std::tie(status, out) = run_cli("serve --model " + model +
                                  " --synthetic 6 --rate 500 --prompt-len 4:9 --output-len 2:5 --chunk 3 "
                                  "--page-size 4 --kv-quant kivi4 --virtual-time 2 --out /dev/null");
  CHECK(status == 1);  // KIVI chunks end at whole key groups (4 tokens here): chunks of 3 cannot
  CHECK(out.find("max_prefill_chunk = 3") != std::string::npos);
  std::tie(status, out) = run_cli("serve --model " + model +
                                  " --synthetic 6 --rate 500 --prompt-len 4:9 --output-len 2:5 --chunk 4 "
                                  "--page-size 4 --kv-quant kivi4 --virtual-time 2 --out /dev/null");
  CHECK(status == 0);
  CHECK(out.find("serve: requests 6 output_tokens") != std::string::npos);
  std::tie(status, out) = run_cli("serve --model " + model + " --synthetic 2 --kv-quant int3");
  CHECK(status == 1);
  CHECK(out.find("int3") != std::string::npos);
  std::tie(status, out) = run_cli("serve --model " + model +
                                  " --synthetic 6 --prompt-len 4:9 --output-len 2:5 --chunk none "
                                  "--max-batched-tokens 8");
  CHECK(status == 1);
  CHECK(out.find("max_batched_tokens") != std::string::npos);
  std::filesystem::remove(model);
  std::filesystem::remove(trace);
}
