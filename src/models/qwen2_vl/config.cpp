// Qwen2-VL config.json: both the original layout (text fields at the top level) and the newer one
// ("text_config"), rope_scaling / rope_parameters, token ids; validation and HF-style writing.
#include "models/qwen2_vl/config.h"

#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::models::qwen2_vl {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

void parse_rope(const json& rs, const std::string& field, const std::string& origin,
                TextConfig& text) {
  if (rs.is_null()) return;
  if (!rs.is_object())
    throw FormatError(origin + ": field \"" + field + "\" must be an object, got " +
                      io::json_excerpt(rs));
  std::string type;
  for (const char* k : {"type", "rope_type"}) {
    if (rs.contains(k)) {
      if (!rs[k].is_string())
        throw FormatError(origin + ": field \"" + field + "." + k + "\" must be a string");
      type = rs[k].get<std::string>();
      break;
    }
  }
  if (!type.empty() && type != "mrope" && type != "default")
    throw FormatError(origin + ": field \"" + field + "\" has unsupported rope type \"" + type +
                      "\" (supported: \"mrope\", \"default\")");
  if (rs.contains("rope_theta")) {
    if (!rs["rope_theta"].is_number())
      throw FormatError(origin + ": field \"" + field + ".rope_theta\" must be a number");
    text.rope_theta = rs["rope_theta"].get<double>();
  }
  if (rs.contains("mrope_section")) {
    const json& ms = rs["mrope_section"];
    if (!ms.is_array())
      throw FormatError(origin + ": field \"" + field + ".mrope_section\" must be an array");
    text.mrope_section.clear();
    for (const auto& v : ms) {
      if (!v.is_number_integer())
        throw FormatError(origin + ": field \"" + field +
                          ".mrope_section\" must hold integers, got " + io::json_excerpt(ms));
      text.mrope_section.push_back(v.get<int64_t>());
    }
  } else if (type == "mrope") {
    throw FormatError(origin + ": field \"" + field + "\" is mrope but has no mrope_section");
  }
}

}  // namespace

Config parse_text_and_tokens(const std::string& json_text, const std::string& origin,
                             const std::string& architecture, const std::string& model_type) {
  const json root = io::parse_json_object(json_text, origin);
  Config cfg;
  io::JsonFields top(&root, nullptr, "", origin);
  const io::ConfigIdentity id = io::config_identity(root, origin);
  std::string arch = id.architecture;
  cfg.model_type = id.model_type;
  if (arch.empty() && cfg.model_type == model_type) arch = architecture;
  if (arch.empty())
    throw FormatError(origin + ": missing \"architectures\" (and model_type is not " + model_type +
                      ")");
  if (arch != architecture)
    throw FormatError(origin + ": unsupported architecture \"" + arch + "\" (expected " +
                      architecture + ")");
  cfg.architecture = arch;
  if (cfg.model_type.empty()) cfg.model_type = model_type;
  if (cfg.model_type != model_type)
    throw FormatError(origin + ": field \"model_type\" is \"" + cfg.model_type + "\", expected \"" +
                      model_type + "\"");
  cfg.torch_dtype = top.str_or("torch_dtype", top.str_or("dtype", "bfloat16"));

  // Text fields: "text_config" first (newer layout), then the top level (original layout).
  const json* tc = nullptr;
  if (root.contains("text_config") && !root["text_config"].is_null()) {
    if (!root["text_config"].is_object())
      throw FormatError(origin + ": field \"text_config\" must be an object");
    tc = &root["text_config"];
  }
  io::JsonFields text(tc, &root, "text_config.", origin);
  TextConfig& t = cfg.text;
  // An omitted field takes the transformers class default, not the 2B checkpoint's value.
  t.tie_word_embeddings = false;
  read_text_fields(text, t, {.shape_required = true});
  t.rms_norm_eps = text.num_or("rms_norm_eps", 1e-5);
  t.mrope_section.clear();
  std::string where;
  if (const json* rs = text.find("rope_scaling", &where)) parse_rope(*rs, where, origin, t);
  if (const json* rp = text.find("rope_parameters", &where)) parse_rope(*rp, where, origin, t);

  cfg.vision_start_token_id = top.token_or("vision_start_token_id", 151652);
  cfg.vision_end_token_id = top.token_or("vision_end_token_id", 151653);
  cfg.vision_token_id = top.token_or("vision_token_id", 151654);
  cfg.image_token_id = top.token_or("image_token_id", 151655);
  cfg.video_token_id = top.token_or("video_token_id", 151656);

  if (!root.contains("vision_config") || !root["vision_config"].is_object())
    throw FormatError(origin + ": missing \"vision_config\" object");
  return cfg;
}

