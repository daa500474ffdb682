#pragma once
// Which instruction-set path the quantized kernels of quant/ run. Paths are chosen at compile
// time (like the rest of inferkit): a build with AVX-512 F/BW/VL + VNNI has the VNNI path, a
// build with AVX2 + FMA + F16C the AVX2 path, every build the scalar path (the only one under
// INFERKIT_FORCE_SCALAR or without -march). `kAuto` takes the widest; tests force each path
// the build has and compare all of them with the fp64 reference. The kernels turn the path into
// code in one place: detail/kernel_dispatch.hpp (on_quant_path).
//
// Integer products are exact on every path, so W8A8 results are bitwise identical across
// paths; float-activation matrix-vector products sum in a path-dependent order.

#include <string>
#include <vector>

#include "inferkit/core/error.hpp"

#if !defined(INFERKIT_FORCE_SCALAR) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)
#define INFERKIT_QUANT_AVX512VNNI 1
#endif
#if !defined(INFERKIT_FORCE_SCALAR) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define INFERKIT_QUANT_AVX2 1
#endif

namespace inferkit {

/// Instruction-set path of the quantized kernels.
enum class QuantKernel {
  kAuto,        ///< the widest path this build has
  kScalar,      ///< portable C++ (always available)
  kAvx2,        ///< AVX2 + FMA + F16C: vpmaddubsw / vpmaddwd integer dot products
  kAvx512Vnni,  ///< AVX-512 BW/VL + VNNI: vpdpbusd integer dot products
};

/// Name of a path ("auto", "scalar", "avx2", "avx512vnni").
inline const char* quant_kernel_name(QuantKernel k) {
  switch (k) {
    case QuantKernel::kAuto:
      return "auto";
    case QuantKernel::kScalar:
      return "scalar";
    case QuantKernel::kAvx2:
      return "avx2";
    case QuantKernel::kAvx512Vnni:
      return "avx512vnni";
  }
  return "unknown";
}

/// Whether this build has path `k` (`kAuto` always resolves to one that it has).
inline bool quant_kernel_available(QuantKernel k) {
  switch (k) {
    case QuantKernel::kAuto:
    case QuantKernel::kScalar:
      return true;
    case QuantKernel::kAvx2:
#if defined(INFERKIT_QUANT_AVX2)
      return true;
#else
      return false;
#endif
    case QuantKernel::kAvx512Vnni:
#if defined(INFERKIT_QUANT_AVX512VNNI)
      return true;
#else
      return false;
#endif
  }
  return false;
}

/// Every concrete path this build has, narrowest first.
inline std::vector<QuantKernel> available_quant_kernels() {
  std::vector<QuantKernel> out;
  for (QuantKernel k : {QuantKernel::kScalar, QuantKernel::kAvx2, QuantKernel::kAvx512Vnni})
    if (quant_kernel_available(k)) out.push_back(k);
  return out;
}

/// The concrete path a request runs: `kAuto` gives the widest available one; a path the build
/// lacks throws std::invalid_argument naming `kernel`.
inline QuantKernel resolve_quant_kernel(QuantKernel requested) {
  if (requested == QuantKernel::kAuto) return available_quant_kernels().back();
  require(quant_kernel_available(requested), "kernel", std::string(quant_kernel_name(requested)),
          "this build has no such path (compile with the instruction set, or use kAuto)");
  return requested;
}

}  // namespace inferkit
