// Constrained decoding in the runner (examples/llama2c/grammar_flags.hpp): generate --grammar and
// --json-schema, and per-request grammars in serve traces. The outputs are judged by checks written
// here from the grammar's text (the ids of an enum grammar, a std::regex) or by Debian's
// python3-jsonschema (an independent JSON Schema validator), never by inferkit's matcher.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli_util.hpp"
#include "llama2c/tokenizer.hpp"

using cli_test::run_cli;
using cli_test::shell;
using cli_test::temp_path;

namespace {

using TokenId = inferkit::TokenId;

// The files a test case wrote, removed when it ends (ctest runs cases in separate processes).
struct TempFiles {
  std::vector<std::string> paths;
  ~TempFiles() {
    for (const auto& p : paths) std::filesystem::remove(p);
  }
};
TempFiles& temp_files() {
  static TempFiles files;
  return files;
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  temp_files().paths.push_back(path);
  return path;
}

// The runner's stdout alone (stderr, the timing lines, dropped) and its exit status.
std::pair<int, std::string> run_stdout(const std::string& args) {
  return shell(std::string(INFERKIT_LLAMA2C_BINARY) + " " + args + " 2>/dev/null");
}

std::vector<TokenId> ids_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<TokenId> ids;
  for (TokenId t; in >> t;) ids.push_back(t);
  return ids;
}

// The --print-ids line of generate's stdout: the line of the most ids (the text line of the
// vocabulary's " 12"-style pieces parses as ids too, but lacks EOS, which has no text).
std::vector<TokenId> printed_ids(const std::string& text) {
  std::istringstream in(text);
  std::vector<TokenId> best;
  for (std::string line; std::getline(in, line);)
    if (auto ids = ids_of(line); ids.size() > best.size()) best = std::move(ids);
  return best;
}

// python3-jsonschema's verdict on the JSON text in file `instance` against the schema in file
// `schema`: "valid" or the validator's message.
std::string judge(const std::string& schema, const std::string& instance) {
  const std::string script = write("judge.py",
                                   "import json, sys, jsonschema\n"
                                   "schema = json.load(open(sys.argv[1]))\n"
                                   "try:\n"
                                   "    v = json.loads(open(sys.argv[2], encoding='utf-8').read())\n"
                                   "    jsonschema.validate(v, schema)\n"
                                   "    print('valid')\n"
                                   "except Exception as e:\n"
                                   "    print('invalid:', str(e).splitlines()[0])\n");
  const auto [status, out] = shell("python3 " + script + " " + schema + " " + instance);
  REQUIRE(status == 0);
  return out.substr(0, out.find('\n'));
}

const char* kPersonSchema = R"({"type": "object",
 "properties": {
   "name": {"type": "string", "maxLength": 8},
   "age": {"type": "integer", "minimum": 0, "maximum": 120},
   "color": {"enum": ["red", "green", "blue"]},
   "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,5}$"}, "minItems": 1, "maxItems": 3},
   "ok": {"type": "boolean"},
   "score": {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": -5, "maximum": 5}]}
 },
 "required": ["name", "age", "color", "tags", "ok"],
 "additionalProperties": false})";

}  // namespace

