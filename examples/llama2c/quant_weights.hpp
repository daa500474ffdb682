#pragma once
// Quantized weights for the llama2.c runner: every projection (W_q, W_k, W_v, W_o, W_1, W_2,
// W_3 of every layer) and the classifier run through inferkit's quant/ primitives, installed
// as the model's ProjectionHook. The token embedding stays float (it is a row lookup, read one
// row per token); with a shared classifier the classifier gets its own quantized copy.
//
//   --weights int8      Int8Weights (per output channel), float activations
//   --weights int4      Int4Weights (g32, symmetric), float activations
//   --act-int8          int8 activations too: W8A8 per token (int8 weights) or Q8_0 blocks of
//                       32 (int4 weights)
//   --outlier-threshold LLM.int8() decomposition on the W8A8 products (against the float weights)
//   --smooth ALPHA      SmoothQuant: factors from max |x| over a calibration run of the float
//                       model on --calib-ids, folded into each layer's two RMSNorm weights and
//                       the projections they feed (W_q, W_k, W_v; W_1, W_3). W_o, W_2 and the
//                       classifier keep their inputs (no norm precedes them to fold into).

#include <array>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <inferkit/quant/matmul.hpp>
#include <inferkit/quant/matvec.hpp>
#include <inferkit/quant/smooth_quant.hpp>

#include "llama2c.hpp"

namespace llama2c {

enum class WeightFormat { kF32, kInt8, kInt4 };

struct QuantOptions {
  WeightFormat weights = WeightFormat::kF32;
  bool act_int8 = false;                     // int8 activations (needs int8 or int4 weights)
  std::optional<float> outlier_threshold{};  // LLM.int8() (needs int8 weights and act_int8)
  std::optional<float> smooth_alpha{};       // SmoothQuant migration strength (needs calib_ids)
  std::vector<TokenId> calib_ids{};          // calibration tokens for SmoothQuant
  inferkit::Int4Spec int4{32, true};
  int num_threads = 0;  // threads of each product (0 = OpenMP's default)
};

inline const char* format_name(WeightFormat f) {
  return f == WeightFormat::kF32 ? "f32" : f == WeightFormat::kInt8 ? "int8" : "int4";
}

inline constexpr std::array<Proj, 7> kLayerProjections = {Proj::kQ,  Proj::kK,  Proj::kV, Proj::kO,
                                                          Proj::kW1, Proj::kW2, Proj::kW3};

/// The model's projections and classifier, packed once in one format.
class QuantizedProjections final : public ProjectionHook {
 public:
  QuantizedProjections(const Model& m, const QuantOptions& o) : o_(o), layers_(m.config().n_layers) {
    const auto pack = [&](Proj p, int l) {
      Packed q;
      const MatrixMap w = m.matrix(p, l);
      const inferkit::MatrixView<const float> v(w.data(), w.rows(), w.cols());
      q.float_weights = v;
      if (o.weights == WeightFormat::kInt8)
        q.int8.emplace(v);
      else
        q.int4.emplace(v, o.int4);
      return q;
    };
    for (int l = 0; l < layers_; ++l)
      for (Proj p : kLayerProjections) packed_.push_back(pack(p, l));
    classifier_ = pack(Proj::kClassifier, 0);
  }

  void project(Proj p, int layer, const float* x, float* y) const override {
    const Packed& q =
        p == Proj::kClassifier ? classifier_ : packed_[static_cast<std::size_t>(layer * 7 + static_cast<int>(p))];
    const std::span<const float> xs(x, static_cast<std::size_t>(q.float_weights.cols()));
    const std::span<float> ys(y, static_cast<std::size_t>(q.float_weights.rows()));
    if (q.int4) {
      inferkit::matvec(
          *q.int4, xs, ys,
          {.activations = o_.act_int8 ? inferkit::ActivationFormat::kInt8 : inferkit::ActivationFormat::kFloat,
           .num_threads = o_.num_threads});
    } else if (o_.act_int8) {
      inferkit::MatmulOptions mo{.num_threads = o_.num_threads};
      if (o_.outlier_threshold) mo.outliers = inferkit::OutlierOptions{*o_.outlier_threshold, q.float_weights};
      inferkit::matmul(inferkit::MatrixView<const float>(x, 1, q.float_weights.cols()), *q.int8,
                       inferkit::MatrixView<float>(y, 1, q.float_weights.rows()), mo);
    } else {
      inferkit::matvec(*q.int8, xs, ys, {.num_threads = o_.num_threads});
    }
  }

  /// Bytes of the packed projections and classifier.
  std::size_t bytes() const {
    std::size_t b = classifier_.bytes();
    for (const Packed& q : packed_) b += q.bytes();
    return b;
  }

 private:
  struct Packed {
    inferkit::MatrixView<const float> float_weights;  // the model's float matrix (LLM.int8() outliers)
    std::optional<inferkit::Int8Weights> int8;
    std::optional<inferkit::Int4Weights> int4;
    std::size_t bytes() const { return int8 ? int8->bytes() : int4->bytes(); }
  };
  QuantOptions o_;
  int layers_;
  std::vector<Packed> packed_;
  Packed classifier_;
};

/// Runs the float projections and records max |x| at the input of each layer's two normed
/// groups (the input of W_q / W_k / W_v and of W_1 / W_3). Single-threaded use.
class CalibrationHook final : public ProjectionHook {
 public:
  explicit CalibrationHook(const Model& m) : m_(m) {
    for (int l = 0; l < m.config().n_layers; ++l) {
      attn_.emplace_back(m.config().dim);
      ffn_.emplace_back(m.config().dim);
    }
  }
  void project(Proj p, int layer, const float* x, float* y) const override {
    const Index d = m_.config().dim;
    if (p == Proj::kQ)
      attn_[static_cast<std::size_t>(layer)].observe(std::span<const float>(x, static_cast<std::size_t>(d)));
    if (p == Proj::kW1)
      ffn_[static_cast<std::size_t>(layer)].observe(std::span<const float>(x, static_cast<std::size_t>(d)));
    const MatrixMap w = m_.matrix(p, layer);
    Eigen::Map<Eigen::VectorXf>(y, w.rows()).noalias() = w * VectorMap(x, w.cols());
  }
  const inferkit::ActivationStats& attention_input(int l) const { return attn_[static_cast<std::size_t>(l)]; }
  const inferkit::ActivationStats& ffn_input(int l) const { return ffn_[static_cast<std::size_t>(l)]; }

