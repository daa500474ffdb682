// tokenizer/pre_tokenizer.hpp: every pre-tokenizer's pieces against those Python's `regex` module
// (an independent engine with its own Unicode tables) cuts with the same published patterns:
// tests/tokenizer/data/pre_tokenizer_splits.txt, written by make_pre_tokenizer_vectors.py from
// hand-picked and random strings of every general category. Plus the names and their errors.

#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "inferkit/tokenizer/pre_tokenizer.hpp"

using Catch::Matchers::Contains;
using inferkit::PreTokenizer;

namespace {

std::string unhex(const std::string& h) {
  std::string s;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) s += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return s;
}

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace

TEST_CASE("PreTokenizer pieces equal Python regex's for every named split", "[tokenizer][pre_tokenizer]") {
  std::ifstream in(INFERKIT_TOKENIZER_TEST_DATA "/pre_tokenizer_splits.txt");
  REQUIRE(in);
  std::map<std::string, PreTokenizer> pre;
  std::map<std::string, int> cases;
  std::string line;
  while (std::getline(in, line)) {
    const auto f = split_on(line, '\t');
    REQUIRE(f.size() == 3);
    auto it = pre.find(f[0]);
    if (it == pre.end()) it = pre.emplace(f[0], PreTokenizer::named(f[0])).first;
    const std::string text = unhex(f[1]);
    std::vector<std::string> want;
    if (!f[2].empty())
      for (const auto& h : split_on(f[2], ',')) want.push_back(unhex(h));
    std::vector<std::string> got;
    for (const auto p : it->second.pieces(text)) got.emplace_back(p);
    INFO(f[0] << " on hex " << f[1]);
    CHECK(got == want);
    ++cases[f[0]];
  }
  for (const char* name :
       {"default", "gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder"}) {
    INFO(name);
    CHECK(cases[name] > 150);
  }
}

TEST_CASE("PreTokenizer names: aliases, flags and the error for an unknown one", "[tokenizer][pre_tokenizer]") {
  CHECK(PreTokenizer::named("llama-bpe").ignore_merges());
  CHECK(PreTokenizer::named("llama3").ignore_merges());
  CHECK(!PreTokenizer::named("dbrx").ignore_merges());
  CHECK(!PreTokenizer::named("gpt-2").ignore_merges());
  CHECK(PreTokenizer::named("qwen2").regexes().size() == 1);
  CHECK(PreTokenizer::named("deepseek-llm").regexes().size() == 6);
  CHECK_THROWS_WITH(PreTokenizer::named("no-such-split"), Contains("no-such-split") && Contains("qwen2"));
  // Llama 3 keeps numbers in groups of three, Qwen2 in single digits.
  const std::vector<std::string_view> l3 = PreTokenizer::named("llama-bpe").pieces("12345");
  CHECK(l3 == std::vector<std::string_view>{"123", "45"});
  const std::vector<std::string_view> q2 = PreTokenizer::named("qwen2").pieces("123");
  CHECK(q2 == std::vector<std::string_view>{"1", "2", "3"});
}

TEST_CASE("PreTokenizer keeps invalid UTF-8 bytes as pieces of their own class", "[tokenizer][pre_tokenizer]") {
  // An invalid byte is no letter, number or space: the GPT-2 split puts it with punctuation.
  const std::string text = "ab\xFF\xC3 cd\x80";
  const auto p = PreTokenizer::named("gpt-2").pieces(text);
  CHECK(p == std::vector<std::string_view>{"ab", "\xFF\xC3", " cd", "\x80"});
}
