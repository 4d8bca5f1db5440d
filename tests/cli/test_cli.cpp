// The `mmrt` command line, run as a separate process: bench on the tiny model (report structure,
// one outcome per request), generate with and without an image, and clear errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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
  CmdResult r = mmrt(
      "bench --model " + model() +
      " --rate 6 --duration 2 --policy fcfs,priority,slo --warmup 2 --quiet --json " + j.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("policy slo"), std::string::npos) << r.out;
  std::ifstream f(j);
  json rep = json::parse(f);
  ASSERT_TRUE(rep.is_array());
  ASSERT_EQ(rep.size(), 3u);
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
  EXPECT_EQ(policies, (std::vector<std::string>{"fcfs", "priority", "slo"}));
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
  r = mmrt("generate --model " + model() + " --prompt x --temperature abc");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--temperature"), std::string::npos) << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --bogus 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("unknown option --bogus"), std::string::npos) << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --weights int4");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--weights must be auto, f32, bf16 or int8, got 'int4'"), std::string::npos)
      << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --int8-activations fp16");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--int8-activations must be q8 or float, got 'fp16'"), std::string::npos)
      << r.err;
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
  EXPECT_NE(r.err.find("refused: unavailable: predicted time to first token"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find(", media "), std::string::npos) << "the image was decoded: " << r.err;
  r = mmrt("generate --model " + model() + " --prompt x --sla-class diamond");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("diamond"), std::string::npos) << r.err;
}
