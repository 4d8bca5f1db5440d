// The report's distribution charts: latency CDFs per class, and the per-stage attribution of
// violating vs passing requests.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "verify/report_sections.h"
#include "verify/svg.h"

namespace mmrt::verify::html {
namespace {

using nlohmann::json;

constexpr int kWidth = 900;
constexpr size_t kMaxCdfPoints = 500;

std::string metric_label(const std::string& metric) {
  if (metric == "ttft") return "TTFT";
  if (metric == "e2e") return "end-to-end latency";
  return metric;
}

struct Curve {
  std::string name;
  std::string color;
  std::vector<double> v;  // sorted
  std::optional<double> threshold;
  bool overall = false;
};

// One CDF chart of `metric` ("ttft" or "e2e") from the measured, completed requests.
std::string cdf_chart(const json& result, const std::string& metric, const std::string& title) {
  const std::vector<std::string> names = class_names(result);
  std::vector<Curve> curves;
  for (size_t i = 0; i < names.size(); ++i)
    curves.push_back({names[i], std::string(class_color(i)), {}, std::nullopt, false});
  Curve all{"all classes", "#333333", {}, std::nullopt, true};
  const std::string key = metric + "_ms";
  for (const json* q : items(result, "requests")) {
    if (flag(*q, "warmup").value_or(false)) continue;
    const std::string status = str(*q, "status");
    if (!status.empty() && status != "ok") continue;
    const auto v = num(*q, key);
    if (!v) continue;
    const std::string cls = str(*q, "class");
    for (Curve& c : curves)
      if (c.name == cls) c.v.push_back(*v);
    all.v.push_back(*v);
  }
  const std::string head = "<h3>" + esc(title) + "</h3>\n";
  if (all.v.empty()) return head + note("No completed request outside the warm-up to draw.");

  const json* th = field(result, "thresholds");
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (Curve& c : curves) {
    if (th != nullptr) {
      const json* t = field(*th, c.name);
      if (t != nullptr) c.threshold = num(*t, metric + "_p99_ms");
      if (c.threshold && *c.threshold <= 0) c.threshold.reset();
    }
    if (c.threshold) hi = std::max(hi, *c.threshold), lo = std::min(lo, *c.threshold);
  }
  if (curves.size() == 1 && all.v.size() == curves[0].v.size()) {
    curves[0].overall = true;  // one class: its curve is the overall one
  } else {
    curves.push_back(std::move(all));
  }
  for (Curve& c : curves) {
    std::sort(c.v.begin(), c.v.end());
    for (double v : c.v) {
      if (v > 0) lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!std::isfinite(lo)) lo = hi > 0 ? hi : 1;

  constexpr int kHeight = 300;
  const Area a{70, 16, kWidth - 70 - 30, kHeight - 16 - 46};
  const Scale x = latency_scale(lo, hi, a.left, a.right());
  const Scale y{0, 1, a.bottom(), a.top, false};
  Svg svg(kWidth, kHeight, title);
  svg.x_axis(x, a,
             x.log ? metric_label(metric) + " (ms, log scale)" : metric_label(metric) + " (ms)");
  constexpr std::array<double, 6> kFractions = {0, 0.25, 0.5, 0.75, 0.9, 0.99};
  for (double f : kFractions) {
    svg.line(a.left, y(f), a.right(), y(f), f >= 0.9 ? "grid strong" : "grid");
    svg.text(a.left - 7, y(f) + 4, tick(f * 100) + " %", "tick", "end");
  }
  svg.line(a.left, a.top, a.right(), a.top, "grid");
  svg.line(a.left, a.top, a.left, a.bottom(), "axis");
  svg.vlabel(14, a.top + a.height / 2, "requests at or below");

  std::vector<LegendEntry> entries;
  int label_row = 0;
  for (const Curve& c : curves) {
    if (c.v.empty()) {
      entries.push_back({c.color, "box", c.name + " (no samples)"});
      continue;
    }
    const size_t n = c.v.size();
    const size_t step = std::max<size_t>(1, n / kMaxCdfPoints);
    std::string d;
    path_to(d, 'M', x(c.v[0]), y(0));
    for (size_t i = 0; i < n; i += step) {
      const size_t j = std::min(n - 1, i + step - 1);  // the last value of this group
      path_to(d, 'L', x(c.v[i]), y(static_cast<double>(i) / n));
      path_to(d, 'L', x(c.v[j]), y(static_cast<double>(j + 1) / n));
    }
    svg.path(d, c.overall && curves.size() > 1 ? "series wide" : "series", c.color);
    entries.push_back({c.color, "box", c.name + " (n=" + std::to_string(n) + ")"});
  }
  for (const Curve& c : curves) {
    if (!c.threshold) continue;
    const double px = x(*c.threshold);
    std::string d;
    path_to(d, 'M', px, a.top);
    path_to(d, 'L', px, a.bottom());
    svg.path(d, "thr", c.color);
    const double py = a.bottom() - 8 - 14 * label_row++;
    const bool left = px > a.left + a.width * 0.6;
    svg.text(left ? px - 4 : px + 4, py, c.name + " P99 \xE2\x89\xA4 " + tick(*c.threshold) + " ms",
             "tick", left ? "end" : "start");
  }
  if (label_row > 0) entries.push_back({"#555555", "dash", "P99 threshold of the class"});
  return head + svg.finish() + legend(entries);
}

struct Stage {
  const char* key;
  const char* label;
  const char* color;
};
constexpr Stage kStages[] = {
    {"http_read", "HTTP read", "#79706e"},
    {"intake", "intake", "#ff9da7"},
    {"media_download", "media download", "#9c755f"},
    {"media_decode", "media decode", "#b07aa1"},
    {"media_resample", "resample", "#d4a6c8"},
    {"preprocessing", "preprocessing", "#edc948"},
    {"queue", "queue", "#f28e2b"},
    {"encoder", "encoder", "#76b7b2"},
    {"prefill", "prefill", "#4e79a7"},
    {"write", "first byte written", "#e15759"},
    {"decode", "decode", "#59a14f"},
    {"client", "client", "#bab0ac"},
};

struct Group {
  std::string label;
  std::optional<double> n;
  std::array<std::optional<double>, std::size(kStages)> ms;
  double total = 0;
  bool any = false;
};

Group group_of(const json& attribution, const char* key, const char* label) {
  Group g;
  g.label = label;
  const json* e = field(attribution, key);
  if (e == nullptr) return g;
  g.n = num(*e, "n");
  const json* st = field(*e, "stages_ms");
  if (st == nullptr) return g;
  for (size_t i = 0; i < std::size(kStages); ++i) {
    g.ms[i] = num(*st, kStages[i].key);
    if (g.ms[i]) g.total += std::max(0.0, *g.ms[i]), g.any = true;
  }
  return g;
}

}  // namespace

std::string cdf_body(const json& result) {
  return cdf_chart(result, "ttft", "Time to first token, per class") +
         cdf_chart(result, "e2e", "End-to-end latency, per class");
}

std::string attribution_body(const json& result) {
  const json* at = field(result, "attribution");
  if (at == nullptr) return note("No attribution data in this result.");
  const json& attr = *at;
  Group groups[2] = {group_of(attr, "violating", "violating"),
                     group_of(attr, "passing", "passing")};
  std::string out;

  // The sentence naming the dominant stage.
  std::string dominant = str(attr, "dominant");
  std::optional<double> dshare = num(attr, "dominant_share");
  if (dominant.empty() && groups[0].any && groups[0].total > 0) {
    size_t best = 0;
    for (size_t i = 1; i < std::size(kStages); ++i)
      if (groups[0].ms[i].value_or(0) > groups[0].ms[best].value_or(0)) best = i;
    dominant = kStages[best].key;
    dshare = groups[0].ms[best].value_or(0) / groups[0].total;
  }
  const double violating_n = groups[0].n.value_or(groups[0].any ? 1 : 0);
  if (violating_n <= 0) {
    out += "<p class=\"lead\">No request violated its rules: there is nothing to attribute.</p>\n";
  } else if (!dominant.empty()) {
    out += "<p class=\"lead\">Violations were dominated by <b>" + esc(dominant) + "</b>";
    if (dshare) out += ": " + fixed(*dshare * 100, 0) + " % of their time";
    out += ".</p>\n";
  }
  const std::string view = str(attr, "view");
  if (view == "ttft")
    out += note(
        "Most violations broke a time-to-first-token budget: the bars show the stages up "
        "to the first token (decode excluded); client is the part no server stage covers.");
  else if (view == "tpot")
    out += note("Most violations broke a per-token budget: the bars show the decode stage.");
  else if (view == "e2e")
    out += note(
        "The bars show every stage of the end-to-end time; client is the part no server "
        "stage covers (network, HTTP, the load generator).");

  double max_total = std::max(groups[0].total, groups[1].total);
  if (groups[0].any || groups[1].any) {
    constexpr int kHeight = 170;
    const Area a{150, 12, kWidth - 150 - 40, kHeight - 12 - 46};
    const Scale x = linear_scale(0, max_total > 0 ? max_total : 1, a.left, a.right(), 8);
    Svg svg(kWidth, kHeight, "Mean time per stage, violating vs passing requests");
    svg.x_axis(x, a, "mean ms per request, by stage");
    for (int gi = 0; gi < 2; ++gi) {
      const Group& g = groups[gi];
      const double top = a.top + 12 + gi * 50, h = 32;
      svg.text(a.left - 10, top + 14, g.label, "label", "end");
      std::string sub = "n=" + count(g.n);
      if (g.total > 0) sub += ", " + ms(g.total) + " ms";
      svg.text(a.left - 10, top + 28, sub, "tick", "end");
      double at_ms = 0;
      for (size_t i = 0; i < std::size(kStages); ++i) {
        const double v = std::max(0.0, g.ms[i].value_or(0));
        if (v <= 0) continue;
        const double x0 = x(at_ms), x1 = x(at_ms + v);
        const std::string pc = g.total > 0 ? " (" + fixed(v / g.total * 100, 0) + " %)" : "";
        svg.rect(x0, top, x1 - x0, h, kStages[i].color,
                 g.label + ": " + kStages[i].label + " " + ms(v) + " ms" + pc);
        if (x1 - x0 > 54) svg.text((x0 + x1) / 2, top + 20, ms(v), "inbar", "middle");
        at_ms += v;
      }
    }
    out += svg.finish();
    std::vector<LegendEntry> entries;
    for (const Stage& s : kStages) entries.push_back({s.color, "box", s.label});
    out += legend(entries);
  }

  // The same numbers as a table.
  out +=
      "<table><thead><tr><th>stage</th><th class=\"n\">violating, mean ms</th>"
      "<th class=\"n\">passing, mean ms</th><th class=\"n\">difference ms</th>"
      "<th class=\"n\">share of a violation</th></tr></thead><tbody>\n";
  for (size_t i = 0; i < std::size(kStages); ++i) {
    const auto v = groups[0].ms[i], p = groups[1].ms[i];
    std::optional<double> d;
    if (v && p) d = *v - *p;
    std::optional<double> sh;
    if (v && groups[0].total > 0) sh = *v / groups[0].total;
    const bool dom = dominant == kStages[i].key;
    out += std::string(dom ? "<tr class=\"hl\">" : "<tr>") + "<td>" + kStages[i].label +
           "</td><td class=\"n\">" + ms(v) + "</td><td class=\"n\">" + ms(p) +
           "</td><td class=\"n\">" + ms(d) + "</td><td class=\"n\">" + share(sh) + "</td></tr>\n";
  }
  out += "</tbody></table>\n";
  out += note("Requests without stage times are not in the bars: " + count(num(attr, "refused")) +
              " refused, " + count(num(attr, "errors")) + " with errors, " +
              count(num(attr, "timeouts")) + " timed out.");
  return out;
}

}  // namespace mmrt::verify::html
