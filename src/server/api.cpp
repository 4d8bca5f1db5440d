#include "server/api.h"

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "io/file.h"
#include "io/json_fields.h"
#include "server/api_media.h"

namespace mmrt::server {
namespace {

using nlohmann::json;

std::string ticked(std::string_view s) {
  std::string out = "`";
  out += s.size() > 64 ? std::string(s.substr(0, 64)) + "..." : std::string(s);
  return out + "`";
}

// Typed getters over the request object: a present field of the wrong type or range is a 400
// naming it; absent (or null) fields give nullopt.
class Fields {
 public:
  explicit Fields(const json& obj) : o_(obj) {}
  const json* get(const char* k) const {
    auto it = o_.find(k);
    return it == o_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<bool> boolean(const char* k) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw bad_request(std::string("`") + k + "` must be a boolean", k);
    return v->get<bool>();
  }
  std::optional<double> number(const char* k, double lo, double hi) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw bad_request(std::string("`") + k + "` must be a number", k);
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      throw bad_request(std::string("`") + k + "` is " + io::json_excerpt(*v) +
                            "; it must be in [" + fmt(lo) + ", " + fmt(hi) + "]",
                        k);
    return x;
  }
  std::optional<int64_t> integer(const char* k, int64_t lo, int64_t hi) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    int64_t x = 0;
    if (v->is_number_integer())
      x = v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX ? INT64_MAX : v->get<int64_t>();
    else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e18)
      x = static_cast<int64_t>(v->get<double>());
    else
      throw bad_request(std::string("`") + k + "` must be an integer", k);
    if (x < lo || x > hi)
      throw bad_request(std::string("`") + k + "` is " + std::to_string(x) + "; it must be in [" +
                            std::to_string(lo) + ", " + std::to_string(hi) + "]",
                        k);
    return x;
  }
  std::optional<std::string> string(const char* k) const {
    const json* v = get(k);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw bad_request(std::string("`") + k + "` must be a string", k);
    return v->get<std::string>();
  }

 private:
  static std::string fmt(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return b;
  }
  const json& o_;
};

// Known OpenAI fields mmrt cannot honour: refused, never silently ignored.
void refuse_unsupported(const json& o) {
  auto present = [&](const char* k) {
    auto it = o.find(k);
    return it != o.end() && !it->is_null();
  };
  auto refuse = [](const char* k, const std::string& what) {
    throw bad_request("`" + std::string(k) + "` " + what + " is not supported by this server", k);
  };
  if (present("response_format")) {
    const json& rf = o["response_format"];
    const std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string()
                                 ? rf["type"].get<std::string>()
                                 : "";
    if (type != "text") refuse("response_format", type.empty() ? "(malformed)" : ticked(type));
  }
  if (present("tools") && !(o["tools"].is_array() && o["tools"].empty()))
    refuse("tools", "(tool calling)");
  if (present("functions")) refuse("functions", "(function calling)");
  if (present("function_call")) refuse("function_call", "(function calling)");
  if (present("tool_choice") && o["tool_choice"] != "none") refuse("tool_choice", "(tool calling)");
  if (present("logit_bias") && !(o["logit_bias"].is_object() && o["logit_bias"].empty()))
    refuse("logit_bias", "(token biases)");
  if (present("audio")) refuse("audio", "(audio output)");
  if (present("modalities") && o["modalities"].is_array())
    for (const auto& m : o["modalities"])
      if (m != "text") refuse("modalities", "other than [\"text\"]");
  if (present("echo") && o["echo"] != false) refuse("echo", "(echoing the prompt)");
  if (present("suffix")) refuse("suffix", "(insertion)");
  if (present("best_of") && o["best_of"] != 1) refuse("best_of", "other than 1");
  if (present("min_tokens") && o["min_tokens"] != 0) refuse("min_tokens", "(a minimum length)");
}

// Chat: "logprobs": true with "top_logprobs": 0..20; completions: "logprobs": 0..20 (the
// legacy integer, alternatives per token).
void parse_logprobs(const Fields& f, Endpoint ep, engine::SamplingParams& sp) {
  if (ep == Endpoint::kChat) {
    const bool on = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, 20);
    if (top && !on) throw bad_request("`top_logprobs` needs `logprobs`: true", "top_logprobs");
    sp.logprobs = on ? static_cast<int32_t>(top.value_or(0)) : -1;
  } else {
    const json* v = f.get("logprobs");
    if (v && v->is_boolean()) {
      sp.logprobs = v->get<bool>() ? 0 : -1;
    } else if (auto n = f.integer("logprobs", 0, 20)) {
      sp.logprobs = static_cast<int32_t>(*n);
    }
  }
}

