#include "cli.h"

#include <charconv>
#include <cstdio>

#include "core/error.h"

namespace mmrt::cli {

Args::Args(std::vector<std::string> argv, std::set<std::string> flags)
    : known_flags_(std::move(flags)) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string key = a.substr(2);
      auto eq = key.find('=');
      if (eq != std::string::npos) {
        opts_.emplace(key.substr(0, eq), key.substr(eq + 1));
      } else if (known_flags_.count(key) || key == "help") {
        flags_seen_.insert(key);
      } else {
        // A value-less option in last position: keep it, so finish() can say whether it is
        // unknown or needs a value.
        if (i + 1 >= argv.size()) {
          missing_value_.insert(key);
          continue;
        }
        opts_.emplace(key, argv[++i]);
      }
    } else {
      positional_.push_back(a);
    }
  }
}

std::optional<std::string> Args::get(const std::string& key) {
  used_.insert(key);
  if (missing_value_.count(key)) throw InvalidArgument("option --" + key + " needs a value");
  auto range = opts_.equal_range(key);
  if (range.first == range.second) return std::nullopt;
  return std::prev(range.second)->second;  // last one wins
}

std::string Args::get_or(const std::string& key, const std::string& def) {
  auto v = get(key);
  return v ? *v : def;
}

void Args::throw_bad_choice(const std::string& key, const std::string& list,
                            const std::string& got) {
  throw InvalidArgument("--" + key + " must be " + list + ", got '" + got + "'");
}

std::string Args::require(const std::string& key) {
  auto v = get(key);
  if (!v) throw InvalidArgument("missing required option --" + key);
  return *v;
}

std::vector<std::string> Args::get_all(const std::string& key) {
  used_.insert(key);
  if (missing_value_.count(key)) throw InvalidArgument("option --" + key + " needs a value");
  std::vector<std::string> out;
  auto range = opts_.equal_range(key);
  for (auto it = range.first; it != range.second; ++it) out.push_back(it->second);
  return out;
}

namespace {

// A value as quoted in a message: cut, so a megabyte of argument does not become the message.
std::string shown(const std::string& v) {
  return v.size() <= 40 ? v : v.substr(0, 40) + "...";
}

// `s` as a whole number of type T (an optional leading '+'), or nullopt.
template <class T>
std::optional<T> parse_whole(std::string_view s) {
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+') ++b;
  T r{};
  const auto [p, ec] = std::from_chars(b, e, r);
  if (s.empty() || ec != std::errc() || p != e) return std::nullopt;
  return r;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::optional<int64_t> parse_int(std::string_view s) {
  return parse_whole<int64_t>(s);
}

int64_t Args::get_int(const std::string& key, int64_t def, int64_t lo, int64_t hi) {
  auto v = get(key);
  if (!v) return def;
  const std::optional<int64_t> r = parse_int(*v);
  if (!r || *r < lo || *r > hi)
    throw InvalidArgument("--" + key + " must be an integer in " + std::to_string(lo) + ".." +
                          std::to_string(hi) + ", got '" + shown(*v) + "'");
  return *r;
}

double Args::get_double(const std::string& key, double def, double lo, double hi) {
  auto v = get(key);
  if (!v) return def;
  const std::optional<double> r = parse_whole<double>(*v);
  if (!r || !(*r >= lo && *r <= hi))  // nan fails both comparisons
    throw InvalidArgument("--" + key + " must be a number in [" + number_text(lo) + ", " +
                          number_text(hi) + "], got '" + shown(*v) + "'");
  return *r;
}

bool Args::flag(const std::string& key) {
  used_.insert(key);
  // A flag its command did not declare was read as an option: say so rather than ignore it.
  if (opts_.count(key)) throw InvalidArgument("option --" + key + " takes no value");
  return flags_seen_.count(key) > 0 || missing_value_.count(key) > 0;
}

void Args::finish() {
  std::vector<std::string> given(missing_value_.begin(), missing_value_.end());
  for (const auto& [k, v] : opts_) given.push_back(k);
  for (const auto& k : flags_seen_)
    if (k != "help") given.push_back(k);
  for (const auto& k : given)
    if (!used_.count(k)) throw InvalidArgument("unknown option --" + k + " (see --help)");
}

std::vector<std::string> split_list(const std::string& value, const std::string& option) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i <= value.size(); ++i)
    if (i == value.size() || value[i] == ',') {
      if (i == b)
        throw InvalidArgument(
            "--" + option + ": " +
            (value.empty() ? std::string("empty value") : "empty entry in '" + shown(value) + "'"));
      out.push_back(value.substr(b, i - b));
      b = i + 1;
    }
  return out;
}

namespace {
std::map<std::string, Command>& registry() {
  static std::map<std::string, Command> r;
  return r;
}
}  // namespace

void register_command(const Command& c) {
  registry().emplace(c.name, c);
}
const std::map<std::string, Command>& commands() {
  return registry();
}

}  // namespace mmrt::cli
