// The OpenAI request surface: every field reaches the engine request, every bad field is a 400
// naming it, media URLs are checked, base64 is strict.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "server/api.h"

namespace mmrt::server {
namespace {

struct ApiTest : ::testing::Test {
  engine::SlaConfig sla = engine::SlaConfig::defaults();
  ApiOptions opt;
  void SetUp() override {
    opt.model_id = "tiny";
    opt.sla = &sla;
    opt.tiers = default_tiers();
  }
  ParsedRequest chat(const std::string& body) { return parse_request(body, Endpoint::kChat, opt); }
  // The error a body gets: status and param.
  std::pair<int, std::string> error_of(const std::string& body, Endpoint ep = Endpoint::kChat) {
    try {
      parse_request(body, ep, opt);
    } catch (const ApiError& e) {
      return {e.status, e.param};
    }
    return {200, ""};
  }
};

const char* kHello = R"({"messages":[{"role":"user","content":"hi"}]})";

std::string with(const std::string& fields) {
  return std::string(R"({"messages":[{"role":"user","content":"hi"}],)") + fields + "}";
}

TEST_F(ApiTest, EveryFieldReachesTheEngineRequest) {
  ParsedRequest p = chat(with(
      R"("model":"tiny","stream":true,"stream_options":{"include_usage":true},"max_tokens":7,)"
      R"("temperature":0.5,"top_p":0.9,"top_k":20,"min_p":0.05,"seed":42,"stop":["a","bc"],)"
      R"("presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,)"
      R"("ignore_eos":true,"user":"u1","sla_class":"gold","priority":3,"stop_token_ids":[9])"));
  const engine::SamplingParams& s = p.request.sampling;
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(s.max_tokens, 7);
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 20);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(s.stop_token_ids, std::vector<int32_t>{9});
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(p.user, "u1");
  EXPECT_EQ(p.request.sla_class, "gold");
  EXPECT_EQ(p.requested_class, "gold");
  EXPECT_EQ(p.request.priority, 3);
  ASSERT_EQ(p.request.messages.size(), 1u);
  EXPECT_EQ(p.request.messages[0].content[0].text, "hi");
  // max_completion_tokens wins over max_tokens; a single stop string is a list of one.
  p = chat(with(R"("max_tokens":7,"max_completion_tokens":9,"stop":"x")"));
  EXPECT_EQ(p.request.sampling.max_tokens, 9);
  EXPECT_EQ(p.request.sampling.stop, std::vector<std::string>{"x"});
  // Defaults: the configured max_tokens, greedy, not streamed.
  p = chat(kHello);
  EXPECT_EQ(p.request.sampling.max_tokens, opt.default_max_tokens);
  EXPECT_FALSE(p.stream);
}

TEST_F(ApiTest, ServiceTierAndClassesAndDeadlines) {
  EXPECT_EQ(chat(with(R"("service_tier":"priority")")).request.sla_class, "platinum");
  EXPECT_EQ(chat(with(R"("service_tier":"default")")).request.sla_class, "gold");
  EXPECT_EQ(chat(with(R"("service_tier":"flex")")).request.sla_class, "silver");
  EXPECT_EQ(chat(with(R"("service_tier":"auto")")).request.sla_class, sla.default_class);
  EXPECT_EQ(chat(kHello).request.sla_class, sla.default_class);
  // sla_class overrides service_tier.
  EXPECT_EQ(chat(with(R"("service_tier":"flex","sla_class":"platinum")")).request.sla_class,
            "platinum");
  // A deadline alone tightens the default class (it is no way out of a class); with a class:
  // both.
  ParsedRequest p = chat(with(R"("ttft_deadline_ms":250)"));
  EXPECT_EQ(p.request.sla_class, sla.default_class);
  EXPECT_FALSE(p.class_chosen);
  EXPECT_EQ(p.request.ttft_deadline_ns, 250'000'000);
  p = chat(with(R"("ttft_deadline_ms":250,"sla_class":"gold")"));
  EXPECT_EQ(p.request.sla_class, "gold");
  EXPECT_EQ(error_of(with(R"("service_tier":"ultra")")),
            std::make_pair(400, std::string("service_tier")));
  EXPECT_EQ(error_of(with(R"("sla_class":"diamond")")),
            std::make_pair(400, std::string("sla_class")));
  EXPECT_EQ(error_of(with(R"("ttft_deadline_ms":0)")).second, "ttft_deadline_ms");
}

