#pragma once
// Little-endian integers in byte buffers: SamplerState's serialized form and the rule states'
// records (sampler_state.hpp).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace inferkit::detail {

/// Appends the low `bytes` bytes of v, least significant first.
inline void append_le(std::vector<std::uint8_t>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

/// Reads `bytes` bytes at `at` (the caller checked the size), least significant first.
inline std::uint64_t read_le(std::span<const std::uint8_t> b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{b[at + static_cast<std::size_t>(i)]} << (8 * i);
  return v;
}

}  // namespace inferkit::detail
