// grammar/gbnf.hpp (with grammar.hpp and byte_matcher.hpp): every llama.cpp grammar file of
// INFERKIT_TEST_GRAMMAR_DIR parses and accepts / rejects texts as its comments and llama.cpp's
// grammar guide document; each syntax feature on hand-written sentences; errors name line and
// column; left recursion, undefined rules and a missing root are rejected.

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "grammar_test_util.hpp"
#include "inferkit/grammar/byte_matcher.hpp"
#include "inferkit/grammar/gbnf.hpp"

using grammar_test::matches;
using inferkit::ByteMatcher;
using inferkit::Grammar;
using inferkit::parse_gbnf;

TEST_CASE("GBNF: llama.cpp's grammar files parse and behave as documented", "[grammar][gbnf]") {
  const auto dir = grammar_test::grammar_dir();
  if (!dir) {
    WARN("INFERKIT_TEST_GRAMMAR_DIR is not set: skipped");
    return;
  }
  struct Case {
    const char* file;
    std::vector<std::string> good, bad;
  };
  const Case cases[] = {
      {"json.gbnf",
       {"{}", R"({"a": 1})", "{\"a\": [1, -2.5, 3e1, \"x\\u00e9\\n\"],\n \"b\": {\"c\": null, \"d\": true}}"},
       {"[]", R"({"a" 1})", R"({"a": 01x})", "{\"a\": \"\x01\"}", R"({"a": tru})"}},
      {"json_arr.gbnf", {"[\n]", "[\n1,\n{\"a\": \"b\"}]"}, {"[]", "[\n1,2]", "{}"}},
      {"arithmetic.gbnf", {"a+1=(b)\n", "x = 2\ny*z=3\n"}, {"a+1\n", "=1\n", "A=1\n"}},
      {"chess.gbnf",
       {"1. e4 e5\n2. Nf3 Nc6\n", "1. O-O O-O-O\n2. exd5 Qxd5+\n"},
       {"1. e4 e5\n", "2. e4 e5\n3. d4 d5\n"}},
      {"list.gbnf", {"- one\n- two\n"}, {"- \n", "one\n", "- a\r\n"}},
      {"japanese.gbnf", {"こんにちは 世界", "カタカナ"}, {"abc", "日本 "}},
      {"english.gbnf", {"Hello, world!", "a b\nc"}, {"naïve", " x"}},
      {"c.gbnf",
       {"int main(){return 0;}", "float f(int x){x = x*2;while(x<3){x = x+1;}}"},
       {"int main(){}x", "main(){}"}},
  };
  for (const Case& c : cases) {
    INFO(c.file);
    const Grammar g = parse_gbnf(grammar_test::read_file(*dir + "/" + c.file));
    for (const auto& s : c.good) {
      INFO("good: " << s);
      CHECK(matches(g, s));
    }
    for (const auto& s : c.bad) {
      INFO("bad: " << s);
      CHECK_FALSE(matches(g, s));
    }
  }
}

TEST_CASE("GBNF: literals, escapes, classes, any, groups and comments", "[grammar][gbnf]") {
  const Grammar g = parse_gbnf(R"(# leading comment
root ::= "a\x41\u00e9\U0001F600" tail   # trailing comment
tail ::= [^a-c\]] [\x30-\x39\-] (. | "\\" "\"") [é-ë]
)");
  CHECK(matches(g, "aAé😀d5x\xC3\xAB"));
  CHECK(matches(g, "aAé😀d-\\\"é"));
  CHECK_FALSE(matches(g, "aAé😀b5xé"));    // [^a-c\]] excludes b
  CHECK_FALSE(matches(g, "aAé😀d5\\\""));  // the quote must be followed by [é-ë]
  CHECK_FALSE(matches(g, "aAé😀]5xé"));    // \] is in the negated class
  CHECK_FALSE(matches(g, "aAé😀d+xé"));

  const Grammar multi = parse_gbnf("root ::= (\n  \"x\" |\n  \"y\"\n) z\nz ::= \"z\" |\n  \"w\"\n");
  CHECK(matches(multi, "xz"));
  CHECK(matches(multi, "yw"));
  CHECK_FALSE(matches(multi, "x"));
}

