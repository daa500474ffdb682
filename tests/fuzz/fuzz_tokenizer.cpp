// Fuzzes the tokenizer layer: SplitRegex's pattern parser and matcher, the named pre-tokenizers,
// and encode() over vocabularies built from the input (tokenizer/vocabulary.hpp, spm.hpp, bpe.hpp,
// tokenizer.hpp).
// Byte 0 selects: even: a pattern (up to 64 bytes, ended by a backslash and one more byte) and a
// text; odd: a vocabulary (model, pre-tokenizer name, up to 48 pieces with types and scores,
// merges, optionally the complete byte fallback / byte alphabet) and a text.
// Invariants: a pattern compiles or throws std::invalid_argument; splits are non-empty pieces that
// tile the text in order; encode() returns ids in range, equal to the naive quadratic encoders'
// (tests/tokenizer/naive_tokenizer.hpp) over the same fragments; decode() equals the streaming
// detokenizer's chunks joined; with a complete byte set and normal pieces, decode(encode(s))
// gives s back (SentencePiece: U+2581 as a space).

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/tokenizer/detokenizer.hpp"
#include "inferkit/tokenizer/pre_tokenizer.hpp"
#include "inferkit/tokenizer/split_regex.hpp"
#include "inferkit/tokenizer/tokenizer.hpp"
#include "tokenizer/naive_tokenizer.hpp"

namespace {

using inferkit::TokenId;

void check_tiling(const std::vector<inferkit::TextSpan>& spans, std::size_t begin, std::size_t end) {
  std::size_t at = begin;
  for (const auto& s : spans) {
    FUZZ_CHECK(s.begin == at && s.end > s.begin);
    at = s.end;
  }
  FUZZ_CHECK(at == (begin == end ? begin : end));
}

const char* const kPre[] = {"default",      "gpt-2",          "llama-bpe", "qwen2",
                            "deepseek-llm", "deepseek-coder", "falcon",    "starcoder"};

void fuzz_regex(FuzzedDataProvider& in) {
  const std::string pattern = in.ConsumeRandomLengthString(64);
  const std::string text = in.ConsumeRemainingBytesAsString();
  std::optional<inferkit::SplitRegex> re;
  if (fuzz::ok([&] { re.emplace(pattern); })) {
    std::vector<inferkit::TextSpan> spans;
    if (fuzz::ok([&] { re->split(text, 0, text.size(), spans); })) check_tiling(spans, 0, text.size());
  }
  static const std::vector<inferkit::PreTokenizer> pre = [] {
    std::vector<inferkit::PreTokenizer> v;
    for (const char* n : kPre) v.push_back(inferkit::PreTokenizer::named(n));
    return v;
  }();
  for (const auto& p : pre) {
    std::vector<inferkit::TextSpan> spans;
    p.split(text, spans);
    check_tiling(spans, 0, text.size());
  }
}

void fuzz_vocabulary(FuzzedDataProvider& in) {
  using inferkit::TokenType;
  const bool spm = in.ConsumeBool();
  const bool complete = in.ConsumeBool();
  inferkit::VocabularyConfig cfg;
  cfg.model = spm ? inferkit::TokenizerModel::kSentencePiece : inferkit::TokenizerModel::kBytePair;
  cfg.pre = kPre[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kPre) - 1)];
  cfg.add_bos = false;
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<TokenType> types;
  std::set<std::string> seen;
  bool all_normal = true;
  auto add = [&](std::string p, TokenType t, float score) {
    if (p.empty() || !seen.insert(p).second) return;
    pieces.push_back(std::move(p));
    types.push_back(t);
    scores.push_back(score);
  };
  if (complete) {
    // SentencePiece: spaces become U+2581, which needs a piece of its own to come back as a space
    // (its byte-fallback tokens decode to the character U+2581, as in Hugging Face's decoder).
    if (spm) add("\xE2\x96\x81", TokenType::kNormal, -1.0f);
    for (int b = 0; b < 256; ++b) {
      if (spm) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
        add(buf, TokenType::kByte, 0.0f);
      } else {
        std::string m;
        inferkit::utf8_append(m, inferkit::byte_to_unicode(static_cast<std::uint8_t>(b)));
        add(m, TokenType::kNormal, 0.0f);
      }
    }
  }
  const int n = in.ConsumeIntegralInRange<int>(1, 48);
  for (int i = 0; i < n; ++i) {
    std::string p = in.ConsumeRandomLengthString(6);
    const int t = in.ConsumeIntegralInRange<int>(0, 9);
    TokenType type = t <= 4 ? TokenType::kNormal : static_cast<TokenType>(t - 4);  // 1..5: normal..unused
    if (type == TokenType::kUserDefined || type == TokenType::kUnused) type = TokenType::kNormal;
    if (type != TokenType::kNormal) all_normal = false;
    if (!spm && in.ConsumeBool()) {  // BPE pieces are usually in the alphabet
      std::string m;
      inferkit::byte_level_encode(p, m);
      p = m;
    }
    add(p, type, fuzz::finite_float(in, 10.0f));
  }
  std::vector<std::string> merges;
  const int m = in.ConsumeIntegralInRange<int>(0, 48);
  for (int i = 0; i < m && !pieces.empty(); ++i) {
    const auto& a = pieces[in.ConsumeIntegralInRange<std::size_t>(0, pieces.size() - 1)];
    const auto& b = pieces[in.ConsumeIntegralInRange<std::size_t>(0, pieces.size() - 1)];
    if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos) continue;
    merges.push_back(a + " " + b);
    if (in.ConsumeBool()) add(a + b, TokenType::kNormal, fuzz::finite_float(in, 10.0f));  // the merged piece
  }
  for (std::size_t i = 0; i < types.size(); ++i)
    if (types[i] == TokenType::kUnknown) {
      cfg.unk = static_cast<TokenId>(i);
      break;
    }
  const std::string text = in.ConsumeRemainingBytesAsString();

  std::optional<inferkit::Tokenizer> tok;
  if (!fuzz::ok([&] { tok.emplace(inferkit::Vocabulary(pieces, scores, types, merges, cfg)); })) return;
  std::vector<TokenId> ids;
  if (!fuzz::ok([&] { ids = tok->encode(text); })) return;  // a byte with no piece, no <0xNN>, no <unk>
  for (const TokenId id : ids) FUZZ_CHECK(id >= 0 && static_cast<std::size_t>(id) < tok->vocabulary().size());
  FUZZ_CHECK(ids == naive::encode(*tok, text));
  const std::string back = tok->decode(ids);
  inferkit::Detokenizer d(tok->vocabulary());
  std::string joined;
  for (const TokenId id : ids) joined += d.push(id);
  joined += d.flush();
  FUZZ_CHECK(joined == back);
  if (complete && all_normal) {
    std::string want;
    for (std::size_t k = 0; k < text.size(); ++k) {
      if (spm && text.compare(k, 3, "\xE2\x96\x81") == 0) {
        want.push_back(' ');
        k += 2;
      } else {
        want.push_back(text[k]);
      }
    }
    FUZZ_CHECK(back == want);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  FuzzedDataProvider in(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    fuzz_regex(in);
  } else {
    fuzz_vocabulary(in);
  }
  return 0;
}
