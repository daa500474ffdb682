// The llama2.c runner's MoE variant (examples/llama2c/moe_model.hpp): the MoE FFN against a
// naive per-token, per-expert fp64 forward (dropless and with capacity drops), chunked against
// one-token forwards, the checkpoint's header extension and its loader errors, and the CLI.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "llama2c/runner.hpp"

using llama2c::Index;
using llama2c::TokenId;

namespace {

llama2c::Config moe_config(int experts, int k) {
  llama2c::Config c;
  c.dim = 32;
  c.hidden_dim = 40;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 120;
  c.seq_len = 64;
  c.n_experts = experts;
  c.experts_per_token = k;
  return c;
}

std::vector<float> random_rows(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Naive MoE FFN of one layer in double: per token the router logits, Mixtral's top-k softmax
// (ties by lowest id), optional capacity C with arrival-order rounds, then per kept expert the
// SwiGLU FFN as matrix-vector loops; returns x + sum_j w_j FFN_j(xb).
std::vector<double> naive_moe(const llama2c::MoeLayerView& w, int k, const std::vector<float>& xb,
                              const std::vector<float>& x, int n, Index capacity) {
  const int E = w.experts, D = w.dim, H = w.hidden;
  std::vector<std::vector<int>> chosen(n);
  std::vector<std::vector<double>> weight(n);
  for (int t = 0; t < n; ++t) {
    std::vector<double> l(E);
    for (int e = 0; e < E; ++e) {
      double s = 0;
      for (int i = 0; i < D; ++i) s += double(w.router[e * D + i]) * xb[t * D + i];
      l[e] = s;
    }
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
    double z = 0;
    for (int j = 0; j < k; ++j) z += std::exp(l[order[j]] - l[order[0]]);
    for (int j = 0; j < k; ++j)
      chosen[t].push_back(order[j]), weight[t].push_back(std::exp(l[order[j]] - l[order[0]]) / z);
  }
  if (capacity >= 0) {  // rounds by rank, tokens in order
    std::vector<Index> count(E, 0);
    for (int j = 0; j < k; ++j)
      for (int t = 0; t < n; ++t)
        if (count[chosen[t][j]] < capacity)
          ++count[chosen[t][j]];
        else
          chosen[t][j] = -1;
  }
  std::vector<double> out(x.begin(), x.end());
  std::vector<double> h(H);
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = chosen[t][j];
      if (e < 0) continue;
      for (int r = 0; r < H; ++r) {
        double a = 0, b = 0;
        for (int i = 0; i < D; ++i) {
          a += double(w.w1[(e * H + r) * D + i]) * xb[t * D + i];
          b += double(w.w3[(e * H + r) * D + i]) * xb[t * D + i];
        }
        h[r] = a / (1 + std::exp(-a)) * b;
      }
      for (int i = 0; i < D; ++i) {
        double y = 0;
        for (int r = 0; r < H; ++r) y += double(w.w2[(e * D + i) * H + r]) * h[r];
        out[t * D + i] += weight[t][j] * y;
      }
    }
  return out;
}

std::vector<float> logits_one_by_one(const llama2c::Model& m, const std::vector<TokenId>& ids) {
  llama2c::Cache cache(m.config(), {});
  const auto V = static_cast<std::size_t>(m.config().vocab_size);
  std::vector<float> out(ids.size() * V);
  for (std::size_t t = 0; t < ids.size(); ++t)
    llama2c::forward(m, cache, &ids[t], 1, std::int32_t(t), out.data() + t * V);
  return out;
}

}  // namespace

