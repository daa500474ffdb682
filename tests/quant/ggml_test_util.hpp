// Independent decoders of ggml's block types for the quant/ggml_* tests, written from the
// formats' public descriptions in the loop form those descriptions use (super-block halves,
// shifts, masks), not from the library's per-weight equations; and random blocks with
// controlled factors (extreme, subnormal, zero) and codes (random, all zero, all maximum).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "inferkit/core/ggml_type.hpp"
#include "inferkit/core/half.hpp"

namespace ggml_test {

using inferkit::GgmlType;

/// binary16 from its fields (not the library's converter).
inline double half(const std::uint8_t* p) {
  const int b = p[0] | (p[1] << 8);
  const int s = b >> 15, e = (b >> 10) & 31, m = b & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

/// One decoded weight: its value (exact, in double) and |offset part| (for error bounds):
/// w = a - b with a = d * scale * code, b = the minimum / offset part.
struct Weight {
  double w, offset;
};

/// The block's weights. Float rounding of ggml's dequantization: every product below is exact
/// in double and ggml's float result is that value rounded once (products of an 11-bit factor
/// with codes of at most 14 bits are exact in float, and the final subtraction rounds once).
inline std::vector<Weight> decode(GgmlType t, const std::uint8_t* x) {
  std::vector<Weight> y;
  const auto put = [&](double dl, int q, double ml, double off) {
    y.push_back({dl * q - ml, std::abs(off) + std::abs(ml)});
  };
  switch (t) {
    case GgmlType::kQ8_0: {
      const double d = half(x);
      for (int j = 0; j < 32; ++j) put(d, static_cast<std::int8_t>(x[2 + j]), 0, 0);
      break;
    }
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: {
      const bool one = t == GgmlType::kQ4_1;
      const double d = half(x), m = one ? half(x + 2) : 0;
      const std::uint8_t* qs = x + (one ? 4 : 2);
      std::vector<Weight> hi;
      for (int j = 0; j < 16; ++j) {
        const int x0 = (qs[j] & 0x0F) - (one ? 0 : 8), x1 = (qs[j] >> 4) - (one ? 0 : 8);
        y.push_back({x0 * d + m, std::abs(8 * d) * !one + std::abs(m)});
        hi.push_back({x1 * d + m, std::abs(8 * d) * !one + std::abs(m)});
      }
      y.insert(y.end(), hi.begin(), hi.end());
      break;
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const bool one = t == GgmlType::kQ5_1;
      const double d = half(x), m = one ? half(x + 2) : 0;
      std::uint32_t qh;
      std::memcpy(&qh, x + (one ? 4 : 2), 4);
      const std::uint8_t* qs = x + (one ? 8 : 6);
      std::vector<Weight> hi;
      for (int j = 0; j < 16; ++j) {
        const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        const int x0 = ((qs[j] & 0x0F) | h0) - (one ? 0 : 16), x1 = ((qs[j] >> 4) | h1) - (one ? 0 : 16);
        y.push_back({x0 * d + m, std::abs(16 * d) * !one + std::abs(m)});
        hi.push_back({x1 * d + m, std::abs(16 * d) * !one + std::abs(m)});
      }
      y.insert(y.end(), hi.begin(), hi.end());
      break;
    }
    case GgmlType::kQ2_K: {
      const std::uint8_t* sc = x;
      const std::uint8_t* q = x + 16;
      const double d = half(x + 80), mn = half(x + 82);
      int is = 0;
      for (int n = 0; n < 256; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
          for (int half16 = 0; half16 < 2; ++half16) {
            const int s = sc[is++];
            const double dl = d * (s & 0xF), ml = mn * (s >> 4);
            for (int l = 0; l < 16; ++l) put(dl, (q[l + 16 * half16] >> shift) & 3, ml, 0);
          }
        }
        q += 32;
      }
      break;
    }
    case GgmlType::kQ3_K: {
      const std::uint8_t* hm = x;
      const std::uint8_t* q = x + 32;
      const double d = half(x + 108);
      // 16 six-bit scales in 12 bytes: low nibbles in bytes 0..7 (two per byte), high pairs in 8..11.
      std::uint32_t aux[4];
      std::memcpy(aux, x + 96, 12);
      const std::uint32_t tmp = aux[2], k1 = 0x03030303, k2 = 0x0f0f0f0f;
      aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4);
      aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4);
      aux[0] = (aux[0] & k2) | (((tmp >> 0) & k1) << 4);
      aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4);
      std::int8_t scales[16];
      std::memcpy(scales, aux, 16);
      int is = 0;
      std::uint8_t m = 1;
      for (int n = 0; n < 256; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
          for (int half16 = 0; half16 < 2; ++half16) {
            const double dl = d * (scales[is++] - 32);
            for (int l = 0; l < 16; ++l) {
              const int li = l + 16 * half16;
              const int v = ((q[li] >> shift) & 3) - ((hm[li] & m) ? 0 : 4);
              y.push_back({dl * v, std::abs(dl * 4)});
            }
          }
          m = static_cast<std::uint8_t>(m << 1);
        }
        q += 32;
      }
      break;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool five = t == GgmlType::kQ5_K;
      const double d = half(x), mn = half(x + 2);
      const std::uint8_t* s = x + 4;
      const std::uint8_t* qh = x + 16;
      const std::uint8_t* ql = x + (five ? 48 : 16);
      const auto scale_min = [&](int j, int& sc, int& m) {
        if (j < 4) {
          sc = s[j] & 63;
          m = s[j + 4] & 63;
        } else {
          sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
          m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
      };
      int is = 0, u1 = 1, u2 = 2;
      for (int j = 0; j < 256; j += 64) {
        int sc, m;
        scale_min(is, sc, m);
        const double d1 = d * sc, m1 = mn * m;
        scale_min(is + 1, sc, m);
        const double d2 = d * sc, m2 = mn * m;
        for (int l = 0; l < 32; ++l) put(d1, (ql[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0), m1, 0);
        for (int l = 0; l < 32; ++l) put(d2, (ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0), m2, 0);
        ql += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
      }
      break;
    }
    case GgmlType::kQ6_K: {
      const std::uint8_t* ql = x;
      const std::uint8_t* qh = x + 128;
      const auto* sc = reinterpret_cast<const std::int8_t*>(x + 192);
      const double d = half(x + 208);
      y.resize(256);
      for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[n + l] = {d * sc[is] * q1, std::abs(d * sc[is] * 32)};
          y[n + l + 32] = {d * sc[is + 2] * q2, std::abs(d * sc[is + 2] * 32)};
          y[n + l + 64] = {d * sc[is + 4] * q3, std::abs(d * sc[is + 4] * 32)};
          y[n + l + 96] = {d * sc[is + 6] * q4, std::abs(d * sc[is + 6] * 32)};
        }
        ql += 64;
        qh += 32;
        sc += 8;
      }
      break;
    }
    default:
      break;
  }
  return y;
}