TEST_F(ApiTest, BadFieldsAreRefusedNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("temperature":"hot")", "temperature"},
      {R"("temperature":-1)", "temperature"},
      {R"("max_tokens":0)", "max_tokens"},
      {R"("max_tokens":1.5)", "max_tokens"},
      {R"("top_p":0)", "top_p"},
      {R"("top_k":-2)", "top_k"},
      {R"("stop":[1])", "stop"},
      {R"("stop":"")", "stop"},
      {R"("stream":1)", "stream"},
      {R"("n":3)", "n"},
      {R"("seed":"x")", "seed"},
      {R"("presence_penalty":3)", "presence_penalty"},
      {R"("stream_options":{"include_usage":true})", "stream_options"},
      {R"("response_format":{"type":"json_schema"})", "response_format"},
      {R"("tools":[{"type":"function"}])", "tools"},
      {R"("tool_choice":"auto")", "tool_choice"},
      {R"("logit_bias":{"1":2})", "logit_bias"},
      {R"("logprobs":1)", "logprobs"},
      {R"("top_logprobs":3)", "top_logprobs"},
      {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
      {R"("audio":{"voice":"x"})", "audio"},
      {R"("modalities":["text","audio"])", "modalities"},
      {R"("model":"gpt-4o")", "model"},
  };
  for (const auto& [fields, param] : cases) {
    auto [status, got] = error_of(with(fields));
    EXPECT_EQ(got, param) << fields;
    EXPECT_EQ(status, param == "model" ? 404 : 400) << fields;
  }
  // What is allowed stays allowed: text response_format, empty tools, n = 1, logprobs false.
  EXPECT_NO_THROW(
      chat(with(R"("response_format":{"type":"text"},"tools":[],"n":1,"logprobs":false)")));
  // Log-probabilities: off, the token's own, with alternatives; the completions API's integer.
  EXPECT_EQ(chat(kHello).request.sampling.logprobs, -1);
  EXPECT_EQ(chat(with(R"("logprobs":true)")).request.sampling.logprobs, 0);
  EXPECT_EQ(chat(with(R"("logprobs":true,"top_logprobs":5)")).request.sampling.logprobs, 5);
  EXPECT_EQ(parse_request(R"({"prompt":"x","logprobs":3})", Endpoint::kCompletion, opt)
                .request.sampling.logprobs,
            3);
  // Unknown fields are ignored, as the OpenAI API does.
  EXPECT_NO_THROW(chat(with(R"("frobnicate":{"a":[1,2]},"metadata":{"k":"v"})")));
}

TEST_F(ApiTest, MessagesAndParts) {
  EXPECT_EQ(error_of("[]").first, 400);
  EXPECT_EQ(error_of("{").first, 400);
  EXPECT_EQ(error_of(std::string(200, '[') + std::string(200, ']')).first, 400);
  EXPECT_EQ(error_of(R"({"messages":[]})").second, "messages");
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user"}]})").second, "messages[0].content");
  EXPECT_EQ(error_of(R"({"messages":[{"role":7,"content":"x"}]})").second, "messages[0].role");
  EXPECT_EQ(error_of(R"({"messages":[{"role":"tool","content":"x"}]})").second, "messages[0].role");
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":[{"type":"input_audio"}]}]})").second,
            "messages[0].content[0].input_audio");
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":[{"type":"video_url"}]}]})").second,
            "messages[0].content[0].video_url");
  EXPECT_EQ(
      error_of(
          R"({"messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"data:image/png;base64,AA=="}}]}]})")
          .second,
      "messages[0].content[0].video_url");
  EXPECT_EQ(
      error_of(R"({"messages":[{"role":"user","content":[{"type":"text","text":5}]}]})").second,
      "messages[0].content[0].text");
  // developer is system; an assistant message may have no content.
  ParsedRequest p = chat(
      R"({"messages":[{"role":"developer","content":"be brief"},{"role":"assistant","content":null},)"
      R"({"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})");
  ASSERT_EQ(p.request.messages.size(), 3u);
  EXPECT_EQ(p.request.messages[0].role, "system");
  EXPECT_TRUE(p.request.messages[1].content.empty());
  EXPECT_EQ(p.request.messages[2].content.size(), 2u);
}

