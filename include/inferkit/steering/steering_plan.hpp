#pragma once
// A steering plan: an ordered list of residual-stream edits (additions and directional
// ablations, steering/residual_ops.hpp), each with the layers and token positions it acts on.
// The model code calls apply() once per layer on the residual stream after that layer (the
// "hook"); the plan edits the selected rows in place.
//
// Composition order: at a layer, every row gets the plan's edits in the order they were added,
// each edit reading the output of the previous one (h <- e_n(...e_2(e_1(h)))). Order matters:
// ablating u and then adding s * u leaves a component s * |u|^2 along u; adding and then
// ablating leaves none.
//
// The plan copies and checks its vectors once (finite, length dim, non-zero for ablation) and
// precomputes u . u, so apply() costs one pass over a row per addition and two per ablation (one
// more with norm preservation).

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/steering/position_selection.hpp"
#include "inferkit/steering/residual_ops.hpp"

namespace inferkit {

/// The kind of a residual edit.
enum class EditKind {
  kAdd,     ///< h += scale * v
  kAblate,  ///< h -= scale * ((h . u) / (u . u)) * u
};

/// One edit of a plan (designated initializers: `{.kind = EditKind::kAdd, .vector = v,
/// .scale = 4.0f, .layers = {6}}`).
struct Intervention {
  /// Addition or ablation.
  EditKind kind = EditKind::kAdd;
  /// The added vector (kAdd; any norm) or the direction (kAblate; any non-zero norm), dim
  /// floats. The plan copies it.
  std::span<const float> vector;
  /// Multiplier (finite): the added vector is scale * v; an ablation removes scale times the
  /// component along u (1 removes it). 0 makes the edit the identity, bitwise.
  float scale = 1.0f;
  /// Rescale each edited row back to its norm before this edit.
  bool preserve_norm = false;
  /// Layers (indices into the model's layer loop, each in [0, num_layers), no repeats, at least
  /// one) after which the edit applies.
  std::vector<Index> layers;
  /// Token positions the edit applies to.
  PositionSelection positions = PositionSelection::all();
};

/// An ordered list of edits over a model with `num_layers` layers and residual width `dim`.
/// apply() is const and keeps no state: concurrent calls on different hidden matrices are safe;
/// add() is not safe concurrently with anything.
class SteeringPlan {
 public:
  /// An empty plan (apply() is then the identity).
  /// @param num_layers  layers of the model (> 0); layer indices must lie in [0, num_layers)
  /// @param dim         width of the residual stream (> 0)
  /// @throws std::invalid_argument if either is <= 0.
  SteeringPlan(Index num_layers, Index dim)
      : num_layers_(require_positive(num_layers, "num_layers")),
        dim_(require_positive(dim, "dim")),
        by_layer_(static_cast<std::size_t>(num_layers)) {}

  /// Appends an edit after the existing ones (see the composition order in the file comment).
  /// @return its index in the plan.
  /// @throws std::invalid_argument if vector.size() != dim, the vector has a non-finite element,
  ///         an ablation's vector is zero, the scale is not finite, layers is empty or repeats a
  ///         layer, or a kRange selection has begin < 0 or end < begin;
  ///         std::out_of_range if a layer is outside [0, num_layers).
  Index add(const Intervention& iv) {
    require(static_cast<Index>(iv.vector.size()) == dim_, "vector.size()", iv.vector.size(),
            "must equal the plan's dim (" + std::to_string(dim_) + ")");
    detail::require_all_finite(iv.vector, "vector");
    require_finite(iv.scale, "scale");
    iv.positions.validate();
    require(!iv.layers.empty(), "layers.size()", iv.layers.size(), "must name at least one layer");
    for (std::size_t i = 0; i < iv.layers.size(); ++i) {
      require_index(iv.layers[i], num_layers_, "layers[" + std::to_string(i) + "]");
      for (std::size_t j = 0; j < i; ++j)
        require(iv.layers[j] != iv.layers[i], "layers[" + std::to_string(i) + "]", iv.layers[i], "repeats a layer");
    }
    Edit e{iv.kind,
           std::vector<float>(iv.vector.begin(), iv.vector.end()),
           0.0,
           {iv.scale, iv.preserve_norm},
           iv.positions};
    if (iv.kind == EditKind::kAblate) {
      e.uu = detail::squared_norm_f64(e.vector.data(), e.vector.size());
      require(e.uu > 0.0 && std::isfinite(e.uu), "vector . vector", e.uu,
              "must be finite and > 0: ablation needs a direction");
    }
    const auto index = static_cast<Index>(edits_.size());
    edits_.push_back(std::move(e));
    for (Index l : iv.layers) by_layer_[static_cast<std::size_t>(l)].push_back(index);
    return index;
  }

