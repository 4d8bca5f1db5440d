// Hostile input through the real `mmrt` binary, each case as a new user (or an attacker) would
// produce it: checkpoints whose sizes would take the machine's memory, values that crashed the
// loader, files that never end or never open, options that wrapped at 32 bits, configurations
// that cannot serve a request, and the messages users were left with. Every case must end with
// exit code 1 and a message naming the problem, within a timeout and a memory ceiling that the
// harness enforces by killing the process (tests/common/run_process.h). The peak resident memory
// of each case is printed (`peak_rss_kb`) for the record.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "hostile_cli.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using mmrt::hostile::RunLimits;
using mmrt::hostile::RunResult;

namespace {

const fs::path& tmp() {
  static const fs::path p = [] {
    fs::path d = fs::temp_directory_path() / ("mmrt_hostile_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return p;
}

RunResult run_mmrt(std::vector<std::string> args, RunLimits lim = {}) {
  return mmrt::hostile::run_mmrt(std::move(args), tmp(), lim);
}
using mmrt::hostile::expect_refused;
using mmrt::hostile::kRssLimitKb;

std::string slurp(const fs::path& p) {
  return mmrt::testing::slurp(p.string());
}

void write(const fs::path& p, const std::string& s) {
  mmrt::hostile::write_file(p, s);
}

std::string nested(int depth) {
  return std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']');
}

class Hostile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RunResult r = run_mmrt({"make-tiny-model", "--arch", "qwen2-vl", "--out", tiny().string()});
    ASSERT_EQ(r.rc, 0) << r.err;
    const std::string py = std::string(MMRT_REF_PYTHON) +
                           " -c \"from PIL import Image; im = Image.new('RGB', (64, 48), (200, 30, "
                           "60)); [im.save('" +
                           tmp().string() + "/img.' + e) for e in ('png', 'jpg', 'webp')]\"";
    ASSERT_EQ(std::system(py.c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(tmp()); }
  static fs::path tiny() { return tmp() / "tiny"; }
  static std::string img(const char* ext = "png") { return (tmp() / "img.").string() + ext; }

  // A copy of the tiny checkpoint (links to its files) with `file` replaced by `content`.
  static std::string variant(const std::string& name, const std::string& file,
                             const std::string& content) {
    const fs::path d = tmp() / name;
    fs::remove_all(d);
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(tiny()))
      if (e.path().filename() != file) fs::create_symlink(e.path(), d / e.path().filename());
    write(d / file, content);
    return d.string();
  }
  // A copy with config.json (or another JSON file) edited by `edit`.
  static std::string edited(const std::string& name, const std::function<void(json&)>& edit,
                            const std::string& file = "config.json") {
    json j = json::parse(slurp(tiny() / file));
    edit(j);
    return variant(name, file, j.dump());
  }
  // A copy whose tokenizer.json has one more added (special) token, with id `id`.
  static std::string with_added_token(const std::string& name, int64_t id) {
    return edited(
        name,
        [id](json& t) {
          t["added_tokens"].push_back(
              {{"id", id}, {"content", "<|zz|>"}, {"special", true}, {"normalized", false}});
        },
        "tokenizer.json");
  }
  // A copy whose `file` is a FIFO nobody writes to.
  static std::string with_fifo(const std::string& name, const std::string& file) {
    const std::string d = variant(name, file, "");
    fs::remove(fs::path(d) / file);
    EXPECT_EQ(::mkfifo((fs::path(d) / file).c_str(), 0644), 0);
    return d;
  }
  // generate with one short prompt and a small KV cache; extra arguments appended.
  static RunResult generate(const std::string& model, std::vector<std::string> extra = {},
                            RunLimits lim = {}) {
    std::vector<std::string> a{"generate", "--model", model,          "--prompt", "hi",
                               "--kv-mb",  "16",      "--max-tokens", "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_mmrt(a, lim);
  }
};

}  // namespace

// ---- 1. sizes from files are bounded before they drive an allocation ---------------------------

TEST_F(Hostile, HugeLayerCountsAreRefusedBeforeAllocating) {
  for (int64_t n : {int64_t{100000}, int64_t{10000000}, int64_t{1000000000}}) {
    const std::string m = edited("layers", [&](json& c) { c["num_hidden_layers"] = n; });
    expect_refused(generate(m), "num_hidden_layers " + std::to_string(n) + " is larger than 4096");
    expect_refused(run_mmrt({"inspect", m}), "num_hidden_layers " + std::to_string(n));
  }
  const std::string m = edited("depth", [](json& c) { c["vision_config"]["depth"] = 1000000000; });
  expect_refused(generate(m), "vision_config.depth 1000000000 is larger than 4096");
}

TEST_F(Hostile, HugeTokenIdIsRefusedBeforeAllocating) {
  const std::string m = with_added_token("tok_id", 1000000000);
  expect_refused(generate(m), "id 1000000000 is larger than the largest supported id");
  expect_refused(run_mmrt({"inspect", m}), "id 1000000000 is larger than the largest supported id");
}

TEST_F(Hostile, HugePixelBoundsAreRefused) {
  const std::string m = edited(
      "min_pixels", [](json& p) { p["min_pixels"] = 1e12; }, "preprocessor_config.json");
  expect_refused(generate(m, {"--image", img()}), "\"min_pixels\" must be in 1..67108864");
}

// ---- 2. values that crashed --------------------------------------------------------------------

TEST_F(Hostile, ZeroHeadsFailCleanlyInEveryCommand) {
  const std::string a = edited("heads0", [](json& c) { c["num_attention_heads"] = 0; });
  expect_refused(generate(a), "num_attention_heads must be positive, got 0");
  expect_refused(run_mmrt({"inspect", a}), "num_attention_heads must be positive, got 0");
  const std::string v = edited("vheads0", [](json& c) { c["vision_config"]["num_heads"] = 0; });
  expect_refused(generate(v), "vision_config.num_heads must be positive, got 0");
}

TEST_F(Hostile, DeeplyNestedJsonIsRefusedWithAShortMessage) {
  for (int depth : {50000, 100000}) {
    const std::string deep = nested(depth);
    std::string cfg = slurp(tiny() / "config.json");
    cfg.replace(cfg.find('{'), 1, "{\"rope_scaling\": " + deep + ", ");
    expect_refused(generate(variant("deep_cfg", "config.json", cfg)),
                   "JSON nests deeper than 128 levels");

    std::string pp = slurp(tiny() / "preprocessor_config.json");
    pp.replace(pp.find('{'), 1, "{\"min_pixels\": " + deep + ", ");
    expect_refused(generate(variant("deep_pp", "preprocessor_config.json", pp), {"--image", img()}),
                   "JSON nests deeper than 128 levels");

    std::string tok = slurp(tiny() / "tokenizer.json");
    tok.replace(tok.find('{'), 1, "{\"truncation\": " + deep + ", ");
    expect_refused(generate(variant("deep_tok", "tokenizer.json", tok)),
                   "JSON nests deeper than 128 levels");

    write(tmp() / "deep_ids.json", deep);
    RunLimits in;
    in.stdin_path = (tmp() / "deep_ids.json").string();
    expect_refused(run_mmrt({"detokenize", "--model", tiny().string()}, in),
                   "JSON nests deeper than 128 levels");

    // A safetensors header whose data_offsets nests (8-byte little-endian length, then JSON).
    const std::string header =
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":" + deep + "}}";
    std::string st(8, '\0');
    for (int i = 0; i < 8; ++i) st[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    st += header + std::string(4, '\0');
    expect_refused(run_mmrt({"inspect", variant("deep_st", "model.safetensors", st)}),
                   "header: JSON nests deeper than 128 levels");
  }
}

// ---- 3. files that never end or never open -----------------------------------------------------

TEST_F(Hostile, FifosAndDevicesAreRefusedNotWaitedOn) {
  for (const char* f : {"config.json", "tokenizer.json", "preprocessor_config.json"})
    expect_refused(generate(with_fifo(std::string("fifo_") + f, f), {"--image", img()}),
                   "is a FIFO (named pipe), not a regular file");
  const fs::path fifo = tmp() / "image.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  expect_refused(generate(tiny().string(), {"--image", fifo.string()}),
                 "image '" + fifo.string() + "' is a FIFO");
  expect_refused(generate(tiny().string(), {"--image", "/dev/zero"}),
                 "image '/dev/zero' is a character device, not a regular file");
  expect_refused(generate(tiny().string(), {"--image", tmp().string()}),
                 "image '" + tmp().string() + "' is a directory");
  expect_refused(generate(tiny().string(), {"--prompt-file", fifo.string()}),
                 "prompt file '" + fifo.string() + "' is a FIFO");
}

TEST_F(Hostile, OversizeImageFileIsRefusedBeforeReading) {
  const fs::path big = tmp() / "big.png";
  { std::ofstream(big) << slurp(img()); }
  fs::resize_file(big, (64u << 20) + 1);  // sparse: no disk written
  expect_refused(generate(tiny().string(), {"--image", big.string()}),
                 "is 67108865 bytes, over the 64 MiB limit (raise it with --max-image-bytes)");
  expect_refused(generate(tiny().string(), {"--image", img(), "--max-image-bytes", "100"}),
                 "bytes, over the 100 bytes limit");
}

// Thread stacks that cannot be had (each thread asks for RLIMIT_STACK of memory, here more than
// the machine has): the pool says so instead of waiting for threads that never started.
TEST_F(Hostile, ThreadsThatCannotStartAreAnError) {
#if !defined(__SANITIZE_THREAD__)  // ThreadSanitizer's runtime crashes before main() under a
                                   // 4 TiB stack limit (`mmrt --version` too): not ours to test
  RunLimits lim;
  lim.rlimits = {{RLIMIT_STACK, rlim_t{1} << 42}};
  // Debian's pthread OpenBLAS starts its own threads while the program loads, before main(),
  // and exits when it cannot; one thread keeps it from starting any.
  lim.env = {{"OPENBLAS_NUM_THREADS", "1"}};
  expect_refused(generate(tiny().string(), {"--threads", "4"}, lim),
                 "cannot start compute thread 2 of 4");
#endif
  expect_refused(generate(tiny().string(), {"--threads", "1000"}),
                 "--threads must be an integer in 0..");
}

// ---- 4. integer options are 64-bit and range-checked -------------------------------------------

TEST_F(Hostile, IntegerOptionsDoNotWrap) {
  const std::string m = tiny().string();
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--max-tokens", "4294967297"},
       "--max-tokens must be an integer in 1..16777216, got '4294967297'"},
      {{"--max-tokens", "10000000000"},
       "--max-tokens must be an integer in 1..16777216, got '10000000000'"},
      {{"--kv-mb", "4294967297"}, "--kv-mb must be an integer in 1..16777216, got '4294967297'"},
      {{"--kv-mb", "1e15"}, "--kv-mb must be an integer in 1..16777216, got '1e15'"},
      {{"--threads", "4294967297"}, "--threads must be an integer in 0.."},
      {{"--step-tokens", "4294967297"}, "--step-tokens must be an integer in 16..65536"},
      {{"--top-k", "1e12"}, "--top-k must be an integer in 0..16777216, got '1e12'"},
      {{"--top-k", "-1"}, "--top-k must be an integer in 0..16777216, got '-1'"},
      {{"--temperature", "nan"}, "--temperature must be a number in [0, 100], got 'nan'"},
      {{"--seed", "99999999999999999999"}, "--seed must be an integer in 0.."},
      {{"--media-sandbox", "maybe"}, "--media-sandbox must be on or off, got 'maybe'"},
      {{"--media-memory-mb", "4294967297"}, "--media-memory-mb must be an integer in 16..65536"},
      {{"--media-cpu-seconds", "0"}, "--media-cpu-seconds must be an integer in 1..3600"},
      {{"--media-timeout", "inf"}, "--media-timeout must be a number in [0.1, 3600], got 'inf'"},
  };
  for (const auto& [opt, msg] : cases) expect_refused(generate(m, opt), msg);
  expect_refused(
      run_mmrt({"preprocess", "--model", m, "--image", img(), "--max-source-pixels", "-1"}),
      "--max-source-pixels must be an integer in 1..2147483648, got '-1'");
}