TEST_CASE("generate --grammar: stories260K.gguf under an enum grammar emits its ids, then EOS, in every mode",
          "[example][grammar]") {
  const char* gguf = std::getenv("INFERKIT_TEST_GGUF");
  if (!gguf) {
    WARN("INFERKIT_TEST_GGUF is not set: skipped");
    return;
  }
  // The placeholder vocabulary's pieces are " 3" ... " 511" (ids 1 and 2 are BOS / EOS): " 12",
  // " 17" and " 25" are reachable only as whole tokens (no token is " 1" or " 2").
  const std::string g = write("enum.gbnf",
                              "# one to three answers from a list\n"
                              "root ::= item item? item?\n"
                              "item ::= \" 12\" | \" 17\" | \" 25\"\n");
  const std::set<TokenId> allowed{12, 17, 25};
  const std::vector<std::string> modes = {
      "",
      "--temperature 1.5 --top-k 40 --top-p 0.9 --min-p 0.01 --repeat-penalty 1.3",
      "--temperature 2 --typical 0.9 --frequency-penalty 0.5 --presence-penalty 0.5 --xtc-threshold 0.1 "
      "--xtc-probability 0.5",
      "--temperature 1.5 --dry-multiplier 0.8 --min-new-tokens 2 --sampler-order llama.cpp",
      "--temperature 0",
      "--draft-layers 2 --draft-k 3 --temperature 1.5",
      "--draft-layers 1 --temperature 0"};
  int lengths[4] = {0, 0, 0, 0};
  for (const auto& mode : modes)
    for (int seed = 1; seed <= 6; ++seed) {
      const std::string args = std::string("generate --model ") + gguf + " --grammar " + g +
                               " --steps 10 --print-ids " + mode + " --seed " + std::to_string(seed);
      const auto [status, out] = run_stdout(args);
      INFO(args << "\n" << out);
      REQUIRE(status == 0);
      const auto ids = printed_ids(out);
      REQUIRE(ids.size() >= 2);
      REQUIRE(ids.size() <= 4);
      CHECK(ids.back() == 2);  // EOS ends the output, and nothing follows it
      for (std::size_t i = 0; i + 1 < ids.size(); ++i) CHECK(allowed.count(ids[i]) == 1);
      if (mode.find("--min-new-tokens 2") != std::string::npos) CHECK(ids.size() >= 3);
      ++lengths[ids.size() - 1];
    }
  CHECK(lengths[1] + lengths[2] + lengths[3] == 42);
  CHECK(lengths[3] > 0);  // the third item is reached (EOS is not forced before the grammar ends)
  // Unconstrained, the same model does not stop after a few of these ids.
  const auto [us, free] = run_stdout(std::string("generate --model ") + gguf + " --steps 10 --print-ids --seed 1");
  REQUIRE(us == 0);
  CHECK(printed_ids(free).size() == 10);
}

TEST_CASE(
    "generate --json-schema: a random-weight model with a real vocabulary emits JSON that python3-jsonschema "
    "accepts",
    "[example][grammar]") {
  const char* dir = std::getenv("INFERKIT_TEST_VOCAB_DIR");
  if (!dir) {
    WARN("INFERKIT_TEST_VOCAB_DIR is not set: skipped");
    return;
  }
  const std::string gguf = temp_path("spm.gguf"), schema = write("person.json", kPersonSchema);
  REQUIRE(run_cli("make-random --dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 --vocab 32000 --seq-len 512 "
                  "--seed 9 --out " +
                  gguf + " --vocab-from " + std::string(dir) + "/ggml-vocab-llama-spm.gguf")
              .first == 0);
  const std::vector<std::string> modes = {"--temperature 1.3",
                                          "--temperature 2 --top-k 100 --top-p 0.95 --repeat-penalty 1.2",
                                          "--temperature 0",
                                          "--temperature 1 --mirostat 2",
                                          "--draft-layers 1 --draft-k 4 --temperature 1.5",
                                          "--prompt \"Answer:\" --temperature 1.5"};
  int run = 0;
  for (const auto& mode : modes)
    for (int seed = 1; seed <= 4; ++seed) {
      const std::string args = "generate --model " + gguf + " --json-schema " + schema + " --steps 400 " + mode +
                               " --seed " + std::to_string(seed);
      auto [status, out] = run_stdout(args);
      INFO(args << "\n" << out);
      REQUIRE(status == 0);
      if (mode.find("--prompt") != std::string::npos) {
        REQUIRE(out.rfind("Answer:", 0) == 0);  // the prompt's text is printed first
        out = out.substr(7);
      }
      CHECK(judge(schema, write("out" + std::to_string(run++) + ".json", out)) == "valid");
    }
  // The judge is not lenient: an instance breaking the schema is refused.
  CHECK(judge(schema, write("bad.json", R"({"name":"x","age":121,"color":"red","tags":["a"],"ok":true})")) != "valid");
  // Temperature 0 takes the grammar stage's greedy path (one masked argmax over the row); top-k 1
  // at temperature 1 reaches its token through the list of allowed ids and a truncation: the
  // same text.
  const std::string base = "generate --model " + gguf + " --json-schema " + schema + " --steps 400 --seed 3";
  const auto [gs, greedy] = run_stdout(base + " --temperature 0");
  const auto [ts, top1] = run_stdout(base + " --temperature 1 --top-k 1");
  REQUIRE(gs == 0);
  REQUIRE(ts == 0);
  CHECK(greedy == top1);
  std::filesystem::remove(gguf);
}

