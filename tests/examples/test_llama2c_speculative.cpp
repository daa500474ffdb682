// The runner's token-tree speculative decoding (examples/llama2c/speculative.hpp,
// generate_speculative_tree: --spec tree / ngram): at temperature 0 the ids equal plain greedy
// generation (the independent reference: llama2c::generate without speculation); at temperature
// 0.8 the first two emitted tokens follow the target's distribution (chi-square against fp64
// softmaxes of plain forward passes), a sampled tree with one child per depth is the chain of
// generate_speculative (the other code path), and the ids are reproducible and independent of
// the thread count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "llama2c/quant_weights.hpp"
#include "llama2c/runner.hpp"
#include "sampling/sampling_test_util.hpp"

using llama2c::Index;
using llama2c::TokenId;

namespace {

llama2c::Model random_model(int layers, int vocab, std::uint64_t seed) {
  llama2c::Config c;
  c.dim = 64;
  c.hidden_dim = 96;
  c.n_layers = layers;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = vocab;
  c.seq_len = 256;
  return llama2c::Model::random(c, seed);
}

llama2c::SamplingConfig greedy() {
  llama2c::SamplingConfig s;
  s.params.temperature = 0.0f;
  return s;
}

// fp64 softmax(logits / T) of the target after `seq` (all of it fed, one plain forward pass).
std::vector<double> target_distribution(const llama2c::Model& m, const std::vector<TokenId>& seq, double temperature) {
  llama2c::Cache cache(m.config(), {});
  const Index V = m.config().vocab_size;
  std::vector<float> logits(seq.size() * static_cast<std::size_t>(V));
  llama2c::forward(m, cache, seq.data(), static_cast<Index>(seq.size()), 0, logits.data());
  std::vector<double> p(static_cast<std::size_t>(V));
  const float* last = logits.data() + (seq.size() - 1) * static_cast<std::size_t>(V);
  double mx = -INFINITY, z = 0;
  for (Index v = 0; v < V; ++v) mx = std::max(mx, double(last[v]) / temperature);
  for (Index v = 0; v < V; ++v) z += p[static_cast<std::size_t>(v)] = std::exp(double(last[v]) / temperature - mx);
  for (double& x : p) x /= z;
  return p;
}

}  // namespace

TEST_CASE("tree and n-gram speculation at temperature 0 equal plain greedy generation", "[example][llama2c]") {
  const auto target = random_model(3, 300, 11);
  const auto s = greedy();
  const std::vector<TokenId> prompt{5, 9, 42, 5, 9};
  const auto plain = llama2c::generate(target, prompt, 60, s);
  const auto other = random_model(2, 300, 12);
  for (const llama2c::TreeSpecOptions o : {llama2c::TreeSpecOptions{}, llama2c::TreeSpecOptions{1, 1, 1},
                                           llama2c::TreeSpecOptions{7, 64, 8}, llama2c::TreeSpecOptions{3, 5, 2}}) {
    INFO("depth " << o.depth << " nodes " << o.nodes << " top_k " << o.top_k);
    for (int layers : {1, 2})
      CHECK(llama2c::generate_speculative_tree(target, nullptr, layers, false, prompt, 60, o, s) == plain);
    llama2c::GenerateStats st;
    CHECK(llama2c::generate_speculative_tree(target, &target, 0, false, prompt, 60, o, s, &st) == plain);
    CHECK(st.accepted > 0);  // the target as its own draft: its argmax child is in the tree
    CHECK(llama2c::generate_speculative_tree(target, &other, 0, false, prompt, 60, o, s) == plain);
    CHECK(llama2c::generate_speculative_tree(target, nullptr, 0, true, prompt, 60, o, s) == plain);
  }
}

