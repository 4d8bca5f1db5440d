// The report's timeline section: every request's TTFT against its scheduled time, and a strip
// chart of the host telemetry on the same time axis.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "verify/report_sections.h"
#include "verify/svg.h"

namespace mmrt::verify::html {
namespace {

using nlohmann::json;

constexpr int kWidth = 900;
constexpr double kLeft = 70, kRight = 80;  // shared by both charts so their x axes line up
constexpr size_t kMaxDots = 5000;          // more requests than this: passing dots are thinned

enum class Kind { kPass, kWarm, kViolate, kFailed };

struct Point {
  double t = 0;
  double ttft = 0;  // for dots
  Kind kind = Kind::kPass;
  std::string title;
};

struct Threshold {
  double ms = 0;
  std::string classes;  // names sharing this value, comma separated
};

// The x axis of both charts: from 0 to `end` seconds rounded up to two significant digits.
Scale time_scale(double end) {
  if (!std::isfinite(end) || end < 1) end = 1;
  const double unit = std::pow(10.0, std::floor(std::log10(end))) / 10;
  return Scale{0, std::ceil(end / unit - 1e-9) * unit, kLeft, kWidth - kRight, false};
}

std::string request_title(const json& r, double t) {
  std::string s = "#";
  s += str(r, "i");
  const std::string cls = str(r, "class");
  if (!cls.empty()) s += " " + cls;
  const std::string stream = str(r, "stream");
  if (!stream.empty()) s += " [" + stream + "]";
  s += " at " + fixed(t, 2) + " s";
  const std::string status = str(r, "status");
  if (!status.empty() && status != "ok") s += ": " + status;
  const auto ttft = num(r, "ttft_ms");
  if (ttft) s += ", TTFT " + ms(ttft) + " ms";
  const auto e2e = num(r, "e2e_ms");
  if (e2e) s += ", e2e " + ms(e2e) + " ms";
  const std::string why = str(r, "why");
  if (!why.empty()) s += " (" + why + ")";
  return s;
}

// The TTFT P99 thresholds of the result's classes, merged by value.
std::vector<Threshold> ttft_thresholds(const json& result) {
  std::map<double, std::string> by_value;
  const json* th = field(result, "thresholds");
  if (th != nullptr && th->is_object()) {
    for (const auto& [name, t] : th->items()) {
      const auto v = num(t, "ttft_p99_ms");
      if (!v || *v <= 0) continue;
      std::string& names = by_value[*v];
      names += (names.empty() ? "" : ", ") + name;
    }
  }
  std::vector<Threshold> out;
  for (const auto& [v, names] : by_value) out.push_back({v, names});
  return out;
}

std::string shorten(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "\xE2\x80\xA6";
}

// Telemetry rows of the strip chart.
struct Series {
  const char* key;
  const char* label;
  bool percent;
  double min_span;  // > 0: the axis starts near the values (spanning at least this); else at 0
};
constexpr Series kSeries[] = {
    {"busy_pct", "CPU busy %", true, 0},
    {"steal_pct", "steal %", true, 0},
    {"temp_c",
     "temp \xC2\xB0"
     "C",
     false, 20},
    {"load1", "load 1 min", false, 0},
};

std::string telemetry_strip(const json& result, const Scale& x) {
  const auto samples = items(result, "telemetry");
  struct Row {
    const Series* s;
    std::vector<std::pair<double, std::optional<double>>> pts;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  };
  std::vector<Row> rows;
  for (const Series& s : kSeries) {
    Row row{&s, {}};
    for (const json* e : samples) {
      const auto t = num(*e, "t_s");
      if (!t) continue;
      const auto v = num(*e, s.key);
      row.pts.emplace_back(*t, v);
      if (v) row.lo = std::min(row.lo, *v), row.hi = std::max(row.hi, *v);
    }
    if (std::isfinite(row.lo)) rows.push_back(std::move(row));
  }
  if (rows.empty()) return note("No host telemetry was sampled during this run.");

  constexpr double kTop = 18, kRowH = 30, kGap = 10;
  const double height = kTop + static_cast<double>(rows.size()) * (kRowH + kGap) + 34;
  Svg svg(kWidth, static_cast<int>(height), "Host telemetry over time");
  const Area all{kLeft, kTop, kWidth - kLeft - kRight,
                 static_cast<double>(rows.size()) * (kRowH + kGap) - kGap};
  for (double t : x.ticks(8)) svg.line(x(t), all.top, x(t), all.bottom(), "grid");

  // Throttle count changes: a marker across every row.
  std::optional<double> last;
  int marks = 0;
  for (const json* e : samples) {
    const auto t = num(*e, "t_s");
    const auto v = num(*e, "throttle");
    if (!t || !v || *v < 0) continue;
    if (last && *v > *last) {
      svg.line(x(*t), all.top - 4, x(*t), all.bottom(), "throttle");
      if (marks++ == 0) svg.text(x(*t) + 3, all.top - 6, "throttled", "tick warnc");
    }
    last = v;
  }

  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const double top = kTop + static_cast<double>(i) * (kRowH + kGap);
    // Percentages from 0 (to 100 once above half; at least 5 % so noise stays flat), loads
    // from 0, temperatures over at least 20 degrees.
    double lo = row.s->min_span > 0 ? std::min(row.lo, row.hi - row.s->min_span) : 0;
    double hi = row.s->percent ? (row.hi > 50 ? 100 : std::max(row.hi * 1.1, 5.0)) : row.hi;
    if (hi - lo < 1e-9) lo -= 1, hi += 1;
    const Scale y{lo, hi, top + kRowH, top, false};
    svg.line(kLeft, top + kRowH, all.right(), top + kRowH, "axis");
    svg.text(kLeft - 8, top + kRowH / 2 + 4, row.s->label, "label", "end");
    std::string d;
    bool pen = false;
    for (const auto& [t, v] : row.pts) {
      if (!v) {
        pen = false;
        continue;
      }
      path_to(d, pen ? 'L' : 'M', x(t), y(*v));
      pen = true;
    }
    svg.path(d, "series", class_color(i));
    svg.text(all.right() + 6, top + 11, "max " + tick(row.hi), "tick");
    svg.text(all.right() + 6, top + kRowH, "min " + tick(row.lo), "tick");
  }
  const Area axis{kLeft, kTop, all.width, all.height};
  for (double t : x.ticks(8)) {
    svg.line(x(t), axis.bottom(), x(t), axis.bottom() + 4, "axis");
    svg.text(x(t), axis.bottom() + 16, tick(t), "tick", "middle");
  }
  svg.text(kLeft + all.width / 2, axis.bottom() + 30, "scheduled time (s)", "label", "middle");
  std::vector<LegendEntry> entries;
  for (size_t i = 0; i < rows.size(); ++i)
    entries.push_back({std::string(class_color(i)), "box", rows[i].s->label});
  if (marks > 0) entries.push_back({"#b26a00", "dash", "throttle count increased"});
  return "<h3>Host telemetry</h3>\n" + svg.finish() + legend(entries);
}

}  // namespace

