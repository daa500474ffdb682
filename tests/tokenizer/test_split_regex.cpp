// tokenizer/split_regex.hpp: the matcher's semantics against expectations derived by hand from the
// Perl / Python rules (leftmost-first alternation, greedy quantifiers that backtrack, lookahead,
// anchors at the ends of the piece being split), Unicode classes from the UCD tables, and the
// errors for syntax it does not support.

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "inferkit/tokenizer/split_regex.hpp"

using Catch::Matchers::Contains;
using inferkit::SplitRegex;
using inferkit::TextSpan;

namespace {

std::vector<std::string> pieces(const SplitRegex& re, const std::string& text) {
  std::vector<TextSpan> spans;
  re.split(text, 0, text.size(), spans);
  std::vector<std::string> out;
  for (const auto& s : spans) out.push_back(text.substr(s.begin, s.size()));
  return out;
}

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("SplitRegex: leftmost-first alternation and greedy backtracking", "[tokenizer][split_regex]") {
  CHECK(SplitRegex("a|ab").match_at("abc", 0) == 1);  // first alternative wins, not the longest
  CHECK(SplitRegex("ab|a").match_at("abc", 0) == 2);
  CHECK(SplitRegex("a+b").match_at("aaab", 0) == 4);
  CHECK(SplitRegex("a*ab").match_at("aaab", 0) == 4);  // a* gives one back
  CHECK(SplitRegex("x{2,3}").match_at("xxxxx", 0) == 3);
  CHECK(SplitRegex("x{2,3}").match_at("x", 0) == -1);
  CHECK(SplitRegex("x{2}").match_at("xxx", 0) == 2);
  CHECK(SplitRegex("x{2,}").match_at("xxxxy", 0) == 4);
  CHECK(SplitRegex("(?:ab)+").match_at("ababa", 0) == 4);
  CHECK(SplitRegex("(ab|cd)?e").match_at("cde", 0) == 3);
  // \s+(?!\S): a run of spaces before a word leaves its last space to the word.
  CHECK(pieces(SplitRegex(R"(\s+(?!\S)| ?\p{L}+)"), "a   b") == V{"a", "  ", " b"});
  CHECK(SplitRegex(R"(\s+(?=x))").match_at("   x", 0) == 3);
  CHECK(SplitRegex(R"(\s+$)").match_at("  ", 0) == 2);
  CHECK(SplitRegex(R"(\s+$)").match_at("  a", 0) == -1);
  CHECK(SplitRegex(R"(^a)").match_at("a", 0) == 1);
  CHECK(pieces(SplitRegex("^a"), "aaa") == V{"a", "aa"});  // ^ holds only at the piece's start
}

TEST_CASE("SplitRegex: split keeps matches and the gaps between them", "[tokenizer][split_regex]") {
  CHECK(pieces(SplitRegex("[0-9]+"), "ab12cd345") == V{"ab", "12", "cd", "345"});
  CHECK(pieces(SplitRegex("[0-9]+"), "") == V{});
  CHECK(pieces(SplitRegex("x?"), "abc") == V{"abc"});  // empty matches cut nothing
  std::vector<TextSpan> spans;
  const std::string t = "__12__";
  SplitRegex("[0-9]").split(t, 1, 5, spans);  // a sub-range: offsets stay the text's
  CHECK(spans == std::vector<TextSpan>{{1, 2}, {2, 3}, {3, 4}, {4, 5}});
}

TEST_CASE("SplitRegex: Unicode classes, escapes and literal code points", "[tokenizer][split_regex]") {
  CHECK(SplitRegex(R"(\p{L}+)").match_at("\xC3\xA9t\xC3\xA9!", 0) == 5);  // "été"
  CHECK(SplitRegex(R"(\p{N}+)").match_at("\xD9\xA1\xC2\xB2x", 0) == 4);   // Arabic-Indic one, superscript two
  CHECK(SplitRegex(R"(\d+)").match_at("\xD9\xA1\xC2\xB2", 0) == 2);       // \d is Nd only
  CHECK(SplitRegex(R"(\p{Lu})").match_at("a", 0) == -1);
  CHECK(SplitRegex(R"(\P{L})").match_at("1", 0) == 1);
  CHECK(SplitRegex(R"(\s+)").match_at("\xE3\x80\x80\xC2\xA0 \t", 0) == 7);        // U+3000, U+00A0
  CHECK(SplitRegex(R"(\s)").match_at("\x1C", 0) == -1);                           // not White_Space
  CHECK(SplitRegex(R"([^\s\p{L}\p{N}]+)").match_at("!?\xE2\x82\xAC a", 0) == 5);  // "!?€"
  CHECK(SplitRegex(R"([\x{4E00}-\x{9FA5}]+)").match_at("\xE4\xB8\x80\xE9\xBE\xA5x", 0) == 6);
  CHECK(SplitRegex("[\xE4\xB8\x80-\xE9\xBE\xA5]+").match_at("\xE4\xB8\x80x", 0) == 3);
  CHECK(SplitRegex(R"(\$\+\|)").match_at("$+|", 0) == 3);
  CHECK(SplitRegex(R"([a\-z])").match_at("-", 0) == 1);
  CHECK(SplitRegex(R"([\r\n])").match_at("\n", 0) == 1);
  CHECK(SplitRegex(".").match_at("\n", 0) == -1);
  // An invalid byte: only . and negated classes match it.
  CHECK(SplitRegex(".").match_at("\xFF", 0) == 1);
  CHECK(SplitRegex(R"([^a])").match_at("\xFF", 0) == 1);
  CHECK(SplitRegex(R"(\S)").match_at("\xFF", 0) == 1);
  CHECK(SplitRegex(R"(\p{C})").match_at("\xFF", 0) == -1);
}

TEST_CASE("SplitRegex rejects what it does not support, naming the offset", "[tokenizer][split_regex]") {
  CHECK_THROWS_WITH(SplitRegex("a+?"), Contains("offset 2") && Contains("lazy"));
  CHECK_THROWS_WITH(SplitRegex("a++"), Contains("possessive"));
  CHECK_THROWS_WITH(SplitRegex("(?i:a)"), Contains("(?i"));
  CHECK_THROWS_WITH(SplitRegex("(?<=a)b"), Contains("(?<"));
  CHECK_THROWS_WITH(SplitRegex(R"(\1)"), Contains("\\1"));
  CHECK_THROWS_WITH(SplitRegex(R"(\p{Han})"), Contains("Han"));
  CHECK_THROWS_WITH(SplitRegex("(a"), Contains("unterminated group"));
  CHECK_THROWS_WITH(SplitRegex("a)"), Contains("unbalanced"));
  CHECK_THROWS_WITH(SplitRegex("[a"), Contains("unterminated ["));
  CHECK_THROWS_WITH(SplitRegex("[z-a]"), Contains("reversed range"));
  CHECK_THROWS_WITH(SplitRegex("(a*)*"), Contains("empty string"));
  CHECK_THROWS_WITH(SplitRegex("a{5,2}"), Contains("n < m"));
  CHECK_THROWS_WITH(SplitRegex("a{2000}"), Contains("1000"));
  CHECK_THROWS_WITH(SplitRegex("*a"), Contains("without an atom"));
  CHECK_THROWS_WITH(SplitRegex("\xFF"), Contains("UTF-8"));
  CHECK_THROWS_WITH(SplitRegex(R"(\x{110000})"), Contains("10FFFF"));
}