void parse_sampling(const Fields& f, const ApiOptions& opt, engine::SamplingParams& sp) {
  sp.max_tokens = opt.default_max_tokens;
  if (auto v = f.integer("max_tokens", 1, 1 << 24)) sp.max_tokens = static_cast<int32_t>(*v);
  if (auto v = f.integer("max_completion_tokens", 1, 1 << 24))
    sp.max_tokens = static_cast<int32_t>(*v);
  if (auto v = f.number("temperature", 0, 100)) sp.temperature = static_cast<float>(*v);
  if (auto v = f.number("top_p", 0, 1)) {
    if (*v <= 0) throw bad_request("`top_p` must be in (0, 1]", "top_p");
    sp.top_p = static_cast<float>(*v);
  }
  if (auto v = f.integer("top_k", -1, 1 << 24)) sp.top_k = static_cast<int32_t>(*v < 0 ? 0 : *v);
  if (auto v = f.number("min_p", 0, 1)) sp.min_p = static_cast<float>(*v);
  if (auto v = f.integer("seed", INT64_MIN, INT64_MAX)) sp.seed = static_cast<uint64_t>(*v);
  if (auto v = f.number("presence_penalty", -2, 2)) sp.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) sp.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.number("repetition_penalty", 0.01, 100))
    sp.repetition_penalty = static_cast<float>(*v);
  if (auto v = f.boolean("ignore_eos")) sp.ignore_eos = *v;
  if (const json* s = f.get("stop")) {
    if (s->is_string()) {
      sp.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= 16) {
      for (const auto& x : *s) {
        if (!x.is_string()) throw bad_request("`stop` entries must be strings", "stop");
        sp.stop.push_back(x.get<std::string>());
      }
    } else {
      throw bad_request("`stop` must be a string or a list of at most 16 strings", "stop");
    }
    for (const auto& x : sp.stop)
      if (x.empty() || x.size() > 256)
        throw bad_request("`stop` strings must hold 1 to 256 bytes", "stop");
  }
  if (const json* s = f.get("stop_token_ids")) {
    if (!s->is_array() || s->size() > 256)
      throw bad_request("`stop_token_ids` must be a list of at most 256 integers",
                        "stop_token_ids");
    for (const auto& x : *s) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        throw bad_request("`stop_token_ids` entries must be token ids", "stop_token_ids");
      sp.stop_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
  }
  if (auto n = f.integer("n", INT64_MIN, INT64_MAX); n && *n != 1)
    throw bad_request("`n` is " + std::to_string(*n) +
                          ": this server generates one choice per request (n = 1); send the "
                          "request n times with different seeds instead",
                      "n");
  try {
    sp.validate();
  } catch (const Error& e) {
    throw bad_request(e.what());
  }
}