TEST_F(Hostile, ServeOptionsAndFilesAreCheckedBeforeListening) {
  const std::string m = tiny().string();
  const fs::path keys = tmp() / "keys_empty.json";
  write(keys, R"({"keys":[]})");
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--port", "70000"}, "--port must be an integer in 0..65535, got '70000'"},
      {{"--host", "nonsense"}, "--host nonsense is not an IP address"},
      {{"--max-body-mb", "0"}, "--max-body-mb must be an integer in 1..4096"},
      {{"--media-fetch-timeout", "nan"}, "--media-fetch-timeout must be a number in [0.1, 600]"},
      {{"--realtime-max-audio", "1e9"}, "--realtime-max-audio must be a number in [1, 3600]"},
      {{"--realtime-segment-silence-ms", "5"},
       "--realtime-segment-silence-ms must be an integer in 20..10000"},
      {{"--allowed-media-dir", "/nonexistent-mmrt"}, "is not a directory"},
      {{"--api-keys", "/dev/zero"}, "is a character device, not a regular file"},
      {{"--api-keys", keys.string()}, "\"keys\" must be a non-empty list"},
  };
  for (const auto& [opt, msg] : cases) {
    std::vector<std::string> argv = {"serve", "--model", m, "--port", "0"};
    argv.insert(argv.end(), opt.begin(), opt.end());
    expect_refused(run_mmrt(argv), msg);
  }
  expect_refused(run_mmrt({"serve", "--model", "/nonexistent-mmrt", "--port", "0"}),
                 "does not exist");
}

