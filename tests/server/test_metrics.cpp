// The Prometheus writer: histogram buckets (le inclusive, cumulative, +Inf = count), label
// escaping, and what a finished request adds.
#include <gtest/gtest.h>

#include "server/metrics.h"

namespace mmrt::server {
namespace {

TEST(Histogram, BucketsAreInclusiveAndCumulative) {
  const std::vector<double> bounds = {0.1, 1, 10};
  Histogram h(&bounds);
  for (double v : {0.05, 0.1, 0.5, 1.0, 5.0, 50.0}) h.observe(v);
  std::string out;
  h.render(out, "x", "a=\"b\"");
  EXPECT_EQ(out,
            "x_bucket{a=\"b\",le=\"0.1\"} 2\n"
            "x_bucket{a=\"b\",le=\"1\"} 4\n"
            "x_bucket{a=\"b\",le=\"10\"} 5\n"
            "x_bucket{a=\"b\",le=\"+Inf\"} 6\n"
            "x_sum{a=\"b\"} 56.65\n"
            "x_count{a=\"b\"} 6\n");
}

TEST(Metrics, LabelsAreEscaped) {
  EXPECT_EQ(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(Metrics, AFinishedRequestIsCounted) {
  const engine::SlaConfig sla = engine::SlaConfig::defaults();
  Metrics m("my\"model", sla);
  engine::RequestResult r;
  r.outcome = engine::Outcome::kFinished;
  r.sla_class = "gold";
  r.prompt_tokens = 10;
  r.cached_prompt_tokens = 4;
  r.tokens = {1, 2, 3};
  r.timeline.add(engine::Event::kReceived, 1'000'000'000);
  r.timeline.add(engine::Event::kQueued, 1'001'000'000);
  r.timeline.add(engine::Event::kScheduled, 1'002'000'000);
  r.timeline.add(engine::Event::kFirstToken, 1'050'000'000);
  r.timeline.add(engine::Event::kToken, 1'070'000'000);
  r.timeline.add(engine::Event::kToken, 1'100'000'000);
  r.timeline.add(engine::Event::kFinished, 1'100'000'000);
  RequestRecord rec{.result = &r,
                    .requested_class = "gold",
                    .outcome = "length",
                    .refusal_reason = "",
                    .download_s = 0.002};
  m.observe(rec);
  RequestRecord refused{.result = nullptr,
                        .requested_class = "platinum",
                        .outcome = "refused",
                        .refusal_reason = "sla",
                        .download_s = 0};
  m.observe(refused);
  const std::string out = m.render(engine::EngineStats{}, 0, 0);
  const std::string gold = "model_name=\"my\\\"model\",sla_class=\"gold\"";
  EXPECT_NE(out.find("mmrt_prompt_tokens_total{" + gold + "} 10\n"), std::string::npos) << out;
  EXPECT_NE(out.find("mmrt_prompt_tokens_cached_total{" + gold + "} 4\n"), std::string::npos);
  EXPECT_NE(out.find("mmrt_generation_tokens_total{" + gold + "} 3\n"), std::string::npos);
  EXPECT_NE(out.find("mmrt_request_outcome_total{" + gold + ",outcome=\"length\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("mmrt_admission_refusals_total{model_name=\"my\\\"model\",sla_class="
                     "\"platinum\",reason=\"sla\"} 1\n"),
            std::string::npos);
  // TTFT 50 ms: in the 0.06 bucket, not the 0.04 one; inter-token gaps 20 and 30 ms.
  EXPECT_NE(out.find("mmrt_time_to_first_token_seconds_bucket{" + gold + ",le=\"0.04\"} 0\n"),
            std::string::npos);
  EXPECT_NE(out.find("mmrt_time_to_first_token_seconds_bucket{" + gold + ",le=\"0.06\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("mmrt_inter_token_latency_seconds_count{" + gold + "} 2\n"),
            std::string::npos);
  EXPECT_NE(out.find("mmrt_inter_token_latency_seconds_bucket{" + gold + ",le=\"0.025\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("mmrt_request_stage_seconds_count{" + gold + ",stage=\"media_download\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("mmrt_request_stage_seconds_count{" + gold + ",stage=\"prefill\"} 1\n"),
            std::string::npos);
  // Every line is a comment or a sample ending in a number.
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t nl = out.find('\n', pos);
    ASSERT_NE(nl, std::string::npos);
    const std::string line = out.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.rfind("# ", 0) == 0) continue;
    const std::string value = line.substr(line.rfind(' ') + 1);
    EXPECT_NO_THROW(std::stod(value)) << line;
  }
}

}  // namespace
}  // namespace mmrt::server
