// examples/serve_loop: runs the program under three budgets / pool sizes (plenty; 5 tokens per
// iteration, so prefills are chunked; a 10-page pool, so requests are preempted and
// recomputed) and recomputes every request's output in double precision, one request alone,
// from the toy model's equations written here (RMSNorm, adjacent-pair RoPE at base 10000, causal
// softmax attention with 2 query heads on 1 KV head, tied classifier), teacher-forced with the
// printed tokens: greedy requests must print the argmax at every step, sampled ones (top-k 8)
// one of the 8 most probable tokens; every request generates its max_new_tokens (6 + 2 i).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.hpp"

namespace {

constexpr int kLoopVocab = 48, kLoopDim = 16, kLoopHeads = 2, kLoopHeadDim = 8;
using LoopMat = std::vector<std::vector<double>>;

// The example's weight formula (the inputs; computed in float as the example does).
LoopMat loop_weights(int id, int rows, int cols) {
  LoopMat w(static_cast<std::size_t>(rows), std::vector<double>(static_cast<std::size_t>(cols)));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      w[r][c] = std::sin(0.5f + 1.3f * float(id) + 0.29f * float(r) + 0.31f * float(c) + 0.017f * float(r * c)) /
                std::sqrt(float(cols));
  return w;
}

std::vector<double> loop_times(const LoopMat& w, const std::vector<double>& x) {
  std::vector<double> y(w.size(), 0.0);
  for (std::size_t r = 0; r < w.size(); ++r)
    for (std::size_t c = 0; c < x.size(); ++c) y[r] += w[r][c] * x[c];
  return y;
}

std::vector<double> loop_rms(std::vector<double> x) {
  double ss = 0;
  for (double v : x) ss += v * v;
  for (double& v : x) v /= std::sqrt(ss / double(x.size()) + 1e-5);
  return x;
}

void loop_rope(std::vector<double>& x, int heads, int pos) {
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < kLoopHeadDim / 2; ++i) {
      const double a = pos * std::pow(10000.0, -2.0 * i / kLoopHeadDim);
      const double x0 = x[h * kLoopHeadDim + 2 * i], x1 = x[h * kLoopHeadDim + 2 * i + 1];
      x[h * kLoopHeadDim + 2 * i] = x0 * std::cos(a) - x1 * std::sin(a);
      x[h * kLoopHeadDim + 2 * i + 1] = x0 * std::sin(a) + x1 * std::cos(a);
    }
}

// The logits after the last token of `context`, the model run on the whole context from scratch.
std::vector<double> reference_logits(const std::vector<int>& context) {
  static const LoopMat embed = loop_weights(0, kLoopVocab, kLoopDim), wq = loop_weights(1, kLoopDim, kLoopDim),
                       wk = loop_weights(2, kLoopHeadDim, kLoopDim), wv = loop_weights(3, kLoopHeadDim, kLoopDim),
                       wo = loop_weights(4, kLoopDim, kLoopDim);
  std::vector<std::vector<double>> keys, values;
  std::vector<double> q;
  for (std::size_t t = 0; t < context.size(); ++t) {
    const auto xn = loop_rms(embed[static_cast<std::size_t>(context[t])]);
    auto k = loop_times(wk, xn);
    loop_rope(k, 1, static_cast<int>(t));
    keys.push_back(k);
    values.push_back(loop_times(wv, xn));
    q = loop_times(wq, xn);
    loop_rope(q, kLoopHeads, static_cast<int>(t));
  }
  std::vector<double> att(kLoopDim, 0.0);
  for (int h = 0; h < kLoopHeads; ++h) {  // both query heads read the one KV head
    std::vector<double> s;
    for (const auto& k : keys) {
      double d = 0;
      for (int i = 0; i < kLoopHeadDim; ++i) d += q[h * kLoopHeadDim + i] * k[i];
      s.push_back(d / std::sqrt(double(kLoopHeadDim)));
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double z = 0;
    for (double& v : s) z += (v = std::exp(v - mx));
    for (std::size_t p = 0; p < s.size(); ++p)
      for (int i = 0; i < kLoopHeadDim; ++i) att[h * kLoopHeadDim + i] += s[p] / z * values[p][i];
  }
  auto y = loop_times(wo, att);
  const auto& x = embed[static_cast<std::size_t>(context.back())];
  for (int i = 0; i < kLoopDim; ++i) y[i] += x[i];
  return loop_times(embed, loop_rms(y));
}

struct LoopRequest {
  double temperature = 0;
  std::vector<int> prompt, output;
  long preemptions = 0;
};

struct LoopRun {
  std::map<int, LoopRequest> requests;
  double prefill_tokens = 0, cached_tokens = 0, preemptions = 0;
};

LoopRun run_loop(const std::string& args) {
  const auto [status, out] = cli_test::shell(std::string(INFERKIT_SERVE_LOOP_BINARY) + " " + args);
  INFO(args << " -> " << out);
  REQUIRE(status == 0);
  LoopRun run;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string w;
    in >> w;
    if (w == "iterations") {
      run.prefill_tokens = cli_test::field(line, "prefill_tokens");
      run.cached_tokens = cli_test::field(line, "cached_tokens");
      run.preemptions = cli_test::field(line, "preemptions");
      continue;
    }
    REQUIRE(w == "request");
    int i = -1;
    LoopRequest r;
    in >> i >> w >> r.temperature >> w;
    REQUIRE(w == "prompt");
    std::vector<int>* into = &r.prompt;
    while (in >> w) {
      if (w == "output") {
        into = &r.output;
      } else if (w == "preemptions") {
        in >> r.preemptions;
      } else {
        into->push_back(std::stoi(w));
      }
    }
    run.requests[i] = r;
  }
  return run;
}

}  // namespace

TEST_CASE("serve_loop: every output equals a double-precision recomputation, whatever the batching",
          "[example][serve_loop]") {
  for (const std::string args : {"", "5 64", "16 10"}) {
    INFO("serve_loop " << args);
    const LoopRun run = run_loop(args);
    REQUIRE(run.requests.size() == 6);
    for (const auto& [i, r] : run.requests) {
      INFO("request " << i << " temperature " << r.temperature);
      CHECK(r.output.size() == static_cast<std::size_t>(6 + 2 * i));
      CHECK(r.prompt.size() == static_cast<std::size_t>(10 + i));
      std::vector<int> context = r.prompt;
      for (std::size_t j = 0; j < r.output.size(); ++j) {
        const auto logits = reference_logits(context);
        std::vector<double> sorted(logits);
        std::sort(sorted.rbegin(), sorted.rend());
        const double mine = logits[static_cast<std::size_t>(r.output[j])];
        if (r.temperature == 0)
          CHECK(mine >= sorted[0] - 1e-4);  // the argmax (a tie within 1e-4 either way)
        else
          CHECK(mine >= sorted[7] - 1e-4);  // one of the top 8
        context.push_back(r.output[j]);
      }
    }
    if (args.empty()) CHECK(run.cached_tokens > 0);   // the shared 9-token prompt: two whole pages reused
    if (args == "16 10") CHECK(run.preemptions > 0);  // 10 pages for 4 running requests of up to 8
  }
}
