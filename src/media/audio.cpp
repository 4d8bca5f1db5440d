// Audio files from memory through libsndfile: format detection, the header checks made before
// any sample is decoded, and the bounded decode + downmix. Resampling is in audio_resample.cpp.
//
// libsndfile reads the bytes through SF_VIRTUAL_IO callbacks over the caller's span: no file and
// no I/O of ours (the media worker runs this under a seccomp allow-list of compute + memory
// calls). libsndfile and its codecs make a few calls of their own that the worker's filter has to
// answer: openat (a resource-fork probe, refused), sysinfo (libvorbis' qsort), and write(2) on
// stderr: mpg123 prints warnings for damaged MP3 streams ("Xing stream size off", "Trying to
// resync") and libsndfile does not set MPG123_QUIET.
#include <sndfile.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "core/error.h"
#include "media/audio.h"
#include "media/audio_internal.h"

namespace mmrt::media {
namespace {

constexpr int32_t kMaxFileRate = 768000;  // sample rates above this are not audio files we take
constexpr const char* kSupported = "WAV, FLAC, Ogg (Vorbis, Opus), MP3";

std::string fmt_seconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

// ---------------------------------------------------------------- virtual I/O over a span
struct MemoryFile {
  const uint8_t* data;
  sf_count_t size;
  sf_count_t pos;
};

sf_count_t vio_length(void* user) {
  return static_cast<MemoryFile*>(user)->size;
}

sf_count_t vio_seek(sf_count_t offset, int whence, void* user) {
  MemoryFile& f = *static_cast<MemoryFile*>(user);
  sf_count_t base = 0;
  if (whence == SEEK_CUR)
    base = f.pos;
  else if (whence == SEEK_END)
    base = f.size;
  else if (whence != SEEK_SET)
    return -1;
  // Offsets come from the file: refuse what would overflow or land before the start.
  if ((offset > 0 && base > std::numeric_limits<sf_count_t>::max() - offset) || base + offset < 0)
    return -1;
  f.pos = std::min(base + offset, f.size);
  return f.pos;
}

sf_count_t vio_read(void* ptr, sf_count_t count, void* user) {
  MemoryFile& f = *static_cast<MemoryFile*>(user);
  if (count <= 0 || f.pos >= f.size) return 0;
  const sf_count_t n = std::min(count, f.size - f.pos);
  std::memcpy(ptr, f.data + f.pos, static_cast<size_t>(n));
  f.pos += n;
  return n;
}

sf_count_t vio_write(const void*, sf_count_t, void*) {
  return 0;  // read-only
}

sf_count_t vio_tell(void* user) {
  return static_cast<MemoryFile*>(user)->pos;
}

struct SndfileCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

std::string_view codec_name(int format) {
  const int major = format & SF_FORMAT_TYPEMASK;
  if (major == SF_FORMAT_FLAC) return "FLAC";
  switch (format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_PCM_S8:
      return "PCM 8-bit";
    case SF_FORMAT_PCM_U8:
      return "PCM 8-bit unsigned";
    case SF_FORMAT_PCM_16:
      return "PCM 16-bit";
    case SF_FORMAT_PCM_24:
      return "PCM 24-bit";
    case SF_FORMAT_PCM_32:
      return "PCM 32-bit";
    case SF_FORMAT_FLOAT:
      return "float 32-bit";
    case SF_FORMAT_DOUBLE:
      return "float 64-bit";
    case SF_FORMAT_ULAW:
      return "u-law";
    case SF_FORMAT_ALAW:
      return "A-law";
    case SF_FORMAT_IMA_ADPCM:
      return "IMA ADPCM";
    case SF_FORMAT_MS_ADPCM:
      return "MS ADPCM";
    case SF_FORMAT_GSM610:
      return "GSM 6.10";
    case SF_FORMAT_VORBIS:
      return "Vorbis";
    case SF_FORMAT_OPUS:
      return "Opus";
    case SF_FORMAT_MPEG_LAYER_I:
      return "MP1";
    case SF_FORMAT_MPEG_LAYER_II:
      return "MP2";
    case SF_FORMAT_MPEG_LAYER_III:
      return "MP3";
    default:
      return "other";
  }
}

// libsndfile also guesses from the content; the container it found must be the one the magic
// bytes named (an ID3 tag in front of a FLAC stream is not an MP3).
bool container_matches(AudioFormat f, int sf_format) {
  const int major = sf_format & SF_FORMAT_TYPEMASK;
  switch (f) {
    case AudioFormat::kWav:
      return major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX;
    case AudioFormat::kFlac:
      return major == SF_FORMAT_FLAC;
    case AudioFormat::kOgg:
      return major == SF_FORMAT_OGG;
    case AudioFormat::kMp3:
      return major == SF_FORMAT_MPEG;
    case AudioFormat::kUnknown:
      break;
  }
  return false;
}

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The WAV header as the file states it: the last "fmt " chunk before the data chunk, and the data
// chunk's stated size. Read here, before libsndfile opens the file, so that a header stating an
// impossible layout (0 or 65535 channels, a 0 or 4 GHz rate) is refused with its reason, and one
// stating more audio than the limit is refused by its stated duration: libsndfile refuses the
// first without saying why, and silently shortens a data chunk that runs past the end of the file
// to what is there (which is also how truncation is found: the stated size against the bytes).
struct WavHeader {
  bool has_fmt = false, has_data = false;
  uint32_t tag = 0, channels = 0, rate = 0, block_align = 0;
  uint64_t data_size = 0;  // as stated
  bool data_known =
      false;  // not 0 or 0xFFFFFFFF, the "size unknown" values streaming writers leave
  bool data_complete = true;  // the stated size is present in the file
  // PCM, float and law codings, where a frame is block_align bytes.
  bool framed() const {
    return (tag == 1 || tag == 3 || tag == 6 || tag == 7 || tag == 0xFFFE) && block_align > 0;
  }
};

WavHeader parse_wav_header(std::span<const uint8_t> b) {
  WavHeader h;
  uint64_t pos = 12;
  while (pos + 8 <= b.size()) {
    const uint8_t* c = b.data() + pos;
    const uint64_t size = le32(c + 4);
    if (std::memcmp(c, "fmt ", 4) == 0 && size >= 14 && pos + 8 + 14 <= b.size()) {
      h.has_fmt = true;
      h.tag = uint32_t(c[8]) | uint32_t(c[9]) << 8;
      h.channels = uint32_t(c[10]) | uint32_t(c[11]) << 8;
      h.rate = le32(c + 12);
      h.block_align = uint32_t(c[20]) | uint32_t(c[21]) << 8;
    } else if (std::memcmp(c, "data", 4) == 0) {
      h.has_data = true;
      h.data_size = size;
      h.data_known = size != 0 && size != 0xFFFFFFFFu;
      h.data_complete = !h.data_known || pos + 8 + size <= b.size();
      break;
    }
    pos += 8 + size + (size & 1);
  }
  return h;
}

// Ogg's page checksum: CRC-32, polynomial 0x04C11DB7, not reflected, initial value 0.
struct OggCrcTable {
  uint32_t t[256];
  constexpr OggCrcTable() : t() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t r = i << 24;
      for (int k = 0; k < 8; ++k) r = (r & 0x80000000u) ? (r << 1) ^ 0x04C11DB7u : r << 1;
      t[i] = r;
    }
  }
};
constexpr OggCrcTable kOggCrc;