/// The binary16 factor offsets of a block (where the random generator writes finite halves).
inline std::vector<int> factor_offsets(GgmlType t) {
  switch (t) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
      return {0};
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return {0, 2};
    case GgmlType::kQ2_K:
      return {80, 82};
    case GgmlType::kQ3_K:
      return {108};
    case GgmlType::kQ6_K:
      return {208};
    default:
      return {};
  }
}

/// How a random block's bytes are chosen.
enum class Codes { kRandom, kZero, kMax };

/// `blocks` random blocks of type t: codes per `codes`, factors binary16 of magnitude about
/// `scale` (random sign), or random finite halves over the whole range when scale == 0.
inline std::vector<std::uint8_t> random_blocks(GgmlType t, std::size_t blocks, unsigned seed, double scale,
                                               Codes codes = Codes::kRandom) {
  const std::size_t bytes = inferkit::ggml_block_bytes(t);
  std::vector<std::uint8_t> v(blocks * bytes);
  std::mt19937 rng(seed);
  for (auto& b : v) b = codes == Codes::kRandom ? static_cast<std::uint8_t>(rng()) : codes == Codes::kMax ? 0xFF : 0;
  std::uniform_real_distribution<double> u(0.5, 1.5);
  for (std::size_t i = 0; i < blocks; ++i)
    for (int off : factor_offsets(t)) {
      std::uint16_t h;
      if (scale == 0) {
        do {
          h = static_cast<std::uint16_t>(rng());
        } while (((h >> 10) & 31) == 31);
      } else {
        h = inferkit::to_float16(static_cast<float>(scale * u(rng) * (rng() & 1 ? -1 : 1))).bits;
      }
      v[i * bytes + static_cast<std::size_t>(off)] = static_cast<std::uint8_t>(h & 0xFF);
      v[i * bytes + static_cast<std::size_t>(off) + 1] = static_cast<std::uint8_t>(h >> 8);
    }
  return v;
}

/// Every block type the ggml kernels support.
inline const std::vector<GgmlType>& block_types() {
  static const std::vector<GgmlType> t = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                          GgmlType::kQ5_1, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
                                          GgmlType::kQ5_K, GgmlType::kQ6_K};
  return t;
}

}  // namespace ggml_test