 private:
  const Model& m_;
  mutable std::vector<inferkit::ActivationStats> attn_, ffn_;  // written by project() (calibration runs are serial)
};

/// Calibrates on `ids` (teacher-forced through the float model, dense cache) and returns the
/// recorded statistics.
inline std::shared_ptr<const CalibrationHook> calibrate(Model& m, const std::vector<TokenId>& ids) {
  if (ids.empty()) throw std::invalid_argument("llama2c: calibration needs at least one token id");
  if (m.projections())
    throw std::invalid_argument("llama2c: calibrate a model without projection hook (smooth before quantizing)");
  auto hook = std::make_shared<const CalibrationHook>(m);
  m.set_projections(hook);
  Cache cache(m.config(), {});
  std::vector<float> logits(static_cast<std::size_t>(m.config().vocab_size));
  for (std::size_t t = 0; t < ids.size() && static_cast<int>(t) < m.config().seq_len; ++t)
    forward(m, cache, &ids[t], 1, static_cast<std::int32_t>(t), logits.data());
  m.set_projections(nullptr);
  return hook;
}

/// SmoothQuant: folds s = max|X|^alpha / max|W|^(1 - alpha) into each layer's RMSNorm weights
/// and the projections they feed, from statistics of a calibration run on `ids`.
inline void smooth_model(Model& m, const std::vector<TokenId>& ids, float alpha) {
  const auto stats = calibrate(m, ids);
  const Index d = m.config().dim;
  const auto fold = [&](const inferkit::ActivationStats& st, float* norm, std::initializer_list<Proj> projs, int l) {
    std::vector<float> wmax(static_cast<std::size_t>(d), 0.0f);
    std::vector<inferkit::MatrixView<float>> views;
    for (Proj p : projs) {
      auto w = m.mutable_matrix(p, l);
      views.emplace_back(w.data(), w.rows(), w.cols());
      inferkit::weight_column_abs_max(views.back(), wmax);
    }
    const auto s = inferkit::smoothing_factors(st.abs_max(), wmax, alpha);
    inferkit::fold_smoothing(s, std::span<float>(norm, static_cast<std::size_t>(d)), views);
  };
  for (int l = 0; l < m.config().n_layers; ++l) {
    fold(stats->attention_input(l), m.mutable_rms_att(l), {Proj::kQ, Proj::kK, Proj::kV}, l);
    fold(stats->ffn_input(l), m.mutable_rms_ffn(l), {Proj::kW1, Proj::kW3}, l);
  }
}

/// Checks the combination of options (the messages name the CLI flags).
inline void validate(const QuantOptions& o) {
  inferkit::require_thread_count("QuantOptions::num_threads", o.num_threads);
  if (o.act_int8 && o.weights == WeightFormat::kF32)
    throw std::invalid_argument("--act-int8 needs --weights int8 or int4");
  if (o.outlier_threshold && !(o.weights == WeightFormat::kInt8 && o.act_int8))
    throw std::invalid_argument("--outlier-threshold needs --weights int8 --act-int8 (it splits the W8A8 products)");
  if (o.outlier_threshold && !(*o.outlier_threshold > 0.0f && std::isfinite(*o.outlier_threshold)))
    throw std::invalid_argument("--outlier-threshold = " + std::to_string(*o.outlier_threshold) +
                                " is invalid: must be > 0");
  if (o.smooth_alpha && !(*o.smooth_alpha >= 0.0f && *o.smooth_alpha <= 1.0f))
    throw std::invalid_argument("--smooth = " + std::to_string(*o.smooth_alpha) + " is invalid: must be in [0, 1]");
  if (o.smooth_alpha && o.calib_ids.empty())
    throw std::invalid_argument("--smooth needs --calib-ids FILE (calibration tokens)");
}

/// Applies the options to a model: SmoothQuant folding first (float weights), then the
/// quantized projections (none for f32). Returns the bytes the projections and classifier read
/// per token.
inline std::size_t quantize_model(Model& m, const QuantOptions& o) {
  validate(o);
  if (o.smooth_alpha) smooth_model(m, o.calib_ids, *o.smooth_alpha);
  if (o.weights == WeightFormat::kF32) {
    m.set_projections(nullptr);
    std::size_t floats = static_cast<std::size_t>(m.config().vocab_size) * m.config().dim;
    for (int l = 0; l < m.config().n_layers; ++l)
      for (Proj p : kLayerProjections) floats += static_cast<std::size_t>(m.matrix(p, l).size());
    return floats * sizeof(float);
  }
  auto hook = std::make_shared<const QuantizedProjections>(m, o);
  const std::size_t bytes = hook->bytes();
  m.set_projections(std::move(hook));
  return bytes;
}

}  // namespace llama2c
