// The `mmrt` command line, run as a separate process: bench on the tiny model (report structure,
// one outcome per request), generate with and without an image or audio, preprocess, and clear
// errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "npy_file.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct CmdResult {
  int rc;
  std::string out, err;
};

const fs::path& tmp() {
  static fs::path p = [] {
    fs::path d = fs::temp_directory_path() / ("mmrt_cli_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return p;
}

CmdResult mmrt(const std::string& args) {
  fs::path o = tmp() / "stdout", e = tmp() / "stderr";
  std::string cmd = std::string(MMRT_BINARY_DIR) + "/tools/mmrt " + args + " > " + o.string() +
                    " 2> " + e.string();
  int rc = std::system(cmd.c_str());
  auto slurp = [](const fs::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  return {WEXITSTATUS(rc), slurp(o), slurp(e)};
}

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    CmdResult r = mmrt("make-tiny-model --arch qwen2-vl --out " + (tmp() / "tiny").string());
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(tmp()); }
  static std::string model() { return (tmp() / "tiny").string(); }
};

}  // namespace

TEST_F(Cli, BenchReportStructureAndOneOutcomePerRequest) {
  fs::path j = tmp() / "bench.json";
  CmdResult r =
      mmrt("bench --model " + model() +
           " --rate 6 --duration 2 --policy fcfs,priority,slo,slo:safe --warmup 2 --quiet --json " +
           j.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("policy slo"), std::string::npos) << r.out;
  std::ifstream f(j);
  json rep = json::parse(f);
  ASSERT_TRUE(rep.is_array());
  ASSERT_EQ(rep.size(), 4u);
  std::vector<std::string> policies;
  for (const auto& p : rep) {
    policies.push_back(p["policy"]);
    const auto& all = p["classes"]["all"];
    int64_t n = all["requests"];
    EXPECT_EQ(n, p["workload"]["requests"].get<int64_t>());
    // Exactly one outcome each: completed + refused + failed + cancelled = requests.
    EXPECT_EQ(all["completed"].get<int64_t>() + all["refused"].get<int64_t>() +
                  all["failed"].get<int64_t>() + all["cancelled"].get<int64_t>(),
              n);
    int64_t per_class = 0, late_per_class = 0;
    EXPECT_LE(all["refused_late"].get<int64_t>(), all["refused"].get<int64_t>());
    EXPECT_LE(all["refused_after_encode"].get<int64_t>(), all["refused_late"].get<int64_t>());
    EXPECT_EQ(p["engine"]["refused_after_encode"].get<int64_t>(),
              all["refused_after_encode"].get<int64_t>());
    for (const char* c : {"platinum", "gold", "silver"}) {
      ASSERT_TRUE(p["classes"].contains(c)) << c;
      per_class += p["classes"][c]["requests"].get<int64_t>();
      late_per_class += p["classes"][c]["refused_late"].get<int64_t>();
      for (const char* d : {"ttft_ms", "tpot_ms", "e2e_ms"})
        for (const char* q : {"p50", "p95", "p99"}) EXPECT_TRUE(p["classes"][c][d].contains(q));
      double a = p["classes"][c]["slo_attainment"];
      EXPECT_GE(a, 0.0);
      EXPECT_LE(a, 1.0);
    }
    EXPECT_EQ(per_class, n);
    EXPECT_EQ(late_per_class, all["refused_late"].get<int64_t>());
    for (const char* s : {"media", "queue", "encode", "prefill", "decode"})
      EXPECT_TRUE(p["stages_ms"].contains(s));
    EXPECT_TRUE(p.contains("goodput_rps"));
    EXPECT_TRUE(p.contains("prefix_cache_hit_rate"));
    EXPECT_TRUE(p.contains("encoder_cache_hit_rate"));
    EXPECT_TRUE(p["engine"]["ttft_prediction"].contains("mean_abs_rel_error"));
  }
  EXPECT_EQ(policies, (std::vector<std::string>{"fcfs", "priority", "slo", "slo:safe"}));
}

TEST_F(Cli, GenerateTextAndImage) {
  CmdResult r =
      mmrt("generate --model " + model() + " --prompt 'Hello' --max-tokens 5 --ignore-eos");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("time to first token"), std::string::npos) << r.err;
  fs::path img = tmp() / "img.png";
  std::string mk = std::string(MMRT_REF_PYTHON) +
                   " -c \"from PIL import Image; Image.new('RGB',(64,48),(200,30,60)).save('" +
                   img.string() + "')\"";
  ASSERT_EQ(std::system(mk.c_str()), 0);
  r = mmrt("generate --model " + model() + " --image " + img.string() +
           " --prompt 'Describe' --max-tokens 4");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("media"), std::string::npos) << r.err;
}