// An independent encoder (the test's own) for the decoder under test.
std::string encode64(const std::vector<uint8_t>& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = in[i] << 16;
    if (i + 1 < in.size()) v |= in[i + 1] << 8;
    if (i + 2 < in.size()) v |= in[i + 2];
    out += t[(v >> 18) & 63];
    out += t[(v >> 12) & 63];
    out += i + 1 < in.size() ? t[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? t[v & 63] : '=';
  }
  return out;
}

TEST(Base64, Rfc4648VectorsAndRandomRoundTrips) {
  auto dec = [](const std::string& s) {
    auto v = decode_base64(s, 1 << 20, "p");
    return std::string(v.begin(), v.end());
  };
  EXPECT_EQ(dec("Zg=="), "f");
  EXPECT_EQ(dec("Zm8="), "fo");
  EXPECT_EQ(dec("Zm9v"), "foo");
  EXPECT_EQ(dec("Zm9vYg=="), "foob");
  EXPECT_EQ(dec("Zm9vYmE="), "fooba");
  EXPECT_EQ(dec("Zm9vYmFy"), "foobar");
  EXPECT_EQ(dec("Zm9v\r\nYmFy"), "foobar");  // MIME line breaks
  EXPECT_EQ(dec("Zm9vYg"), "foob");          // padding optional
  std::mt19937 rng(7);
  for (int n = 1; n < 200; ++n) {
    std::vector<uint8_t> bytes(static_cast<size_t>(n));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    EXPECT_EQ(decode_base64(encode64(bytes), 1 << 20, "p"), bytes) << n;
  }
  // Line breaks anywhere (the fast path takes whole groups of four; a group with a break goes
  // one character at a time) and the URL-safe alphabet decode the same bytes.
  for (int n = 1; n < 300; n += 7) {
    std::vector<uint8_t> bytes(static_cast<size_t>(n));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    std::string e = encode64(bytes), broken;
    for (char c : e) {
      if (rng() % 5 == 0) broken += rng() % 2 ? "\r\n" : "\n";
      broken += c == '+' ? '-' : c == '/' ? '_' : c;
    }
    EXPECT_EQ(decode_base64(broken, 1 << 20, "p"), bytes) << broken;
  }
  try {
    decode_base64("Zm9vYmFy" + std::string("YW!j"), 100, "p");
    FAIL() << "a bad character";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("at offset 10"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("p: ", 0), 0u) << "names the field first: " << e.what();
  }
  EXPECT_THROW(decode_base64("Zm9v!", 100, "p"), ApiError);
  EXPECT_THROW(decode_base64("Zm9vY", 100, "p"), ApiError);  // truncated after a group
  EXPECT_THROW(decode_base64("Z", 100, "p"), ApiError);      // truncated
  EXPECT_THROW(decode_base64("", 100, "p"), ApiError);
  try {
    decode_base64(std::string(4000, 'A'), 1000, "p");
    FAIL() << "over the cap";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 413);
  }
}

TEST_F(ApiTest, ImageUrls) {
  auto img = [](const std::string& url) {
    return R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":")" +
           url + R"("}},{"type":"text","text":"what"}]}]})";
  };
  ParsedRequest p = chat(img("data:image/png;base64,Zm9vYmFy"));
  ASSERT_EQ(p.request.media.size(), 1u);
  EXPECT_EQ(std::string(p.request.media[0].bytes.begin(), p.request.media[0].bytes.end()),
            "foobar");
  EXPECT_EQ(p.request.messages[0].content[0].kind, models::ContentPart::Kind::kImage);
  EXPECT_EQ(error_of(img("data:text/plain;base64,Zm9v")).first, 400);
  EXPECT_EQ(error_of(img("data:image/png,raw")).first, 400);
  EXPECT_EQ(error_of(img("ftp://x/y.png")).first, 400);
  p = chat(img("https://example.com/a.png"));
  ASSERT_EQ(p.fetches.size(), 1u);
  EXPECT_EQ(p.fetches[0].url, "https://example.com/a.png");
  EXPECT_EQ(p.fetches[0].index, 0u);
  // Local files: refused without --allowed-media-dir, and outside it.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("mmrt_api_" + std::to_string(::getpid()));
  fs::create_directories(dir / "in");
  std::ofstream(dir / "in" / "a.png") << "PNGBYTES";
  std::ofstream(dir / "b.png") << "OUTSIDE";
  EXPECT_EQ(error_of(img("file://" + (dir / "in" / "a.png").string())).first, 403);
  opt.allowed_media_dir = (dir / "in").string();
  p = chat(img("file://" + (dir / "in" / "a.png").string()));
  EXPECT_EQ(std::string(p.request.media[0].bytes.begin(), p.request.media[0].bytes.end()),
            "PNGBYTES");
  EXPECT_EQ(error_of(img("file://" + (dir / "b.png").string())).first, 403);
  EXPECT_EQ(error_of(img("file://" + (dir / "in" / ".." / "b.png").string())).first, 403);
  EXPECT_EQ(error_of(img("file://" + (dir / "in" / "missing.png").string())).first, 404);
  // A relative path would resolve against the server's working directory: refused (400) even
  // where it would land inside the allowed folder; file://localhost/... is the absolute form.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  const auto relative = error_of(img("file://in/a.png"));
  fs::current_path(cwd);
  EXPECT_EQ(relative.first, 400);
  p = chat(img("file://localhost" + (dir / "in" / "a.png").string()));
  EXPECT_EQ(p.request.media.size(), 1u);
  // Media count cap.
  opt.max_media_items = 1;
  std::string two = R"({"messages":[{"role":"user","content":[)"
                    R"({"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},)"
                    R"({"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]})";
  EXPECT_EQ(error_of(two).first, 400);
  fs::remove_all(dir);
}