models::ChatMessage parse_message(const json& m, size_t i, const ApiOptions& opt,
                                  ParsedRequest& out) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) throw bad_request(where + " must be an object", where);
  if (!m.contains("role") || !m["role"].is_string())
    throw bad_request(where + ".role must be a string", where + ".role");
  models::ChatMessage msg;
  msg.role = m["role"].get<std::string>();
  if (msg.role == "developer") msg.role = "system";
  if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
    throw bad_request(where + ".role " + ticked(msg.role) +
                          " is not supported (system, developer, user, assistant)",
                      where + ".role");
  if (m.contains("tool_calls") && !m["tool_calls"].is_null())
    throw bad_request(where + ".tool_calls: tool calling is not supported by this server",
                      where + ".tool_calls");
  const json* c = m.contains("content") ? &m["content"] : nullptr;
  if (!c || c->is_null()) {
    if (msg.role != "assistant")
      throw bad_request(where + ".content is missing", where + ".content");
    return msg;
  }
  if (c->is_string()) {
    msg.content.push_back({models::ContentPart::Kind::kText, c->get<std::string>()});
    return msg;
  }
  if (!c->is_array())
    throw bad_request(where + ".content must be a string or a list of parts", where + ".content");
  for (size_t k = 0; k < c->size(); ++k) {
    const json& part = (*c)[k];
    const std::string pw = where + ".content[" + std::to_string(k) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      throw bad_request(pw + " must be an object with a string `type`", pw + ".type");
    const std::string type = part["type"].get<std::string>();
    if (type == "text") {
      if (!part.contains("text") || !part["text"].is_string())
        throw bad_request(pw + ".text must be a string", pw + ".text");
      msg.content.push_back({models::ContentPart::Kind::kText, part["text"].get<std::string>()});
    } else if (type == "image_url" || type == "video_url" || type == "input_audio" ||
               type == "audio_url") {
      const auto kind = type == "image_url"   ? models::ContentPart::Kind::kImage
                        : type == "video_url" ? models::ContentPart::Kind::kVideo
                                              : models::ContentPart::Kind::kAudio;
      if (msg.role != "user")
        throw bad_request(pw + ": " +
                              (kind == models::ContentPart::Kind::kImage   ? "images are"
                               : kind == models::ContentPart::Kind::kVideo ? "videos are"
                                                                           : "audio is") +
                              " accepted in user messages only",
                          pw);
      if (static_cast<int32_t>(out.request.media.size()) >= opt.max_media_items)
        throw bad_request("the request holds more than " + std::to_string(opt.max_media_items) +
                              " media items (the server's --max-media-items)",
                          pw);
      if (type == "image_url")
        add_image_url(part, pw, opt, out);
      else if (type == "video_url")
        add_video_url(part, pw, opt, out);
      else if (type == "input_audio")
        add_input_audio(part, pw, opt, out);
      else
        add_audio_url(part, pw, opt, out);
      msg.content.push_back({kind, ""});
      // mmrt's extension (docs/video.md): {"video_url": {..., "continues": true}}, the next
      // segment of the video part right before it (a streamed clip sent as a growing request).
      if (type == "video_url" && part["video_url"].is_object() &&
          part["video_url"].contains("continues")) {
        const json& c = part["video_url"]["continues"];
        if (!c.is_boolean())
          throw bad_request(pw + ".video_url.continues must be true or false",
                            pw + ".video_url.continues");
        const bool prev_video =
            msg.content.size() >= 2 &&
            msg.content[msg.content.size() - 2].kind == models::ContentPart::Kind::kVideo;
        if (c.get<bool>() && !prev_video)
          throw bad_request(pw + ".video_url.continues: a continuing video must follow a video "
                                 "part of the same message",
                            pw + ".video_url.continues");
        msg.content.back().continues = c.get<bool>();
      }
    } else {
      throw bad_request(pw + ": unknown content part type " + ticked(type), pw + ".type");
    }
  }
  return msg;
}

void parse_sla(const Fields& f, const ApiOptions& opt, ParsedRequest& out) {
  const engine::SlaConfig& sla = *opt.sla;
  std::string cls = sla.default_class;
  bool chosen = false;  // a class named by the request
  if (auto tier = f.string("service_tier"); tier && *tier != "auto") {
    auto it = opt.tiers.find(*tier);
    if (it == opt.tiers.end()) {
      std::string known;
      for (const auto& [k, v] : opt.tiers) known += (known.empty() ? "" : ", ") + k;
      throw bad_request("`service_tier` " + ticked(*tier) + " is not one of: auto" +
                            (known.empty() ? "" : ", " + known),
                        "service_tier");
    }
    cls = it->second;
    chosen = true;
  }
  if (auto c = f.string("sla_class")) {
    if (sla.index_of(*c) < 0) {
      std::string known;
      for (const auto& k : sla.classes) known += (known.empty() ? "" : ", ") + k.name;
      throw bad_request("`sla_class` " + ticked(*c) + " is not one of: " + known, "sla_class");
    }
    cls = *c;
    chosen = true;
  }
  if (auto ms = f.number("ttft_deadline_ms", 0, 3.6e6)) {
    if (*ms <= 0) throw bad_request("`ttft_deadline_ms` must be positive", "ttft_deadline_ms");
    // It tightens the class's promise (the one named, else the tenant's or the server's
    // default), never replaces it: the class's rule and the tenant's classes still apply (a
    // deadline without a class used to escape both).
    out.request.ttft_deadline_ns = static_cast<int64_t>(*ms * 1e6);
  }
  if (auto ms = f.number("tpot_target_ms", 0, 3.6e6)) {
    if (*ms <= 0) throw bad_request("`tpot_target_ms` must be positive", "tpot_target_ms");
    out.request.tpot_target_ns = static_cast<int64_t>(*ms * 1e6);  // tightens, as the deadline
  }
  out.class_chosen = chosen;
  out.request.sla_class = sla.index_of(cls) >= 0 ? cls : "";
  out.requested_class = out.request.sla_class;
  if (auto p = f.integer("priority", -1000000, 1000000))
    out.request.priority = static_cast<int32_t>(*p);
}

}  // namespace

