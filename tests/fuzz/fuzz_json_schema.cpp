// Fuzzes the JSON reader and the JSON Schema converter (grammar/json_value.hpp, json_schema.hpp):
// arbitrary text either converts or throws std::invalid_argument; converted GBNF always parses
// (a schema the converter accepts never yields a broken grammar) unless the schema recurses
// before writing anything (left recursion) or admits nothing; the grammar's matcher then walks
// its forced bytes.

#include <stdexcept>
#include <string>

#include "fuzz_util.hpp"
#include "inferkit/grammar/byte_matcher.hpp"
#include "inferkit/grammar/json_schema.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string gbnf;
  if (!fuzz::ok([&] { gbnf = inferkit::json_schema_to_gbnf(inferkit::parse_json(text)); })) return 0;
  std::string what;
  const bool parsed = fuzz::ok(
      [&] {
        const inferkit::Grammar g = inferkit::parse_gbnf(gbnf);
        try {
          inferkit::ByteMatcher m(g);
          FUZZ_CHECK(m.accept_bytes(m.forced_bytes(64)));
        } catch (const std::length_error&) {}
      },
      &what);
  if (!parsed) {
    if (what.find("left-recursive") == std::string::npos && what.find("derives no string") == std::string::npos)
      std::fprintf(stderr, "converted grammar failed to parse: %s\n%s\n", what.c_str(), gbnf.c_str());
    FUZZ_CHECK(what.find("left-recursive") != std::string::npos || what.find("derives no string") != std::string::npos);
  }
  return 0;
}
