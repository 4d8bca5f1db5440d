// The mmrt command-line front end: a registry of subcommands and a small option parser.
// Each subcommand lives in its own cmd_<name>.cpp and registers itself with MMRT_COMMAND.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mmrt::cli {

// Parses "--key value", "--key=value" and bare "--flag" options plus positional arguments.
// Options are declared by use: get()/flag() mark them as known; finish() rejects the rest.
class Args {
 public:
  Args(std::vector<std::string> argv, std::set<std::string> flags);

  std::optional<std::string> get(const std::string& key);
  std::string get_or(const std::string& key, const std::string& def);
  std::string require(const std::string& key);
  std::vector<std::string> get_all(const std::string& key);
  // An integer option in [lo, hi] (parsed as 64-bit: nothing wraps); `def` when absent.
  // Anything else, a fraction, "1e6" or a value out of range: InvalidArgument
  // "--key must be an integer in lo..hi, got 'x'".
  int64_t get_int(const std::string& key, int64_t def, int64_t lo, int64_t hi);
  // A finite number in [lo, hi] (nan and inf are refused); `def` when absent.
  double get_double(const std::string& key, double def, double lo, double hi);
  bool flag(const std::string& key);
  // --key spelled as one of `choices` (spelling, value); `def` (a spelling) when absent. Any other
  // spelling: InvalidArgument "--key must be a, b or c, got 'x'".
  template <class T>
  T get_choice(const std::string& key, const std::string& def,
               std::initializer_list<std::pair<std::string_view, T>> choices) {
    const std::string v = get_or(key, def);
    std::string list;
    size_t i = 0;
    for (const auto& [name, value] : choices) {
      if (name == v) return value;
      list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(name);
      ++i;
    }
    throw_bad_choice(key, list, v);
  }
  const std::vector<std::string>& positional() const { return positional_; }
  // Throws InvalidArgument naming any option that no get()/flag() asked for.
  void finish();

 private:
  std::multimap<std::string, std::string> opts_;
  std::set<std::string> flags_seen_, used_, known_flags_;
  std::set<std::string> missing_value_;  // "--key" in last position with no value after it
  std::vector<std::string> positional_;
  [[noreturn]] static void throw_bad_choice(const std::string& key, const std::string& list,
                                            const std::string& got);
};

// `s` as a whole integer (an optional leading '+'; nothing may follow), or nullopt.
std::optional<int64_t> parse_int(std::string_view s);

// The entries of a comma-separated option value ("a,b,c"). An empty value or an empty entry
// ("a,,b", "a,") is an InvalidArgument naming --option: nothing a user typed is dropped silently.
std::vector<std::string> split_list(const std::string& value, const std::string& option);

struct Command {
  const char* name;
  const char* summary;          // one line for `mmrt --help`
  const char* usage;            // full text for `mmrt NAME --help`
  std::set<std::string> flags;  // options that take no value
  int (*run)(Args& args);
};

void register_command(const Command& c);
const std::map<std::string, Command>& commands();

struct Registrar {
  explicit Registrar(const Command& c) { register_command(c); }
};

}  // namespace mmrt::cli

#define MMRT_CLI_CAT2(a, b) a##b
#define MMRT_CLI_CAT(a, b) MMRT_CLI_CAT2(a, b)
#define MMRT_COMMAND(...) \
  static ::mmrt::cli::Registrar MMRT_CLI_CAT(mmrt_cmd_, __LINE__)(::mmrt::cli::Command{__VA_ARGS__})
