#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "inferkit/core/view.hpp"

using inferkit::MatrixView;
using inferkit::Tensor3View;

TEST_CASE("MatrixView indexes row-major with an explicit stride", "[core][view]") {
  std::vector<float> data(3 * 5);
  std::iota(data.begin(), data.end(), 0.0f);
  MatrixView<float> m(std::span<float>(data), 3, 4, 5);
  CHECK(m(0, 0) == 0.0f);
  CHECK(m(2, 3) == 13.0f);
  CHECK(m.row(1)[2] == 7.0f);
  MatrixView<const float> c = m;  // mutable converts to const
  CHECK(c.rows_slice(1, 2)(1, 0) == 10.0f);
}

TEST_CASE("MatrixView rejects inconsistent sizes", "[core][view]") {
  std::vector<float> data(10);
  CHECK_THROWS_WITH((MatrixView<float>(std::span<float>(data), 3, 4)), Catch::Contains("storage.size() = 10"));
  CHECK_THROWS_WITH((MatrixView<float>(data.data(), 2, 4, 3)), Catch::Contains("row_stride = 3"));
  CHECK_THROWS_WITH((MatrixView<float>(data.data(), -1, 4)), Catch::Contains("rows = -1"));
  CHECK_THROWS_AS((MatrixView<float>(nullptr, 2, 2)), std::invalid_argument);
  CHECK_NOTHROW(MatrixView<float>(nullptr, 0, 8));
  // The last row needs only cols elements, not a whole stride.
  CHECK_NOTHROW(MatrixView<float>(std::span<float>(data), 2, 4, 6));
  MatrixView<float> m(std::span<float>(data), 2, 4, 6);
  CHECK_THROWS_AS(m.rows_slice(1, 2), std::invalid_argument);
}

TEST_CASE("Tensor3View slices along each dimension", "[core][view]") {
  std::vector<int> data(2 * 3 * 4);
  std::iota(data.begin(), data.end(), 0);
  Tensor3View<int> t(std::span<int>(data), 2, 3, 4);  // [tokens, heads, dim]
  CHECK(t(1, 2, 3) == 23);
  CHECK(t.at0(1)(0, 0) == 12);
  auto head1 = t.at1(1);  // all tokens of head 1
  CHECK(head1.rows() == 2);
  CHECK(head1(1, 2) == 12 + 4 + 2);
  CHECK(t.slice0(1, 1)(0, 0, 0) == 12);
  CHECK_THROWS_AS(t.slice0(1, 2), std::invalid_argument);
  CHECK_THROWS_WITH((Tensor3View<int>(std::span<int>(data), 2, 3, 5)), Catch::Contains("storage.size() = 24"));
}

TEST_CASE("Empty views accept the strides a caller computes for them", "[core][view]") {
  // Zero tokens of a head-major [heads = 8, tokens, dim = 128] buffer viewed as [tokens, heads,
  // dim]: token stride 128, head stride tokens * 128 = 0.
  const float* p = nullptr;
  const Tensor3View<const float> t(p, 0, 8, 128, 128, 0);
  CHECK(t.dim0() == 0);
  CHECK(t.slice0(0, 0).dim0() == 0);
  CHECK(t.at1(3).rows() == 0);
  const MatrixView<const float> m(p, 0, 128, 0);
  CHECK(m.empty());
  // A non-empty view still needs consistent strides, and no stride may be negative.
  std::vector<float> data(8 * 128);
  CHECK_THROWS_WITH((Tensor3View<const float>(data.data(), 1, 8, 128, 128, 0)), Catch::Contains("stride1 = 0"));
  CHECK_THROWS_WITH((Tensor3View<const float>(p, 0, 8, 128, 128, -1)), Catch::Contains("stride1 = -1"));
  CHECK_THROWS_WITH((MatrixView<float>(data.data(), 2, 4, 3)), Catch::Contains("row_stride = 3"));
}
