#pragma once
// Bounds on the sizes a flag, a trace line or a token file gives the runner, checked before
// anything is allocated: a size whose allocation cannot fit in this machine's memory is
// rejected with the flag (or trace line and field), the value and the bound named, instead of
// ending in a bare std::bad_alloc (or the OOM killer) somewhere inside a loop. Fixed bounds
// (positions are int32, thread counts at most inferkit::kMaxThreads) are the flag table's.
//
//   llama2c::require_fits_memory("--steps", steps, positions * llama2c::kv_bytes_per_token(6, 6, 48),
//                                "1 + prompt + steps positions of KV cache");

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>

#include <inferkit/core/view.hpp>
#include <inferkit/kv/quant_codec.hpp>

namespace llama2c {

using inferkit::Index;

/// The most positions a sequence may hold (positions are std::int32_t).
inline constexpr Index kMaxPositions = 2147483647;

/// This machine's physical memory in bytes (sysconf); 2^64 when the system does not say.
inline double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 18446744073709551616.0;
}

/// KV cache bytes one token takes in all `layers` layers of `kv_heads` heads of `head_dim`
/// values: float rows, or the codes and group parameters of a quantized encoding (keys and
/// values, each group's QuantParams as stored; per-channel key groups amortized over their
/// tokens).
inline double kv_bytes_per_token(Index layers, Index kv_heads, Index head_dim,
                                 const std::optional<inferkit::KvQuantConfig>& quant = std::nullopt) {
  const double rows = double(layers) * double(kv_heads), d = double(head_dim);
  if (!quant) return 2.0 * rows * d * sizeof(float);
  const auto side = [&](const inferkit::QuantSpec& s) {
    return d * s.bits / 8.0 + d / double(std::max<Index>(1, s.group_size)) * double(sizeof(inferkit::QuantParams));
  };
  return rows * (side(quant->keys) + side(quant->values));
}

/// A byte count as text ("1.37e+12 bytes").
inline std::string bytes_text(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.3g bytes", bytes);
  return buf;
}

/// Throws std::invalid_argument "<parameter> = <value> is invalid: <what> need <bytes>, more
/// than this machine's memory (<memory>)" unless `bytes` fits in physical memory.
inline void require_fits_memory(const std::string& parameter, long long value, double bytes, const std::string& what) {
  const double memory = physical_memory_bytes();
  if (bytes <= memory) return;
  throw std::invalid_argument(parameter + " = " + std::to_string(value) + " is invalid: " + what + " need " +
                              bytes_text(bytes) + ", more than this machine's memory (" + bytes_text(memory) + ")");
}

}  // namespace llama2c
