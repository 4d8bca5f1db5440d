// The shared text-config reader and validator of the Llama-shaped families: its rules alone, and
// the same message for the same fault in every family's config.json.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "../common/error_of.h"
#include "core/error.h"
#include "models/decoder/text_config.h"
#include "models/fuyu/config.h"
#include "models/llava/config.h"
#include "models/qwen2_audio/config.h"
#include "models/qwen2_vl/config.h"

namespace mmrt::models {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

io::JsonFields fields(const json& j) {
  return io::JsonFields(&j, nullptr, "text_config.", "c");
}

using mmrt::testing::error_of;

TEST(TextConfig, AbsentFieldsKeepDefaultsAndKvFollowsTheRules) {
  const json j = {{"hidden_size", 64}, {"num_attention_heads", 4}};
  TextFields t;
  t.num_key_value_heads = 7;
  read_text_fields(fields(j), t);  // LlamaConfig: absent kv heads = heads
  EXPECT_EQ(t.hidden_size, 64);
  EXPECT_EQ(t.num_key_value_heads, 4);
  EXPECT_EQ(t.vocab_size, 32000);
  TextFields q;
  q.num_key_value_heads = 7;
  read_text_fields(fields(j), q, {.kv_default_is_heads = false});  // Qwen2Config: its own default
  EXPECT_EQ(q.num_key_value_heads, 7);
  TextFields p;
  read_text_fields(fields(json{{"num_attention_heads", 4}, {"num_key_value_heads", 2}}), p,
                   {.grouped_kv = false});  // Persimmon: no grouped key/values
  EXPECT_EQ(p.num_key_value_heads, 4);
  TextFields r;
  EXPECT_THAT(
      error_of<FormatError>([&] { read_text_fields(fields(j), r, {.shape_required = true}); }),
      HasSubstr("intermediate_size"));
  EXPECT_THAT(error_of<FormatError>([&] {
                read_text_fields(fields(json{{"hidden_size", "64"}}), r);
              }),
              HasSubstr("text_config.hidden_size"));
}

TEST(TextConfig, PlainRopeOnly) {
  TextFields t;
  read_plain_rope(fields(json{{"rope_scaling", nullptr}}), t);
  read_plain_rope(
      fields(json{{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5e5}}}}), t);
  EXPECT_EQ(t.rope_theta, 5e5);
  EXPECT_THAT(error_of<Unimplemented>([&] {
                read_plain_rope(fields(json{{"rope_scaling", {{"type", "yarn"}}}}), t);
              }),
              HasSubstr("text_config.rope_scaling.type\" is \"yarn\""));
  EXPECT_THAT(error_of<FormatError>([&] {
                read_plain_rope(fields(json{{"rope_scaling", 2}}), t);
              }),
              HasSubstr("must be an object"));
}

TEST(TextConfig, ValidatorNamesTheField) {
  auto fault = [](const std::function<void(TextFields&)>& edit, const TextChecks& checks = {}) {
    TextFields t;
    edit(t);
    return error_of<Error>([&] { validate_text_fields(t, "c", "text_config.", checks); });
  };
  EXPECT_THAT(fault([](TextFields& t) { t.num_hidden_layers = 0; }),
              HasSubstr("c: text_config.num_hidden_layers must be positive, got 0"));
  EXPECT_THAT(fault([](TextFields& t) { t.vocab_size = int64_t{1} << 30; }),
              HasSubstr("text_config.vocab_size 1073741824 is larger than 4194304"));
  EXPECT_THAT(fault([](TextFields& t) { t.hidden_size = 100; }),
              HasSubstr("hidden_size 100 is not divisible by text_config.num_attention_heads 32"));
  EXPECT_THAT(
      fault([](TextFields& t) { t.num_key_value_heads = 5; }),
      HasSubstr("num_attention_heads 32 is not a multiple of text_config.num_key_value_heads 5"));
  EXPECT_THAT(fault([](TextFields& t) { t.rope_theta = 0; }), HasSubstr("rope_theta must be in"));
  EXPECT_THAT(fault([](TextFields& t) { t.eos_token_id = 32000; }),
              HasSubstr("eos_token_id 32000 is outside the vocabulary [0, 32000)"));
  EXPECT_THAT(fault([](TextFields& t) { t.hidden_act = "gelu"; }),
              HasSubstr("hidden_act is \"gelu\"; only \"silu\" is supported"));
  // What the checks waive passes.
  TextFields ok;
  ok.hidden_size = 100;
  ok.num_key_value_heads = 5;
  EXPECT_NO_THROW(
      validate_text_fields(ok, "c", "", {.explicit_head_dim = true, .grouped_kv = false}));
}

// One fault, one message, in all four families: the text model's layer count set to zero where
// each family's config.json keeps it.
template <typename Config>
std::string family_fault(const Config& base, const char* where,
                         Config (*parse)(const std::string&, const std::string&),
                         std::string (*write)(const Config&)) {
  json j = json::parse(write(base));
  if (where[0] == '\0')
    j["num_hidden_layers"] = 0;
  else
    j[where]["num_hidden_layers"] = 0;
  return error_of<FormatError>([&] { parse(j.dump(), "config.json").validate("config.json"); });
}

TEST(TextConfig, EveryFamilySaysTheSame) {
  EXPECT_THAT(
      family_fault(qwen2_vl::Config{}, "", &qwen2_vl::parse_config, &qwen2_vl::config_to_json),
      HasSubstr("config.json: num_hidden_layers must be positive, got 0"));
  llava::Config llava_next;
  llava_next.image_grid_pinpoints = {{336, 672}, {672, 336}};
  EXPECT_THAT(family_fault(llava_next, "text_config", &llava::parse_config, &llava::config_to_json),
              HasSubstr("config.json: text_config.num_hidden_layers must be positive, got 0"));
  const qwen2_audio::Config audio;  // named: GCC 12 warns of a temporary's string members
  EXPECT_THAT(
      family_fault(audio, "text_config", &qwen2_audio::parse_config, &qwen2_audio::config_to_json),
      HasSubstr("config.json: text_config.num_hidden_layers must be positive, got 0"));
  EXPECT_THAT(
      family_fault(fuyu::Config{}, "text_config", &fuyu::parse_config, &fuyu::config_to_json),
      HasSubstr("config.json: num_hidden_layers must be positive, got 0"));
}

}  // namespace
}  // namespace mmrt::models
