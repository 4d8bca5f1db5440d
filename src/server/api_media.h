// The media content parts of a chat message (used by api.cpp), and the video options' JSON. Each
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
// A video_url part's options ({"prune_threshold", "fps", "nframes", "min_frames", "max_frames",
// "min_pixels", "max_pixels", "total_pixels"}; absent: the model's setting), each checked as
// models::validate does; ApiError 400 naming `param`.key. Also the encode workers' wire
// (cluster/encode_protocol.h).
models::MediaOptions parse_video_options(const nlohmann::json& u, const std::string& param);
// The same options as such an object (the ones set).
nlohmann::json video_options_json(const models::MediaOptions& o);
// {"type":"input_audio","input_audio":{"data": base64, "format": "wav"|...}} (OpenAI).
void add_input_audio(const nlohmann::json& part, const std::string& pw, const ApiOptions& opt,
                     ParsedRequest& out);
// {"type":"audio_url","audio_url":{"url": data:audio/... | http(s):// | file://}} (vLLM).
void add_audio_url(const nlohmann::json& part, const std::string& pw, const ApiOptions& opt,
                   ParsedRequest& out);

}  // namespace mmrt::server