TEST_CASE("tree speculation on stories260K: greedy ids equal plain greedy for chain, tree and ngram",
          "[example][llama2c][model]") {
  const std::string path = cli_test::test_model();
  if (path.empty()) {
    WARN("INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  const auto target = llama2c::Model::load(path);
  auto int8 = target;  // the draft: the same model with int8 weights
  llama2c::quantize_model(int8, {.weights = llama2c::WeightFormat::kInt8});
  const auto s = greedy();
  const std::vector<TokenId> prompt{};
  const auto plain = llama2c::generate(target, prompt, 200, s);
  llama2c::GenerateStats chain, tree, ngram;
  CHECK(llama2c::generate_speculative(target, &int8, 0, prompt, 200, 4, s, &chain) == plain);
  CHECK(llama2c::generate_speculative_tree(target, &int8, 0, false, prompt, 200, {4, 16, 4}, s, &tree) == plain);
  CHECK(llama2c::generate_speculative_tree(target, nullptr, 0, true, prompt, 200, {4, 16, 4}, s, &ngram) == plain);
  CHECK(llama2c::generate_speculative_tree(target, nullptr, 2, false, prompt, 200, {4, 16, 4}, s) == plain);
  // The tree holds the chain's path (the draft's argmax at every depth) and more, so it never
  // needs more target passes than the chain of the same depth by much; here it needs fewer.
  CHECK(tree.target_passes <= chain.target_passes);
}

TEST_CASE("tree and n-gram speculation at temperature 0.8: the first two tokens follow the target",
          "[example][llama2c][statistics]") {
  // A 12-token vocabulary: chi-square over the 144 (t1, t2) cells. The draft is the target's
  // first layer (tree) or prompt lookup over a prompt of repeats (ngram), so drafts are accepted
  // and rejected.
  const int V = 12;
  const auto target = random_model(2, V, 31);
  llama2c::SamplingConfig s;
  s.params.temperature = 0.8f;
  const std::vector<TokenId> prompt{3, 7, 3, 7, 5, 3};
  auto seq = llama2c::start_sequence(target.config(), prompt);
  const auto p1 = target_distribution(target, seq, 0.8);
  std::vector<double> joint(static_cast<std::size_t>(V * V));
  for (TokenId a = 0; a < V; ++a) {
    auto next = seq;
    next.push_back(a);
    const auto p2 = target_distribution(target, next, 0.8);
    for (TokenId b = 0; b < V; ++b)
      joint[static_cast<std::size_t>(a * V + b)] = p1[static_cast<std::size_t>(a)] * p2[static_cast<std::size_t>(b)];
  }
  const long trials = 12000;
  for (bool ngram : {false, true}) {
    INFO((ngram ? "ngram" : "tree"));
    std::vector<long> counts(joint.size(), 0);
    llama2c::GenerateStats total;
    for (long t = 0; t < trials; ++t) {
      s.seed = static_cast<std::uint64_t>(t);
      llama2c::GenerateStats st;
      const auto out = llama2c::generate_speculative_tree(target, nullptr, 1, ngram, prompt, 2, {2, 8, 3}, s, &st);
      REQUIRE(out.size() == 2);
      ++counts[static_cast<std::size_t>(out[0] * V + out[1])];
      total.drafted += st.drafted;
      total.accepted += st.accepted;
    }
    // Both branches of the rule ran: some drafts accepted, some rejected.
    CHECK(total.accepted > trials / 10);
    CHECK(total.accepted < total.drafted);
    // Cells expected fewer than 5 times are pooled into one (the chi-square approximation needs it).
    std::vector<long> pooled_counts{0};
    std::vector<double> pooled{0.0};
    for (std::size_t c = 0; c < joint.size(); ++c) {
      if (joint[c] * double(trials) >= 5.0) {
        pooled_counts.push_back(counts[c]);
        pooled.push_back(joint[c]);
      } else {
        pooled_counts[0] += counts[c];
        pooled[0] += joint[c];
      }
    }
    bool impossible = false;
    const int cells = static_cast<int>(pooled.size());
    const double chi = test::chi_square(pooled_counts, pooled, trials, impossible);
    INFO("chi-square " << chi << " over " << cells << " cells; accepted " << total.accepted << " of " << total.drafted);
    CHECK_FALSE(impossible);
    CHECK(chi < test::chi2_critical(cells - 1));
  }
}

TEST_CASE("tree and n-gram speculation at temperature 0.8: same seed, same ids, 1 or 2 threads", "[example][llama2c]") {
  const auto target = random_model(3, 300, 41);
  llama2c::SamplingConfig s;
  s.params.temperature = 0.8f;
  s.params.top_p = 0.95f;
  s.seed = 7;
  const std::vector<TokenId> prompt{5, 9, 42, 5, 9};
  for (bool ngram : {false, true}) {
    llama2c::set_runner_threads(1);
    const auto one = llama2c::generate_speculative_tree(target, nullptr, 1, ngram, prompt, 80, {}, s);
    const auto again = llama2c::generate_speculative_tree(target, nullptr, 1, ngram, prompt, 80, {}, s);
    llama2c::set_runner_threads(2);
    const auto two = llama2c::generate_speculative_tree(target, nullptr, 1, ngram, prompt, 80, {}, s);
    llama2c::set_runner_threads(1);
    CHECK(one.size() == 80);
    CHECK(one == again);
    CHECK(one == two);
    s.seed = 8;
    CHECK(llama2c::generate_speculative_tree(target, nullptr, 1, ngram, prompt, 80, {}, s) != one);
    s.seed = 7;
  }
}

TEST_CASE("sampled-sibling trees with one child per depth are the chain, draw for draw", "[example][llama2c]") {
  // The chain (generate_speculative: verify_draft) is the one-branch tree of verify_tree, and the
  // sampled tree's first child at each depth takes the chain's draft draw.
  const auto target = random_model(3, 300, 51);
  const auto other = random_model(2, 300, 52);
  llama2c::SamplingConfig s;
  s.params.temperature = 0.8f;
  s.params.top_k = 40;
  s.seed = 9;
  const std::vector<TokenId> prompt{5, 9, 42};
  for (Index k : {1, 3, 5}) {
    INFO("k " << k);
    llama2c::GenerateStats a, b;
    CHECK(llama2c::generate_speculative(target, nullptr, 1, prompt, 80, k, s, &a) ==
          llama2c::generate_speculative_tree(target, nullptr, 1, false, prompt, 80, {k, 64, 1}, s, &b));
    CHECK(a.target_passes == b.target_passes);
    CHECK(a.accepted == b.accepted);
    CHECK(llama2c::generate_speculative(target, &other, 0, prompt, 80, k, s) ==
          llama2c::generate_speculative_tree(target, &other, 0, false, prompt, 80, {k, 64, 1}, s));
  }
  // More siblings accept more drafts per pass with the same draft (the draft is the target's
  // first layer: its own distribution differs from the target's).
  llama2c::GenerateStats chain, tree;
  llama2c::generate_speculative(target, nullptr, 1, prompt, 200, 4, s, &chain);
  llama2c::generate_speculative_tree(target, nullptr, 1, false, prompt, 200, {4, 64, 4}, s, &tree);
  CHECK(tree.target_passes < chain.target_passes);
}

TEST_CASE("sampled trees never exceed --spec-nodes, also when --spec-top-k is larger", "[example][llama2c]") {
  // Every round's tree is counted in GenerateStats::drafted: drafted <= nodes * target_passes for
  // every budget, and the shape rule itself over the whole flag range.
  for (Index nodes = 1; nodes <= 64; ++nodes)
    for (Index top_k = 1; top_k <= 8; ++top_k)
      for (Index depth = 1; depth <= 7; ++depth) {
        const auto shape = llama2c::sampled_tree_shape({depth, nodes, top_k});
        INFO("depth " << depth << " nodes " << nodes << " top_k " << top_k);
        REQUIRE(shape.depth >= 1);
        REQUIRE(shape.width >= 1);
        REQUIRE(shape.depth * shape.width <= nodes);
        REQUIRE(shape.depth <= depth);
        REQUIRE(shape.width <= top_k);
      }
  const auto target = random_model(2, 300, 61);
  llama2c::SamplingConfig s;
  s.params.temperature = 0.8f;
  s.seed = 3;
  const std::vector<TokenId> prompt{5, 9, 42};
  for (const llama2c::TreeSpecOptions o : {llama2c::TreeSpecOptions{4, 2, 4}, llama2c::TreeSpecOptions{4, 1, 8},
                                           llama2c::TreeSpecOptions{3, 5, 8}, llama2c::TreeSpecOptions{7, 6, 4}}) {
    INFO("depth " << o.depth << " nodes " << o.nodes << " top_k " << o.top_k);
    llama2c::GenerateStats st;
    const auto out = llama2c::generate_speculative_tree(target, nullptr, 1, false, prompt, 40, o, s, &st);
    CHECK(out.size() == 40);
    CHECK(st.target_passes > 0);
    CHECK(st.drafted <= o.nodes * st.target_passes);
    // Within the budget, the tree is as full as the shape allows: min(top_k, nodes) siblings a depth.
    CHECK(st.drafted ==
          std::min(o.top_k, o.nodes) * std::min(o.depth, o.nodes / std::min(o.top_k, o.nodes)) * st.target_passes);
  }
}

TEST_CASE("n-gram speculation: the suffix lengths looked up are the options'", "[example][llama2c]") {
  // A 26-token sequence (BOS, 5 prompt tokens, 20 generated) holds no 14-gram twice: lookup with
  // ngram_min = 14 drafts nothing; with the default 1..4 the repeating prompt drafts at once. The
  // ids equal plain greedy generation either way.
  const auto target = random_model(2, 300, 71);
  const auto s = greedy();
  const std::vector<TokenId> prompt{5, 9, 42, 5, 9};
  const auto plain = llama2c::generate(target, prompt, 20, s);
  auto all = llama2c::start_sequence(target.config(), prompt);
  all.insert(all.end(), plain.begin(), plain.end());
  for (std::size_t i = 0; i + 14 <= all.size(); ++i)  // the premise: no 14-gram occurs twice
    for (std::size_t j = i + 1; j + 14 <= all.size(); ++j)
      REQUIRE_FALSE(std::equal(all.begin() + i, all.begin() + i + 14, all.begin() + j));
  llama2c::GenerateStats none, some, two;
  CHECK(llama2c::generate_speculative_tree(target, nullptr, 0, true, prompt, 20, {4, 16, 4, 14, 20}, s, &none) ==
        plain);
  CHECK(none.drafted == 0);
  CHECK(llama2c::generate_speculative_tree(target, nullptr, 0, true, prompt, 20, {4, 16, 4}, s, &some) == plain);
  CHECK(some.drafted > 0);
  // The suffix "5 9" repeats at the first round: found with n in [2, 2], not with [3, 3] (a first
  // round with "42 5 9" unseen drafts nothing).
  llama2c::GenerateStats three;
  CHECK(llama2c::generate_speculative_tree(target, nullptr, 0, true, prompt, 1, {4, 16, 4, 2, 2}, s, &two) ==
        std::vector<TokenId>(plain.begin(), plain.begin() + 1));
  CHECK(two.drafted > 0);
  CHECK(llama2c::generate_speculative_tree(target, nullptr, 0, true, prompt, 1, {4, 16, 4, 3, 3}, s, &three) ==
        std::vector<TokenId>(plain.begin(), plain.begin() + 1));
  CHECK(three.drafted == 0);
}

#if defined(INFERKIT_LLAMA2C_BINARY)
TEST_CASE("generate --spec: flags, the statistics line and errors", "[example][llama2c]") {
  const std::string model = cli_test::test_model();
  if (model.empty()) {
    WARN("INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  const std::string g = "generate --model " + model + " --temperature 0 --steps 64 --print-ids ";
  const auto [plain_status, plain] = cli_test::run_cli(g);
  REQUIRE(plain_status == 0);
  const auto ids = [](const std::string& out) {
    std::istringstream lines(out);
    std::string l;
    while (std::getline(lines, l))
      if (!l.empty() && l.find_first_not_of("0123456789 ") == std::string::npos) return l;
    return std::string();
  };
  for (const std::string mode : {"--spec ngram", "--spec tree --draft-layers 2 --spec-nodes 24 --spec-top-k 3",
                                 "--spec chain --draft-layers 2", "--spec ngram --draft-k 6 --spec-nodes 32"}) {
    INFO(mode);
    const auto [status, out] = cli_test::run_cli(g + mode);
    CHECK(status == 0);
    CHECK(ids(out) == ids(plain));
    CHECK(out.find("tokens per target pass") != std::string::npos);
  }
  CHECK_THAT(cli_test::run_cli(g + "--spec tree").second,
             Catch::Contains("--spec tree needs --draft or --draft-layers"));
  CHECK_THAT(cli_test::run_cli(g + "--spec ngram --draft-layers 1").second, Catch::Contains("exclude each other"));
  CHECK_THAT(cli_test::run_cli(g + "--spec-nodes 8").second, Catch::Contains("--spec-nodes needs"));
  // Prompt lookup's suffix lengths: the greedy ids stay plain greedy's; errors name the flag and value.
  const auto [ngram_status, ngram_out] = cli_test::run_cli(g + "--spec ngram --spec-ngram-min 2 --spec-ngram-max 3");
  CHECK(ngram_status == 0);
  CHECK(ids(ngram_out) == ids(plain));
  CHECK_THAT(cli_test::run_cli(g + "--spec ngram --spec-ngram-min 3 --spec-ngram-max 2").second,
             Catch::Contains("--spec-ngram-max = 2 is invalid: must be >= --spec-ngram-min (3)"));
  CHECK_THAT(cli_test::run_cli(g + "--spec ngram --spec-ngram-min 6").second,
             Catch::Contains("--spec-ngram-min = 6 is invalid: must be <= --spec-ngram-max (4)"));
  CHECK_THAT(cli_test::run_cli(g + "--spec ngram --spec-ngram-min 0").second,
             Catch::Contains("--spec-ngram-min = 0 is invalid"));
  CHECK_THAT(cli_test::run_cli(g + "--spec ngram --spec-ngram-max 65").second,
             Catch::Contains("--spec-ngram-max = 65 is invalid"));
  CHECK_THAT(cli_test::run_cli(g + "--spec tree --draft-layers 2 --spec-ngram-max 3").second,
             Catch::Contains("--spec-ngram-max needs"));
}
#endif
