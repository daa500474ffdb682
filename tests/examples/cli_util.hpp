#pragma once
// Helpers of the example tests: the real-checkpoint path, running a shell command or the llama2c
// CLI (exit status, output), numeric fields of its "name value" output lines, token-id files and
// temporary paths.

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace cli_test {

/// INFERKIT_TEST_MODEL (a llama2.c checkpoint, e.g. stories260K.bin), or "" when unset.
inline std::string test_model() {
  const char* p = std::getenv("INFERKIT_TEST_MODEL");
  return p ? p : "";
}

/// The whitespace-separated token ids of a text file (a reference output such as
/// stories260K_greedy256.txt).
inline std::vector<std::int32_t> read_ids(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::int32_t> ids;
  for (std::int32_t t; f >> t;) ids.push_back(t);
  return ids;
}

/// A path in the temp directory unique to this process (ctest runs test cases in parallel).
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("inferkit_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
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
