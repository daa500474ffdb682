#pragma once
// Command-line flags declared once, in a table (flag_table.hpp), and parsed, checked and
// documented from it. A FlagSpec gives a flag's name, the subcommands that take it, its value
// type (switch, bounded integer, thread count, number, text, one of a list), its default, its
// help text and its --help section; a Rule ties flags together (needs, needs one of, excludes,
// go together, at most one of, exactly one of). parse_flags() rejects an unknown flag, a flag
// the subcommand does not take, a missing, malformed or out-of-range value and a broken rule,
// each with a message naming the flag and its value; help() prints the table.
//
//   const cli::Flags f = cli::parse_flags(table, "generate", argc, argv, 2);
//   const long long steps = f.integer("--steps");  // the given value, else the declared default
//
// A flag is read only under the name it is declared with, by the accessor of its type, in a
// subcommand that takes it: anything else is a std::logic_error (a bug in the runner, found
// the first time that code runs).

#include <algorithm>
#include <bit>
#include <climits>
#include <cstddef>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <inferkit/core/threading.hpp>

namespace llama2c::cli {

/// A set of subcommands: bit i is FlagTable::commands[i].
using Commands = unsigned;

/// What a flag's value is.
enum class ValueKind {
  kSwitch,   ///< no value: present or not
  kInteger,  ///< a whole integer in [min, max], or one of `choices` (words such as "none")
  kThreads,  ///< a thread count: 0 (OpenMP's default) or 1..inferkit::kMaxThreads
  kReal,     ///< a number (std::stof, read whole)
  kText,     ///< any text (a path, an id list, a range)
  kChoice,   ///< one of `choices`
};

/// Where a flag's default or help differs between the subcommands that take it (`--seed` is
/// the sampling seed of generate and the weight seed of make-random).
struct Variant {
  Commands commands = 0;                ///< the subcommands this variant is for
  std::string_view default_value = {};  ///< their default ("" = none)
  std::string_view help = {};           ///< their help ("" = the flag's)
};

/// One flag: everything the parser, the checks and --help know about it.
struct FlagSpec {
  std::string_view name;                       ///< "--steps"
  Commands commands = 0;                       ///< subcommands that take it
  ValueKind kind = ValueKind::kText;           ///< its value's type
  std::string_view metavar = {};               ///< the value in --help ("PATH"); "" = from the kind
  std::string_view default_value = {};         ///< "" = none: absent unless given (the help says what then)
  std::string_view help = {};                  ///< one sentence or two; --help wraps it
  std::vector<std::string_view> choices = {};  ///< kChoice: the values; kInteger: words accepted besides numbers
  long long min = LLONG_MIN, max = LLONG_MAX;  ///< kInteger: inclusive bounds
  Commands required = 0;                       ///< subcommands that need it
  std::string_view group = {};                 ///< its --help section
  std::vector<Variant> variants = {};          ///< per-subcommand defaults / help
};

/// How flags constrain each other. A condition is a flag name ("--beams": given) or a flag and
/// a value ("--cache=paged": given with that value).
enum class RuleKind {
  kNeeds,       ///< each given `flags` needs every one of `others`
  kNeedsOneOf,  ///< each given `flags` needs at least one of `others`
  kExcludes,    ///< each given `flags` excludes every one of `others`
  kTogether,    ///< `flags`: all or none
  kAtMostOne,   ///< `flags`: at most one given
  kExactlyOne,  ///< `flags`: exactly one given
};

/// A constraint between flags, checked after every flag parsed (in table order; the first
/// broken rule is reported). `message` replaces the generated one; in it {flag} is the
/// condition that triggered, {other} the one that broke the rule.
struct Rule {
  Commands commands = 0;                      ///< where it applies
  RuleKind kind = RuleKind::kNeeds;           ///< what it says
  std::vector<std::string_view> flags = {};   ///< the conditions it is about
  std::vector<std::string_view> others = {};  ///< what they need / exclude (kNeeds*, kExcludes)
  std::string_view message = {};              ///< "" = generated
};

/// A subcommand: its name and its --help text.
struct CommandSpec {
  std::string_view name;         ///< "generate"
  std::string_view summary;      ///< one line for the global --help
  std::string_view description;  ///< a paragraph for `<name> --help`
};

/// The whole command line: subcommands, flags, rules.
struct FlagTable {
  std::string_view program;           ///< the binary's name, for usage lines
  std::string_view description;       ///< the global --help's first paragraph
  std::vector<CommandSpec> commands;  ///< bit i of Commands = commands[i]
  std::vector<FlagSpec> flags;        ///< every flag, in --help order
  std::vector<Rule> rules;            ///< every constraint
  std::string_view epilogue = {};     ///< closing lines of every --help