TEST_CASE("MoE FFN equals the naive per-token per-expert fp64 forward, dropless and with drops",
          "[example][llama2c][moe]") {
  for (int E : {1, 4, 8}) {
    for (int k : {1, 2}) {
      if (k > E) continue;
      const auto m = llama2c::Model::random(moe_config(E, k), 7 + E);
      const int n = 23, D = 32;
      const auto xb = random_rows(std::size_t(n * D), 11), x0 = random_rows(std::size_t(n * D), 12);
      for (double cf : {0.0, 0.5}) {
        auto& ffn = m.moe_ffn();
        ffn.options = {.scoring = inferkit::RouterScoring::topk_softmax, .capacity_factor = cf};
        std::vector<float> x = x0;
        ffn.run(m.moe_layer(1), k, xb.data(), x.data(), n);
        const Index C = cf > 0 ? Index(std::ceil(cf * n * k / E)) : -1;
        const auto want = naive_moe(m.moe_layer(1), k, xb, x0, n, C);
        INFO("E " << E << " k " << k << " cf " << cf);
        for (int i = 0; i < n * D; ++i) CHECK(x[i] == Approx(want[i]).epsilon(1e-4).margin(1e-4));
        if (cf > 0 && E > 1) CHECK(ffn.last.dropped_assignments > 0);
        if (cf <= 0) CHECK(ffn.last.dropped_assignments == 0);
      }
    }
  }
}

TEST_CASE("MoE model: a chunk gives the one-token logits; generation is reproducible", "[example][llama2c][moe]") {
  const auto m = llama2c::Model::random(moe_config(8, 2), 3);
  std::vector<TokenId> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(TokenId((i * 37 + 5) % 120));
  const auto one = logits_one_by_one(m, ids);
  llama2c::Cache cache(m.config(), {});
  std::vector<float> chunk(one.size());
  llama2c::forward(m, cache, ids.data(), Index(ids.size()), 0, chunk.data());
  for (std::size_t i = 0; i < one.size(); ++i) CHECK(chunk[i] == Approx(one[i]).epsilon(1e-4).margin(1e-4));
  llama2c::SamplingConfig s;
  s.params.temperature = 0.0f;
  const auto a = llama2c::generate(m, {1, 2, 3}, 12, s), b = llama2c::generate(m, {1, 2, 3}, 12, s);
  CHECK(a == b);
  CHECK(a.size() == 12);
}

TEST_CASE("MoE checkpoint: save / load_any round trip, the dense loader refuses it, bad headers",
          "[example][llama2c][moe]") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / "inferkit_test_moe.bin").string();
  auto c = moe_config(4, 2);
  c.router = inferkit::RouterScoring::sigmoid;
  const auto m = llama2c::Model::random(c, 5);
  m.save(path);
  const auto back = llama2c::Model::load_any(path);
  CHECK(back.config().n_experts == 4);
  CHECK(back.config().experts_per_token == 2);
  CHECK(back.config().hidden_dim == 40);
  CHECK(back.config().router == inferkit::RouterScoring::sigmoid);
  const std::vector<TokenId> ids = {1, 7, 9, 30, 2};
  CHECK(logits_one_by_one(m, ids) == logits_one_by_one(back, ids));
  CHECK_THROWS_WITH(llama2c::Model::load(path),
                    Catch::Contains("mixture-of-experts checkpoint") && Catch::Contains("load_any"));
  // Header fields: marker in place of hidden_dim, then the extension.
  std::ifstream f(path, std::ios::binary);
  std::int32_t h[12];
  f.read(reinterpret_cast<char*>(h), sizeof(h));
  CHECK(h[1] == llama2c::kMoeMarker);
  CHECK(h[7] == llama2c::kMoeVersion);
  CHECK(h[8] == 40);
  CHECK(h[9] == 4);
  CHECK(h[10] == 2);
  CHECK(h[11] == 2);
  f.close();
  const auto write_variant = [&](const std::string& name, int index, std::int32_t value, std::size_t keep) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    if (index >= 0) std::memcpy(bytes.data() + 4 * index, &value, 4);
    bytes.resize(std::min(keep, bytes.size()));
    const std::string p = (dir / name).string();
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return p;
  };
  CHECK_THROWS_WITH(llama2c::Model::load_any(write_variant("inferkit_moe_v9.bin", 7, 9, ~0ul)),
                    Catch::Contains("version = 9"));
  CHECK_THROWS_WITH(llama2c::Model::load_any(write_variant("inferkit_moe_k.bin", 10, 5, ~0ul)),
                    Catch::Contains("experts_per_token = 5"));
  CHECK_THROWS_WITH(llama2c::Model::load_any(write_variant("inferkit_moe_r.bin", 11, 7, ~0ul)),
                    Catch::Contains("router mode = 7"));
  CHECK_THROWS_WITH(llama2c::Model::load_any(write_variant("inferkit_moe_short.bin", -1, 0, 36)),
                    Catch::Contains("no room for the MoE header"));
  CHECK_THROWS_WITH(llama2c::Model::load_any(write_variant("inferkit_moe_trunc.bin", -1, 0, 4000)),
                    Catch::Contains("truncated"));
  // A dense checkpoint still loads with both readers.
  auto dense = moe_config(0, 0);
  const std::string dpath = (dir / "inferkit_test_dense_for_moe.bin").string();
  llama2c::Model::random(dense, 2).save(dpath);
  CHECK_FALSE(llama2c::Model::load_any(dpath).config().moe());
  CHECK_FALSE(llama2c::Model::load(dpath).config().moe());
}

