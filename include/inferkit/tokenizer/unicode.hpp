#pragma once
// Unicode for the tokenizers: UTF-8 decoding that never fails (an invalid byte decodes as itself,
// marked invalid, so byte-level tokenizers keep every input byte), UTF-8 encoding, and each code
// point's general category and White_Space property from tables generated from the Unicode
// Character Database (scripts/gen_unicode_tables.py; detail/unicode_tables.hpp is committed, so
// building needs nothing extra).
//
//   const auto d = inferkit::utf8_decode("\xC3\xA9", 0);              // {0xE9, 2, valid}
//   bool letter = inferkit::unicode_is(0xE9, inferkit::kUnicodeLetter);  // true (Ll)
//
// Contract: utf8_decode accepts exactly the well-formed sequences of Unicode 15 (Table 3-7: no
// overlong forms, no surrogates, nothing above U+10FFFF); anything else is one invalid byte.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "inferkit/tokenizer/detail/unicode_tables.hpp"

namespace inferkit {

/// General categories, in the order the generated table stores them (Cn = unassigned first).
enum class UnicodeCategory : std::uint8_t {
  kCn,
  kLu,
  kLl,
  kLt,
  kLm,
  kLo,
  kMn,
  kMc,
  kMe,
  kNd,
  kNl,
  kNo,
  kPc,
  kPd,
  kPs,
  kPe,
  kPi,
  kPf,
  kPo,
  kSm,
  kSc,
  kSk,
  kSo,
  kZs,
  kZl,
  kZp,
  kCc,
  kCf,
  kCs,
  kCo,
};

/// The two-letter name of a category ("Lu").
inline const char* unicode_category_name(UnicodeCategory c) {
  static constexpr const char* kNames[30] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd",
                                             "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm",
                                             "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
  return kNames[static_cast<unsigned>(c) % 30];
}

/// Sets of general categories, as bit masks over UnicodeCategory (bit i = category i).
using UnicodeCategoryMask = std::uint32_t;
inline constexpr UnicodeCategoryMask unicode_mask(UnicodeCategory c) { return 1u << static_cast<unsigned>(c); }
inline constexpr UnicodeCategoryMask kUnicodeLetter = 0x3Eu;          ///< \p{L}: Lu Ll Lt Lm Lo
inline constexpr UnicodeCategoryMask kUnicodeMark = 0x1C0u;           ///< \p{M}: Mn Mc Me
inline constexpr UnicodeCategoryMask kUnicodeNumber = 0xE00u;         ///< \p{N}: Nd Nl No
inline constexpr UnicodeCategoryMask kUnicodePunctuation = 0x7F000u;  ///< \p{P}: Pc Pd Ps Pe Pi Pf Po
inline constexpr UnicodeCategoryMask kUnicodeSymbol = 0x780000u;      ///< \p{S}: Sm Sc Sk So
inline constexpr UnicodeCategoryMask kUnicodeSeparator = 0x3800000u;  ///< \p{Z}: Zs Zl Zp
inline constexpr UnicodeCategoryMask kUnicodeOther = 0x3C000001u;     ///< \p{C}: Cc Cf Cs Co Cn

static_assert(kUnicodeLetter == (unicode_mask(UnicodeCategory::kLu) | unicode_mask(UnicodeCategory::kLl) |
                                 unicode_mask(UnicodeCategory::kLt) | unicode_mask(UnicodeCategory::kLm) |
                                 unicode_mask(UnicodeCategory::kLo)));
static_assert(kUnicodeNumber == (unicode_mask(UnicodeCategory::kNd) | unicode_mask(UnicodeCategory::kNl) |
                                 unicode_mask(UnicodeCategory::kNo)));
static_assert(kUnicodePunctuation == (unicode_mask(UnicodeCategory::kPc) | unicode_mask(UnicodeCategory::kPo) |
                                      unicode_mask(UnicodeCategory::kPd) | unicode_mask(UnicodeCategory::kPs) |
                                      unicode_mask(UnicodeCategory::kPe) | unicode_mask(UnicodeCategory::kPi) |
                                      unicode_mask(UnicodeCategory::kPf)));
static_assert(kUnicodeOther == (unicode_mask(UnicodeCategory::kCn) | unicode_mask(UnicodeCategory::kCc) |
                                unicode_mask(UnicodeCategory::kCf) | unicode_mask(UnicodeCategory::kCs) |
                                unicode_mask(UnicodeCategory::kCo)));

inline constexpr char32_t kUnicodeMax = 0x10FFFF;

/// The table byte of a code point (category in the low 5 bits, bit 7 White_Space).
inline std::uint8_t unicode_properties(char32_t cp) {
  if (cp > kUnicodeMax) return 0;  // not a code point: Cn, not white space
  return detail::kUnicodeStage2[static_cast<std::size_t>(detail::kUnicodeStage1[cp >> 8]) * 256 + (cp & 0xFF)];
}

/// General category of `cp` (Cn for values above U+10FFFF).
inline UnicodeCategory unicode_category(char32_t cp) {
  return static_cast<UnicodeCategory>(unicode_properties(cp) & 0x1F);
}

/// True when `cp`'s general category is in `mask`.
inline bool unicode_is(char32_t cp, UnicodeCategoryMask mask) {
  return ((1u << (unicode_properties(cp) & 0x1F)) & mask) != 0;
}

/// The White_Space property (what `\s` matches in Unicode-aware regex engines).
inline bool unicode_is_whitespace(char32_t cp) { return (unicode_properties(cp) & 0x80) != 0; }

/// One decoded UTF-8 unit: a code point and its byte length, or one invalid byte.
struct Utf8Char {
  char32_t cp;          ///< the code point, or the invalid byte's value
  std::uint8_t length;  ///< bytes consumed (1..4)
  bool valid;           ///< false: `cp` is a lone byte that starts no well-formed sequence
};

/// Decodes the character at `text[pos]` (pos < text.size()).
inline Utf8Char utf8_decode(std::string_view text, std::size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const std::size_t left = text.size() - pos;
  const unsigned b0 = s[0];
  if (b0 < 0x80) return {b0, 1, true};
  auto cont = [&](std::size_t i, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return i < left && s[i] >= lo && s[i] <= hi;
  };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1)) return {static_cast<char32_t>(((b0 & 0x1F) << 6) | (s[1] & 0x3F)), 2, true};
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    // E0: A0..BF (no overlong); ED: 80..9F (no surrogates).
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (cont(1, lo, hi) && cont(2))
      return {static_cast<char32_t>(((b0 & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F)), 3, true};
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    // F0: 90..BF (no overlong); F4: 80..8F (nothing above U+10FFFF).
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (cont(1, lo, hi) && cont(2) && cont(3))
      return {static_cast<char32_t>(((b0 & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F)),
              4, true};
  }
  return {b0, 1, false};
}

