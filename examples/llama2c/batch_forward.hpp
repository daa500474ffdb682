#pragma once
// The batched forward of the llama2.c model over one serving iteration (inferkit::BatchPlan):
// every scheduled row of every request (prefill chunks and decode rows packed back to back)
// goes through ONE matrix-matrix product per weight per layer; each request's K/V rows are
// written into its paged BlockTable (the plan's sequences), and one attention_batch() call per
// layer attends every request to its own table. Only the rows the plan samples reach the
// classifier. The model's weights, RMSNorm, SwiGLU and RoPE are those of llama2c.hpp.
//
// Deterministic mode (BatchForwardOptions::deterministic): a row's bits must not depend on
// which other rows share the iteration. Attention runs batch-invariant
// (AttentionOptions::batch_invariant), every per-row step (RMSNorm, RoPE, SwiGLU, residual adds)
// is row-local already, and the matmuls run fixed_order_gemm() below instead of Eigen: Eigen's
// GEMM picks its blocking from the product's shape (the row count included) and its kernels sum
// k-blocks into the output, so an output element's reduction order changes with the batch (and
// a 1-row product takes Eigen's GEMV, another order again). fixed_order_gemm computes every
// output element as one FMA chain over k = 0 .. K-1 from zero, whatever the row count, the
// row's place in its register tile or the thread that runs it.
//
// A ggml-backed model (a GGUF in F16, BF16 or a block type: Model::from_gguf) runs every
// projection and the classifier as ggml_matmul over the iteration's rows, straight from the
// file's blocks; that product computes each output the same way whatever the row count or the
// thread count (ggml_matvec.hpp), so it is batch-invariant in both modes and needs no
// transposed copy.

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/serving/batch_plan.hpp"
#include "llama2c.hpp"

