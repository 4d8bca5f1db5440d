// Audio decoding, resampling and the Whisper log-mel extractor, without Python: files are written
// here (by hand, or with libsndfile into memory), expected values come from first principles
// (PCM scaling, the downmix rule, the spec's filterbank formulas, a pure tone's windowed DFT).
// The comparisons with numpy / torchaudio / soundfile / scipy are in test_audio_ref.cpp.
#include <gtest/gtest.h>

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/isa.h"
#include "expect_error.h"
#include "media/audio.h"
#include "media/mel.h"

using namespace mmrt;
using namespace mmrt::media;

namespace {

using Bytes = std::vector<uint8_t>;

void put(Bytes& b, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// A canonical WAV: fmt tag 1 (PCM16) or 3 (float32); `frames_stated` goes into the data chunk's
// size (defaults to what is written).
Bytes wav(const std::vector<float>& interleaved, int channels, int rate, bool as_float,
          int64_t frames_stated = -1) {
  const int bps = as_float ? 4 : 2;
  const size_t frames = interleaved.size() / channels;
  const uint64_t stated = frames_stated < 0 ? frames : static_cast<uint64_t>(frames_stated);
  Bytes b(44 + interleaved.size() * bps);
  std::memcpy(&b[0], "RIFF", 4);
  put(b, 4, 36 + stated * channels * bps, 4);
  std::memcpy(&b[8], "WAVEfmt ", 8);
  put(b, 16, 16, 4);
  put(b, 20, as_float ? 3 : 1, 2);
  put(b, 22, channels, 2);
  put(b, 24, rate, 4);
  put(b, 28, static_cast<uint64_t>(rate) * channels * bps, 4);
  put(b, 32, channels * bps, 2);
  put(b, 34, bps * 8, 2);
  std::memcpy(&b[36], "data", 4);
  put(b, 40, stated * channels * bps, 4);
  for (size_t i = 0; i < interleaved.size(); ++i) {
    if (as_float) {
      uint32_t u;
      std::memcpy(&u, &interleaved[i], 4);
      put(b, 44 + 4 * i, u, 4);
    } else {
      put(b, 44 + 2 * i, static_cast<uint16_t>(static_cast<int16_t>(interleaved[i])), 2);
    }
  }
  return b;
}

// libsndfile writing into memory (SF_VIRTUAL_IO over a growable buffer).
struct MemOut {
  Bytes data;
  sf_count_t pos = 0;
};
Bytes encode(const std::vector<float>& interleaved, int channels, int rate, int format) {
  SF_VIRTUAL_IO io{
      [](void* u) -> sf_count_t { return static_cast<MemOut*>(u)->data.size(); },
      [](sf_count_t off, int whence, void* u) -> sf_count_t {
        MemOut& m = *static_cast<MemOut*>(u);
        m.pos = (whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m.pos : m.data.size()) + off;
        return m.pos;
      },
      [](void* p, sf_count_t n, void* u) -> sf_count_t {
        MemOut& m = *static_cast<MemOut*>(u);
        n = std::max<sf_count_t>(0, std::min<sf_count_t>(n, m.data.size() - m.pos));
        std::memcpy(p, m.data.data() + m.pos, n);
        m.pos += n;
        return n;
      },
      [](const void* p, sf_count_t n, void* u) -> sf_count_t {
        MemOut& m = *static_cast<MemOut*>(u);
        if (m.data.size() < static_cast<size_t>(m.pos + n)) m.data.resize(m.pos + n);
        std::memcpy(m.data.data() + m.pos, p, n);
        m.pos += n;
        return n;
      },
      [](void* u) -> sf_count_t { return static_cast<MemOut*>(u)->pos; }};
  MemOut out;
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  SNDFILE* f = sf_open_virtual(&io, SFM_WRITE, &info, &out);
  EXPECT_NE(f, nullptr) << sf_strerror(nullptr);
  if (!f) return {};
  sf_writef_float(f, interleaved.data(), static_cast<sf_count_t>(interleaved.size() / channels));
  sf_close(f);
  return out.data;
}

std::vector<float> tone(size_t n, double freq, int rate, double amp = 0.5) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(amp * std::sin(2 * M_PI * freq * i / rate));
  return x;
}

using media_test::expect_error;

struct Codec {
  const char* name;
  int format;
  AudioFormat detected;
  const char* codec;
};
const Codec kCodecs[] = {
    {"wav16", SF_FORMAT_WAV | SF_FORMAT_PCM_16, AudioFormat::kWav, "PCM 16-bit"},
    {"wav24", SF_FORMAT_WAV | SF_FORMAT_PCM_24, AudioFormat::kWav, "PCM 24-bit"},
    {"wavf", SF_FORMAT_WAV | SF_FORMAT_FLOAT, AudioFormat::kWav, "float 32-bit"},
    {"wavu8", SF_FORMAT_WAV | SF_FORMAT_PCM_U8, AudioFormat::kWav, "PCM 8-bit unsigned"},
    {"flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, AudioFormat::kFlac, "FLAC"},
    {"vorbis", SF_FORMAT_OGG | SF_FORMAT_VORBIS, AudioFormat::kOgg, "Vorbis"},
    {"opus", SF_FORMAT_OGG | SF_FORMAT_OPUS, AudioFormat::kOgg, "Opus"},
    {"mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, AudioFormat::kMp3, "MP3"},
};

TEST(AudioFormat, DetectsMagicBytes) {
  auto det = [](std::string_view s) {
    return detect_audio_format({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  };
  EXPECT_EQ(det(std::string_view("RIFF\0\0\0\0WAVEfmt ", 16)), AudioFormat::kWav);
  EXPECT_EQ(det(std::string_view("RIFF\0\0\0\0AVI LIST", 16)), AudioFormat::kUnknown);
  EXPECT_EQ(det("fLaC\0\0\0\x22"), AudioFormat::kFlac);
  EXPECT_EQ(det("OggS\0\x02"), AudioFormat::kOgg);
  EXPECT_EQ(det("ID3\x04\0"), AudioFormat::kMp3);
  EXPECT_EQ(det("\xFF\xFB\x90\x64"), AudioFormat::kMp3);      // MPEG-1 layer III
  EXPECT_EQ(det("\xFF\xF3\x48\xC4"), AudioFormat::kMp3);      // MPEG-2 layer III
  EXPECT_EQ(det("\xFF\xF1\x50\x80"), AudioFormat::kUnknown);  // ADTS AAC (layer 00)
  EXPECT_EQ(det("\xFF\xFB\xF0\x64"), AudioFormat::kUnknown);  // bitrate index 15
  EXPECT_EQ(det("\xFF\xFB\x9C\x64"), AudioFormat::kUnknown);  // sample-rate index 3
  EXPECT_EQ(det("RIF"), AudioFormat::kUnknown);
  EXPECT_EQ(det(""), AudioFormat::kUnknown);
  EXPECT_EQ(audio_format_name(AudioFormat::kOgg), "Ogg");
  EXPECT_EQ(audio_format_name(AudioFormat::kUnknown), "unknown");
}

TEST(AudioDecode, ProbesAndDecodesEveryFormat) {
  const int rate = 16000;
  const std::vector<float> x = tone(16000, 440, rate);
  for (const Codec& c : kCodecs) {
    SCOPED_TRACE(c.name);
    const int r = (c.format & SF_FORMAT_SUBMASK) == SF_FORMAT_OPUS ? 48000 : rate;
    const Bytes b = encode(x, 1, r, c.format);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(detect_audio_format(b), c.detected);
    const AudioInfo info = probe_audio(b);
    EXPECT_EQ(info.format, c.detected);
    EXPECT_EQ(info.codec, c.codec);
    EXPECT_EQ(info.sample_rate, r);
    EXPECT_EQ(info.channels, 1);
    EXPECT_EQ(info.frames, 16000);
    const std::vector<float> y = decode_audio(b);
    EXPECT_EQ(static_cast<int64_t>(y.size()), info.frames_at(16000));
    EXPECT_EQ(static_cast<int64_t>(y.size()), (16000 * 16000 + r - 1) / r);
    // Lossy codecs keep a 440 Hz tone close (the correlation with the input, after resampling).
    if (r == rate) {
      double dot = 0, xx = 0, yy = 0;
      for (size_t i = 2000; i < 14000; ++i)
        dot += x[i] * y[i], xx += x[i] * x[i], yy += y[i] * y[i];
      EXPECT_GT(dot / std::sqrt(xx * yy), 0.9);
    }
  }
}

TEST(AudioDecode, Pcm16IsScaledBy1Over32768) {
  std::vector<float> v = {0, 1, -1, 32767, -32768, 12345, -2};
  const std::vector<float> y = decode_audio(wav(v, 1, 16000, false));
  ASSERT_EQ(y.size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(y[i], v[i] / 32768.0f) << i;
}

TEST(AudioDecode, DownmixIsTheFloatMeanOfTheChannels) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int ch : {2, 3, 5}) {
    std::vector<float> x(1000 * ch);
    for (float& s : x) s = u(rng);
    AudioDecodeOptions o;
    o.target_rate = 8000;
    const std::vector<float> y = decode_audio(wav(x, ch, 8000, true), o);
    ASSERT_EQ(y.size(), 1000u);
    for (size_t i = 0; i < 1000; ++i) {
      float s = x[i * ch];  // numpy's np.mean in float32: summed in order, divided by the count
      for (int c = 1; c < ch; ++c) s += x[i * ch + c];
      ASSERT_EQ(y[i], s / static_cast<float>(ch)) << ch << " channels, frame " << i;
    }
  }
}

TEST(AudioDecode, LimitsAreCheckedOnTheHeader) {
  const Bytes ten_s = wav(std::vector<float>(10 * 8000, 0.0f), 1, 8000, false);
  AudioDecodeOptions o;
  o.max_bytes = 1000;
  expect_error<ResourceExhausted>([&] { probe_audio(ten_s, o); }, {"160044 bytes", "1000"});
  o = {};
  o.max_seconds = 2.5;
  expect_error<ResourceExhausted>([&] { decode_audio(ten_s, o); }, {"10.000 s", "2.500 s"});
  o = {};
  o.max_channels = 2;
  expect_error<FormatError>([&] { probe_audio(wav(std::vector<float>(30), 3, 8000, false), o); },
                            {"3 channels", "1..2"});
  Bytes rate = wav(std::vector<float>(100), 1, 8000, false);
  put(rate, 24, 1000000, 4);  // a sample rate over 768 kHz
  expect_error<FormatError>([&] { probe_audio(rate); }, {"WAV"});
  o = {};
  o.target_rate = 4000;
  expect_error<InvalidArgument>([&] { decode_audio(ten_s, o); }, {"target_rate", "4000"});
  o = {};
  o.max_seconds = std::nan("");
  expect_error<InvalidArgument>([&] { decode_audio(ten_s, o); }, {"max_seconds"});
}

TEST(AudioDecode, BrokenFilesAreFormatErrors) {
  const std::vector<float> x = tone(8000, 300, 8000, 0.4);
  // Data chunk stating 8000 frames, half of them present.
  Bytes cut = wav(std::vector<float>(8000, 100.0f), 1, 8000, false);
  cut.resize(44 + 4000 * 2);
  expect_error<FormatError>([&] { decode_audio(cut); },
                            {"truncated", "header says 8000 frames, 4000 decoded"});
  // A header that lies about the length allocates nothing for it: a billion frames is over the
  // duration limit by the stated size; 25 s, under it, is a truncated file.
  const Bytes lie = wav(std::vector<float>(100), 1, 8000, false, 1000000000);
  expect_error<ResourceExhausted>([&] { probe_audio(lie); },
                                  {"125000.000 s", "1000000000 frames at 8000 Hz", "600.000 s"});
  const Bytes short_lie = wav(std::vector<float>(100), 1, 8000, false, 200000);
  expect_error<FormatError>([&] { probe_audio(short_lie); },
                            {"truncated", "header says 200000 frames, 100 decoded"});
  expect_error<FormatError>([&] { decode_audio(wav({}, 1, 8000, false)); }, {"no audio samples"});
  expect_error<FormatError>([&] { decode_audio(Bytes{}); }, {"empty"});
  expect_error<FormatError>([&] { decode_audio(Bytes(100, 'x')); },
                            {"unknown format", "WAV, FLAC, Ogg", "MP3"});
  std::mt19937 rng(5);
  using namespace std::string_literals;
  for (const std::string& magic :
       {"RIFF\x10\0\0\0WAVE"s, "fLaC"s, "OggS"s, "ID3\x03\0\0\0\0\0\0"s}) {
    Bytes g(magic.begin(), magic.end());  // valid magic, then garbage (zeros after an ID3 tag)
    for (int i = 0; i < 400; ++i) g.push_back(magic[0] == 'I' ? 0 : static_cast<uint8_t>(rng()));
    expect_error<FormatError>([&] { decode_audio(g); }, {"audio ("});
  }
  // FLAC and Ogg cut short.
  for (int fmt : {SF_FORMAT_FLAC | SF_FORMAT_PCM_16, SF_FORMAT_OGG | SF_FORMAT_VORBIS}) {
    Bytes b = encode(x, 1, 8000, fmt);
    b.resize(b.size() / 2);
    EXPECT_THROW(decode_audio(b), FormatError);
  }
  // A FLAC whose STREAMINFO claims more samples than its frames hold.
  Bytes flac = encode(x, 1, 8000, SF_FORMAT_FLAC | SF_FORMAT_PCM_16);
  ASSERT_GT(flac.size(), 42u);
  const uint64_t more = 9000;  // 36 bits from byte 21 (low nibble) to 25 of STREAMINFO
  flac[21] = static_cast<uint8_t>((flac[21] & 0xF0) | ((more >> 32) & 0x0F));
  put(flac, 22, __builtin_bswap32(static_cast<uint32_t>(more)), 4);
  expect_error<FormatError>([&] { decode_audio(flac); }, {"header says 9000 frames, 8000 decoded"});
  // MP3 lengths are estimates: a cut stream decodes what is there, never more than stated.
  Bytes mp3 = encode(x, 1, 8000, SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III);
  mp3.resize(mp3.size() / 2);
  const AudioInfo info = probe_audio(mp3);
  AudioDecodeOptions o;
  o.target_rate = 8000;
  const std::vector<float> y = decode_audio(mp3, o);
  EXPECT_GT(y.size(), 0u);
  EXPECT_LT(static_cast<int64_t>(y.size()), info.frames);
}

TEST(AudioDecode, MutatedFilesDecodeOrThrowCleanly) {
  std::mt19937 rng(20250101);
  const std::vector<float> x = tone(4000, 500, 8000);
  int refused = 0, decoded = 0;
  for (const Codec& c : kCodecs) {
    SCOPED_TRACE(c.name);
    const int r = (c.format & SF_FORMAT_SUBMASK) == SF_FORMAT_OPUS ? 48000 : 8000;
    const Bytes good = encode(x, 1, r, c.format);
    for (int trial = 0; trial < 40; ++trial) {
      Bytes b = good;
      if (trial % 2 == 0)
        for (int k = 0; k < 1 + trial % 7; ++k) b[rng() % b.size()] ^= 1 + rng() % 255;
      else
        b.resize(1 + rng() % (b.size() - 1));
      try {
        decode_audio(b);
        ++decoded;
      } catch (const Error&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(decoded, 0);
}

TEST(AudioResample, LengthIsLibrosasCeiling) {
  const std::vector<float> x(48001, 0.25f);
  for (auto [from, to] : {std::pair{48000, 16000},
                          {44100, 16000},
                          {22050, 16000},
                          {8000, 16000},
                          {16000, 44100},
                          {11025, 16000}}) {
    for (size_t n : {1u, 2u, 3u, 7u, 100u, 1001u, 48000u, 48001u}) {
      const std::vector<float> y = resample_audio({x.data(), n}, from, to);
      const uint64_t exact = (n * static_cast<uint64_t>(to) + from - 1) / from;  // these agree
      EXPECT_EQ(y.size(), exact) << from << " -> " << to << ", n = " << n;
      const AudioInfo info{.sample_rate = from, .frames = static_cast<int64_t>(n)};
      EXPECT_EQ(info.frames_at(to), static_cast<int64_t>(exact));
    }
  }
  // librosa computes ceil(n * (to / from)) in double: one more than the exact ceiling here.
  EXPECT_EQ(resample_audio({x.data(), 147}, 44100, 48000).size(),
            static_cast<size_t>(std::ceil(147 * (48000.0 / 44100.0))));
  EXPECT_EQ(resample_audio({x.data(), 10}, 16000, 16000), std::vector<float>(10, 0.25f));
  EXPECT_TRUE(resample_audio({}, 48000, 16000).empty());
  EXPECT_THROW(resample_audio(x, 0, 16000), InvalidArgument);
  EXPECT_THROW(resample_audio(x, 16000, 800000), InvalidArgument);
}

TEST(AudioResample, KeepsAToneAndItsLevel) {
  const std::vector<float> x = tone(48000, 1000, 48000);
  const std::vector<float> y = resample_audio(x, 48000, 16000);
  const std::vector<float> want = tone(16000, 1000, 16000);
  ASSERT_EQ(y.size(), want.size());
  double worst = 0;
  for (size_t i = 200; i + 200 < y.size(); ++i)
    worst = std::max<double>(worst, std::abs(y[i] - want[i]));
  EXPECT_LT(worst, 1e-3);  // soxr HQ is linear phase with its delay removed
}

TEST(MelConfig, RangesNameTheField) {
  auto bad = [](auto edit, const char* field) {
    MelConfig c;
    edit(c);
    expect_error<InvalidArgument>([&] { c.validate("preprocessor_config.json"); },
                                  {"preprocessor_config.json", field});
    expect_error<InvalidArgument>([&] { MelExtractor m(c); }, {field});
  };
  bad([](MelConfig& c) { c.n_mels = 0; }, "n_mels");
  bad([](MelConfig& c) { c.n_mels = 513; }, "n_mels");
  bad([](MelConfig& c) { c.n_fft = 8; }, "n_fft");
  bad([](MelConfig& c) { c.n_fft = 401; }, "n_fft");
  bad([](MelConfig& c) { c.hop_length = 0; }, "hop_length");
  bad([](MelConfig& c) { c.hop_length = 401; }, "hop_length");
  bad([](MelConfig& c) { c.sample_rate = 4000; }, "sample_rate");
  bad([](MelConfig& c) { c.n_samples = 0; }, "n_samples");
  bad([](MelConfig& c) { c.n_samples = int64_t{48000} * 600 + 1; }, "n_samples");
  bad([](MelConfig& c) { c.n_samples = 100; }, "n_samples");
  MelConfig{}.validate("default");
  EXPECT_EQ(MelConfig{}.n_frames(), 3000);
}

TEST(MelConfig, ValidFramesFollowTheSubsampledMask) {
  const MelConfig c;
  EXPECT_EQ(mel_valid_frames(c, 0), 0);
  EXPECT_EQ(mel_valid_frames(c, 1), 1);
  EXPECT_EQ(mel_valid_frames(c, 160), 1);
  EXPECT_EQ(mel_valid_frames(c, 161), 2);
  EXPECT_EQ(mel_valid_frames(c, 20800), 130);
  EXPECT_EQ(mel_valid_frames(c, 480000), 3000);
  EXPECT_EQ(mel_valid_frames(c, 10000000), 3000);
  MelConfig odd;
  odd.n_samples = 1000;  // 6 frames; the mask's 7th entry is dropped
  EXPECT_EQ(mel_valid_frames(odd, 1000), 6);
  EXPECT_EQ(mel_valid_frames(odd, 900), 6);
  EXPECT_EQ(mel_valid_frames(odd, 800), 5);
}

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(i)) v.push_back(i);
  return v;
}

TEST(Mel, SilenceIsMinusOneAndAHalf) {
  for (int n_mels : {80, 128})
    for (Isa isa : isas()) {
      MelConfig c;
      c.n_mels = n_mels;
      const MelExtractor m(c, isa);
      std::vector<float> out(n_mels * 3000, 0.0f);
      m.compute(std::vector<float>(1000, 0.0f), out);
      // log10(1e-10) = -10 everywhere, so the maximum is -10 and (-10 + 4) / 4 = -1.5.
      for (float v : out) ASSERT_EQ(v, -1.5f) << m.kernel();
      std::vector<double> lg(out.size());
      m.log_mel({}, lg);
      for (double v : lg) ASSERT_NEAR(v, -10.0, 1e-12) << m.kernel();
    }
}

// The spec's Slaney filterbank (preprocessing.md section 4), written out again: [n_mels][201].
std::vector<std::vector<double>> spec_filters(int n_mels) {
  auto hz = [](double m) {
    return m < 15 ? 200 * m / 3 : 1000 * std::exp(std::log(6.4) / 27 * (m - 15));
  };
  const double top = 15 + std::log(8.0) * 27 / std::log(6.4);
  std::vector<std::vector<double>> w(n_mels, std::vector<double>(201));
  for (int i = 0; i < n_mels; ++i) {
    const double f0 = hz(top * i / (n_mels + 1)), f1 = hz(top * (i + 1) / (n_mels + 1));
    const double f2 = hz(top * (i + 2) / (n_mels + 1));
    for (int k = 0; k < 201; ++k) {
      const double f = 40.0 * k;
      w[i][k] = std::max(0.0, std::min((f - f0) / (f1 - f0), (f2 - f) / (f2 - f1))) * 2 / (f2 - f0);
    }
  }
  return w;
}

// A tone at bin k0 (k0 * 40 Hz) through the periodic Hann window has |X|^2 = (A N / 4)^2 at k0
// and (A N / 8)^2 at k0 +- 1, nothing elsewhere: the mel values follow from the filter weights.
TEST(Mel, PureToneMatchesTheFilterbankFormula) {
  for (int n_mels : {80, 128}) {
    const auto w = spec_filters(n_mels);
    EXPECT_NEAR(w[0][1], n_mels == 80 ? 0.02486259 : 0.01237399, 5e-9);  // the spec's vectors
    for (int k0 : {25, 130}) {
      const double amp = 0.5;
      MelConfig c;
      c.n_mels = n_mels;
      const std::vector<float> x = tone(480000, 40.0 * k0, 16000, amp);
      for (Isa isa : isas()) {
        const MelExtractor m(c, isa);
        std::vector<double> lg(n_mels * 3000);
        m.log_mel(x, lg);
        const double p0 = std::pow(amp * 400 / 4, 2), p1 = std::pow(amp * 400 / 8, 2);
        for (int j = 0; j < n_mels; ++j) {
          const double mel = p0 * w[j][k0] + p1 * (w[j][k0 - 1] + w[j][k0 + 1]);
          for (int t : {10, 1500, 2990})
            ASSERT_NEAR(lg[j * 3000 + t], std::log10(std::max(mel, 1e-10)), 1e-6)
                << m.kernel() << " mel " << j << " frame " << t << " tone bin " << k0;
        }
      }
    }
  }
}

// Other FFT sizes (radix 8, 4, 2, 3, 5 and generic 7, 11, 127 butterflies) and rates against a
// direct O(N^2) DFT of the windowed frames with the spec's filterbank, in double.
TEST(Mel, EveryFftSizeMatchesADirectDft) {
  struct Case {
    int n_fft, hop, rate, n_mels;
  };
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0, 0.3f);
  for (const Case& c : {Case{16, 8, 16000, 80},
                        {22, 11, 16000, 40},
                        {96, 48, 8000, 64},
                        {150, 75, 22050, 80},
                        {254, 100, 16000, 128},
                        {400, 160, 16000, 80},
                        {1000, 300, 44100, 128},
                        {2048, 512, 48000, 96}}) {
    MelConfig cfg;
    cfg.n_fft = c.n_fft, cfg.hop_length = c.hop, cfg.sample_rate = c.rate, cfg.n_mels = c.n_mels;
    cfg.n_samples = 3000;
    std::vector<float> x(2500);
    for (float& v : x) v = nd(rng);
    const int n_bins = c.n_fft / 2 + 1, half = c.n_fft / 2;
    // The padded clip (zeros to n_samples, then reflect) and the filterbank, from the spec.
    auto clip = [&](int i) { return i < 2500 ? static_cast<double>(x[i]) : 0.0; };
    auto padded = [&](int p) {
      const int i = p - half;
      return clip(i < 0 ? -i : i >= 3000 ? 2 * 2999 - i : i);
    };
    auto hz = [](double m) {
      return m < 15 ? 200 * m / 3 : 1000 * std::exp(std::log(6.4) / 27 * (m - 15));
    };
    const double top = 15 + std::log(8.0) * 27 / std::log(6.4);
    for (Isa isa : isas()) {
      const MelExtractor m(cfg, isa);
      std::vector<double> got(c.n_mels * cfg.n_frames());
      m.log_mel(x, got);
      for (int64_t t = 0; t < cfg.n_frames(); t += 3) {
        std::vector<double> power(n_bins);
        for (int k = 0; k < n_bins; ++k) {
          double re = 0, im = 0;
          for (int n = 0; n < c.n_fft; ++n) {
            const double v = padded(t * c.hop + n) * (0.5 - 0.5 * std::cos(2 * M_PI * n / c.n_fft));
            const double a = -2 * M_PI * static_cast<double>((int64_t{k} * n) % c.n_fft) / c.n_fft;
            re += v * std::cos(a), im += v * std::sin(a);
          }
          power[k] = re * re + im * im;
        }
        for (int j = 0; j < c.n_mels; ++j) {
          const double f0 = hz(top * j / (c.n_mels + 1)), f1 = hz(top * (j + 1) / (c.n_mels + 1));
          const double f2 = hz(top * (j + 2) / (c.n_mels + 1));
          double mel = 0;
          for (int k = 0; k < n_bins; ++k) {
            const double f = (c.rate / 2) * static_cast<double>(k) / (n_bins - 1);
            mel += power[k] * std::max(0.0, std::min((f - f0) / (f1 - f0), (f2 - f) / (f2 - f1))) *
                   2 / (f2 - f0);
          }
          ASSERT_NEAR(got[j * cfg.n_frames() + t], std::log10(std::max(mel, 1e-10)), 1e-9)
              << m.kernel() << " n_fft " << c.n_fft << " mel " << j << " frame " << t;
        }
      }
    }
  }
}

TEST(Mel, PaddingTruncationVariantsAndThreads) {
  MelConfig c;
  c.n_samples = 9600;  // 60 frames, a tiny model's window
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0, 0.1f);
  std::vector<float> x(12000);
  for (float& s : x) s = nd(rng);
  const MelExtractor m(c);
  const size_t n = c.n_mels * c.n_frames();
  std::vector<float> a(n), b(n);
  m.compute(x, a);
  m.compute({x.data(), 9600}, b);  // longer input is truncated
  EXPECT_EQ(a, b);
  std::vector<float> shortx(x.begin(), x.begin() + 5000), padded = shortx;
  padded.resize(9600, 0.0f);
  m.compute(shortx, a);
  m.compute(padded, b);  // shorter input is zero-padded first
  EXPECT_EQ(a, b);
  for (Isa isa : isas()) {  // the variants differ only in rounding
    const MelExtractor v(c, isa);
    v.compute(shortx, b);
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], 1e-6) << v.kernel();
  }
  std::vector<float> small(n - 1);
  EXPECT_THROW(m.compute(x, small), InvalidArgument);
  x[77] = std::numeric_limits<float>::infinity();
  expect_error<InvalidArgument>([&] { m.compute(x, a); }, {"sample 77"});
  x[77] = 0;
  // compute() from two threads at once gives the single-threaded result, bit for bit.
  MelConfig full;
  const MelExtractor big(full);
  std::vector<std::vector<float>> in(2, std::vector<float>(480000)), want(2), got(2);
  for (int k = 0; k < 2; ++k) {
    for (float& s : in[k]) s = nd(rng);
    want[k].resize(80 * 3000);
    big.compute(in[k], want[k]);
  }
  std::vector<std::thread> th;
  std::vector<int> same(2, 0);
  for (int k = 0; k < 2; ++k)
    th.emplace_back([&, k] {
      std::vector<float> o(80 * 3000);
      for (int r = 0; r < 5; ++r) {
        big.compute(in[k], o);
        same[k] += o == want[k];
      }
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(same, std::vector<int>(2, 5));
}

}  // namespace
