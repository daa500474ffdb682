// inferkit-llama2c: a llama2.c-format model runner built from inferkit.
//
//   inferkit-llama2c --help               the subcommands
//   inferkit-llama2c generate --help      a subcommand's flags (generated from flag_table.hpp)
//   inferkit-llama2c generate --model stories260K.bin --temperature 0 --steps 64 --print-ids
//   inferkit-llama2c generate --model tinyllama.gguf --prompt "Once upon a time" --steps 64
//
// This file only dispatches: flag_table.hpp declares every flag, flags.hpp parses and checks
// them, cmd_<subcommand>.hpp runs a subcommand, and the loops it calls live one per file
// (runner.hpp lists them).

#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "cmd_bench.hpp"
#include "cmd_convert.hpp"
#include "cmd_eval.hpp"
#include "cmd_generate.hpp"
#include "cmd_make_random.hpp"
#include "cmd_quantize.hpp"
#include "cmd_serve.hpp"
#include "cmd_tokenize.hpp"
#include "flag_table.hpp"

namespace {

// The subcommands' entry points, by name (flag_table() declares the same names).
struct Entry {
  std::string_view name;
  int (*run)(const llama2c::cli::Flags&);
};
constexpr Entry kEntries[] = {{"generate", llama2c::cmd_generate}, {"eval", llama2c::cmd_eval},
                              {"serve", llama2c::cmd_serve},       {"make-random", llama2c::cmd_make_random},
                              {"tokenize", llama2c::cmd_tokenize}, {"convert", llama2c::cmd_convert},
                              {"quantize", llama2c::cmd_quantize}, {"bench", llama2c::cmd_bench}};

int usage(const llama2c::cli::FlagTable& t) {
  std::fprintf(stderr,
               "usage: %s generate|eval|serve|make-random|tokenize|convert|quantize|bench [flags]  (%s --help, %s "
               "<subcommand> --help)\n",
               t.program.data(), t.program.data(), t.program.data());
  return 2;
}

}  // namespace

#ifdef INFERKIT_LLAMA2C_MPI
// MPI is initialized only for the distributed flags (so the binary runs without mpirun
// otherwise); every rank but 0 prints nothing on stdout.
struct MpiSession {
  bool active = false;
  MpiSession(int& argc, char**& argv) {
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--context-parallel" || std::string(argv[i]) == "--expert-parallel") active = true;
    if (!active) return;
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) std::fclose(stdout);
  }
  ~MpiSession() {
    if (active) MPI_Finalize();
  }
  // An error on one rank ends the job on every rank (the others may wait in a collective).
  void abort() const {
    if (active) MPI_Abort(MPI_COMM_WORLD, 1);
  }
};
#endif

int main(int argc, char** argv) {
#ifdef INFERKIT_LLAMA2C_MPI
  MpiSession mpi(argc, argv);
#else
  llama2c::use_passive_omp_wait(argv);  // threads.hpp: idle threads sleep (not under MPI: no re-exec there)
#endif
  const llama2c::cli::FlagTable& table = llama2c::flag_table();
  try {
    const std::string_view cmd = argc > 1 ? argv[1] : "";
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::fputs(llama2c::cli::help(table).c_str(), stdout);
      return 0;
    }
    for (const Entry& e : kEntries) {
      if (cmd != e.name) continue;
      if (llama2c::cli::wants_help(argc, argv, 2)) {
        std::fputs(llama2c::cli::help(table, cmd).c_str(), stdout);
        return 0;
      }
      return e.run(llama2c::cli::parse_flags(table, cmd, argc, argv, 2));
    }
    if (!cmd.empty()) std::fprintf(stderr, "%s: unknown subcommand '%s'\n", table.program.data(), argv[1]);
    return usage(table);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", table.program.data(), e.what());
#ifdef INFERKIT_LLAMA2C_MPI
    mpi.abort();
#endif
    return 1;
  }
}
