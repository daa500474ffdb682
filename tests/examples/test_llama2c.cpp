// The llama2.c runner example: against llama2.c's own reference output on a real checkpoint
// (when INFERKIT_TEST_MODEL is set), and self-consistency checks on random models (always).
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_util.hpp"
#include "llama2c/runner.hpp"
#include "llama2c/tokenizer.hpp"

using llama2c::Index;
using llama2c::TokenId;

using cli_test::read_ids;
using cli_test::run_cli;
using cli_test::test_model;

namespace {

llama2c::Model small_random(int layers, int kv_heads, std::uint64_t seed) {
  llama2c::Config c;
  c.dim = 64;
  c.hidden_dim = 96;
  c.n_layers = layers;
  c.n_heads = 4;
  c.n_kv_heads = kv_heads;
  c.vocab_size = 300;
  c.seq_len = 64;
  return llama2c::Model::random(c, seed);
}

}  // namespace

TEST_CASE("greedy generation reproduces llama2.c's reference ids", "[example][llama2c][model]") {
  const std::string model = test_model();
  if (model.empty()) {
    WARN("INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  const auto dir = std::filesystem::path(model).parent_path();
  const auto expect = read_ids((dir / "stories260K_greedy256.txt").string());
  REQUIRE(expect.size() == 256);
  const auto [status, out] = run_cli("generate --model " + model + " --temperature 0 --steps 256 --print-ids");
  REQUIRE(status == 0);
  // The ids line (stdout) and the speed line (stderr) arrive in either order.
  std::istringstream lines(out);
  std::string l;
  std::vector<TokenId> got;
  while (std::getline(lines, l))
    if (!l.empty() && l.find_first_not_of("0123456789 ") == std::string::npos) {
      std::istringstream in(l);
      TokenId t;
      while (in >> t) got.push_back(t);
    }
  CHECK(got == expect);
}

TEST_CASE("logits at the first 8 positions match llama2.c within 1e-4", "[example][llama2c][model]") {
  const std::string model_path = test_model();
  if (model_path.empty()) {
    WARN("INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  const auto dir = std::filesystem::path(model_path).parent_path();
  const auto m = llama2c::Model::load(model_path);
  const auto ids = read_ids((dir / "stories260K_greedy256.txt").string());
  std::ifstream f((dir / "stories260K_greedy_logits8.txt").string());
  llama2c::Cache cache(m.config(), {});
  std::vector<TokenId> fed{llama2c::kBos};
  fed.insert(fed.end(), ids.begin(), ids.begin() + 7);
  std::vector<float> logits(static_cast<std::size_t>(m.config().vocab_size));
  double worst = 0;
  for (std::size_t pos = 0; pos < 8; ++pos) {
    llama2c::forward(m, cache, &fed[pos], 1, static_cast<std::int32_t>(pos), logits.data());
    for (std::size_t v = 0; v < logits.size(); ++v) {
      float ref = 0;
      REQUIRE(static_cast<bool>(f >> ref));
      worst = std::max(worst, std::abs(double(ref) - double(logits[v])));
    }
  }
  INFO("largest difference " << worst);
  CHECK(worst < 1e-4);
}

TEST_CASE("speculative greedy equals plain greedy (self-speculation and a separate draft)", "[example][llama2c]") {
  const auto target = small_random(3, 2, 11);
  llama2c::SamplingConfig s;
  s.params.temperature = 0.0f;
  const std::vector<TokenId> prompt{5, 9, 42};
  const auto plain = llama2c::generate(target, prompt, 40, s);
  for (int layers : {1, 2}) CHECK(llama2c::generate_speculative(target, nullptr, layers, prompt, 40, 4, s) == plain);
  CHECK(llama2c::generate_speculative(target, &target, 0, prompt, 40, 3, s) == plain);
  const auto other = small_random(2, 2, 12);
  CHECK(llama2c::generate_speculative(target, &other, 0, prompt, 40, 5, s) == plain);
}

TEST_CASE("streaming evaluation with a dense cache equals a single-chunk prefill", "[example][llama2c]") {
  const auto m = small_random(2, 2, 21);
  std::vector<TokenId> ids;
  for (int i = 0; i < 80; ++i) ids.push_back(static_cast<TokenId>((i * 37 + 11) % 300));
  const auto streamed = llama2c::evaluate(m, ids, {}, 1, static_cast<Index>(ids.size()));
  llama2c::Cache cache(m.config(), {});
  const Index n = static_cast<Index>(ids.size());
  std::vector<float> logits(static_cast<std::size_t>(n * 300));
  llama2c::forward(m, cache, ids.data(), n, 0, logits.data());  // one chunk: the prefill kernel
  double total = 0;
  for (Index t = 0; t + 1 < n; ++t) {
    std::span<float> row(logits.data() + t * 300, 300);
    llama2c::log_softmax(row);
    total -= row[static_cast<std::size_t>(ids[static_cast<std::size_t>(t + 1)])];
  }
  CHECK(streamed.count == n - 1);
  CHECK(streamed.mean_nll == Approx(total / double(n - 1)).epsilon(1e-5));
}

TEST_CASE("sink + window at cache positions equals recomputing the kept tokens from scratch", "[example][llama2c]") {
  // One layer: a token's K/V depend on the token alone, so the streaming cache's logits must
  // equal a fresh forward pass over the kept tokens (sinks, then the window) at positions 0..n-1.
  const auto m = small_random(1, 2, 31);
  std::vector<TokenId> ids;
  for (int i = 0; i < 50; ++i) ids.push_back(static_cast<TokenId>((i * 53 + 7) % 300));
  llama2c::CacheOptions opt{llama2c::CacheKind::kSinkWindow, 16, 3, inferkit::PositionPolicy::kCache, std::nullopt};
  llama2c::Cache stream(m.config(), opt);
  std::vector<float> got(300), ref(300);
  double worst = 0;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    llama2c::forward(m, stream, &ids[t], 1, static_cast<std::int32_t>(t), got.data());
    std::vector<TokenId> kept;
    for (std::size_t i = 0; i <= t; ++i)
      if (i < 3 || i + 16 > t) kept.push_back(ids[i]);
    llama2c::Cache fresh(m.config(), {});
    std::vector<float> all(kept.size() * 300);
    llama2c::forward(m, fresh, kept.data(), static_cast<Index>(kept.size()), 0, all.data());
    for (std::size_t v = 0; v < 300; ++v)
      worst = std::max(worst, std::abs(double(got[v]) - double(all[(kept.size() - 1) * 300 + v])));
  }
  CHECK(worst < 1e-4);
}

TEST_CASE("bad files and bad flags give clear errors", "[example][llama2c][errors]") {
  const auto dir = std::filesystem::temp_directory_path();
  const auto good = (dir / "inferkit_test_good.bin").string();
  small_random(1, 2, 1).save(good);
  {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream((dir / "inferkit_test_trunc.bin").string(), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    std::ofstream((dir / "inferkit_test_long.bin").string(), std::ios::binary) << bytes << "xx";
    std::string bad = bytes;
    bad[4 * 3] = 0;  // n_heads = 0
    std::ofstream((dir / "inferkit_test_badheader.bin").string(), std::ios::binary) << bad;
  }
  CHECK_THROWS_WITH(llama2c::Model::load((dir / "inferkit_test_trunc.bin").string()), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(llama2c::Model::load((dir / "inferkit_test_long.bin").string()), Catch::Contains("trailing bytes"));
  CHECK_THROWS_WITH(llama2c::Model::load((dir / "inferkit_test_badheader.bin").string()),
                    Catch::Contains("n_heads = 0"));
  CHECK_THROWS_WITH(llama2c::Model::load((dir / "no_such_model.bin").string()), Catch::Contains("cannot open"));
  const auto check_cli = [](const std::string& args, const std::string& message) {
    const auto [status, out] = run_cli(args);
    INFO(args << " -> " << out);
    CHECK(status != 0);
    CHECK_THAT(out, Catch::Contains(message));
  };
  check_cli("generate --model " + good + " --bogus 1", "unknown flag '--bogus'");
  check_cli("generate --model " + good + " --top-p 1.5", "top_p = 1.5");
  check_cli("generate --model " + good + " --steps x", "--steps = 'x' is invalid");
  check_cli("generate --model " + good + " --prompt-ids \"1 400\"", "outside the vocabulary");
  const auto ids_file = (dir / "inferkit_test_ids.txt").string();
  std::ofstream(ids_file) << "1 5 9 12 7";
  check_cli("eval --model " + good + " --eval-ids " + ids_file + " --cache nope", "--cache = 'nope'");
  check_cli("eval --model " + good + " --eval-ids " + good, "is not a token id");
  check_cli("generate", "needs --model");
  check_cli("generate --model " + good + " --prompt hello", "--prompt needs --tokenizer or a GGUF model");
  check_cli("", "usage");
  // And a good run through the CLI.
  const auto [status, out] = run_cli("generate --model " + good + " --steps 5 --print-ids --temperature 0");
  CHECK(status == 0);
}

namespace {

// fp64 logits [tokens][vocab] of a llama2.c model over `ids` from position 0, with sink logit
// sinks[h] per query head in every layer, written from the equations (RMSNorm, RoPE on adjacent
// pairs, softmax whose denominator alone gains e^S_h, SwiGLU), not from the runner's code.
std::vector<std::vector<double>> sink_reference_logits(const llama2c::Model& m, const std::vector<TokenId>& ids,
                                                       const std::vector<float>& sinks) {
  const llama2c::Config& c = m.config();
  const std::size_t n = ids.size(), D = std::size_t(c.dim), hs = std::size_t(c.head_size());
  const std::size_t H = std::size_t(c.n_heads), Hkv = std::size_t(c.n_kv_heads), F = std::size_t(c.hidden_dim);
  using V = std::vector<double>;
  const auto rms = [&](const V& x, const llama2c::VectorMap& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + double(c.rms_eps));
    V y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * double(g[Eigen::Index(i)]);
    return y;
  };
  const auto mul = [](const llama2c::MatrixMap& w, const V& x) {
    V y(std::size_t(w.rows()), 0.0);
    for (Eigen::Index r = 0; r < w.rows(); ++r)
      for (Eigen::Index k = 0; k < w.cols(); ++k) y[std::size_t(r)] += double(w(r, k)) * x[std::size_t(k)];
    return y;
  };
  const auto rope = [&](double* v, std::size_t pos) {
    for (std::size_t i = 0; i < hs / 2; ++i) {
      const double a = double(pos) * std::pow(c.rope_base, -2.0 * double(i) / double(hs));
      const double x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = x0 * std::cos(a) - x1 * std::sin(a);
      v[2 * i + 1] = x0 * std::sin(a) + x1 * std::cos(a);
    }
  };
  std::vector<V> x(n, V(D));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t i = 0; i < D; ++i) x[t][i] = m.embedding(ids[t])[i];
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<V> q(n), k(n), v(n);
    for (std::size_t t = 0; t < n; ++t) {
      const V xn = rms(x[t], m.rms_att(l));
      q[t] = mul(m.wq(l), xn), k[t] = mul(m.wk(l), xn), v[t] = mul(m.wv(l), xn);
      for (std::size_t h = 0; h < H; ++h) rope(q[t].data() + h * hs, t);
      for (std::size_t h = 0; h < Hkv; ++h) rope(k[t].data() + h * hs, t);
    }
    for (std::size_t t = 0; t < n; ++t) {
      V att(H * hs, 0.0);
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t g = h / (H / Hkv);
        const double sink = sinks.empty() ? -INFINITY : double(sinks[h]);
        V sc(t + 1);
        double mx = sink;
        for (std::size_t u = 0; u <= t; ++u) {
          sc[u] = 0;
          for (std::size_t i = 0; i < hs; ++i) sc[u] += q[t][h * hs + i] * k[u][g * hs + i];
          sc[u] /= std::sqrt(double(hs));
          mx = std::max(mx, sc[u]);
        }
        double z = std::isinf(sink) ? 0.0 : std::exp(sink - mx);  // the sink: denominator only
        for (auto& e : sc) z += (e = std::exp(e - mx));
        for (std::size_t u = 0; u <= t; ++u)
          for (std::size_t i = 0; i < hs; ++i) att[h * hs + i] += sc[u] / z * v[u][g * hs + i];
      }
      const V o = mul(m.wo(l), att);
      for (std::size_t i = 0; i < D; ++i) x[t][i] += o[i];
      const V xn = rms(x[t], m.rms_ffn(l));
      V a = mul(m.w1(l), xn);
      const V b = mul(m.w3(l), xn);
      for (std::size_t i = 0; i < F; ++i) a[i] = a[i] / (1.0 + std::exp(-a[i])) * b[i];
      const V f = mul(m.w2(l), a);
      for (std::size_t i = 0; i < D; ++i) x[t][i] += f[i];
    }
  }
  std::vector<V> out(n);
  for (std::size_t t = 0; t < n; ++t) out[t] = mul(m.wcls(), rms(x[t], m.rms_final()));
  return out;
}

}  // namespace

// --sink-logit (issue 32): the runner's attention takes AttentionOptions::sink_logits. Logits of
// a prompt fed as one chunk (prefill kernel) and then token by token (decode kernel) against the
// fp64 forward above; -inf is no sink, bit for bit; the CLI's ids with --sink-logit -inf are the
// ids without the flag, and bad values are refused naming the flag.
TEST_CASE("generate / eval --sink-logit: finite sinks match an fp64 forward, -inf is no sink",
          "[example][llama2c][sink]") {
  const auto m = small_random(2, 2, 31);
  const std::vector<TokenId> ids{1, 17, 205, 9, 42, 77, 3, 150, 64, 11};
  const auto V = static_cast<std::size_t>(m.config().vocab_size);
  const auto run = [&](const std::vector<float>& sinks, Index chunk) {
    llama2c::CacheOptions o;
    o.sink_logits = sinks;
    llama2c::Cache cache(m.config(), o);
    std::vector<float> logits(ids.size() * V);
    for (Index t = 0; t < Index(ids.size()); t += chunk) {
      const Index n = std::min<Index>(chunk, Index(ids.size()) - t);
      llama2c::forward(m, cache, ids.data() + t, n, static_cast<std::int32_t>(t), logits.data() + std::size_t(t) * V,
                       {.batched = true});
    }
    return logits;
  };
  const std::vector<float> sinks{1.5f, -0.5f, 3.0f, -INFINITY};
  const auto ref = sink_reference_logits(m, ids, sinks);
  const auto ref_plain = sink_reference_logits(m, ids, {});
  for (const Index chunk : {Index(ids.size()), Index(1)}) {
    INFO("chunks of " << chunk << " tokens");
    const auto got = run(sinks, chunk);
    double worst = 0, scale = 0, moved = 0;
    for (std::size_t t = 0; t < ids.size(); ++t)
      for (std::size_t v = 0; v < V; ++v) {
        worst = std::max(worst, std::abs(double(got[t * V + v]) - ref[t][v]));
        scale = std::max(scale, std::abs(ref[t][v]));
        moved = std::max(moved, std::abs(ref[t][v] - ref_plain[t][v]));
      }
    INFO("worst |logit - fp64| " << worst << ", largest |logit| " << scale << ", sinks move logits by " << moved);
    CHECK(moved > 100 * (worst + 1e-6));  // the sinks matter far beyond the float error
    CHECK(worst < 2e-5 * scale + 1e-5);
    CHECK(run(std::vector<float>(4, -INFINITY), chunk) == run({}, chunk));
  }

  const auto dir = std::filesystem::temp_directory_path();
  const auto path = (dir / "inferkit_test_sink.bin").string();
  m.save(path);
  const std::string gen = "generate --model " + path + " --temperature 0 --steps 24 --print-ids --prompt-ids \"5 9\"";
  const auto plain = run_cli(gen);
  REQUIRE(plain.first == 0);
  const auto ids_line = [](const std::string& out) {
    std::istringstream lines(out);
    std::string l, found;
    while (std::getline(lines, l))
      if (!l.empty() && l.find_first_not_of("0123456789 ") == std::string::npos) found = l;
    return found;
  };
  CHECK(!ids_line(plain.second).empty());
  for (const std::string flag : {" --sink-logit -inf", " --sink-logit -inf,-inf,-inf,-inf"}) {
    const auto r = run_cli(gen + flag);
    INFO(flag << " -> " << r.second);
    CHECK(r.first == 0);
    CHECK(ids_line(r.second) == ids_line(plain.second));
  }
  const auto eval_ids = (dir / "inferkit_test_sink_ids.txt").string();
  std::ofstream(eval_ids) << "1 17 205 9 42 77 3 150 64 11";
  const auto e_plain = run_cli("eval --model " + path + " --eval-ids " + eval_ids);
  const auto e_sink = run_cli("eval --model " + path + " --eval-ids " + eval_ids + " --sink-logit 1.5,-0.5,3,-inf");
  REQUIRE(e_plain.first == 0);
  REQUIRE(e_sink.first == 0);
  {  // eval's mean NLL over tokens 1.. against the fp64 reference's
    double nll = 0;
    for (std::size_t t = 0; t + 1 < ids.size(); ++t) {
      double mx = -INFINITY, z = 0;
      for (double x : ref[t]) mx = std::max(mx, x);
      for (double x : ref[t]) z += std::exp(x - mx);
      nll -= ref[t][std::size_t(ids[t + 1])] - mx - std::log(z);
    }
    INFO(e_sink.second);
    CHECK(cli_test::field(e_sink.second, "mean_nll") == Approx(nll / double(ids.size() - 1)).epsilon(1e-4));
  }
  const auto check_cli = [](const std::string& args, const std::string& message) {
    const auto [status, out] = run_cli(args);
    INFO(args << " -> " << out);
    CHECK(status != 0);
    CHECK_THAT(out, Catch::Contains("--sink-logit") && Catch::Contains(message));
  };
  check_cli(gen + " --sink-logit nan", "finite or -inf");
  check_cli(gen + " --sink-logit inf", "finite or -inf");
  check_cli(gen + " --sink-logit 1,2", "4 query heads");
  check_cli(gen + " --sink-logit 1,,2,3", "is not a number");
  check_cli(gen + " --sink-logit x", "is not a number");
  check_cli(gen + " --sink-logit 1 --beams 2", "--beams");
}

TEST_CASE("prefix reuse changes no output and saves the shared prefill", "[example][llama2c][prefix]") {
  const auto m = small_random(2, 2, 41);
  std::vector<TokenId> system;
  for (int i = 0; i < 37; ++i) system.push_back(static_cast<TokenId>((i * 29 + 3) % 300));
  std::vector<std::vector<TokenId>> prompts;
  for (int p = 0; p < 5; ++p) {
    auto q = system;
    for (int i = 0; i < 5 + p; ++i) q.push_back(static_cast<TokenId>((p * 61 + i * 17) % 300));
    prompts.push_back(q);
  }
  prompts.push_back(prompts[1]);  // an exact repeat
  llama2c::SamplingConfig s;
  s.params.temperature = 0.7f;
  s.seed = 5;
  llama2c::PrefixReuseStats with, without;
  const auto reused = llama2c::serve_prompts(m, prompts, 12, s, 8, "test-model", true, &with);
  const auto alone = llama2c::serve_prompts(m, prompts, 12, s, 8, "test-model", false, &without);
  CHECK(reused == alone);
  CHECK(without.prefill_saved == 0);
  // BOS + 37 system tokens = 38: 4 whole pages of 8 are shared by prompts 2..6.
  CHECK(with.prefill_saved >= 5 * 32);
  CHECK(with.prefill_computed + with.prefill_saved == without.prefill_computed);
}

TEST_CASE("tokenizer: llama2.c BPE merges, byte fallback, decoding rules", "[example][llama2c][tokenizer]") {
  std::vector<std::string> pieces{"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> scores{0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    pieces.push_back(buf);
    scores.push_back(0);
  }
  for (const auto& [p, s] : std::vector<std::pair<std::string, float>>{
           {" ", -1}, {"a", -1}, {"b", -1}, {"c", -1}, {" a", -2}, {"ab", -3}, {" ab", -2.5}, {"bc", -0.5}})
    pieces.push_back(p), scores.push_back(s);
  const auto path = (std::filesystem::temp_directory_path() / "inferkit_test_tokenizer.bin").string();
  llama2c::Tokenizer::save(path, pieces, scores);
  const auto tok = llama2c::Tokenizer::load(path, static_cast<int>(pieces.size()));
  const auto id = [&](const std::string& p) {
    return static_cast<TokenId>(std::find(pieces.begin(), pieces.end(), p) - pieces.begin());
  };
  // " " "a" "b" -> " a" "b" (score -2 beats "ab" -3) -> " ab" (the only merge left).
  CHECK(tok.encode("ab") == std::vector<TokenId>{id(" ab")});
  // " abc": "bc" (-0.5) merges first, then " a" (-2): " a" "bc".
  CHECK(tok.encode("abc") == std::vector<TokenId>{id(" a"), id("bc")});
  // "é" is not in the vocabulary: its two UTF-8 bytes become byte tokens.
  CHECK(tok.encode("\xC3\xA9") == std::vector<TokenId>{id(" "), 0xC3 + 3, 0xA9 + 3});
  CHECK(tok.decode(1, id(" ab")) == "ab");  // no leading space right after BOS
  CHECK(tok.decode(5, id(" ab")) == " ab");
  CHECK(tok.decode(5, 0x41 + 3) == "A");
  CHECK_THROWS_WITH(llama2c::Tokenizer::load(path, static_cast<int>(pieces.size()) + 5), Catch::Contains("truncated"));
}
