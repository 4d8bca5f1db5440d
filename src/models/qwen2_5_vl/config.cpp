#include "models/qwen2_5_vl/config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::models::qwen2_5_vl {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

bool VisionConfig::full_attention(int64_t block) const {
  return std::find(fullatt_block_indexes.begin(), fullatt_block_indexes.end(), block) !=
         fullatt_block_indexes.end();
}

Config parse_config(const std::string& json_text, const std::string& origin) {
  Config cfg;
  cfg.qwen2 = qwen2_vl::parse_text_and_tokens(json_text, origin, kArchitecture, kModelType);
  const json root = json::parse(json_text);
  io::JsonFields vis(&root["vision_config"], nullptr, "vision_config.", origin);
  VisionConfig& v = cfg.vision;
  v.depth = vis.req_int("depth");
  v.hidden_size = vis.req_int("hidden_size");
  v.intermediate_size = vis.req_int("intermediate_size");
  v.num_heads = vis.req_int("num_heads");
  v.out_hidden_size = vis.req_int("out_hidden_size");
  v.in_chans = vis.int_or("in_chans", vis.int_or("in_channels", 3));
  v.patch_size = vis.int_or("patch_size", vis.int_or("spatial_patch_size", 14));
  v.spatial_merge_size = vis.int_or("spatial_merge_size", 2);
  v.temporal_patch_size = vis.int_or("temporal_patch_size", 2);
  v.window_size = vis.int_or("window_size", 112);
  v.tokens_per_second = vis.int_or("tokens_per_second", 4);  // the transformers class default
  v.hidden_act = vis.str_or("hidden_act", "silu");
  const json& fa = root["vision_config"].contains("fullatt_block_indexes")
                       ? root["vision_config"]["fullatt_block_indexes"]
                       : json(json::array({7, 15, 23, 31}));
  if (!fa.is_array())
    throw FormatError(origin + ": field \"vision_config.fullatt_block_indexes\" must be an array");
  v.fullatt_block_indexes.clear();
  for (const json& i : fa) {
    if (!i.is_number_integer())
      throw FormatError(origin +
                        ": field \"vision_config.fullatt_block_indexes\" must hold integers, got " +
                        io::json_excerpt(fa));
    v.fullatt_block_indexes.push_back(i.get<int64_t>());
  }
  // The shared processor's view of the tower.
  qwen2_vl::VisionConfig& g = cfg.qwen2.vision;
  g.depth = v.depth;
  g.embed_dim = v.hidden_size;
  g.num_heads = v.num_heads;
  g.in_chans = v.in_chans;
  g.hidden_size = v.out_hidden_size;
  g.patch_size = v.patch_size;
  g.spatial_merge_size = v.spatial_merge_size;
  g.temporal_patch_size = v.temporal_patch_size;
  g.hidden_act = v.hidden_act;
  return cfg;
}

Config load_config(const std::string& config_json_path) {
  return parse_config(io::read_text_file(config_json_path), config_json_path);
}

void Config::validate(const std::string& origin) const {
  qwen2_vl::validate_text_and_tokens(qwen2, origin);
  auto fail = [&](const std::string& field, const std::string& what) {
    throw FormatError(origin + ": vision_config." + field + " " + what);
  };
  constexpr int64_t kMaxWidth = int64_t{1} << 17, kMaxCount = 4096;
  const VisionConfig& v = vision;
  check_size(origin, "vision_config.depth", v.depth, kMaxCount);
  check_size(origin, "vision_config.hidden_size", v.hidden_size, kMaxWidth);
  check_size(origin, "vision_config.intermediate_size", v.intermediate_size, kMaxWidth);
  check_size(origin, "vision_config.num_heads", v.num_heads, kMaxCount);
  check_size(origin, "vision_config.out_hidden_size", v.out_hidden_size, kMaxWidth);
  check_size(origin, "vision_config.in_chans", v.in_chans, 16);
  check_size(origin, "vision_config.patch_size", v.patch_size, 1024);
  check_size(origin, "vision_config.spatial_merge_size", v.spatial_merge_size, 64);
  check_size(origin, "vision_config.temporal_patch_size", v.temporal_patch_size, 64);
  check_size(origin, "vision_config.window_size", v.window_size, 1 << 20);
  check_size(origin, "vision_config.tokens_per_second", v.tokens_per_second, 1 << 16);
  if (v.hidden_size % v.num_heads != 0)
    fail("hidden_size", std::to_string(v.hidden_size) + " is not divisible by num_heads " +
                            std::to_string(v.num_heads));
  if (v.head_dim() % 4 != 0)
    fail("hidden_size", "gives head_dim " + std::to_string(v.head_dim()) +
                            "; head_dim/2 must be even (row and column rotary halves)");
  if (v.window_size % (v.spatial_merge_size * v.patch_size) != 0)
    fail("window_size", std::to_string(v.window_size) + " is not a multiple of patch_size x " +
                            "spatial_merge_size (" +
                            std::to_string(v.spatial_merge_size * v.patch_size) + ")");
  for (int64_t b : v.fullatt_block_indexes)
    if (b < 0 || b >= v.depth)
      fail("fullatt_block_indexes",
           "holds " + std::to_string(b) + ", outside the " + std::to_string(v.depth) + " blocks");
  if (v.out_hidden_size != qwen2.text.hidden_size)
    fail("out_hidden_size", std::to_string(v.out_hidden_size) +
                                " (merger output) differs from text hidden_size " +
                                std::to_string(qwen2.text.hidden_size));
  if (v.hidden_act != "silu")
    fail("hidden_act", "is \"" + v.hidden_act + "\"; only \"silu\" is supported");
}

std::string config_to_json(const Config& c) {
  ordered_json j = ordered_json::parse(qwen2_vl::config_to_json(c.qwen2));
  j["architectures"] = {kArchitecture};
  j["model_type"] = kModelType;
  j["transformers_version"] = "4.49.0";
  const VisionConfig& v = c.vision;
  ordered_json vc;
  vc["depth"] = v.depth;
  vc["hidden_act"] = v.hidden_act;
  vc["hidden_size"] = v.hidden_size;
  vc["intermediate_size"] = v.intermediate_size;
  vc["num_heads"] = v.num_heads;
  vc["in_chans"] = v.in_chans;
  vc["out_hidden_size"] = v.out_hidden_size;
  vc["patch_size"] = v.patch_size;
  vc["spatial_merge_size"] = v.spatial_merge_size;
  vc["spatial_patch_size"] = v.patch_size;
  vc["window_size"] = v.window_size;
  vc["fullatt_block_indexes"] = v.fullatt_block_indexes;
  vc["tokens_per_second"] = v.tokens_per_second;
  vc["temporal_patch_size"] = v.temporal_patch_size;
  j["vision_config"] = vc;
  return j.dump(2) + "\n";
}

}  // namespace mmrt::models::qwen2_5_vl
