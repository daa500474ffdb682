// examples/mla_decode: the MLA decoder's eval teacher-forces one sequence through a prefill pass
// and through token-by-token decode over the latent cache; both paths must give the same NLL
// (the bf16 rows are the same; only float summation order differs), and the output must be the
// same bits for 1 and 2 threads. generate's cache holds 2 layers x 1,152 bytes per fed token,
// against 2 x 16 x 320 x 2 bytes materialized (the closed form).
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.hpp"

namespace {

std::string run(const std::string& args, int expect = 0) {
  const auto [status, out] = cli_test::shell(std::string(INFERKIT_MLA_DECODE_BINARY) + " " + args);
  INFO(args << ": " << out);
  CHECK(status == expect);
  return out;
}

}  // namespace

TEST_CASE("mla_decode eval: prefill and decode over the latent cache agree, thread counts agree", "[examples][mla]") {
  const std::string one = run("eval 20 1"), two = run("eval 20 2");
  CHECK(one == two);
  std::istringstream in(one);
  std::string line;
  std::getline(in, line);
  const double prefill = cli_test::field(line, "nll");
  std::getline(in, line);
  const double decode = cli_test::field(line, "nll");
  INFO(one);
  CHECK(std::isfinite(prefill));
  CHECK(prefill > 0.5);
  CHECK(prefill < 20.0);
  CHECK(std::abs(prefill - decode) < 1e-4 * std::max(1.0, prefill));
}

TEST_CASE("mla_decode generate: tokens, and the latent cache's bytes", "[examples][mla]") {
  const std::string out = run("generate 12 2");
  INFO(out);
  std::istringstream in(out);
  std::string word;
  in >> word;
  REQUIRE(word == "generate");
  std::vector<int> tokens;
  while (in >> word && word != "cache") tokens.push_back(std::stoi(word));
  REQUIRE(tokens.size() == 12);
  CHECK(tokens[0] == 1);
  for (int t : tokens) CHECK((t >= 0 && t < 256));
  CHECK(out == run("generate 12 1"));
  const double fed = cli_test::field(out, "tokens");
  CHECK(fed == 11);
  CHECK(cli_test::field(out, "bytes") == 2 * 1152 * fed);
  CHECK(cli_test::field(out, "materialized_bf16_bytes") == 2.0 * 16 * 320 * 2 * fed);
  run("generate 1", 2);
  run("bogus", 2);
}
