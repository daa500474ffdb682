#pragma once
// PreTokenizer: the split a byte-level BPE vocabulary applies before its merges, named as GGUF's
// `tokenizer.ggml.pre` names it. Each is a list of split regexes (SplitRegex) applied in turn, each
// to every piece the previous one left ("isolated": matches and the text between them are
// pieces), as the Hugging Face tokenizers' Split pre-tokenizers and llama.cpp do.
//
//   const auto pre = inferkit::PreTokenizer::named("llama-bpe");
//   std::vector<inferkit::TextSpan> pieces;
//   pre.split("Hello world!!", pieces);  // "Hello", " world", "!!"
//
// The patterns are the published ones (each model's tokenizer.json), in the forms llama.cpp runs
// them: case-insensitive contractions (?i:'s|...) written out as '[sS]|...; DeepSeek's literal
// ranges written as \x{...} code points. Names (and the aliases llama.cpp accepts for the same
// split): "default"; "gpt-2" (phi-2, mpt, olmo, jais, jina-es, jina-de, jina-v2-es, jina-v2-de,
// gigachat, modern-bert); "llama-bpe" (llama3, llama-v3, falcon3, falcon-h1, pixtral, dbrx,
// smaug-bpe, chatglm-bpe, glm4); "qwen2" (deepseek-r1-qwen, stablelm2, megrez, hunyuan);
// "deepseek-llm"; "deepseek-coder"; "falcon"; "starcoder" (refact, command-r, smollm, codeshell,
// exaone, minerva-7b). An unknown name is an error naming it, never a silent default.
// ignore_merges(): Llama 3's tokenizer emits a pre-token that is itself a vocabulary entry without
// running the merges (Hugging Face's `ignore_merges`), true for llama3, llama-v3, llama-bpe,
// falcon3, falcon-h1 and pixtral.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/tokenizer/split_regex.hpp"

namespace inferkit {

namespace detail {

// GPT-2 (Radford et al. 2019, the released encoder.py).
inline constexpr const char* kGpt2Split = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama 3's tokenizer.json (tiktoken cl100k-style), contractions case-folded by hand.
inline constexpr const char* kLlama3Split =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2's tokenizer.json: Llama 3's split with single digits.
inline constexpr const char* kQwen2Split =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek LLM's tokenizer.json: the cased-letter ranges of its second split.
inline constexpr const char* kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
inline constexpr const char* kDeepseekPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
inline constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct PreTokenizerSpec {
  const char* name;
  std::vector<std::string> patterns;
  bool ignore_merges;
};

inline const std::vector<std::pair<std::vector<std::string_view>, PreTokenizerSpec>>& pre_tokenizer_specs() {
  static const std::vector<std::pair<std::vector<std::string_view>, PreTokenizerSpec>> kSpecs = {
      {{"default"}, {"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Split, R"(\p{N}+)", R"([0-9][0-9][0-9])"}, false}},
      {{"gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "gigachat",
        "modern-bert"},
       {"gpt-2", {kGpt2Split}, false}},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral"}, {"llama-bpe", {kLlama3Split}, true}},
      {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, {"dbrx", {kLlama3Split}, false}},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "hunyuan"}, {"qwen2", {kQwen2Split}, false}},
      {{"deepseek-llm"},
       {"deepseek-llm", {R"([\r\n])", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"}, false}},
      {{"deepseek-coder"},
       {"deepseek-coder", {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}, false}},
      {{"falcon"}, {"falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Split, R"([0-9][0-9][0-9])"}, false}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {"starcoder", {R"(\p{N})", kGpt2Split}, false}},
  };
  return kSpecs;
}

}  // namespace detail

/// A byte-level BPE pre-tokenizer: split regexes applied in turn (file comment). Immutable once
/// built; const access is thread-safe.
class PreTokenizer {
 public:
  /// The pre-tokenizer `tokenizer.ggml.pre` calls `name`. Throws std::invalid_argument naming an
  /// unknown name (and listing the known ones).
  static PreTokenizer named(std::string_view name) {
    for (const auto& [aliases, spec] : detail::pre_tokenizer_specs())
      for (const auto a : aliases)
        if (a == name) return PreTokenizer(std::string(name), spec.patterns, spec.ignore_merges);
    std::string known;
    for (const auto& [aliases, spec] : detail::pre_tokenizer_specs())
      for (const auto a : aliases) known += (known.empty() ? "" : ", ") + std::string(a);
    throw_invalid_argument("tokenizer.ggml.pre", std::string(name),
                           "is not a known pre-tokenizer (known: " + known + ")");
  }

  /// A pre-tokenizer from split regexes applied in order.
  PreTokenizer(std::string name, const std::vector<std::string>& patterns, bool ignore_merges = false)
      : name_(std::move(name)), ignore_merges_(ignore_merges) {
    regexes_.reserve(patterns.size());
    for (const auto& p : patterns) regexes_.emplace_back(p);
  }

  const std::string& name() const { return name_; }  ///< as given to named()
  /// Whether a pre-token that is a whole vocabulary piece skips the merges (Llama 3's splits); the
  /// Tokenizer uses it unless VocabularyConfig::ignore_merges is set.
  bool ignore_merges() const { return ignore_merges_; }
  const std::vector<SplitRegex>& regexes() const { return regexes_; }  ///< the splits, in the order applied

  /// Splits text[begin, end) into pieces (non-empty, in order, covering the range), appended to
  /// `out` as byte spans of `text`.
  void split(std::string_view text, std::size_t begin, std::size_t end, std::vector<TextSpan>& out) const {
    if (begin >= end) return;
    SplitRegex::Scratch scratch;
    std::vector<TextSpan> cur{{begin, end}}, next;
    for (const auto& re : regexes_) {
      next.clear();
      for (const auto& s : cur) re.split(text, s.begin, s.end, next, scratch);
      cur.swap(next);
    }
    out.insert(out.end(), cur.begin(), cur.end());
  }
  /// Splits the whole of `text` (split(text, 0, text.size(), out)).
  void split(std::string_view text, std::vector<TextSpan>& out) const { split(text, 0, text.size(), out); }

  /// The pieces of `text` as views (for tests and tools).
  std::vector<std::string_view> pieces(std::string_view text) const {
    std::vector<TextSpan> spans;
    split(text, spans);
    std::vector<std::string_view> out;
    out.reserve(spans.size());
    for (const auto& s : spans) out.push_back(text.substr(s.begin, s.size()));
    return out;
  }

 private:
  std::string name_;
  bool ignore_merges_;
  std::vector<SplitRegex> regexes_;
};

}  // namespace inferkit
