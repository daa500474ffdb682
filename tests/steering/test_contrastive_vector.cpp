// Steering vectors from contrastive pairs (steering/contrastive_vector.hpp) against a
// hand-computed mean and an fp64 reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "inferkit/steering/contrastive_vector.hpp"
#include "steering_test_util.hpp"

using namespace steering_test;
using inferkit::ContrastiveOptions;
using inferkit::ContrastiveVectorBuilder;
using inferkit::Index;
using inferkit::MatrixView;
using inferkit::TokenReduction;

namespace {
using CView = MatrixView<const float>;

// True iff got is the float nearest ref, or next to it (fp64 sums in another order can move a
// rounding boundary by at most the double error, scale * 1e-15).
bool close_to_f64(float got, double ref, double scale) {
  const double ulp = std::nextafter(std::abs(static_cast<float>(ref)), INFINITY) - std::abs(static_cast<float>(ref));
  return std::abs(double(got) - ref) <= 0.5 * ulp + 1e-15 * scale;
}
}  // namespace

TEST_CASE("the vector of two pairs equals the mean worked out by hand", "[steering][contrastive]") {
  // Pair 0: positive rows (1,2,3), (3,4,5): mean (2,3,4); negative (0,0,0): difference (2,3,4).
  // Pair 1: positive (0,1,0); negative rows (1,1,1), (1,1,1), (1,1,4): mean (1,1,2): (-1,0,-2).
  // Mean over pairs: (0.5, 1.5, 1). Last token: pair 0 (3,4,5) - (0,0,0), pair 1 (0,1,0) -
  // (1,1,4) = (-1,0,-4): mean (1, 2, 0.5).
  const std::vector<float> p0{1, 2, 3, 3, 4, 5}, n0{0, 0, 0}, p1{0, 1, 0}, n1{1, 1, 1, 1, 1, 1, 1, 1, 4};
  const std::vector<CView> pos{CView(p0.data(), 2, 3), CView(p1.data(), 1, 3)},
      neg{CView(n0.data(), 1, 3), CView(n1.data(), 3, 3)};
  CHECK(inferkit::contrastive_steering_vector(pos, neg) == std::vector<float>{0.5f, 1.5f, 1.0f});
  CHECK(inferkit::contrastive_steering_vector(pos, neg, {.reduction = TokenReduction::kLastToken}) ==
        std::vector<float>{1.0f, 2.0f, 0.5f});
  // Unit: (0.5, 1.5, 1) / sqrt(3.5).
  const auto unit = inferkit::contrastive_steering_vector(pos, neg, {.normalize = true});
  const double n = std::sqrt(3.5);
  CHECK(unit ==
        std::vector<float>{static_cast<float>(0.5 / n), static_cast<float>(1.5 / n), static_cast<float>(1.0 / n)});
  // Mean norm of the reduced states: |(2,3,4)|, |(0,0,0)|, |(0,1,0)|, |(1,1,2)|.
  ContrastiveVectorBuilder b(3);
  b.add_pair(pos[0], neg[0]);
  b.add_pair(pos[1], neg[1]);
  CHECK(b.mean_state_norm() == Approx((std::sqrt(29.0) + 0 + 1 + std::sqrt(6.0)) / 4).epsilon(1e-15));
}

