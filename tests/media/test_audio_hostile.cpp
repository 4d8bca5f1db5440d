// Hostile audio files against the decoder (src/media/audio*.cpp): headers stating impossible
// layouts or absurd lengths, files that are something else, and the inputs fuzz_audio found
// (fuzz/fuzz_audio.cpp), each kept here as a regression. Every case must end in an mmrt error
// naming the problem; nothing may crash, leak or allocate from a stated size. The same files go
// through the real binary in tests/hostile/test_hostile_audio.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
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

// A canonical 44-byte WAV header (fmt tag 1, 16-bit) with the fields as given, then `frames`
// frames of zeros, `data_size` stated in the data chunk (default: what is written).
Bytes wav_header(uint32_t channels, uint32_t rate, uint32_t frames, int64_t data_size = -1) {
  const uint32_t align = channels * 2;
  const uint64_t body = uint64_t{frames} * (align ? align : 2);
  const uint64_t stated = data_size < 0 ? body : static_cast<uint64_t>(data_size);
  Bytes b(44 + body);
  std::memcpy(&b[0], "RIFF", 4);
  put(b, 4, (36 + stated) & 0xFFFFFFFFu, 4);
  std::memcpy(&b[8], "WAVEfmt ", 8);
  put(b, 16, 16, 4);
  put(b, 20, 1, 2);
  put(b, 22, channels, 2);
  put(b, 24, rate, 4);
  put(b, 28, uint64_t{rate} * align, 4);
  put(b, 32, align, 2);
  put(b, 34, 16, 2);
  std::memcpy(&b[36], "data", 4);
  put(b, 40, stated, 4);
  return b;
}

Bytes bytes_of(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

using media_test::expect_error;

// Both entry points refuse the same way.
template <class E>
void expect_refused(const Bytes& b, const std::vector<std::string>& parts,
                    const AudioDecodeOptions& o = {}) {
  expect_error<E>([&] { (void)probe_audio(b, o); }, parts);
  expect_error<E>([&] { (void)decode_audio(b, o); }, parts);
}

}  // namespace

TEST(AudioHostile, AbsurdStatedLengthsAreRefusedByTheirDuration) {
  // 2^31 - 8 frames of PCM16 mono (data size 0xFFFFFFF0) in a 244-byte file: refused from the
  // header, naming the duration, before libsndfile opens it.
  expect_refused<ResourceExhausted>(wav_header(1, 16000, 100, 0xFFFFFFF0),
                                    {"the audio lasts 134217.72", "2147483640 frames at 16000 Hz",
                                     "over the limit of 600.000 s"});
  // The same at 1 Hz against a small limit, and a stereo file of 1 GiB stated.
  AudioDecodeOptions o;
  o.max_seconds = 30;
  expect_refused<ResourceExhausted>(wav_header(1, 1, 10, 100), {"50.000 s", "30.000 s"}, o);
  expect_refused<ResourceExhausted>(wav_header(2, 48000, 10, int64_t{1} << 30),
                                    {"268435456 frames at 48000 Hz"});
  // "Size unknown" (0xFFFFFFFF, as streaming writers leave it) is not a stated length.
  EXPECT_EQ(probe_audio(wav_header(1, 16000, 100, 0xFFFFFFFF)).frames, 100);
}

TEST(AudioHostile, ImpossibleLayoutsAreNamed) {
  expect_refused<FormatError>(wav_header(0, 16000, 100),
                              {"audio (WAV): 0 channels (supported: 1..32)"});
  expect_refused<FormatError>(wav_header(65535, 16000, 1), {"65535 channels (supported: 1..32)"});
  expect_refused<FormatError>(wav_header(33, 16000, 1), {"33 channels"});
  expect_refused<FormatError>(wav_header(1, 0, 100), {"sample rate 0 Hz is outside 1..768000"});
  expect_refused<FormatError>(wav_header(1, 4000000000u, 100),
                              {"sample rate 4000000000 Hz is outside 1..768000"});
  expect_refused<FormatError>(wav_header(1, 768001, 100), {"sample rate 768001 Hz"});
  // The limits still let the extremes through.
  EXPECT_EQ(probe_audio(wav_header(32, 768000, 10)).channels, 32);
  EXPECT_EQ(decode_audio(wav_header(1, 1, 3)).size(), 48000u);  // 3 s at 1 Hz, resampled
}

