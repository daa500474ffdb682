// The llama2c example over quantized pages (BlockPool<QuantizedKv>): --prompts reuses quantized
// prefix pages without changing the output; eval over paged int8 / int4 / KIVI gives the dense
// quantized cache's NLL (same specs, llama2c::paged_quant) bit for bit with batch-invariant
// attention, and within rounding without. The real-checkpoint part runs when
// INFERKIT_TEST_MODEL is set.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_util.hpp"
#include "llama2c/runner.hpp"

using llama2c::Index;
using llama2c::TokenId;

using cli_test::field;
using cli_test::run_cli;

namespace {

// The random models of these tests: 2 layers, 4 query / 2 KV heads of 16, vocabulary 300.
llama2c::Model paged_test_model(std::uint64_t seed) {
  llama2c::Config c;
  c.dim = 64;
  c.hidden_dim = 96;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  c.seq_len = 64;
  return llama2c::Model::random(c, seed);
}

// Eval of ids under a paged (quantized) cache or the dense quantized cache with the same specs.
llama2c::EvalResult eval_paged(const llama2c::Model& m, const std::vector<TokenId>& ids,
                               const inferkit::KvQuantConfig& q, Index page, bool invariant) {
  const auto& c = m.config();
  inferkit::BlockPoolConfig pc{c.n_layers, c.n_kv_heads, c.head_size(), page,
                               static_cast<Index>(ids.size()) / page + 1};
  pc.quant = llama2c::paged_quant(q, page);
  inferkit::BlockPool<inferkit::QuantizedKv> pool(pc);
  llama2c::CacheOptions o;
  o.kind = llama2c::CacheKind::kPaged;
  o.quant_pool = &pool;
  o.batch_invariant = invariant;
  const auto r = llama2c::evaluate(m, ids, o, 1, static_cast<Index>(ids.size()));
  CHECK(pool.used_blocks() == 0);  // the sequence's cache went with evaluate()
  return r;
}
llama2c::EvalResult eval_dense(const llama2c::Model& m, const std::vector<TokenId>& ids,
                               const inferkit::KvQuantConfig& q, Index page, bool invariant) {
  llama2c::CacheOptions o;
  o.quant = llama2c::paged_quant(q, page);
  o.batch_invariant = invariant;
  return llama2c::evaluate(m, ids, o, 1, static_cast<Index>(ids.size()));
}

void check_paged_equals_dense(const llama2c::Model& m, const std::vector<TokenId>& ids, Index page) {
  for (const char* preset : {"int8", "int4", "kivi4", "kivi2"}) {
    INFO(preset << " page " << page);
    const auto q = inferkit::kv_quant_preset(preset, m.config().head_size());
    const auto pi = eval_paged(m, ids, q, page, true), di = eval_dense(m, ids, q, page, true);
    CHECK(pi.mean_nll == di.mean_nll);  // bit for bit: the same codes, the same attention bits
    const auto pd = eval_paged(m, ids, q, page, false), dd = eval_dense(m, ids, q, page, false);
    CHECK(std::abs(pd.mean_nll - dd.mean_nll) < 2e-3);  // tile order only (a flipped code now and then)
    CHECK(pd.kv_bytes > 0);
  }
}

}  // namespace

TEST_CASE("paged quantized KV: eval NLL equals the dense quantized cache's (random model)",
          "[example][llama2c][quantized]") {
  const auto m = paged_test_model(7);
  std::vector<TokenId> ids{1};
  for (int i = 0; i < 40; ++i) ids.push_back(static_cast<TokenId>((i * 37 + 11) % 300));
  for (Index page : {1, 5, 16}) check_paged_equals_dense(m, ids, page);
}

TEST_CASE("generate --prompts with --kv-quant: reused quantized pages give the output of computing them",
          "[example][llama2c][quantized]") {
  const auto m = paged_test_model(41);
  std::vector<TokenId> system;
  for (int i = 0; i < 29; ++i) system.push_back(static_cast<TokenId>((i * 29 + 3) % 300));
  std::vector<std::vector<TokenId>> prompts;
  for (int p = 0; p < 4; ++p) {
    auto q = system;
    for (int i = 0; i < 3 + p; ++i) q.push_back(static_cast<TokenId>((p * 61 + i * 17) % 300));
    prompts.push_back(q);
  }
  llama2c::SamplingConfig s;
  s.params.temperature = 0.7f;
  s.seed = 5;
  for (const char* preset : {"int8", "kivi4"}) {
    INFO(preset);
    const auto q = inferkit::kv_quant_preset(preset, m.config().head_size());
    llama2c::PrefixReuseStats with, without;
    const auto reused = llama2c::serve_prompts(m, prompts, 8, s, 8, "test-model", true, &with, q);
    const auto alone = llama2c::serve_prompts(m, prompts, 8, s, 8, "test-model", false, &without, q);
    CHECK(reused == alone);
    CHECK(with.prefill_saved >= 3 * 24);  // BOS + 29 system tokens: 3 whole pages of 8 shared
  }
}

TEST_CASE("stories260K: NLL of paged int8 / int4 / KIVI equals the dense quantized cache's",
          "[example][llama2c][quantized][model]") {
  const char* p = std::getenv("INFERKIT_TEST_MODEL");
  if (!p) {
    WARN("INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  const std::string model = p;
  const std::string ids_path = model.substr(0, model.find_last_of('/') + 1) + "stories260K_greedy256.txt";
  std::ifstream f(ids_path);
  std::vector<TokenId> ids;
  for (TokenId t; f >> t;) ids.push_back(t);
  REQUIRE(ids.size() > 100);
  ids.resize(64);
  const auto m = llama2c::Model::load(model);
  for (Index page : {5, 16}) check_paged_equals_dense(m, ids, page);
  // The CLI prints the same NLL (eval --cache paged) and serves --prompts over quantized pages.
  std::ofstream("test_llama2c_paged_quant_ids.txt") << [&] {
    std::ostringstream s;
    for (TokenId t : ids) s << t << ' ';
    return s.str();
  }();
  const auto [status, out] = run_cli(
      "eval --model " + model +
      " --eval-ids test_llama2c_paged_quant_ids.txt --cache paged --page-size 16 --kv-quant kivi4 --batch-invariant");
  INFO(out);
  REQUIRE(status == 0);
  const auto want = eval_dense(m, ids, inferkit::kv_quant_preset("kivi4", m.config().head_size()), 16, true);
  CHECK(std::abs(field(out, "mean_nll") - want.mean_nll) < 1e-6);  // printed with 6 decimals
  std::ofstream("test_llama2c_paged_quant_prompts.txt")
      << "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18\n1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 19\n";
  const auto [gs, gout] = run_cli(
      "generate --model " + model +
      " --prompts test_llama2c_paged_quant_prompts.txt --page-size 8 --kv-quant int8 --steps 8 --temperature 0");
  INFO(gout);
  CHECK(gs == 0);
  CHECK(gout.find("saved 16") != std::string::npos);  // BOS + 16 tokens: 2 pages of the second prompt reused
  std::remove("test_llama2c_paged_quant_ids.txt");
  std::remove("test_llama2c_paged_quant_prompts.txt");
}