TEST_F(Cli, ClearErrors) {
  CmdResult r = mmrt("generate --model " + (tmp() / "nope").string() + " --prompt x");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
  r = mmrt("bench --model " + model() + " --policy fifo");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("unknown scheduling policy 'fifo'"), std::string::npos) << r.err;
  r = mmrt("bench --model " + model() + " --policy fcfs:reserve");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--policy entry 'fcfs:reserve': the modifiers are ':plain' and ':safe' "
                       "(any policy) and ':reserve' (slo)"),
            std::string::npos)
      << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --temperature abc");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--temperature"), std::string::npos) << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --bogus 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("unknown option --bogus"), std::string::npos) << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --weights int4");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--weights must be auto, f32, bf16, int8 or fp8, got 'int4'"),
            std::string::npos)
      << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --int8-activations fp16");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--int8-activations must be q8 or float, got 'fp16'"), std::string::npos)
      << r.err;
  // A flag given a value is refused, not ignored (a flag a command had not declared was once
  // read as an option with the next argument as its value, and silently did nothing).
  r = mmrt("generate --model " + model() + " --prompt x --max-tokens 2 --batch-invariant=yes");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("option --batch-invariant takes no value"), std::string::npos) << r.err;
  r = mmrt("frobnicate");
  EXPECT_NE(r.rc, 0);
  r = mmrt("--help");
  EXPECT_EQ(r.rc, 0);
  for (const char* c :
       {"bench", "generate", "make-tiny-model", "inspect", "tokenize", "preprocess"})
    EXPECT_NE(r.out.find(c), std::string::npos) << c;
}

// Prompts longer than a command-line argument may be (Linux: 128 KiB) come from a file or
// standard input; one longer than the model's context is refused with both numbers.
TEST_F(Cli, GeneratePromptFromFileAndStdin) {
  const fs::path big = tmp() / "big_prompt.txt", small = tmp() / "prompt.txt";
  {
    std::ofstream f(big);
    for (int i = 0; i < 20000; ++i) f << "word" << i << " ";  // ~190 KB, far past 32768 tokens
  }
  std::ofstream(small) << "Tell me about the sea.";
  CmdResult r =
      mmrt("generate --model " + model() + " --prompt-file " + big.string() + " --max-tokens 2");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("refused: invalid_argument: the prompt has "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the model's context holds 32768 tokens"), std::string::npos) << r.err;
  r = mmrt("generate --model " + model() + " --prompt-file - --max-tokens 2 --ignore-eos < " +
           small.string());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("finished"), std::string::npos) << r.err;
  r = mmrt("generate --model " + model() + " --prompt-file " + (tmp() / "missing.txt").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("prompt file '" + (tmp() / "missing.txt").string() + "' does not exist"),
            std::string::npos)
      << r.err;
}

// A one-shot request is best effort: no class, no deadline, never refused for time. Asked for a
// promise it cannot keep, it is refused up front, before its image is decoded.
TEST_F(Cli, GenerateHasNoDeadlineUnlessAskedFor) {
  const fs::path img = tmp() / "big.png";
  const std::string mk = std::string(MMRT_REF_PYTHON) +
                         " -c \"from PIL import Image; Image.new('RGB',(1600,1200),(20,90,160))"
                         ".save('" +
                         img.string() + "')\"";
  ASSERT_EQ(std::system(mk.c_str()), 0);
  CmdResult r = mmrt("generate --model " + model() + " --image " + img.string() +
                     " --prompt 'What is it?' --max-tokens 2");
  EXPECT_EQ(r.rc, 0) << r.err;
  r = mmrt("generate --model " + model() + " --image " + img.string() +
           " --prompt 'What is it?' --max-tokens 2 --ttft-deadline-ms 0.001");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("refused: unavailable: its own work alone"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(", media "), std::string::npos) << "the image was decoded: " << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --sla-class diamond");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("diamond"), std::string::npos) << r.err;
}

