#pragma once
// Request traces for `inferkit-llama2c serve`: one JSON object per line (JSON lines), e.g.
//
//   {"arrival_ms": 12.5, "prompt_ids": [1, 403, 9], "max_new_tokens": 64, "temperature": 0, "seed": 7}
//   {"arrival_ms": 40, "prompt": "Once upon a time", "max_new_tokens": 32, "top_p": 0.9, "seed": 8}
//
// Fields (every one optional but max_new_tokens and one of prompt_ids / prompt):
//   arrival_ms        number >= 0: when the request arrives, ms after the start (default 0)
//   prompt_ids        array of token ids (at least one; used as given, so a BOS must be listed)
//   prompt            text; needs a tokenizer (--tokenizer, or the GGUF model's vocabulary); the
//                     model's BOS is put first as `generate` does (TraceOptions::bos: llama2.c's
//                     1, a GGUF vocabulary's bos_token_id, none when it says add_bos = false)
//   max_new_tokens    integer >= 1
//   temperature       number >= 0 (default 1; 0 = greedy)
//   top_k             integer >= 0 (default 0 = off)
//   top_p             number in (0, 1] (default 1)
//   min_p             number in [0, 1] (default 0)
//   repetition_penalty number > 0 (default 1)
//   repeat_last_n     integer >= 0: tokens the penalty sees (default 64)
//   seed              integer in [0, 2^64) (default 42)
//   eos_token_ids     array of token ids that end the request (kept in the output)
//   grammar           string: a GBNF grammar (llama.cpp's format, start rule root) the output must
//                     follow (grammar_flags.hpp); needs the model's token text
//   json_schema       a JSON Schema object (or a string holding one): the output is JSON valid
//                     against it; needs the model's token text. grammar and json_schema exclude
//                     each other; with either, EOS is allowed only where the output is complete
//                     and the vocabulary's EOS ids end the request
// e.g. {"prompt_ids": [1], "max_new_tokens": 64, "json_schema": {"type": "object", "properties":
//      {"ok": {"type": "boolean"}}, "required": ["ok"]}}
// Blank lines are skipped. Anything else (unknown or repeated field, wrong type, bad value,
// trailing text, bad escape, nesting outside json_schema, a grammar that does not compile) is a
// std::invalid_argument naming the 1-based line number and the field. The parser has no state beyond its arguments and
// reads only inside the line, so it can be fed arbitrary bytes (a fuzzer).

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <istream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "grammar_flags.hpp"
#include "sampling_config.hpp"
#include "text.hpp"
#include "tokenizer.hpp"