/// Appends the UTF-8 encoding of `cp` (<= U+10FFFF, not a surrogate) to `out`.
inline void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Bytes at the end of `bytes` that start a well-formed UTF-8 sequence not yet complete (0..3): what
/// a streaming decoder holds back until the next bytes arrive.
inline std::size_t utf8_incomplete_tail(std::string_view bytes) {
  const std::size_t n = bytes.size();
  for (std::size_t k = 1; k <= 3 && k <= n; ++k) {
    const auto b = static_cast<unsigned char>(bytes[n - k]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const std::size_t need = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xC2 && b <= 0xDF ? 2 : 1;
    if (need <= k) return 0;  // complete (or invalid: nothing will complete it)
    // A prefix of a well-formed sequence? Decode it with the missing bytes imagined valid.
    const auto b1 = k >= 2 ? static_cast<unsigned char>(bytes[n - k + 1]) : 0u;
    if (k >= 2) {
      const unsigned lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
      const unsigned hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
      if (b1 < lo || b1 > hi) return 0;
    }
    return k;
  }
  return 0;
}

/// The value of one hexadecimal digit (0-9, a-f, A-F), or -1 for any other character: the escapes
/// of GBNF, JSON and regex text (\xHH, \uHHHH, \UHHHHHHHH) all read digits through this.
inline constexpr int hex_digit_value(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

}  // namespace inferkit
