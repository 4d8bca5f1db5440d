// The report's tables: per-class results and rules, streaks, drift, preflight checks, the
// baseline comparison and the host fingerprint.
#include <array>
#include <cmath>
#include <initializer_list>
#include <map>

#include "verify/report_sections.h"
#include "verify/svg.h"

namespace mmrt::verify::html {
namespace {

using nlohmann::json;

std::string td(const std::string& html, bool numeric = false) {
  return std::string(numeric ? "<td class=\"n\">" : "<td>") + html + "</td>";
}
std::string th(std::string_view text, bool numeric = false) {
  return std::string(numeric ? "<th class=\"n\">" : "<th>") + esc(text) + "</th>";
}
// A table cell with an escaped string, kDash when empty.
std::string td_text(const std::string& s) {
  return td(s.empty() ? std::string(kDash) : esc(s));
}
std::string head(std::initializer_list<std::pair<std::string_view, bool>> cols,
                 std::string_view cls = {}) {
  std::string s = cls.empty() ? "<table>" : "<table class=\"" + std::string(cls) + "\">";
  s += "<thead><tr>";
  for (const auto& [name, numeric] : cols) s += th(name, numeric);
  return s + "</tr></thead><tbody>\n";
}
constexpr std::string_view kTableEnd = "</tbody></table>\n";

// A count cell that is highlighted when it is above zero.
std::string count_cell(const json& j, std::string_view key, bool bad_when_positive) {
  const auto v = num(j, key);
  const bool hl = bad_when_positive && v && *v > 0;
  return std::string(hl ? "<td class=\"n bad\">" : "<td class=\"n\">") + count(v) + "</td>";
}

void class_table(std::string& out, const json& c) {
  const std::string name = str(c, "name");
  out += "<div class=\"card\"><h3>" + (name.empty() ? std::string(kDash) : esc(name)) +
         (name == "all" ? " <span class=\"muted\">(every class together)</span>" : "") + "</h3>\n";
  out += head({{"requests", true},
               {"completed", true},
               {"refused", true},
               {"errors", true},
               {"timeouts", true},
               {"violations", true}},
              "counts");
  out += "<tr>" + count_cell(c, "requests", false) + count_cell(c, "completed", false) +
         count_cell(c, "refused", true) + count_cell(c, "errors", true) +
         count_cell(c, "timeouts", true) + count_cell(c, "violations", true) + "</tr>\n";
  out += kTableEnd;

  out += head({{"metric", false},
               {"samples", true},
               {"P50 ms", true},
               {"P90 ms", true},
               {"P99 ms", true},
               {"max ms", true},
               {"mean ms", true}});
  constexpr std::pair<const char*, const char*> kMetrics[] = {
      {"ttft_ms", "TTFT (time to first token)"},
      {"tpot_ms", "TPOT (time per output token)"},
      {"itl_ms", "ITL (inter-token latency)"},
      {"e2e_ms", "end-to-end"}};
  for (const auto& [key, label] : kMetrics) {
    const json* d = field(c, key);
    const json none;
    const json& m = d != nullptr ? *d : none;
    out += "<tr>" + td(label) + td(count(num(m, "n")), true) + td(ms(num(m, "p50")), true) +
           td(ms(num(m, "p90")), true) + td(ms(num(m, "p99")), true) + td(ms(num(m, "max")), true) +
           td(ms(num(m, "mean")), true) + "</tr>\n";
  }
  out += kTableEnd;

  const auto rules = items(c, "rules");
  if (rules.empty()) {
    out += note("No rules apply to this class.") + "</div>\n";
    return;
  }
  out += "<h4>Rules</h4>\n";
  out += head({{"rule", false},
               {"observed ms", true},
               {"threshold ms", true},
               {"samples had / needed", true},
               {"over budget", true},
               {"status", false},
               {"detail", false}});
  for (const json* r : rules) {
    const auto had = num(*r, "samples"), needed = num(*r, "needed");
    const bool short_of = had && needed && *had < *needed;
    std::string stat = str(*r, "stat");
    const std::string rule = str(*r, "rule");
    out += "<tr><td class=\"rule\">" + (rule.empty() ? std::string(kDash) : esc(rule)) + "</td>" +
           td(ms(num(*r, "observed_ms")), true) + td(ms(num(*r, "threshold_ms")), true) +
           std::string(short_of ? "<td class=\"n warnc\">" : "<td class=\"n\">") + count(had) +
           " / " + count(needed) + "</td>" + td(count(num(*r, "over")), true) +
           td(pill(str(*r, "status"))) +
           td("<span class=\"small\">" + esc(str(*r, "message")) + "</span>") + "</tr>\n";
  }
  out += std::string(kTableEnd) + "</div>\n";
}

// A value cell for preflight checks ("" as kDash).
std::string check_value(const json& check, std::string_view key) {
  return td("<span class=\"mono\">" +
            (str(check, key).empty() ? std::string(kDash) : esc(str(check, key))) + "</span>");
}

}  // namespace

std::string classes_body(const json& result) {
  const auto classes = items(result, "classes");
  if (classes.empty()) return note("No class results: the run did not measure any request.");
  std::string out;
  for (const json* c : classes) class_table(out, *c);
  return out;
}

std::string streaks_body(const json& result) {
  const auto streaks = items(result, "streaks");
  const json* run = field(result, "run");
  const auto k = run != nullptr ? num(*run, "k") : std::nullopt;
  if (streaks.empty())
    return note("No frame streams in this run, so the rule on consecutive late frames" +
                (k ? " (k = " + count(k) + ")" : std::string()) + " did not apply.");
  std::string out = note("A stream fails when k or more consecutive frames violate their rules.");
  out += head({{"stream", false},
               {"k", true},
               {"frames", true},
               {"longest streak", true},
               {"where", true},
               {"status", false}});
  for (const json* s : streaks) {
    const auto at = num(*s, "at_s");
    out += "<tr>" + td_text(str(*s, "stream")) + td(count(num(*s, "k")), true) +
           td(count(num(*s, "frames")), true) + td(count(num(*s, "longest")), true) +
           td(at ? "at " + fixed(at, 1) + " s" : std::string(kDash), true) +
           td(pill(str(*s, "status"))) + "</tr>\n";
  }
  return out + std::string(kTableEnd);
}

std::string drift_body(const json& result) {
  const json* d = field(result, "drift");
  if (d == nullptr) return note("No drift data in this result.");
  const json none;
  const json* f = field(*d, "first_half");
  const json* s = field(*d, "second_half");
  const json& first = f != nullptr ? *f : none;
  const json& second = s != nullptr ? *s : none;
  std::string out = head({{"statistic", false},
                          {"first half ms", true},
                          {"second half ms", true},
                          {"second / first", true}});
  constexpr std::array<std::array<const char*, 3>, 4> kRows = {{
      {"TTFT P50", "ttft_p50_ms", "ttft_p50_ratio"},
      {"TTFT P99", "ttft_p99_ms", ""},
      {"end-to-end P50", "e2e_p50_ms", "e2e_p50_ratio"},
      {"end-to-end P99", "e2e_p99_ms", ""},
  }};
  for (const auto& [label, key, ratio_key] : kRows) {
    const auto a = num(first, key), b = num(second, key);
    std::optional<double> ratio = *ratio_key != '\0' ? num(*d, ratio_key) : std::nullopt;
    if (!ratio && a && b && *a > 0) ratio = *b / *a;
    out += "<tr>" + td(label) + td(ms(a), true) + td(ms(b), true) +
           td(ratio ? fixed(ratio, 2) + " \xC3\x97" : std::string(kDash), true) + "</tr>\n";
  }
  out += kTableEnd;
  const auto steady = flag(*d, "steady");
  out += "<p>Steady over the run: " + (steady ? pill(*steady ? "yes" : "no") : std::string(kDash)) +
         (steady && !*steady ? " <span class=\"muted\">latency moved between the halves: the "
                               "server may be degrading (heat, memory, queues)</span>"
                             : "") +
         "</p>\n";
  return out;
}

std::string preflight_body(const json& result) {
  const json* p = field(result, "preflight");
  if (p == nullptr) return note("No preflight checks in this result.");
  const auto before = items(*p, "before");
  const auto after = items(*p, "after");
  std::map<std::string, const json*> after_by_name;
  for (const json* a : after) after_by_name[str(*a, "name")] = a;
  std::string mode = str(*p, "mode");
  std::string out = "<p>Mode: <b>" + (mode.empty() ? std::string(kDash) : esc(mode)) +
                    "</b> <span class=\"muted\">(checks of the host before the run; the after "
                    "column shows a value that changed during it)</span></p>\n";
  if (before.empty()) return out + note("No checks were run.");
  out += head({{"check", false},
               {"value", false},
               {"expected", false},
               {"verdict", false},
               {"required", false},
               {"after run", false}});
  for (const json* c : before) {
    const std::string name = str(*c, "name"), title = str(*c, "title");
    const std::string detail = str(*c, "detail");
    std::string check = "<b>" + esc(title.empty() ? name : title) + "</b>";
    if (!title.empty() && !name.empty())
      check += " <span class=\"mono muted\">" + esc(name) + "</span>";
    if (!detail.empty()) check += "<div class=\"small muted\">" + esc(detail) + "</div>";
    std::string after_cell =
        "<span class=\"muted\">" + std::string(after.empty() ? kDash : "same") + "</span>";
    auto it = after_by_name.find(name);
    if (it != after_by_name.end()) {
      const std::string v = str(*it->second, "value");
      if (v != str(*c, "value")) {
        after_cell = "<span class=\"mono\">" + esc(v.empty() ? std::string(kDash) : v) +
                     "</span> " + pill(str(*it->second, "verdict"));
      }
    }
    const auto required = flag(*c, "required");
    out += "<tr>" + td(check) + check_value(*c, "value") + check_value(*c, "expected") +
           td(pill(str(*c, "verdict"))) +
           td(required && *required ? "<span class=\"req\">required</span>"
                                    : "<span class=\"muted\">no</span>") +
           td(after_cell) + "</tr>\n";
  }
  return out + std::string(kTableEnd);
}

std::string baseline_body(const json& result) {
  const json* b = field(result, "baseline");
  if (b == nullptr)
    return "<p>No baseline was given, so this run was not compared with a lab run. To make one, "
           "run <code>mmrt verify ... --save-baseline lab.json</code> on the lab machine, then "
           "pass <code>--baseline lab.json</code> here.</p>\n";
  std::string out = "<p>Compared with <code>" +
                    esc(str(*b, "file").empty() ? std::string(kDash) : str(*b, "file")) + "</code>";
  const std::string when = str(*b, "lab_generated_at");
  if (!when.empty()) out += " (lab run of " + esc(when) + ")";
  out += ".</p>\n";
  const auto rows = items(*b, "rows");
  if (rows.empty()) {
    out += note("The baseline has no comparable rows.");
  } else {
    out += head({{"class", false},
                 {"metric", false},
                 {"stat", false},
                 {"lab ms", true},
                 {"here ms", true},
                 {"delta ms", true},
                 {"delta %", true},
                 {"tolerance %", true},
                 {"status", false}});
    for (const json* r : rows) {
      const auto dp = num(*r, "delta_pct");
      const auto dms = num(*r, "delta_ms");
      const std::string sign_ms = dms && *dms > 0 ? "+" : "";
      const std::string sign_pct = dp && *dp > 0 ? "+" : "";
      out += "<tr>" + td_text(str(*r, "class")) + td_text(str(*r, "metric")) +
             td_text(str(*r, "stat")) + td(ms(num(*r, "lab_ms")), true) +
             td(ms(num(*r, "here_ms")), true) + td(sign_ms + ms(dms), true) +
             td(dp ? sign_pct + fixed(dp, 1) : std::string(kDash), true) +
             td(fixed(num(*r, "tolerance_pct"), 0), true) + td(pill(str(*r, "status"))) + "</tr>\n";
    }
    out += kTableEnd;
  }
  const auto diffs = items(*b, "fingerprint_diffs");
  out += "<h3>Likely causes: how this host differs from the lab</h3>\n";
  if (diffs.empty()) return out + note("The host fingerprints match.");
  out += "<ul class=\"causes\">\n";
  for (const json* d : diffs) {
    const auto val = [&](std::string_view k) {
      const std::string v = str(*d, k);
      return v.empty() ? std::string(kDash) : esc(v);
    };
    out += "<li><b>" + val("key") + "</b>: lab <span class=\"mono\">" + val("lab") +
           "</span> \xE2\x86\x92 here <span class=\"mono\">" + val("here") + "</span></li>\n";
  }
  return out + "</ul>\n";
}

std::string fingerprint_body(const json& result) {
  const json* f = field(result, "fingerprint");
  if (f == nullptr || !f->is_object() || f->empty())
    return note("No host fingerprint in this result.");
  std::string out = "<table class=\"kv\"><tbody>\n";
  for (const auto& [key, value] : f->items()) {
    const std::string v = str(&value);
    out += "<tr><th>" + esc(key) + "</th><td class=\"mono wrap\">" +
           (v.empty() ? std::string(kDash) : esc(v)) + "</td></tr>\n";
  }
  return out + "</tbody></table>\n";
}

}  // namespace mmrt::verify::html