namespace llama2c {

/// One request of a trace.
struct TraceRequest {
  double arrival_ms = 0;                              ///< arrival time, ms after the start of the run
  std::vector<TokenId> prompt;                        ///< prompt token ids (non-empty)
  Index max_new_tokens = 0;                           ///< tokens to generate at most (>= 1)
  SamplingConfig sampling;                            ///< temperature, top-k/p, min-p, repetition penalty, seed
  std::vector<TokenId> eos_token_ids;                 ///< ids that end the request when generated
  Index line = 0;                                     ///< 1-based line of the trace file it came from; 0 = none
  std::string grammar_text;                           ///< the grammar / json_schema field's text ("" = unconstrained)
  GrammarSource grammar_kind = GrammarSource::kGbnf;  ///< which of the two fields gave it
};

/// What the trace parser checks against.
struct TraceOptions {
  int vocab_size = 0;               ///< > 0: token ids must be below it
  const TextCodec* text = nullptr;  ///< encodes `prompt` text (a text prompt without one is an error)
  TokenId bos = kBos;               ///< put before a text prompt's ids (Config::bos); -1: none
  std::size_t max_prompt_tokens = std::size_t{1} << 20;  ///< longest prompt accepted
  /// The model's token bytes (grammar_trie()): a grammar or json_schema field needs it.
  std::shared_ptr<const inferkit::TokenTrie> grammar_trie{};
};

namespace detail {

// A cursor over one line; every error names the line and the field being read.
class TraceLineParser {
 public:
  TraceLineParser(std::string_view s, Index line) : s_(s), line_(line) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw std::invalid_argument("trace line " + std::to_string(line_) + ", field \"" + field + "\": " + what);
  }
  [[noreturn]] void fail_here(const std::string& field, const std::string& what) const {
    fail(field, what + " at column " + std::to_string(i_ + 1));
  }

  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) ++i_;
  }
  bool at_end() {
    ws();
    return i_ >= s_.size();
  }
  bool peek(char c) {
    ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c, const std::string& field) {
    ws();
    if (i_ >= s_.size()) fail_here(field, std::string("expected '") + c + "', the line ended");
    if (s_[i_] != c) fail_here(field, std::string("expected '") + c + "', got " + shown(s_[i_]));
    ++i_;
  }

  std::string string(const std::string& field) {
    expect('"', field);
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail_here(field, "unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail_here(field, "control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (i_ >= s_.size()) fail_here(field, "unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u':
          append_utf8(out, code_point(field));
          break;
        default:
          fail_here(field, std::string("bad escape \\") + shown(e));
      }
    }
  }

  // A JSON number token, returned as text (checked against the JSON grammar).
  std::string_view number_token(const std::string& field) {
    ws();
    const std::size_t b = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (!digits())
      fail_here(field,
                i_ < s_.size() ? "expected a number, got " + shown(s_[i_]) : "expected a number, the line ended");
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digits()) fail_here(field, "expected digits after '.'");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) fail_here(field, "expected digits in the exponent");
    }
    return s_.substr(b, i_ - b);
  }

  double real(const std::string& field) {
    const std::string_view t = number_token(field);
    double v = 0;
    const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (r.ec != std::errc() || !std::isfinite(v)) fail(field, "number " + std::string(t) + " is out of range");
    return v;
  }

  // An integer in [lo, hi] (no fraction, no exponent).
  std::int64_t integer(const std::string& field, std::int64_t lo, std::int64_t hi) {
    const std::string_view t = number_token(field);
    std::int64_t v = 0;
    const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (r.ptr != t.data() + t.size()) fail(field, "must be an integer, got " + std::string(t));
    if (r.ec != std::errc() || v < lo || v > hi)
      fail(field,
           "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::string(t));
    return v;
  }

  std::uint64_t unsigned64(const std::string& field) {
    const std::string_view t = number_token(field);
    std::uint64_t v = 0;
    const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (r.ptr != t.data() + t.size() || r.ec != std::errc())
      fail(field, "must be an integer in [0, 2^64), got " + std::string(t));
    return v;
  }

  // The text of one JSON object or array (nested, strings with escapes skipped over): the
  // json_schema field's value, parsed by inferkit's JSON reader afterwards.
  std::string_view raw_object(const std::string& field) {
    ws();
    const std::size_t b = i_;
    std::size_t depth = 0;
    bool in_string = false;
    for (; i_ < s_.size(); ++i_) {
      const char c = s_[i_];
      if (in_string) {
        if (c == '\\')
          ++i_;
        else if (c == '"')
          in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (depth == 0) break;
        if (--depth == 0) return s_.substr(b, ++i_ - b);
      } else if (depth == 0) {
        break;
      }
    }
    i_ = b;
    fail_here(field, "expected a JSON object (or a string), not closed on this line");
  }

  // [id, id, ...] of token ids in [0, vocab) (any id >= 0 when vocab is 0), at most `limit`.
  std::vector<TokenId> ids(const std::string& field, int vocab, std::size_t limit) {
    std::vector<TokenId> out;
    expect('[', field);
    if (peek(']')) {
      ++i_;
      return out;
    }
    while (true) {
      const std::string item = field + "[" + std::to_string(out.size()) + "]";
      const std::int64_t hi = vocab > 0 ? vocab - 1 : std::numeric_limits<TokenId>::max();
      out.push_back(static_cast<TokenId>(integer(item, 0, hi)));
      if (out.size() > limit) fail(field, "more than " + std::to_string(limit) + " ids");
      ws();
      if (peek(']')) {
        ++i_;
        return out;
      }
      expect(',', field);
    }
  }

 private:
  bool digits() {
    const std::size_t b = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > b;
  }
  unsigned hex4(const std::string& field) {
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      if (i_ >= s_.size()) fail_here(field, "unterminated \\u escape");
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail_here(field, std::string("bad hex digit ") + shown(c) + " in a \\u escape");
    }
    return v;
  }
  unsigned code_point(const std::string& field) {
    const unsigned hi = hex4(field);
    if (hi >= 0xDC00 && hi <= 0xDFFF) fail_here(field, "lone low surrogate in a \\u escape");
    if (hi < 0xD800 || hi > 0xDBFF) return hi;
    if (i_ + 1 >= s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u')
      fail_here(field, "high surrogate without its low half");
    i_ += 2;
    const unsigned lo = hex4(field);
    if (lo < 0xDC00 || lo > 0xDFFF) fail_here(field, "high surrogate without its low half");
    return 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
  }
  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  static std::string shown(char c) {
    if (c >= 32 && c < 127) return std::string("'") + c + "'";
    char buf[8];
    std::snprintf(buf, sizeof(buf), "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(c)));
    return buf;
  }

  std::string_view s_;
  std::size_t i_ = 0;
  Index line_;
};

}  // namespace detail

