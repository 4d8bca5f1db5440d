// The HTML report's structure: every section in order, nothing that reaches outside the page,
// hostile strings escaped, and partial or odd results (no requests, no baseline, INVALID with
// no classes, NaN and null values, wrong types) still render. Writes the fixtures' reports to
// the build folder (verify_report_{pass,fail}.html) for the browser check.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "verify/report_html.h"

namespace mmrt::verify {
namespace {

using nlohmann::json;

const std::vector<std::string> kSectionIds = {"verdict",     "timeline",   "cdf",   "classes",
                                              "attribution", "streaks",    "drift", "preflight",
                                              "baseline",    "fingerprint"};

json load_fixture(const std::string& name) {
  std::ifstream in(std::string(MMRT_SOURCE_DIR) + "/tests/verify/fixtures/" + name);
  EXPECT_TRUE(in.good()) << name;
  return json::parse(in);
}

size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// The HTML of the section with this id ("" when absent).
std::string section(const std::string& html, const std::string& id) {
  const size_t start = html.find("<section id=\"" + id + "\">");
  if (start == std::string::npos) return "";
  const size_t end = html.find("</section>", start);
  return html.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// The text of the verdict banner, tags removed.
std::string banner_text(const std::string& html) {
  const size_t start = html.find("id=\"verdict-banner\"");
  if (start == std::string::npos) return "";
  const size_t open_end = html.find('>', start);
  const size_t end = html.find("</div>", open_end);
  std::string text;
  bool in_tag = false;
  for (size_t i = open_end + 1; i < end; ++i) {
    if (html[i] == '<') in_tag = true;
    if (!in_tag) text += html[i];
    if (html[i] == '>') in_tag = false;
  }
  return text;
}

// The start tags of a page (outside its style sheet): lower-case names and attributes. The
// renderer quotes every attribute value with double quotes.
struct Tag {
  std::string name;
  std::map<std::string, std::string> attrs;
};
std::vector<Tag> tags(const std::string& html) {
  std::vector<Tag> out;
  const auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  size_t i = 0;
  while ((i = html.find('<', i)) != std::string::npos) {
    size_t j = i + 1;
    while (j < html.size() &&
           (std::isalnum(static_cast<unsigned char>(html[j])) || html[j] == '!' || html[j] == '-'))
      ++j;
    Tag t{lower(html.substr(i + 1, j - i - 1)), {}};
    while (j < html.size() && html[j] != '>') {
      if (std::isspace(static_cast<unsigned char>(html[j])) || html[j] == '/') {
        ++j;
        continue;
      }
      size_t k = j;
      while (k < html.size() && !std::isspace(static_cast<unsigned char>(html[k])) &&
             html[k] != '=' && html[k] != '>')
        ++k;
      std::string name = lower(html.substr(j, k - j)), value;
      if (k < html.size() && html[k] == '=') {
        EXPECT_EQ(html[k + 1], '"') << "unquoted attribute " << name;
        const size_t end = html.find('"', k + 2);
        value = html.substr(k + 2, end - k - 2);
        k = end + 1;
      }
      t.attrs[name] = value;
      j = k;
    }
    if (t.name == "style") {
      i = html.find("</style>", j);
      if (i == std::string::npos) break;
    } else {
      i = j;
    }
    if (!t.name.empty() && t.name[0] != '!') out.push_back(std::move(t));
  }
  return out;
}

std::string style_sheet(const std::string& html) {
  const size_t a = html.find("<style>"), b = html.find("</style>");
  if (a == std::string::npos || b == std::string::npos) return "";
  return html.substr(a, b - a);
}

// Everything the page must hold whatever its input: one document, every section once and in
// order with a heading, the banner, and nothing that runs code or reaches outside the file.
void expect_well_formed(const std::string& html, const std::vector<std::string>& data_urls = {}) {
  ASSERT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(occurrences(html, "<html"), 1u);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  size_t last = 0;
  for (const std::string& id : kSectionIds) {
    const std::string tag = "<section id=\"" + id + "\">";
    EXPECT_EQ(occurrences(html, tag), 1u) << id;
    const size_t at = html.find(tag);
    EXPECT_GT(at, last) << id << " out of order";
    last = at;
    const std::string body = section(html, id);
    EXPECT_NE(body.find("<h2>"), std::string::npos) << id;
    EXPECT_GT(body.size(), tag.size() + 40) << id << " is empty";
  }
  EXPECT_EQ(occurrences(html, "<section"), kSectionIds.size());
  EXPECT_EQ(occurrences(html, "</section>"), kSectionIds.size());
  EXPECT_EQ(occurrences(html, "id=\"verdict-banner\""), 1u);
  // Nothing that runs or loads: no script, no external resources, links only to anchors of
  // the page itself.
  for (const Tag& t : tags(html)) {
    for (const char* bad : {"script", "link", "img", "image", "iframe", "object", "embed", "use",
                            "foreignobject", "base", "form", "audio", "video", "source"})
      EXPECT_NE(t.name, bad) << "a <" << bad << "> element";
    if (t.name == "meta" && t.attrs.count("http-equiv")) {
      EXPECT_EQ(t.attrs.at("http-equiv"), "Content-Security-Policy");
    }
    for (const auto& [name, value] : t.attrs) {
      EXPECT_NE(name.rfind("on", 0), 0u) << "event handler " << name << " on <" << t.name << ">";
      EXPECT_NE(name, "src") << "<" << t.name << " src>";
      EXPECT_EQ(name.find("xlink"), std::string::npos) << name;
      if (name == "href") {
        EXPECT_EQ(value.rfind('#', 0), 0u) << "href=" << value;
      }
      if (name == "style") {
        EXPECT_EQ(value.find("url("), std::string::npos) << value;
      }
    }
  }
  const std::string css = style_sheet(html);
  EXPECT_FALSE(css.empty());
  EXPECT_EQ(css.find("url("), std::string::npos);
  EXPECT_EQ(css.find("@import"), std::string::npos);
  EXPECT_EQ(css.find("@font-face"), std::string::npos);
  // http:// and https:// only inside text that came from the data.
  std::string rest = html;
  for (const std::string& u : data_urls)
    for (size_t p = rest.find(u); p != std::string::npos; p = rest.find(u)) rest.erase(p, u.size());
  EXPECT_EQ(rest.find("http://"), std::string::npos);
  EXPECT_EQ(rest.find("https://"), std::string::npos);
  // No unformatted non-finite numbers.
  for (const char* bad :
       {">nan<", ">inf<", ">-nan<", ">-inf<", "nan ms", "inf ms", " nan", " inf ", "NaN",
        "Infinity", "\"nan", "\"inf", "\"-nan", "\"-inf", "nan %", "inf %"})
    EXPECT_EQ(html.find(bad), std::string::npos) << bad;
}

void write_report(const std::string& html, const std::string& name) {
  std::ofstream out(std::string(MMRT_BINARY_DIR) + "/" + name);
  out << html;
  EXPECT_TRUE(out.good()) << name;
}

TEST(ReportHtml, PassFixtureRendersEverySection) {
  const json r = load_fixture("result_pass.json");
  const std::string html = render_html(r);
  expect_well_formed(html, {r["run"]["url"].get<std::string>()});
  EXPECT_EQ(banner_text(html).rfind("PASS", 0), 0u) << banner_text(html);
  EXPECT_NE(html.find("class=\"banner pass\""), std::string::npos);
  EXPECT_NE(html.find("mmrt verify \xE2\x80\x94 default-mixed on lab-bench-02"), std::string::npos);
  EXPECT_NE(html.find(r["generated_at"].get<std::string>()), std::string::npos);
  // No baseline: how to make one.
  EXPECT_NE(section(html, "baseline").find("--save-baseline lab.json"), std::string::npos);
  EXPECT_NE(section(html, "baseline").find("--baseline lab.json"), std::string::npos);
  // No violation: nothing to attribute; no violating dot.
  EXPECT_NE(section(html, "attribution").find("nothing to attribute"), std::string::npos);
  EXPECT_EQ(occurrences(section(html, "timeline"), "class=\"dot viol\""), 0u);
  // One dot or cross per request with a scheduled time (there are far fewer than 5,000).
  const std::string tl = section(html, "timeline");
  EXPECT_EQ(occurrences(tl, "<circle") + occurrences(tl, "class=\"xmark\""), r["requests"].size());
  // Every class has a table, and charts are inline SVG.
  for (const char* c : {"gold", "silver", "stream"})
    EXPECT_NE(section(html, "classes").find(std::string("<h3>") + c), std::string::npos) << c;
  EXPECT_GE(occurrences(html, "<svg"), 4u);
  write_report(html, "verify_report_pass.html");
}

TEST(ReportHtml, FailFixtureShowsReasonsViolationsAndBaseline) {
  const json r = load_fixture("result_fail.json");
  const std::string html = render_html(r);
  expect_well_formed(html, {r["run"]["url"].get<std::string>()});
  EXPECT_EQ(banner_text(html).rfind("FAIL", 0), 0u) << banner_text(html);
  EXPECT_NE(banner_text(html).find("exit code 1"), std::string::npos);
  EXPECT_NE(html.find("class=\"banner fail\""), std::string::npos);
  const std::string verdict = section(html, "verdict");
  for (const auto& reason : r["reasons"]) {
    std::string rule = reason["rule"].get<std::string>();
    for (size_t p = rule.find('<'); p != std::string::npos; p = rule.find('<'))
      rule.replace(p, 1, "&lt;");
    EXPECT_NE(verdict.find(rule), std::string::npos) << rule;
  }
  EXPECT_NE(section(html, "attribution").find("Violations were dominated by <b>queue</b>: 56 %"),
            std::string::npos);
  EXPECT_GT(occurrences(section(html, "timeline"), "class=\"dot viol\""), 10u);
  EXPECT_GT(occurrences(section(html, "timeline"), "class=\"xmark\""), 0u);
  EXPECT_NE(section(html, "timeline").find("class=\"throttle\""), std::string::npos);
  EXPECT_NE(section(html, "streaks").find("camera-0"), std::string::npos);
  EXPECT_NE(section(html, "baseline").find("powersave"), std::string::npos);
  EXPECT_NE(section(html, "baseline").find("Likely causes"), std::string::npos);
  EXPECT_NE(section(html, "drift").find("pill bad\">no"), std::string::npos);
  // CDF threshold markers for the class that has them.
  EXPECT_NE(section(html, "cdf").find("gold P99 \xE2\x89\xA4 300 ms"), std::string::npos);
  EXPECT_NE(section(html, "cdf").find("gold P99 \xE2\x89\xA4 2500 ms"), std::string::npos);
  write_report(html, "verify_report_fail.html");
}

TEST(ReportHtml, IsDeterministic) {
  const json r = load_fixture("result_fail.json");
  EXPECT_EQ(render_html(r), render_html(r));
}

TEST(ReportHtml, EscapesHostileStrings) {
  json r = load_fixture("result_fail.json");
  const std::string evil = "<script>alert(1)</script>";
  r["classes"][0]["name"] = evil;
  r["classes"][0]["rules"][0]["rule"] = evil;
  r["reasons"][0]["message"] = "\"><img src=x onerror=alert(1)>";
  r["thresholds"][evil] = {{"ttft_p99_ms", 300}};
  for (auto& q : r["requests"])
    if (q["class"] == "gold") q["class"] = evil;
  r["fingerprint"]["cmdline"] = "ro quiet & isolcpus=\"4-7\" 'x' <b>";
  r["fingerprint"]["hostname"] = "host</title><style>*{display:none}</style>";
  r["run"]["url"] = "https://evil.example/\"><a href=\"https://evil.example\">x</a>";
  r["run"]["workload"] = "w&<>\"'";
  r["preflight"]["before"][0]["detail"] = "</td></tr></table><script src=//x></script>";
  r["baseline"]["fingerprint_diffs"][0]["here"] = "<svg onload=alert(1)>";
  r["telemetry"][0]["gpu_reasons"] = "<script>";
  r["generated_at"] = "<i>now</i>";
  r["verdict"] = "FAIL<script>";
  const std::string html = render_html(r);
  expect_well_formed(html, {"https://evil.example"});
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<b>ro"), std::string::npos);
  EXPECT_EQ(html.find("<svg onload"), std::string::npos);
  EXPECT_EQ(html.find("<i>now"), std::string::npos);
  EXPECT_EQ(html.find("<a href=\"https"), std::string::npos);
  EXPECT_EQ(occurrences(html, "<title>mmrt"), 1u);
  EXPECT_EQ(occurrences(html, "<style>"), 1u);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("ro quiet &amp; isolcpus=&quot;4-7&quot; &#39;x&#39; &lt;b&gt;"),
            std::string::npos);
  EXPECT_NE(html.find("w&amp;&lt;&gt;&quot;&#39;"), std::string::npos);
  EXPECT_NE(html.find("&lt;i&gt;now&lt;/i&gt;"), std::string::npos);
}

TEST(ReportHtml, InvalidUtf8AndControlBytesAreReplaced) {
  json r = json::object();
  r["verdict"] = "INVALID";
  r["fingerprint"] = {{"kernel", std::string("a\xFF\xC0 b\x01"
                                             "c")}};
  const std::string html = render_html(r);
  expect_well_formed(html);
  EXPECT_NE(html.find("a\xEF\xBF\xBD\xEF\xBF\xBD b\xEF\xBF\xBD"
                      "c"),
            std::string::npos);
}

TEST(ReportHtml, EmptyResultStillRendersEverySection) {
  for (const json& r : {json::object(), json(), json::array(), json(42), json("PASS")}) {
    const std::string html = render_html(r);
    expect_well_formed(html);
    EXPECT_EQ(banner_text(html).rfind("UNKNOWN", 0), 0u) << banner_text(html);
    EXPECT_NE(html.find("\xE2\x80\x94"), std::string::npos);
  }
}

TEST(ReportHtml, ZeroRequests) {
  json r = load_fixture("result_pass.json");
  r["requests"] = json::array();
  r["run"]["requests_measured"] = 0;
  for (auto& c : r["classes"]) {
    for (const char* k : {"requests", "completed", "refused", "errors", "timeouts", "violations"})
      c[k] = 0;
    for (const char* m : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
      c[m] = {{"n", 0}, {"p50", nullptr}, {"p90", nullptr}, {"p99", nullptr}, {"max", nullptr}};
  }
  r["telemetry"] = json::array();
  const std::string html = render_html(r);
  expect_well_formed(html, {r["run"]["url"].get<std::string>()});
  EXPECT_NE(section(html, "timeline").find("No request was measured"), std::string::npos);
  EXPECT_NE(section(html, "timeline").find("No host telemetry"), std::string::npos);
  EXPECT_NE(section(html, "cdf").find("No completed request"), std::string::npos);
  EXPECT_EQ(occurrences(section(html, "timeline"), "<circle"), 0u);
}

TEST(ReportHtml, InvalidWithNoClasses) {
  const json r = {{"mmrt_verify", 1},
                  {"generated_at", "2026-12-01T22:40:00Z"},
                  {"verdict", "INVALID"},
                  {"exit_code", 2},
                  {"reasons",
                   {{{"kind", "invalid"},
                     {"rule", "preflight: server reachable"},
                     {"message", "connection refused on 127.0.0.1:8000"}}}},
                  {"run", {{"url", "http://127.0.0.1:8000"}, {"workload", "default-mixed"}}},
                  {"classes", json::array()},
                  {"requests", json::array()},
                  {"baseline", nullptr},
                  {"streaks", json::array()},
                  {"fingerprint", {{"hostname", "edge-1"}}}};
  const std::string html = render_html(r);
  expect_well_formed(html, {"http://127.0.0.1:8000"});
  EXPECT_EQ(banner_text(html).rfind("INVALID", 0), 0u);
  EXPECT_NE(banner_text(html).find("exit code 2"), std::string::npos);
  EXPECT_NE(html.find("class=\"banner invalid\""), std::string::npos);
  EXPECT_NE(section(html, "verdict").find("connection refused on 127.0.0.1:8000"),
            std::string::npos);
  EXPECT_NE(section(html, "classes").find("No class results"), std::string::npos);
  EXPECT_NE(section(html, "streaks").find("No frame streams"), std::string::npos);
  EXPECT_NE(section(html, "baseline").find("--save-baseline"), std::string::npos);
  EXPECT_NE(section(html, "drift").find("No drift data"), std::string::npos);
  write_report(html, "verify_report_invalid.html");
}

TEST(ReportHtml, NanNullAndMistypedValuesShowAsDashes) {
  json r = load_fixture("result_fail.json");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  r["classes"][0]["ttft_ms"] = {{"n", nan},       {"p50", nan},  {"p90", inf},
                                {"p99", nullptr}, {"max", "12"}, {"mean", true}};
  r["classes"][0]["rules"][0]["observed_ms"] = nan;
  r["classes"][0]["rules"][0]["threshold_ms"] = nullptr;
  r["classes"][1]["rules"] = "not a list";
  r["classes"][2] = nullptr;
  r["requests"][0]["t_s"] = nan;
  r["requests"][1]["ttft_ms"] = inf;
  r["requests"][2] = 7;
  r["requests"][3]["stages_ms"] = "x";
  r["drift"]["first_half"] = nullptr;
  r["drift"]["ttft_p50_ratio"] = nan;
  r["attribution"]["violating"]["stages_ms"]["queue"] = nan;
  r["attribution"]["dominant_share"] = nullptr;
  r["telemetry"][3]["busy_pct"] = nan;
  r["telemetry"][4] = "junk";
  r["thresholds"]["gold"]["ttft_p99_ms"] = nan;
  r["run"]["duration_s"] = nullptr;
  r["run"]["confidence"] = inf;
  r["exit_code"] = nullptr;
  r["preflight"]["after"] = 3;
  r["baseline"]["rows"][0]["delta_pct"] = nan;
  r["baseline"]["rows"][1] = json::array();
  r["fingerprint"]["cpus"] = nan;
  r["fingerprint"]["numa"] = {{"nodes", 2}};
  r["streaks"][0]["at_s"] = nan;
  const std::string html = render_html(r);
  expect_well_formed(html, {r["run"]["url"].get<std::string>()});
  EXPECT_GT(occurrences(html, "\xE2\x80\x94"), 20u);
  EXPECT_NE(html.find("exit code \xE2\x80\x94"), std::string::npos);
  EXPECT_NE(html.find("{&quot;nodes&quot;:2}"), std::string::npos);
}

TEST(ReportHtml, WrongTypesEverywhere) {
  const json r = {{"verdict", 3},
                  {"reasons", "x"},
                  {"run", json::array()},
                  {"classes", {1, "a"}},
                  {"requests", {1, 2}},
                  {"telemetry", {{{"t_s", "1"}}}},
                  {"thresholds", 5},
                  {"streaks", {nullptr}},
                  {"attribution", "q"},
                  {"drift", 1},
                  {"preflight", {{"before", {1}}}},
                  {"baseline", 2},
                  {"fingerprint", "host"}};
  const std::string html = render_html(r);
  expect_well_formed(html);
  EXPECT_EQ(banner_text(html).rfind("3", 0), 0u);
}

TEST(ReportHtml, LogScaleWhenTtftSpansMoreThan30x) {
  json r = load_fixture("result_pass.json");
  EXPECT_EQ(section(render_html(r), "timeline").find("log scale"), std::string::npos);
  r["requests"][5]["ttft_ms"] = 20000.0;
  EXPECT_NE(section(render_html(r), "timeline").find("TTFT (ms, log scale)"), std::string::npos);
}

TEST(ReportHtml, ThinsPassingDotsBeyond5000RequestsButKeepsEveryViolation) {
  json r = load_fixture("result_fail.json");
  json reqs = json::array();
  size_t violating = 0, failed = 0;
  for (int i = 0; i < 12000; ++i) {
    json q = {{"i", i},          {"t_s", i * 0.025}, {"class", i % 2 ? "gold" : "silver"},
              {"status", "ok"},  {"warmup", false},  {"ttft_ms", 20.0 + (i % 97)},
              {"e2e_ms", 300.0}, {"violated", false}};
    if (i % 37 == 0) {
      q["violated"] = true;
      q["ttft_ms"] = 400.0;
      ++violating;
    } else if (i % 101 == 0) {
      q["status"] = "refused";
      q["ttft_ms"] = nullptr;
      ++failed;
    }
    reqs.push_back(q);
  }
  r["requests"] = reqs;
  const std::string html = render_html(r);
  expect_well_formed(html, {r["run"]["url"].get<std::string>()});
  const std::string tl = section(html, "timeline");
  EXPECT_EQ(occurrences(tl, "class=\"dot viol\""), violating);
  EXPECT_EQ(occurrences(tl, "class=\"xmark\""), failed);
  EXPECT_LE(occurrences(tl, "<circle"), 5000u);
  EXPECT_GE(occurrences(tl, "class=\"dot\""), 1000u);
  EXPECT_NE(tl.find("Thinned for drawing"), std::string::npos);
}

TEST(ReportHtml, NumbersAreFormattedSensibly) {
  json r = load_fixture("result_pass.json");
  r["classes"][0]["ttft_ms"] = {{"n", 3},       {"p50", 12.345}, {"p90", 99.96},
                                {"p99", 123.6}, {"max", 2048.4}, {"mean", -0.01}};
  const std::string cls = section(render_html(r), "classes");
  EXPECT_NE(cls.find(">12.3<"), std::string::npos);
  EXPECT_NE(cls.find(">100<"), std::string::npos);  // 99.96 is 100.0 at one decimal
  EXPECT_NE(cls.find(">124<"), std::string::npos);
  EXPECT_NE(cls.find(">2048<"), std::string::npos);
  EXPECT_NE(cls.find(">0.0<"), std::string::npos);  // never "-0.0"
}

}  // namespace
}  // namespace mmrt::verify
