// Sizes at their extremes (examples/llama2c/bounds.hpp and the flag table's bounds): every
// thread count and size from the command line, a trace line or a token file is rejected before
// anything is allocated, with the flag (or trace line and field), the value and the bound
// named; none ends in a crash or a bare std::bad_alloc. The KV byte count the bounds use is
// checked against the bytes the library's own block pools hold.

#include <catch2/catch.hpp>

#include <filesystem>

#include <unistd.h>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "llama2c/bounds.hpp"
#include "llama2c/serve.hpp"

namespace {

using Catch::Contains;
using cli_test::run_cli;

// A model whose KV takes 6 layers x 6 heads x 48 x 2 x 4 = 13824 bytes per token (stories15M's
// layout): 2^30 tokens of it are 15 TB, beyond any machine these tests run on. Small weights
// (hidden 32, vocab 64) keep the file at 8 MB.
llama2c::Config bounds_shape() {
  llama2c::Config c = llama2c::stories15M_shape(64);
  c.hidden_dim = 32;
  c.vocab_size = 64;
  return c;
}

std::string bounds_model() {
  static const std::string path = [] {
    const auto p =
        (std::filesystem::temp_directory_path() / ("inferkit_bounds_model_" + std::to_string(::getpid()) + ".bin"))
            .string();
    llama2c::Model::random(bounds_shape(), 5).save(p);
    return p;
  }();
  return path;
}

void check_rejected(const std::string& args, const std::vector<std::string>& parts) {
  const auto [status, out] = run_cli(args);
  INFO(args << " -> " << out);
  CHECK(status == 1);  // an error exit, not a signal (SIGSEGV: 139) nor an abort (134)
  for (const auto& p : parts) CHECK_THAT(out, Contains(p));
  CHECK_THAT(out, !Contains("bad_alloc"));
}

}  // namespace

TEST_CASE("kv_bytes_per_token equals the bytes a block pool stores per token", "[example][bounds]") {
  const Index L = 3, H = 2, D = 16, page = 8;
  inferkit::BlockPool<float> fp({L, H, D, page, 4});
  CHECK(llama2c::kv_bytes_per_token(L, H, D) * page == double(fp.block_bytes()));
  for (const char* preset : {"int8", "int4", "kivi4", "kivi2"}) {
    INFO(preset);
    const auto q = llama2c::paged_quant(inferkit::kv_quant_preset(preset, D), page);
    inferkit::BlockPoolConfig pc{L, H, D, page, 4};
    pc.quant = q;
    inferkit::BlockPool<inferkit::QuantizedKv> qp(pc);
    CHECK(llama2c::kv_bytes_per_token(L, H, D, q) * page == double(qp.block_bytes()));
  }
  CHECK(llama2c::physical_memory_bytes() > 1e6);
}

TEST_CASE("thread counts beyond kMaxThreads are rejected by name (no libgomp crash)", "[example][bounds]") {
  const std::string m = bounds_model();
  check_rejected("serve --model " + m + " --synthetic 2 --threads 65535",
                 {"--threads = 65535 is invalid: must be 0 (OpenMP's default) or 1..1024"});
  check_rejected("serve --model " + m + " --synthetic 2 --threads 1025", {"--threads = 1025 is invalid"});
  check_rejected("serve --model " + m + " --synthetic 2 --threads -1", {"--threads = -1 is invalid"});
  check_rejected("eval --model " + m + " --eval-ids none.txt --moe-threads 40000",
                 {"--moe-threads = 40000 is invalid"});
  // The C++ entry points check their num_threads fields the same way.
  const auto model = llama2c::Model::load(m);
  llama2c::ServeOptions o;
  o.num_threads = 65535;
  CHECK_THROWS_WITH(llama2c::serve(model, {}, o), Contains("--threads = 65535 is invalid"));
  CHECK_THROWS_WITH(llama2c::BatchForward(model, {.num_threads = 4096}),
                    Contains("BatchForwardOptions::num_threads = 4096 is invalid"));
  auto writable = llama2c::Model::load(m);
  CHECK_THROWS_WITH(llama2c::quantize_model(writable, {.weights = llama2c::WeightFormat::kInt8, .num_threads = -2}),
                    Contains("QuantOptions::num_threads = -2 is invalid"));
  // The largest accepted count runs.
  const auto [status, out] = run_cli("serve --model " + m +
                                     " --synthetic 2 --prompt-len 2:3 --output-len 1:2 --virtual-time 1 "
                                     "--out /dev/null --threads 1");
  INFO(out);
  CHECK(status == 0);
}

