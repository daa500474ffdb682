// Steering plans (steering/steering_plan.hpp, position_selection.hpp): layer and position
// selection, composition order against an fp64 sequential reference, bitwise identity where
// nothing is selected, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "inferkit/steering/steering_plan.hpp"
#include "steering_test_util.hpp"

using namespace steering_test;
using inferkit::EditKind;
using inferkit::Index;
using inferkit::PositionSelection;
using inferkit::SequenceRows;
using inferkit::SteeringPlan;

namespace {

// fp64 reference of one edit on one row.
void ref_edit(std::vector<double>& h, EditKind kind, const std::vector<float>& v, double scale, bool preserve) {
  double n0 = 0, hv = 0, vv = 0;
  for (std::size_t i = 0; i < h.size(); ++i) {
    n0 += h[i] * h[i];
    hv += h[i] * v[i];
    vv += double(v[i]) * v[i];
  }
  const double a = kind == EditKind::kAdd ? scale : -scale * hv / vv;
  double n1 = 0;
  for (std::size_t i = 0; i < h.size(); ++i) {
    h[i] += a * v[i];
    n1 += h[i] * h[i];
  }
  if (preserve && n1 > 0)
    for (double& x : h) x *= std::sqrt(n0 / n1);
}

std::vector<float> matrix(Index rows, Index dim, unsigned seed) {
  return normal(static_cast<std::size_t>(rows * dim), seed, 2.0f);
}

}  // namespace

TEST_CASE("position selections are the documented intervals", "[steering][positions]") {
  const Index P = 5;
  CHECK(PositionSelection::all().contains(0, P));
  CHECK(PositionSelection::all().contains(1'000'000, P));
  CHECK(PositionSelection::prompt().contains(4, P));
  CHECK_FALSE(PositionSelection::prompt().contains(5, P));
  CHECK(PositionSelection::generated().contains(5, P));
  CHECK_FALSE(PositionSelection::generated().contains(4, P));
  CHECK(PositionSelection::range(2, 4).contains(2, P));
  CHECK(PositionSelection::range(2, 4).contains(3, P));
  CHECK_FALSE(PositionSelection::range(2, 4).contains(4, P));
  CHECK_FALSE(PositionSelection::range(2, 2).contains(2, P));
  // Rows of a chunk at positions 3..10 (8 rows), prompt of 5 tokens.
  const SequenceRows seq{.first_position = 3, .prompt_length = 5};
  using R = std::pair<Index, Index>;
  CHECK(PositionSelection::all().selected_rows(seq, 8) == R{0, 8});
  CHECK(PositionSelection::prompt().selected_rows(seq, 8) == R{0, 2});
  CHECK(PositionSelection::generated().selected_rows(seq, 8) == R{2, 8});
  CHECK(PositionSelection::range(4, 6).selected_rows(seq, 8) == R{1, 3});
  CHECK(PositionSelection::range(0, 2).selected_rows(seq, 8).first ==
        PositionSelection::range(0, 2).selected_rows(seq, 8).second);
  CHECK(PositionSelection::range(20, 30).selected_rows(seq, 8).first == 8);
  CHECK(PositionSelection::prompt().selected_rows({.first_position = 9, .prompt_length = 5}, 4) == R{0, 0});
  CHECK(PositionSelection::generated().selected_rows(
            {.first_position = std::numeric_limits<Index>::max() / 2, .prompt_length = 0}, 3) == R{0, 3});
}

TEST_CASE("a plan edits exactly the selected layers and positions; other rows keep their bits", "[steering][plan]") {
  for (std::size_t dim : {7u, 16u, 33u, 100u}) {
    const Index d = static_cast<Index>(dim), L = 4, rows = 9;
    const auto v = normal(dim, 30 + static_cast<unsigned>(dim));
    const SequenceRows seq{.first_position = 2, .prompt_length = 6};  // rows 0..8 at positions 2..10
    for (const auto& sel : {PositionSelection::all(), PositionSelection::prompt(), PositionSelection::generated(),
                            PositionSelection::range(5, 8)}) {
      for (EditKind kind : {EditKind::kAdd, EditKind::kAblate}) {
        SteeringPlan plan(L, d);
        plan.add({.kind = kind, .vector = v, .scale = 1.5f, .layers = {1, 3}, .positions = sel});
        CHECK_FALSE(plan.acts_at(0));
        CHECK(plan.acts_at(1));
        auto hidden = matrix(rows, d, 31);
        const auto before = hidden;
        plan.apply(0, {hidden.data(), rows, d}, seq);  // a layer the plan does not act at
        CHECK(same_bits(hidden, before));
        plan.apply(3, {hidden.data(), rows, d}, seq);
        for (Index r = 0; r < rows; ++r) {
          const std::vector<float> got(hidden.begin() + r * d, hidden.begin() + (r + 1) * d);
          const std::vector<float> was(before.begin() + r * d, before.begin() + (r + 1) * d);
          if (!sel.contains(seq.first_position + r, seq.prompt_length)) {
            CHECK(same_bits(got, was));
            continue;
          }
          std::vector<double> ref(was.begin(), was.end());
          ref_edit(ref, kind, v, 1.5, false);
          for (Index i = 0; i < d; ++i)
            CHECK(std::abs(got[static_cast<std::size_t>(i)] - ref[static_cast<std::size_t>(i)]) <=
                  1e-5 * (1 + std::abs(ref[static_cast<std::size_t>(i)])));
        }
      }
    }
  }
}