namespace {

// A 16-bit PCM WAV written by hand (the 44-byte canonical header): a tone gliding up from
// `freq` Hz, `channels` identical channels.
void write_wav(const fs::path& p, double seconds, double freq, int32_t rate = 16000,
               int16_t channels = 1) {
  const uint32_t frames = static_cast<uint32_t>(seconds * rate);
  const uint32_t data = frames * 2u * static_cast<uint32_t>(channels);
  std::ofstream f(p, std::ios::binary);
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) f.put(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  auto u16 = [&](uint16_t v) {
    f.put(static_cast<char>(v & 0xff));
    f.put(static_cast<char>(v >> 8));
  };
  f.write("RIFF", 4);
  u32(36 + data);
  f.write("WAVEfmt ", 8);
  u32(16);
  u16(1);  // PCM
  u16(static_cast<uint16_t>(channels));
  u32(static_cast<uint32_t>(rate));
  u32(static_cast<uint32_t>(rate) * 2u * static_cast<uint32_t>(channels));
  u16(static_cast<uint16_t>(2 * channels));
  u16(16);
  f.write("data", 4);
  u32(data);
  for (uint32_t i = 0; i < frames; ++i) {
    const double t = static_cast<double>(i) / rate;
    const double hz = freq * (1 + 0.5 * t / seconds);
    const double v = 0.5 * std::sin(2 * M_PI * hz * t) + 0.2 * std::sin(4 * M_PI * hz * t);
    const auto s = static_cast<int16_t>(std::lround(v * 32767));
    for (int c = 0; c < channels; ++c) u16(static_cast<uint16_t>(s));
  }
}

class AudioCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::create_directories(tmp());
    CmdResult r = mmrt("make-tiny-model --arch qwen2-audio --out " + model());
    ASSERT_EQ(r.rc, 0) << r.err;
    write_wav(wav("a"), 2.0, 440);
    write_wav(wav("b"), 1.5, 1500);
    write_wav(wav("long"), 31.0, 300);
    // The header promises 2 s, the data stops after a third of it.
    write_wav(wav("cut"), 2.0, 440);
    fs::resize_file(wav("cut"), fs::file_size(wav("cut")) / 3);
    // A WAV header naming an audio format code no decoder knows.
    write_wav(wav("junk"), 1.0, 440);
    {
      std::fstream f(wav("junk"), std::ios::binary | std::ios::in | std::ios::out);
      f.seekp(20);
      f.write("\x77\x77", 2);
    }
    // No audio at all.
    std::string noise(4096, '\0');
    for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 2654435761u) >> 13);
    std::ofstream(wav("noise"), std::ios::binary) << noise;
  }
  static void TearDownTestSuite() { fs::remove_all(tmp()); }
  static std::string model() { return (tmp() / "tiny_audio").string(); }
  static std::string wav(const std::string& name) { return (tmp() / (name + ".wav")).string(); }
  static CmdResult generate(const std::string& audio, const std::string& extra = "") {
    return mmrt("generate --model " + model() + " --audio " + audio +
                " --prompt 'What do you hear?' --max-tokens 12 --ignore-eos --quiet " + extra);
  }
};

}  // namespace

// Greedy generation from audio is deterministic, and the audio reaches the model: another
// file gives another reply. Audio and an image cannot both go to an audio-only model.
TEST_F(AudioCli, GenerateIsDeterministicAndHearsTheAudio) {
  const CmdResult a1 = generate(wav("a")), a2 = generate(wav("a")), b = generate(wav("b"));
  ASSERT_EQ(a1.rc, 0) << a1.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_FALSE(a1.out.empty());
  EXPECT_EQ(a1.out, a2.out);
  EXPECT_NE(a1.out, b.out);
  // The media sandbox (on by default) decodes it; off gives the same text.
  const CmdResult off = generate(wav("a"), "--media-sandbox off");
  ASSERT_EQ(off.rc, 0) << off.err;
  EXPECT_EQ(off.out, a1.out);
  // Two files for one prompt: both are heard.
  const CmdResult ab = generate(wav("a") + "," + wav("b"));
  ASSERT_EQ(ab.rc, 0) << ab.err;
  EXPECT_NE(ab.out, a1.out);
  const CmdResult r = mmrt("generate --model " + model() + " --audio " + wav("a") + " --audio " +
                           wav("b") + " --prompt x");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("more --audio options than --prompt options"), std::string::npos) << r.err;
}

TEST_F(Cli, AudioOnAModelWithoutAudioIsAClearError) {
  const fs::path w = tmp() / "a.wav";
  write_wav(w, 1.0, 440);
  CmdResult r = mmrt("generate --model " + model() + " --audio " + w.string() +
                     " --prompt 'What do you hear?' --max-tokens 2");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("takes no audio input"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Qwen2VLForConditionalGeneration"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  r = mmrt("preprocess --model " + model() + " --audio " + w.string());
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("is a qwen2-vl checkpoint, which takes no audio"), std::string::npos)
      << r.err;
}

