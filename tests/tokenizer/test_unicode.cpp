// tokenizer/unicode.hpp: the generated category and White_Space tables against ICU (an independent
// implementation of the same Unicode version: ICU 72 implements Unicode 15.0), every code point;
// UTF-8 decoding against a naive transcription of the Unicode standard's Table 3-7 over every 1-,
// 2- and 3-byte sequence and a sample of 4-byte ones; encoding round trips.

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>

#include "inferkit/tokenizer/unicode.hpp"

#ifdef INFERKIT_TEST_WITH_ICU
#include <unicode/uchar.h>
#include <unicode/uversion.h>
#endif

using inferkit::Utf8Char;

namespace {

// Table 3-7 (Well-Formed UTF-8 Byte Sequences), row by row: the length of the well-formed
// sequence at the start of b[0..n), or 0.
int table_3_7(const unsigned char* b, int n) {
  auto in = [](unsigned char x, int lo, int hi) { return x >= lo && x <= hi; };
  if (n >= 1 && b[0] <= 0x7F) return 1;
  if (n >= 2 && in(b[0], 0xC2, 0xDF) && in(b[1], 0x80, 0xBF)) return 2;
  if (n >= 3 && b[0] == 0xE0 && in(b[1], 0xA0, 0xBF) && in(b[2], 0x80, 0xBF)) return 3;
  if (n >= 3 && in(b[0], 0xE1, 0xEC) && in(b[1], 0x80, 0xBF) && in(b[2], 0x80, 0xBF)) return 3;
  if (n >= 3 && b[0] == 0xED && in(b[1], 0x80, 0x9F) && in(b[2], 0x80, 0xBF)) return 3;
  if (n >= 3 && in(b[0], 0xEE, 0xEF) && in(b[1], 0x80, 0xBF) && in(b[2], 0x80, 0xBF)) return 3;
  if (n >= 4 && b[0] == 0xF0 && in(b[1], 0x90, 0xBF) && in(b[2], 0x80, 0xBF) && in(b[3], 0x80, 0xBF)) return 4;
  if (n >= 4 && in(b[0], 0xF1, 0xF3) && in(b[1], 0x80, 0xBF) && in(b[2], 0x80, 0xBF) && in(b[3], 0x80, 0xBF)) return 4;
  if (n >= 4 && b[0] == 0xF4 && in(b[1], 0x80, 0x8F) && in(b[2], 0x80, 0xBF) && in(b[3], 0x80, 0xBF)) return 4;
  return 0;
}

// True when utf8_decode agrees with Table 3-7 on b[0..n) (assertions only on a mismatch: millions
// of sequences are checked).
bool decode_agrees(const unsigned char* b, int n) {
  const std::string s(reinterpret_cast<const char*>(b), static_cast<std::size_t>(n));
  const Utf8Char c = inferkit::utf8_decode(s, 0);
  const int want = table_3_7(b, n);
  if (want == 0) return !c.valid && c.length == 1 && c.cp == b[0];
  std::string back;
  inferkit::utf8_append(back, c.cp);
  return c.valid && c.length == want && back == s.substr(0, static_cast<std::size_t>(want));
}

}  // namespace

TEST_CASE("utf8_decode accepts exactly Table 3-7's sequences", "[tokenizer][unicode]") {
  unsigned char b[4] = {};
  long bad = 0, checked = 0;
  auto check = [&](int n) {
    ++checked;
    if (!decode_agrees(b, n) && ++bad < 10)
      FAIL_CHECK("bytes " << int(b[0]) << " " << int(b[1]) << " " << int(b[2]) << " " << int(b[3]) << " n " << n);
  };
  for (int x = 0; x < 256; ++x) {
    b[0] = static_cast<unsigned char>(x);
    check(1);
    for (int y = 0; y < 256; ++y) {
      b[1] = static_cast<unsigned char>(y);
      check(2);
      for (int z = 0x70; z < 0xD0; ++z) {  // third byte: around the continuation range
        b[2] = static_cast<unsigned char>(z);
        check(3);
      }
    }
  }
  std::mt19937 rng(27);
  for (int i = 0; i < 200000; ++i) {
    for (auto& v : b) v = static_cast<unsigned char>(rng() & 0xFF);
    b[0] = static_cast<unsigned char>(0xF0 + rng() % 8);
    check(4);
  }
  CHECK(bad == 0);
  CHECK(checked > 6000000);
}

