#pragma once
// Multi-head latent attention (MLA; DeepSeek-V2, arXiv:2405.04434 section 2.1; DeepSeek-V3) in
// the absorbed form, over a latent KV source.
//
// Per cached token j the layer keeps one latent row [c_j; k_pe_j]: c_j (kv_lora_rank values)
// and the RoPE'd key part k_pe_j (qk_rope_dim) shared by every head; head h's key is
// [W_UK_h c_j; k_pe_j] and its value W_UV_h c_j. Absorbing W_UK into the query
// (q~_h = [W_UK_h^T q_nope_h; q_pe_h], section 2.1.2) gives scores q~_h . [c_j; k_pe_j], so all
// heads attend one shared stream of latent rows: multi-query attention with head_dim
// kv_lora_rank + qk_rope_dim whose values are the latent rows themselves, run by attention()
// (every option applies: masks, sink logits, split-KV, LSE, batch-invariant mode). The
// output o_h = W_UV_h (sum_j p_j c_j) absorbs W_UV after the weighted sum. The latent stream is
// read once per step for all heads; the kernels' weighted sum also carries the k_pe columns
// (qk_rope_dim / (kv_lora_rank + qk_rope_dim) = 11% more p.v work at DeepSeek's 512 + 64),
// which keeps one row store for keys and values instead of two copies.
// Decode (up to kDecodeMaxQueries query tokens) and prefill chunks both run absorbed. Decode
// units of 32 or more query rows (V2-Lite from 2 tokens, V3 always) take the lanes kernel
// (kLanesDecodeRows, attention.hpp). For a chunk of Tq queries over Tk cached tokens the absorbed
// form costs Tq Tk H (2 x 576) multiply-adds; materializing K/V instead costs Tk H (128 + 128) 512
// to build them plus Tq Tk H (192 + 128): absorbed is cheaper below ~170 queries per chunk at
// DeepSeek's shapes, and a materialized prefill path is not implemented (bench/mla_bench.cpp
// mla_prefill has the absorbed chunk against attention over K/V materialized beforehand). The
// scale defaults to 1 / sqrt(qk_nope_dim + qk_rope_dim) (pass options.scale for YaRN's mscale^2).
//
//   const MlaShape shape{.num_heads = 16, .kv_lora_rank = 512, .qk_nope_dim = 128, .qk_rope_dim = 64,
//                        .v_head_dim = 128};
//   mla_attention(shape, q, cache.source(layer), {w_uk, w_uv}, out);  // q [Tq, 16, 192], out [Tq, 16, 128]

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "inferkit/attention/attention.hpp"
#include "inferkit/attention/detail/mla_decode.hpp"
#include "inferkit/attention/detail/problem.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/attention/options.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Geometry of one MLA layer's attention (DeepSeek-V2-Lite: 16, 512, 128, 64, 128; V3: 128
/// heads, the rest alike).
struct MlaShape {
  Index num_heads = 0;     ///< query heads H
  Index kv_lora_rank = 0;  ///< latent width: values of c per token
  Index qk_nope_dim = 0;   ///< per-head query / key part without RoPE
  Index qk_rope_dim = 0;   ///< per-head query / shared key part with RoPE (k_pe)
  Index v_head_dim = 0;    ///< per-head value width
  /// Values per cached token: kv_lora_rank + qk_rope_dim (576 for DeepSeek-V2 / V3).
  Index latent_dim() const { return kv_lora_rank + qk_rope_dim; }
  /// Per-head query width: qk_nope_dim + qk_rope_dim.
  Index query_dim() const { return qk_nope_dim + qk_rope_dim; }
  /// The default score scale 1 / sqrt(qk_nope_dim + qk_rope_dim).
  float default_scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(query_dim()))); }
};

/// The up-projections of one MLA layer from the latent c (DeepSeek's kv_b_proj split by head):
/// head h's key part is W_UK_h c with w_uk [H, qk_nope_dim, kv_lora_rank], its value W_UV_h c
/// with w_uv [H, v_head_dim, kv_lora_rank]. Any strides (views into one kv_b_proj matrix fit).
struct MlaWeights {
  Tensor3View<const float> w_uk;  ///< [H, qk_nope_dim, kv_lora_rank]
  Tensor3View<const float> w_uv;  ///< [H, v_head_dim, kv_lora_rank]
};

/// MlaWeights stored as bfloat16 (the checkpoints' own type): the absorbed decode step reads
/// W_UK and W_UV once per step for every head (2 H qk_nope_dim kv_lora_rank values, 67 MB in
/// f32 at DeepSeek-V3's 128 heads), so bf16 halves the step's weight bytes; the products and
/// sums stay f32 (each weight widens exactly).
struct MlaWeightsBf16 {
  Tensor3View<const BFloat16> w_uk;  ///< [H, qk_nope_dim, kv_lora_rank]
  Tensor3View<const BFloat16> w_uv;  ///< [H, v_head_dim, kv_lora_rank]
};

