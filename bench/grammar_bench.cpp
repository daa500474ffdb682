// Grammar-constrained decoding (issue 30), one core.
//   grammar/mask/inferkit_cold/<vocab>/<workload>   fill_mask per token along valid instances, a
//                                                   fresh TokenMasker per pass (every cache fill counted)
//   grammar/mask/inferkit_warm/<vocab>/<workload>   the same with the masker kept across passes
//                                                   (a server reusing one grammar)
//   grammar/mask/naive/<vocab>/<workload>           baseline: every token's bytes run through the
//                                                   byte matcher (the per-token recognizer), on the
//                                                   first 8 states of each instance
//   grammar/compile/inferkit/<vocab>/schemas        schema text -> grammar -> first mask (cold masker)
//   grammar/mask_sample/inferkit/<vocab>            the best allowed token of random logits under a
//                                                   mask allowing every 7th token: a loop over the set bits
//   grammar/mask_sample/fused/<vocab>               the same by masked_argmax (grammar/masked_argmax.hpp,
//                                                   AVX-512 / AVX2 / scalar); <vocab> also "128k" (128,256
//                                                   random logits: the cost depends on the size only)
// Counters: mean_us, p50_us, p99_us, max_us over all tokens (or schemas) of a pass, in thread CPU time. Workloads:
// json_gbnf = llama.cpp's json.gbnf (INFERKIT_TEST_GRAMMAR_DIR) walked along the object-valued
// valid instances of tests/grammar/data/schemas.json; schemas = the 55 schemas of that file
// walked along their own valid instances. Vocabularies: deepseek-llm (102,400) and llama-spm
// (32,000) from INFERKIT_TEST_VOCAB_DIR (not registered when unset), tokenized by their own
// tokenizers (SentencePiece without the dummy space prefix).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar_test_util.hpp"
#include "inferkit/grammar/gbnf.hpp"
#include "inferkit/grammar/grammar_matcher.hpp"
#include "inferkit/grammar/json_schema.hpp"
#include "inferkit/grammar/masked_argmax.hpp"
#include "inferkit/io/gguf.hpp"
#include "inferkit/tokenizer/gguf_vocabulary.hpp"
#include "inferkit/tokenizer/tokenizer.hpp"

namespace {

// Per-token times are thread CPU time (CLOCK_THREAD_CPUTIME_ID): the machine is shared, and wall
// time would count other processes' slices into the percentiles.
double cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}
using inferkit::TokenId;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Workload {
  std::shared_ptr<const inferkit::Grammar> grammar;  // json_gbnf: one grammar
  std::string schema_text;                           // schemas: the schema (compile benchmark)
  std::vector<std::vector<TokenId>> instances;       // token ids of each valid instance
};

struct Vocab {
  std::string name;
  std::unique_ptr<inferkit::Tokenizer> tok;
  std::shared_ptr<const inferkit::TokenTrie> trie;
  std::vector<Workload> json_gbnf, schemas;
};

void report(benchmark::State& st, std::vector<double>& us) {
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (const double x : us) sum += x;
  st.counters["mean_us"] = sum / static_cast<double>(us.size());
  st.counters["p50_us"] = us[us.size() / 2];
  st.counters["p99_us"] = us[std::min(us.size() - 1, static_cast<std::size_t>(std::ceil(0.99 * us.size())) - 1)];
  st.counters["max_us"] = us.back();
  st.counters["samples"] = static_cast<double>(us.size());
}

