// Decoding audio files to mono float32 at the model's sample rate, as the Hugging Face audio
// processors receive it from `librosa.load(path, sr=16000)`: WAV, FLAC, Ogg/Vorbis, Ogg/Opus and
// MP3 through libsndfile (from memory, no temporary file), channels downmixed by their mean
// (librosa's to_mono), resampled with libsoxr at its HQ quality (librosa's default resampler is
// soxr "HQ"). The format comes from the magic bytes, the length from the header, and files over
// the byte or duration limits are refused before any sample is decoded. Every problem with the
// input is thrown as a core/error.h type naming it; nothing aborts.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace mmrt::media {

enum class AudioFormat : uint8_t { kUnknown, kWav, kFlac, kOgg, kMp3 };

std::string_view audio_format_name(AudioFormat f);  // "WAV", "FLAC", "Ogg", "MP3", "unknown"
// Looks only at the leading bytes (RIFF/WAVE, fLaC, OggS, ID3 or an MPEG frame sync).
AudioFormat detect_audio_format(std::span<const uint8_t> bytes);

struct AudioDecodeOptions {
  int32_t target_rate = 16000;     // output sample rate (Hz), 8000..192000
  double max_seconds = 600.0;      // refuse longer audio (ResourceExhausted), checked on the header
  uint64_t max_bytes = 64u << 20;  // refuse larger files (ResourceExhausted)
  int32_t max_channels = 32;       // refuse more channels (FormatError); 1..1024
};

struct AudioInfo {
  AudioFormat format = AudioFormat::kUnknown;
  std::string_view codec;   // "PCM 16-bit", "float 32-bit", "FLAC", "Vorbis", "Opus", "MP3", ...
  int32_t sample_rate = 0;  // as stored
  int32_t channels = 0;
  int64_t frames = 0;  // samples per channel, as the header states them
  double seconds() const { return sample_rate > 0 ? static_cast<double>(frames) / sample_rate : 0; }
  // Samples per channel after resampling to `rate` (what decode_audio returns for this file;
  // for MP3, at most that).
  int64_t frames_at(int32_t rate) const;
};

// Where decode_audio spent its time, for per-stage metrics.
struct AudioDecodeTimes {
  int64_t decode_ns = 0;    // the file to mono samples at its own rate
  int64_t resample_ns = 0;  // to the target rate
};

// Parses the header only; throws the same errors as decode_audio for a bad header or an
// over-limit file (damage past the header shows only when decoding).
AudioInfo probe_audio(std::span<const uint8_t> bytes, const AudioDecodeOptions& opts = {});

// Full decode: mono float32 samples at opts.target_rate (length info.frames_at(target_rate)).
// Truncated and corrupt streams are refused (FormatError), not returned short, except MP3, whose
// header length is an estimate (a Xing/LAME header, else the first frame's bitrate): an MP3
// decodes what its frames hold, never more than that estimate (libsndfile does not read past
// it, and neither does librosa through soundfile), so it can come back shorter.
std::vector<float> decode_audio(std::span<const uint8_t> bytes, const AudioDecodeOptions& opts = {},
                                AudioDecodeTimes* times = nullptr);

// A 16-bit PCM WAV (44-byte header, little endian) of interleaved samples: how the Realtime
// session hands its items to the engine, and what benchmarks and tests write. InvalidArgument
// for samples that are not whole frames, a rate < 1 or more than 4 GiB.
std::vector<uint8_t> encode_wav_pcm16(std::span<const int16_t> interleaved, int32_t rate,
                                      int32_t channels = 1);

// Mono resampling with libsoxr HQ (one thread), rates 1..768000. The output length is librosa's,
// ceil(in * (to / from)) in double (soxr's own round(in * to / from) samples, zero-padded as
// librosa's fix_length does): the exact integer ceiling for the usual rates into 16 kHz, one more
// for a few pairs such as 44100 -> 48000. from == to copies. Throws InvalidArgument for a bad rate.
std::vector<float> resample_audio(std::span<const float> in, int32_t from_rate, int32_t to_rate);

}  // namespace mmrt::media
