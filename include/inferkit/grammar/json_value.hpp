#pragma once
// JsonValue: a parsed JSON document (RFC 8259) for the schema converter: objects keep their keys
// in the order written (a schema's property order is the output's), numbers keep their text.
// Errors name the byte offset (and its line and column) and what was expected; nesting deeper than
// kMaxJsonDepth is an error.
//
//   const inferkit::JsonValue v = inferkit::parse_json(R"({"type": "string"})");
//   const inferkit::JsonValue* t = v.find("type");   // t->string == "string"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/tokenizer/unicode.hpp"

namespace inferkit {

/// Deepest nesting of arrays and objects parse_json accepts.
inline constexpr std::size_t kMaxJsonDepth = 256;

/// One JSON value (file comment).
struct JsonValue {
  /// The JSON type.
  enum class Kind : std::uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;       ///< which type
  bool boolean = false;          ///< kBool: the value
  double number = 0;             ///< kNumber: the value as a double
  std::string text;              ///< kNumber: as written; kString: the decoded string (UTF-8)
  std::vector<JsonValue> items;  ///< kArray: the elements
  /// kObject: the keys as written (values[i] is keys[i]'s value). Two vectors, not pairs: a
  /// std::pair of an incomplete JsonValue is ill-formed (std::vector allows incomplete types).
  std::vector<std::string> keys;
  std::vector<JsonValue> values;  ///< kObject: the values, one per key

  /// The first member named `key` of an object, or nullptr (also for non-objects).
  const JsonValue* find(std::string_view key) const {
    if (kind != Kind::kObject) return nullptr;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &values[i];
    return nullptr;
  }
  /// Whether the number is an integer (no fraction or exponent in its text, or a whole value).
  bool is_integer() const { return kind == Kind::kNumber && text.find_first_of(".eE") == std::string::npos; }
  /// Compact JSON text (strings escaped as JSON requires, numbers as written).
  std::string dump() const {
    std::string out;
    dump_to(out);
    return out;
  }
  /// Appends dump() to `out`.
  void dump_to(std::string& out) const {
    switch (kind) {
      case Kind::kNull:
        out += "null";
        break;
      case Kind::kBool:
        out += boolean ? "true" : "false";
        break;
      case Kind::kNumber:
        out += text;
        break;
      case Kind::kString:
        quote(text, out);
        break;
      case Kind::kArray:
        out += '[';
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) out += ',';
          items[i].dump_to(out);
        }
        out += ']';
        break;
      case Kind::kObject:
        out += '{';
        for (std::size_t i = 0; i < keys.size(); ++i) {
          if (i) out += ',';
          quote(keys[i], out);
          out += ':';
          values[i].dump_to(out);
        }
        out += '}';
        break;
    }
  }
  /// Appends `s` as a JSON string literal (", \ and control characters escaped).
  static void quote(std::string_view s, std::string& out) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += '"';
    for (const char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (u < 0x20) {
        out += "\\u00";
        out += kHex[u >> 4];
        out += kHex[u & 15];
      } else {
        out += c;
      }
    }
    out += '"';
  }
};

namespace detail {

/// Recursive-descent JSON reader.
class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : s_(text) {}
  JsonValue run() {
    JsonValue v = value(0);
    space();
    if (i_ != s_.size()) fail("end of input");
    return v;
  }

 private:
  [[noreturn]] void fail(std::string_view expected) const {
    const std::string found = i_ < s_.size() ? "'" + std::string(1, s_[i_]) + "'" : "end of input";
    std::size_t line = 1, column = 1;  // 1-based, in bytes: an editor's position of the error
    for (std::size_t k = 0; k < i_ && k < s_.size(); ++k) {
      column = s_[k] == '\n' ? 1 : column + 1;
      line += s_[k] == '\n';
    }
    throw_invalid_argument("JSON at byte " + std::to_string(i_) + " (line " + std::to_string(line) + ", column " +
                               std::to_string(column) + ")",
                           found, "expected " + std::string(expected));
  }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool literal(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  JsonValue value(std::size_t depth) {
    if (depth > kMaxJsonDepth) fail("nesting at most " + std::to_string(kMaxJsonDepth) + " deep");
    space();
    JsonValue v;
    if (i_ >= s_.size()) fail("a value");
    const char c = s_[i_];
    if (c == '{') {
      v.kind = JsonValue::Kind::kObject;
      ++i_;
      space();
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return v;
      }
      while (true) {
        space();
        if (i_ >= s_.size() || s_[i_] != '"') fail("a string key");
        std::string k = string();
        space();
        if (i_ >= s_.size() || s_[i_] != ':') fail("':'");
        ++i_;
        v.keys.push_back(std::move(k));
        v.values.push_back(value(depth + 1));
        space();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == '}') {
          ++i_;
          return v;
        }
        fail("',' or '}'");
      }
    }
    if (c == '[') {
      v.kind = JsonValue::Kind::kArray;
      ++i_;
      space();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return v;
      }
      while (true) {
        v.items.push_back(value(depth + 1));
        space();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == ']') {
          ++i_;
          return v;
        }
        fail("',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = JsonValue::Kind::kString;
      v.text = string();
      return v;
    }
    if (literal("true")) {
      v.kind = JsonValue::Kind::kBool;
      v.boolean = true;
      return v;
    }
    if (literal("false")) {
      v.kind = JsonValue::Kind::kBool;
      return v;
    }
    if (literal("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail("a value");
  }
  JsonValue number() {
    const std::size_t start = i_;
    auto digits = [&] {
      const std::size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - d;
    };
    if (s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else if (digits() == 0) {
      fail("a digit");
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (digits() == 0) fail("a digit after '.'");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) fail("a digit in the exponent");
    }
    JsonValue v;
    v.kind = JsonValue::Kind::kNumber;
    v.text = std::string(s_.substr(start, i_ - start));
    v.number = std::strtod(v.text.c_str(), nullptr);
    return v;
  }
  unsigned hex4() {
    unsigned v = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
      if (i_ >= s_.size()) fail("4 hex digits");
      const char h = s_[i_];
      const int d = hex_digit_value(h);
      if (d < 0) fail("a hex digit");
      v = v * 16 + static_cast<unsigned>(d);
    }
    return v;
  }
  std::string string() {
    ++i_;  // opening quote
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("'\"' closing the string");
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return out;
      }
      if (c < 0x20) fail("no control character in a string");
      if (c == '\\') {
        ++i_;
        if (i_ >= s_.size()) fail("an escape");
        const char e = s_[i_++];
        switch (e) {
          case '"':
          case '\\':
          case '/':
            out += e;
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'n':
            out += '\n';
            break;
          case 'r':
            out += '\r';
            break;
          case 't':
            out += '\t';
            break;
          case 'u': {
            unsigned cp = hex4();
            if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(i_, 2) == "\\u") {
              i_ += 2;
              const unsigned lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) fail("a low surrogate");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
              fail("a surrogate pair");
            }
            utf8_append(out, cp);
            break;
          }
          default:
            --i_;
            fail("an escape \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\u");
        }
        continue;
      }
      const Utf8Char u = utf8_decode(s_, i_);
      if (!u.valid) fail("well-formed UTF-8");
      out.append(s_.substr(i_, u.length));
      i_ += u.length;
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace detail

/// Parses JSON `text` (file comment); std::invalid_argument naming the byte offset on error.
inline JsonValue parse_json(std::string_view text) { return detail::JsonParser(text).run(); }

}  // namespace inferkit
