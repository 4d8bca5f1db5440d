// Hostile audio through the real `mmrt` binary (`generate --audio`, `preprocess --audio`), under
// the same timeout and memory ceiling as test_hostile_cli.cpp: headers that state absurd lengths
// or impossible layouts, files that never end or are too large, truncated and garbage files,
// files given to the wrong option, bad options and the wrong checkpoint. Every case must end with
// exit code 1 and a one-line message naming the problem. The decoder-level cases (and the fuzz
// findings) are in tests/media/test_audio_hostile.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hostile_cli.h"

namespace fs = std::filesystem;
using mmrt::hostile::expect_refused;
using mmrt::hostile::kRssLimitKb;
using mmrt::hostile::RunLimits;
using mmrt::hostile::RunResult;

namespace {

const fs::path& tmp() {
  static const fs::path p = [] {
    fs::path d = fs::temp_directory_path() / ("mmrt_hostile_audio_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return p;
}

RunResult run_mmrt(std::vector<std::string> args, RunLimits lim = {}) {
  return mmrt::hostile::run_mmrt(std::move(args), tmp(), lim);
}

// A 44-byte PCM16 WAV header with the fields as given, `frames` frames of zeros after it, and
// `data_size` stated in the data chunk (default: what is written).
std::string wav(uint32_t channels, uint32_t rate, uint32_t frames, int64_t data_size = -1) {
  auto le = [](uint64_t v, int n) {
    std::string s(static_cast<size_t>(n), '\0');
    for (int i = 0; i < n; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    return s;
  };
  const uint32_t align = channels * 2;
  const uint64_t body = uint64_t{frames} * (align ? align : 2);
  const uint64_t stated = data_size < 0 ? body : static_cast<uint64_t>(data_size);
  return "RIFF" + le((36 + stated) & 0xFFFFFFFFu, 4) + "WAVEfmt " + le(16, 4) + le(1, 2) +
         le(channels, 2) + le(rate, 4) + le(uint64_t{rate} * align, 4) + le(align, 2) + le(16, 2) +
         "data" + le(stated, 4) + std::string(body, '\0');
}

std::string file(const std::string& name, const std::string& content) {
  const fs::path p = tmp() / name;
  mmrt::hostile::write_file(p, content);
  return p.string();
}

class HostileAudio : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* arch : {"qwen2-audio", "qwen2-vl"}) {
      RunResult r = run_mmrt({"make-tiny-model", "--arch", arch, "--out", (tmp() / arch).string()});
      ASSERT_EQ(r.rc, 0) << r.err;
    }
    // A valid 1 s clip (WAV and FLAC), a FLAC cut in half, and a PNG image.
    const std::string d = tmp().string();
    const std::string py =
        std::string(MMRT_REF_PYTHON) +
        " -c \"import numpy as np, soundfile as sf; from PIL import Image; "
        "x = (0.3 * np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000)).astype(np.float32); "
        "sf.write('" +
        d + "/ok.wav', x, 16000, subtype='PCM_16'); sf.write('" + d +
        "/ok.flac', x, 16000); b = open('" + d + "/ok.flac', 'rb').read(); open('" + d +
        "/cut.flac', 'wb').write(b[:len(b) // 2]); Image.new('RGB', (64, 48)).save('" + d +
        "/img.png')\"";
    ASSERT_EQ(std::system(py.c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(tmp()); }
  static std::string audio_model() { return (tmp() / "qwen2-audio").string(); }
  static std::string vl_model() { return (tmp() / "qwen2-vl").string(); }
  static std::string in_tmp(const char* name) { return (tmp() / name).string(); }

  // generate with one short prompt and a small KV cache; extra arguments appended.
  static RunResult generate(const std::string& model, std::vector<std::string> extra) {
    std::vector<std::string> a{"generate", "--model", model,          "--prompt", "hi",
                               "--kv-mb",  "16",      "--max-tokens", "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_mmrt(a);
  }
  static RunResult preprocess(const std::string& model, std::vector<std::string> extra) {
    std::vector<std::string> a{"preprocess", "--model", model, "--out", in_tmp("pre")};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_mmrt(a);
  }
  // Both commands on the audio model refuse `path` with `expect` in the message.
  static void both_refuse(const std::string& path, const std::string& expect) {
    SCOPED_TRACE(path);
    expect_refused(generate(audio_model(), {"--audio", path}), expect);
    expect_refused(preprocess(audio_model(), {"--audio", path}), expect);
  }
};

}  // namespace

// A 244-byte WAV whose data chunk states 0xFFFFFFF0 bytes (2^31 - 8 frames, 37 hours at 16 kHz):
// refused by its stated duration, before a sample buffer is sized from it.
TEST_F(HostileAudio, AbsurdStatedLengthsAreRefusedBeforeAllocating) {
  const std::string huge = file("huge.wav", wav(1, 16000, 100, 0xFFFFFFF0));
  both_refuse(huge, "audio (WAV): the audio lasts 134217.72");
  expect_refused(generate(audio_model(), {"--audio", huge}),
                 "resource_exhausted: audio (WAV): the audio lasts 134217.72");
  expect_refused(preprocess(audio_model(), {"--audio", huge}),
                 "(header: 2147483640 frames at 16000 Hz), over the limit of 600.000 s");
  both_refuse(file("huge_stereo.wav", wav(2, 48000, 10, int64_t{1} << 30)),
              "268435456 frames at 48000 Hz");
}

TEST_F(HostileAudio, ImpossibleLayoutsAreNamed) {
  both_refuse(file("ch0.wav", wav(0, 16000, 100)), "audio (WAV): 0 channels (supported: 1..32)");
  both_refuse(file("ch65535.wav", wav(65535, 16000, 1)),
              "audio (WAV): 65535 channels (supported: 1..32)");
  both_refuse(file("rate0.wav", wav(1, 0, 100)),
              "audio (WAV): sample rate 0 Hz is outside 1..768000");
  both_refuse(file("rate4g.wav", wav(1, 4000000000u, 100)),
              "audio (WAV): sample rate 4000000000 Hz is outside 1..768000");
}

TEST_F(HostileAudio, FifosDevicesAndFoldersAreRefusedNotWaitedOn) {
  const fs::path fifo = tmp() / "audio.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  both_refuse(fifo.string(), "audio file '" + fifo.string() + "' is a FIFO (named pipe)");
  both_refuse("/dev/zero", "audio file '/dev/zero' is a character device, not a regular file");
  both_refuse(tmp().string(), "audio file '" + tmp().string() + "' is a directory");
}

TEST_F(HostileAudio, OversizeFilesAreRefusedBeforeReading) {
  const fs::path big = tmp() / "big.wav";
  { std::ofstream(big) << wav(1, 16000, 100); }
  fs::resize_file(big, (64u << 20) + 1);  // sparse: no disk written
  both_refuse(big.string(),
              "is 67108865 bytes, over the 64 MiB limit (raise it with --max-audio-bytes)");
  const std::string ok = in_tmp("ok.wav");
  expect_refused(generate(audio_model(), {"--audio", ok, "--max-audio-bytes", "1000"}),
                 "is 32044 bytes, over the 1000 bytes limit (raise it with --max-audio-bytes)");
  expect_refused(generate(audio_model(), {"--audio", ok, "--max-audio-bytes", "0"}),
                 "--max-audio-bytes must be an integer in 1..");
}

TEST_F(HostileAudio, TruncatedAndGarbageFilesAreFormatErrors) {
  both_refuse(in_tmp("cut.flac"), "format_error");
  both_refuse(in_tmp("cut.flac"), "audio (FLAC): truncated: header says 16000 frames");
  std::string riff("RIFF\x10\0\0\0WAVE", 12);
  for (int i = 0; i < 1024; ++i) riff += static_cast<char>(i);
  both_refuse(file("garbage.wav", riff), "audio (WAV): malformed header: no complete 'fmt ' chunk");
  const std::string cut = wav(1, 16000, 16000).substr(0, 44 + 2000);
  both_refuse(file("cut.wav", cut),
              "audio (WAV): truncated: header says 16000 frames, 1000 decoded");
  both_refuse(file("empty.wav", ""), "audio: empty input (0 bytes)");
}

TEST_F(HostileAudio, FilesGivenToTheWrongOptionAreNamed) {
  both_refuse(in_tmp("img.png"), "audio: unknown format: the file is a PNG image, not audio");
  expect_refused(generate(vl_model(), {"--image", in_tmp("ok.wav")}),
                 "unrecognised image data: expected a JPEG, PNG or WebP file: the data is a WAV "
                 "audio file");
  expect_refused(generate(audio_model(), {"--image", in_tmp("img.png")}), "takes no image input");
}

TEST_F(HostileAudio, BadOptionsAndTheWrongCheckpointAreRefused) {
  const std::string ok = in_tmp("ok.wav");
  expect_refused(generate(audio_model(), {"--audio", ok, "--long-audio", "banana"}),
                 "--long-audio must be split or refuse, got 'banana'");
  expect_refused(preprocess(audio_model(), {"--audio", ok, "--long-audio", "banana"}),
                 "--long-audio must be split or refuse, got 'banana'");
  expect_refused(preprocess(vl_model(), {"--audio", ok}),
                 "is a qwen2-vl checkpoint, which takes no audio: --audio needs a qwen2-audio one");
  expect_refused(generate(vl_model(), {"--audio", ok}), "takes no audio input");
  expect_refused(generate(audio_model(), {"--audio", ok + ",," + ok}), "--audio: empty entry");
}

// The same binary still takes well-formed audio after all of the above (a control case).
TEST_F(HostileAudio, ControlCaseStillWorks) {
  for (const char* f : {"ok.wav", "ok.flac"}) {
    const RunResult g = generate(audio_model(), {"--audio", in_tmp(f), "--ignore-eos"});
    EXPECT_EQ(g.rc, 0) << g.err;
    EXPECT_NE(g.out, "");
    EXPECT_LT(g.peak_rss_kb, kRssLimitKb);
    const RunResult p = preprocess(audio_model(), {"--audio", in_tmp(f)});
    EXPECT_EQ(p.rc, 0) << p.err;
  }
}
