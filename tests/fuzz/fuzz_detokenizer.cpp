// Fuzzes the streaming detokenizer (tokenizer/detokenizer.hpp) over a vocabulary of the 256 byte
// tokens, control tokens and pieces from the input, fed an arbitrary id stream (ids outside the
// vocabulary included).
// Invariants: an id outside the vocabulary throws std::out_of_range and changes nothing; held() is
// always the start of a character that could still complete (0..3 bytes) and, when nothing is
// held, the stream so far ends with no such start; the chunks and flush() joined are the tokens' bytes joined (the
// leading space of the first token with bytes dropped when the option says so), which is Tokenizer::decode's result.

#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/tokenizer/detokenizer.hpp"
#include "inferkit/tokenizer/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  std::vector<inferkit::TokenType> types = {inferkit::TokenType::kUnknown, inferkit::TokenType::kControl,
                                            inferkit::TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    pieces.emplace_back(buf);
    types.push_back(inferkit::TokenType::kByte);
  }
  std::set<std::string> seen(pieces.begin(), pieces.end());
  const int extra = in.ConsumeIntegralInRange<int>(0, 32);
  for (int i = 0; i < extra; ++i) {
    std::string p = in.ConsumeRandomLengthString(8);
    if (p.empty() || !seen.insert(p).second) continue;
    pieces.push_back(p);
    types.push_back(in.ConsumeBool() ? inferkit::TokenType::kNormal : inferkit::TokenType::kUserDefined);
  }
  inferkit::VocabularyConfig cfg;
  cfg.bos = 1;
  cfg.eos = 2;
  cfg.unk = 0;
  cfg.add_space_prefix = in.ConsumeBool();
  const inferkit::Tokenizer tok(inferkit::Vocabulary(pieces, {}, types, {}, cfg));
  const auto& v = tok.vocabulary();
  const inferkit::DecodeOptions opt{.render_special = in.ConsumeBool(), .strip_leading_space = in.ConsumeBool()};
  inferkit::Detokenizer d(v, opt);
  std::vector<inferkit::TokenId> ids;
  std::string joined, want;
  bool strip = *opt.strip_leading_space;
  while (in.remaining_bytes() > 0) {
    const auto id = static_cast<inferkit::TokenId>(in.ConsumeIntegralInRange<int>(-2, static_cast<int>(v.size()) + 2));
    if (id < 0 || static_cast<std::size_t>(id) >= v.size()) {
      const std::string before(d.held());
      bool threw = false;
      try {
        (void)d.push(id);
      } catch (const std::out_of_range&) {
        threw = true;
      }
      FUZZ_CHECK(threw && d.held() == before);
      continue;
    }
    ids.push_back(id);
    std::string_view b = opt.render_special ? v.control_text(id) : v.token_bytes(id);
    if (!b.empty()) {
      if (strip && b.front() == ' ') b.remove_prefix(1);
      strip = false;
      want.append(b);
    }
    const std::string chunk(d.push(id));
    const std::size_t h = d.held().size();
    FUZZ_CHECK(h <= 3 && inferkit::utf8_incomplete_tail(d.held()) == h);
    if (h == 0) FUZZ_CHECK(inferkit::utf8_incomplete_tail(joined + chunk) == 0);
    joined += chunk;
  }
  joined += d.flush();
  FUZZ_CHECK(joined == want);
  FUZZ_CHECK(joined == tok.decode(ids, opt));
  return 0;
}
