#pragma once
// Philox4x32-10, the counter-based generator of Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3" (SC'11), as specified by Random123. Output is a pure function of (key, counter),
// so a draw identified by (seed, stream, index) gives the same bits on any thread, in any order.

#include <array>
#include <cstdint>

namespace inferkit {

/// Philox4x32-10 counter-based bijection (Salmon et al. 2011; Random123 known answers).
class Philox4x32 {
 public:
  using Counter = std::array<std::uint32_t, 4>;  ///< four 32-bit counter words
  using Key = std::array<std::uint32_t, 2>;      ///< two 32-bit key words

  static constexpr int kRounds = 10;  ///< rounds (10: Random123's default)

  /// The Philox4x32-10 bijection of the counter under the key.
  static constexpr Counter generate(Counter ctr, Key key) {
    for (int r = 0; r < kRounds; ++r) {
      if (r > 0) {
        key[0] += kWeyl0;
        key[1] += kWeyl1;
      }
      ctr = round(ctr, key);
    }
    return ctr;
  }

 private:
  static constexpr std::uint32_t kMul0 = 0xD2511F53u;
  static constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
  static constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
  static constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

  static constexpr Counter round(const Counter& c, const Key& k) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
};

/// A seeded, counter-based random source: draw `index` of stream `stream` under `seed` is
/// Philox4x32-10 with key = seed and counter = (index, stream), four 32-bit words per block.
/// Streams separate independent consumers (e.g. one per sequence in a batch).
class CounterRng {
 public:
  constexpr CounterRng(std::uint64_t seed, std::uint64_t stream = 0)
      : seed_(seed), stream_(stream) {}  ///< A source for `seed` and `stream`.

  std::uint64_t seed() const { return seed_; }      ///< the seed (Philox key)
  std::uint64_t stream() const { return stream_; }  ///< the stream (upper counter words)

  /// The 4 x 32 random bits of block `index`.
  constexpr Philox4x32::Counter block(std::uint64_t index) const {
    return Philox4x32::generate({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                                 static_cast<std::uint32_t>(stream_), static_cast<std::uint32_t>(stream_ >> 32)},
                                {static_cast<std::uint32_t>(seed_), static_cast<std::uint32_t>(seed_ >> 32)});
  }

  /// Uniform float in [0, 1) from the first word of block `index` (24 random bits).
  constexpr float uniform_float(std::uint64_t index) const { return to_unit_float(block(index)[0]); }

  /// Uniform double in [0, 1) with 53 random bits from block `index`.
  constexpr double uniform_double(std::uint64_t index) const {
    const auto b = block(index);
    return to_unit_double(b[0], b[1]);
  }

  /// 24-bit float in [0, 1): multiples of 2^-24.
  static constexpr float to_unit_float(std::uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1.0p-24f; }
  /// 24-bit float in (0, 1]: never 0, so log() of it is finite.
  static constexpr float to_open_closed_float(std::uint32_t bits) {
    return static_cast<float>((bits >> 8) + 1u) * 0x1.0p-24f;
  }
  /// 53-bit double in [0, 1).
  static constexpr double to_unit_double(std::uint32_t a, std::uint32_t b) {
    const std::uint64_t bits = (static_cast<std::uint64_t>(a) << 21) ^ (b >> 11);
    return static_cast<double>(bits & ((std::uint64_t{1} << 53) - 1)) * 0x1.0p-53;
  }

 private:
  std::uint64_t seed_;
  std::uint64_t stream_;
};

}  // namespace inferkit