TEST(AudioHostile, OtherFilesAreNamed) {
  Bytes riff = bytes_of(std::string("RIFF\x10\0\0\0WAVE", 12));
  for (int i = 0; i < 1024; ++i) riff.push_back(static_cast<uint8_t>(i));
  expect_refused<FormatError>(riff, {"audio (WAV): malformed header: no complete 'fmt ' chunk"});
  Bytes no_data = wav_header(1, 16000, 0);
  std::memcpy(&no_data[36], "junk", 4);
  expect_refused<FormatError>(no_data, {"audio (WAV): malformed header"});
  expect_refused<FormatError>(bytes_of("\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
                              {"unknown format: the file is a PNG image, not audio", "supported:"});
  expect_refused<FormatError>(bytes_of("\xFF\xD8\xFF\xE0\0\x10JFIF"), {"a JPEG image"});
  expect_refused<FormatError>(bytes_of(std::string("RIFF\0\0\0\0WEBPVP8 ", 16)), {"a WebP image"});
  expect_refused<FormatError>(bytes_of(std::string("RIFF\0\0\0\0AVI LIST", 16)),
                              {"a RIFF file that is not WAVE"});
  // Over the byte cap: refused on the size alone.
  AudioDecodeOptions o;
  o.max_bytes = 100;
  expect_refused<ResourceExhausted>(wav_header(1, 16000, 100), {"244 bytes", "limit of 100"}, o);
}

TEST(AudioHostile, NonFiniteSamplesAreRefusedWhereTheyAre) {
  // Float WAVs (tag 3) holding NaN at frame 77 and infinity at frame 5 of a 44.1 kHz file (which
  // resampling would spread to every output sample), and a channel mean that overflows.
  auto float_wav = [](const std::vector<float>& x, uint32_t channels, uint32_t rate) {
    Bytes b = wav_header(channels, rate, 0, static_cast<int64_t>(x.size() * 4));
    put(b, 20, 3, 2);  // IEEE float
    put(b, 28, uint64_t{rate} * channels * 4, 4);
    put(b, 32, channels * 4, 2);
    put(b, 34, 32, 2);
    b.resize(44 + x.size() * 4);
    std::memcpy(b.data() + 44, x.data(), x.size() * 4);
    return b;
  };
  std::vector<float> x(1600, 0.25f);
  x[77] = std::numeric_limits<float>::quiet_NaN();
  expect_error<FormatError>([&] { (void)decode_audio(float_wav(x, 1, 16000)); },
                            {"audio (WAV): frame 77 (at 0.005 s) is not a finite number"});
  x[77] = 0;
  x[5] = std::numeric_limits<float>::infinity();
  expect_error<FormatError>([&] { (void)decode_audio(float_wav(x, 1, 44100)); },
                            {"frame 5 (at 0.000 s)"});
  std::vector<float> loud(200, 3e38f);  // 100 stereo frames whose float sum overflows
  expect_error<FormatError>([&] { (void)decode_audio(float_wav(loud, 2, 16000)); },
                            {"frame 0", "not a finite number"});
  // Large but finite values are audio (the log-mel takes them).
  std::vector<float> big(1600, 1e30f);
  const std::vector<float> y = decode_audio(float_wav(big, 1, 16000));
  MelExtractor m(MelConfig{.n_mels = 80, .n_samples = 16000});
  std::vector<float> out(80 * 100);
  m.compute(y, out);
}