// Ogg pages back to back to the end of the file, each with a matching checksum. libsndfile
// 1.2.0 leaks the Vorbis decoder state (vorbis_info, ~6 KB a file) when a header page is damaged
// or the last page is cut off, so a broken page chain is refused here, before it opens the file
// (libogg would drop a page with a bad checksum anyway). Returns the offset of the first bad
// page, or -1.
int64_t ogg_bad_page(std::span<const uint8_t> b) {
  uint64_t pos = 0;
  while (pos < b.size()) {
    if (pos + 27 > b.size() || std::memcmp(b.data() + pos, "OggS", 4) != 0 || b[pos + 4] != 0)
      return static_cast<int64_t>(pos);
    const uint64_t n_seg = b[pos + 26];
    if (pos + 27 + n_seg > b.size()) return static_cast<int64_t>(pos);
    uint64_t body = 0;
    for (uint64_t i = 0; i < n_seg; ++i) body += b[pos + 27 + i];
    const uint64_t end = pos + 27 + n_seg + body;
    if (end > b.size()) return static_cast<int64_t>(pos);
    uint32_t crc = 0;
    for (uint64_t i = pos; i < end; ++i) {
      const uint8_t v = (i >= pos + 22 && i < pos + 26) ? 0 : b[i];  // the checksum field as 0
      crc = (crc << 8) ^ kOggCrc.t[(crc >> 24) ^ v];
    }
    if (crc != le32(b.data() + pos + 22)) return static_cast<int64_t>(pos);
    pos = end;
  }
  return -1;
}