TEST_CASE("the vector from random pairs is the fp64 mean difference rounded to float", "[steering][contrastive]") {
  for (std::size_t dim : {1u, 7u, 16u, 33u, 257u}) {
    const Index d = static_cast<Index>(dim), pairs = 5;
    std::vector<std::vector<float>> pos_data, neg_data;
    std::vector<CView> pos, neg;
    for (Index i = 0; i < pairs; ++i) {  // prompts of different lengths, offset so the means differ
      const Index tp = 1 + i, tn = 3 + 2 * i;
      pos_data.push_back(normal(static_cast<std::size_t>(tp * d), 100 + static_cast<unsigned>(i + dim), 4.0f));
      neg_data.push_back(normal(static_cast<std::size_t>(tn * d), 200 + static_cast<unsigned>(i + dim), 4.0f));
      for (auto& x : pos_data.back()) x += 0.5f;
    }
    for (Index i = 0; i < pairs; ++i) {
      pos.emplace_back(pos_data[static_cast<std::size_t>(i)].data(), 1 + i, d);
      neg.emplace_back(neg_data[static_cast<std::size_t>(i)].data(), 3 + 2 * i, d);
    }
    for (auto red : {TokenReduction::kMeanOverPositions, TokenReduction::kLastToken}) {
      for (bool unit : {false, true}) {
        // fp64 reference, written out independently.
        std::vector<double> ref(dim, 0.0);
        for (Index i = 0; i < pairs; ++i) {
          for (const auto* side : {&pos[static_cast<std::size_t>(i)], &neg[static_cast<std::size_t>(i)]}) {
            const double sign = side == &pos[static_cast<std::size_t>(i)] ? 1.0 : -1.0;
            const Index first = red == TokenReduction::kLastToken ? side->rows() - 1 : 0;
            for (std::size_t j = 0; j < dim; ++j) {
              double s = 0;
              for (Index r = first; r < side->rows(); ++r) s += (*side)(r, static_cast<Index>(j));
              ref[j] += sign * s / double(side->rows() - first);
            }
          }
        }
        double nn = 0;
        for (double& x : ref) {
          x /= pairs;
          nn += x * x;
        }
        if (unit)
          for (double& x : ref) x /= std::sqrt(nn);
        const auto v = inferkit::contrastive_steering_vector(pos, neg, {.reduction = red, .normalize = unit});
        REQUIRE(v.size() == dim);
        for (std::size_t j = 0; j < dim; ++j) CHECK(close_to_f64(v[j], ref[j], unit ? 1.0 : 10.0));
      }
    }
  }
}

TEST_CASE("the builder's add_pair validates and leaves the builder unchanged on a throw",
          "[steering][contrastive][errors]") {
  const std::vector<float> a{1, 2, 3, 4}, b{0, 0, 0, 0}, c{1, 2, 3};
  std::vector<float> bad{1, 2, 3, 4};
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(ContrastiveVectorBuilder(0), "inferkit: dim = 0 is invalid: must be > 0");
  ContrastiveVectorBuilder builder(2);
  CHECK_THROWS_WITH(builder.vector(), "inferkit: num_pairs = 0 is invalid: must be > 0: add at least one prompt pair");
  CHECK_THROWS_WITH(builder.add_pair(CView(c.data(), 1, 3), CView(b.data(), 1, 2)),
                    "inferkit: positive of pair 0: cols = 3 is invalid: must equal dim (2)");
  CHECK_THROWS_WITH(builder.add_pair(CView(a.data(), 0, 2), CView(b.data(), 1, 2)),
                    Catch::Contains("positive of pair 0: rows = 0"));
  CHECK_THROWS_WITH(builder.add_pair(CView(a.data(), 2, 2), CView(bad.data(), 2, 2)),
                    "inferkit: negative of pair 0: state(1, 1) = nan is invalid: must be finite");
  CHECK(builder.num_pairs() == 0);
  // A non-finite state the reduction does not read is no error (last token reads row 1 only).
  ContrastiveVectorBuilder last(2, {.reduction = TokenReduction::kLastToken});
  std::vector<float> first_bad{std::numeric_limits<float>::infinity(), 0, 1, 2};
  CHECK_NOTHROW(last.add_pair(CView(first_bad.data(), 2, 2), CView(b.data(), 2, 2)));
  CHECK(last.vector() == std::vector<float>{1.0f, 2.0f});
  // Normalizing a zero mean difference is an error; the raw vector is fine.
  ContrastiveVectorBuilder same(2, {.normalize = true});
  same.add_pair(CView(a.data(), 2, 2), CView(a.data(), 2, 2));
  CHECK_THROWS_WITH(same.vector(), Catch::Contains("mean difference norm = 0 is invalid: must be > 0 to normalize"));
  CHECK(same.mean_difference() == std::vector<double>{0.0, 0.0});
  const std::vector<CView> one{CView(a.data(), 2, 2)}, none;
  CHECK_THROWS_WITH(inferkit::contrastive_steering_vector(none, none),
                    "inferkit: positives.size() = 0 is invalid: must be > 0");
  CHECK_THROWS_WITH(inferkit::contrastive_steering_vector(one, none),
                    "inferkit: negatives.size() = 0 is invalid: must equal positives.size() (1)");
}