// ---- 5. what cannot work is refused by every command, up front ---------------------------------

TEST_F(Hostile, ConfigsThatCannotWorkAreRefusedByGenerateAndInspect) {
  const std::pair<std::function<void(json&)>, std::string> cases[] = {
      {[](json& c) { c["eos_token_id"] = 10000000; },
       "eos_token_id 10000000 is outside the vocabulary"},
      {[](json& c) { c["image_token_id"] = 10000000; },
       "image_token_id 10000000 is outside the vocabulary"},
      {[](json& c) { c["max_position_embeddings"] = 0; },
       "max_position_embeddings must be positive"},
      {[](json& c) { c["rms_norm_eps"] = -1; }, "rms_norm_eps must be in (0, 1)"},
  };
  int i = 0;
  for (const auto& [edit, msg] : cases) {
    const std::string m = edited("bad_cfg" + std::to_string(i++), edit);
    expect_refused(generate(m), msg);
    expect_refused(run_mmrt({"inspect", m}), msg);
  }
}

TEST_F(Hostile, CheckpointsThatCanNeverServeFailInspect) {
  // A tokenizer id the model has no embedding row for (the tiny vocabulary is 1024 rows).
  const std::string tok = with_added_token("tok_vocab", 1500);
  expect_refused(run_mmrt({"inspect", tok}),
                 "has token ids up to 1500 but config.json's vocab_size is 1024");
  expect_refused(generate(tok), "has token ids up to 1500");

  const std::string none = variant("no_tok", "tokenizer.json", "");
  fs::remove(fs::path(none) / "tokenizer.json");
  expect_refused(run_mmrt({"inspect", none}), "has no tokenizer.json");

  const std::string patch = edited(
      "patch16", [](json& p) { p["patch_size"] = 16; }, "preprocessor_config.json");
  expect_refused(run_mmrt({"inspect", patch}),
                 "patch_size 16 disagrees with config.json's vision_config (14)");
  expect_refused(generate(patch), "patch_size 16 disagrees");

  const std::string minmax = edited(
      "minmax",
      [](json& p) {
        p["min_pixels"] = 1000000;
        p["max_pixels"] = 100000;
      },
      "preprocessor_config.json");
  expect_refused(run_mmrt({"inspect", minmax}),
                 "min_pixels 1000000 is larger than max_pixels 100000");

  const std::string missing = (tmp() / "no-such-model").string();
  expect_refused(generate(missing), "model folder '" + missing + "' does not exist");
  expect_refused(run_mmrt({"inspect", missing}), "model folder '" + missing + "' does not exist");
}

