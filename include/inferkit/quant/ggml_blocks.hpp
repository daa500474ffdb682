#pragma once
// ggml's tensor element layouts, as GGUF files store them, and their exact dequantization (the
// reference every ggml_* kernel is tested against).
//
//   std::vector<float> out(256);
//   inferkit::detail::ggml_dequantize(inferkit::GgmlType::kQ4_K, block_bytes, 256, out.data());
//
// Plain types: F32 (binary32), F16 (binary16), BF16 (the upper half of a binary32).
//
// Block types (facts of the format; h() reads a little-endian binary16, bytes are uint8 unless
// said, e = weight index in the block, bit(v, i) = (v >> i) & 1):
//   Q8_0 {h d; int8 qs[32]}                      w_e = d * qs[e]
//   Q4_0 {h d; qs[16]}                           u_e = e < 16 ? qs[e] & 15 : qs[e-16] >> 4;  w_e = d * (u_e - 8)
//   Q4_1 {h d; h m; qs[16]}                      u_e as Q4_0;  w_e = d * u_e + m
//   Q5_0 {h d; qh[4]; qs[16]}                    u_e = (Q4_0's nibble) | bit(qh as uint32, e) << 4;  w_e = d * (u_e -
//   16) Q5_1 {h d; h m; qh[4]; qs[16]}               u_e as Q5_0;  w_e = d * u_e + m
// K-quants, 256 weights per super-block, e = 32 c + l (c = 0..7, l = 0..31) or 16 j + i (j = 0..15):
//   Q2_K {scales[16]; qs[64]; h d; h dmin}       u_e = (qs[32 (e/128) + e%32] >> 2 ((e/32)%4)) & 3
//                                                 w_e = d * (scales[j] & 15) * u_e - dmin * (scales[j] >> 4)
//   Q3_K {hmask[32]; qs[64]; scales[12]; h d}    u_e = Q2_K's 2 bits | bit(hmask[e%32], e/32) << 2
//                                                 s_j = (j < 8 ? scales[j] & 15 : scales[j-8] >> 4)
//                                                       | ((scales[8 + j%4] >> 2 (j/4)) & 3) << 4
//                                                 w_e = d * (s_j - 32) * (u_e - 4)
//   Q4_K {h d; h dmin; scales[12]; qs[128]}      u_e = c even ? qs[32 (c/2) + l] & 15 : qs[32 (c/2) + l] >> 4
//                                                 (sc_c, m_c) = c < 4 ? (scales[c] & 63, scales[c+4] & 63)
//                                                   : (scales[c+4] & 15 | (scales[c-4] >> 6) << 4,
//                                                      scales[c+4] >> 4 | (scales[c] >> 6) << 4)
//                                                 w_e = d * sc_c * u_e - dmin * m_c
//   Q5_K {h d; h dmin; scales[12]; qh[32]; qs[128]}  u_e = Q4_K's nibble | bit(qh[l], c) << 4; w_e as Q4_K
//   Q6_K {ql[128]; qh[64]; int8 scales[16]; h d} with e = 128 n + 32 g + l (n = 0..1, g = 0..3):
//                                                 u_e = (ql[64 n + 32 (g%2) + l] >> 4 (g/2)) & 15
//                                                       | ((qh[32 n + l] >> 2 g) & 3) << 4
//                                                 w_e = d * scales[j] * (u_e - 32)
// Every type is one pattern: w_e = (d * sc_j) * (u_e - o) - dm * mn_j for the 16-weight group j
// of e, with unsigned codes u_e, a type constant o and small integer sc_j, mn_j (GgmlParts; for
// Q4_1 / Q5_1 sc = 1, mn = 1, dm = -m; Q8_0 keeps its signed code, o = 0). In float, d * sc_j
// and dm * mn_j are exact (11-bit d times at most 8 bits), so w_e is one correctly rounded
// product and one correctly rounded difference: the value ggml's own dequantization gives.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "inferkit/core/convert.hpp"
#include "inferkit/core/ggml_type.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

/// What the loader and kernels need to know of a supported type.
struct GgmlBlockCodec {
  GgmlType type;                    ///< the type
  int block_size;                   ///< weights per block
  int block_bytes;                  ///< bytes per block
  int factor_count;                 ///< binary16 factors per block (0 for the plain types)
  std::uint16_t factor_offsets[2];  ///< byte offset of each factor in the block
  const char* factor_names[2];      ///< their names in ggml's structs ("d", "dmin", "m")
};