  /// Layers of the model.
  Index num_layers() const { return num_layers_; }
  /// Width of the residual stream.
  Index dim() const { return dim_; }
  /// Number of edits.
  Index size() const { return static_cast<Index>(edits_.size()); }
  /// The (copied) vector of edit `i`.
  /// @throws std::out_of_range if i is not in [0, size()).
  std::span<const float> vector(Index i) const {
    require_index(i, size(), "i");
    return edits_[static_cast<std::size_t>(i)].vector;
  }

  /// Whether any edit applies after `layer` (so a model can skip its hook).
  /// @throws std::out_of_range if layer is not in [0, num_layers).
  bool acts_at(Index layer) const {
    require_index(layer, num_layers_, "layer");
    return !by_layer_[static_cast<std::size_t>(layer)].empty();
  }

  /// Applies the edits of `layer`, in plan order, to the rows of `hidden` [rows, dim] (the
  /// residual stream after that layer; row r at position seq.first_position + r) whose
  /// positions each edit selects. Rows an edit does not select are not touched (bitwise).
  /// @throws std::out_of_range if layer is not in [0, num_layers);
  ///         std::invalid_argument if hidden.cols() != dim or seq has a negative field.
  void apply(Index layer, MatrixView<float> hidden, SequenceRows seq) const {
    require_index(layer, num_layers_, "layer");
    require(hidden.cols() == dim_, "hidden.cols()", hidden.cols(),
            "must equal the plan's dim (" + std::to_string(dim_) + ")");
    seq.validate();
    const auto d = static_cast<std::size_t>(dim_);
    for (Index k : by_layer_[static_cast<std::size_t>(layer)]) {  // plan order
      const Edit& e = edits_[static_cast<std::size_t>(k)];
      const auto [first, last] = e.positions.selected_rows(seq, hidden.rows());
      for (Index r = first; r < last; ++r) {
        float* h = hidden.row_ptr(r);
        if (e.kind == EditKind::kAdd)
          detail::add_direction_unchecked(h, e.vector.data(), d, e.options);
        else
          detail::ablate_direction_unchecked(h, e.vector.data(), e.uu, d, e.options);
      }
    }
  }

  /// apply() on one row: the residual vector `h` (dim floats) of the token at `position`.
  /// @throws as apply(); std::invalid_argument if h.size() != dim or position < 0.
  void apply(Index layer, std::span<float> h, Index position, Index prompt_length) const {
    apply(layer, MatrixView<float>(h.data(), 1, static_cast<Index>(h.size())),
          SequenceRows{.first_position = position, .prompt_length = prompt_length});
  }

 private:
  struct Edit {
    EditKind kind;
    std::vector<float> vector;
    double uu;  // vector . vector (ablation)
    EditOptions options;
    PositionSelection positions;
  };

  Index num_layers_;
  Index dim_;
  std::vector<Edit> edits_;
  std::vector<std::vector<Index>> by_layer_;  // edit indices per layer, in plan order
};

}  // namespace inferkit