TEST_CASE("utf8_append / utf8_decode round-trip every scalar value", "[tokenizer][unicode]") {
  long bad = 0;
  for (char32_t cp = 0; cp <= inferkit::kUnicodeMax; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    inferkit::utf8_append(s, cp);
    const Utf8Char c = inferkit::utf8_decode(s, 0);
    bool ok = c.valid && c.cp == cp && c.length == s.size() && inferkit::utf8_incomplete_tail(s) == 0;
    for (std::size_t k = 1; k < s.size(); ++k) ok = ok && inferkit::utf8_incomplete_tail(s.substr(0, k)) == k;
    if (!ok && ++bad < 10) FAIL_CHECK("U+" << std::hex << static_cast<std::uint32_t>(cp));
  }
  CHECK(bad == 0);
  CHECK(inferkit::utf8_incomplete_tail("a\xC3") == 1);
  CHECK(inferkit::utf8_incomplete_tail("\xE0\x80") == 0);  // can never complete (overlong)
  CHECK(inferkit::utf8_incomplete_tail("\xED\xA0") == 0);  // a surrogate
  CHECK(inferkit::utf8_incomplete_tail("\x80") == 0);
  CHECK(inferkit::utf8_incomplete_tail("") == 0);
}

TEST_CASE("Unicode categories and White_Space: spot checks", "[tokenizer][unicode]") {
  using C = inferkit::UnicodeCategory;
  CHECK(inferkit::unicode_category('A') == C::kLu);
  CHECK(inferkit::unicode_category(0x4E00) == C::kLo);
  CHECK(inferkit::unicode_category(0x0660) == C::kNd);
  CHECK(inferkit::unicode_category(0x00B2) == C::kNo);
  CHECK(inferkit::unicode_category(0x0301) == C::kMn);
  CHECK(inferkit::unicode_category(0x20AC) == C::kSc);
  CHECK(inferkit::unicode_category(0x1F600) == C::kSo);
  CHECK(inferkit::unicode_category(0xE000) == C::kCo);
  CHECK(inferkit::unicode_category(0x0378) == C::kCn);
  CHECK(inferkit::unicode_category(0x110000) == C::kCn);
  CHECK(inferkit::unicode_is_whitespace(0x3000));
  CHECK(inferkit::unicode_is_whitespace(0x85));
  CHECK(!inferkit::unicode_is_whitespace(0x200B));
  CHECK(!inferkit::unicode_is_whitespace(0x1C));
  CHECK(inferkit::detail::kUnicodeWhiteSpaceCount == 25);
  CHECK(std::string(inferkit::detail::kUnicodeVersion) == "15.0.0");
}

#ifdef INFERKIT_TEST_WITH_ICU
TEST_CASE("Unicode tables equal ICU's for every code point", "[tokenizer][unicode]") {
  UVersionInfo v;
  u_getUnicodeVersion(v);
  if (v[0] != 15 || v[1] != 0) {
    WARN("ICU implements Unicode " << int(v[0]) << "." << int(v[1]) << ", not 15.0: skipped");
    return;
  }
  int mismatches = 0;
  for (UChar32 cp = 0; cp <= 0x10FFFF; ++cp) {
    const char* icu = u_getPropertyValueName(UCHAR_GENERAL_CATEGORY, u_charType(cp), U_SHORT_PROPERTY_NAME);
    const std::string ours = inferkit::unicode_category_name(inferkit::unicode_category(static_cast<char32_t>(cp)));
    const bool ws = u_hasBinaryProperty(cp, UCHAR_WHITE_SPACE) != 0;
    if (ours != icu || ws != inferkit::unicode_is_whitespace(static_cast<char32_t>(cp))) {
      if (++mismatches < 10) FAIL_CHECK("U+" << std::hex << cp << ": ours " << ours << ", ICU " << icu);
    }
  }
  CHECK(mismatches == 0);
}
#endif
