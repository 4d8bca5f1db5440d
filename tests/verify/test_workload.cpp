// Workload files: JSON and YAML read the same, every field is range-checked and named in its
// error, unknown fields are refused, and the schedule is a function of the seed alone.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "verify/workload.h"

namespace mmrt::verify {
namespace {

const char* kJson = R"({
  "name": "camera-and-chat", "seed": 7, "duration_s": 60, "warmup_s": 5, "rate": 4,
  "requests": [
    {"kind": "text", "weight": 3, "prompt_words": 20, "max_tokens": 16},
    {"kind": "image", "weight": 1, "image_sizes": [[640, 480], [224, 224]]},
    {"kind": "repeat_image", "weight": 1, "turns": 3, "turn_gap_s": 1.5}
  ],
  "streams": [{"name": "cam0", "fps": 10, "class": "platinum", "distinct_frames": 4}],
  "classes": {
    "platinum": {"weight": 0.2, "ttft_ms": {"p50": 100, "p99": 300}, "itl_jitter_ms": 40},
    "silver": {"weight": 0.8, "e2e_ms": {"p99": 5000}, "refusals_ok": true}
  },
  "overall": {"ttft_ms": {"p99": 1000}}
})";

const char* kYaml = R"(
name: camera-and-chat
seed: 7
duration_s: 60
warmup_s: 5
rate: 4
requests:
  - {kind: text, weight: 3, prompt_words: 20, max_tokens: 16}
  - kind: image
    weight: 1
    image_sizes: [[640, 480], [224, 224]]
  - {kind: repeat_image, weight: 1, turns: 3, turn_gap_s: 1.5}
streams:
  - {name: cam0, fps: 10, class: platinum, distinct_frames: 4}
classes:
  platinum: {weight: 0.2, ttft_ms: {p50: 100, p99: 300}, itl_jitter_ms: 40}
  silver: {weight: 0.8, e2e_ms: {p99: 5000}, refusals_ok: true}
overall:
  ttft_ms: {p99: 1000}
)";

TEST(Workload, JsonAndYamlReadTheSame) {
  const Workload a = parse_workload(kJson, false, "a.json");
  const Workload b = parse_workload(kYaml, true, "b.yaml");
  EXPECT_EQ(workload_json(a), workload_json(b));
  EXPECT_EQ(a.name, "camera-and-chat");
  ASSERT_EQ(a.requests.size(), 3u);
  EXPECT_EQ(a.requests[1].images.sizes[0], std::make_pair(640, 480));
  ASSERT_EQ(a.classes.size(), 2u);
  EXPECT_EQ(*a.classes[0].ttft.budget(), 300);
  EXPECT_TRUE(a.classes[1].refusals_ok);
  ASSERT_TRUE(a.overall.has_value());
  EXPECT_EQ(*a.overall->ttft.p99, 1000);
}

void expect_refused(const std::string& text, const std::string& needle) {
  try {
    parse_workload(text, false, "w.json");
    FAIL() << "accepted: " << text;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("w.json"), std::string::npos) << e.what();
  }
}

TEST(Workload, BadFieldsAreNamed) {
  expect_refused(R"({"rate": 1, "requests": [{"kind": "text"}], "durations": 5})", "durations");
  expect_refused(R"({"rate": -1, "requests": [{"kind": "text"}]})", "rate must be a number");
  expect_refused(R"({"rate": 1, "requests": [{"kind": "video"}]})", "requests[0].kind");
  expect_refused(R"({"rate": 1, "requests": [{"kind": "image", "image_sizes": [[1, 99999]]}]})",
                 "requests[0].image_sizes[0]");
  expect_refused(
      R"({"rate": 1, "requests": [{"kind": "text"}], "classes": {"gold": {"ttft_ms": {"p95": 3}}}})",
      "classes.gold.ttft_ms.p95");
  expect_refused(R"({"rate": 0})", "nothing to send");
  expect_refused(R"({"rate": 1, "requests": [{"kind": "text"}], "duration_s": 5, "warmup_s": 5})",
                 "warmup_s");
  expect_refused(R"({"rate": 1, "requests": [{"kind": "text"}], "k": 1.5})",
                 "k must be an integer");
  expect_refused(R"([1, 2])", "not a JSON object");
  expect_refused(R"({"streams": [{"name": "a", "class": "golld"}], "classes": {"gold": {}}})",
                 "streams.a.class");
  expect_refused(R"({"streams": [{"name": "a"}, {"name": "a"}]})", "two streams named 'a'");
  expect_refused(R"({"rate": 1, "requests": [{"kind": "text"}], "classes": {"all": {}}})",
                 "classes.all");
  expect_refused("{\"rate\": 1", "w.json");
  EXPECT_THROW(parse_workload("a: [1, 2", true, "w.yaml"), InvalidArgument);
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "- ";
  deep += "x";
  EXPECT_THROW(parse_workload(deep, true, "w.yaml"), InvalidArgument);
}