inline constexpr GgmlBlockCodec kGgmlCodecs[] = {
    {GgmlType::kF32, 1, 4, 0, {0, 0}, {nullptr, nullptr}},    {GgmlType::kF16, 1, 2, 0, {0, 0}, {nullptr, nullptr}},
    {GgmlType::kBF16, 1, 2, 0, {0, 0}, {nullptr, nullptr}},   {GgmlType::kQ8_0, 32, 34, 1, {0, 0}, {"d", nullptr}},
    {GgmlType::kQ4_0, 32, 18, 1, {0, 0}, {"d", nullptr}},     {GgmlType::kQ4_1, 32, 20, 2, {0, 2}, {"d", "m"}},
    {GgmlType::kQ5_0, 32, 22, 1, {0, 0}, {"d", nullptr}},     {GgmlType::kQ5_1, 32, 24, 2, {0, 2}, {"d", "m"}},
    {GgmlType::kQ2_K, 256, 84, 2, {80, 82}, {"d", "dmin"}},   {GgmlType::kQ3_K, 256, 110, 1, {108, 0}, {"d", nullptr}},
    {GgmlType::kQ4_K, 256, 144, 2, {0, 2}, {"d", "dmin"}},    {GgmlType::kQ5_K, 256, 176, 2, {0, 2}, {"d", "dmin"}},
    {GgmlType::kQ6_K, 256, 210, 1, {208, 0}, {"d", nullptr}},
};

/// The codec of `t`, or nullptr when the ggml kernels do not support it.
inline const GgmlBlockCodec* ggml_block_codec(GgmlType t) {
  for (const auto& c : kGgmlCodecs)
    if (c.type == t) return &c;
  return nullptr;
}

