#pragma once
// The one place quant/ turns a runtime choice into compile-time code: the instruction-set path
// of a kernel call (QuantKernel, kernel_path.hpp: VNNI / AVX2 / scalar, each only where the
// build has it) and the small counts the register-blocked kernels are instantiated for (rows,
// panels).
//
//   on_quant_path(kernel, [&](auto path) { w8a8_tile_path(path, w, t); });  // path: QuantPath<K>
//   with_static_count<6>(rows, [&](auto r) { tile<r()>(...); });              // r: 1 .. 6
//
// Both are always inlined, so a dispatch compiles to the branches (or jump table) a hand-written
// switch would, inside the kernel entry that calls it.
//
// Contract: on_quant_path calls f with the tag of `kernel` when this build has that path and
// with the scalar tag otherwise (callers pass a resolve_quant_kernel() result, so "otherwise"
// is only kScalar itself); a kernel family provides one overload per tag it implements, each
// under the same #if as its path. with_static_count<Max>(n, f) calls f(integral_constant<int, n>)
// for 1 <= n < Max and f(integral_constant<int, Max>) for any other n.

#include <type_traits>
#include <utility>

#include "inferkit/quant/kernel_path.hpp"

namespace inferkit::detail {

/// Compile-time tag of a concrete kernel path.
template <QuantKernel K>
using QuantPath = std::integral_constant<QuantKernel, K>;
using ScalarPath = QuantPath<QuantKernel::kScalar>;
using Avx2Path = QuantPath<QuantKernel::kAvx2>;
using Avx512VnniPath = QuantPath<QuantKernel::kAvx512Vnni>;

/// f(tag of `k`) (file comment).
template <class F>
[[gnu::always_inline]] inline decltype(auto) on_quant_path(QuantKernel k, F&& f) {
#if defined(INFERKIT_QUANT_AVX512VNNI)
  if (k == QuantKernel::kAvx512Vnni) return std::forward<F>(f)(Avx512VnniPath{});
#endif
#if defined(INFERKIT_QUANT_AVX2)
  if (k == QuantKernel::kAvx2) return std::forward<F>(f)(Avx2Path{});
#endif
  (void)k;
  return std::forward<F>(f)(ScalarPath{});
}

namespace count_detail {
template <int Max, class F, int... N>
[[gnu::always_inline]] inline void with_static_count(int n, F& f, std::integer_sequence<int, N...>) {
  if (!((n == N + 1 ? (f(std::integral_constant<int, N + 1>{}), true) : false) || ...))
    f(std::integral_constant<int, Max>{});
}
}  // namespace count_detail

/// f(integral_constant<int, n>) for 1 <= n < Max, else f(integral_constant<int, Max>).
template <int Max, class F>
[[gnu::always_inline]] inline void with_static_count(int n, F&& f) {
  static_assert(Max >= 1);
  count_detail::with_static_count<Max>(n, f, std::make_integer_sequence<int, Max - 1>{});
}

}  // namespace inferkit::detail
