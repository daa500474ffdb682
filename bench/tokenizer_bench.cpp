// Tokenizers and GGUF opening.
//   tokenizer/encode/{inferkit,naive}/<vocab>        MB/s of text encoded (counter MBps)
//   tokenizer/encode/{inferkit,naive}/<vocab>-4k    the same on a 4 KiB prefix (SentencePiece
//                                                    encodes a fragment as one sequence, so the
//                                                    naive quadratic loop gets a prefix it can finish)
//   tokenizer/decode/inferkit/<vocab>                MB/s of text produced from the ids
//   tokenizer/pre_tokenizer/inferkit/<name>          MB/s of the split alone
//   gguf/open/{inferkit,inferkit_read}/1GB           open + parse a 1 GB file (mmap / the read fallback)
//   gguf/read/memread/1GB                            a plain read() of the same bytes into memory
// Vocabularies: the four of ../shared/vocab, from INFERKIT_TEST_VOCAB_DIR (their benchmarks are
// not registered when it is unset). Text: 4 MiB generated deterministically (mt19937, seed 27)
// from words of English, German, French, Russian, Greek, Chinese and Korean, code, numbers,
// punctuation, emoji, tabs, newlines and runs of spaces. naive: the quadratic merge loops of
// tests/tokenizer/naive_tokenizer.hpp (rescan every pair after each merge) over the same
// fragments and pre-tokens. The 1 GB GGUF file (16 F32 tensors of 64 MiB and a 32000-string
// token list) is written once by GgufWriter into $TMPDIR (default /tmp) and removed at exit;
// INFERKIT_BENCH_GGUF_MB overrides its size.
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/io/gguf.hpp"
#include "inferkit/io/gguf_writer.hpp"
#include "inferkit/tokenizer/gguf_vocabulary.hpp"
#include "inferkit/tokenizer/tokenizer.hpp"
#include "tokenizer/naive_tokenizer.hpp"

