#pragma once
// Helpers of the example tests: the real-checkpoint path, running a shell command or the llama2c
// CLI (exit status, output), and numeric fields of its "name value" output lines.

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>

#include <sys/wait.h>

namespace cli_test {

/// INFERKIT_TEST_MODEL (a llama2.c checkpoint, e.g. stories260K.bin), or "" when unset.
inline std::string test_model() {
  const char* p = std::getenv("INFERKIT_TEST_MODEL");
  return p ? p : "";
}

/// Runs a shell command; returns (exit status, stdout) (stderr passes through).
inline std::pair<int, std::string> shell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), static_cast<int>(buf.size()), p)) out += buf.data();
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

#if defined(INFERKIT_LLAMA2C_BINARY)
/// Runs the llama2c CLI with `args`; returns (exit status, stdout + stderr).
inline std::pair<int, std::string> run_cli(const std::string& args) {
  return shell(std::string(INFERKIT_LLAMA2C_BINARY) + " " + args + " 2>&1");
}
#endif

/// The number after the first word `name` of `text`.
inline double field(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string w;
  while (in >> w)
    if (w == name && in >> w) return std::stod(w);
  FAIL("no field " << name << " in: " << text);
  return 0;
}

}  // namespace cli_test
