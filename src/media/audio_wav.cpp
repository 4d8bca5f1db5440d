// The PCM16 WAV writer (media/audio.h).
#include <cstring>

#include "core/error.h"
#include "media/audio.h"

namespace mmrt::media {

std::vector<uint8_t> encode_wav_pcm16(std::span<const int16_t> interleaved, int32_t rate,
                                      int32_t channels) {
  if (channels < 1 || channels > 64 || interleaved.size() % static_cast<size_t>(channels) != 0)
    throw InvalidArgument("encode_wav_pcm16: " + std::to_string(interleaved.size()) +
                          " samples are not whole frames of " + std::to_string(channels) +
                          " channel(s)");
  if (rate < 1 || interleaved.size() * 2 > 0xFFFFFFFFu - 36)
    throw InvalidArgument("encode_wav_pcm16: a WAV holds at most 4 GiB at a positive rate");
  const auto data = static_cast<uint32_t>(interleaved.size() * 2);
  const auto ch = static_cast<uint32_t>(channels), r = static_cast<uint32_t>(rate);
  std::vector<uint8_t> w;
  w.reserve(44 + data);
  auto tag = [&](const char* s) {
    for (int i = 0; i < 4; ++i) w.push_back(static_cast<uint8_t>(s[i]));
  };
  auto le = [&](uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) w.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  tag("RIFF");
  le(36 + data, 4);
  tag("WAVE");
  tag("fmt ");
  le(16, 4);  // fmt chunk size
  le(1, 2);   // PCM
  le(ch, 2);
  le(r, 4);
  le(r * 2 * ch, 4);  // byte rate
  le(2 * ch, 2);      // block align
  le(16, 2);          // bits per sample
  tag("data");
  le(data, 4);
  for (int16_t s : interleaved) le(static_cast<uint16_t>(s), 2);
  return w;
}

}  // namespace mmrt::media
