#pragma once
// The byte-level alphabet of GPT-2-style BPE vocabularies (Radford et al. 2019, the released
// encoder's bytes_to_unicode): every byte is stored as one printable code point, so a vocabulary
// entry is a string of such code points. Bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF stand for
// themselves; the other 68 bytes (controls, space, 0x7F..0xA0, 0xAD) map in increasing order to
// U+0100, U+0101, ... (a space is U+0120 'Ġ', a newline U+010A 'Ċ').
//
//   char32_t c = inferkit::byte_to_unicode(' ');   // 0x120
//   int b = inferkit::unicode_to_byte(0x120);      // 32
//
// Contract: byte_to_unicode is a bijection from the 256 bytes onto its image; unicode_to_byte is
// its inverse and -1 for every other code point.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "inferkit/tokenizer/unicode.hpp"

namespace inferkit {

namespace detail {
struct ByteLevelTables {
  std::array<char32_t, 256> to_unicode{};
  std::array<std::int16_t, 0x144> to_byte{};  // every image lies below U+0144
  constexpr ByteLevelTables() {
    for (auto& b : to_byte) b = -1;
    std::uint32_t next = 256;
    for (std::uint32_t b = 0; b < 256; ++b) {
      const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_unicode[b] = self ? b : next++;
      to_byte[to_unicode[b]] = static_cast<std::int16_t>(b);
    }
  }
};
inline constexpr ByteLevelTables kByteLevel{};
}  // namespace detail

/// The code point that stands for byte `b`.
inline constexpr char32_t byte_to_unicode(std::uint8_t b) { return detail::kByteLevel.to_unicode[b]; }

/// The byte code point `cp` stands for, or -1.
inline constexpr int unicode_to_byte(char32_t cp) {
  return cp < detail::kByteLevel.to_byte.size() ? detail::kByteLevel.to_byte[cp] : -1;
}

/// Appends the byte-level form of `bytes` (each byte as its code point, UTF-8 encoded) to `out`.
inline void byte_level_encode(std::string_view bytes, std::string& out) {
  for (const char c : bytes) utf8_append(out, byte_to_unicode(static_cast<std::uint8_t>(c)));
}

/// Appends the bytes the byte-level string `text` stands for to `out`. Returns false (and appends
/// the offending characters' UTF-8 unchanged) when a character is not in the alphabet.
inline bool byte_level_decode(std::string_view text, std::string& out) {
  bool ok = true;
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Char c = utf8_decode(text, i);
    const int b = c.valid ? unicode_to_byte(c.cp) : -1;
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(text.substr(i, c.length));
      ok = false;
    }
    i += c.length;
  }
  return ok;
}

}  // namespace inferkit
