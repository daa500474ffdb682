// The llama2.c runner under mpirun: `generate --context-parallel` on 2 and 3 ranks (each holding
// a token range of the KV cache) and `generate --expert-parallel` on an MoE model (each holding a
// range of the experts) must print the ids of the single-process run, on random models (always)
// and on the real checkpoint (when INFERKIT_TEST_MODEL is set).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli_util.hpp"
#include "llama2c/llama2c.hpp"

namespace {

using cli_test::shell;

std::string runner() { return INFERKIT_LLAMA2C_BINARY; }

// LeakSanitizer off for MPI processes (asan preset): Open MPI's plugins leave allocations at
// MPI_Finalize (see tests/CMakeLists.txt); address and UB checks stay on.
std::string mpirun(int ranks) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 " +
         std::string(INFERKIT_MPIEXEC) + " " + INFERKIT_MPIEXEC_FLAGS + " -np " + std::to_string(ranks) + " ";
}

// Single-process ids against mpirun with `flags` (the distributed ones) on each rank count.
void compare(const std::string& model, const std::string& args, const std::string& flags,
             std::initializer_list<int> rank_counts = {2, 3}) {
  // One thread per process in both runs (the ids do not depend on it; spinning OpenMP threads on
  // a loaded machine only cost time).
  const auto [rc1, one] =
      shell("OMP_NUM_THREADS=1 " + runner() + " generate --model " + model + " " + args + " --print-ids");
  REQUIRE(rc1 == 0);
  REQUIRE(one.size() > 10);
  for (int ranks : rank_counts) {
    INFO(ranks << " ranks, " << args << " " << flags);
    const auto [rc, many] =
        shell(mpirun(ranks) + runner() + " generate --model " + model + " " + args + " " + flags + " --print-ids");
    REQUIRE(rc == 0);
    CHECK(many == one);  // rank 0 prints; the others print nothing
  }
}

}  // namespace

TEST_CASE("generate --context-parallel prints the single-process ids (random model)",
          "[example][llama2c][distributed]") {
  const auto dir = std::filesystem::temp_directory_path() / ("inferkit_cp_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "gqa.bin").string();
  llama2c::Config c{
      .dim = 64, .hidden_dim = 96, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .vocab_size = 300, .seq_len = 96};
  llama2c::Model::random(c, 5).save(model);
  // Shards of 16 positions: a 20-token prompt's prefill already spans two ranks; decode rows
  // then land on later ranks, the last taking the rest. Greedy and sampled.
  const std::string prompt = "--prompt-ids \"5 9 13 40 41 42 7 8 9 10 11 12 13 14 15 16 17 18 19\"";
  compare(model, prompt + " --steps 60 --temperature 0.9 --seed 3", "--context-parallel --cp-shard-tokens 16");
  compare(model, "--steps 60 --temperature 0", "--context-parallel");  // default shards: ceil(96 / ranks)
  std::filesystem::remove_all(dir);
}

TEST_CASE("generate --context-parallel prints the single-process ids (stories260K)",
          "[example][llama2c][distributed][model]") {
  const char* m = std::getenv("INFERKIT_TEST_MODEL");
  if (!m) {
    WARN("INFERKIT_TEST_MODEL not set: skipped");
    return;
  }
  compare(m, "--steps 120 --temperature 0", "--context-parallel --cp-shard-tokens 32");
  compare(m, "--steps 60 --temperature 1 --seed 11", "--context-parallel --cp-shard-tokens 24", {2});
}

TEST_CASE("generate --expert-parallel prints the single-process ids (random MoE model)",
          "[example][llama2c][distributed]") {
  const auto dir = std::filesystem::temp_directory_path() / ("inferkit_ep_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "moe.bin").string();
  const auto [rc, made] = shell(runner() + " make-random --out " + model +
                                " --dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 --vocab 300 --seq-len 96 "
                                "--experts 8 --experts-per-token 2");
  REQUIRE(rc == 0);
  const std::string prompt = "--prompt-ids \"5 9 13 40 41 42 7 8 9 10 11 12\"";
  // Dropless, then with a capacity limit that drops assignments in the prefill chunk (routing
  // and capacity decided over the whole chunk, as in one process); with context parallelism too.
  compare(model, prompt + " --steps 40 --temperature 0.8 --seed 2", "--expert-parallel");
  compare(model, prompt + " --steps 30 --temperature 0 --capacity-factor 1.0", "--expert-parallel");
  compare(model, prompt + " --steps 30 --temperature 0", "--expert-parallel --context-parallel --cp-shard-tokens 8",
          {3});
  std::filesystem::remove_all(dir);
}

TEST_CASE("the runner refuses context or expert parallelism where it does not apply",
          "[example][llama2c][distributed]") {
  const auto [rc, out] =
      shell(mpirun(2) + runner() + " generate --model /nonexistent --context-parallel --beams 2 2>&1");
  CHECK(rc != 0);
  const auto dir = std::filesystem::temp_directory_path() / ("inferkit_cpx_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "dense.bin").string();
  llama2c::Config c{
      .dim = 32, .hidden_dim = 48, .n_layers = 1, .n_heads = 2, .n_kv_heads = 2, .vocab_size = 50, .seq_len = 32};
  llama2c::Model::random(c, 1).save(model);
  const auto [rc2, out2] =
      shell(mpirun(2) + runner() + " generate --model " + model + " --steps 3 --context-parallel --beams 2 2>&1");
  CHECK(rc2 != 0);
  CHECK(out2.find("plain sampling only, not with --beams") != std::string::npos);
  const auto [rc3, out3] =
      shell(mpirun(2) + runner() + " generate --model " + model + " --steps 3 --expert-parallel 2>&1");
  CHECK(rc3 != 0);
  CHECK(out3.find("--expert-parallel needs an MoE model") != std::string::npos);
  std::filesystem::remove_all(dir);
}