// What a file that is not audio is, when it is something common: said in the message, since
// the usual cause is a file given to the wrong option.
std::string not_audio_hint(std::span<const uint8_t> b) {
  auto starts = [&](const char* magic, size_t n, size_t at = 0) {
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  if (starts("\x89PNG", 4)) return ": the file is a PNG image, not audio";
  if (starts("\xFF\xD8\xFF", 3)) return ": the file is a JPEG image, not audio";
  if (starts("RIFF", 4) && starts("WEBP", 4, 8)) return ": the file is a WebP image, not audio";
  if (starts("GIF8", 4)) return ": the file is a GIF image, not audio";
  if (starts("RIFF", 4)) return ": a RIFF file that is not WAVE";
  return "";
}

void check_options(const AudioDecodeOptions& o) {
  if (o.target_rate < 8000 || o.target_rate > 192000)
    throw InvalidArgument("audio: target_rate " + std::to_string(o.target_rate) +
                          " Hz is outside 8000..192000");
  if (!(o.max_seconds > 0) || !std::isfinite(o.max_seconds))
    throw InvalidArgument("audio: max_seconds must be a positive number");
  if (o.max_bytes == 0) throw InvalidArgument("audio: max_bytes must be positive");
  if (o.max_channels < 1 || o.max_channels > 1024)
    throw InvalidArgument("audio: max_channels " + std::to_string(o.max_channels) +
                          " is outside 1..1024");
}

// An open file whose header passed every check.
struct OpenAudio {
  MemoryFile mem;
  SndfilePtr file;
  AudioInfo info;
};

void open_checked(std::span<const uint8_t> bytes, const AudioDecodeOptions& opts, OpenAudio& a) {
  check_options(opts);
  if (bytes.size() > opts.max_bytes)
    throw ResourceExhausted("audio: the file has " + std::to_string(bytes.size()) +
                            " bytes, over the limit of " + std::to_string(opts.max_bytes));
  if (bytes.empty()) throw FormatError("audio: empty input (0 bytes): no audio samples");
  const AudioFormat format = detect_audio_format(bytes);
  if (format == AudioFormat::kUnknown)
    throw FormatError("audio: unknown format" + not_audio_hint(bytes) +
                      " (supported: " + std::string(kSupported) + ")");
  const std::string what = "audio (" + std::string(audio_format_name(format)) + ")";
  if (format == AudioFormat::kWav && bytes.size() < 12)
    throw FormatError(what + ": truncated header");
  WavHeader wav;
  if (format == AudioFormat::kWav) {
    wav = parse_wav_header(bytes);
    if (wav.has_fmt && (wav.channels < 1 || wav.channels > uint32_t(opts.max_channels)))
      throw FormatError(what + ": " + std::to_string(wav.channels) + " channels (supported: 1.." +
                        std::to_string(opts.max_channels) + ")");
    if (wav.has_fmt && (wav.rate < 1 || wav.rate > uint32_t(kMaxFileRate)))
      throw FormatError(what + ": sample rate " + std::to_string(wav.rate) + " Hz is outside 1.." +
                        std::to_string(kMaxFileRate));
    if (wav.has_fmt && wav.has_data && wav.data_known && wav.framed()) {
      const uint64_t frames = wav.data_size / wav.block_align;
      const double seconds = static_cast<double>(frames) / wav.rate;
      if (seconds > opts.max_seconds)
        throw ResourceExhausted(what + ": the audio lasts " + fmt_seconds(seconds) + " (header: " +
                                std::to_string(frames) + " frames at " + std::to_string(wav.rate) +
                                " Hz), over the limit of " + fmt_seconds(opts.max_seconds));
    }
  }
  if (format == AudioFormat::kOgg) {
    const int64_t bad = ogg_bad_page(bytes);
    if (bad >= 0)
      throw FormatError(what + ": truncated or damaged page at byte " + std::to_string(bad));
  }

  a.mem = MemoryFile{bytes.data(), static_cast<sf_count_t>(bytes.size()), 0};
  SF_VIRTUAL_IO vio{vio_length, vio_seek, vio_read, vio_write, vio_tell};
  SF_INFO sfi;
  std::memset(&sfi, 0, sizeof sfi);
  a.file.reset(sf_open_virtual(&vio, SFM_READ, &sfi, &a.mem));
  // (sf_strerror(nullptr) reads libsndfile's process-wide last error: not used.)
  if (!a.file) {
    const char* why = "";
    if (format == AudioFormat::kWav && !wav.has_fmt)
      why = ": no complete 'fmt ' chunk before the data";
    else if (format == AudioFormat::kWav && !wav.has_data)
      why = ": no 'data' chunk";
    throw FormatError(what + ": malformed header" + why + " (libsndfile cannot open it)");
  }
  if (!container_matches(format, sfi.format))
    throw FormatError(what + ": the content is not a " + std::string(audio_format_name(format)) +
                      " stream");

  AudioInfo& info = a.info;
  info.format = format;
  info.codec = codec_name(sfi.format);
  info.sample_rate = sfi.samplerate;
  info.channels = sfi.channels;
  info.frames = sfi.frames;
  if (sfi.channels < 1 || sfi.channels > opts.max_channels)
    throw FormatError(what + ": " + std::to_string(sfi.channels) + " channels (supported: 1.." +
                      std::to_string(opts.max_channels) + ")");
  if (sfi.samplerate < 1 || sfi.samplerate > kMaxFileRate)
    throw FormatError(what + ": sample rate " + std::to_string(sfi.samplerate) +
                      " Hz is outside 1.." + std::to_string(kMaxFileRate));
  if (sfi.frames == SF_COUNT_MAX)
    throw FormatError(what + ": the stream has no readable end (truncated?): length unknown");
  if (sfi.frames <= 0) throw FormatError(what + ": no audio samples");
  // Duration from the header, before anything is decoded (MP3: libsndfile's estimate, the most
  // it will decode).
  const double seconds = static_cast<double>(sfi.frames) / sfi.samplerate;
  if (seconds > opts.max_seconds)
    throw ResourceExhausted(what + ": the audio lasts " + fmt_seconds(seconds) +
                            ", over the limit of " + fmt_seconds(opts.max_seconds));
  if (format == AudioFormat::kWav && !wav.data_complete) {
    if (!wav.framed())
      throw FormatError(what + ": truncated: the data chunk runs past the end of the file");
    throw FormatError(what + ": truncated: header says " +
                      std::to_string(wav.data_size / wav.block_align) + " frames, " +
                      std::to_string(sfi.frames) + " decoded");
  }
}

}  // namespace

