// Fuzzes the token-level matcher (grammar/grammar_matcher.hpp, token_mask.hpp): a grammar from a
// fixed list (llama.cpp-like JSON, arithmetic, a UTF-8 class grammar), a vocabulary of byte tokens
// and pieces from the input, then accept / rollback / mask operations from the input.
// Invariants: a token is in the mask exactly when try_accept on a copy succeeds (checked for every
// token of the small vocabulary), EOS only when complete, rejected tokens change nothing, and
// rollback(n) gives the mask of the state n tokens back.

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/grammar/gbnf.hpp"
#include "inferkit/grammar/grammar_matcher.hpp"

namespace {
const char* const kGrammars[] = {
    R"g(root ::= "{" ws (str ":" ws val ("," ws str ":" ws val)*)? "}"
val ::= str | [0-9]+ | "[" ws (val ("," ws val)*)? "]" | root
str ::= "\"" ([^"\\] | "\\" ["\\n])* "\"" ws
ws ::= [ \n]{0,3})g",
    R"g(root ::= (expr "=" [0-9]+ "\n")+
expr ::= term ([-+*/] term)*
term ::= [a-z]+ | "(" expr ")")g",
    R"g(root ::= [ぁ-ゟ一-鿿]+ ("é" | [\U0001F600-\U0001F64F])? [a-c]{1,3})g",
};
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const auto grammar =
      std::make_shared<const inferkit::Grammar>(inferkit::parse_gbnf(kGrammars[in.ConsumeIntegralInRange<int>(0, 2)]));
  std::vector<std::string> bytes(1);  // id 0: EOS (no bytes)
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  std::set<std::string> seen(bytes.begin() + 1, bytes.end());
  const int extra = in.ConsumeIntegralInRange<int>(0, 24);
  for (int i = 0; i < extra; ++i) {
    std::string p = in.ConsumeRandomLengthString(6);
    if (!p.empty() && seen.insert(p).second) bytes.push_back(p);
  }
  const std::vector<std::string_view> views(bytes.begin(), bytes.end());
  const auto trie = std::make_shared<const inferkit::TokenTrie>(views, std::vector<inferkit::TokenId>{0});
  inferkit::GrammarMatcher m(std::make_shared<const inferkit::TokenMasker>(grammar, trie), 16);
  std::vector<inferkit::TokenBitset> masks;
  inferkit::TokenBitset mask;
  while (in.remaining_bytes() > 0) {
    m.fill_mask(mask);
    for (std::size_t t = 0; t < bytes.size(); ++t) {
      inferkit::GrammarMatcher probe = m;
      FUZZ_CHECK(probe.try_accept(static_cast<inferkit::TokenId>(t)) == mask.test(static_cast<inferkit::TokenId>(t)));
    }
    FUZZ_CHECK(mask.test(0) == (m.is_complete() && !m.is_terminated()));
    const int op = in.ConsumeIntegralInRange<int>(0, 9);
    if (op < 7) {
      const auto t = static_cast<inferkit::TokenId>(in.ConsumeIntegralInRange<std::size_t>(0, bytes.size() - 1));
      const inferkit::ByteMatcher before = m.state();
      if (m.try_accept(t)) {
        masks.push_back(mask);
      } else {
        FUZZ_CHECK(m.state() == before);
      }
    } else if (!masks.empty()) {
      const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(1, std::min(masks.size(), m.rollback_window()));
      m.rollback(n);
      const inferkit::TokenBitset want = masks[masks.size() - n];
      masks.resize(masks.size() - n);
      inferkit::TokenBitset now;
      m.fill_mask(now);
      FUZZ_CHECK(now == want);
    }
  }
  return 0;
}