namespace detail {

/// y[i] += a * x[i] for i < n, x widened from T.
template <class T>
inline void mla_axpy(float* y, float a, const T* x, Index n) {
  if constexpr (std::is_same_v<T, float>) {
    simd::axpy(y, a, x, static_cast<std::size_t>(n));
  } else {
    constexpr auto W = static_cast<Index>(simd::kWidth);
    Index i = 0;
    if constexpr (kLoadsInRegisters<T>) {
      const simd::VecF av = simd::broadcast(a);
      for (; i + W <= n; i += W) simd::store(y + i, simd::fma(av, load_vec(x + i), simd::load(y + i)));
    }
    for (; i < n; ++i) y[i] += a * to_float(x[i]);
  }
}

/// dot(w, c) over n values, w widened from T.
template <class T>
inline float mla_dot(const T* w, const float* c, Index n) {
  if constexpr (std::is_same_v<T, float>) {
    return simd::dot(w, c, static_cast<std::size_t>(n));
  } else {
    constexpr auto W = static_cast<Index>(simd::kWidth);
    Index i = 0;
    float tail = 0.0f;
    simd::VecF s0 = simd::broadcast(0.0f), s1 = s0;
    if constexpr (kLoadsInRegisters<T>) {
      for (; i + 2 * W <= n; i += 2 * W) {
        s0 = simd::fma(load_vec(w + i), simd::load(c + i), s0);
        s1 = simd::fma(load_vec(w + i + W), simd::load(c + i + W), s1);
      }
    }
    for (; i < n; ++i) tail += to_float(w[i]) * c[i];
    return simd::hsum(s0 + s1) + tail;
  }
}

template <class Weights>
inline void validate_mla(const MlaShape& s, Index latent_heads, Index latent_dim, const Weights& w,
                         Tensor3View<const float> q, Tensor3View<float> out) {
  require(s.num_heads > 0, "shape.num_heads", s.num_heads, "must be > 0");
  require(s.kv_lora_rank > 0, "shape.kv_lora_rank", s.kv_lora_rank, "must be > 0");
  require(s.qk_nope_dim > 0, "shape.qk_nope_dim", s.qk_nope_dim, "must be > 0");
  require(s.qk_rope_dim >= 0, "shape.qk_rope_dim", s.qk_rope_dim, "must be >= 0");
  require(s.v_head_dim > 0, "shape.v_head_dim", s.v_head_dim, "must be > 0");
  require(latent_heads == 1, "latent.num_kv_heads()", latent_heads, "must be 1 (one latent stream for all heads)");
  require(latent_dim == s.latent_dim(), "latent.head_dim()", latent_dim,
          "must equal kv_lora_rank + qk_rope_dim (" + std::to_string(s.latent_dim()) + ")");
  const auto dims = [](const char* name, const auto& t, Index a, Index b, Index c) {
    const std::string n(name);
    require(t.dim0() == a, n + ".dim0()", t.dim0(), "must equal " + std::to_string(a));
    require(t.dim1() == b, n + ".dim1()", t.dim1(), "must equal " + std::to_string(b));
    require(t.dim2() == c, n + ".dim2()", t.dim2(), "must equal " + std::to_string(c));
  };
  dims("weights.w_uk", w.w_uk, s.num_heads, s.qk_nope_dim, s.kv_lora_rank);
  dims("weights.w_uv", w.w_uv, s.num_heads, s.v_head_dim, s.kv_lora_rank);
  require(q.dim1() == s.num_heads, "q.dim1()", q.dim1(),
          "must equal shape.num_heads (" + std::to_string(s.num_heads) + ")");
  require(q.dim2() == s.query_dim(), "q.dim2()", q.dim2(),
          "must equal qk_nope_dim + qk_rope_dim (" + std::to_string(s.query_dim()) + ")");
  require(out.dim0() == q.dim0(), "out.dim0()", out.dim0(), "must equal q.dim0() (" + std::to_string(q.dim0()) + ")");
  require(out.dim1() == s.num_heads, "out.dim1()", out.dim1(),
          "must equal shape.num_heads (" + std::to_string(s.num_heads) + ")");
  require(out.dim2() == s.v_head_dim, "out.dim2()", out.dim2(),
          "must equal shape.v_head_dim (" + std::to_string(s.v_head_dim) + ")");
}

}  // namespace detail

