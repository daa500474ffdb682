// Fuzzes the llama2c serve example's request-trace parser (examples/llama2c/trace.hpp) with
// arbitrary bytes split into lines, with and without a vocabulary bound and a tokenizer.
// Invariants: a line either parses or is std::invalid_argument (naming the line); a parsed
// request is valid (non-empty prompt, ids in the vocabulary when bounded, max_new_tokens >= 1,
// a finite arrival >= 0, a sampler chain that builds, its line number); written back as a
// canonical JSON line it parses to the same request; parse_trace() over the whole input agrees
// with line-by-line; the KV bound serve() applies (check_request_fits, here with a model of
// 1280 bytes per token on a 16 GiB machine) either passes or names the line and max_new_tokens
// (corpus seed max_new_tokens_2e30: the line that once ended in a bare std::bad_alloc).
// With bit 4 of the first byte the parser gets a real token trie (the fuzz tokenizer's 265 pieces,
// llama2c::grammar_trie), so "grammar" / "json_schema" fields compile and the request's mask path
// runs: for up to 8 tokens every id of the vocabulary is in the mask exactly when the byte-level
// check (TokenMasker::allows) takes it, EOS exactly when complete, the grammar's EOS is among the
// request's stop ids, and the request's chain samples only allowed tokens (seeds grammar_* and
// json_schema_*). A grammar too ambiguous for the matcher is std::length_error (documented).

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include "fuzz_util.hpp"
#include "inferkit/grammar/json_value.hpp"
#include "llama2c/trace.hpp"

namespace {

const llama2c::TextCodec& tokenizer() {
  static const llama2c::TextCodec t = llama2c::TextCodec::of([] {
    std::vector<std::string> pieces{"<unk>", "\n<s>\n", "\n</s>\n"};
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      pieces.push_back(buf);
    }
    for (const char* p : {" ", "a", "b", " a", "ab", "ba"}) pieces.push_back(p);
    std::ostringstream out(std::ios::binary);
    llama2c::Tokenizer::save(out, pieces, std::vector<float>(pieces.size(), -1.0f));
    std::istringstream in(out.str(), std::ios::binary);
    return llama2c::Tokenizer::load(in, static_cast<int>(pieces.size()), "fuzz");
  }());
  return t;
}

// The fuzz tokenizer's pieces as the grammar masks see them (ids 0-2 are not text; EOS = 2).
const std::shared_ptr<const inferkit::TokenTrie>& trie() {
  static const std::shared_ptr<const inferkit::TokenTrie> t = llama2c::grammar_trie(&tokenizer(), 265);
  return t;
}

// A JSON string holding `s` (the library's writer: raw bytes >= 0x80 kept, as the trace reader
// takes them).
std::string json_string(const std::string& s) {
  std::string out;
  inferkit::JsonValue::quote(s, out);
  return out;
}

// Runs the request's grammar for up to 8 tokens (file comment). `pick` chooses among allowed ids.
void check_grammar(const llama2c::TraceRequest& r, std::uint8_t pick) {
  const auto& masker = r.sampling.grammar;
  FUZZ_CHECK(&masker->trie() == trie().get());
  for (const inferkit::TokenId e : trie()->eos_ids())
    FUZZ_CHECK(std::find(r.eos_token_ids.begin(), r.eos_token_ids.end(), e) != r.eos_token_ids.end());
  const std::size_t n = trie()->vocab_size();
  try {
    inferkit::GrammarMatcher m(masker);
    const inferkit::SamplerChain chain = llama2c::make_chain(r.sampling);
    inferkit::SamplerState state = chain.make_state();
    inferkit::TokenBitset mask;
    for (int step = 0; step < 8; ++step) {
      m.fill_mask(mask);
      std::vector<inferkit::TokenId> text;
      for (std::size_t i = 0; i < n; ++i) {
        const auto id = static_cast<inferkit::TokenId>(i);
        FUZZ_CHECK(mask.test(id) == masker->allows(m.state(), id));
        if (trie()->is_eos(id)) FUZZ_CHECK(mask.test(id) == m.is_complete());
        if (mask.test(id) && !trie()->is_eos(id)) text.push_back(id);
      }
      if (mask.count() == 0) break;  // a dead end of this small vocabulary
      // The request's own chain: it must draw an allowed token (or refuse when a rule after
      // the grammar leaves nothing, which it cannot: the grammar stage runs first).
      std::vector<float> logits(n);
      for (std::size_t i = 0; i < n; ++i) logits[i] = static_cast<float>((i * 2654435761u + pick) % 97) / 16.0f;
      const inferkit::TokenId drawn =
          chain.sample(logits, {}, state, inferkit::CounterRng(r.sampling.seed), static_cast<std::uint64_t>(step));
      FUZZ_CHECK(mask.test(drawn));
      if (text.empty()) break;
      const inferkit::TokenId next = text[(pick + 31u * static_cast<unsigned>(step)) % text.size()];
      m.accept(next);
      chain.accept(state, next);
    }
  } catch (const std::length_error&) {
    // the grammar needs more parse stacks than kMaxGrammarStacks (documented)
  }
}

