#pragma once
// Products with GGUF weights (GgmlWeights): y = W x for decode (ggml_matvec) and Y = X W^T for
// prefill (ggml_matmul, T activation rows at once).
//
//   inferkit::ggml_matvec(w, x, y, /*num_threads=*/2);                 // x: cols, y: rows
//   inferkit::ggml_matmul(w, X /*T x cols*/, Y /*T x rows*/, 2);
//
// F32 / F16 / BF16: float activations, y_n = sum_k w(n, k) x_k accumulated in float (the
// elements widen in registers; detail/ggml_float_kernels.hpp).
//
// Block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K .. Q6_K; layouts in ggml_blocks.hpp): the
// activations are quantized to int8 per block (32 weights, llama.cpp's Q8_0; 256 for the
// K-quants, its Q8_K) and the products run on integer dot products
// (detail/ggml_int8_kernels.hpp): VNNI (vpdpbusd / vpdpwssd), AVX2 (vpmaddubsw + vpmaddwd) or
// scalar, as `kernel` says. Every path gives the same integer sums; the float sums of the block
// terms are ordered per path, so paths differ by float rounding only. Error against the exact
// product of the dequantized weights: at most sum_b (dx_b / 2) sum_{k in b} |w_k| from the
// activation rounding, plus float rounding.
//
// Threads split output rows in fixed items of 16 rows; each output is computed by the same
// operations whatever the thread count or the number of activation rows, so ggml_matvec(x)
// equals row 0 of ggml_matmul on the one-row X, bit for bit, on any thread count.

#include <algorithm>
#include <array>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/activation_rows.hpp"
#include "inferkit/quant/detail/ggml_decode_kernels.hpp"
#include "inferkit/quant/detail/ggml_float_kernels.hpp"
#include "inferkit/quant/detail/ggml_int8_kernels.hpp"
#include "inferkit/quant/detail/kernel_dispatch.hpp"
#include "inferkit/quant/detail/parallel.hpp"
#include "inferkit/quant/ggml_weights.hpp"
#include "inferkit/quant/kernel_path.hpp"
#include "inferkit/quant/matvec.hpp"