TEST_CASE("edits compose in plan order, each reading the previous one's output", "[steering][plan]") {
  for (std::size_t dim : {5u, 17u, 64u, 4099u}) {
    const Index d = static_cast<Index>(dim);
    const auto u = normal(dim, 40 + static_cast<unsigned>(dim)), w = normal(dim, 41 + static_cast<unsigned>(dim));
    const auto h0 = normal(dim, 42 + static_cast<unsigned>(dim), 3.0f);
    struct Step {
      EditKind kind;
      const std::vector<float>* v;
      float scale;
      bool preserve;
    };
    const std::vector<Step> steps = {{EditKind::kAdd, &w, 0.75f, false},
                                     {EditKind::kAblate, &u, 1.0f, false},
                                     {EditKind::kAdd, &u, 2.0f, true},
                                     {EditKind::kAblate, &w, 0.5f, true}};
    SteeringPlan plan(2, d);
    std::vector<double> ref(h0.begin(), h0.end());
    for (const auto& s : steps) {
      plan.add({.kind = s.kind, .vector = *s.v, .scale = s.scale, .preserve_norm = s.preserve, .layers = {1}});
      ref_edit(ref, s.kind, *s.v, s.scale, s.preserve);
    }
    auto h = h0;
    plan.apply(1, std::span<float>(h), 0, 0);
    double err = 0, mag = 0;
    for (std::size_t i = 0; i < dim; ++i) {
      err = std::max(err, std::abs(h[i] - ref[i]));
      mag = std::max(mag, std::abs(ref[i]));
    }
    CHECK(err <= 1e-5 * mag);
  }
}

TEST_CASE("order matters: ablate-then-add keeps scale * |u|^2 along u, add-then-ablate keeps none",
          "[steering][plan]") {
  for (std::size_t dim : {9u, 31u, 256u}) {
    const Index d = static_cast<Index>(dim);
    const auto u = normal(dim, 50 + static_cast<unsigned>(dim)),
               h0 = normal(dim, 51 + static_cast<unsigned>(dim), 2.0f);
    const double uu = dot(u, u), scale_ref = (norm(h0) + 3 * uu) * std::sqrt(uu);
    SteeringPlan ablate_add(1, d), add_ablate(1, d);
    ablate_add.add({.kind = EditKind::kAblate, .vector = u, .layers = {0}});
    ablate_add.add({.kind = EditKind::kAdd, .vector = u, .scale = 3.0f, .layers = {0}});
    add_ablate.add({.kind = EditKind::kAdd, .vector = u, .scale = 3.0f, .layers = {0}});
    add_ablate.add({.kind = EditKind::kAblate, .vector = u, .layers = {0}});
    auto a = h0, b = h0;
    ablate_add.apply(0, std::span<float>(a), 0, 0);
    add_ablate.apply(0, std::span<float>(b), 0, 0);
    CHECK(std::abs(dot(a, u) - 3 * uu) <= 8 * kEps * scale_ref);
    CHECK(std::abs(dot(b, u)) <= 8 * kEps * scale_ref);
  }
}

TEST_CASE("a plan of scale-0 edits is the identity, bitwise", "[steering][plan]") {
  const Index d = 33, rows = 5;
  const auto v = normal(33, 60);
  SteeringPlan plan(3, d);
  plan.add({.kind = EditKind::kAdd, .vector = v, .scale = 0.0f, .layers = {0, 1, 2}});
  plan.add({.kind = EditKind::kAblate, .vector = v, .scale = 0.0f, .preserve_norm = true, .layers = {1}});
  auto hidden = matrix(rows, d, 61);
  hidden[3] = -0.0f;
  hidden[40] = std::numeric_limits<float>::quiet_NaN();
  const auto before = hidden;
  for (Index l = 0; l < 3; ++l) plan.apply(l, {hidden.data(), rows, d}, {.first_position = 7, .prompt_length = 2});
  CHECK(same_bits(hidden, before));
}

