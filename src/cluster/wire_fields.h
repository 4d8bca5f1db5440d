// Fields of a JSON object another process sent (etcd values, NATS payloads, encode answers,
// transfer descriptors), read one by one: each read checks the field's type and bounds and
// throws FormatError "<what>: '<name>' ..." naming what is wrong. One reader for every message
// of the cluster, so each checks its input the same way.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mmrt::cluster {

class WireFields {
 public:
  // FormatError "<what>: not a JSON object" unless `obj` is one.
  WireFields(const nlohmann::json& obj, std::string what);
  // `text` parsed within io::parse_json's depth bound and at most `max_values` values (0: no
  // bound on values); FormatError "<what>: not a JSON object" when it is not JSON or not an
  // object.
  static nlohmann::json parse(std::string_view text, size_t max_values, const std::string& what);

  const nlohmann::json* find(const char* name) const;  // null when absent
  const nlohmann::json& get(const char* name) const;   // "'name' is missing"
  // A string of at most `max` bytes; "" when absent and not required.
  std::string text(const char* name, bool required = true, size_t max = 256) const;
  // A non-negative integer up to `max`; `def` when absent (unset: required).
  int64_t count(const char* name, int64_t max = std::numeric_limits<int64_t>::max()) const;
  int64_t count_or(const char* name, int64_t def,
                   int64_t max = std::numeric_limits<int64_t>::max()) const;
  // A finite number in [lo, hi]; `def` when absent for number_or.
  double number(const char* name, double lo, double hi) const;
  double number_or(const char* name, double def, double lo, double hi) const;
  bool boolean(const char* name) const;
  [[noreturn]] void fail(const std::string& why) const;  // FormatError "<what>: <why>"

 private:
  const nlohmann::json& obj_;
  std::string what_;
};

}  // namespace mmrt::cluster