ApiError bad_request(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", message, param);
}

ApiError media_too_large(const std::string& message, const std::string& param) {
  return ApiError(413, "invalid_request_error", message, param, "media_too_large");
}

std::string error_body(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiError from_error_code(ErrorCode code, const std::string& reason) {
  // The engine's reasons name their code first (with_code), for logs and traces; the client's
  // error carries it as its status and type instead.
  std::string message = reason;
  const std::string prefix = std::string(error_code_name(code)) + ": ";
  if (message.size() > prefix.size() && message.compare(0, prefix.size(), prefix) == 0)
    message.erase(0, prefix.size());
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return ApiError(400, "invalid_request_error", message);
    case ErrorCode::kNotFound:
      return ApiError(404, "not_found_error", message);
    case ErrorCode::kFormat:
      return ApiError(422, "invalid_request_error", message, "", "unprocessable_media");
    case ErrorCode::kFailedPrecondition:
      return ApiError(412, "invalid_request_error", message);
    case ErrorCode::kResourceExhausted:
      return ApiError(413, "invalid_request_error", message, "", "over_limit");
    case ErrorCode::kUnavailable:
      return ApiError(503, "unavailable_error", message);
    case ErrorCode::kUnimplemented:
      return ApiError(501, "not_implemented_error", message);
    case ErrorCode::kInternal:
      break;
  }
  return ApiError(500, "server_error", message);
}

std::map<std::string, std::string> default_tiers() {
  return {{"priority", "platinum"}, {"default", "gold"}, {"flex", "silver"}};
}

std::map<std::string, std::string> tiers_for(const engine::SlaConfig& sla,
                                             std::map<std::string, std::string> tiers) {
  if (tiers.empty()) tiers = default_tiers();
  for (auto it = tiers.begin(); it != tiers.end();)
    it = sla.index_of(it->second) < 0 ? tiers.erase(it) : std::next(it);
  return tiers;
}

namespace {

// Base64 digit values (both alphabets: + / and - _), line breaks to skip, anything else invalid.
constexpr int8_t kB64Bad = -1, kB64Skip = -2;
constexpr std::array<int8_t, 256> kB64 = [] {
  std::array<int8_t, 256> t{};
  t.fill(kB64Bad);
  for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<size_t>(c)] = static_cast<int8_t>(c - 'A');
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<size_t>(c)] = static_cast<int8_t>(c - 'a' + 26);
  for (int c = '0'; c <= '9'; ++c) t[static_cast<size_t>(c)] = static_cast<int8_t>(c - '0' + 52);
  t['+'] = t['-'] = 62;
  t['/'] = t['_'] = 63;
  t['\n'] = t['\r'] = kB64Skip;
  return t;
}();

}  // namespace

std::vector<uint8_t> decode_base64(std::string_view text, uint64_t max, const std::string& param,
                                   const char* option) {
  while (!text.empty() && (text.back() == '=' || text.back() == '\n' || text.back() == '\r'))
    text.remove_suffix(1);
  // The errors' messages name the field first (built only when one is thrown).
  auto at = [&](const std::string& what) { return param.empty() ? what : param + ": " + what; };
  auto too_large = [&] {
    return media_too_large(at("a base64 media item decodes to more than " + io::format_bytes(max) +
                              (option ? std::string(" (the server's ") + option + ")" : "")),
                           param);
  };
  // Before the allocation, from the text's length: line breaks (MIME wraps lines at 76
  // characters) make it up to ~3 % longer than the digits, so the bound leaves them room; the
  // decoded size is checked exactly below.
  if (text.size() / 4 * 3 > max + max / 32 + 3) throw too_large();
  std::vector<uint8_t> out(text.size() / 4 * 3 + 3);
  uint8_t* o = out.data();
  size_t n = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  while (i < size) {
    // Whole groups of four digits at once (an image's data: URL is nothing else); a group with
    // a line break or a bad character goes one character at a time below.
    if (bits == 0) {
      while (i + 4 <= size) {
        const int a = kB64[p[i]], b = kB64[p[i + 1]], c = kB64[p[i + 2]], d = kB64[p[i + 3]];
        if ((a | b | c | d) < 0) break;
        const uint32_t v = static_cast<uint32_t>(a << 18 | b << 12 | c << 6 | d);
        o[n] = static_cast<uint8_t>(v >> 16);
        o[n + 1] = static_cast<uint8_t>(v >> 8);
        o[n + 2] = static_cast<uint8_t>(v);
        n += 3;
        i += 4;
      }
      if (i >= size) break;
    }
    const int v = kB64[p[i]];
    if (v == kB64Bad)
      throw bad_request(
          at("the base64 data holds an invalid character at offset " + std::to_string(i)), param);
    ++i;
    if (v == kB64Skip) continue;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      o[n++] = static_cast<uint8_t>(acc >> bits);
      if (bits == 0) acc = 0;
    }
  }
  if (bits >= 6) throw bad_request(at("the base64 data is truncated"), param);
  out.resize(n);
  if (out.size() > max) throw too_large();
  if (out.empty()) throw bad_request(at("the base64 data is empty"), param);
  return out;
}