// A chat whose user message holds `parts` (JSON) and a text part.
std::string user_parts(const std::string& parts) {
  return R"({"messages":[{"role":"user","content":[)" + parts +
         R"(,{"type":"text","text":"what"}]}]})";
}
std::string input_audio(const std::string& fields) {
  return R"({"type":"input_audio","input_audio":{)" + fields + "}}";
}
std::string audio_url(const std::string& url) {
  return R"({"type":"audio_url","audio_url":{"url":")" + url + R"("}})";
}

TEST_F(ApiTest, InputAudio) {
  // OpenAI's shape: base64 data and a format; every supported format name.
  for (const char* f : {"wav", "mp3", "flac", "ogg", "opus"}) {
    ParsedRequest p =
        chat(user_parts(input_audio(R"("data":"Zm9vYmFy","format":")" + std::string(f) + "\"")));
    ASSERT_EQ(p.request.media.size(), 1u) << f;
    EXPECT_EQ(p.request.media[0].modality, models::Modality::kAudio);
    EXPECT_EQ(std::string(p.request.media[0].bytes.begin(), p.request.media[0].bytes.end()),
              "foobar");
    ASSERT_EQ(p.request.messages[0].content.size(), 2u);
    EXPECT_EQ(p.request.messages[0].content[0].kind, models::ContentPart::Kind::kAudio);
    EXPECT_EQ(p.request.messages[0].content[1].kind, models::ContentPart::Kind::kText);
    EXPECT_EQ(p.media_parts, std::vector<std::string>{"messages[0].content[0]"});
    EXPECT_TRUE(p.fetches.empty());
  }
  // Every bad field is named by its path.
  const std::string at = "messages[0].content[0].input_audio";
  const std::vector<std::pair<std::string, std::pair<int, std::string>>> cases = {
      {R"({"type":"input_audio"})", {400, at}},
      {R"({"type":"input_audio","input_audio":"Zm9v"})", {400, at}},
      {input_audio(R"("data":"Zm9v")"), {400, at + ".format"}},
      {input_audio(R"("data":"Zm9v","format":7)"), {400, at + ".format"}},
      {input_audio(R"("data":"Zm9v","format":"aac")"), {400, at + ".format"}},
      {input_audio(R"("data":"Zm9v","format":"WAV ")"), {400, at + ".format"}},
      {input_audio(R"("format":"wav")"), {400, at + ".data"}},
      {input_audio(R"("data":null,"format":"wav")"), {400, at + ".data"}},
      {input_audio(R"("data":["Zm9v"],"format":"wav")"), {400, at + ".data"}},
      {input_audio(R"("data":"Zm9v!","format":"wav")"), {400, at + ".data"}},
      {input_audio(R"("data":"","format":"wav")"), {400, at + ".data"}},
      {input_audio(R"("data":"Z","format":"wav")"), {400, at + ".data"}},
      // A data URL where raw base64 belongs is not base64.
      {input_audio(R"("data":"data:audio/wav;base64,Zm9v","format":"wav")"), {400, at + ".data"}},
  };
  for (const auto& [part, want] : cases) EXPECT_EQ(error_of(user_parts(part)), want) << part;
  // The byte cap, as for images: 413 naming the field.
  opt.max_media_bytes = 100;
  EXPECT_EQ(error_of(user_parts(
                input_audio(R"("data":")" + std::string(400, 'A') + R"(","format":"wav")"))),
            std::make_pair(413, at + ".data"));
}

