// Typed reading of JSON configuration objects (config.json, preprocessor_config.json, ...):
// each getter checks the field's type and names the file and the dotted field path in its
// FormatError. A field may be looked up in a primary object first and a fallback object second
// (e.g. "text_config" before the top level).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace mmrt::io {

// Parses JSON text (FormatError naming `origin` when it is not JSON or not an object).
nlohmann::json parse_json_object(const std::string& text, const std::string& origin);
// Reads a whole file (NotFound when it cannot be opened).
std::string read_text_file(const std::string& path);

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