TEST_CASE("GBNF: repetition operators count exactly", "[grammar][gbnf]") {
  struct Case {
    const char* grammar;
    int lo, hi;  // hi < 0: unbounded
  };
  for (const Case& c :
       {Case{"root ::= \"ab\"*", 0, -1}, Case{"root ::= \"ab\"+", 1, -1}, Case{"root ::= \"ab\"?", 0, 1},
        Case{"root ::= \"ab\"{3}", 3, 3}, Case{"root ::= (\"a\" \"b\"){2,}", 2, -1}, Case{"root ::= \"ab\"{1,4}", 1, 4},
        Case{"root ::= \"ab\"{0,2}", 0, 2}, Case{"root ::= \"ab\"{ 2 , 3 }", 2, 3}}) {
    INFO(c.grammar);
    const Grammar g = parse_gbnf(c.grammar);
    for (int n = 0; n <= 7; ++n) {
      std::string s;
      for (int i = 0; i < n; ++i) s += "ab";
      const bool want = n >= c.lo && (c.hi < 0 || n <= c.hi);
      INFO("n = " << n);
      CHECK(matches(g, s) == want);
      CHECK_FALSE(matches(g, s + "a"));
    }
  }
}

TEST_CASE("GBNF: errors name the line and column", "[grammar][gbnf]") {
  auto message = [](const std::string& text) -> std::string {
    try {
      parse_gbnf(text);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(message("root ::= \"abc"), Catch::Contains("line 1, column 14") && Catch::Contains("closing the literal"));
  CHECK_THAT(message("root ::= [a-z\n"), Catch::Contains("line 1, column 14") && Catch::Contains("']'"));
  CHECK_THAT(message("root ::= a\na ::= \"x\" )"), Catch::Contains("line 2, column 11"));
  CHECK_THAT(message("root := \"x\""), Catch::Contains("line 1, column 6") && Catch::Contains("'::='"));
  CHECK_THAT(message("root ::= \"\\q\""), Catch::Contains("line 1, column 11") && Catch::Contains("escape"));
  CHECK_THAT(message("root ::= \"a\"{3,2}"), Catch::Contains("m <= n"));
  CHECK_THAT(message("root ::= \"a\"{99999}"), Catch::Contains("count at most 10000"));
  CHECK_THAT(message("root ::= *"), Catch::Contains("line 1, column 10") && Catch::Contains("before the repetition"));
  CHECK_THAT(message("root ::= [z-a]"), Catch::Contains("range end"));
  CHECK_THAT(message("root ::= x\n\nx ::= \"a\"\nroot ::= \"b\""),
             Catch::Contains("line 4, column 1") && Catch::Contains("not defined before"));
  CHECK_THAT(message("root ::= \"a\" missing"),
             Catch::Contains("'missing' at line 1, column 14") && Catch::Contains("never defined"));
  CHECK_THAT(message("item ::= \"a\""), Catch::Contains("'root'"));
  CHECK_THAT(message(""), Catch::Contains("empty"));
  CHECK_THAT(message("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""),
             Catch::Contains("'expr'") && Catch::Contains("left-recursive"));
  CHECK_THAT(message("root ::= a\na ::= b? a \"x\"\nb ::= \"y\""), Catch::Contains("left-recursive"));
  CHECK_THAT(message("root ::= \"a\" root"), Catch::Contains("derives no string"));
  CHECK_THAT(message("root ::= \"\xC3\""), Catch::Contains("UTF-8"));
}

TEST_CASE("GBNF: alternatives deriving nothing are dropped, the rest kept", "[grammar][gbnf]") {
  // loop never ends, so "b" loop contributes nothing: "b..." must be rejected from the first byte.
  const Grammar g = parse_gbnf("root ::= \"a\" | \"b\" loop\nloop ::= \"c\" loop");
  CHECK(matches(g, "a"));
  ByteMatcher m(g);
  CHECK_FALSE(m.accept_byte('b'));
}