TEST_F(ApiTest, AudioUrls) {
  ParsedRequest p = chat(user_parts(audio_url("data:audio/wav;base64,Zm9vYmFy")));
  ASSERT_EQ(p.request.media.size(), 1u);
  EXPECT_EQ(p.request.media[0].modality, models::Modality::kAudio);
  EXPECT_EQ(std::string(p.request.media[0].bytes.begin(), p.request.media[0].bytes.end()),
            "foobar");
  EXPECT_EQ(p.request.messages[0].content[0].kind, models::ContentPart::Kind::kAudio);
  for (const char* mime : {"audio/mpeg", "audio/x-wav", "audio/flac", "audio/ogg"})
    EXPECT_NO_THROW(chat(user_parts(audio_url(std::string("data:") + mime + ";base64,AAAA"))))
        << mime;
  const std::string at = "messages[0].content[0].audio_url";
  EXPECT_EQ(error_of(user_parts(audio_url("data:image/png;base64,Zm9v"))), std::make_pair(400, at));
  EXPECT_EQ(error_of(user_parts(audio_url("data:audio/wav,raw"))), std::make_pair(400, at));
  EXPECT_EQ(error_of(user_parts(audio_url("data:audio/wav;base64,@@@@"))), std::make_pair(400, at));
  EXPECT_EQ(error_of(user_parts(audio_url("ftp://x/a.wav"))), std::make_pair(400, at));
  EXPECT_EQ(error_of(user_parts(R"({"type":"audio_url"})")), std::make_pair(400, at));
  EXPECT_EQ(error_of(user_parts(R"({"type":"audio_url","audio_url":{"url":5}})")),
            std::make_pair(400, at));
  // An image data URL may not carry audio either.
  EXPECT_EQ(error_of(user_parts(
                R"({"type":"image_url","image_url":{"url":"data:audio/wav;base64,AAAA"}})")),
            std::make_pair(400, std::string("messages[0].content[0].image_url")));
  // http(s): left for the caller to fetch, its error naming the part.
  p = chat(user_parts(R"({"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},)" +
                      audio_url("http://127.0.0.1:9/a.wav")));
  ASSERT_EQ(p.request.media.size(), 2u);
  EXPECT_EQ(p.request.media[0].modality, models::Modality::kImage);
  EXPECT_EQ(p.request.media[1].modality, models::Modality::kAudio);
  EXPECT_TRUE(p.request.media[1].bytes.empty());
  ASSERT_EQ(p.fetches.size(), 1u);
  EXPECT_EQ(p.fetches[0].index, 1u);
  EXPECT_EQ(p.fetches[0].url, "http://127.0.0.1:9/a.wav");
  EXPECT_EQ(p.fetches[0].param, "messages[0].content[1].audio_url");
  EXPECT_EQ(p.media_parts,
            (std::vector<std::string>{"messages[0].content[0]", "messages[0].content[1]"}));
  // Local files under --allowed-media-dir only, as for images.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("mmrt_api_audio_" + std::to_string(::getpid()));
  fs::create_directories(dir / "in");
  std::ofstream(dir / "in" / "a.wav") << "RIFFBYTES";
  std::ofstream(dir / "b.wav") << "OUTSIDE";
  EXPECT_EQ(error_of(user_parts(audio_url("file://" + (dir / "in" / "a.wav").string()))),
            std::make_pair(403, at));
  opt.allowed_media_dir = (dir / "in").string();
  p = chat(user_parts(audio_url("file://" + (dir / "in" / "a.wav").string())));
  EXPECT_EQ(std::string(p.request.media[0].bytes.begin(), p.request.media[0].bytes.end()),
            "RIFFBYTES");
  EXPECT_EQ(error_of(user_parts(audio_url("file://" + (dir / "b.wav").string()))).first, 403);
  EXPECT_EQ(
      error_of(user_parts(audio_url("file://" + (dir / "in" / ".." / "b.wav").string()))).first,
      403);
  EXPECT_EQ(error_of(user_parts(audio_url("file://" + (dir / "in" / "no.wav").string()))).first,
            404);
  fs::remove_all(dir);
}

