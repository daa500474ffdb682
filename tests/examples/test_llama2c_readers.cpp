// The llama2.c readers on corrupt input (regressions found by tests/fuzz/fuzz_llama2c): every
// bad file is a std::invalid_argument naming the problem, never a crash or a huge allocation.

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "llama2c/llama2c.hpp"
#include "llama2c/tokenizer.hpp"

using inferkit::TokenId;

namespace {

std::string header(std::vector<std::int32_t> h) {
  return std::string(reinterpret_cast<const char*>(h.data()), h.size() * sizeof(std::int32_t));
}

}  // namespace

TEST_CASE("checkpoint: a header asking for more than the file holds is rejected before allocating",
          "[example][llama2c][errors]") {
  // 2^30-wide layers: the weights would need ~10^28 bytes (and overflow size_t) in a 28-byte file.
  std::istringstream huge(header({1 << 30, 1 << 30, 1 << 30, 1 << 10, 1 << 10, 1 << 30, 1 << 30}), std::ios::binary);
  CHECK_THROWS_WITH(llama2c::Model::load(huge, "huge"), Catch::Contains("truncated") && Catch::Contains("28 bytes"));
  std::istringstream min_vocab(header({8, 16, 1, 2, 2, std::numeric_limits<std::int32_t>::min(), 4}), std::ios::binary);
  CHECK_THROWS_WITH(llama2c::Model::load(min_vocab, "min"), Catch::Contains("vocab_size = -2147483648"));
}

TEST_CASE("checkpoint: loading from memory reads back exactly what save() wrote", "[example][llama2c]") {
  llama2c::Config c;
  c.dim = 8, c.hidden_dim = 12, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.vocab_size = 5, c.seq_len = 6;
  c.shared_classifier = false;
  std::ostringstream out(std::ios::binary);
  llama2c::Model::random(c, 3).save(out);
  std::istringstream in(out.str(), std::ios::binary);
  const llama2c::Model m = llama2c::Model::load(in, "memory");
  CHECK(m.config().vocab_size == 5);
  CHECK_FALSE(m.config().shared_classifier);
  std::ostringstream again(std::ios::binary);
  m.save(again);
  CHECK(again.str() == out.str());
}

TEST_CASE("tokenizer: a byte without a token in a vocabulary without byte tokens is an error",
          "[example][llama2c][tokenizer]") {
  // Three pieces, no <0xXX> byte tokens: byte fallback (id byte + 3) would index past the end.
  std::ostringstream out(std::ios::binary);
  llama2c::Tokenizer::save(out, {" ", "a", "b"}, {0, -1, -1});
  std::istringstream in(out.str(), std::ios::binary);
  const auto tok = llama2c::Tokenizer::load(in, 3, "memory");
  CHECK(tok.encode("ab") == std::vector<TokenId>{0, 1, 2});
  CHECK_THROWS_AS(tok.encode("a\xC3\xA9"), std::invalid_argument);
  CHECK_THROWS_WITH(tok.encode("ac"), Catch::Contains("text byte 99 at offset 1 has no token"));
}