// ---- 6. bench refuses nonsense before it runs --------------------------------------------------

TEST_F(Hostile, BenchRefusesNonsenseBeforeRunning) {
  const std::string m = tiny().string();
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--rate", "inf"}, "--rate must be a number in [0.01, 10000], got 'inf'"},
      {{"--rate", "1e9"}, "--rate must be a number in [0.01, 10000], got '1e9'"},
      {{"--rate", "nan"}, "--rate must be a number in [0.01, 10000], got 'nan'"},
      {{"--duration", "1e9"}, "--duration must be a number in [0.1, 86400], got '1e9'"},
      {{"--rate", "5000", "--duration", "60"}, "is 300000 requests, more than the 100000"},
      {{"--policy", ""}, "--policy: empty value"},
      {{"--policy", "fcfs,,slo"}, "--policy: empty entry in 'fcfs,,slo'"},
      {{"--max-tokens", "0"}, "--max-tokens must be an integer in 1..1048576, got '0'"},
      {{"--json", "/nonexistent-dir/x.json"}, "cannot write --json file '/nonexistent-dir/x.json'"},
  };
  for (const auto& [opt, msg] : cases) {
    std::vector<std::string> a{"bench", "--model", m, "--duration", "1", "--quiet"};
    a.insert(a.end(), opt.begin(), opt.end());
    const RunResult r = run_mmrt(a);
    expect_refused(r, msg);
    EXPECT_EQ(r.out, "") << "the run started before the error: " << r.out;
  }
}

