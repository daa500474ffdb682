// Fuzzes the GBNF parser (grammar/gbnf.hpp) and the byte matcher on what it parses: arbitrary text
// either parses or throws std::invalid_argument (line and column in the message); a parsed
// grammar's matcher accepts the rest of the input byte by byte without crashing, rejected bytes
// change nothing, and forced bytes are accepted one by one. A grammar too ambiguous for the stack
// limit throws std::length_error (documented in byte_matcher.hpp).

#include <stdexcept>
#include <string>

#include "fuzz_util.hpp"
#include "inferkit/grammar/byte_matcher.hpp"
#include "inferkit/grammar/gbnf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string text = in.ConsumeRandomLengthString(2048);
  const std::string bytes = in.ConsumeRemainingBytesAsString();
  std::string what;
  fuzz::ok(
      [&] {
        const inferkit::Grammar g = inferkit::parse_gbnf(text);
        try {
          inferkit::ByteMatcher m(g);
          for (const char c : bytes) {
            const inferkit::ByteMatcher before = m;
            if (!m.accept_byte(static_cast<std::uint8_t>(c))) FUZZ_CHECK(m == before);
          }
          inferkit::ByteMatcher f = m;
          for (const char c : m.forced_bytes(64)) FUZZ_CHECK(f.accept_byte(static_cast<std::uint8_t>(c)));
        } catch (const std::length_error&) {}
      },
      &what);
  if (!what.empty()) FUZZ_CHECK(what.find("inferkit:") != std::string::npos);
  return 0;
}
