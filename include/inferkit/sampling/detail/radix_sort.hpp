#pragma once
// Descending sort of a small float sample (the pivot samples of top-k and top-p): an LSD radix
// sort over order-preserving integer keys, 8 bits per pass, skipping passes where every key
// shares the digit. Branch-free per element, unlike a comparison sort on random data.

#include <array>
#include <bit>
#include <cstdint>
#include <vector>

namespace inferkit::detail {

/// Sorts x (no NaN) in descending order; -0.0 and +0.0 keep their sign order (+0 first).
inline void sort_descending(std::vector<float>& x) {
  const std::size_t n = x.size();
  if (n < 2) return;
  // Ascending keys for descending floats: positives map to 0x7FFFFFFF - bits (largest first),
  // negatives keep their bits (sign set, magnitude ascending) and so follow every positive.
  std::vector<std::uint32_t> key(n), tmp(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto u = std::bit_cast<std::uint32_t>(x[i]);
    key[i] = (u & 0x80000000u) ? u : 0x7FFFFFFFu - u;
  }
  for (int shift = 0; shift < 32; shift += 8) {
    std::array<std::uint32_t, 256> count{};
    for (std::uint32_t k : key) ++count[(k >> shift) & 0xFF];
    if (count[(key[0] >> shift) & 0xFF] == n) continue;  // one digit for all: nothing moves
    std::uint32_t sum = 0;
    for (auto& c : count) {
      const std::uint32_t v = c;
      c = sum;
      sum += v;
    }
    for (std::uint32_t k : key) tmp[count[(k >> shift) & 0xFF]++] = k;
    key.swap(tmp);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t k = key[i];
    x[i] = std::bit_cast<float>((k & 0x80000000u) ? k : 0x7FFFFFFFu - k);
  }
}

}  // namespace inferkit::detail