TEST_F(AudioCli, PreprocessWritesFeaturesAsNpy) {
  const std::string prefix = (tmp() / "feat").string();
  CmdResult r = mmrt("preprocess --model " + model() + " --audio " + wav("a") + " --out " + prefix);
  ASSERT_EQ(r.rc, 0) << r.err;
  // Valid mel frames per window: the mask's row sums, ones first.
  auto valid_frames = [](const NpyFile& mask) {
    std::vector<int64_t> v;
    const int64_t T = mask.shape[1];
    for (int64_t k = 0; k < mask.shape[0]; ++k) {
      const auto row = mask.i32.begin() + k * T;
      const int64_t n = std::count(row, row + T, 1);
      for (int64_t i = 0; i < T; ++i) EXPECT_EQ(row[i], i < n ? 1 : 0) << k << ", " << i;
      v.push_back(n);
    }
    return v;
  };
  NpyFile f = read_npy_file(prefix + ".input_features.npy");
  NpyFile mask = read_npy_file(prefix + ".feature_attention_mask.npy");
  EXPECT_EQ(f.dtype, "F32");
  EXPECT_EQ(f.shape, (std::vector<int64_t>{1, 128, 3000}));
  EXPECT_EQ(mask.dtype, "I32");
  ASSERT_EQ(mask.shape, (std::vector<int64_t>{1, 3000}));
  // 2 s at a hop of 160 samples: 200 valid frames.
  EXPECT_EQ(valid_frames(mask), std::vector<int64_t>{200});
  // Whisper's scaling keeps every value within [-1.5, 1.5] or so, and a tone is not silence.
  float lo = 1e9f, hi = -1e9f;
  for (float x : f.f32) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_LT(lo, hi);
  EXPECT_GT(lo, -2.f);
  EXPECT_LT(hi, 2.f);
  EXPECT_NE(r.out.find("1 window(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2.00 s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("200 valid mel frames"), std::string::npos) << r.out;
  // 31 s: two windows of one item (split, the default), the second holding the last second.
  r = mmrt("preprocess --model " + model() + " --audio " + wav("long") + " --out " + prefix);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_npy_file(prefix + ".input_features.npy").shape,
            (std::vector<int64_t>{2, 128, 3000}));
  mask = read_npy_file(prefix + ".feature_attention_mask.npy");
  ASSERT_EQ(mask.shape, (std::vector<int64_t>{2, 3000}));
  EXPECT_EQ(valid_frames(mask), (std::vector<int64_t>{3000, 100}));
  EXPECT_NE(r.out.find("2 window(s)"), std::string::npos) << r.out;
  // Exactly one of --image / --audio.
  r = mmrt("preprocess --model " + model() + " --audio " + wav("a") + " --image x.png");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("one of --image, --video or --audio"), std::string::npos) << r.err;
}