namespace {

using inferkit::TokenId;

const std::string& mixed_text() {
  static const std::string text = [] {
    static const char* const kWords[] = {
        "the",      "quick",    "brown",  "fox",     "jumps",       "over",     "lazy",    "dog",  "It's",    "they'll",
        "we've",    "Hello",    "World",  "über",    "Straße",      "naïve",    "café",    "déjà", "Привет",  "мир",
        "ελληνικά", "λόγος",    "我们",   "的",      "工作",        "中文分词", "한국어",  "토큰", "int",     "main()",
        "{",        "}",        "return", "x_1",     "std::vector", "0x1F",     "3.14159", "2024", "1000000", "42",
        "!!",       "?",        "...",    "--",      "==",          "#",        "\"",      "'",    "🚀",       "😀",
        "✅",        "(normal)", "e-mail", "naïveté", "Ωmega",       "½"};
    static const char* const kSeps[] = {" ", " ", " ", " ", " ", "  ", "\n", "\t", ", ", ". ", "\n\n", "    "};
    std::mt19937 rng(27);
    std::string s;
    s.reserve(4u << 20);
    while (s.size() < (4u << 20)) {
      s += kWords[rng() % std::size(kWords)];
      s += kSeps[rng() % std::size(kSeps)];
    }
    return s;
  }();
  return text;
}

void set_mbps(benchmark::State& state, double bytes_per_iteration) {
  state.counters["MBps"] =
      benchmark::Counter(bytes_per_iteration * 1e-6, benchmark::Counter::kIsIterationInvariantRate);
}

struct VocabBench {
  std::string name;
  std::shared_ptr<const inferkit::Tokenizer> tok;
};

void BM_encode(benchmark::State& state, const VocabBench* v, std::size_t bytes, bool naive_loop) {
  const std::string_view text = std::string_view(mixed_text()).substr(0, bytes);
  std::size_t n = 0;
  for (auto _ : state) {
    const auto ids = naive_loop ? naive::encode(*v->tok, text)
                                : v->tok->encode(text, inferkit::EncodeOptions{.add_bos = false, .add_eos = false});
    n = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  set_mbps(state, static_cast<double>(text.size()));
  state.counters["bytes_per_token"] = static_cast<double>(text.size()) / static_cast<double>(n);
}

void BM_decode(benchmark::State& state, const VocabBench* v) {
  const auto ids = v->tok->encode(mixed_text(), inferkit::EncodeOptions{.add_bos = false, .add_eos = false});
  std::size_t out = 0;
  for (auto _ : state) {
    const std::string s = v->tok->decode(ids);
    out = s.size();
    benchmark::DoNotOptimize(s.data());
  }
  set_mbps(state, static_cast<double>(out));
}

void BM_pre_tokenizer(benchmark::State& state, const char* name) {
  const auto pre = inferkit::PreTokenizer::named(name);
  std::vector<inferkit::TextSpan> pieces;
  for (auto _ : state) {
    pieces.clear();
    pre.split(mixed_text(), pieces);
    benchmark::DoNotOptimize(pieces.data());
  }
  set_mbps(state, static_cast<double>(mixed_text().size()));
}

// ---- GGUF open ----------------------------------------------------------------------------------

struct BigFile {
  std::string path;
  std::size_t bytes = 0;
  ~BigFile() {
    if (!path.empty()) std::remove(path.c_str());
  }
};

const BigFile& big_file() {
  static const BigFile f = [] {
    BigFile b;
    const char* tmp = std::getenv("TMPDIR");
    b.path = std::string(tmp && *tmp ? tmp : "/tmp") + "/inferkit_bench_1GB." + std::to_string(::getpid()) + ".gguf";
    std::size_t mb = 1024;
    if (const char* e = std::getenv("INFERKIT_BENCH_GGUF_MB"))
      mb = std::max<std::size_t>(16, std::strtoull(e, nullptr, 10));
    const std::size_t per_tensor = (mb << 20) / 16 / sizeof(float);
    const std::vector<float> data = inferkit::bench::normal_floats(per_tensor, 1.0f, 3);
    inferkit::GgufWriter w;
    w.set("general.architecture", "llama");
    std::vector<std::string> tokens;
    for (int i = 0; i < 32000; ++i) tokens.push_back("tok" + std::to_string(i));
    w.set("tokenizer.ggml.tokens", inferkit::GgufValue::of(inferkit::GgufArray::of_strings(tokens)));
    for (int t = 0; t < 16; ++t)  // every tensor references the same buffer: 64 MiB of memory, 1 GiB of file
      w.add_tensor<float>("blk." + std::to_string(t) + ".weight", {per_tensor}, std::span<const float>(data));
    w.write(b.path);
    b.bytes = inferkit::MappedFile::open(b.path).size();
    return b;
  }();
  return f;
}

void BM_gguf_open(benchmark::State& state, inferkit::MappedFile::Mode mode) {
  const BigFile& f = big_file();
  for (auto _ : state) {
    const auto g = inferkit::GgufFile::open(f.path, mode);
    benchmark::DoNotOptimize(g.tensors().data());
  }
  state.counters["file_GB"] = static_cast<double>(f.bytes) * 1e-9;
}

void BM_gguf_memread(benchmark::State& state) {
  const BigFile& f = big_file();
  std::vector<char> buf(f.bytes);
  for (auto _ : state) {
    const int fd = ::open(f.path.c_str(), O_RDONLY);
    std::size_t got = 0;
    while (got < buf.size()) {
      const ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
    benchmark::DoNotOptimize(buf.data());
  }
  state.counters["file_GB"] = static_cast<double>(f.bytes) * 1e-9;
}

const bool registered = [] {
  for (const char* name : {"default", "gpt-2", "llama-bpe", "qwen2", "deepseek-llm"})
    benchmark::RegisterBenchmark((std::string("tokenizer/pre_tokenizer/inferkit/") + name).c_str(), BM_pre_tokenizer,
                                 name)
        ->Unit(benchmark::kMillisecond);
  if (const char* dir = std::getenv("INFERKIT_TEST_VOCAB_DIR"); dir && *dir) {
    static std::vector<VocabBench> vocabs;
    for (const char* name : {"llama-spm", "phi-3", "gpt-2", "deepseek-llm"}) {
      const auto f = inferkit::GgufFile::open(std::string(dir) + "/ggml-vocab-" + name + ".gguf");
      vocabs.push_back({name, std::make_shared<const inferkit::Tokenizer>(inferkit::vocabulary_from_gguf(f))});
    }
    for (const auto& v : vocabs) {
      const bool spm = v.tok->vocabulary().model() == inferkit::TokenizerModel::kSentencePiece;
      const std::size_t all = mixed_text().size(), small = 4 << 10;
      benchmark::RegisterBenchmark(("tokenizer/encode/inferkit/" + v.name).c_str(), BM_encode, &v, all, false)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("tokenizer/encode/inferkit/" + v.name + "-4k").c_str(), BM_encode, &v, small, false)
          ->Unit(benchmark::kMillisecond);
      if (!spm)  // BPE's naive loop is quadratic per pre-token only: it can do the whole text
        benchmark::RegisterBenchmark(("tokenizer/encode/naive/" + v.name).c_str(), BM_encode, &v, all, true)
            ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("tokenizer/encode/naive/" + v.name + "-4k").c_str(), BM_encode, &v, small, true)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("tokenizer/decode/inferkit/" + v.name).c_str(), BM_decode, &v)
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RegisterBenchmark("gguf/open/inferkit/1GB", BM_gguf_open, inferkit::MappedFile::Mode::kMapOrRead)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("gguf/open/inferkit_read/1GB", BM_gguf_open, inferkit::MappedFile::Mode::kRead)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("gguf/read/memread/1GB", BM_gguf_memread)->Unit(benchmark::kMillisecond)->UseRealTime();
  return true;
}();

}  // namespace