std::string ids_json(const std::vector<inferkit::TokenId>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// The request as a canonical trace line (numbers printed so that they parse back exactly).
std::string to_line(const llama2c::TraceRequest& r) {
  char buf[64];
  const auto num = [&](double v) {
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return std::string(buf);
  };
  const auto& p = r.sampling.params;
  return "{\"arrival_ms\": " + num(r.arrival_ms) + ", \"prompt_ids\": " + ids_json(r.prompt) +
         ", \"max_new_tokens\": " + std::to_string(r.max_new_tokens) + ", \"temperature\": " + num(p.temperature) +
         ", \"top_k\": " + std::to_string(p.top_k) + ", \"top_p\": " + num(p.top_p) + ", \"min_p\": " + num(p.min_p) +
         ", \"repetition_penalty\": " + num(p.repetition_penalty) +
         ", \"repeat_last_n\": " + std::to_string(r.sampling.repeat_last_n) +
         ", \"seed\": " + std::to_string(r.sampling.seed) + ", \"eos_token_ids\": " + ids_json(r.eos_token_ids) +
         (r.sampling.grammar
              ? (r.grammar_kind == llama2c::GrammarSource::kGbnf ? ", \"grammar\": " : ", \"json_schema\": ") +
                    json_string(r.grammar_text)
              : std::string()) +
         "}";
}

bool same(const llama2c::TraceRequest& a, const llama2c::TraceRequest& b) {
  const auto &p = a.sampling.params, &q = b.sampling.params;
  return a.arrival_ms == b.arrival_ms && a.prompt == b.prompt && a.max_new_tokens == b.max_new_tokens &&
         p.temperature == q.temperature && p.top_k == q.top_k && p.top_p == q.top_p && p.min_p == q.min_p &&
         p.repetition_penalty == q.repetition_penalty && a.sampling.repeat_last_n == b.sampling.repeat_last_n &&
         a.sampling.seed == b.sampling.seed && a.eos_token_ids == b.eos_token_ids &&
         (a.sampling.grammar != nullptr) == (b.sampling.grammar != nullptr) &&
         (!a.sampling.grammar || (a.grammar_text == b.grammar_text && a.grammar_kind == b.grammar_kind));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  llama2c::TraceOptions opt;
  static constexpr int kVocab[] = {0, 0, 5, 300};
  opt.vocab_size = kVocab[data[0] & 3];
  if (data[0] & 4) opt.text = &tokenizer();
  opt.max_prompt_tokens = (data[0] & 8) ? 4 : std::size_t{1} << 20;
  if (data[0] & 16) opt.grammar_trie = trie();
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  std::vector<llama2c::TraceRequest> by_line;
  bool all_ok = true;
  std::istringstream lines(text);
  std::string line;
  inferkit::Index n = 0;
  while (std::getline(lines, line)) {
    std::optional<llama2c::TraceRequest> r;
    std::string why;
    if (!fuzz::ok([&] { r = llama2c::parse_trace_line(line, ++n, opt); }, &why)) {
      FUZZ_CHECK(why.rfind("trace line " + std::to_string(n) + ",", 0) == 0);
      all_ok = false;
      continue;
    }
    if (!r) continue;
    FUZZ_CHECK(!r->prompt.empty() && r->prompt.size() <= opt.max_prompt_tokens);
    for (const auto t : r->prompt) FUZZ_CHECK(t >= 0 && (opt.vocab_size == 0 || t < opt.vocab_size));
    for (const auto t : r->eos_token_ids) FUZZ_CHECK(t >= 0 && (opt.vocab_size == 0 || t < opt.vocab_size));
    FUZZ_CHECK(r->max_new_tokens >= 1 && std::isfinite(r->arrival_ms) && r->arrival_ms >= 0);
    FUZZ_CHECK(r->line == n);
    if (!fuzz::ok([&] { llama2c::check_request_fits(*r, n - 1, 1280.0, 16.0 * (1 << 30)); }, &why))
      FUZZ_CHECK(why.rfind("trace line " + std::to_string(n) + ", field \"max_new_tokens\": ", 0) == 0);
    (void)llama2c::make_chain(r->sampling);
    if (r->sampling.grammar) check_grammar(*r, data[size - 1]);
    const auto again = llama2c::parse_trace_line(to_line(*r), 1, opt);
    FUZZ_CHECK(again && same(*again, *r));
    by_line.push_back(std::move(*r));
  }
  std::istringstream whole(text);
  std::vector<llama2c::TraceRequest> all;
  const bool whole_ok = fuzz::ok([&] { all = llama2c::parse_trace(whole, opt); });
  FUZZ_CHECK(whole_ok == all_ok);
  if (whole_ok) {
    FUZZ_CHECK(all.size() == by_line.size());
    for (std::size_t i = 0; i < all.size(); ++i) FUZZ_CHECK(same(all[i], by_line[i]) && all[i].line == by_line[i].line);
  }
  return 0;
}