TEST_F(AudioCli, LongAudioRefuseIsAClearError) {
  CmdResult r = generate(wav("long"), "--long-audio refuse");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("31"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("30"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  r = mmrt("preprocess --model " + model() + " --audio " + wav("long") + " --long-audio refuse");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("31"), std::string::npos) << r.err;
  // Split (the default) serves it.
  r = generate(wav("long"));
  EXPECT_EQ(r.rc, 0) << r.err;
  r = generate(wav("a"), "--long-audio cut");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--long-audio must be split or refuse, got 'cut'"), std::string::npos)
      << r.err;
  r = mmrt("generate --help");
  EXPECT_NE(r.out.find("--long-audio split|refuse"), std::string::npos) << r.out;
}

// Every container the server accepts decodes inside the media sandbox (its seccomp allow-list:
// libvorbis' qsort asks sysinfo, libsndfile probes MP3s for a resource fork) as it does outside.
TEST_F(AudioCli, EveryFormatDecodesInTheSandbox) {
  const fs::path script = tmp() / "write_audio.py";
  std::ofstream(script) << "import sys, numpy as np, soundfile as sf\n"
                           "t = np.arange(int(44100 * 2.5)) / 44100\n"
                           "x = (0.4 * np.sin(2 * np.pi * 440 * t * (1 + 0.2 * t))).astype('f4')\n"
                           "st = np.stack([x, 0.5 * x], 1)\n"
                           "d = sys.argv[1]\n"
                           "sf.write(d + '/s.flac', st, 44100, format='FLAC')\n"
                           "sf.write(d + '/s.ogg', st, 44100, format='OGG', subtype='VORBIS')\n"
                           "sf.write(d + '/s.opus', x, 48000, format='OGG', subtype='OPUS')\n"
                           "sf.write(d + '/s.mp3', st, 44100, format='MP3')\n";
  ASSERT_EQ(
      std::system(
          (std::string(MMRT_REF_PYTHON) + " " + script.string() + " " + tmp().string()).c_str()),
      0);
  for (const char* name : {"s.flac", "s.ogg", "s.opus", "s.mp3"}) {
    const std::string file = (tmp() / name).string();
    const CmdResult on = mmrt("generate --model " + model() + " --audio " + file +
                              " --prompt 'What do you hear?' --max-tokens 6 --ignore-eos");
    ASSERT_EQ(on.rc, 0) << name << ": " << on.err;
    EXPECT_NE(on.err.find("media sandbox: 1 items decoded, 0 failed"), std::string::npos)
        << name << ": " << on.err;
    EXPECT_NE(on.err.find(" 0 lost"), std::string::npos) << name << ": " << on.err;
    const CmdResult off = generate(file, "--media-sandbox off");
    ASSERT_EQ(off.rc, 0) << name << ": " << off.err;
    EXPECT_EQ(generate(file).out, off.out) << name;
  }
}

TEST_F(AudioCli, CorruptAudioIsAClearError) {
  for (const char* name : {"cut", "junk", "noise"}) {
    CmdResult r = generate(wav(name));
    EXPECT_EQ(r.rc, 1) << name << ": " << r.err;
    EXPECT_NE(r.err.find("format_error"), std::string::npos) << name << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    r = mmrt("preprocess --model " + model() + " --audio " + wav(name));
    EXPECT_EQ(r.rc, 1) << name << ": " << r.err;
  }
  CmdResult r = generate((tmp() / "missing.wav").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("missing.wav"), std::string::npos) << r.err;
  r = generate(wav("a"), "--max-audio-bytes 100");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--max-audio-bytes"), std::string::npos) << r.err;
}

// The compute device: `mmrt devices` lists the build's backends; --device names one or is
// refused with what the build has and sees; a CUDA device absent here is a clear error.
TEST_F(Cli, DevicesAndTheDeviceOption) {
  CmdResult r = mmrt("devices");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("cpu "), std::string::npos) << r.out;
  r = mmrt("generate --model " + model() + " --prompt x --max-tokens 2 --device cpu");
  EXPECT_EQ(r.rc, 0) << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --device tpu");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("unknown device 'tpu': expected cpu, cuda or cuda:N"), std::string::npos)
      << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --device cuda:999");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("cuda:999"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("backends in this build: cpu"), std::string::npos) << r.err;
}

// `mmrt preprocess --image` serves every image family through the registry: LLaVA-NeXT's crops
// and Fuyu's patches come out as their processors make them (the shapes HF's give for them).
TEST_F(Cli, PreprocessImageOfEveryFamily) {
  const fs::path png = tmp() / "family.png";
  const std::string cmd = std::string(MMRT_REF_PYTHON) +
                          " -c \"from PIL import Image; import numpy as np; "
                          "Image.fromarray(np.random.default_rng(5).integers(0,255,(90,130,3),"
                          "dtype=np.uint8)).save('" +
                          png.string() + "')\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  for (const char* arch : {"llava-next", "fuyu"}) {
    const fs::path dir = tmp() / (std::string("pp_") + arch);
    CmdResult r = mmrt(std::string("make-tiny-model --arch ") + arch + " --out " + dir.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    const std::string prefix = (tmp() / (std::string("pp_out_") + arch)).string();
    r = mmrt("preprocess --model " + dir.string() + " --image " + png.string() + " --out " +
             prefix);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find(std::string(arch) + " processor"), std::string::npos) << r.out;
    const NpyFile f = read_npy_file(prefix + ".pixel_values.npy");
    if (std::string(arch) == "fuyu") {
      // 90x130 padded to 90x150 (multiples of 30): 3 x 5 patches of 30 * 30 * 3 values.
      EXPECT_EQ(f.shape, (std::vector<int64_t>{15, 2700}));
    } else {
      ASSERT_EQ(f.shape.size(), 4u);  // [crops, 3, side, side]
      EXPECT_EQ(f.shape[1], 3);
      EXPECT_EQ(f.shape[2], f.shape[3]);
    }
    r = mmrt("preprocess --model " + dir.string() + " --video " + png.string());
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("takes no video"), std::string::npos) << r.err;
  }
}
