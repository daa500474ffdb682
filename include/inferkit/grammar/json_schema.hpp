#pragma once
// JSON Schema to grammar: GBNF text (then a Grammar) whose sentences are JSON texts valid against
// the schema. Supported (OpenAI's strict structured-output subset and more): type (one or a
// list), properties (in the order written) with required and additionalProperties (false, or
// absent: no other keys are written; true or a schema only without properties: a map), items,
// minItems, maxItems, enum, const, anyOf, $defs / definitions and $ref ("#", "#/$defs/x",
// "#/definitions/x", recursion included), string pattern (grammar/regex.hpp; unanchored ends
// match anything, as the standard says), format date / time / date-time / uuid, minLength /
// maxLength, integer minimum / maximum / exclusiveMinimum / exclusiveMaximum, number minimum /
// maximum when integral. Annotations (title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly, writeOnly) are ignored; any other keyword, and a supported one
// in a combination this converter cannot express, is an error naming the keyword and its JSON
// pointer: never silently ignored (a grammar that fails open would let invalid output through).
//
//   const inferkit::Grammar g = inferkit::json_schema_grammar(R"({"type": "object",
//       "properties": {"name": {"type": "string"}}, "required": ["name"]})");
//
// Output form (the whitespace policy): the grammar writes what json.gbnf writes between tokens:
// after { [ , : and before } ] nothing, one space, or a newline and up to 20 spaces or tabs
// (`ws`); no whitespace before the first or after the last byte. Strings escape " \ and
// control characters (\uXXXX or the short forms); with pattern or format, other characters are
// written as themselves. Enum and const values are written compactly (JsonValue::dump). Numbers
// with bounds have no exponent. Every output is valid; valid texts outside this form are not
// produced (e.g. keys not in properties, "\/" escapes in patterned strings).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/grammar/gbnf.hpp"
#include "inferkit/grammar/grammar.hpp"
#include "inferkit/grammar/json_value.hpp"
#include "inferkit/grammar/regex.hpp"