// One pass: every instance of every workload, fill_mask before each token.
void walk(const std::vector<Workload>& ws, const std::shared_ptr<const inferkit::TokenTrie>& trie,
          std::vector<std::shared_ptr<const inferkit::TokenMasker>>& maskers, bool fresh, std::vector<double>& us) {
  inferkit::TokenBitset mask;
  for (std::size_t w = 0; w < ws.size(); ++w) {
    if (fresh || !maskers[w]) maskers[w] = std::make_shared<const inferkit::TokenMasker>(ws[w].grammar, trie);
    for (const auto& ids : ws[w].instances) {
      inferkit::GrammarMatcher m(maskers[w]);
      for (const TokenId id : ids) {
        const double t0 = cpu_us();
        m.fill_mask(mask);
        us.push_back(cpu_us() - t0);
        if (!mask.test(id)) std::abort();  // the workload is valid: a wrong mask
        m.accept(id);
      }
    }
  }
}

void register_mask_sample(const std::string& vocab, std::size_t n);

void register_vocab(Vocab& v) {
  for (const char* wl : {"json_gbnf", "schemas"}) {
    std::vector<Workload>& ws = std::string(wl) == "json_gbnf" ? v.json_gbnf : v.schemas;
    if (ws.empty()) continue;
    for (const bool fresh : {true, false}) {
      const std::string name =
          std::string("grammar/mask/") + (fresh ? "inferkit_cold/" : "inferkit_warm/") + v.name + "/" + wl;
      benchmark::RegisterBenchmark(name.c_str(),
                                   [&v, &ws, fresh](benchmark::State& st) {
                                     std::vector<std::shared_ptr<const inferkit::TokenMasker>> maskers(ws.size());
                                     std::vector<double> us;
                                     if (!fresh)
                                       walk(ws, v.trie, maskers, false, us);  // warm the caches outside the timing
                                     for (auto _ : st) {
                                       us.clear();
                                       walk(ws, v.trie, maskers, fresh, us);
                                     }
                                     report(st, us);
                                   })
          ->Iterations(fresh ? 1 : 3)
          ->Unit(benchmark::kMillisecond);
    }
    const std::string naive = std::string("grammar/mask/naive/") + v.name + "/" + wl;
    benchmark::RegisterBenchmark(naive.c_str(),
                                 [&v, &ws](benchmark::State& st) {
                                   std::vector<double> us;
                                   inferkit::TokenBitset mask(v.trie->vocab_size());
                                   for (auto _ : st) {
                                     us.clear();
                                     for (const Workload& w : ws) {
                                       const inferkit::TokenMasker masker(w.grammar, v.trie);
                                       for (const auto& ids : w.instances) {
                                         inferkit::ByteMatcher m(*w.grammar);
                                         for (std::size_t k = 0; k < ids.size() && k < 8; ++k) {
                                           const double t0 = cpu_us();
                                           mask.clear();
                                           for (std::size_t t = 0; t < v.trie->vocab_size(); ++t)
                                             if (masker.allows(m, static_cast<TokenId>(t)))
                                               mask.set(static_cast<TokenId>(t));
                                           us.push_back(cpu_us() - t0);
                                           benchmark::DoNotOptimize(mask);
                                           if (!m.accept_bytes(v.trie->bytes(ids[k]))) std::abort();
                                         }
                                         if (us.size() > 200) break;
                                       }
                                       if (us.size() > 200) break;
                                     }
                                   }
                                   report(st, us);
                                 })
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  if (!v.schemas.empty()) {
    const std::string name = "grammar/compile/inferkit/" + v.name + "/schemas";
    benchmark::RegisterBenchmark(
        name.c_str(),
        [&v](benchmark::State& st) {
          std::vector<double> us;
          inferkit::TokenBitset mask;
          for (auto _ : st) {
            us.clear();
            for (const Workload& w : v.schemas) {
              const double t0 = cpu_us();
              auto g = std::make_shared<const inferkit::Grammar>(inferkit::json_schema_grammar(w.schema_text));
              const auto masker = std::make_shared<const inferkit::TokenMasker>(g, v.trie);
              inferkit::GrammarMatcher m(masker);
              m.fill_mask(mask);
              us.push_back(cpu_us() - t0);
            }
          }
          report(st, us);
        })
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  register_mask_sample(v.name, v.trie->vocab_size());
}

// grammar/mask_sample/{inferkit,fused}/<name>: the best allowed token of random logits under a
// mask allowing every 7th token, by a loop over the set bits (the baseline) and by masked_argmax.
void register_mask_sample(const std::string& vocab, std::size_t n) {
  for (const bool fused : {false, true}) {
    const std::string ms = std::string("grammar/mask_sample/") + (fused ? "fused/" : "inferkit/") + vocab;
    benchmark::RegisterBenchmark(ms.c_str(), [n, fused](benchmark::State& st) {
      std::vector<float> logits(n);
      std::mt19937 rng(30);
      std::normal_distribution<float> nd;
      for (auto& x : logits) x = nd(rng);
      inferkit::TokenBitset mask(n);
      for (std::size_t t = 0; t < n; t += 7) mask.set(static_cast<TokenId>(t));
      for (auto _ : st) {
        TokenId best = -1;
        if (fused) {
          best = inferkit::masked_argmax(logits, mask);
        } else {
          float best_v = -std::numeric_limits<float>::infinity();
          mask.for_each([&](TokenId t) {
            if (logits[static_cast<std::size_t>(t)] > best_v) best_v = logits[static_cast<std::size_t>(t)], best = t;
          });
        }
        benchmark::DoNotOptimize(best);
      }
    })->Unit(benchmark::kMicrosecond);
  }
}

std::vector<Vocab>& vocabs() {
  static std::vector<Vocab> v;
  return v;
}

bool setup() {
  const char* vdir = std::getenv("INFERKIT_TEST_VOCAB_DIR");
  const char* gdir = std::getenv("INFERKIT_TEST_GRAMMAR_DIR");
  if (!vdir || !*vdir) return false;
  const inferkit::JsonValue schemas =
      inferkit::parse_json(read_file(std::string(INFERKIT_GRAMMAR_BENCH_DATA) + "/schemas.json"));
  std::shared_ptr<const inferkit::Grammar> json_gbnf;
  if (gdir && *gdir)
    json_gbnf =
        std::make_shared<const inferkit::Grammar>(inferkit::parse_gbnf(read_file(std::string(gdir) + "/json.gbnf")));
  for (const char* name : {"deepseek-llm", "llama-spm"}) {
    Vocab v;
    v.name = name;
    const auto f = inferkit::GgufFile::open(std::string(vdir) + "/ggml-vocab-" + name + ".gguf");
    v.tok =
        std::make_unique<inferkit::Tokenizer>(grammar_test::without_space_prefix(inferkit::vocabulary_from_gguf(f)));
    v.trie = std::make_shared<const inferkit::TokenTrie>(inferkit::TokenTrie::from_vocabulary(v.tok->vocabulary()));
    Workload jg;
    jg.grammar = json_gbnf;
    for (const inferkit::JsonValue& c : schemas.items) {
      Workload w;
      w.schema_text = c.find("schema")->dump();
      w.grammar = std::make_shared<const inferkit::Grammar>(inferkit::json_schema_grammar(w.schema_text));
      for (const inferkit::JsonValue& t : c.find("valid")->items) {
        auto ids = v.tok->encode(t.text, {.add_bos = false, .add_eos = false});
        if (json_gbnf && !t.text.empty() && t.text[0] == '{') jg.instances.push_back(ids);
        w.instances.push_back(std::move(ids));
      }
      v.schemas.push_back(std::move(w));
    }
    if (json_gbnf) v.json_gbnf.push_back(std::move(jg));
    vocabs().push_back(std::move(v));
  }
  for (Vocab& v : vocabs()) register_vocab(v);
  // Llama 3's vocabulary size (128,256): the mask-and-sample cost depends only on the size and
  // the mask's density, so random logits of that size stand for it.
  register_mask_sample("128k", 128256);
  return true;
}

const bool registered = setup();

}  // namespace