Config parse_config(const std::string& json_text, const std::string& origin) {
  Config cfg =
      parse_text_and_tokens(json_text, origin, "Qwen2VLForConditionalGeneration", "qwen2_vl");
  const json root = json::parse(json_text);
  io::JsonFields vis(&root["vision_config"], nullptr, "vision_config.", origin);
  VisionConfig& v = cfg.vision;
  v.depth = vis.req_int("depth");
  v.embed_dim = vis.req_int("embed_dim");
  v.num_heads = vis.req_int("num_heads");
  v.hidden_size = vis.req_int("hidden_size");
  v.mlp_ratio = vis.int_or("mlp_ratio", 4);
  v.in_chans = vis.int_or("in_chans", vis.int_or("in_channels", 3));
  v.patch_size = vis.int_or("patch_size", vis.int_or("spatial_patch_size", 14));
  v.spatial_merge_size = vis.int_or("spatial_merge_size", 2);
  v.temporal_patch_size = vis.int_or("temporal_patch_size", 2);
  v.hidden_act = vis.str_or("hidden_act", "quick_gelu");
  return cfg;
}

Config load_config(const std::string& config_json_path) {
  return parse_config(io::read_text_file(config_json_path), config_json_path);
}

void validate_text_and_tokens(const Config& c, const std::string& origin) {
  const TextConfig& text = c.text;
  auto fail = [&](const std::string& field, const std::string& what) {
    throw FormatError(origin + ": " + field + " " + what);
  };
  constexpr int64_t kMaxWidth = int64_t{1} << 17;
  validate_text_fields(text, origin, "");
  if (text.head_dim() % 2 != 0)
    fail("hidden_size", "gives an odd head_dim " + std::to_string(text.head_dim()));
  if (!(text.rms_norm_eps > 0 && text.rms_norm_eps < 1))
    fail("rms_norm_eps", "must be in (0, 1), got " + std::to_string(text.rms_norm_eps));
  if (!text.mrope_section.empty()) {
    if (text.mrope_section.size() != 3)
      fail("rope_scaling.mrope_section",
           "must have 3 entries (t, h, w), got " + std::to_string(text.mrope_section.size()));
    for (int64_t s : text.mrope_section)
      if (s < 0 || s > kMaxWidth) fail("rope_scaling.mrope_section", "has an entry out of range");
    int64_t sum = std::accumulate(text.mrope_section.begin(), text.mrope_section.end(), int64_t{0});
    if (sum != text.head_dim() / 2)
      fail("rope_scaling.mrope_section", "sums to " + std::to_string(sum) + " but head_dim/2 is " +
                                             std::to_string(text.head_dim() / 2));
  }
  const std::pair<const char*, int64_t> ids[] = {{"vision_start_token_id", c.vision_start_token_id},
                                                 {"vision_end_token_id", c.vision_end_token_id},
                                                 {"vision_token_id", c.vision_token_id},
                                                 {"image_token_id", c.image_token_id},
                                                 {"video_token_id", c.video_token_id}};
  for (const auto& [field, id] : ids)
    if (id < 0 || id >= text.vocab_size)
      fail(field, std::to_string(id) + " is outside the vocabulary [0, " +
                      std::to_string(text.vocab_size) + ")");
}

void Config::validate(const std::string& origin) const {
  validate_text_and_tokens(*this, origin);
  auto fail = [&](const std::string& field, const std::string& what) {
    throw FormatError(origin + ": " + field + " " + what);
  };
  // Sizes drive allocations (tensor tables, KV geometry, position tables): each is bounded, far
  // above any released model, before anything is allocated from it.
  auto positive = [&](const char* field, int64_t v, int64_t max) {
    check_size(origin, field, v, max);
  };
  constexpr int64_t kMaxWidth = int64_t{1} << 17, kMaxCount = 4096;
  positive("vision_config.depth", vision.depth, kMaxCount);
  positive("vision_config.embed_dim", vision.embed_dim, kMaxWidth);
  positive("vision_config.num_heads", vision.num_heads, kMaxCount);
  positive("vision_config.mlp_ratio", vision.mlp_ratio, 64);
  positive("vision_config.in_chans", vision.in_chans, 16);
  positive("vision_config.patch_size", vision.patch_size, 1024);
  positive("vision_config.spatial_merge_size", vision.spatial_merge_size, 64);
  positive("vision_config.temporal_patch_size", vision.temporal_patch_size, 64);
  if (vision.embed_dim % vision.num_heads != 0)
    fail("vision_config.embed_dim", std::to_string(vision.embed_dim) +
                                        " is not divisible by vision_config.num_heads " +
                                        std::to_string(vision.num_heads));
  if (vision.head_dim() % 4 != 0)
    fail("vision_config.embed_dim", "gives vision head_dim " + std::to_string(vision.head_dim()) +
                                        "; head_dim/2 must be even (row and column rotary halves)");
  if (vision.hidden_size != text.hidden_size)
    fail("vision_config.hidden_size", std::to_string(vision.hidden_size) +
                                          " (merger output) differs from text hidden_size " +
                                          std::to_string(text.hidden_size));
  if (vision.hidden_act != "quick_gelu")
    fail("vision_config.hidden_act",
         "is \"" + vision.hidden_act + "\"; only \"quick_gelu\" is supported");
}