TEST_CASE("a chunk gives the same bits as its rows one at a time (positions follow the rows)", "[steering][plan]") {
  const Index d = 47, rows = 12;
  const auto v = normal(47, 70), u = normal(47, 71);
  SteeringPlan plan(2, d);
  plan.add(
      {.kind = EditKind::kAdd, .vector = v, .scale = 2.0f, .layers = {1}, .positions = PositionSelection::range(4, 9)});
  plan.add({.kind = EditKind::kAblate, .vector = u, .layers = {1}, .positions = PositionSelection::generated()});
  auto chunk = matrix(rows, d, 72);
  auto single = chunk;
  plan.apply(1, {chunk.data(), rows, d}, {.first_position = 3, .prompt_length = 8});
  for (Index r = 0; r < rows; ++r)
    plan.apply(1, std::span<float>(single.data() + r * d, static_cast<std::size_t>(d)), 3 + r, 8);
  CHECK(same_bits(chunk, single));
}

TEST_CASE("a plan reads row strides and leaves the padding alone", "[steering][plan]") {
  const Index d = 10, stride = 13, rows = 3;
  const auto v = normal(10, 80);
  SteeringPlan plan(1, d);
  plan.add({.kind = EditKind::kAdd, .vector = v, .layers = {0}});
  std::vector<float> buf(static_cast<std::size_t>(rows * stride), 9.0f);
  plan.apply(0, inferkit::MatrixView<float>(buf.data(), rows, d, stride), {});
  for (Index r = 0; r < rows; ++r) {
    for (Index i = 0; i < d; ++i)
      CHECK(buf[static_cast<std::size_t>(r * stride + i)] == 9.0f + v[static_cast<std::size_t>(i)]);
    for (Index i = d; i < stride && r + 1 < rows; ++i) CHECK(buf[static_cast<std::size_t>(r * stride + i)] == 9.0f);
  }
}

TEST_CASE("plan errors name the parameter: layer range, dimension, zero direction", "[steering][plan][errors]") {
  const std::vector<float> v(8, 1.0f), zero(8, 0.0f), short_v(7, 1.0f);
  std::vector<float> nan_v(8, 1.0f);
  nan_v[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(SteeringPlan(0, 8), "inferkit: num_layers = 0 is invalid: must be > 0");
  CHECK_THROWS_WITH(SteeringPlan(4, -1), "inferkit: dim = -1 is invalid: must be > 0");
  SteeringPlan plan(4, 8);
  CHECK_THROWS_WITH(plan.add({.vector = short_v, .layers = {0}}),
                    "inferkit: vector.size() = 7 is invalid: must equal the plan's dim (8)");
  CHECK_THROWS_WITH(plan.add({.vector = nan_v, .layers = {0}}), "inferkit: vector[3] = nan is invalid: must be finite");
  CHECK_THROWS_WITH(plan.add({.kind = EditKind::kAblate, .vector = zero, .layers = {0}}),
                    Catch::Contains("vector . vector = 0 is invalid") && Catch::Contains("ablation needs a direction"));
  CHECK_NOTHROW(plan.add({.kind = EditKind::kAdd, .vector = zero, .layers = {0}}));  // adding zero is allowed
  CHECK_THROWS_AS(plan.add({.vector = v, .layers = {4}}), std::out_of_range);
  CHECK_THROWS_WITH(plan.add({.vector = v, .layers = {1, -1}}),
                    "inferkit: layers[1] = -1 is invalid: must be in [0, 4)");
  CHECK_THROWS_WITH(plan.add({.vector = v, .layers = {}}),
                    "inferkit: layers.size() = 0 is invalid: must name at least one layer");
  CHECK_THROWS_WITH(plan.add({.vector = v, .layers = {2, 2}}), "inferkit: layers[1] = 2 is invalid: repeats a layer");
  CHECK_THROWS_WITH(plan.add({.vector = v, .scale = INFINITY, .layers = {0}}),
                    "inferkit: scale = inf is invalid: must be finite");
  CHECK_THROWS_WITH(plan.add({.vector = v, .layers = {0}, .positions = PositionSelection::range(5, 3)}),
                    "inferkit: positions.end = 3 is invalid: must be >= positions.begin (5)");
  CHECK(plan.size() == 1);  // only the zero addition went in
  std::vector<float> h(16, 0.0f);
  CHECK_THROWS_WITH(plan.apply(4, {h.data(), 2, 8}, {}), "inferkit: layer = 4 is invalid: must be in [0, 4)");
  CHECK_THROWS_AS(plan.apply(-1, {h.data(), 2, 8}, {}), std::out_of_range);
  CHECK_THROWS_WITH(plan.apply(0, {h.data(), 2, 7}, {}),
                    "inferkit: hidden.cols() = 7 is invalid: must equal the plan's dim (8)");
  CHECK_THROWS_WITH(plan.apply(0, {h.data(), 2, 8}, {.first_position = -1}),
                    "inferkit: first_position = -1 is invalid: must be >= 0");
  CHECK_THROWS_WITH(plan.apply(0, {h.data(), 2, 8}, {.prompt_length = -2}),
                    "inferkit: prompt_length = -2 is invalid: must be >= 0");
  CHECK_THROWS_AS(plan.acts_at(9), std::out_of_range);
  CHECK_THROWS_AS(plan.vector(1), std::out_of_range);
}