namespace inferkit {

/// Largest |bound| of a numeric minimum / maximum the converter writes as digits.
inline constexpr double kMaxJsonSchemaBound = 1e15;

namespace detail {

/// GBNF for the canonical decimal integers in [lo, hi] (digit strings, no sign); hi < 0 = no bound.
inline std::string nonnegative_range(long long lo, long long hi) {
  auto digits = [](long long v) { return static_cast<int>(std::to_string(v).size()); };
  // Same-length digit strings in [a, b] (lexicographic = numeric).
  auto fixed = [](auto&& self, const std::string& a, const std::string& b) -> std::string {
    if (a.empty()) return {};
    if (a == b) return gbnf_quote(a);
    if (a[0] == b[0]) {
      const std::string rest = self(self, a.substr(1), b.substr(1));
      return gbnf_quote(a.substr(0, 1)) + (rest.empty() ? "" : " " + rest);
    }
    const std::size_t n = a.size() - 1;
    const bool a_zeros = a.find_first_not_of('0', 1) == std::string::npos;
    const bool b_nines = b.find_first_not_of('9', 1) == std::string::npos;
    std::vector<std::string> parts;
    char from = a[0], to = b[0];
    auto any = [&](std::size_t k) {
      return k == 0 ? std::string() : " [0-9]" + (k > 1 ? "{" + std::to_string(k) + "}" : std::string());
    };
    if (!a_zeros) {
      parts.push_back(gbnf_quote(a.substr(0, 1)) + " (" + self(self, a.substr(1), std::string(n, '9')) + ")");
      ++from;
    }
    if (!b_nines) --to;
    if (from <= to) parts.push_back("[" + std::string(1, from) + "-" + std::string(1, to) + "]" + any(n));
    if (!b_nines)
      parts.push_back(gbnf_quote(b.substr(0, 1)) + " (" + self(self, std::string(n, '0'), b.substr(1)) + ")");
    std::string out = "(";
    for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
    return out + ")";
  };
  std::vector<std::string> alts;
  const int dl = digits(lo), dh = hi < 0 ? dl : digits(hi);
  for (int n = dl; n <= dh; ++n) {
    const long long a = n == dl ? lo : static_cast<long long>(std::pow(10.0, n - 1));
    const long long b = (hi >= 0 && n == dh) ? hi : static_cast<long long>(std::pow(10.0, n)) - 1;
    alts.push_back(fixed(fixed, std::to_string(a), std::to_string(b)));
  }
  if (hi < 0) alts.push_back("[1-9] [0-9]{" + std::to_string(dl) + ",}");
  std::string out = "(";
  for (std::size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

/// The schema walker: one rule per schema node, helper rules on first use.
class SchemaConverter {
 public:
  explicit SchemaConverter(const JsonValue& root) : root_(root) {}

  std::string run() {
    const std::string top = visit(root_, "");
    std::string out = "root ::= " + top + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] static void unsupported(std::string_view keyword, const std::string& pointer, std::string_view why) {
    throw_invalid_argument(
        "JSON Schema keyword '" + std::string(keyword) + "' at '" + (pointer.empty() ? "#" : "#" + pointer) + "'",
        "unsupported", why);
  }

  std::string helper(const std::string& name) {
    if (rules_.count(name)) return name;
    static const std::map<std::string, std::string> kHelpers = {
        {"ws", R"(| " " | "\n" [ \t]{0,20})"},
        {"jchar", R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
        {"jchar-bmp",
         R"([^"\\\x00-\x1F] | "\\" ["\\/bfnrt] | "\\u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))"},
        {"string", R"("\"" jchar* "\"")"},
        {"number", R"("-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?)"},
        {"integer", R"("-"? ("0" | [1-9] [0-9]*))"},
        {"boolean", R"("true" | "false")"},
        {"null", R"("null")"},
        {"value", R"(object | array | string | number | boolean | null)"},
        {"object", R"("{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}")"},
        {"array", R"("[" ws (value ws ("," ws value ws)*)? "]")"},
        {"d2", R"([0-9] [0-9])"},
        {"date",
         R"([0-9]{4} "-" ("0" [13578] "-" day31 | "1" [02] "-" day31 | "0" [469] "-" day30 | "11" "-" day30 | "02" "-" day28))"},
        {"day31", R"("0" [1-9] | [12] [0-9] | "3" [01])"},
        {"day30", R"("0" [1-9] | [12] [0-9] | "30")"},
        {"day28", R"("0" [1-9] | "1" [0-9] | "2" [0-8])"},
        {"time",
         R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]+)? ("Z" | "z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
        {"hex4", R"([0-9a-fA-F]{4})"},
        {"uuid", R"(hex4 hex4 "-" hex4 "-" hex4 "-" hex4 "-" hex4 hex4 hex4)"},
    };
    const std::string& body = kHelpers.at(name);
    rules_[name] = body;
    // Helpers used by this helper.
    for (const char* dep : {"ws", "jchar", "string", "number", "boolean", "null", "value", "object", "array", "day31",
                            "day30", "day28", "hex4", "date", "time"}) {
      const std::string d = dep;
      if (d == name || rules_.count(d)) continue;
      std::size_t at = body.find(d);
      while (at != std::string::npos) {
        const bool left_ok = at == 0 || !(std::isalnum(static_cast<unsigned char>(body[at - 1])) ||
                                          body[at - 1] == '-' || body[at - 1] == '"');
        const std::size_t e = at + d.size();
        const bool right_ok = e >= body.size() ||
                              !(std::isalnum(static_cast<unsigned char>(body[e])) || body[e] == '-' || body[e] == '"');
        if (left_ok && right_ok) {
          helper(d);
          break;
        }
        at = body.find(d, at + 1);
      }
    }
    return name;
  }

  std::string fresh(std::string body) {
    const std::string name = "n" + std::to_string(counter_++);
    rules_[name] = std::move(body);
    return name;
  }

  const JsonValue& resolve(const std::string& ref, const std::string& pointer) {
    if (ref == "#") return root_;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (ref.rfind(p, 0) != 0) continue;
      const JsonValue* defs = root_.find(p.substr(2, p.size() - 3));
      const JsonValue* target = defs ? defs->find(ref.substr(p.size())) : nullptr;
      if (!target)
        unsupported("$ref", pointer, "must name a schema under $defs or definitions (\"" + ref + "\" does not)");
      return *target;
    }
    unsupported("$ref", pointer, "must be \"#\", \"#/$defs/NAME\" or \"#/definitions/NAME\" (got \"" + ref + "\")");
  }

  static const std::set<std::string>& annotations() {
    static const std::set<std::string> k = {"title",    "description", "default",  "examples",
                                            "$schema",  "$id",         "$comment", "deprecated",
                                            "readOnly", "writeOnly",   "$defs",    "definitions"};
    return k;
  }
  static bool is_keyword_of(const std::string& k, const std::set<std::string>& s) { return s.count(k) != 0; }

  std::string visit(const JsonValue& s, const std::string& ptr) {
    if (s.kind == JsonValue::Kind::kBool) {
      if (!s.boolean) unsupported("false", ptr, "admits no instance");
      return helper("value");
    }
    if (s.kind != JsonValue::Kind::kObject) unsupported("(schema)", ptr, "must be an object or a boolean");
    static const std::set<std::string> kKnown = {"type",
                                                 "properties",
                                                 "required",
                                                 "additionalProperties",
                                                 "items",
                                                 "minItems",
                                                 "maxItems",
                                                 "enum",
                                                 "const",
                                                 "anyOf",
                                                 "$ref",
                                                 "pattern",
                                                 "format",
                                                 "minimum",
                                                 "maximum",
                                                 "exclusiveMinimum",
                                                 "exclusiveMaximum",
                                                 "minLength",
                                                 "maxLength"};
    std::vector<std::string> constraining;
    for (const std::string& k : s.keys) {
      if (annotations().count(k)) continue;
      if (!kKnown.count(k)) unsupported(k, ptr, "is not supported by the grammar converter");
      constraining.push_back(k);
    }
    auto only = [&](std::string_view main, std::initializer_list<const char*> also) {
      for (const std::string& k : constraining) {
        if (k == main) continue;
        bool ok = false;
        for (const char* a : also) ok = ok || k == a;
        if (!ok) unsupported(k, ptr, "cannot be combined with '" + std::string(main) + "' here");
      }
    };
    if (const JsonValue* ref = s.find("$ref")) {
      only("$ref", {});
      if (ref->kind != JsonValue::Kind::kString) unsupported("$ref", ptr, "must be a string");
      auto it = ref_rules_.find(ref->text);
      if (it != ref_rules_.end()) return it->second;
      const std::string name = "ref" + std::to_string(ref_rules_.size());
      ref_rules_[ref->text] = name;
      rules_[name] = "";  // placeholder: recursion refers to the name
      const JsonValue& target = resolve(ref->text, ptr + "/$ref");
      const std::string body = visit(target, ref->text.substr(1));
      rules_[name] = body;
      return name;
    }
    if (const JsonValue* any = s.find("anyOf")) {
      only("anyOf", {});
      if (any->kind != JsonValue::Kind::kArray || any->items.empty())
        unsupported("anyOf", ptr, "must be a non-empty array");
      std::string body;
      for (std::size_t i = 0; i < any->items.size(); ++i)
        body += (i ? " | " : "") + visit(any->items[i], ptr + "/anyOf/" + std::to_string(i));
      return fresh(body);
    }
    std::set<std::string> types;
    if (const JsonValue* t = s.find("type")) {
      auto add = [&](const JsonValue& v) {
        static const std::set<std::string> kTypes = {"string", "number", "integer", "boolean",
                                                     "null",   "object", "array"};
        if (v.kind != JsonValue::Kind::kString || !kTypes.count(v.text))
          unsupported("type", ptr, "must name JSON types");
        types.insert(v.text);
      };
      if (t->kind == JsonValue::Kind::kArray) {
        for (const auto& v : t->items) add(v);
      } else {
        add(*t);
      }
      if (types.count("integer") && types.count("number")) types.erase("integer");
    }
    if (const JsonValue* e = s.find("enum"); e || s.find("const")) {
      const bool is_enum = e != nullptr;
      only(is_enum ? "enum" : "const", {"type"});
      if (is_enum && (e->kind != JsonValue::Kind::kArray || e->items.empty()))
        unsupported("enum", ptr, "must be a non-empty array");
      std::vector<JsonValue> values = is_enum ? e->items : std::vector<JsonValue>{*s.find("const")};
      std::string body;
      for (const JsonValue& v : values) {
        if (!types.empty() && !types.count(type_of(v)) && !(type_of(v) == "integer" && types.count("number"))) continue;
        body += (body.empty() ? "" : " | ") + gbnf_quote(v.dump());
      }
      if (body.empty()) unsupported(is_enum ? "enum" : "const", ptr, "has no value of the given type");
      return fresh(body);
    }
    if (types.empty()) {  // inferred from the keywords present
      for (const std::string& k : constraining) {
        if (k == "properties" || k == "required" || k == "additionalProperties") types.insert("object");
        if (k == "items" || k == "minItems" || k == "maxItems") types.insert("array");
        if (k == "pattern" || k == "format" || k == "minLength" || k == "maxLength") types.insert("string");
        if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum")
          types.insert("number");
      }
      if (types.empty()) return helper("value");
      if (types.size() > 1) unsupported(constraining[0], ptr, "mixes keywords of several types without 'type'");
    }
    std::string body;
    for (const std::string& t : types) {
      std::string alt;
      if (t == "object") alt = object(s, ptr);
      if (t == "array") alt = array(s, ptr);
      if (t == "string") alt = string(s, ptr);
      if (t == "integer") alt = numeric(s, ptr, true);
      if (t == "number") alt = numeric(s, ptr, false);
      if (t == "boolean") alt = helper("boolean");
      if (t == "null") alt = helper("null");
      body += (body.empty() ? "" : " | ") + alt;
    }
    return fresh(body);
  }

  static std::string type_of(const JsonValue& v) {
    switch (v.kind) {
      case JsonValue::Kind::kNull:
        return "null";
      case JsonValue::Kind::kBool:
        return "boolean";
      case JsonValue::Kind::kNumber:
        return v.is_integer() ? "integer" : "number";
      case JsonValue::Kind::kString:
        return "string";
      case JsonValue::Kind::kArray:
        return "array";
      case JsonValue::Kind::kObject:
        return "object";
    }
    return "null";
  }

  static long long count_of(const JsonValue& s, const char* key, const std::string& ptr, long long fallback) {
    const JsonValue* v = s.find(key);
    if (!v) return fallback;
    if (!v->is_integer() || v->number < 0 || v->number > kMaxGbnfRepetition)
      unsupported(key, ptr, "must be an integer in [0, " + std::to_string(kMaxGbnfRepetition) + "]");
    return static_cast<long long>(v->number);
  }

  std::string object(const JsonValue& s, const std::string& ptr) {
    const JsonValue* props = s.find("properties");
    const JsonValue* extra = s.find("additionalProperties");
    const JsonValue* req = s.find("required");
    helper("ws");
    std::set<std::string> required;
    if (req) {
      if (req->kind != JsonValue::Kind::kArray) unsupported("required", ptr, "must be an array of strings");
      for (const auto& r : req->items) {
        if (r.kind != JsonValue::Kind::kString) unsupported("required", ptr, "must be an array of strings");
        if (!props || !props->find(r.text))
          unsupported("required", ptr, "names '" + r.text + "', which is not in properties (it could not be written)");
        required.insert(r.text);
      }
    }
    if (!props || props->keys.empty()) {
      if (!required.empty()) unsupported("required", ptr, "needs properties");
      if (extra && extra->kind == JsonValue::Kind::kBool && !extra->boolean) return fresh(R"("{" ws "}")");
      const std::string v = extra && extra->kind == JsonValue::Kind::kObject
                                ? visit(*extra, ptr + "/additionalProperties")
                                : helper("value");
      helper("string");
      return fresh("\"{\" ws (string ws \":\" ws " + v + " ws (\",\" ws string ws \":\" ws " + v + " ws)*)? \"}\"");
    }
    if (props->kind != JsonValue::Kind::kObject) unsupported("properties", ptr, "must be an object");
    if (extra && !(extra->kind == JsonValue::Kind::kBool && !extra->boolean))
      unsupported("additionalProperties", ptr, "must be false (or absent) when properties are given");
    // R_i_c: the members from i on, c = whether a comma comes before the next member written.
    const std::size_t n = props->keys.size();
    std::vector<std::string> kv(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& name = props->keys[i];
      const JsonValue& sub = props->values[i];
      std::string key;
      JsonValue::quote(name, key);
      kv[i] = gbnf_quote(key) + " ws \":\" ws " + visit(sub, ptr + "/properties/" + name) + " ws";
    }
    std::vector<std::string> names[2];
    const std::string base = "n" + std::to_string(counter_++) + "-m";
    for (std::size_t i = 0; i <= n; ++i)
      for (int c = 0; c < 2; ++c) names[c].push_back(base + std::to_string(i) + (c ? "c" : ""));
    for (std::size_t i = n + 1; i-- > 0;) {
      for (int c = 0; c < 2; ++c) {
        if (i == n) {
          rules_[names[c][i]] = "\"\"";
          continue;
        }
        const std::string sep = c ? "\",\" ws " : "";
        std::string body = sep + kv[i] + " " + names[1][i + 1];
        if (!required.count(props->keys[i])) body += " | " + names[c][i + 1];
        rules_[names[c][i]] = body;
      }
    }
    helper("ws");
    return fresh("\"{\" ws " + names[0][0] + " \"}\"");
  }

  std::string array(const JsonValue& s, const std::string& ptr) {
    const JsonValue* items = s.find("items");
    if (items && items->kind == JsonValue::Kind::kArray)
      unsupported("items", ptr, "must be one schema (tuples are not supported)");
    const std::string item = items ? visit(*items, ptr + "/items") : helper("value");
    const long long lo = count_of(s, "minItems", ptr, 0), hi = count_of(s, "maxItems", ptr, -1);
    if (hi >= 0 && hi < lo) unsupported("maxItems", ptr, "must be at least minItems");
    helper("ws");
    if (hi == 0) return fresh(R"("[" ws "]")");
    const std::string more = "(\",\" ws " + item + " ws)";
    const long long mlo = lo > 0 ? lo - 1 : 0, mhi = hi < 0 ? -1 : hi - 1;
    const std::string rep = "{" + std::to_string(mlo) + "," + (mhi < 0 ? std::string() : std::to_string(mhi)) + "}";
    const std::string list = item + " ws " + more + rep;
    return fresh("\"[\" ws " + (lo > 0 ? list : "(" + list + ")?") + " \"]\"");
  }

  std::string string(const JsonValue& s, const std::string& ptr) {
    const JsonValue* pattern = s.find("pattern");
    const JsonValue* format = s.find("format");
    const bool lengths = s.find("minLength") || s.find("maxLength");
    if (pattern && (format || lengths))
      unsupported(format ? "format" : "minLength", ptr, "cannot be combined with pattern");
    if (format && lengths) unsupported("minLength", ptr, "cannot be combined with format");
    if (pattern) {
      if (pattern->kind != JsonValue::Kind::kString) unsupported("pattern", ptr, "must be a string");
      RegexExpression r;
      try {
        r = regex_to_gbnf(pattern->text, RegexText::kJsonString);
      } catch (const std::invalid_argument& e) {
        unsupported("pattern", ptr, std::string("is outside the supported regex subset: ") + e.what());
      }
      helper("jchar");
      return fresh("\"\\\"\" " + std::string(r.anchored_start ? "" : "jchar* ") + "(" + r.gbnf + ")" +
                   (r.anchored_end ? "" : " jchar*") + " \"\\\"\"");
    }
    if (format) {
      if (format->kind != JsonValue::Kind::kString) unsupported("format", ptr, "must be a string");
      const std::string& f = format->text;
      if (f != "date" && f != "time" && f != "date-time" && f != "uuid")
        unsupported("format", ptr, "must be date, time, date-time or uuid (got \"" + f + "\")");
      if (f == "date-time") {
        helper("date");
        helper("time");
        return fresh("\"\\\"\" date [Tt] time \"\\\"\"");
      }
      return fresh("\"\\\"\" " + helper(f) + " \"\\\"\"");
    }
    if (lengths) {
      const long long lo = count_of(s, "minLength", ptr, 0), hi = count_of(s, "maxLength", ptr, -1);
      if (hi >= 0 && hi < lo) unsupported("maxLength", ptr, "must be at least minLength");
      return fresh("\"\\\"\" " + helper("jchar-bmp") + "{" + std::to_string(lo) + "," +
                   (hi < 0 ? "" : std::to_string(hi)) + "} \"\\\"\"");
    }
    return helper("string");
  }

  std::string numeric(const JsonValue& s, const std::string& ptr, bool integer) {
    const JsonValue* mn = s.find("minimum");
    const JsonValue* mx = s.find("maximum");
    const JsonValue* xmn = s.find("exclusiveMinimum");
    const JsonValue* xmx = s.find("exclusiveMaximum");
    if (!mn && !mx && !xmn && !xmx) return helper(integer ? "integer" : "number");
    auto bound = [&](const JsonValue* v, const char* key) {
      if (v->kind != JsonValue::Kind::kNumber || !(std::fabs(v->number) <= kMaxJsonSchemaBound))
        unsupported(key, ptr, "must be a number of magnitude at most 1e15");
      if (!integer && v->number != std::floor(v->number))
        unsupported(key, ptr, "must be an integer for type number (fractional bounds are not supported)");
      return v->number;
    };
    if (!integer && (xmn || xmx))
      unsupported(xmn ? "exclusiveMinimum" : "exclusiveMaximum", ptr, "is supported for integers only");
    bool has_lo = false, has_hi = false;
    long long lo = 0, hi = 0;
    auto tighten_lo = [&](long long v) { lo = has_lo ? std::max(lo, v) : v, has_lo = true; };
    auto tighten_hi = [&](long long v) { hi = has_hi ? std::min(hi, v) : v, has_hi = true; };
    if (mn) tighten_lo(static_cast<long long>(std::ceil(bound(mn, "minimum"))));
    if (mx) tighten_hi(static_cast<long long>(std::floor(bound(mx, "maximum"))));
    if (xmn) tighten_lo(static_cast<long long>(std::floor(bound(xmn, "exclusiveMinimum"))) + 1);
    if (xmx) tighten_hi(static_cast<long long>(std::ceil(bound(xmx, "exclusiveMaximum"))) - 1);
    if (has_lo && has_hi && hi < lo) unsupported("maximum", ptr, "leaves no value above the minimum");
    const std::string any_frac = integer ? "" : " (\".\" [0-9]+)?", zero_frac = integer ? "" : " (\".\" \"0\"+)?";
    std::vector<std::string> alts;
    // x >= 0 part: [L, H]
    if (!has_hi || hi >= 0) {
      const long long L = has_lo ? std::max(lo, 0LL) : 0;
      if (!has_hi) {
        alts.push_back(nonnegative_range(L, -1) + any_frac);
      } else {
        if (hi - 1 >= L && !integer) alts.push_back(nonnegative_range(L, hi - 1) + any_frac);
        alts.push_back((integer ? nonnegative_range(L, hi) : nonnegative_range(hi, hi)) + zero_frac);
      }
    }
    // x < 0 part: magnitudes [m0, M]
    if (!has_lo || lo < 0) {
      const long long m0 = has_hi && hi < 0 ? -hi : (integer ? 1 : 0);
      if (!has_lo) {
        alts.push_back("\"-\" " + nonnegative_range(m0, -1) + any_frac);
      } else {
        const long long M = -lo;
        if (M - 1 >= m0 && !integer) alts.push_back("\"-\" " + nonnegative_range(m0, M - 1) + any_frac);
        alts.push_back("\"-\" " + (integer ? nonnegative_range(m0, M) : nonnegative_range(M, M)) + zero_frac);
      }
    }
    std::string body;
    for (const auto& a : alts) body += (body.empty() ? "" : " | ") + std::string("(") + a + ")";
    return fresh(body);
  }

  const JsonValue& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  std::size_t counter_ = 0;
};

}  // namespace detail

/// The GBNF text of `schema` (file comment); std::invalid_argument naming keyword and JSON pointer.
inline std::string json_schema_to_gbnf(const JsonValue& schema) { return detail::SchemaConverter(schema).run(); }

/// The grammar of the schema in JSON text `schema` (parse errors name the byte offset).
inline Grammar json_schema_grammar(std::string_view schema) {
  return parse_gbnf(json_schema_to_gbnf(parse_json(schema)));
}

}  // namespace inferkit
