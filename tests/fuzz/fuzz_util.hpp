#pragma once
// Shared by the libFuzzer targets (tests/fuzz). A finding is a crash, a sanitizer report, an
// exception other than the documented std::invalid_argument / std::out_of_range (they escape
// LLVMFuzzerTestOneInput and abort), or a broken invariant (FUZZ_CHECK aborts, printing it).

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace fuzz {

/// Runs f(); true when it returned, false when it threw a documented error
/// (std::invalid_argument or std::out_of_range). Any other exception escapes.
/// With `what`, the error's message is stored there (for FUZZ_CHECK diagnostics).
template <class F>
bool ok(F&& f, std::string* what = nullptr) {
  try {
    f();
    return true;
  } catch (const std::invalid_argument& e) {
    if (what) *what = e.what();
  } catch (const std::out_of_range& e) {
    if (what) *what = e.what();
  }
  return false;
}

/// A float that is often special: zeros, subnormals, the float and binary16 limits, infinities,
/// NaN, tiny and huge values; otherwise a small value or raw bits.
inline float any_float(FuzzedDataProvider& in) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  static constexpr float kSpecial[] = {0.0f,
                                       -0.0f,
                                       1.0f,
                                       -1.0f,
                                       0.5f,
                                       1e-45f,
                                       -1e-45f,
                                       1.1754942e-38f,
                                       1.17549435e-38f,
                                       3.4028235e38f,
                                       -3.4028235e38f,
                                       kInf,
                                       -kInf,
                                       std::numeric_limits<float>::quiet_NaN(),
                                       65504.0f,
                                       -65504.0f,
                                       65520.0f,
                                       6.1e-5f,
                                       5.96e-8f,
                                       1e-30f,
                                       1e30f,
                                       8.3e6f};
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return kSpecial[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kSpecial) - 1)];
    case 1:
      return static_cast<float>(in.ConsumeIntegralInRange<int>(-64, 64)) / 8.0f;
    case 2: {
      const std::uint32_t bits = in.ConsumeIntegral<std::uint32_t>();
      float f;
      static_assert(sizeof(f) == sizeof(bits));
      __builtin_memcpy(&f, &bits, sizeof(f));
      return f;
    }
    default:
      return in.ConsumeFloatingPointInRange<float>(-4.0f, 4.0f);
  }
}

/// A finite float of moderate size (|x| <= `limit`), for inputs that must be valid.
inline float finite_float(FuzzedDataProvider& in, float limit = 8.0f) {
  return in.ConsumeFloatingPointInRange<float>(-limit, limit);
}

}  // namespace fuzz
