#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "inferkit/core/error.hpp"

using Catch::Matchers::Contains;

TEST_CASE("require names the parameter, the value and the rule", "[core][error]") {
  CHECK_NOTHROW(inferkit::require(true, "top_p", 0.5, "must be in (0, 1]"));
  try {
    inferkit::require(false, "top_p", 1.5, "must be in (0, 1]");
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Contains("top_p"));
    CHECK_THAT(msg, Contains("1.5"));
    CHECK_THAT(msg, Contains("must be in (0, 1]"));
  }
}

TEST_CASE("require_index throws out_of_range with the index and the bound", "[core][error]") {
  CHECK_NOTHROW(inferkit::require_index(3, 4, "token"));
  CHECK_THROWS_AS(inferkit::require_index(4, 4, "token"), std::out_of_range);
  CHECK_THROWS_AS(inferkit::require_index(-1, 4, "token"), std::out_of_range);
  CHECK_THROWS_WITH(inferkit::require_index(7u, 4u, "token"), Contains("token = 7") && Contains("[0, 4)"));
}

TEST_CASE("require_finite rejects NaN and infinities", "[core][error]") {
  CHECK_NOTHROW(inferkit::require_finite(1.0f, "scale"));
  CHECK_THROWS_WITH(inferkit::require_finite(std::numeric_limits<float>::quiet_NaN(), "scale"),
                    Contains("scale = nan"));
  CHECK_THROWS_AS(inferkit::require_finite(-std::numeric_limits<double>::infinity(), "scale"), std::invalid_argument);
}