namespace detail {

/// mla_attention() for f32 or bf16 up-projections (the public overloads below).
template <KvSource S, class Weights>
void mla_attention_impl(const MlaShape& shape, Tensor3View<const float> q, const S& latent, const Weights& weights,
                        Tensor3View<float> out, MatrixView<float> lse, const AttentionOptions& opt) {
  detail::validate_mla(shape, latent.num_kv_heads(), latent.head_dim(), weights, q, out);
  const Index tq = q.dim0(), H = shape.num_heads, R = shape.kv_lora_rank, L = shape.latent_dim();
  const Index nope = shape.qk_nope_dim, rope = shape.qk_rope_dim, dv = shape.v_head_dim;
  AttentionOptions o = opt;
  if (!o.scale) o.scale = shape.default_scale();
  AlignedBuffer<float> qa(static_cast<std::size_t>(tq * H * L)), ctx(static_cast<std::size_t>(tq * H * L));
  require_thread_count("num_threads", opt.num_threads);
  const int threads = resolve_threads(opt.num_threads);
  const auto rows = static_cast<std::int64_t>(tq * H);
  // q~_h = [W_UK_h^T q_nope_h; q_pe_h]: one axpy of a W_UK row per q_nope element.
#pragma omp parallel for num_threads(threads) schedule(static) if (rows > 1)
  for (std::int64_t u = 0; u < rows; ++u) {
    const Index t = u / H, h = u % H;
    float* dst = qa.data() + u * L;
    std::fill(dst, dst + R, 0.0f);
    const float* qn = q.ptr(t, h);
    for (Index i = 0; i < nope; ++i) mla_axpy(dst, qn[i], weights.w_uk.ptr(h, i), R);
    std::copy_n(qn + nope, rope, dst + R);
  }
  const Tensor3View<const float> qv(qa.data(), tq, H, L);
  const Tensor3View<float> cv(ctx.data(), tq, H, L);
  if (mla_decode_applies(latent, tq, o)) {  // every row sees every latent row (mla_decode.hpp)
    const ProblemBuilder problems(qv, cv, lse, 1, L, o);
    mla_decode_attention(problems.sequence(0, tq, last_position(latent)), latent, R,
                         mla_split_tokens(latent.num_tokens(), o.kv_split_tokens), threads);
  } else {
    attention(qv, latent, cv, lse, o);
  }
  // o_h = W_UV_h ctx_h[0, kv_lora_rank).
#pragma omp parallel for num_threads(threads) schedule(static) if (rows > 1)
  for (std::int64_t u = 0; u < rows; ++u) {
    const Index t = u / H, h = u % H;
    const float* c = ctx.data() + u * L;
    float* dst = out.ptr(t, h);
    for (Index j = 0; j < dv; ++j) dst[j] = mla_dot(weights.w_uv.ptr(h, j), c, R);
  }
}

}  // namespace detail

/// Absorbed MLA (file comment): q [Tq, H, qk_nope_dim + qk_rope_dim] (q_nope then the RoPE'd
/// q_pe of each head) against every latent row of `latent`, a KvSource with one KV head of
/// head_dim kv_lora_rank + qk_rope_dim whose keys and values are the rows [c; k_pe] (a
/// LatentCache's source(layer), kv/latent_cache.hpp, or DenseKv(rows, rows)). Writes out
/// [Tq, H, v_head_dim] = per head W_UV_h times the attention-weighted sum of c, and, when lse has
/// rows, each row's natural-log LSE [Tq, H] (including sink logits, options.hpp). Options are
/// attention()'s; scale defaults to shape.default_scale().
/// @throws std::invalid_argument naming the parameter: shape fields, latent heads / dim, weight,
///         q, out or lse shapes, bad options.
/// Thread-safety: reads q, latent and the weights, writes only out and lse. Same bits for any
/// thread count (each (row, head) projection is one thread's; attention() splits by shape).
template <KvSource S>
void mla_attention(const MlaShape& shape, Tensor3View<const float> q, const S& latent, const MlaWeights& weights,
                   Tensor3View<float> out, MatrixView<float> lse = {}, const AttentionOptions& opt = {}) {
  detail::mla_attention_impl(shape, q, latent, weights, out, lse, opt);
}

/// mla_attention() without the LSE output: `mla_attention(shape, q, latent, weights, out,
/// {.causal = true})`. Same semantics, errors and thread-safety.
template <KvSource S>
void mla_attention(const MlaShape& shape, Tensor3View<const float> q, const S& latent, const MlaWeights& weights,
                   Tensor3View<float> out, const AttentionOptions& opt) {
  mla_attention(shape, q, latent, weights, out, MatrixView<float>{}, opt);
}

/// mla_attention() with bf16 up-projections (MlaWeightsBf16): the same semantics, errors and
/// thread-safety; each weight widens exactly to f32 before its product.
template <KvSource S>
void mla_attention(const MlaShape& shape, Tensor3View<const float> q, const S& latent, const MlaWeightsBf16& weights,
                   Tensor3View<float> out, MatrixView<float> lse = {}, const AttentionOptions& opt = {}) {
  detail::mla_attention_impl(shape, q, latent, weights, out, lse, opt);
}

/// mla_attention() with bf16 up-projections and without the LSE output.
template <KvSource S>
void mla_attention(const MlaShape& shape, Tensor3View<const float> q, const S& latent, const MlaWeightsBf16& weights,
                   Tensor3View<float> out, const AttentionOptions& opt) {
  detail::mla_attention_impl(shape, q, latent, weights, out, MatrixView<float>{}, opt);
}

}  // namespace inferkit