TEST_CASE("generate --json-schema on a llama2.c checkpoint with its tokenizer.bin (byte tokens and words)",
          "[example][grammar]") {
  const std::string model = cli_test::test_model();
  if (model.empty()) {
    WARN("INFERKIT_TEST_MODEL is not set: skipped");
    return;
  }
  // A 512-piece tokenizer in llama2.c's layout: <unk> <s> </s>, the 256 byte tokens, then words.
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    pieces.push_back(buf);
  }
  const char* words[] = {"{",     "}",   "\"", ":",  ",",  " ",  "red", "green", "blue", "\"color\"",
                         "\"n\"", "\":", "1",  "2",  "3",  "4",  "5",   "6",     "7",    "8",
                         "9",     "0",   "re", "gr", "bl", "ue", "een", "co",    "lor",  "\n"};
  for (const char* w : words) pieces.push_back(w);
  for (int i = 0; static_cast<int>(pieces.size()) < 512; ++i) {
    std::string w(1, 'w');  // (not "w" + to_string: GCC 12's -Wrestrict false positive there)
    pieces.push_back(w.append(std::to_string(i)));
  }
  const std::string tok = temp_path("tokenizer.bin");
  llama2c::Tokenizer::save(tok, pieces, std::vector<float>(pieces.size(), 0.0f));
  const std::string schema = write("color.json", R"({"type": "object", "properties": {
    "color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer", "minimum": 1, "maximum": 99}},
    "required": ["color", "n"]})");
  for (int seed = 1; seed <= 5; ++seed) {
    const std::string args = "generate --model " + model + " --tokenizer " + tok + " --json-schema " + schema +
                             " --steps 200 --temperature 1.5 --seed " + std::to_string(seed);
    const auto [status, out] = run_stdout(args);
    INFO(args << "\n" << out);
    REQUIRE(status == 0);
    CHECK(judge(schema, write("color_out.json", out)) == "valid");
  }
  std::filesystem::remove(tok);
}

