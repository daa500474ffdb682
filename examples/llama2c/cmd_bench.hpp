#pragma once
// `inferkit-llama2c bench`: the figures llama.cpp's `llama-bench -p 512 -n 128` prints, for any
// model the runner loads (GGUF or llama2.c): prompt processing (pp: one chunk of --pp tokens
// through the batched prefill, tokens/s) and text generation (tg: --tg decode steps of one
// token from an empty cache, tokens/s), each the mean and standard deviation over --reps runs
// after one warm-up, on --threads threads; the load time and the peak resident memory too.
//
//   inferkit-llama2c bench --model tinyllama-f16.gguf --pp 512 --tg 128 --threads 2
//   # model  threads  test   t/s            (one line per test)

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cmd_common.hpp"
#include "flag_table.hpp"
#include "llama2c.hpp"

namespace llama2c {

/// The process's peak resident memory in bytes (VmHWM of /proc/self/status; 0 where absent).
inline double peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmHWM:") {
      double kb = 0;
      f >> kb;
      return kb * 1024.0;
    }
    std::getline(f, key);
  }
  return 0;
}

/// Mean and sample standard deviation.
inline std::pair<double, double> mean_sd(const std::vector<double>& v) {
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= double(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return {m, v.size() > 1 ? std::sqrt(s / double(v.size() - 1)) : 0.0};
}

/// The bench subcommand (see flag_table()).
inline int cmd_bench(const cli::Flags& a) {
  const int threads = a.threads("--threads");
  set_runner_threads(threads);
  const auto t0 = std::chrono::steady_clock::now();
  const Model m = Model::load_any(a.text("--model"));
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Config& c = m.config();
  const Index pp = a.integer("--pp"), tg = a.integer("--tg"), reps = a.integer("--reps");
  if (pp + tg > c.seq_len)
    std::fprintf(stderr, "note: --pp + --tg = %ld exceeds the model's context length %d (positions run on)\n",
                 static_cast<long>(pp + tg), c.seq_len);
  std::mt19937 rng(1);
  std::uniform_int_distribution<TokenId> tok(0, c.vocab_size - 1);
  std::vector<TokenId> prompt(static_cast<std::size_t>(pp));
  for (auto& t : prompt) t = tok(rng);
  const auto V = static_cast<std::size_t>(c.vocab_size);
  std::vector<float> logits(std::max<std::size_t>(1, static_cast<std::size_t>(pp)) * V);
  const auto time_pp = [&] {
    Cache cache(c, {});
    const auto s = std::chrono::steady_clock::now();
    forward(m, cache, prompt.data(), pp, 0, logits.data(), {.batched = true});
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
  };
  const auto time_tg = [&] {
    Cache cache(c, {});
    TokenId t = c.bos >= 0 ? c.bos : 0;
    const auto s = std::chrono::steady_clock::now();
    for (Index i = 0; i < tg; ++i) {
      forward(m, cache, &t, 1, static_cast<std::int32_t>(i), logits.data());
      t = tok(rng);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
  };
  const std::string name = a.text("--model");
  std::printf("| model | threads | test | t/s | load s | peak RSS MiB |\n|---|---|---|---|---|---|\n");
  for (int which = 0; which < 2; ++which) {
    const Index n = which == 0 ? pp : tg;
    if (n == 0) continue;
    which == 0 ? time_pp() : time_tg();  // warm-up
    std::vector<double> rates;
    for (Index r = 0; r < reps; ++r) rates.push_back(double(n) / (which == 0 ? time_pp() : time_tg()));
    const auto [mean, sd] = mean_sd(rates);
    std::printf("| %s | %d | %s%ld | %.2f ± %.2f | %.3f | %.0f |\n", name.c_str(), threads, which == 0 ? "pp" : "tg",
                static_cast<long>(n), mean, sd, load_s, peak_rss_bytes() / (1024.0 * 1024.0));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace llama2c