TEST_CASE("a trace line asking for more KV than memory holds names its line and field", "[example][bounds]") {
  const std::string m = bounds_model();
  const auto trace =
      (std::filesystem::temp_directory_path() / ("inferkit_bounds_trace_" + std::to_string(::getpid()) + ".jsonl"))
          .string();
  {
    std::ofstream f(trace);
    f << "{\"prompt_ids\": [1, 5], \"max_new_tokens\": 4}\n"
      << "\n"
      << "{\"prompt_ids\": [1], \"max_new_tokens\": 1073741824}\n";
  }
  check_rejected("serve --model " + m + " --trace " + trace,
                 {"trace line 3, field \"max_new_tokens\": 1073741824 is invalid: prompt (1 tokens) + "
                  "max_new_tokens need 1.48e+13 bytes of KV cache (13824 per token), more than this machine's memory"});
  // The parser's own bound stays: 2^30 + 1 is refused by the parser (field and range named).
  {
    std::ofstream f(trace);
    f << "{\"prompt_ids\": [1], \"max_new_tokens\": 1073741825}\n";
  }
  check_rejected("serve --model " + m + " --trace " + trace,
                 {"trace line 1, field \"max_new_tokens\": must be an integer in [1, 1073741824]"});
  std::filesystem::remove(trace);
  // The same request from C++ (no file): named by its index.
  llama2c::TraceRequest r;
  r.prompt = {1};
  r.max_new_tokens = Index{1} << 30;
  CHECK_THROWS_WITH(llama2c::serve(llama2c::Model::load(m), {r}, {}),
                    Contains("request 0, field \"max_new_tokens\": 1073741824 is invalid"));
  r.max_new_tokens = Index{1} << 40;
  CHECK_THROWS_WITH(llama2c::serve(llama2c::Model::load(m), {r}, {}),
                    Contains("max_new_tokens = 1099511627776 is invalid: must be >= 1, and prompt + max_new_tokens at "
                             "most 2^31-1 positions"));
}