  /// The bit of subcommand `name`, or 0.
  Commands command(std::string_view name) const {
    for (std::size_t i = 0; i < commands.size(); ++i)
      if (commands[i].name == name) return Commands{1} << i;
    return 0;
  }
  /// The names of the subcommands in `set`, as "generate, eval or serve".
  std::string names(Commands set, std::string_view last = " or ") const {
    std::vector<std::string_view> n;
    for (std::size_t i = 0; i < commands.size(); ++i)
      if (set & (Commands{1} << i)) n.push_back(commands[i].name);
    std::string out;
    for (std::size_t i = 0; i < n.size(); ++i)
      out += std::string(i == 0 ? "" : i + 1 == n.size() ? last : ", ") + std::string(n[i]);
    return out;
  }
  /// The declaration of `name`, or nullptr.
  const FlagSpec* find(std::string_view name) const {
    for (const FlagSpec& f : flags)
      if (f.name == name) return &f;
    return nullptr;
  }
};

namespace detail {

inline std::string join(const std::vector<std::string_view>& v, std::string_view sep, std::string_view last) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == v.size() ? last : sep) + std::string(v[i]);
  return out;
}

inline std::string bound_text(long long v) {
  if (v == INT_MAX) return "2^31-1";
  if (v == LLONG_MAX) return "2^63-1";
  return std::to_string(v);
}

// "an integer", "an integer >= 1", "an integer in [1, 7]", plus "or none".
inline std::string integer_rule(const FlagSpec& f) {
  std::string r = "an integer";
  if (f.min != LLONG_MIN && f.max != LLONG_MAX)
    r += " in [" + bound_text(f.min) + ", " + bound_text(f.max) + "]";
  else if (f.min != LLONG_MIN)
    r += " >= " + bound_text(f.min);
  else if (f.max != LLONG_MAX)
    r += " <= " + bound_text(f.max);
  for (std::string_view w : f.choices) r += std::string(" or ") + std::string(w);
  return r;
}

inline std::string value_text(const FlagSpec& f) {
  if (!f.metavar.empty()) return std::string(f.metavar);
  switch (f.kind) {
    case ValueKind::kSwitch:
      return "";
    case ValueKind::kInteger:
    case ValueKind::kThreads:
      return "N";
    case ValueKind::kReal:
      return "X";
    case ValueKind::kChoice:
      return join(f.choices, "|", "|");
    case ValueKind::kText:
      break;
  }
  return "TEXT";
}

