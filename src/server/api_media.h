// Internal to the server module (api.cpp): the media content parts of a chat message. Each
// appends one item to the request's media (and its part path), decoding a data URL or base64
// here, reading a local file under the allowed directory, or leaving an http(s) URL for the
// caller to fetch. Every error is an ApiError naming the field path of the part.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/api.h"

namespace mmrt::server {

// The audio formats `input_audio.format` may name (OpenAI: wav, mp3; mmrt's decoder also reads
// FLAC and Ogg Vorbis / Opus): "wav, mp3, flac, ogg, opus".
const char* supported_audio_formats();

// {"type":"image_url","image_url":{"url": data:image/... | http(s):// | file://}}; `pw` is the
// part's path ("messages[0].content[1]").
void add_image_url(const nlohmann::json& part, const std::string& pw, const ApiOptions& opt,
                   ParsedRequest& out);
// {"type":"video_url","video_url":{"url": data:video/... | http(s):// | file://}} (vLLM), and
// mmrt's "prune_threshold" (0-255, the approximate temporal tier for that video).
void add_video_url(const nlohmann::json& part, const std::string& pw, const ApiOptions& opt,
                   ParsedRequest& out);
// {"type":"input_audio","input_audio":{"data": base64, "format": "wav"|...}} (OpenAI).
void add_input_audio(const nlohmann::json& part, const std::string& pw, const ApiOptions& opt,
                     ParsedRequest& out);
// {"type":"audio_url","audio_url":{"url": data:audio/... | http(s):// | file://}} (vLLM).
void add_audio_url(const nlohmann::json& part, const std::string& pw, const ApiOptions& opt,
                   ParsedRequest& out);

}  // namespace mmrt::server