TEST_CASE("generate --grammar / --json-schema: bad files and modes are refused by name", "[example][grammar][errors]") {
  const char* gguf = std::getenv("INFERKIT_TEST_GGUF");
  if (!gguf) {
    WARN("INFERKIT_TEST_GGUF is not set: skipped");
    return;
  }
  const std::string m = std::string("generate --model ") + gguf + " --steps 4 ";
  // A GBNF error on line 3, column 25 (the ']' where the group's ')' belongs).
  const std::string bad = write("bad.gbnf", "# comment\nroot ::= item+\nitem ::= (\" 12\" | \" 17\" ]\n");
  auto [s1, e1] = run_cli(m + "--grammar " + bad);
  CHECK(s1 != 0);
  CHECK_THAT(e1, Catch::Contains("--grammar file '" + bad + "'") && Catch::Contains("line 3, column 25"));
  const std::string undefined = write("undefined.gbnf", "root ::= item\n");
  CHECK_THAT(run_cli(m + "--grammar " + undefined).second, Catch::Contains("item"));
  // JSON errors name the line and column; an unsupported keyword is named with its JSON pointer.
  const std::string bad_json = write("bad.json", "{\"type\": \"object\",\n \"properties\": {\"a\": }}\n");
  CHECK_THAT(run_cli(m + "--json-schema " + bad_json).second,
             Catch::Contains("--json-schema file '" + bad_json + "'") && Catch::Contains("line 2, column"));
  const std::string keyword = write("keyword.json", R"({"type": "object", "properties": {"a": {"type": "string",
    "contentEncoding": "base64"}}})");
  CHECK_THAT(run_cli(m + "--json-schema " + keyword).second,
             Catch::Contains("contentEncoding") && Catch::Contains("/properties/a"));
  CHECK_THAT(run_cli(m + "--grammar /nonexistent/g.gbnf").second,
             Catch::Contains("cannot open --grammar file '/nonexistent/g.gbnf'"));
  // Modes that do not sample through the chain, both flags, and a model without token text.
  const std::string ok = write("ok.gbnf", "root ::= \" 12\"\n");
  CHECK_THAT(run_cli(m + "--grammar " + ok + " --beams 2").second,
             Catch::Contains("--grammar") && Catch::Contains("--beams"));
  CHECK_THAT(run_cli(m + "--json-schema " + bad_json + " --grammar " + ok).second,
             Catch::Contains("give --grammar or --json-schema, not both"));
  CHECK_THAT(run_cli(m + "--grammar " + ok + " --draft-layers 2 --mirostat 2").second, Catch::Contains("--mirostat"));
  const std::string model = cli_test::test_model();
  if (!model.empty())
    CHECK_THAT(run_cli("generate --model " + model + " --grammar " + ok).second,
               Catch::Contains("need the model's token text"));
}