std::string_view audio_format_name(AudioFormat f) {
  switch (f) {
    case AudioFormat::kWav:
      return "WAV";
    case AudioFormat::kFlac:
      return "FLAC";
    case AudioFormat::kOgg:
      return "Ogg";
    case AudioFormat::kMp3:
      return "MP3";
    case AudioFormat::kUnknown:
      break;
  }
  return "unknown";
}

AudioFormat detect_audio_format(std::span<const uint8_t> b) {
  auto starts = [&](const char* magic, size_t n, size_t at = 0) {
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  if (starts("RIFF", 4) && starts("WAVE", 4, 8)) return AudioFormat::kWav;
  if (starts("fLaC", 4)) return AudioFormat::kFlac;
  if (starts("OggS", 4)) return AudioFormat::kOgg;
  if (starts("ID3", 3)) return AudioFormat::kMp3;
  // An MPEG audio frame header: 11 sync bits, a version other than "reserved" (01), a layer
  // other than "reserved" (00; that is also ADTS AAC), a bitrate index other than 15 and a
  // sample-rate index other than 3.
  if (b.size() >= 4 && b[0] == 0xFF && (b[1] & 0xE0) == 0xE0) {
    const int version = (b[1] >> 3) & 3, layer = (b[1] >> 1) & 3;
    const int bitrate = b[2] >> 4, rate = (b[2] >> 2) & 3;
    if (version != 1 && layer != 0 && bitrate != 15 && rate != 3) return AudioFormat::kMp3;
  }
  return AudioFormat::kUnknown;
}

AudioInfo probe_audio(std::span<const uint8_t> bytes, const AudioDecodeOptions& opts) {
  OpenAudio a;
  open_checked(bytes, opts, a);
  return a.info;
}

namespace detail {

// librosa's to_mono, np.mean(y, axis=0) over float32 [channels, n]: the channel values summed in
// float32 in channel order, then divided by the count in float32. numpy sums a reduction of up
// to 8 values in order; above 8 channels its pairwise blocks may round differently (one ulp).
void downmix_mean(const float* interleaved, int64_t frames, int channels, float* out) {
  if (channels == 1) {
    std::memcpy(out, interleaved, static_cast<size_t>(frames) * sizeof(float));
    return;
  }
  const float n = static_cast<float>(channels);
  for (int64_t i = 0; i < frames; ++i) {
    const float* f = interleaved + i * channels;
    float s = f[0];
    for (int c = 1; c < channels; ++c) s += f[c];
    out[i] = s / n;
  }
}

}  // namespace detail

std::vector<float> decode_audio(std::span<const uint8_t> bytes, const AudioDecodeOptions& opts,
                                AudioDecodeTimes* times) {
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                t)
        .count();
  };
  OpenAudio a;
  open_checked(bytes, opts, a);
  const AudioInfo& info = a.info;
  const std::string what = "audio (" + std::string(audio_format_name(info.format)) + ")";
  const int channels = info.channels;
  // Chunks of at most 64 Ki samples; the mono buffer grows with what really decodes (a header
  // may promise more than the file holds), never past the checked header count, which
  // libsndfile does not read beyond.
  const int64_t chunk = std::max<int64_t>(1, 65536 / channels);
  std::vector<float> buf(static_cast<size_t>(chunk * channels));
  std::vector<float> mono;
  mono.reserve(static_cast<size_t>(std::min<int64_t>(info.frames, int64_t{1} << 20)));
  int64_t done = 0;
  while (done < info.frames) {
    const int64_t want = std::min(chunk, info.frames - done);
    const sf_count_t got = sf_readf_float(a.file.get(), buf.data(), want);
    if (got <= 0) break;
    mono.resize(static_cast<size_t>(done + got));
    detail::downmix_mean(buf.data(), got, channels, mono.data() + done);
    done += got;
  }
  if (done < info.frames) {
    // MP3 lengths are estimates (a Xing/LAME header, else the first frame's bitrate): what
    // decodes is the audio. Everywhere else a short stream is a broken file.
    if (info.format != AudioFormat::kMp3 || done == 0)
      throw FormatError(what + ": truncated: header says " + std::to_string(info.frames) +
                        " frames, " + std::to_string(done) + " decoded");
  }
  a.file.reset();
  // Float codings can hold NaN and infinity (and a channel mean can overflow): refused here, by
  // where they are, rather than by the log-mel after resampling has spread them.
  auto first_bad = [](const std::vector<float>& v) {
    return std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); }) - v.begin();
  };
  if (const int64_t i = first_bad(mono); i < static_cast<int64_t>(mono.size()))
    throw FormatError(what + ": frame " + std::to_string(i) + " (at " +
                      fmt_seconds(static_cast<double>(i) / info.sample_rate) +
                      ") is not a finite number (NaN or infinity)");
  if (times) times->decode_ns = since(t0);
  if (info.sample_rate == opts.target_rate) return mono;
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<float> out = resample_audio(mono, info.sample_rate, opts.target_rate);
  if (times) times->resample_ns = since(t1);
  if (first_bad(out) < static_cast<int64_t>(out.size()))
    throw FormatError(what + ": the samples overflow float32 when resampled (values near " +
                      "3.4e38)");
  return out;
}

}  // namespace mmrt::media