/// Parses one trace line (1-based number `line` for errors): nullopt for a blank line, else the
/// request. Throws std::invalid_argument naming the line and the field for anything malformed.
inline std::optional<TraceRequest> parse_trace_line(std::string_view text, Index line, const TraceOptions& opt = {}) {
  detail::TraceLineParser p(text, line);
  if (p.at_end()) return std::nullopt;
  TraceRequest r;
  r.line = line;
  r.sampling.params.temperature = 1.0f;
  std::vector<std::string> seen;
  bool have_ids = false, have_text = false, have_max = false;
  std::string prompt_text, grammar_key;
  p.expect('{', "(line)");
  if (p.peek('}')) {
    p.expect('}', "(line)");
  } else {
    while (true) {
      const std::string key = p.string("(key)");
      for (const auto& s : seen)
        if (s == key) p.fail(key, "appears twice");
      seen.push_back(key);
      p.expect(':', key);
      const auto number_in = [&](double lo, double hi, bool lo_open, const char* rule) {
        const double v = p.real(key);
        if (v < lo || v > hi || (lo_open && v == lo))
          p.fail(key, std::string("must be ") + rule + ", got " + std::to_string(v));
        return v;
      };
      if (key == "arrival_ms") {
        r.arrival_ms = number_in(0, 1e15, false, "a number >= 0");
      } else if (key == "prompt_ids") {
        r.prompt = p.ids(key, opt.vocab_size, opt.max_prompt_tokens);
        if (r.prompt.empty()) p.fail(key, "must hold at least one token id");
        have_ids = true;
      } else if (key == "prompt") {
        prompt_text = p.string(key);
        have_text = true;
      } else if (key == "max_new_tokens") {
        r.max_new_tokens = static_cast<Index>(p.integer(key, 1, Index{1} << 30));
        have_max = true;
      } else if (key == "temperature") {
        r.sampling.params.temperature = static_cast<float>(number_in(0, 1e6, false, "a number >= 0"));
      } else if (key == "top_k") {
        r.sampling.params.top_k = static_cast<Index>(p.integer(key, 0, Index{1} << 30));
      } else if (key == "top_p") {
        r.sampling.params.top_p = static_cast<float>(number_in(0, 1, true, "in (0, 1]"));
      } else if (key == "min_p") {
        r.sampling.params.min_p = static_cast<float>(number_in(0, 1, false, "in [0, 1]"));
      } else if (key == "repetition_penalty") {
        r.sampling.params.repetition_penalty = static_cast<float>(number_in(0, 1e6, true, "a number > 0"));
      } else if (key == "repeat_last_n") {
        r.sampling.repeat_last_n = static_cast<Index>(p.integer(key, 0, Index{1} << 30));
      } else if (key == "seed") {
        r.sampling.seed = p.unsigned64(key);
      } else if (key == "eos_token_ids") {
        r.eos_token_ids = p.ids(key, opt.vocab_size, 1 << 16);
      } else if (key == "grammar" || key == "json_schema") {
        if (!grammar_key.empty()) p.fail(key, "give grammar or json_schema, not both");
        grammar_key = key;
        r.grammar_text = key == "grammar" || p.peek('"') ? p.string(key) : std::string(p.raw_object(key));
      } else {
        p.fail(key,
               "unknown field (known: arrival_ms, prompt_ids, prompt, max_new_tokens, temperature, top_k, top_p, "
               "min_p, repetition_penalty, repeat_last_n, seed, eos_token_ids, grammar, json_schema)");
      }
      if (p.peek('}')) {
        p.expect('}', key);
        break;
      }
      p.expect(',', key);
    }
  }
  if (!p.at_end()) p.fail_here("(line)", "unexpected text after the object");
  if (have_ids && have_text) p.fail("prompt", "give prompt or prompt_ids, not both");
  if (!have_ids && !have_text) p.fail("prompt_ids", "missing: give prompt_ids or prompt");
  if (!have_max) p.fail("max_new_tokens", "missing (required)");
  if (have_text) {
    if (!opt.text)
      p.fail("prompt", "a text prompt needs --tokenizer or a GGUF model with a vocabulary (or give prompt_ids)");
    r.prompt.clear();
    if (opt.bos >= 0) r.prompt.push_back(opt.bos);
    const auto ids = opt.text->encode(prompt_text);
    r.prompt.insert(r.prompt.end(), ids.begin(), ids.end());
    if (r.prompt.empty()) p.fail("prompt", "encodes to no token (and the model adds no BOS)");
    if (r.prompt.size() > opt.max_prompt_tokens)
      p.fail("prompt", "encodes to more than " + std::to_string(opt.max_prompt_tokens) + " tokens");
    if (opt.vocab_size > 0)
      for (TokenId t : r.prompt)
        if (t >= opt.vocab_size)
          p.fail("prompt", "encodes to token " + std::to_string(t) + ", outside the model's vocabulary");
  }
  if (!grammar_key.empty()) {
    if (!opt.grammar_trie)
      p.fail(grammar_key, "needs the model's token text (--tokenizer or a GGUF model with a vocabulary)");
    try {
      r.grammar_kind = grammar_key == "grammar" ? GrammarSource::kGbnf : GrammarSource::kJsonSchema;
      r.sampling.grammar = grammar_masker(r.grammar_kind, r.grammar_text, "", opt.grammar_trie);
    } catch (const std::invalid_argument& e) {
      p.fail(grammar_key, e.what());
    }
    for (const TokenId e : opt.grammar_trie->eos_ids())  // the grammar's EOS ends the request
      if (std::find(r.eos_token_ids.begin(), r.eos_token_ids.end(), e) == r.eos_token_ids.end())
        r.eos_token_ids.push_back(e);
  }
  try {
    make_chain(r.sampling);  // any rule the fields above do not cover
  } catch (const std::invalid_argument& e) {
    p.fail("(sampling)", e.what());
  }
  return r;
}

