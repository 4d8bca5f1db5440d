// The OpenAI-compatible request surface: a /v1/chat/completions or /v1/completions body turned
// into an engine request (every field checked, errors naming the field), and the error shape the
// API answers with. Plain functions of their inputs: no I/O but reading local media files under
// the allowed directory; http(s) media URLs are returned for the caller to fetch.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace mmrt::server {

// An error the API answers with: HTTP status, OpenAI error type, the offending field.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = "",
           std::string code = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type, param, code;
  // 429 / 503: the Retry-After header (at least 1); < 0: none, and x-should-retry: false (the
  // same request is refused again).
  int retry_after_s = 0;
};

// A 400 invalid_request_error naming `param`.
ApiError bad_request(const std::string& message, const std::string& param = "");
// A 413 for a media item over the server's size cap (code media_too_large), whatever its source
// (base64 data, a local file, a fetched URL).
ApiError media_too_large(const std::string& message, const std::string& param);
// {"error":{"message","type","param","code"}} (param / code null when empty).
std::string error_body(const ApiError& e);
// The HTTP status and OpenAI type for an engine error code (core/error.h's mapping); the
// message is `reason` without the leading "<code name>: " of with_code, if it has one.
ApiError from_error_code(ErrorCode code, const std::string& reason);

struct ApiOptions {
  std::string model_id;                      // the one model served (the "model" field)
  const engine::SlaConfig* sla = nullptr;    // class names, the default class
  std::map<std::string, std::string> tiers;  // OpenAI service_tier -> SLA class
  int32_t default_max_tokens = 256;          // when the request gives none
  int32_t max_media_items = 16;              // media parts per request
  uint64_t max_media_bytes = 32ull << 20;    // one encoded media item (data URL, file, fetch)
  std::string allowed_media_dir;             // local files only under it ("": none)
};

// service_tier -> class defaults: "priority" platinum, "default" gold, "flex" silver (for the
// built-in classes; "auto" takes the default class).
std::map<std::string, std::string> default_tiers();
// The tiers a server takes: `tiers` (empty: default_tiers()) less those naming a class `sla`
// does not have (a custom SLA config).
std::map<std::string, std::string> tiers_for(const engine::SlaConfig& sla,
                                             std::map<std::string, std::string> tiers = {});

enum class Endpoint { kChat, kCompletion };

// A media item the caller must fetch before submitting (an http(s) URL): its bytes go to
// request.media[index].
struct MediaFetch {
  size_t index = 0;
  std::string url;
  std::string param;  // the field that named it, for the fetch's error
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChat;
  engine::GenerateRequest request;  // messages (chat) or prompt_text (completion), media, class
  std::vector<MediaFetch> fetches;
  // The content part of each media item ("messages[0].content[1]"), in request.media's order:
  // the caller names it when the model does not take the item's modality.
  std::vector<std::string> media_parts;
  bool stream = false, include_usage = false;
  bool stream_ids = false;      // mmrt_stream_ids: chunks carry their tokens' ids (mmrt_ids)
  std::string requested_class;  // the class asked for ("" only when the config has none)
  bool class_chosen = false;    // named (sla_class, service_tier)
  std::string user;
};

// JSON values a request body may hold (every scalar, array and object): parsed JSON takes
// 16-100 bytes a value, so this bounds a body's parsed form to ~25 MB whatever its size (a
// 62 MB body of small values took 1.3 GB). A chat request with a long conversation holds a few
// thousand.
inline constexpr size_t kMaxBodyJsonValues = 1 << 18;

// Parses and checks a request body. Throws ApiError (400 naming the field, 404 for another model,
// 413 for media over the byte cap). JSON nesting and the number of values are bounded (while
// parsing, before memory is spent). Media parts (user messages only, at most max_media_items):
// image_url, input_audio and audio_url.
ParsedRequest parse_request(std::string_view body, Endpoint endpoint, const ApiOptions& opt);
// The same for a body already parsed within those bounds (a router that read it: routing.h).
ParsedRequest parse_request_json(const nlohmann::json& body, Endpoint endpoint,
                                 const ApiOptions& opt);

// The request's class as parse_request reads it (sla_class, service_tier, ttft_deadline_ms; the
// config's default when it names none): what a router needs to predict for it. ApiError as
// parse_request gives it.
struct RequestClass {
  std::string sla_class;  // "" only when the config has none
  bool chosen = false;    // named by the request (else a tenant's default class applies)
  int64_t ttft_deadline_ns = 0;
};
RequestClass parse_request_class(const nlohmann::json& body, const ApiOptions& opt);

// Strict base64 (RFC 4648, padding optional, no whitespace but line breaks); nullopt-like:
// throws ApiError naming `param` when the text is not base64 or decodes to more than `max`
// (the server option that sets `max`, when given, is named too).
std::vector<uint8_t> decode_base64(std::string_view text, uint64_t max, const std::string& param,
                                   const char* option = nullptr);

}  // namespace mmrt::server