TEST_CASE("command-line sizes beyond memory or int32 positions are rejected by flag and value", "[example][bounds]") {
  const std::string m = bounds_model();
  check_rejected("generate --model " + m + " --steps 2147483647",
                 {"--steps = 2147483647 is invalid: BOS + prompt (0 tokens) + steps - 1 positions of KV cache",
                  "more than this machine's memory"});
  check_rejected(
      "generate --model " + m + " --steps 2147483647 --prompt-ids \"5 6\"",
      {"--steps = 2147483647 is invalid: BOS + prompt (2 tokens) + steps - 1 must be at most 2^31-1 positions"});
  check_rejected("generate --model " + m + " --steps 2147483648", {"--steps = 2147483648 is invalid"});
  check_rejected("generate --model " + m + " --beams 65536 --steps 100000",
                 {"--steps = 100000 is invalid", "131072 caches"});
  {  // A wide vocabulary: 65536 beams' logits rows and candidates need ~480 GB, a full-vocabulary
    // contrastive lookahead 4.4 TB (the KV caches of two steps fit).
    llama2c::Config wide = bounds_shape();
    wide.dim = 4;
    wide.n_heads = wide.n_kv_heads = 2;
    wide.n_layers = 1;
    wide.hidden_dim = 2;
    wide.vocab_size = 1 << 20;
    const auto path =
        (std::filesystem::temp_directory_path() / ("inferkit_bounds_wide_" + std::to_string(::getpid()) + ".bin"))
            .string();
    llama2c::Model::random(wide, 3).save(path);
    check_rejected("generate --model " + path + " --beams 65536 --steps 2",
                   {"--beams = 65536 is invalid: a row of logits (1048576 tokens) and the best 2 * beams candidates "
                    "for each beam need",
                    "more than this machine's memory"});
    check_rejected("generate --model " + path + " --contrastive 2147483647 --steps 2",
                   {"--contrastive = 2147483647 is invalid: the logits and hidden states of min(K, 1048576) "
                    "candidates need",
                    "more than this machine's memory"});
    // eval: one chunk of 2^17 tokens holds 2^17 rows of 2^20 logits (550 GB); the file is 256 KB.
    const auto ids =
        (std::filesystem::temp_directory_path() / ("inferkit_bounds_wide_ids_" + std::to_string(::getpid()) + ".txt"))
            .string();
    {
      std::ofstream f(ids);
      for (int i = 0; i < (1 << 17); ++i) f << "1 ";
    }
    check_rejected("eval --model " + path + " --eval-ids " + ids + " --eval-chunk 131072",
                   {"--eval-chunk = 131072 is invalid: a chunk's rows of logits (1048576 each) and activations need",
                    "more than this machine's memory"});
    std::filesystem::remove(ids);
    std::filesystem::remove(path);
  }
  check_rejected(
      "serve --model " + m + " --synthetic 2 --prompt-len 2:3 --output-len 1:2 --kv-blocks 2147483646",
      {"--kv-blocks = 2147483646 is invalid: its pages of 16 tokens need", "more than this machine's memory"});
  check_rejected("serve --model " + m + " --synthetic 2147483647 --prompt-len 2:2147483647",
                 {"--synthetic = 2147483647 is invalid: prompts of up to 2147483647 tokens (--prompt-len)"});
  // Short prompts still cost each request its state: 2^31-1 requests of 2 tokens are refused too
  // (their prompts alone, 17 GB, might fit; with the state they do not).
  check_rejected("serve --model " + m + " --synthetic 2147483647 --prompt-len 2:2 --output-len 1:1",
                 {"--synthetic = 2147483647 is invalid: prompts of up to 2 tokens (--prompt-len) and ",
                  "bytes of state per request need", "more than this machine's memory"});
  check_rejected("serve --model " + m + " --synthetic 2 --kv-blocks 2147483647",
                 {"--kv-blocks = 2147483647 is invalid"});
  const auto ids =
      (std::filesystem::temp_directory_path() / ("inferkit_bounds_ids_" + std::to_string(::getpid()) + ".txt"))
          .string();
  std::ofstream(ids) << "1 5 9 13 17 21 2 3";
  check_rejected("eval --model " + m + " --eval-ids " + ids + " --cache window --window 2147483647",
                 {"--window = 2147483647 is invalid: the window's slots of KV cache need"});
  // An oversized --eval-chunk is clamped to the file (one chunk either way): same NLL as a chunk of the file's length.
  const auto [s1, o1] = run_cli("eval --model " + m + " --eval-ids " + ids + " --eval-chunk 2147483647");
  const auto [s2, o2] = run_cli("eval --model " + m + " --eval-ids " + ids + " --eval-chunk 8");
  REQUIRE(s1 == 0);
  REQUIRE(s2 == 0);
  CHECK(cli_test::field(o1, "mean_nll") == cli_test::field(o2, "mean_nll"));
  std::filesystem::remove(ids);
  const auto out =
      (std::filesystem::temp_directory_path() / ("inferkit_bounds_never_" + std::to_string(::getpid()) + ".bin"))
          .string();
  check_rejected("make-random --out " + out + " --dim 1073741824 --heads 1 --kv-heads 1 --vocab 8",
                 {"random model: dim = 1073741824", "its weights need", "more than this machine's memory"});
  CHECK(!std::filesystem::exists(out));
  check_rejected("make-random --out " + out + " --dim 4294967296",
                 {"--dim = 4294967296 is invalid: must be an integer in [1, 2^31-1]"});
}
