// Typed reading of JSON configuration objects (config.json, preprocessor_config.json, ...):
// each getter checks the field's type and names the file and the dotted field path in its
// FormatError. A field may be looked up in a primary object first and a fallback object second
// (e.g. "text_config" before the top level).
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mmrt::io {

// Nesting deeper than this is refused before parsing: no configuration or tokenizer file nests
// more than ~10 levels, and a bounded depth keeps every later recursive walk (comparison, dump)
// off the end of the stack.
inline constexpr int kMaxJsonDepth = 128;

// Parses JSON text of any shape. FormatError naming `origin` when it is not JSON or nests deeper
// than kMaxJsonDepth (checked in one linear pass before the parser runs).
// `max_values` > 0: FormatError once the document holds more values than that (every scalar,
// array and object counts), before they are all built: parsed JSON takes ~16-100 bytes per
// value against ~2 in the text ("1,"), so a body of small values would take 10-50x its size.
nlohmann::json parse_json(std::string_view text, const std::string& origin, size_t max_values = 0);
// parse_json for text from another process that a caller may pass over when it is bad (the
// cluster's etcd values, load gauges, relayed requests): the value, or a discarded one
// (is_discarded()) instead of FormatError. The same depth and value bounds apply.
nlohmann::json parse_json_or_discard(std::string_view text, size_t max_values = 0);
// FormatError naming `origin` when `text` nests deeper than kMaxJsonDepth.
void check_json_depth(std::string_view text, const std::string& origin);
// parse_json, and FormatError unless the top level is an object.
nlohmann::json parse_json_object(std::string_view text, const std::string& origin);
// Reads a whole JSON metadata file: a regular file of at most kMaxJsonFileBytes (io/file.h).
std::string read_text_file(const std::string& path);
// A value as quoted in an error message: its JSON text, cut to 80 characters.
std::string json_excerpt(const nlohmann::json& v);
// A JSON library exception as an error message: without its "[json.exception.…] " tag, and with
// the text it quotes ("last read: '…'": the whole token, an unterminated string to the end of the
// input) cut to 40 characters, so that a bad document of any size gets a message of bounded size.
std::string json_error_text(const std::exception& e);

// One value of a configuration field, read alone (FormatError quoting `key` and `origin`): an
// integer (integral floats accepted), a number, or three numbers, one per RGB channel (a single
// number is used for all three; a bad element is named as key[i]).
int64_t json_int_value(const nlohmann::json& v, const std::string& key, const std::string& origin);
double json_number_value(const nlohmann::json& v, const std::string& key,
                         const std::string& origin);
std::array<double, 3> json_rgb_value(const nlohmann::json& v, const std::string& key,
                                     const std::string& origin);

class JsonFields {
 public:
  // `prefix` is prepended to primary-object field names in messages ("text_config.").
  JsonFields(const nlohmann::json* primary, const nlohmann::json* fallback, std::string prefix,
             const std::string& origin);

  // The field and where it was found (dotted path), or null.
  const nlohmann::json* find(const std::string& key, std::string* where = nullptr) const;
  std::optional<int64_t> opt_int(const std::string& key) const;  // integral floats accepted
  int64_t req_int(const std::string& key) const;                 // FormatError when missing
  int64_t int_or(const std::string& key, int64_t def) const;
  double num_or(const std::string& key, double def) const;
  bool bool_or(const std::string& key, bool def) const;
  std::string str_or(const std::string& key, const std::string& def) const;
  // A token id; HF allows a list for eos_token_id (the first entry is the primary one).
  int64_t token_or(const std::string& key, int64_t def) const;
  // Every id of a token-id field (a number or a list), empty when absent.
  std::vector<int64_t> token_list(const std::string& key) const;
  const std::string& origin() const { return origin_; }

 private:
  const nlohmann::json* primary_;
  const nlohmann::json* fallback_;
  std::string prefix_;
  std::string origin_;
};

// The model identity of a config.json: "architectures"[0] (may be empty) and "model_type"
// (may be empty). FormatError for a malformed "architectures" field.
struct ConfigIdentity {
  std::string architecture, model_type;
};
ConfigIdentity config_identity(const nlohmann::json& root, const std::string& origin);

}  // namespace mmrt::io