/// Whether `t` is one of the plain float types (F32, F16, BF16).
inline bool ggml_plain_float(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

/// n elements of a plain-type row at p, widened to float (exact).
inline void ggml_plain_row_to_float(GgmlType t, const std::byte* p, Index n, float* out) {
  const auto count = static_cast<std::size_t>(n);
  if (t == GgmlType::kF32)
    std::memcpy(out, p, count * sizeof(float));
  else if (t == GgmlType::kF16)
    convert(reinterpret_cast<const Float16*>(p), out, count);
  else
    convert(reinterpret_cast<const BFloat16*>(p), out, count);
}

/// The binary16 at p (little-endian, any alignment) as float.
inline float ggml_half(const std::uint8_t* p) {
  return to_float(Float16{static_cast<std::uint16_t>(p[0] | (p[1] << 8))});
}

/// A block's factors in the common pattern (file comment): w_e = (d * sc[e/16]) * (u_e - o) - dm * mn[e/16].
struct alignas(32) GgmlParts {
  std::int16_t sc[16] = {}, mn[16] = {};  ///< per 16-weight group (vector-loadable)
  float d = 0, dm = 0;                    ///< the block's factors
};

/// Q4_K / Q5_K's 6-bit scale and minimum of 32-weight group c (file comment).
inline void ggml_k4_scale_min(const std::uint8_t* s, int c, int& sc, int& m) {
  if (c < 4) {
    sc = s[c] & 63;
    m = s[c + 4] & 63;
  } else {
    sc = (s[c + 4] & 15) | ((s[c - 4] >> 6) << 4);
    m = (s[c + 4] >> 4) | ((s[c] >> 6) << 4);
  }
}

/// Per-type layout: block size, bytes, offset o, factors (parts) and the code u_e of weight e.
template <GgmlType T>
struct GgmlLayout;

template <>
struct GgmlLayout<GgmlType::kQ8_0> {
  static constexpr GgmlType kType = GgmlType::kQ8_0;
  static constexpr bool kMins = false;  // whether blocks have a minimum term dm * mn_j
  static constexpr int kBlock = 32, kBytes = 34, kOffset = 0;
  static constexpr bool kSigned = true;  // u_e is the signed byte qs[e]
  static void parts(const std::uint8_t* b, GgmlParts& p) {
    p.d = ggml_half(b);
    p.sc[0] = p.sc[1] = 1;
  }
  static int code(const std::uint8_t* b, int e) { return static_cast<std::int8_t>(b[2 + e]); }
};

template <>
struct GgmlLayout<GgmlType::kQ4_0> {
  static constexpr GgmlType kType = GgmlType::kQ4_0;
  static constexpr bool kMins = false;  // whether blocks have a minimum term dm * mn_j
  static constexpr int kBlock = 32, kBytes = 18, kOffset = 8;
  static constexpr bool kSigned = false;
  static void parts(const std::uint8_t* b, GgmlParts& p) {
    p.d = ggml_half(b);
    p.sc[0] = p.sc[1] = 1;
  }
  static int code(const std::uint8_t* b, int e) { return e < 16 ? b[2 + e] & 15 : b[2 + e - 16] >> 4; }
};

template <>
struct GgmlLayout<GgmlType::kQ4_1> {
  static constexpr GgmlType kType = GgmlType::kQ4_1;
  static constexpr bool kMins = true;  // whether blocks have a minimum term dm * mn_j
  static constexpr int kBlock = 32, kBytes = 20, kOffset = 0;
  static constexpr bool kSigned = false;
  static void parts(const std::uint8_t* b, GgmlParts& p) {
    p.d = ggml_half(b);
    p.dm = -ggml_half(b + 2);
    p.sc[0] = p.sc[1] = p.mn[0] = p.mn[1] = 1;
  }
  static int code(const std::uint8_t* b, int e) { return e < 16 ? b[4 + e] & 15 : b[4 + e - 16] >> 4; }
};

/// Q5_0 / Q5_1's fifth bit of weight e from the 32-bit plane at qh.
inline int ggml_q5_high_bit(const std::uint8_t* qh, int e) { return (qh[e / 8] >> (e % 8)) & 1; }

template <>
struct GgmlLayout<GgmlType::kQ5_0> {
  static constexpr GgmlType kType = GgmlType::kQ5_0;
  static constexpr bool kMins = false;  // whether blocks have a minimum term dm * mn_j
  static constexpr int kBlock = 32, kBytes = 22, kOffset = 16;
  static constexpr bool kSigned = false;
  static void parts(const std::uint8_t* b, GgmlParts& p) {
    p.d = ggml_half(b);
    p.sc[0] = p.sc[1] = 1;
  }
  static int code(const std::uint8_t* b, int e) {
    const int nib = e < 16 ? b[6 + e] & 15 : b[6 + e - 16] >> 4;
    return nib | ggml_q5_high_bit(b + 2, e) << 4;
  }
};

template <>
struct GgmlLayout<GgmlType::kQ5_1> {
  static constexpr GgmlType kType = GgmlType::kQ5_1;
  static constexpr bool kMins = true;  // whether blocks have a minimum term dm * mn_j
  static constexpr int kBlock = 32, kBytes = 24, kOffset = 0;
  static constexpr bool kSigned = false;
  static void parts(const std::uint8_t* b, GgmlParts& p) {
    p.d = ggml_half(b);
    p.dm = -ggml_half(b + 2);
    p.sc[0] = p.sc[1] = p.mn[0] = p.mn[1] = 1;
  }
  static int code(const std::uint8_t* b, int e) {
    const int nib = e < 16 ? b[8 + e] & 15 : b[8 + e - 16] >> 4;
    return nib | ggml_q5_high_bit(b + 4, e) << 4;
  }
};

template <>
struct GgmlLayout<GgmlType::kQ2_K> {
  static constexpr GgmlType kType = GgmlType::kQ2_K;
  static constexpr bool kMins = true;  // whether blocks have a minimum term dm * mn_j
  static constexpr int kBlock = 256, kBytes = 84, kOffset = 0;
  static constexpr bool kSigned = false;
  static void parts(const std::uint8_t* b, GgmlParts& p) {
    p.d = ggml_half(b + 80);
    p.dm = ggml_half(b + 82);
    for (int j = 0; j < 16; ++j) {
      p.sc[j] = static_cast<std::int16_t>(b[j] & 15);
      p.mn[j] = static_cast<std::int16_t>(b[j] >> 4);
    }
  }
  static int code(const std::uint8_t* b, int e) {
    return (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
  }
};

template <>
struct GgmlLayout<GgmlType::kQ3_K> {
  static constexpr GgmlType kType = GgmlType::kQ3_K;
  static constexpr bool kMins = false;  // whether blocks have a minimum term dm * mn_j
  static constexpr int kBlock = 256, kBytes = 110, kOffset = 4;
  static constexpr bool kSigned = false;
  static void parts(const std::uint8_t* b, GgmlParts& p) {
    const std::uint8_t* s = b + 96;
    p.d = ggml_half(b + 108);
    for (int j = 0; j < 16; ++j) {
      const int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
      const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
      p.sc[j] = static_cast<std::int16_t>((lo | hi << 4) - 32);
    }
  }
  static int code(const std::uint8_t* b, int e) {
    const int low = (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    return low | ((b[e % 32] >> (e / 32)) & 1) << 2;
  }
};

template <>
struct GgmlLayout<GgmlType::kQ4_K> {
  static constexpr GgmlType kType = GgmlType::kQ4_K;
  static constexpr bool kMins = true;  // whether blocks have a minimum term dm * mn_j
  static constexpr int kBlock = 256, kBytes = 144, kOffset = 0;
  static constexpr bool kSigned = false;
  static void parts(const std::uint8_t* b, GgmlParts& p) {
    p.d = ggml_half(b);
    p.dm = ggml_half(b + 2);
    for (int c = 0; c < 8; ++c) {
      int sc, m;
      ggml_k4_scale_min(b + 4, c, sc, m);
      p.sc[2 * c] = p.sc[2 * c + 1] = static_cast<std::int16_t>(sc);
      p.mn[2 * c] = p.mn[2 * c + 1] = static_cast<std::int16_t>(m);
    }
  }
  static int code(const std::uint8_t* b, int e) {
    const int c = e / 32, l = e % 32;
    return (b[16 + 32 * (c / 2) + l] >> (4 * (c % 2))) & 15;
  }
};

template <>
struct GgmlLayout<GgmlType::kQ5_K> {
  static constexpr GgmlType kType = GgmlType::kQ5_K;
  static constexpr bool kMins = true;  // whether blocks have a minimum term dm * mn_j
  static constexpr int kBlock = 256, kBytes = 176, kOffset = 0;
  static constexpr bool kSigned = false;
  static void parts(const std::uint8_t* b, GgmlParts& p) { GgmlLayout<GgmlType::kQ4_K>::parts(b, p); }
  static int code(const std::uint8_t* b, int e) {
    const int c = e / 32, l = e % 32;
    return ((b[48 + 32 * (c / 2) + l] >> (4 * (c % 2))) & 15) | ((b[16 + l] >> c) & 1) << 4;
  }
};

template <>
struct GgmlLayout<GgmlType::kQ6_K> {
  static constexpr GgmlType kType = GgmlType::kQ6_K;
  static constexpr bool kMins = false;  // whether blocks have a minimum term dm * mn_j
  static constexpr int kBlock = 256, kBytes = 210, kOffset = 32;
  static constexpr bool kSigned = false;
  static void parts(const std::uint8_t* b, GgmlParts& p) {
    p.d = ggml_half(b + 208);
    for (int j = 0; j < 16; ++j) p.sc[j] = static_cast<std::int8_t>(b[192 + j]);
  }
  static int code(const std::uint8_t* b, int e) {
    const int n = e / 128, g = (e / 32) % 4, l = e % 32;
    const int low = (b[64 * n + 32 * (g % 2) + l] >> (4 * (g / 2))) & 15;
    return low | ((b[128 + 32 * n + l] >> (2 * g)) & 3) << 4;
  }
};

/// Calls f(GgmlLayout<T>{}) for a block type `t` (false for a plain or unsupported type).
template <class F>
inline bool on_ggml_block_type(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::kQ8_0:
      return f(GgmlLayout<GgmlType::kQ8_0>{}), true;
    case GgmlType::kQ4_0:
      return f(GgmlLayout<GgmlType::kQ4_0>{}), true;
    case GgmlType::kQ4_1:
      return f(GgmlLayout<GgmlType::kQ4_1>{}), true;
    case GgmlType::kQ5_0:
      return f(GgmlLayout<GgmlType::kQ5_0>{}), true;
    case GgmlType::kQ5_1:
      return f(GgmlLayout<GgmlType::kQ5_1>{}), true;
    case GgmlType::kQ2_K:
      return f(GgmlLayout<GgmlType::kQ2_K>{}), true;
    case GgmlType::kQ3_K:
      return f(GgmlLayout<GgmlType::kQ3_K>{}), true;
    case GgmlType::kQ4_K:
      return f(GgmlLayout<GgmlType::kQ4_K>{}), true;
    case GgmlType::kQ5_K:
      return f(GgmlLayout<GgmlType::kQ5_K>{}), true;
    case GgmlType::kQ6_K:
      return f(GgmlLayout<GgmlType::kQ6_K>{}), true;
    default:
      return false;
  }
}

/// One block of layout L dequantized: out[e] = (d * sc_j) * (u_e - o) - dm * mn_j.
template <class L>
inline void ggml_dequantize_block(L, const std::uint8_t* b, float* out) {
  GgmlParts p;
  L::parts(b, p);
  for (int e = 0; e < L::kBlock; ++e) {
    const int j = e / 16;
    out[e] = (p.d * static_cast<float>(p.sc[j])) * static_cast<float>(L::code(b, e) - L::kOffset) -
             p.dm * static_cast<float>(p.mn[j]);
  }
}

/// The n weights of a row at p (n a multiple of the block size), dequantized.
inline void ggml_dequantize(GgmlType t, const std::byte* p, Index n, float* out) {
  const bool block = on_ggml_block_type(t, [&](auto layout) {
    using L = decltype(layout);
    const auto* b = reinterpret_cast<const std::uint8_t*>(p);
    for (Index i = 0; i < n / L::kBlock; ++i) ggml_dequantize_block(layout, b + i * L::kBytes, out + i * L::kBlock);
  });
  if (!block) ggml_plain_row_to_float(t, p, n, out);
}

}  // namespace inferkit::detail
