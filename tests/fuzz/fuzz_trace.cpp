// Fuzzes the llama2c serve example's request-trace parser (examples/llama2c/trace.hpp) with
// arbitrary bytes split into lines, with and without a vocabulary bound and a tokenizer.
// Invariants: a line either parses or is std::invalid_argument (naming the line); a parsed
// request is valid (non-empty prompt, ids in the vocabulary when bounded, max_new_tokens >= 1,
// a finite arrival >= 0, a sampler chain that builds, its line number); written back as a
// canonical JSON line it parses to the same request; parse_trace() over the whole input agrees
// with line-by-line; the KV bound serve() applies (check_request_fits, here with a model of
// 1280 bytes per token on a 16 GiB machine) either passes or names the line and max_new_tokens
// (corpus seed max_new_tokens_2e30: the line that once ended in a bare std::bad_alloc).

#include <cstdio>
#include <sstream>
#include <string>

#include "fuzz_util.hpp"
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
         ", \"seed\": " + std::to_string(r.sampling.seed) + ", \"eos_token_ids\": " + ids_json(r.eos_token_ids) + "}";
}

bool same(const llama2c::TraceRequest& a, const llama2c::TraceRequest& b) {
  const auto &p = a.sampling.params, &q = b.sampling.params;
  return a.arrival_ms == b.arrival_ms && a.prompt == b.prompt && a.max_new_tokens == b.max_new_tokens &&
         p.temperature == q.temperature && p.top_k == q.top_k && p.top_p == q.top_p && p.min_p == q.min_p &&
         p.repetition_penalty == q.repetition_penalty && a.sampling.repeat_last_n == b.sampling.repeat_last_n &&
         a.sampling.seed == b.sampling.seed && a.eos_token_ids == b.eos_token_ids;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  llama2c::TraceOptions opt;
  static constexpr int kVocab[] = {0, 0, 5, 300};
  opt.vocab_size = kVocab[data[0] & 3];
  if (data[0] & 4) opt.text = &tokenizer();
  opt.max_prompt_tokens = (data[0] & 8) ? 4 : std::size_t{1} << 20;
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
