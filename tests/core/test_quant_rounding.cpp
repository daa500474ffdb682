#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "../quant/quant_test_util.hpp"
#include "inferkit/core/quant_rounding.hpp"

TEST_CASE("binary16 outward rounding matches a search over all bit patterns", "[core][quant]") {
  for (float x : {0.0f, 1e-9f, 5.96e-8f, 6e-8f, 1e-5f, 0.1f, 0.333333f, 1.0f, 3.14159f, 1000.0f, 65000.0f, 65504.0f}) {
    INFO(x);
    CHECK(inferkit::to_float(inferkit::f16_round_up(x)) == quant_test::f16_up(x));
    CHECK(inferkit::to_float(inferkit::f16_round_down(x)) == quant_test::f16_down(x));
    CHECK(inferkit::to_float(inferkit::f16_round_down(-x)) == quant_test::f16_down(-x));
  }
  CHECK(std::isinf(inferkit::to_float(inferkit::f16_round_up(70000.0f))));
  CHECK(std::isinf(inferkit::to_float(inferkit::f16_round_down(-70000.0f))));
}

TEST_CASE("symmetric and asymmetric parameters cover the group", "[core][quant]") {
  const float step = inferkit::to_float(inferkit::symmetric_step_f16(10.0f, 7));
  CHECK(step >= 10.0f / 7.0f);
  CHECK(step == quant_test::f16_up(10.0f / 7.0f));
  const auto a = inferkit::asymmetric_step_f16(-1.3f, 2.9f, 15);
  CHECK(inferkit::to_float(a.min) <= -1.3f);
  CHECK(inferkit::to_float(a.min) + 15.0f * inferkit::to_float(a.step) >= 2.9f);
}

TEST_CASE("codes round to nearest even and clamp", "[core][quant]") {
  CHECK(inferkit::symmetric_code(2.5f, 1.0f, 127) == 2);  // tie to even
  CHECK(inferkit::symmetric_code(3.5f, 1.0f, 127) == 4);
  CHECK(inferkit::symmetric_code(-2.5f, 1.0f, 127) == -2);
  CHECK(inferkit::symmetric_code(200.0f, 1.0f, 127) == 127);
  CHECK(inferkit::symmetric_code(-200.0f, 1.0f, 7) == -7);
  CHECK(inferkit::symmetric_code(5.0f, 0.0f, 7) == 0);
  CHECK(inferkit::quantize_code(0.75f, 0.5f, -1.0f, 15, 0) == 4);  // (0.75 + 1) / 0.5 = 3.5 -> 4
  CHECK(inferkit::quantize_code(100.0f, 0.5f, -1.0f, 15, 0) == 15);
  CHECK(inferkit::quantize_code(-100.0f, 0.5f, -1.0f, 15, 0) == 0);
  CHECK(inferkit::quantize_code(3.0f, 0.0f, 3.0f, 15, 9) == 9);
}