// ---- 7. messages -------------------------------------------------------------------------------

TEST_F(Hostile, MessagesNameTheProblem) {
  const std::string m = tiny().string();
  // Width x height, as images are described (this 5000 x 20 image was reported as 20x5000).
  const std::string wide = (tmp() / "wide.png").string();
  const std::string py = std::string(MMRT_REF_PYTHON) +
                         " -c \"from PIL import Image; Image.new('RGB', (5000, 20)).save('" + wide +
                         "')\"";
  ASSERT_EQ(std::system(py.c_str()), 0);
  expect_refused(generate(m, {"--image", wide}),
                 "the image is 5000x20 (width x height): its aspect ratio 250 is over the 200");
  // An unknown flag in last position is unknown, not "needs a value"; a known one needs one.
  expect_refused(generate(m, {"--bogus"}), "unknown option --bogus");
  expect_refused(generate(m, {"--seed"}), "option --seed needs a value");
  // Files cut inside their signature are truncated, not unrecognised.
  const std::pair<const char*, const char*> formats[] = {{"png", "truncated PNG file"},
                                                         {"jpg", "truncated JPEG file"},
                                                         {"webp", "truncated WebP file"}};
  for (const auto& [ext, msg] : formats) {
    const fs::path cut = tmp() / (std::string("cut.") + ext);
    write(cut, slurp(img(ext)).substr(0, 2));
    expect_refused(generate(m, {"--image", cut.string()}), msg);
  }
  // Empty entries in a list and a malformed environment variable are errors, not ignored.
  expect_refused(generate(m, {"--image", img() + ",," + img()}), "--image: empty entry");
  expect_refused(generate(m, {"--image", ""}), "--image: empty value");
  RunLimits env;
  env.env = {{"MMRT_THREADS", "abc"}};
  expect_refused(generate(m, {}, env), "MMRT_THREADS must be a thread count in 1..");
  // A refused request leaves stdout empty (it used to print an empty line).
  const RunResult r = generate(m, {"--ttft-deadline-ms", "0.0001"});
  expect_refused(r, "refused: unavailable");
  EXPECT_EQ(r.out, "");
}

// The same binary still serves well-formed input after all of the above (a control case).
TEST_F(Hostile, ControlCaseStillWorks) {
  const RunResult r = generate(tiny().string(), {"--image", img(), "--ignore-eos"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out, "");
  EXPECT_LT(r.peak_rss_kb, kRssLimitKb);
}