// mmrt's stream resumption (docs/scale-out.md): `mmrt_stream_ids` puts each chunk's token ids in
// it (`mmrt_ids`), `mmrt_resume_ids` continues a stream from the ids it had delivered.
void parse_resumption(const Fields& f, ParsedRequest& out) {
  out.stream_ids = f.boolean("mmrt_stream_ids").value_or(false);
  if (out.stream_ids && !out.stream)
    throw bad_request("`mmrt_stream_ids` is only allowed when `stream` is true", "mmrt_stream_ids");
  const json* r = f.get("mmrt_resume_ids");
  if (!r) return;
  if (!r->is_array() || r->size() >= static_cast<size_t>(out.request.sampling.max_tokens))
    throw bad_request("`mmrt_resume_ids` must be a list of fewer token ids than max_tokens",
                      "mmrt_resume_ids");
  for (const json& t : *r) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      throw bad_request("`mmrt_resume_ids` entries must be token ids", "mmrt_resume_ids");
    out.request.resume_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
}

ParsedRequest parse_request(std::string_view body, Endpoint endpoint, const ApiOptions& opt) {
  json o;
  try {
    o = io::parse_json(body, "the request body", kMaxBodyJsonValues);
  } catch (const Error& e) {
    throw bad_request(e.what());
  }
  return parse_request_json(o, endpoint, opt);
}

RequestClass parse_request_class(const json& body, const ApiOptions& opt) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  ParsedRequest p;
  parse_sla(Fields(body), opt, p);
  return {p.request.sla_class, p.class_chosen, p.request.ttft_deadline_ns};
}

ParsedRequest parse_request_json(const json& o, Endpoint endpoint, const ApiOptions& opt) {
  if (!o.is_object()) throw bad_request("the request body must be a JSON object");
  ParsedRequest out;
  out.endpoint = endpoint;
  const Fields f(o);
  if (auto m = f.string("model"); m && *m != opt.model_id)
    throw ApiError(404, "not_found_error", "The model " + ticked(*m) + " does not exist.", "model",
                   "model_not_found");
  refuse_unsupported(o);
  out.stream = f.boolean("stream").value_or(false);
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) throw bad_request("`stream_options` must be an object", "stream_options");
    if (!out.stream)
      throw bad_request("`stream_options` is only allowed when `stream` is true", "stream_options");
    const Fields sf(*so);
    out.include_usage = sf.boolean("include_usage").value_or(false);
  }
  out.user = f.string("user").value_or("");
  parse_sampling(f, opt, out.request.sampling);
  parse_resumption(f, out);
  parse_logprobs(f, endpoint, out.request.sampling);
  parse_sla(f, opt, out);
  if (endpoint == Endpoint::kChat) {
    const json* msgs = f.get("messages");
    if (!msgs || !msgs->is_array() || msgs->empty())
      throw bad_request("`messages` must be a non-empty list", "messages");
    for (size_t i = 0; i < msgs->size(); ++i)
      out.request.messages.push_back(parse_message((*msgs)[i], i, opt, out));
  } else {
    const json* p = f.get("prompt");
    if (!p) throw bad_request("`prompt` is missing", "prompt");
    const json* one = p;
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) one = &(*p)[0];
    if (one->is_string()) {
      out.request.prompt_text = one->get<std::string>();
      if (out.request.prompt_text.empty()) throw bad_request("`prompt` is empty", "prompt");
    } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
      for (const auto& t : *p) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
          throw bad_request("`prompt` token ids must be non-negative integers", "prompt");
        out.request.prompt_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
    } else if (p->is_array() && p->size() > 1) {
      throw bad_request("`prompt` holds " + std::to_string(p->size()) +
                            " prompts: this server takes one prompt per request",
                        "prompt");
    } else {
      throw bad_request("`prompt` must be a string or a list of token ids", "prompt");
    }
  }
  return out;
}

}  // namespace mmrt::server
