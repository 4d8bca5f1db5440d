#include "io/generation_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::io {

GenerationConfig load_generation_config(const std::string& path) {
  GenerationConfig g;
  if (!std::filesystem::exists(path)) return g;
  const nlohmann::json j = parse_json_object(read_text_file(path), path);
  auto field = [&](const char* name, auto& out) {
    if (!j.contains(name) || j[name].is_null()) return;
    try {
      out = j[name].get<typename std::decay_t<decltype(out)>::value_type>();
    } catch (const nlohmann::json::exception&) {
      throw FormatError(path + ": field '" + name + "' has the wrong type");
    }
  };
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const auto& e = j["eos_token_id"];
    if (e.is_number_integer()) {
      g.eos_token_ids.push_back(e.get<int32_t>());
    } else if (e.is_array()) {
      for (const auto& v : e) {
        if (!v.is_number_integer())
          throw FormatError(path + ": eos_token_id list holds a non-integer");
        g.eos_token_ids.push_back(v.get<int32_t>());
      }
    } else {
      throw FormatError(path + ": eos_token_id must be an integer or a list of integers");
    }
  }
  field("pad_token_id", g.pad_token_id);
  field("temperature", g.temperature);
  field("top_p", g.top_p);
  field("top_k", g.top_k);
  field("repetition_penalty", g.repetition_penalty);
  field("do_sample", g.do_sample);
  return g;
}

}  // namespace mmrt::io