TEST_CASE("serve: a trace mixing grammar, json_schema and unconstrained requests; each constrained output is valid",
          "[example][grammar][serve]") {
  const char* dir = std::getenv("INFERKIT_TEST_VOCAB_DIR");
  if (!dir) {
    WARN("INFERKIT_TEST_VOCAB_DIR is not set: skipped");
    return;
  }
  const std::string gguf = temp_path("serve_spm.gguf"), schema = write("serve_person.json", kPersonSchema);
  REQUIRE(run_cli("make-random --dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 --vocab 32000 --seq-len 512 "
                  "--seed 11 --out " +
                  gguf + " --vocab-from " + std::string(dir) + "/ggml-vocab-llama-spm.gguf")
              .first == 0);
  std::string inline_schema = kPersonSchema;  // one line of the trace
  for (char& c : inline_schema)
    if (c == '\n') c = ' ';
  const std::string yes_no = R"(root ::= (\"yes\" | \"no\") (\", \" (\"yes\" | \"no\")){0,3})";
  enum class Kind { kFree, kSchema, kYesNo };
  const std::vector<Kind> kinds = {Kind::kSchema, Kind::kFree,  Kind::kYesNo,  Kind::kSchema,
                                   Kind::kFree,   Kind::kYesNo, Kind::kSchema, Kind::kSchema};
  std::string trace;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    trace += "{\"arrival_ms\": " + std::to_string(i) + ", \"prompt_ids\": [1, " + std::to_string(100 + i) +
             "], \"temperature\": 1.4, \"seed\": " + std::to_string(i + 1);
    if (kinds[i] == Kind::kFree) trace += ", \"max_new_tokens\": 12}\n";
    if (kinds[i] == Kind::kYesNo) trace += ", \"max_new_tokens\": 60, \"grammar\": \"" + yes_no + "\"}\n";
    if (kinds[i] == Kind::kSchema) {  // as an object, or (request 3) as a string holding one
      trace += ", \"max_new_tokens\": 400, \"json_schema\": ";
      if (i == 3)
        trace.append(1, '"').append(std::regex_replace(inline_schema, std::regex("\""), "\\\"")).append(1, '"');
      else
        trace += inline_schema;
      trace += "}\n";
    }
  }
  const std::string trace_file = write("trace.jsonl", trace), results = write("results.jsonl", "");
  const auto [status, log] = run_cli("serve --model " + gguf + " --trace " + trace_file + " --out " + results +
                                     " --virtual-time 1 --max-seqs 8 --page-size 16");
  INFO(trace << log);
  REQUIRE(status == 0);
  std::ifstream in(results);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == kinds.size());
  const std::regex ids_field(R"re("output_ids": \[([0-9, ]*)\])re"),
      reason_field(R"re("finish_reason": "([a-z_]+)")re");
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    INFO("request " << i << ": " << lines[i]);
    std::smatch ids_m, reason_m;
    REQUIRE(std::regex_search(lines[i], ids_m, ids_field));
    REQUIRE(std::regex_search(lines[i], reason_m, reason_field));
    std::string ids = ids_m[1].str();
    for (char& c : ids)
      if (c == ',') c = ' ';
    const auto out = ids_of(ids);
    if (kinds[i] == Kind::kFree) {
      CHECK(out.size() == 12);
      CHECK(reason_m[1].str() == "length");
      continue;
    }
    CHECK(reason_m[1].str() == "eos");  // a complete output, ended by the vocabulary's EOS (id 2)
    REQUIRE(!out.empty());
    CHECK(out.back() == 2);
    const auto [ds, text] = run_stdout("tokenize --model " + gguf + " --ids \"" + ids + "\"");
    REQUIRE(ds == 0);
    const std::string body = text.substr(0, text.size() - 1);  // tokenize ends the text with a newline
    INFO("text: " << body);
    if (kinds[i] == Kind::kYesNo)
      CHECK(std::regex_match(body, std::regex("(yes|no)(, (yes|no)){0,3}")));
    else
      CHECK(judge(schema, write("serve_out" + std::to_string(i) + ".json", body)) == "valid");
  }
  // The trace's grammar errors name the line and field.
  const std::string bad = write("bad_trace.jsonl",
                                "{\"prompt_ids\": [1], \"max_new_tokens\": 4}\n"
                                "{\"prompt_ids\": [1], \"max_new_tokens\": 4, \"grammar\": "
                                "\"root ::= (\\\"a\\\"\"}\n");
  CHECK_THAT(run_cli("serve --model " + gguf + " --trace " + bad).second,
             Catch::Contains("trace line 2, field \"grammar\"") && Catch::Contains("GBNF at line 1, column"));
  const std::string both = write("both_trace.jsonl",
                                 "{\"prompt_ids\": [1], \"max_new_tokens\": 4, \"grammar\": "
                                 "\"root ::= \\\"a\\\"\", \"json_schema\": {\"type\": \"null\"}}\n");
  CHECK_THAT(run_cli("serve --model " + gguf + " --trace " + both).second,
             Catch::Contains("trace line 1, field \"json_schema\"") && Catch::Contains("not both"));
  const std::string keyword = write("keyword_trace.jsonl",
                                    "{\"prompt_ids\": [1], \"max_new_tokens\": 4, "
                                    "\"json_schema\": {\"type\": \"string\", \"format\": "
                                    "\"hostname\"}}\n");
  CHECK_THAT(run_cli("serve --model " + gguf + " --trace " + keyword).second,
             Catch::Contains("trace line 1, field \"json_schema\"") && Catch::Contains("format"));
  const std::string model = cli_test::test_model();
  if (!model.empty())  // a llama2.c checkpoint without --tokenizer has no token text
    CHECK_THAT(run_cli("serve --model " + model + " --trace " + trace_file).second,
               Catch::Contains("trace line 1, field \"json_schema\"") && Catch::Contains("token text"));
  std::filesystem::remove(gguf);
}