namespace llama2c {

namespace detail {

namespace simd = inferkit::simd;
inline constexpr Index kGemmLanes = static_cast<Index>(simd::kWidth);
inline constexpr Index kGemmCols = 2 * kGemmLanes;  // output columns of a register tile
inline constexpr Index kGemmRows = 6;               // rows of a register tile
inline constexpr Index kGemmRowChunk = 48;          // rows of one parallel work unit

// acc = a * b + acc as one rounding where the build has FMA (as the vector lanes do), else a
// multiply and an add (no FMA instruction exists to contract them into).
inline float madd(float a, float b, float acc) {
#if defined(__FMA__) || defined(__AVX512F__)
  return std::fma(a, b, acc);
#else
  return a * b + acc;
#endif
}

// R rows x kGemmCols columns of y = x wt: each element one FMA chain over k in order.
template <int R>
void gemm_tile(const float* x, Index ldx, const float* wt, Index ldw, Index K, float* y, Index ldy, Index cols) {
  if constexpr (simd::kWidth == 1) {
    float acc[R][2] = {};
    for (Index k = 0; k < K; ++k) {
      const float w0 = wt[k * ldw], w1 = wt[k * ldw + 1];
      for (int r = 0; r < R; ++r) {
        const float xr = x[r * ldx + k];
        acc[r][0] = madd(xr, w0, acc[r][0]);
        acc[r][1] = madd(xr, w1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (Index c = 0; c < std::min<Index>(cols, 2); ++c) y[r * ldy + c] = acc[r][c];
  } else {
    simd::VecF acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = simd::broadcast(0.0f);
    for (Index k = 0; k < K; ++k) {
      const simd::VecF w0 = simd::load(wt + k * ldw), w1 = simd::load(wt + k * ldw + kGemmLanes);
      for (int r = 0; r < R; ++r) {
        const simd::VecF xr = simd::broadcast(x[r * ldx + k]);
        acc[r][0] = simd::fma(xr, w0, acc[r][0]);
        acc[r][1] = simd::fma(xr, w1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      float* yr = y + r * ldy;
      if (cols >= kGemmCols) {
        simd::store(yr, acc[r][0]);
        simd::store(yr + kGemmLanes, acc[r][1]);
      } else if (cols > kGemmLanes) {
        simd::store(yr, acc[r][0]);
        simd::store_partial(yr + kGemmLanes, acc[r][1], static_cast<std::size_t>(cols - kGemmLanes));
      } else {
        simd::store_partial(yr, acc[r][0], static_cast<std::size_t>(cols));
      }
    }
  }
}

template <int R = kGemmRows>
void gemm_rows(int rows, const float* x, Index ldx, const float* wt, Index ldw, Index K, float* y, Index ldy,
               Index cols) {
  if constexpr (R > 1) {
    if (rows < R) return gemm_rows<R - 1>(rows, x, ldx, wt, ldw, K, y, ldy, cols);
  }
  gemm_tile<R>(x, ldx, wt, ldw, K, y, ldy, cols);
}

}  // namespace detail

/// A weight matrix W [out x in] stored transposed as [in x padded_out] (zero columns past
/// `out`, padded_out a multiple of the register tile), the layout fixed_order_gemm() reads.
struct TransposedMatrix {
  Index in = 0, out = 0, padded_out = 0;  ///< shape: in rows of padded_out floats
  inferkit::AlignedBuffer<float> data;    ///< [in x padded_out]

  /// Transposes a row-major [out x in] matrix.
  explicit TransposedMatrix(const MatrixMap& w)
      : in(w.cols()),
        out(w.rows()),
        padded_out(inferkit::ceil_div(w.rows(), detail::kGemmCols) * detail::kGemmCols),
        data(static_cast<std::size_t>(in * padded_out)) {
    std::fill(data.data(), data.data() + in * padded_out, 0.0f);
    for (Index o = 0; o < out; ++o)
      for (Index k = 0; k < in; ++k) data[static_cast<std::size_t>(k * padded_out + o)] = w(o, k);
  }
};

/// y [rows x w.out] = x [rows x w.in] W^T, every element one FMA chain over k = 0 .. in - 1 (so a
/// row's result bits do not depend on `rows`, its place among them or `num_threads`). Rows have
/// strides ldx, ldy (floats). Parallel over (row chunk, column tile) units on `num_threads`
/// threads (0 = OpenMP's default).
inline void fixed_order_gemm(const float* x, Index rows, Index ldx, const TransposedMatrix& w, float* y, Index ldy,
                             int num_threads) {
  using namespace detail;
  const Index col_tiles = inferkit::ceil_div(w.out, kGemmCols), row_chunks = inferkit::ceil_div(rows, kGemmRowChunk);
  const auto units = static_cast<std::int64_t>(col_tiles * row_chunks);
  const double flops = 2.0 * double(rows) * double(w.in) * double(w.out);
#pragma omp parallel for schedule(static) \
    num_threads(inferkit::resolve_threads(num_threads)) if (units > 1 && flops > 4e5)
  for (std::int64_t u = 0; u < units; ++u) {
    const Index ct = u % col_tiles, rc = u / col_tiles;  // consecutive units share the row chunk
    const Index c0 = ct * kGemmCols, cols = std::min(kGemmCols, w.out - c0);
    const Index r_end = std::min(rows, (rc + 1) * kGemmRowChunk);
    for (Index r = rc * kGemmRowChunk; r < r_end; r += kGemmRows) {
      const int n = static_cast<int>(std::min(kGemmRows, r_end - r));
      gemm_rows(n, x + r * ldx, ldx, w.data.data() + c0, w.padded_out, w.in, y + r * ldy + c0, ldy, cols);
    }
  }
}

/// Options of the batched forward.
struct BatchForwardOptions {
  bool deterministic = false;  ///< batch-invariant attention and fixed_order_gemm() matmuls
  int num_threads = 0;         ///< threads for attention and the fixed-order matmuls (0 = OpenMP's default)
};

/// Runs serving plans through a model (float or ggml-backed weights; a model with a
/// ProjectionHook is rejected). Holds the scratch of the last iteration and, in deterministic
/// mode with float weights, the transposed weights. Not thread-safe; the model must outlive it.
class BatchForward {
 public:
  /// Throws std::invalid_argument for a model with installed projections (quantized weights).
  BatchForward(const Model& m, BatchForwardOptions o) : m_(&m), o_(o) {
    inferkit::require_thread_count("BatchForwardOptions::num_threads", o.num_threads);
    if (m.projections())
      throw std::invalid_argument(
          "llama2c: the batched forward runs float weights (no --weights / quantized projections)");
    if (o.deterministic && !m.ggml_backed()) {
      const Config& c = m.config();
      for (int l = 0; l < c.n_layers; ++l)
        for (Proj p : {Proj::kQ, Proj::kK, Proj::kV, Proj::kO, Proj::kW1, Proj::kW2, Proj::kW3})
          wt_.emplace_back(m.matrix(p, l));
      wt_.emplace_back(m.wcls());
    }
  }

  /// The options it was built with.
  const BatchForwardOptions& options() const { return o_; }

  /// Runs every row of `plan` through the model: writes each layer's K/V rows into the
  /// sequences' tables (write_at at s.position), and the logits of the rows listed in
  /// plan.logit_rows, in that order, to `logits` [logit_rows.size() x vocab]. Throws
  /// std::out_of_range for a token outside the vocabulary.
  template <class T>
  void run(const inferkit::BatchPlan<T>& plan, float* logits) {
    const Config& c = m_->config();
    const Index n = plan.num_tokens(), D = c.dim, kvd = c.kv_dim(), hs = c.head_size(), Hd = c.hidden_dim;
    if (n == 0) return;
    for (TokenId t : plan.token_ids)
      if (t < 0 || t >= c.vocab_size)
        throw std::out_of_range("llama2c: token " + std::to_string(t) + " is outside the vocabulary [0, " +
                                std::to_string(c.vocab_size) + ")");
    x_.resize(n, D);
    xb_.resize(n, D);
    q_.resize(n, c.q_dim());
    k_.resize(n, kvd);
    v_.resize(n, kvd);
    att_.resize(n, c.q_dim());
    h1_.resize(n, Hd);
    h3_.resize(n, Hd);
    pos_.resize(static_cast<std::size_t>(n));
    for (Index t = 0; t < n; ++t) {
      m_->embed(plan.token_ids[static_cast<std::size_t>(t)], x_.row(t).data());
      pos_[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(plan.positions[static_cast<std::size_t>(t)]);
    }
    const inferkit::RopeOptions rope = c.rope();
    const float eps = c.rms_eps;
    inferkit::AttentionOptions aopt;
    aopt.batch_invariant = o_.deterministic;
    double context = 0;  // attention work: every row against its sequence so far
    for (const auto& sq : plan.sequences) context += double(sq.num_tokens) * double(sq.position + sq.num_tokens);
    aopt.num_threads = 4.0 * context * double(c.q_dim()) < kParallelMinFlops ? 1 : o_.num_threads;
    std::vector<typename inferkit::BlockTable<T>::Source> sources;
    sources.reserve(plan.sequences.size());
    for (int l = 0; l < c.n_layers; ++l) {
      for (Index t = 0; t < n; ++t) rmsnorm(xb_.row(t).data(), x_.row(t).data(), m_->rms_att(l), D, eps);
      matmul(Proj::kQ, l, xb_, q_);
      matmul(Proj::kK, l, xb_, k_);
      matmul(Proj::kV, l, xb_, v_);
      finish_qkv(*m_, l, n, q_.data(), k_.data(), v_.data());
      inferkit::apply_rope(inferkit::Tensor3View<float>(q_.data(), n, c.n_heads, hs), pos_, rope);
      inferkit::apply_rope(inferkit::Tensor3View<float>(k_.data(), n, c.n_kv_heads, hs), pos_, rope);
      sources.clear();
      for (const auto& s : plan.sequences) {
        const inferkit::Tensor3View<const float> kt(k_.data() + s.offset * kvd, s.num_tokens, c.n_kv_heads, hs),
            vt(v_.data() + s.offset * kvd, s.num_tokens, c.n_kv_heads, hs);
        s.table->write_at(l, s.position, kt, vt);
        sources.push_back(s.table->source(l));
      }
      inferkit::attention_batch(inferkit::Tensor3View<const float>(q_.data(), n, c.n_heads, hs),
                                std::span<const Index>(plan.cu_q), sources,
                                inferkit::Tensor3View<float>(att_.data(), n, c.n_heads, hs), {}, aopt);
      matmul(Proj::kO, l, att_, xb_);
      x_ += xb_;
      for (Index t = 0; t < n; ++t) rmsnorm(xb_.row(t).data(), x_.row(t).data(), m_->rms_ffn(l), D, eps);
      matmul(Proj::kW1, l, xb_, h1_);
      matmul(Proj::kW3, l, xb_, h3_);
      for (Index t = 0; t < n; ++t) swiglu(h1_.row(t).data(), h3_.row(t).data(), static_cast<int>(Hd));
      matmul(Proj::kW2, l, h1_, xb_);
      x_ += xb_;
    }
    const Index rows = static_cast<Index>(plan.logit_rows.size());
    if (rows == 0) return;
    xl_.resize(rows, D);
    for (Index i = 0; i < rows; ++i)
      rmsnorm(xl_.row(i).data(), x_.row(plan.logit_rows[static_cast<std::size_t>(i)]).data(), m_->rms_final(), D, eps);
    Eigen::Map<RowMatrix> out(logits, rows, c.vocab_size);
    if (m_->ggml_backed())
      ggml_product(m_->ggml_weights(Proj::kClassifier, 0), xl_.data(), rows, D, logits, c.vocab_size);
    else if (o_.deterministic)
      fixed_order_gemm(xl_.data(), rows, D, wt_.back(), logits, c.vocab_size, o_.num_threads);
    else {
      eigen_threads_for(2.0 * double(rows) * double(c.vocab_size) * double(D));
      out.noalias() = xl_ * m_->wcls().transpose();
    }
  }

 private:
  // y [rows x w.rows()] = x [rows x w.cols()] W^T from the file's blocks (row-major, dense).
  void ggml_product(const inferkit::GgmlWeights& w, const float* x, Index rows, Index ldx, float* y, Index ldy) const {
    const double flops = 2.0 * double(rows) * double(w.rows()) * double(w.cols());
    inferkit::ggml_matmul(w, inferkit::MatrixView<const float>(x, rows, w.cols(), ldx),
                          inferkit::MatrixView<float>(y, rows, w.rows(), ldy),
                          flops < kParallelMinFlops ? 1 : o_.num_threads);
  }

  // y = x W^T for projection p of layer l.
  void matmul(Proj p, int l, const RowMatrix& x, RowMatrix& y) {
    if (m_->ggml_backed()) {
      ggml_product(m_->ggml_weights(p, l), x.data(), x.rows(), x.cols(), y.data(), y.cols());
    } else if (o_.deterministic) {
      const TransposedMatrix& w = wt_[static_cast<std::size_t>(l * 7 + static_cast<int>(p))];
      fixed_order_gemm(x.data(), x.rows(), x.cols(), w, y.data(), y.cols(), o_.num_threads);
    } else {
      const MatrixMap w = m_->matrix(p, l);
      eigen_threads_for(2.0 * double(x.rows()) * double(w.rows()) * double(w.cols()));
      y.noalias() = x * w.transpose();
    }
  }

  const Model* m_;
  BatchForwardOptions o_;
  std::vector<TransposedMatrix> wt_;  // deterministic: layer-major, Proj order, then the classifier
  RowMatrix x_, xb_, q_, k_, v_, att_, h1_, h3_, xl_;
  std::vector<std::int32_t> pos_;
};

}  // namespace llama2c
