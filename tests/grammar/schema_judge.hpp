#pragma once
// The schema test data (data/schemas.json, written by data/make_schemas.py), the python3-jsonschema
// judge (data/judge.py) run over (schema, instances) pairs.

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "grammar_test_util.hpp"
#include "inferkit/grammar/json_value.hpp"
#include "inferkit/tokenizer/vocabulary.hpp"

namespace grammar_test {

using inferkit::JsonValue;

struct SchemaCase {
  std::string name;
  const JsonValue* schema;
  std::vector<std::string> valid, invalid;
};

inline const JsonValue& schema_file() {
  static const JsonValue v =
      inferkit::parse_json(grammar_test::read_file(std::string(INFERKIT_GRAMMAR_TEST_DATA) + "/schemas.json"));
  return v;
}

inline std::vector<SchemaCase> schema_cases() {
  std::vector<SchemaCase> out;
  for (const JsonValue& c : schema_file().items) {
    SchemaCase s{c.find("name")->text, c.find("schema"), {}, {}};
    for (const JsonValue& t : c.find("valid")->items) s.valid.push_back(t.text);
    for (const JsonValue& t : c.find("invalid")->items) s.invalid.push_back(t.text);
    out.push_back(std::move(s));
  }
  return out;
}

// Runs data/judge.py over (schema, instances) pairs: one string of '0' / '1' per schema.
inline std::vector<std::string> judge(const std::vector<std::pair<const JsonValue*, std::vector<std::string>>>& cases) {
  // In the temporary directory under the process id: ctest runs test cases two at a time, and the
  // working directory may be the source tree.
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string pid = std::to_string(::getpid());
  const std::string in = (tmp / ("inferkit_grammar_judge_in_" + pid + ".json")).string();
  const std::string out = (tmp / ("inferkit_grammar_judge_out_" + pid + ".txt")).string();
  {
    std::ofstream f(in, std::ios::binary);
    std::string text = "[";
    for (std::size_t i = 0; i < cases.size(); ++i) {
      text += (i ? ",{\"schema\":" : "{\"schema\":") + cases[i].first->dump() + ",\"instances\":[";
      for (std::size_t k = 0; k < cases[i].second.size(); ++k) {
        if (k) text += ',';
        JsonValue::quote(cases[i].second[k], text);
      }
      text += "]}";
    }
    f << text << "]";
  }
  const std::string cmd = "python3 " + std::string(INFERKIT_GRAMMAR_TEST_DATA) + "/judge.py " + in + " > " + out;
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream f(out);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line == "-" ? "" : line);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
  REQUIRE(lines.size() == cases.size());
  return lines;
}

}  // namespace grammar_test