// std::stoll / std::stof over the whole text, or nullopt.
inline std::optional<long long> whole_integer(const std::string& v) {
  try {
    std::size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {}
  return std::nullopt;
}
inline std::optional<float> whole_real(const std::string& v) {
  try {
    std::size_t used = 0;
    const float x = std::stof(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {}
  return std::nullopt;
}

// Throws std::invalid_argument unless `value` is a valid value of `f`.
inline void check_value(const FlagSpec& f, const std::string& value) {
  const auto bad = [&](const std::string& rule) {
    throw std::invalid_argument(std::string(f.name) + " = '" + value + "' is invalid: must be " + rule);
  };
  switch (f.kind) {
    case ValueKind::kSwitch:
    case ValueKind::kText:
      return;
    case ValueKind::kReal:
      if (!whole_real(value)) bad("a number");
      return;
    case ValueKind::kChoice:
      if (std::find(f.choices.begin(), f.choices.end(), value) == f.choices.end()) bad(join(f.choices, ", ", " or "));
      return;
    case ValueKind::kThreads: {
      const auto v = whole_integer(value);
      if (!v) bad("an integer");
      inferkit::require_thread_count(f.name, *v);
      return;
    }
    case ValueKind::kInteger: {
      if (std::find(f.choices.begin(), f.choices.end(), value) != f.choices.end()) return;
      const auto v = whole_integer(value);
      if (!v) bad(integer_rule(f));
      if (*v < f.min || *v > f.max)
        throw std::invalid_argument(std::string(f.name) + " = " + value + " is invalid: must be " + integer_rule(f));
      return;
    }
  }
}

}  // namespace detail

/// The flags of one command line, read through their declarations.
class Flags {
 public:
  Flags(const FlagTable& table, Commands command) : table_(&table), command_(command) {}

  /// Whether the flag was given.
  bool has(std::string_view name) const {
    spec(name);
    return given_.count(std::string(name)) != 0;
  }
  /// The given value, else the declared default: an integer (kInteger).
  long long integer(std::string_view name) const {
    const std::string v = value(name, ValueKind::kInteger);
    const auto x = detail::whole_integer(v);
    if (!x) throw std::logic_error("llama2c: " + std::string(name) + " = '" + v + "' read as an integer");
    return *x;
  }
  /// The given value, else the declared default: a thread count (kThreads).
  int threads(std::string_view name) const {
    return static_cast<int>(*detail::whole_integer(value(name, ValueKind::kThreads)));
  }
  /// The given value, else the declared default: a number (kReal).
  float real(std::string_view name) const { return *detail::whole_real(value(name, ValueKind::kReal)); }
  /// The given value, else the declared default: text, a choice, or an integer flag's word.
  std::string text(std::string_view name) const {
    const FlagSpec& f = spec(name);
    if (f.kind == ValueKind::kSwitch || f.kind == ValueKind::kReal || f.kind == ValueKind::kThreads)
      throw std::logic_error("llama2c: flag " + std::string(name) + " read as text");
    return value_or_default(f);
  }

  /// Sets a flag from the command line (parse_flags() calls it; value "" for a switch).
  void set(const std::string& name, const std::string& value) { given_[name] = value; }
  /// Whether a condition ("--flag" or "--flag=value") holds.
  bool holds(std::string_view condition) const {
    const auto eq = condition.find('=');
    const auto it = given_.find(std::string(condition.substr(0, eq)));
    return it != given_.end() && (eq == std::string_view::npos || it->second == condition.substr(eq + 1));
  }
  /// The subcommand's bit.
  Commands command() const { return command_; }
  /// The table the flags were declared in.
  const FlagTable& table() const { return *table_; }

 private:
  const FlagSpec& spec(std::string_view name) const {
    const FlagSpec* f = table_->find(name);
    if (!f) throw std::logic_error("llama2c: flag " + std::string(name) + " is not declared in the flag table");
    if (!(f->commands & command_))
      throw std::logic_error("llama2c: flag " + std::string(name) + " is read by " + table_->names(command_) +
                             ", which does not take it");
    return *f;
  }
  std::string value_or_default(const FlagSpec& f) const {
    if (const auto it = given_.find(std::string(f.name)); it != given_.end()) return it->second;
    std::string_view def = f.default_value;
    for (const Variant& v : f.variants)
      if (v.commands & command_) def = v.default_value;
    if (def.empty())
      throw std::logic_error("llama2c: flag " + std::string(f.name) + " has no default: check has() first");
    return std::string(def);
  }
  std::string value(std::string_view name, ValueKind kind) const {
    const FlagSpec& f = spec(name);
    if (f.kind != kind) throw std::logic_error("llama2c: flag " + std::string(name) + " read as the wrong type");
    return value_or_default(f);
  }

  const FlagTable* table_;
  Commands command_;
  std::map<std::string, std::string> given_;
};

namespace detail {

// The condition as the user wrote it: "--cache=paged" -> "--cache paged".
inline std::string shown(std::string_view condition) {
  std::string s(condition);
  if (const auto eq = s.find('='); eq != std::string::npos) s[eq] = ' ';
  return s;
}

inline std::string message(const Rule& r, std::string_view flag, std::string_view other, const std::string& generated) {
  if (r.message.empty()) return generated;
  std::string m(r.message);
  for (const auto& [key, text] :
       {std::pair<std::string, std::string>{"{flag}", shown(flag)}, {"{other}", shown(other)}})
    for (auto at = m.find(key); at != std::string::npos; at = m.find(key)) m.replace(at, key.size(), text);
  return m;
}

inline std::string shown_list(const std::vector<std::string_view>& v, std::string_view last) {
  std::vector<std::string> s;
  for (std::string_view c : v) s.push_back(shown(c));
  std::vector<std::string_view> views(s.begin(), s.end());
  return join(views, ", ", last);
}

// Throws std::invalid_argument for the first rule `f` breaks.
inline void check_rules(const FlagTable& t, const Flags& f) {
  for (const Rule& r : t.rules) {
    if (!(r.commands & f.command())) continue;
    const auto fail = [&](std::string_view flag, std::string_view other, const std::string& generated) {
      throw std::invalid_argument(message(r, flag, other, generated));
    };
    std::vector<std::string_view> given;
    for (std::string_view c : r.flags)
      if (f.holds(c)) given.push_back(c);
    switch (r.kind) {
      case RuleKind::kNeeds:
        for (std::string_view c : given)
          for (std::string_view o : r.others)
            if (!f.holds(o)) fail(c, o, shown(c) + " needs " + shown_list(r.others, " and "));
        break;
      case RuleKind::kNeedsOneOf:
        for (std::string_view c : given)
          if (std::none_of(r.others.begin(), r.others.end(), [&](std::string_view o) { return f.holds(o); }))
            fail(c, r.others.front(), shown(c) + " needs " + shown_list(r.others, " or "));
        break;
      case RuleKind::kExcludes:
        for (std::string_view c : given)
          for (std::string_view o : r.others)
            if (f.holds(o)) fail(c, o, shown(c) + " and " + shown(o) + " exclude each other");
        break;
      case RuleKind::kTogether:
        if (!given.empty() && given.size() != r.flags.size())
          for (std::string_view o : r.flags)
            if (!f.holds(o)) fail(given.front(), o, shown_list(r.flags, " and ") + " go together");
        break;
      case RuleKind::kAtMostOne:
        if (given.size() > 1)
          fail(given[0], given[1], shown(given[0]) + " and " + shown(given[1]) + " exclude each other");
        break;
      case RuleKind::kExactlyOne:
        if (given.size() > 1)
          fail(given[0], given[1], shown(given[0]) + " and " + shown(given[1]) + " exclude each other");
        if (given.empty())
          fail(r.flags.front(), r.flags.front(), t.names(f.command()) + " needs one of " + shown_list(r.flags, " or "));
        break;
    }
  }
}

}  // namespace detail

/// Whether argv[first..] asks for --help (-h).
inline bool wants_help(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") return true;
  return false;
}

/// Parses argv[first..] as flags of subcommand `command`: every flag declared, taken by the
/// subcommand and valid; every required flag given; every rule kept. Throws
/// std::invalid_argument naming the flag and the value otherwise. A flag given twice keeps
/// its last value.
inline Flags parse_flags(const FlagTable& t, std::string_view command, int argc, char** argv, int first) {
  const Commands cmd = t.command(command);
  if (!cmd) throw std::invalid_argument("unknown subcommand '" + std::string(command) + "'");
  Flags flags(t, cmd);
  for (int i = first; i < argc; ++i) {
    const std::string name = argv[i];
    const FlagSpec* f = t.find(name);
    if (!f)
      throw std::invalid_argument("unknown flag '" + name + "' (" + std::string(t.program) + " " +
                                  std::string(command) + " --help lists the flags)");
    std::string value;
    if (f->kind != ValueKind::kSwitch) {
      if (i + 1 >= argc) throw std::invalid_argument("flag " + name + " needs a value");
      value = argv[++i];
    }
    if (!(f->commands & cmd))
      throw std::invalid_argument(std::string(command) + " does not take " + name + (value.empty() ? "" : " " + value) +
                                  " (" + t.names(f->commands, " and ") +
                                  (std::popcount(f->commands) > 1 ? " do)" : " does)"));
    detail::check_value(*f, value);
    flags.set(name, value);
  }
  for (const FlagSpec& f : t.flags)
    if ((f.required & cmd) && !flags.has(f.name)) {
      const std::string v = detail::value_text(f);
      throw std::invalid_argument(std::string(command) + " needs " + std::string(f.name) + (v.empty() ? "" : " " + v));
    }
  detail::check_rules(t, flags);
  return flags;
}

namespace detail {

// `text` wrapped to `width` columns, every line after the first indented by `indent`.
inline std::string wrap(std::string_view text, std::size_t indent, std::size_t first_column, std::size_t width) {
  std::string out;
  std::size_t col = first_column;
  std::size_t i = 0;
  bool first_word = true;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ') ++j;
    if (j == i) break;
    const std::string_view word = text.substr(i, j - i);
    if (!first_word && col + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      col = indent;
    } else if (!first_word) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    first_word = false;
    i = j;
  }
  return out;
}

}  // namespace detail

/// The global --help: what the program is and its subcommands.
inline std::string help(const FlagTable& t) {
  std::string out = detail::wrap(t.description, 0, 0, 100) + "\n\nusage: " + std::string(t.program) +
                    " <subcommand> [flags]\n       " + std::string(t.program) +
                    " <subcommand> --help    (the subcommand's flags)\n\nsubcommands:\n";
  for (const CommandSpec& c : t.commands) {
    std::string line = "  " + std::string(c.name);
    line.resize(16, ' ');
    out += line + detail::wrap(c.summary, 16, 16, 100) + "\n";
  }
  if (!t.epilogue.empty()) out += "\n" + detail::wrap(t.epilogue, 0, 0, 100) + "\n";
  return out;
}

/// `<command> --help`: its description, then its flags by section, each with its value, help,
/// default, bounds and whether it is required.
inline std::string help(const FlagTable& t, std::string_view command) {
  const Commands cmd = t.command(command);
  if (!cmd) throw std::invalid_argument("unknown subcommand '" + std::string(command) + "'");
  const CommandSpec* spec = nullptr;
  for (const CommandSpec& c : t.commands)
    if (c.name == command) spec = &c;
  std::string usage = "usage: " + std::string(t.program) + " " + std::string(command);
  for (const FlagSpec& f : t.flags)
    if (f.required & cmd) usage += " " + std::string(f.name) + " " + detail::value_text(f);
  std::string out = usage + " [flags]\n\n" + detail::wrap(spec->description, 0, 0, 100) + "\n";
  std::vector<std::string_view> groups;
  for (const FlagSpec& f : t.flags)
    if ((f.commands & cmd) && std::find(groups.begin(), groups.end(), f.group) == groups.end())
      groups.push_back(f.group);
  constexpr std::size_t kColumn = 32;
  for (std::string_view g : groups) {
    out += "\n" + std::string(g) + ":\n";
    for (const FlagSpec& f : t.flags) {
      if (!(f.commands & cmd) || f.group != g) continue;
      std::string_view help_text = f.help, def = f.default_value;
      for (const Variant& v : f.variants)
        if (v.commands & cmd) {
          def = v.default_value;
          if (!v.help.empty()) help_text = v.help;
        }
      std::string text(help_text);
      std::vector<std::string> notes;
      if (f.required & cmd) notes.push_back("required");
      if (!def.empty()) notes.push_back("default " + std::string(def));
      if (f.kind == ValueKind::kInteger && (f.min != LLONG_MIN || f.max != LLONG_MAX))
        notes.push_back(detail::integer_rule(f).substr(3));  // "integer in [1, 7]"
      if (f.kind == ValueKind::kThreads)
        notes.push_back("0 = OpenMP's default, at most " + std::to_string(inferkit::kMaxThreads));
      if (!notes.empty()) {
        text += " (";
        for (std::size_t i = 0; i < notes.size(); ++i) text += (i ? "; " : "") + notes[i];
        text += ")";
      }
      std::string lead = "  " + std::string(f.name);
      if (const std::string v = detail::value_text(f); !v.empty()) lead += " " + v;
      if (lead.size() + 2 > kColumn) {
        out += lead + "\n" + std::string(kColumn, ' ');
      } else {
        lead.resize(kColumn, ' ');
        out += lead;
      }
      out += detail::wrap(text, kColumn, kColumn, 100) + "\n";
    }
  }
  if (!t.epilogue.empty()) out += "\n" + detail::wrap(t.epilogue, 0, 0, 100) + "\n";
  return out;
}

}  // namespace llama2c::cli