std::string config_to_json(const Config& c) {
  const TextConfig& t = c.text;
  const VisionConfig& v = c.vision;
  ordered_json j;
  j["architectures"] = {c.architecture};
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = t.bos_token_id;
  j["eos_token_id"] = t.eos_token_id;
  j["vision_start_token_id"] = c.vision_start_token_id;
  j["vision_end_token_id"] = c.vision_end_token_id;
  j["vision_token_id"] = c.vision_token_id;
  j["image_token_id"] = c.image_token_id;
  j["video_token_id"] = c.video_token_id;
  j["hidden_act"] = t.hidden_act;
  j["hidden_size"] = t.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = t.intermediate_size;
  j["max_position_embeddings"] = t.max_position_embeddings;
  j["max_window_layers"] = t.num_hidden_layers;
  j["model_type"] = c.model_type;
  j["num_attention_heads"] = t.num_attention_heads;
  j["num_hidden_layers"] = t.num_hidden_layers;
  j["num_key_value_heads"] = t.num_key_value_heads;
  j["rms_norm_eps"] = t.rms_norm_eps;
  j["rope_theta"] = t.rope_theta;
  j["sliding_window"] = t.max_position_embeddings;
  j["tie_word_embeddings"] = t.tie_word_embeddings;
  j["torch_dtype"] = c.torch_dtype;
  j["transformers_version"] = "4.45.0.dev0";
  j["use_cache"] = true;
  j["use_sliding_window"] = false;
  ordered_json vc;
  vc["depth"] = v.depth;
  vc["embed_dim"] = v.embed_dim;
  vc["mlp_ratio"] = v.mlp_ratio;
  vc["num_heads"] = v.num_heads;
  vc["in_chans"] = v.in_chans;
  vc["hidden_size"] = v.hidden_size;
  vc["patch_size"] = v.patch_size;
  vc["spatial_merge_size"] = v.spatial_merge_size;
  vc["spatial_patch_size"] = v.patch_size;
  vc["temporal_patch_size"] = v.temporal_patch_size;
  if (v.hidden_act != "quick_gelu") vc["hidden_act"] = v.hidden_act;
  j["vision_config"] = vc;
  if (!t.mrope_section.empty())
    j["rope_scaling"] = ordered_json{{"type", "mrope"}, {"mrope_section", t.mrope_section}};
  j["vocab_size"] = t.vocab_size;
  return j.dump(2) + "\n";
}

std::string tensor_name(Naming naming, const std::string& canonical) {
  auto starts = [&](const char* p) { return canonical.rfind(p, 0) == 0; };
  if (!starts("model.") && !starts("visual.") && canonical != "lm_head.weight")
    throw InvalidArgument("qwen2_vl::tensor_name: " + canonical +
                          " is not a canonical (old-style) Qwen2-VL tensor name");
  if (naming == Naming::kOld || canonical == "lm_head.weight") return canonical;
  if (starts("visual.")) return "model." + canonical;
  return "model.language_model." + canonical.substr(6);
}

Naming detect_naming(const std::vector<std::string>& names, const std::string& origin) {
  std::string old_example, new_example;
  for (const auto& n : names) {
    auto starts = [&](const char* p) { return n.rfind(p, 0) == 0; };
    if (starts("model.language_model.") || starts("model.visual.")) {
      if (new_example.empty()) new_example = n;
    } else if (starts("model.") || starts("visual.")) {
      if (old_example.empty()) old_example = n;
    }
  }
  if (!old_example.empty() && !new_example.empty())
    throw FormatError(origin + ": mixes old-style tensor names ('" + old_example +
                      "') with new-style ones ('" + new_example + "')");
  if (!new_example.empty()) return Naming::kNew;
  if (!old_example.empty()) return Naming::kOld;
  throw FormatError(origin +
                    ": no Qwen2-VL tensor names found (expected model.* and visual.*, or "
                    "model.language_model.* and model.visual.*)");
}

}  // namespace mmrt::models::qwen2_vl
