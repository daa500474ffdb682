// A consumer of the installed package: merges two partial softmax states and checks the result
// against the closed form.
#include <cmath>
#include <cstdio>
#include <vector>

#include <inferkit/inferkit.hpp>

int main() {
  // Scores {0} with value {1, 0} and {log 3} with value {0, 1}: weights 1/4 and 3/4.
  std::vector<float> a{1.0f, 0.0f}, b{0.0f, 1.0f}, out(2);
  const float lse = inferkit::merge_attention_states(a, 0.0f, b, std::log(3.0f), out);
  const bool ok = std::abs(out[0] - 0.25f) < 1e-6f && std::abs(out[1] - 0.75f) < 1e-6f &&
                  std::abs(lse - std::log(4.0f)) < 1e-6f;
  std::printf("inferkit %s consumer: out = {%g, %g}, lse = %g -> %s\n", inferkit::kVersionString,
              out[0], out[1], lse, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
