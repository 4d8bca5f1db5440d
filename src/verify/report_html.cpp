// The HTML report page: the style sheet, the header, the verdict banner and the order of the
// sections (their bodies are in report_timeline.cpp, report_charts.cpp and report_tables.cpp).
#include "verify/report_html.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "verify/report_sections.h"
#include "verify/svg.h"

namespace mmrt::verify {
namespace html {

using nlohmann::json;

std::string pill(std::string_view status) {
  std::string lower;
  for (char c : status) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const char* cls = "muted";
  if (lower == "pass" || lower == "ok" || lower == "yes") {
    cls = "good";
  } else if (lower == "fail" || lower == "error" || lower == "no") {
    cls = "bad";
  } else if (lower == "warn" || lower == "insufficient" || lower == "invalid" ||
             lower == "timeout" || lower == "refused") {
    cls = "warn";
  }
  return std::string("<span class=\"pill ") + cls + "\">" +
         (status.empty() ? std::string(kDash) : esc(status)) + "</span>";
}

std::string legend(const std::vector<LegendEntry>& entries) {
  std::string out = "<div class=\"legend\">";
  for (const LegendEntry& e : entries) {
    const std::string st =
        e.style == "dot" || e.style == "cross" || e.style == "dash" ? e.style : "box";
    const std::string prop = st == "dash" ? "border-color" : st == "cross" ? "color" : "background";
    out += "<span><i class=\"sw " + st + "\" style=\"" + prop + ":" + e.color + "\">" +
           (st == "cross" ? "\xC3\x97" : "") + "</i>" + esc(e.label) + "</span>";
  }
  return out + "</div>\n";
}

std::string_view class_color(size_t i) {
  constexpr std::array<std::string_view, 8> kPalette = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1",
                                                        "#76b7b2", "#e15759", "#9c755f", "#edc948"};
  return kPalette[i % kPalette.size()];
}

std::vector<std::string> class_names(const json& result) {
  std::vector<std::string> out;
  const auto add = [&](const std::string& n) {
    if (!n.empty() && n != "all" && std::find(out.begin(), out.end(), n) == out.end())
      out.push_back(n);
  };
  for (const json* c : items(result, "classes")) add(str(*c, "name"));
  for (const json* r : items(result, "requests")) add(str(*r, "class"));
  return out;
}

std::string note(std::string_view text) {
  return "<p class=\"note\">" + esc(text) + "</p>\n";
}

namespace {

constexpr std::string_view kStyle = R"css(
:root{--ink:#1f2933;--muted:#667085;--line:#e4e7ec;--zebra:#f8f9fb;--head:#eef1f5;
--good:#1b7f3b;--bad:#c62828;--warn:#d98b00}
*{box-sizing:border-box}
html{background:#f2f4f7}
body{margin:0;color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,"Noto Sans","Liberation Sans","DejaVu Sans",sans-serif}
main{max-width:1000px;margin:0 auto;padding:24px 20px 48px}
header h1{font-size:24px;line-height:1.25;margin:0 0 4px;word-break:break-word}
header .meta{color:var(--muted);font-size:13.5px;margin:0}
nav{margin:12px 0 0;font-size:13px;display:flex;flex-wrap:wrap;gap:4px 14px}
nav a{color:#2f5d95;text-decoration:none}
section{background:#fff;border:1px solid var(--line);border-radius:10px;padding:18px 22px;
margin:16px 0;box-shadow:0 1px 2px rgba(16,24,40,.05)}
h2{font-size:18px;margin:0 0 12px;padding-bottom:8px;border-bottom:1px solid var(--line)}
h3{font-size:15.5px;margin:18px 0 8px}
h4{font-size:14px;margin:14px 0 6px;color:#344054}
p{margin:8px 0}
.note{color:var(--muted);font-size:13.5px}
.lead{font-size:16px}
.small{font-size:12.5px}
.muted{color:var(--muted)}
.mono,code{font-family:ui-monospace,"SF Mono",Menlo,Consolas,"DejaVu Sans Mono",monospace;
font-size:12.5px}
code{background:#f2f4f7;padding:1px 5px;border-radius:4px;white-space:nowrap}
.wrap{word-break:break-all}
table{border-collapse:collapse;width:100%;font-size:13.5px;margin:8px 0 12px}
th,td{padding:6px 9px;text-align:left;border-bottom:1px solid var(--line);vertical-align:top}
thead th{background:var(--head);font-weight:600;font-size:12.5px;color:#344054;
white-space:nowrap}
tbody tr:nth-child(even){background:var(--zebra)}
tr.hl td{background:#fff4e5}
.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.bad{color:var(--bad);font-weight:600}
.warnc{color:#9a6100;fill:#9a6100}
.badc{fill:var(--bad);color:var(--bad)}
table.counts{width:auto;min-width:60%}
table.counts th,table.counts td{min-width:90px}
td.rule{white-space:nowrap}
table.kv th{width:28%;background:var(--head);font-weight:600;font-size:13px}
.card{border-top:1px solid var(--line);padding-top:4px;margin-top:12px}
div.card:first-of-type{border-top:0;margin-top:0}
.banner{border-radius:8px;padding:16px 22px;color:#fff;display:flex;align-items:baseline;
flex-wrap:wrap;gap:6px 18px}
.banner .word{font-size:40px;font-weight:800;letter-spacing:.04em;line-height:1.1}
.banner .exit{font-size:14px;opacity:.9}
.banner .sub{font-size:16px;flex-basis:100%}
.banner.pass{background:var(--good)}
.banner.fail{background:var(--bad)}
.banner.invalid{background:#f0a500;color:#2b1d00}
.banner.unknown{background:#667085}
ul.reasons{list-style:none;padding:0;margin:14px 0}
ul.reasons li{padding:8px 0;border-bottom:1px solid var(--line)}
ul.reasons .rule{font-weight:600;margin:0 8px}
.facts{font-size:13.5px;color:#344054;background:var(--zebra);border-radius:6px;
padding:8px 12px;display:flex;flex-wrap:wrap;gap:2px 18px}
.facts b{font-weight:600;color:var(--muted);font-size:12px;text-transform:uppercase;
letter-spacing:.03em;margin-right:4px}
.pill{display:inline-block;padding:1px 9px;border-radius:999px;font-size:12px;font-weight:600;
white-space:nowrap}
.pill.good{background:#dcf5e3;color:#14532d}
.pill.bad{background:#fde2e1;color:#9b1c1c}
.pill.warn{background:#fdefc8;color:#7a4a00}
.pill.muted{background:#eceff3;color:#475467}
.req{font-size:12px;font-weight:600;color:#344054}
ul.causes{margin:6px 0;padding-left:20px}
ul.causes li{margin:3px 0}
.legend{display:flex;flex-wrap:wrap;gap:4px 18px;font-size:13px;color:#344054;margin:4px 0 10px}
.sw{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:-1px;
border-radius:2px}
.sw.dot{border-radius:50%}
.sw.dash{height:0;width:18px;border-top:2px dashed;border-radius:0;vertical-align:3px}
.sw.cross{width:auto;height:auto;font-style:normal;font-weight:700;line-height:1;
vertical-align:0}
svg.chart{width:100%;height:auto;display:block;margin:6px 0 2px;overflow:visible}
svg .grid{stroke:#eaecf0;stroke-width:1}
svg .grid.strong{stroke:#d0d5dd;stroke-dasharray:2 3}
svg .axis{stroke:#98a2b3;stroke-width:1}
svg .tick{font-size:11px;fill:#475467}
svg .label{font-size:12px;fill:#344054}
svg .inbar{font-size:11px;fill:#fff;font-weight:600}
svg .dot{fill:#4e79a7;fill-opacity:.55}
svg .dot.warm{fill:#98a2b3;fill-opacity:.5}
svg .dot.viol{fill:#d62728;fill-opacity:.9}
svg .xmark{stroke:#d62728;stroke-width:1.6;fill:none}
svg .thr{stroke-width:1.5;stroke-dasharray:6 4;fill:none}
svg .thr.grey{stroke:#555}
svg .series{fill:none;stroke-width:1.8}
svg .series.wide{stroke-width:2.4;stroke-dasharray:1 0}
svg .throttle{stroke:#d98b00;stroke-width:1.5;stroke-dasharray:3 2}
footer{color:var(--muted);font-size:12.5px;text-align:center;margin-top:24px}
@media print{html{background:#fff}section{box-shadow:none;break-inside:avoid}nav{display:none}}
)css";

struct SectionDef {
  const char* id;
  const char* title;
  std::string (*body)(const json&);
};

std::string verdict_body(const json& result);

constexpr SectionDef kSections[] = {
    {"verdict", "Verdict", verdict_body},
    {"timeline", "Latency over time", timeline_body},
    {"cdf", "Latency distributions", cdf_body},
    {"classes", "Per class", classes_body},
    {"attribution", "What the violations were made of", attribution_body},
    {"streaks", "Consecutive late frames", streaks_body},
    {"drift", "Drift: first half vs second half", drift_body},
    {"preflight", "Preflight checks of the host", preflight_body},
    {"baseline", "Lab baseline vs this run", baseline_body},
    {"fingerprint", "Host fingerprint", fingerprint_body},
};

std::string verdict_word(const json& result) {
  const std::string v = str(result, "verdict");
  return v.empty() ? "UNKNOWN" : v;
}

std::string fact(std::string_view name, const std::string& value_html) {
  return "<span><b>" + esc(name) + "</b>" + value_html + "</span>";
}

std::string text_or_dash(const std::string& s) {
  return s.empty() ? std::string(kDash) : esc(s);
}

std::string verdict_body(const json& result) {
  const std::string word = verdict_word(result);
  std::string upper;
  for (char c : word) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const char* cls = upper == "PASS"      ? "pass"
                    : upper == "FAIL"    ? "fail"
                    : upper == "INVALID" ? "invalid"
                                         : "unknown";
  const auto reasons = items(result, "reasons");
  std::string sub;
  if (upper == "PASS") {
    sub = "Every rule held: the server meets its SLA on this host.";
  } else if (upper == "FAIL") {
    size_t failed = 0;
    for (const json* r : reasons) failed += str(*r, "kind") == "fail";
    sub = std::to_string(failed > 0 ? failed : reasons.size()) +
          (failed == 1 ? " rule" : " rules") + " failed: the server does not meet its SLA.";
  } else if (upper == "INVALID") {
    sub = "The run cannot be judged: its measurement is not trustworthy.";
  } else {
    sub = "The result has no verdict.";
  }
  std::string out = "<div id=\"verdict-banner\" class=\"banner " + std::string(cls) +
                    "\"><span class=\"word\">" + esc(word) +
                    "</span> <span class=\"exit\">exit code " + count(num(result, "exit_code")) +
                    "</span> <span class=\"sub\">" + esc(sub) + "</span></div>\n";
  if (reasons.empty()) {
    out += note(upper == "PASS" ? "No failed or invalidating rule." : "No reasons were given.");
  } else {
    out += "<ul class=\"reasons\">\n";
    for (const json* r : reasons) {
      out += "<li>" + pill(str(*r, "kind")) + "<span class=\"rule\">" +
             text_or_dash(str(*r, "rule")) + "</span><span class=\"msg\">" +
             esc(str(*r, "message")) + "</span></li>\n";
    }
    out += "</ul>\n";
  }

  const json* run_p = field(result, "run");
  const json none;
  const json& run = run_p != nullptr ? *run_p : none;
  std::string duration = fixed(num(run, "duration_s"), 0) + " s";
  if (num(run, "duration_s") && num(run, "warmup_s"))
    duration += " (+" + fixed(num(run, "warmup_s"), 0) + " s warm-up)";
  if (!num(run, "duration_s")) duration = std::string(kDash);
  std::string requests = count(num(run, "requests_measured"));
  if (num(run, "requests_scheduled"))
    requests += " of " + count(num(run, "requests_scheduled")) + " scheduled";
  const auto conf = num(run, "confidence");
  out += "<div class=\"facts\">" +
         fact("url", "<span class=\"mono\">" + text_or_dash(str(run, "url")) + "</span>") +
         fact("workload", text_or_dash(str(run, "workload"))) + fact("duration", duration) +
         fact("measured", requests) + fact("seed", text_or_dash(str(run, "seed"))) +
         fact("preflight", text_or_dash(str(run, "preflight"))) +
         fact("confidence", conf ? fixed(*conf * 100, 0) + " %" : std::string(kDash)) + "</div>\n";

  const json* g = field(result, "generator");
  if (g != nullptr) {
    const auto ok = flag(*g, "ok");
    out += "<p class=\"note\">Load generator lag (how late requests left the client): P50 " +
           ms(num(*g, "lag_p50_ms")) + " ms, P99 " + ms(num(*g, "lag_p99_ms")) + " ms, max " +
           ms(num(*g, "lag_max_ms")) + " ms against a limit of " + ms(num(*g, "limit_ms")) +
           " ms " + (ok ? pill(*ok ? "ok" : "fail") : std::string(kDash)) + "</p>\n";
  }
  return out;
}

}  // namespace
}  // namespace html

std::string render_html(const nlohmann::json& result) {
  using namespace html;
  const json* fp = field(result, "fingerprint");
  const json* run = field(result, "run");
  const std::string host = fp != nullptr ? str(*fp, "hostname") : "";
  const std::string workload = run != nullptr ? str(*run, "workload") : "";
  const std::string title = "mmrt verify \xE2\x80\x94 " +
                            (workload.empty() ? std::string(kDash) : workload) + " on " +
                            (host.empty() ? std::string(kDash) : host);
  const std::string generated = str(result, "generated_at");

  std::string out;
  out.reserve(256 * 1024);
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + esc(title) + "</title>\n<style>" + std::string(kStyle) + "</style>\n";
  out += "</head>\n<body>\n<main>\n<header>\n<h1>" + esc(title) + "</h1>\n";
  out += "<p class=\"meta\">Generated " + text_or_dash(generated) + " \xC2\xB7 verdict " +
         esc(verdict_word(result)) + "</p>\n<nav>";
  for (const SectionDef& s : kSections)
    out += "<a href=\"#" + std::string(s.id) + "\">" + s.title + "</a>";
  out += "</nav>\n</header>\n";
  for (const SectionDef& s : kSections) {
    out += "<section id=\"" + std::string(s.id) + "\">\n<h2>" + s.title + "</h2>\n";
    out += s.body(result);
    out += "</section>\n";
  }
  out += "<footer>mmrt verify report";
  const auto schema = num(result, "mmrt_verify");
  if (schema) out += " \xC2\xB7 result schema " + count(schema);
  out += " \xC2\xB7 self-contained: no scripts, no network</footer>\n</main>\n</body>\n</html>\n";
  return out;
}

}  // namespace mmrt::verify
