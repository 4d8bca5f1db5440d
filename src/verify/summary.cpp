#include "verify/summary.h"

#include <cstdio>
#include <string>

namespace mmrt::verify {
namespace {

using nlohmann::json;

std::string ms(const json& v) {
  if (!v.is_number()) return "-";
  char b[32];
  const double x = v.get<double>();
  std::snprintf(b, sizeof b, x < 100 ? "%.1f" : "%.0f", x);
  return b;
}

std::string str(const json& o, const char* k) {
  return o.is_object() && o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : "-";
}

template <class... A>
void line(std::string& out, const char* f, A... a) {
  const int n = std::snprintf(nullptr, 0, f, a...);
  if (n <= 0) return;
  std::string b(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(b.data(), b.size(), f, a...);
  b.pop_back();
  out += b;
}

}  // namespace

std::string render_text(const nlohmann::json& r) {
  std::string out;
  const json& run = r.value("run", json::object());
  line(out, "mmrt verify: %s (exit %d)\n", str(r, "verdict").c_str(), r.value("exit_code", 2));
  line(out, "  workload %s, %s s (warm-up %s s), %d of %d requests measured, %s\n",
       str(run, "workload").c_str(), ms(run.value("duration_s", json())).c_str(),
       ms(run.value("warmup_s", json())).c_str(), run.value("requests_measured", 0),
       run.value("requests_scheduled", 0), str(run, "url").c_str());
  const json& reasons = r.value("reasons", json::array());
  if (!reasons.empty()) out += "reasons:\n";
  for (const auto& x : reasons)
    line(out, "  %-7s %s: %s\n", x.value("kind", "") == "fail" ? "FAIL" : "INVALID",
         str(x, "rule").c_str(), str(x, "message").c_str());
  out +=
      "\nclass          requests  ok  refused errors timeouts viol | TTFT p50   p99 | TPOT p99 | "
      "E2E p50    p99  (ms)\n";
  for (const auto& c : r.value("classes", json::array())) {
    const json e = json::object();
    const json& t = c.value("ttft_ms", e);
    const json& p = c.value("tpot_ms", e);
    const json& d = c.value("e2e_ms", e);
    line(out, "%-14s %8d %4d %7d %6d %8d %4d | %8s %5s | %8s | %7s %6s\n", str(c, "name").c_str(),
         c.value("requests", 0), c.value("completed", 0), c.value("refused", 0),
         c.value("errors", 0), c.value("timeouts", 0), c.value("violations", 0),
         ms(t.value("p50", json())).c_str(), ms(t.value("p99", json())).c_str(),
         ms(p.value("p99", json())).c_str(), ms(d.value("p50", json())).c_str(),
         ms(d.value("p99", json())).c_str());
  }
  out += "\nrules:\n";
  for (const auto& c : r.value("classes", json::array()))
    for (const auto& x : c.value("rules", json::array()))
      line(out, "  %-12s %-28s observed %8s ms  samples %6s / needed %6s  %s\n",
           str(c, "name").c_str(), str(x, "rule").c_str(),
           ms(x.value("observed_ms", json())).c_str(), x.value("samples", json()).dump().c_str(),
           x.value("needed", json()).dump().c_str(), str(x, "status").c_str());
  for (const auto& s : r.value("streaks", json::array()))
    line(out, "  %-12s k = %d consecutive misses: longest %d of %d frames  %s\n",
         str(s, "stream").c_str(), s.value("k", 0), s.value("longest", 0), s.value("frames", 0),
         str(s, "status").c_str());
  const json& g = r.value("generator", json::object());
  line(out, "\ngenerator lag: p50 %s ms, p99 %s ms, max %s ms (limit %s ms at p99)\n",
       ms(g.value("lag_p50_ms", json())).c_str(), ms(g.value("lag_p99_ms", json())).c_str(),
       ms(g.value("lag_max_ms", json())).c_str(), ms(g.value("limit_ms", json())).c_str());
  const json& a = r.value("attribution", json::object());
  if (a.is_object() && a.value("dominant", json()).is_string()) {
    line(out, "violations were made of: %s (%.0f %%); %d refused, %d errors, %d timeouts\n",
         str(a, "dominant").c_str(), a.value("dominant_share", 0.0) * 100, a.value("refused", 0),
         a.value("errors", 0), a.value("timeouts", 0));
    const json& v = a["violating"].value("stages_ms", json::object());
    if (!v.empty()) {
      out += "  mean ms per violating request:";
      for (const auto& [k, x] : v.items()) line(out, " %s %s", k.c_str(), ms(x).c_str());
      out += "\n";
    }
  }
  const json& d = r.value("drift", json::object());
  if (d.is_object() && d.contains("steady"))
    line(out, "drift: TTFT p50 second/first half %s, e2e %s (%s)\n",
         d.value("ttft_p50_ratio", json()).dump().c_str(),
         d.value("e2e_p50_ratio", json()).dump().c_str(),
         d.value("steady", false) ? "steady" : "NOT steady");
  const json& pf = r.value("preflight", json::object());
  int fails = 0, warns = 0, unknown = 0;
  for (const auto& c : pf.value("before", json::array())) {
    const std::string v = c.value("verdict", "");
    fails += v == "fail";
    warns += v == "warn";
    unknown += v == "unknown";
  }
  line(out, "preflight (%s): %d fail, %d warn, %d not exposed\n", str(pf, "mode").c_str(), fails,
       warns, unknown);
  for (const auto& c : pf.value("before", json::array()))
    if (c.value("verdict", "") == "fail")
      line(out, "  %-16s %s (expected %s)\n", str(c, "name").c_str(), str(c, "value").c_str(),
           str(c, "expected").c_str());
  const json& b = r.value("baseline", json());
  if (b.is_object()) {
    line(out, "\nlab vs here (baseline %s; every row of class all, failing rows of the others):\n",
         str(b, "file").c_str());
    for (const auto& x : b.value("rows", json::array()))
      if (x.value("status", "") == "fail" || x.value("class", "") == "all")
        line(out, "  %-10s %-5s %-6s lab %8s ms  here %8s ms  %+.1f %%  %s\n",
             str(x, "class").c_str(), str(x, "metric").c_str(), str(x, "stat").c_str(),
             ms(x.value("lab_ms", json())).c_str(), ms(x.value("here_ms", json())).c_str(),
             x.value("delta_pct", 0.0), str(x, "status").c_str());
    for (const auto& x : b.value("fingerprint_diffs", json::array()))
      line(out, "  differs: %s: lab %s, here %s\n", str(x, "key").c_str(),
           x.value("lab", json()).dump().c_str(), x.value("here", json()).dump().c_str());
  }
  return out;
}

}  // namespace mmrt::verify
