#pragma once
// 16-bit storage types: IEEE binary16 (Float16) and bfloat16 (BFloat16). Conversions from float
// round to nearest, ties to even, with correct overflow to infinity and gradual underflow to
// binary16 subnormals. NaN stays NaN (quieted, sign and upper payload bits kept); widening to
// float is exact for every bit pattern.

#include <bit>
#include <cstdint>

namespace inferkit {

/// IEEE 754 binary16 bits.
struct Float16 {
  std::uint16_t bits = 0;  ///< the binary16 bit pattern
  friend constexpr bool operator==(Float16, Float16) =
      default;  ///< bitwise equality (so +0 != -0 and NaN == NaN of the same bits)
};

/// bfloat16 bits (the upper half of a binary32).
struct BFloat16 {
  std::uint16_t bits = 0;  ///< the bfloat16 bit pattern (upper half of a binary32)
  friend constexpr bool operator==(BFloat16, BFloat16) =
      default;  ///< bitwise equality (so +0 != -0 and NaN == NaN of the same bits)
};

static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);

constexpr float to_float(Float16 h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t exp = (h.bits >> 10) & 0x1Fu;
  std::uint32_t mant = h.bits & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);  // signed zero
  // Subnormal: value = mant * 2^-24; normalize into a binary32 normal.
  std::uint32_t e = 113;  // exponent field of 2^-14
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

constexpr Float16 to_float16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {
    if (ax > 0x7F800000u)  // NaN: quiet it, keep the upper payload bits
      return {static_cast<std::uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu))};
    return {static_cast<std::uint16_t>(sign | 0x7C00u)};
  }
  // 65520 = 65504 + half an ulp: ties to even round up to 2^16, which overflows.
  if (ax >= 0x477FF000u) return {static_cast<std::uint16_t>(sign | 0x7C00u)};
  if (ax < 0x38800000u) {  // below 2^-14: binary16 subnormal or zero
    const std::uint32_t e = ax >> 23;
    const std::uint32_t shift = 126u - e;  // value / 2^-24 = mant_with_implicit >> shift
    if (shift > 24u) return {sign};        // below 2^-25 rounds to zero
    const std::uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return {static_cast<std::uint16_t>(sign | r)};
  }
  std::uint32_t r = ((((ax >> 23) - 112u) << 10) | ((ax & 0x7FFFFFu) >> 13));
  const std::uint32_t rem = ax & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // carry into the exponent is correct
  return {static_cast<std::uint16_t>(sign | r)};
}

constexpr float to_float(BFloat16 b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b.bits) << 16); }

constexpr BFloat16 to_bfloat16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return {static_cast<std::uint16_t>((x >> 16) | 0x0040u)};  // quiet NaN
  const std::uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  return {static_cast<std::uint16_t>(rounded >> 16)};
}

}  // namespace inferkit
