#include "cli.h"

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
        if (i + 1 >= argv.size()) throw InvalidArgument("option --" + key + " needs a value");
        opts_.emplace(key, argv[++i]);
      }
    } else {
      positional_.push_back(a);
    }
  }
}

std::optional<std::string> Args::get(const std::string& key) {
  used_.insert(key);
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
  std::vector<std::string> out;
  auto range = opts_.equal_range(key);
  for (auto it = range.first; it != range.second; ++it) out.push_back(it->second);
  return out;
}

int64_t Args::get_int(const std::string& key, int64_t def) {
  auto v = get(key);
  if (!v) return def;
  try {
    size_t pos = 0;
    int64_t r = std::stoll(*v, &pos);
    if (pos != v->size()) throw std::invalid_argument("trailing");
    return r;
  } catch (const std::exception&) {
    throw InvalidArgument("option --" + key + " expects an integer, got '" + *v + "'");
  }
}

double Args::get_double(const std::string& key, double def) {
  auto v = get(key);
  if (!v) return def;
  try {
    size_t pos = 0;
    double r = std::stod(*v, &pos);
    if (pos != v->size()) throw std::invalid_argument("trailing");
    return r;
  } catch (const std::exception&) {
    throw InvalidArgument("option --" + key + " expects a number, got '" + *v + "'");
  }
}

bool Args::flag(const std::string& key) {
  used_.insert(key);
  return flags_seen_.count(key) > 0;
}

void Args::finish() {
  for (const auto& [k, v] : opts_)
    if (!used_.count(k)) throw InvalidArgument("unknown option --" + k + " (see --help)");
  for (const auto& k : flags_seen_)
    if (!used_.count(k) && k != "help")
      throw InvalidArgument("unknown option --" + k + " (see --help)");
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