TEST_F(ApiTest, AudioOnlyInUserMessagesAndCountedAsMedia) {
  for (const char* role : {"system", "assistant", "developer"}) {
    const std::string body = std::string(R"({"messages":[{"role":")") + role + R"(","content":[)" +
                             input_audio(R"("data":"AAAA","format":"wav")") +
                             R"(]},{"role":"user","content":"hi"}]})";
    EXPECT_EQ(error_of(body), std::make_pair(400, std::string("messages[0].content[0]"))) << role;
  }
  const std::string audio = input_audio(R"("data":"AAAA","format":"wav")");
  const std::string url = audio_url("data:audio/wav;base64,AAAA");
  const std::string image =
      R"({"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}})";
  opt.max_media_items = 3;
  EXPECT_EQ(chat(user_parts(audio + "," + url + "," + image)).request.media.size(), 3u);
  // The fourth item, whichever its kind, is over the cap and named.
  for (const std::string& extra : {audio, url, image})
    EXPECT_EQ(error_of(user_parts(image + "," + audio + "," + url + "," + extra)),
              std::make_pair(400, std::string("messages[0].content[3]")))
        << extra;
  // Across messages too.
  const std::string two_msgs = R"({"messages":[{"role":"user","content":[)" + audio + "," + audio +
                               R"(]},{"role":"assistant","content":"ok"},)"
                               R"({"role":"user","content":[)" +
                               url + "," + url + "]}]}";
  EXPECT_EQ(error_of(two_msgs), std::make_pair(400, std::string("messages[2].content[1]")));
  opt.max_media_items = 0;
  EXPECT_EQ(error_of(user_parts(audio)).first, 400);
}

TEST_F(ApiTest, CompletionPrompts) {
  auto parse = [&](const std::string& b) { return parse_request(b, Endpoint::kCompletion, opt); };
  EXPECT_EQ(parse(R"({"prompt":"Once"})").request.prompt_text, "Once");
  EXPECT_EQ(parse(R"({"prompt":["Once"]})").request.prompt_text, "Once");
  EXPECT_EQ(parse(R"({"prompt":[1,2,3]})").request.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(error_of(R"({"prompt":["a","b"]})", Endpoint::kCompletion).second, "prompt");
  EXPECT_EQ(error_of(R"({"prompt":[1,-2]})", Endpoint::kCompletion).second, "prompt");
  EXPECT_EQ(error_of(R"({"prompt":""})", Endpoint::kCompletion).second, "prompt");
  EXPECT_EQ(error_of(R"({})", Endpoint::kCompletion).second, "prompt");
  EXPECT_EQ(error_of(R"({"prompt":"x","echo":true})", Endpoint::kCompletion).second, "echo");
}

TEST(ApiErrors, ShapeAndStatusMapping) {
  const std::string b = error_body(ApiError(400, "invalid_request_error", "bad \"x\"", "x"));
  EXPECT_EQ(
      b,
      R"({"error":{"code":null,"message":"bad \"x\"","param":"x","type":"invalid_request_error"}})");
  EXPECT_EQ(from_error_code(ErrorCode::kInvalidArgument, "m").status, 400);
  EXPECT_EQ(from_error_code(ErrorCode::kNotFound, "m").status, 404);
  EXPECT_EQ(from_error_code(ErrorCode::kFormat, "m").status, 422);
  EXPECT_EQ(from_error_code(ErrorCode::kResourceExhausted, "m").status, 413);
  EXPECT_EQ(from_error_code(ErrorCode::kUnavailable, "m").status, 503);
  EXPECT_EQ(from_error_code(ErrorCode::kUnimplemented, "m").status, 501);
  EXPECT_EQ(from_error_code(ErrorCode::kInternal, "m").status, 500);
  // An engine reason's code prefix (with_code) is the status and type, not the message's text.
  EXPECT_STREQ(from_error_code(ErrorCode::kFormat, with_code(ErrorCode::kFormat, "bad png")).what(),
               "bad png");
  EXPECT_STREQ(from_error_code(ErrorCode::kFormat, "unavailable: x").what(), "unavailable: x");
  EXPECT_STREQ(from_error_code(ErrorCode::kUnavailable, "unavailable: ").what(), "unavailable: ");
}

}  // namespace
}  // namespace mmrt::server