std::string timeline_body(const json& result) {
  const json* run = field(result, "run");
  const json none;
  const json& r = run != nullptr ? *run : none;
  const auto reqs = items(result, "requests");

  std::vector<Point> points;
  double t_max = 0, lo = std::numeric_limits<double>::infinity(), hi = 0;
  size_t passing = 0, skipped = 0;
  for (const json* q : reqs) {
    const auto t = num(*q, "t_s");
    if (!t) {
      ++skipped;
      continue;
    }
    Point p;
    p.t = *t;
    const std::string status = str(*q, "status");
    const auto ttft = num(*q, "ttft_ms");
    if (!status.empty() && status != "ok") {
      p.kind = Kind::kFailed;
    } else if (!ttft) {
      ++skipped;
      continue;
    } else {
      p.ttft = *ttft;
      p.kind = flag(*q, "violated").value_or(false) ? Kind::kViolate
               : flag(*q, "warmup").value_or(false) ? Kind::kWarm
                                                    : Kind::kPass;
      if (p.kind != Kind::kViolate) ++passing;
      if (*ttft > 0) lo = std::min(lo, *ttft);
      hi = std::max(hi, *ttft);
    }
    p.title = request_title(*q, *t);
    t_max = std::max(t_max, *t);
    points.push_back(std::move(p));
  }
  if (points.empty())
    return note("No request was measured, so there is no timeline to draw.") +
           telemetry_strip(result, time_scale(num(r, "duration_s").value_or(0)));

  // Thin the passing dots beyond kMaxDots requests: every stride-th passing one stays.
  size_t stride = 1;
  if (reqs.size() > kMaxDots && passing > 0) {
    const size_t others = points.size() - passing;
    const size_t budget = std::max<size_t>(kMaxDots > others ? kMaxDots - others : 0, 1000);
    stride = (passing + budget - 1) / budget;
  }

  const auto thresholds = ttft_thresholds(result);
  for (const Threshold& t : thresholds)
    if (t.ms <= hi * 10 || !std::isfinite(lo)) hi = std::max(hi, t.ms);
  if (!std::isfinite(lo)) lo = hi > 0 ? hi : 1;

  constexpr int kHeight = 330;
  const Area a{kLeft, 36, kWidth - kLeft - kRight, kHeight - 36 - 46};
  const Scale x = time_scale(std::max(t_max, num(r, "duration_s").value_or(0)));
  const Scale y = latency_scale(lo, hi, a.bottom(), a.top);
  Svg svg(kWidth, kHeight, "TTFT of every request over the run");

  const auto warmup = num(r, "warmup_s");
  if (warmup && *warmup > 0) {
    const double w = x(std::min(*warmup, x.d1)) - a.left;
    svg.rect(a.left, a.top, w, a.height, "#eef0f3");
    svg.text(a.left + 4, a.top + 13, "warm-up", "tick");
  }
  svg.x_axis(x, a, "scheduled time (s)");
  svg.y_axis(y, a, y.log ? "TTFT (ms, log scale)" : "TTFT (ms)");
  svg.text(a.left - 7, 24, "refused / error", "tick badc", "end");
  svg.line(a.left, 30, a.right(), 30, "grid");

  double last_label = -100;
  for (const Threshold& t : thresholds) {
    if (t.ms < y.d0 || t.ms > y.d1) continue;
    const double py = y(t.ms);
    svg.line(a.left, py, a.right(), py, "thr grey");
    if (std::fabs(py - last_label) < 24) continue;
    svg.text(a.right() + 4, py - 2, shorten(t.classes, 12), "tick");
    svg.text(a.right() + 4, py + 10, "P99 \xE2\x89\xA4 " + tick(t.ms), "tick");
    last_label = py;
  }

  size_t nth = 0, shown = 0;
  for (const Kind pass : {Kind::kWarm, Kind::kPass, Kind::kViolate, Kind::kFailed}) {
    for (const Point& p : points) {
      if (p.kind != pass) continue;
      const double px = std::clamp(x(p.t), a.left, a.right());
      if (p.kind == Kind::kFailed) {
        svg.cross(px, 18, 4, "xmark", p.title);
        continue;
      }
      if (p.kind != Kind::kViolate && (nth++ % stride) != 0) continue;
      if (p.kind != Kind::kViolate) ++shown;
      const double py = std::clamp(y(p.ttft), a.top, a.bottom());
      const char* cls = p.kind == Kind::kViolate ? "dot viol"
                        : p.kind == Kind::kWarm  ? "dot warm"
                                                 : "dot";
      svg.circle(px, py, p.kind == Kind::kViolate ? 3.2 : 2.4, cls, p.title);
    }
  }

  std::vector<LegendEntry> entries = {{"#4e79a7", "dot", "within its rules"},
                                      {"#d62728", "dot", "violated a rule"},
                                      {"#d62728", "cross", "refused, error or timeout"}};
  if (warmup && *warmup > 0) entries.push_back({"#dfe3e8", "box", "warm-up (not measured)"});
  if (!thresholds.empty()) entries.push_back({"#555555", "dash", "class TTFT P99 threshold"});
  std::string out = svg.finish() + legend(entries);
  if (stride > 1)
    out += note("Thinned for drawing: 1 in " + std::to_string(stride) + " passing requests (" +
                std::to_string(shown) + " of " + std::to_string(passing) +
                "); every violating, refused or failed request is drawn.");
  if (skipped > 0)
    out += note(std::to_string(skipped) +
                " request(s) without a scheduled time or TTFT are not drawn.");
  return out + telemetry_strip(result, x);
}

}  // namespace mmrt::verify::html