namespace inferkit {

namespace detail {

/// Output rows per parallel work item, and activation rows per pass over an item's weights (a
/// 64-token tile of 4096 features is 1 MiB of floats: it stays in L2 while the item's rows
/// stream past it).
inline constexpr Index kGgmlRowsPerItem = 16;
inline constexpr Index kGgmlTokenTile = 64;

/// Y(t, n) for rows [n0, n0 + nr) and every t of x, plain types.
template <class T>
inline void ggml_plain_item(const GgmlWeights& w, Index n0, Index nr, MatrixView<const float> x, MatrixView<float> y,
                            std::vector<float>& scratch) {
  const Index K = w.cols();
  const auto run = [&](const auto* const* rows) {
    for (Index t0 = 0; t0 < x.rows(); t0 += kGgmlTokenTile) {
      const Index t1 = std::min(x.rows(), t0 + kGgmlTokenTile);
      for (Index r = 0; r < nr; r += kFloatTileRows) {
        const int rr = static_cast<int>(std::min<Index>(kFloatTileRows, nr - r));
        for (Index t = t0; t < t1; t += kFloatTileCols) {
          const int tc = static_cast<int>(std::min<Index>(kFloatTileCols, t1 - t));
          with_static_count<kFloatTileRows>(rr, [&](auto R) {
            with_static_count<kFloatTileCols>(tc, [&](auto C) {
              using E = std::remove_cv_t<std::remove_pointer_t<std::remove_cvref_t<decltype(rows[0])>>>;
              ggml_float_tile<E, R(), C()>(rows + r, x.row_ptr(t), x.row_stride(), K, y.row_ptr(t) + n0 + r,
                                           y.row_stride());
            });
          });
        }
      }
    }
  };
  if constexpr (kLoadsInRegisters<T>) {
    const T* rows[kGgmlRowsPerItem];
    for (Index i = 0; i < nr; ++i) rows[i] = reinterpret_cast<const T*>(w.row(n0 + i));
    run(rows);
  } else {  // no in-register widening in this build: decode the item's rows once
    scratch.resize(static_cast<std::size_t>(nr * K));
    const float* rows[kGgmlRowsPerItem];
    for (Index i = 0; i < nr; ++i) {
      ggml_plain_row_to_float(w.type(), w.row(n0 + i), K, scratch.data() + i * K);
      rows[i] = scratch.data() + i * K;
    }
    run(rows);
  }
}

/// Activation rows per int8 tile (each unpacked weight chunk is used C times from registers).
inline constexpr int kGgmlInt8Tokens = 4;
/// The legacy VNNI prefill's register tile: weight rows x activation rows per pass (4 x 3: 12
/// float accumulators beside 8 code vectors and 4 factor vectors in 32 registers; on
/// 256x1024x4096, 1 thread, it ran 18.7 ms (Q4_0) against 21.8 for 4 x 4, 24.5 for 4 x 2, 22.0
/// for 2 x 8, on a loaded Zen 4).
inline constexpr int kGgmlLegacyRows = 4, kGgmlLegacyTokens = 3;

/// Y = X W^T for a block type: X quantized once, each row unpacked once per token tile.
template <class L>
inline void ggml_block_product(L layout, const GgmlWeights& w, MatrixView<const float> x, MatrixView<float> y,
                               int threads, QuantKernel kernel) {
  const Index N = w.rows(), K = w.cols(), T = x.rows(), items = ceil_div(N, kGgmlRowsPerItem);
  GgmlQ8Rows q8;
  ggml_quantize_activations(x, L::kBlock, kernel, q8, T >= 16 ? threads : 1);
  GgmlDecodeInput decode_in;
  on_quant_path(kernel, [&](auto path) {
    if (T == 1) ggml_decode_prepare<L>(path, q8, decode_in);
    const auto make = [&] {
      GgmlUnpackedRow r;
      r.resize(K, L::kBlock);
      return r;
    };
#if defined(INFERKIT_QUANT_AVX512VNNI)
    if constexpr (kGgmlLegacy<L> && std::is_same_v<decltype(path), Avx512VnniPath>) {
      if (T > 1) {  // the legacy VNNI prefill: kGgmlLegacyRows weight rows x kGgmlLegacyTokens tokens per pass
        GgmlLegacyRows xa;
        ggml_legacy_rows<L>(q8, xa, T >= 16 ? threads : 1);
        const auto make_packed = [] { return std::array<GgmlLegacyPacked, kGgmlLegacyRows>{}; };
        parallel_items_with(
            threads, items, make_packed, [&](std::array<GgmlLegacyPacked, kGgmlLegacyRows>& p, Index i) {
              const Index n0 = i * kGgmlRowsPerItem, n1 = std::min(N, n0 + kGgmlRowsPerItem);
              for (Index t0 = 0; t0 < T; t0 += kGgmlTokenTile) {
                const Index t1 = std::min(T, t0 + kGgmlTokenTile);
                for (Index n = n0; n < n1; n += kGgmlLegacyRows) {
                  const int rr = static_cast<int>(std::min<Index>(kGgmlLegacyRows, n1 - n));
                  for (int r = 0; r < rr; ++r)
                    ggml_legacy_pack<L>(reinterpret_cast<const std::uint8_t*>(w.row(n + r)), K,
                                        p[static_cast<std::size_t>(r)]);
                  for (Index t = t0; t < t1; t += kGgmlLegacyTokens) {
                    const int tc = static_cast<int>(std::min<Index>(kGgmlLegacyTokens, t1 - t));
                    with_static_count<kGgmlLegacyRows>(rr, [&](auto R) {
                      with_static_count<kGgmlLegacyTokens>(tc, [&](auto C) {
                        ggml_legacy_prefill_vnni<L, R(), C()>(p.data(), K, q8, xa, t, y.row_ptr(t) + n, y.row_stride());
                      });
                    });
                  }
                }
              }
            });
        return;
      }
    }
#endif
    parallel_items_with(threads, items, make, [&](GgmlUnpackedRow& r, Index i) {
      const Index n0 = i * kGgmlRowsPerItem, n1 = std::min(N, n0 + kGgmlRowsPerItem);
      if (T == 1) {  // decode: each block unpacked in registers and used once
        if constexpr (std::is_same_v<decltype(path), ScalarPath>) {
          for (Index n = n0; n < n1; ++n)
            y(0, n) = ggml_int8_row_scalar<L>(reinterpret_cast<const std::uint8_t*>(w.row(n)), K, q8, r);
        } else {
          ggml_decode_rows<L>(path, reinterpret_cast<const std::uint8_t*>(w.row(0)), w.row_bytes(), n0, n1, K, q8,
                              decode_in, y.row_ptr(0) + n0);
        }
        return;
      }
      for (Index t0 = 0; t0 < T; t0 += kGgmlTokenTile) {
        const Index t1 = std::min(T, t0 + kGgmlTokenTile);
        for (Index n = n0; n < n1; ++n) {
          ggml_unpack_row(layout, path, reinterpret_cast<const std::uint8_t*>(w.row(n)), K, r);
          for (Index t = t0; t < t1; t += kGgmlInt8Tokens) {
            const int tc = static_cast<int>(std::min<Index>(kGgmlInt8Tokens, t1 - t));
            with_static_count<kGgmlInt8Tokens>(tc, [&](auto C) {
              if constexpr (kGgmlLegacy<L> && !std::is_same_v<decltype(path), ScalarPath>)
                ggml_legacy_tile<L, C(), std::is_same_v<decltype(path), Avx512VnniPath>>(r, K, q8, t, y.row_ptr(t) + n,
                                                                                         y.row_stride());
              else
                ggml_int8_tile<L, C()>(path, r, K, q8, t, y.row_ptr(t) + n, y.row_stride());
            });
          }
        }
      }
    });
  });
}

/// Y = X W^T over every item on `threads` threads.
inline void ggml_product(const GgmlWeights& w, MatrixView<const float> x, MatrixView<float> y, int threads,
                         QuantKernel kernel) {
  if (on_ggml_block_type(w.type(), [&](auto layout) { ggml_block_product(layout, w, x, y, threads, kernel); })) return;
  const Index N = w.rows(), items = ceil_div(N, kGgmlRowsPerItem);
  const auto make = [] { return std::vector<float>(); };
  const auto item = [&](auto tag, std::vector<float>& scratch, Index i) {
    const Index n0 = i * kGgmlRowsPerItem, nr = std::min(kGgmlRowsPerItem, N - n0);
    ggml_plain_item<decltype(tag)>(w, n0, nr, x, y, scratch);
  };
  if (w.type() == GgmlType::kF32)
    parallel_items_with(threads, items, make, [&](std::vector<float>& s, Index i) { item(float{}, s, i); });
  else if (w.type() == GgmlType::kF16)
    parallel_items_with(threads, items, make, [&](std::vector<float>& s, Index i) { item(Float16{}, s, i); });
  else
    parallel_items_with(threads, items, make, [&](std::vector<float>& s, Index i) { item(BFloat16{}, s, i); });
}

}  // namespace detail

/// y = W x (file comment). Throws std::invalid_argument naming `x.size()` / `y.size()` for a
/// shape mismatch, `x[i]` for a NaN or infinite activation, `num_threads` outside 0..kMaxThreads
/// (0 = OpenMP's default), or `kernel` when the build lacks that path. `y` must not alias `x`.
inline void ggml_matvec(const GgmlWeights& w, std::span<const float> x, std::span<float> y, int num_threads,
                        QuantKernel kernel = QuantKernel::kAuto) {
  require_thread_count("num_threads", num_threads);
  detail::check_matvec_shapes(w.rows(), w.cols(), x, y);
  const QuantKernel path = resolve_quant_kernel(kernel);
  detail::require_finite_span(x, "x");
  detail::ggml_product(w, MatrixView<const float>(x.data(), 1, w.cols()), MatrixView<float>(y.data(), 1, w.rows()),
                       detail::matvec_threads(num_threads, w.rows() * w.cols()), path);
}

/// y = W x with float activations for every type: each row dequantized exactly
/// (ggml_dequantize_row) and multiplied in float, y_n = sum_k w(n, k) x_k within float rounding
/// of the fp64 product (no activation quantization). The accuracy reference beside ggml_matvec's
/// int8 road; its dequantization runs weight by weight, so it is not a decode fast path. The
/// same errors as ggml_matvec; same bits on any thread count.
inline void ggml_matvec_float(const GgmlWeights& w, std::span<const float> x, std::span<float> y, int num_threads) {
  require_thread_count("num_threads", num_threads);
  detail::check_matvec_shapes(w.rows(), w.cols(), x, y);
  detail::require_finite_span(x, "x");
  const Index N = w.rows(), K = w.cols(), items = ceil_div(N, detail::kGgmlRowsPerItem);
  const auto make = [&] { return std::vector<float>(static_cast<std::size_t>(K)); };
  detail::parallel_items_with(
      detail::matvec_threads(num_threads, N * K), items, make, [&](std::vector<float>& row, Index i) {
        for (Index n = i * detail::kGgmlRowsPerItem; n < std::min(N, (i + 1) * detail::kGgmlRowsPerItem); ++n) {
          detail::ggml_dequantize(w.type(), w.row(n), K, row.data());
          y[static_cast<std::size_t>(n)] = simd::dot(row.data(), x.data(), static_cast<std::size_t>(K));
        }
      });
}

/// Y = X W^T: Y(t, n) = sum_k W(n, k) X(t, k) for the T rows of `x` (file comment). Throws
/// std::invalid_argument naming `x.cols()`, `y.rows()` or `y.cols()` for a shape mismatch,
/// `x(t, k)` for a NaN or infinite activation, `num_threads` or `kernel`. `y` must not alias `x`.
inline void ggml_matmul(const GgmlWeights& w, MatrixView<const float> x, MatrixView<float> y, int num_threads,
                        QuantKernel kernel = QuantKernel::kAuto) {
  require_thread_count("num_threads", num_threads);
  require(x.cols() == w.cols(), "x.cols()", x.cols(), "must equal w.cols() (" + std::to_string(w.cols()) + ")");
  require(y.rows() == x.rows(), "y.rows()", y.rows(), "must equal x.rows() (" + std::to_string(x.rows()) + ")");
  require(y.cols() == w.rows(), "y.cols()", y.cols(), "must equal w.rows() (" + std::to_string(w.rows()) + ")");
  const QuantKernel path = resolve_quant_kernel(kernel);
  detail::require_finite_rows(x, "x");
  if (x.rows() == 0) return;
  detail::ggml_product(w, x, y, detail::matvec_threads(num_threads, w.rows() * w.cols() * x.rows()), path);
}

}  // namespace inferkit