TEST_CASE("CLI: make-random --experts, eval prints drop rate and load statistics, flag errors",
          "[example][llama2c][moe][cli]") {
  using cli_test::field;
  using cli_test::run_cli;
  const auto dir = std::filesystem::temp_directory_path();
  const std::string model = (dir / "inferkit_cli_moe.bin").string(), dense = (dir / "inferkit_cli_dense.bin").string();
  const std::string ids = (dir / "inferkit_cli_moe_ids.txt").string();
  std::ofstream(ids) << "1 5 9 22 7 3 99 110 4 8 12 17 45 61 2 3 88 14 70 33\n";
  const std::string shape = " --dim 32 --hidden 40 --layers 2 --heads 4 --vocab 120 --seq-len 64";
  auto [st, out] = run_cli("make-random --out " + model + shape + " --experts 8 --experts-per-token 2");
  REQUIRE(st == 0);
  CHECK(out.find("experts 8 experts_per_token 2") != std::string::npos);
  REQUIRE(run_cli("make-random --out " + dense + shape).first == 0);
  const std::string eval = "eval --model " + model + " --eval-ids " + ids + " --eval-chunk 10 ";
  std::tie(st, out) = run_cli(eval);
  REQUIRE(st == 0);
  CHECK(field(out, "drop_rate") == 0.0);
  const double nll_dropless = field(out, "mean_nll");
  std::tie(st, out) = run_cli(eval + "--capacity-factor 0.5 --overflow-policy priority");
  REQUIRE(st == 0);
  CHECK(field(out, "drop_rate") > 0.1);
  CHECK(field(out, "max_mean_load") >= 1.0);
  CHECK(field(out, "mean_nll") != nll_dropless);
  std::tie(st, out) = run_cli(eval + "--capacity-factor 1.0 --reroute --router sigmoid");
  REQUIRE(st == 0);
  CHECK(field(out, "rerouted") > 0);
  // generate runs and is reproducible.
  const std::string gen = "generate --model " + model + " --steps 8 --temperature 0 --print-ids --prompt-ids \"1 2 3\"";
  const auto g1 = run_cli(gen), g2 = run_cli(gen);
  CHECK(g1.first == 0);
  CHECK(g1.second.substr(0, g1.second.find('\n')) == g2.second.substr(0, g2.second.find('\n')));
  CHECK(g1.second.find("moe calls") != std::string::npos);
  // Errors.
  std::tie(st, out) = run_cli("eval --model " + dense + " --eval-ids " + ids + " --capacity-factor 1");
  CHECK(st == 1);
  CHECK(out.find("--capacity-factor needs an MoE model") != std::string::npos);
  std::tie(st, out) = run_cli(eval + "--router bogus");
  CHECK(out.find("--router = 'bogus' is invalid") != std::string::npos);
  std::tie(st, out) = run_cli(eval + "--overflow-policy lifo");
  CHECK(out.find("--overflow-policy = 'lifo' is invalid") != std::string::npos);
  std::tie(st, out) = run_cli(eval + "--weights int8");
  CHECK(out.find("not supported for MoE models") != std::string::npos);
  std::tie(st, out) = run_cli("make-random --out " + model + shape + " --experts 8");
  CHECK(out.find("--experts and --experts-per-token go together") != std::string::npos);
  std::tie(st, out) = run_cli("make-random --out " + model + "x" + shape + " --experts 4 --experts-per-token 5");
  CHECK(out.find("experts_per_token = 5") != std::string::npos);
}