TEST(Workload, YamlAliasBombsAndOddKeysAreRefused) {
  // Six levels of ten aliases each: a million values once expanded.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 6; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  try {
    parse_workload(bomb, true, "bomb.yaml");
    FAIL() << "an alias bomb was expanded";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("after expanding aliases"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_workload("? [1, 2]\n: 3\n", true, "key.yaml"), InvalidArgument);
}

TEST(Workload, HugeSchedulesAreRefusedBeforeTheyAllocate) {
  try {
    parse_workload(R"({"rate": 10000, "duration_s": 86400, "requests": [{"kind": "text"}]})", false,
                   "big.json");
    FAIL() << "accepted a schedule of 864 million requests";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("at most 2000000"), std::string::npos) << e.what();
  }
}

TEST(Workload, ScheduleIsSeededAndSorted) {
  const Workload w = parse_workload(kJson, false, "a.json");
  const auto a = make_schedule(w, {});
  const auto b = make_schedule(w, {});
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].t_s, b[i].t_s);
    EXPECT_EQ(a[i].seed, b[i].seed);
    EXPECT_EQ(a[i].sla_class, b[i].sla_class);
    if (i) {
      EXPECT_LE(a[i - 1].t_s, a[i].t_s);
    }
    EXPECT_EQ(a[i].warmup, a[i].t_s < 5);
  }
  Workload w2 = w;
  w2.seed = 8;
  auto first_poisson = [](const std::vector<Planned>& s) {
    for (const auto& p : s)
      if (p.kind != "frame") return p.t_s;
    return -1.0;
  };
  EXPECT_NE(first_poisson(make_schedule(w2, {})), first_poisson(a));
  // The frame stream: 10 fps for 60 s, cycling 4 images; the Poisson part about 4/s (with the
  // extra turns of repeat_image conversations).
  int64_t frames = 0, poisson = 0;
  for (const auto& p : a) {
    if (p.kind == "frame") {
      ++frames;
      EXPECT_EQ(p.stream, "cam0");
      EXPECT_NEAR(p.t_s, p.frame / 10.0, 1e-9);
    } else {
      ++poisson;
    }
  }
  EXPECT_EQ(frames, 600);
  EXPECT_GT(poisson, 200);
  EXPECT_LT(poisson, 400);
  // Repeated-image turns share their image (seed) and follow at turn_gap_s.
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].kind == "repeat_image" && a[i].turn == 1)
      for (const auto& q : a)
        if (q.conversation == a[i].conversation && q.turn == 0) {
          EXPECT_EQ(q.seed, a[i].seed);
          EXPECT_NEAR(a[i].t_s - q.t_s, 1.5, 1e-9);
        }
}

TEST(Workload, OverridesAreValidatedToo) {
  Workload w = parse_workload(R"({"streams": [{"name": "cam", "fps": 240}]})", false, "s.json");
  w.rate = 5;  // --rate on a streams-only workload: nothing to draw the Poisson part from
  EXPECT_THROW(validate_workload(w, "s.json with the options"), InvalidArgument);
  w.rate = 0;
  w.duration_s = 86400;  // --duration: 20.7 million frames
  EXPECT_THROW(validate_workload(w, "s.json with the options"), InvalidArgument);
}

TEST(Workload, DefaultHasTheServerClasses) {
  const Workload w = default_workload(2);
  ASSERT_EQ(w.classes.size(), 3u);
  EXPECT_EQ(w.classes[0].name, "platinum");
  EXPECT_EQ(*w.classes[0].ttft.budget(), 300);
  EXPECT_EQ(w.duration_s, 300);
  const auto s = make_schedule(w, {});
  EXPECT_NEAR(static_cast<double>(s.size()), 2 * 300 * 1.2, 150);
}

}  // namespace
}  // namespace mmrt::verify