/// Checks that the KV cache a request can grow to (prompt + max_new_tokens tokens of
/// `kv_bytes_per_token` each) fits in `memory_bytes`. Throws std::invalid_argument naming the
/// trace line (or, for a request from no file, its index `index`), the field, the value and
/// the bound: a trace asking for more than the machine holds fails here, before any pool is
/// allocated for it.
inline void check_request_fits(const TraceRequest& r, Index index, double kv_bytes_per_token, double memory_bytes) {
  const double bytes = (double(r.prompt.size()) + double(r.max_new_tokens)) * kv_bytes_per_token;
  if (bytes <= memory_bytes) return;
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                " is invalid: prompt (%zu tokens) + max_new_tokens need %.3g bytes of KV cache (%.6g per token), "
                "more than this machine's memory (%.3g bytes)",
                r.prompt.size(), bytes, kv_bytes_per_token, memory_bytes);
  const std::string where = r.line > 0 ? "trace line " + std::to_string(r.line) : "request " + std::to_string(index);
  throw std::invalid_argument(where + ", field \"max_new_tokens\": " + std::to_string(r.max_new_tokens) + buf);
}

/// Parses a whole trace (JSON lines); errors name the line and field (parse_trace_line()).
/// Requests with the same grammar text share one masker (and so its cache of masks).
inline std::vector<TraceRequest> parse_trace(std::istream& in, const TraceOptions& opt = {}) {
  std::vector<TraceRequest> out;
  std::string line;
  Index n = 0;
  std::map<std::pair<bool, std::string>, std::shared_ptr<const inferkit::TokenMasker>> maskers;
  while (std::getline(in, line))
    if (auto r = parse_trace_line(line, ++n, opt)) {
      if (r->sampling.grammar) {
        auto& shared = maskers[{r->grammar_kind == GrammarSource::kGbnf, r->grammar_text}];
        if (shared)
          r->sampling.grammar = shared;
        else
          shared = r->sampling.grammar;
      }
      out.push_back(std::move(*r));
    }
  return out;
}

}  // namespace llama2c
