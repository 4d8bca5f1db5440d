// The preflight checks and the fingerprint: judgments of the facts read by preflight_facts.cpp.
#include "verify/preflight.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace mmrt::verify {
namespace {

using sys::CpuLabels;
using sys::Facts;
using sys::FileText;
using sys::ReadStatus;

constexpr const char* kNotExposedDetail = "not exposed by this kernel/VM";
constexpr const char* kUnreadableDetail = "could not be read (permission denied?)";
constexpr double kMaxStealPct = 1.0;
constexpr double kLoadWarnFraction = 0.5;  // of the CPU count
constexpr long kMaxSwappiness = 10;

struct Meta {
  const char* name;
  const char* title;
  const char* expected;
  const char* detail;
};

// Every check in report order, with what it expects and why.
constexpr Meta kChecks[] = {
    {"governor", "CPU frequency governor", "performance",
     "Other governors lower the clock when idle and ramp it with load, so requests after a pause "
     "run slower; set the performance governor on every serving core."},
    {"freq_lock", "CPU clock locked (min = max)", "min = max",
     "An unlocked clock drifts with load and temperature between runs; set scaling_min_freq equal "
     "to scaling_max_freq when the SOP locks the clock."},
    {"turbo", "Turbo / boost", "off (locked clock)",
     "A locked-clock SOP turns turbo off so the clock cannot drift with temperature, while tuned's "
     "latency-performance profile keeps it on for peak speed: decide which the SLA assumes "
     "(intel_pstate/no_turbo=1 or cpufreq/boost=0 turns it off)."},
    {"cstates", "Deep C-states", "exit latency > 10 us disabled",
     "Waking from a deep C-state costs tens to hundreds of microseconds after every idle gap; "
     "disable the deep states (cpuidle stateN/disable=1 or a PM QoS latency limit)."},
    {"isolation", "Serving core isolation", "isolated cores (isolcpus / nohz_full)",
     "Isolated cores keep other tasks and timer ticks off the serving threads (advisory; hard "
     "gates "
     "pin the engine to isolcpus / nohz_full cores)."},
    {"thp", "Transparent huge pages", "madvise or never",
     "With THP always the kernel compacts and promotes pages on its own schedule, stalling the "
     "faulting thread; set it to madvise (or never)."},
    {"numa_balancing", "Automatic NUMA balancing", "0",
     "NUMA balancing unmaps pages to sample their accesses and migrates them, adding page faults "
     "on the hot path; set kernel.numa_balancing=0."},
    {"swap", "Swap", "no swap, or swappiness <= 10",
     "Swapped-out weights or KV pages take milliseconds to fault back; disable swap or set "
     "vm.swappiness to 10 or less."},
    {"irqbalance", "IRQ balancing", "not running, or isolated cores free of IRQs",
     "The IRQ balancer moves interrupts onto any core, serving cores included; stop it or ban the "
     "isolated cores from it."},
    {"preemption", "Kernel preemption model", "PREEMPT_RT or PREEMPT (hard gates)",
     "Without full preemption a kernel path can hold a core for milliseconds (advisory; "
     "preempt=full "
     "selects it on a PREEMPT_DYNAMIC kernel)."},
    {"throttle", "Thermal throttling", "0 events (no increase during the run)",
     "Throttle events mean the CPU clocked down for heat or power: a count since boot deserves a "
     "look at cooling, an increase during the run invalidates it."},
    {"load", "Competing load", "load1 well below the CPU count",
     "Other runnable tasks compete for the cores being measured; stop them before the run."},
    {"steal", "CPU steal time", "< 1 %",
     "Steal is time the hypervisor gave this VM's CPUs to someone else; latency measured under "
     "steal does not reproduce, so use dedicated hosts."},
    {"cpu", "CPU model and flags", "",
     "The instruction set decides which kernels run (AVX2, AVX-512, AMX)."},
    {"kernel", "Kernel", "", "Recorded with the results."},
    {"cmdline", "Kernel command line", "", "Recorded with the results."},
    {"gpu_clocks", "GPU clock event reasons", "no slowdown reason active",
     "An active slowdown reason (power cap, thermal) lowers the GPU clock during the run; fix "
     "cooling or power limits first."},
};

Check make(std::string_view name) {
  for (const Meta& m : kChecks) {
    if (name == m.name)
      return Check{m.name, m.title, "", m.expected, CheckVerdict::kOk, false, m.detail};
  }
  throw InternalError("unknown preflight check " + std::string(name));
}

Check with(Check k, std::string value, CheckVerdict v) {
  k.value = std::move(value);
  k.verdict = v;
  return k;
}

// `k` as unknown because its knob is absent (or unreadable).
Check unknown(Check k, ReadStatus why = ReadStatus::kAbsent) {
  const bool unreadable = why == ReadStatus::kUnreadable;
  k.detail = unreadable ? kUnreadableDetail : kNotExposedDetail;
  return with(std::move(k), std::string(unreadable ? sys::kUnreadable : sys::kNotExposed),
              CheckVerdict::kUnknown);
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : std::string(sep)) + p;
  return out;
}

std::string join_ints(const std::vector<int>& v) {
  std::vector<std::string> s;
  for (int x : v) s.push_back(std::to_string(x));
  return join(s, ", ");
}

bool is_marker(const std::string& label) {
  return label == sys::kNotExposed || label == sys::kUnreadable;
}

// "A on 0-3, B on 4-7", groups in order of first appearance.
std::string group_cpus(const CpuLabels& labels) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const auto& [cpu, label] : labels) {
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == label; });
    if (it == groups.end()) it = groups.insert(groups.end(), {label, {}});
    it->second.push_back(cpu);
  }
  std::vector<std::string> parts;
  for (const auto& [label, cpus] : groups) {
    parts.push_back(label + " on " + sys::format_cpu_list(cpus));
  }
  return join(parts, ", ");
}

// Judges per-CPU labels: kFail if any readable one is not `good`, else kUnknown if any is a
// marker; an entirely absent knob is unknown with kNotExposedDetail.
template <typename Good>
Check per_cpu_check(Check k, const CpuLabels& labels, Good good) {
  const auto absent = [](const auto& l) { return l.second == sys::kNotExposed; };
  if (std::all_of(labels.begin(), labels.end(), absent)) return unknown(std::move(k));
  CheckVerdict v = CheckVerdict::kOk;
  for (const auto& [cpu, label] : labels) {
    if (!is_marker(label) && !good(label)) return with(k, group_cpus(labels), CheckVerdict::kFail);
    if (is_marker(label)) v = CheckVerdict::kUnknown;
  }
  return with(std::move(k), group_cpus(labels), v);
}

std::string mhz(long long khz) {
  return khz % 1000 == 0 ? std::to_string(khz / 1000) : fixed(static_cast<double>(khz) / 1e3, 1);
}

Check governor(const Facts& f) {
  return per_cpu_check(make("governor"), f.governor,
                       [](const std::string& g) { return g == "performance"; });
}

Check freq_lock(const Facts& f) {
  CpuLabels labels;
  for (size_t i = 0; i < f.cpus.size(); ++i) {
    const std::string &lo = f.min_freq_khz[i].second, &hi = f.max_freq_khz[i].second;
    std::string label;
    if (is_marker(lo) || is_marker(hi)) {
      label =
          lo == sys::kUnreadable || hi == sys::kUnreadable ? sys::kUnreadable : sys::kNotExposed;
    } else {
      const long long a = std::atoll(lo.c_str()), b = std::atoll(hi.c_str());
      label = a == b ? "locked at " + mhz(a) + " MHz" : mhz(a) + "-" + mhz(b) + " MHz";
    }
    labels.emplace_back(f.cpus[i], std::move(label));
  }
  return per_cpu_check(make("freq_lock"), labels,
                       [](const std::string& l) { return l.rfind("locked at ", 0) == 0; });
}

Check turbo(const Facts& f) {
  if (!f.turbo_on) return unknown(make("turbo"));
  const bool on = *f.turbo_on;
  return with(make("turbo"), std::string(on ? "on (" : "off (") + f.turbo_source + ")",
              on ? CheckVerdict::kFail : CheckVerdict::kOk);
}

Check cstates(const Facts& f) {
  const auto good = [](const std::string& l) {
    return l.size() < 8 || l.compare(l.size() - 8, 8, " enabled") != 0;
  };
  return per_cpu_check(make("cstates"), f.cstates, good);
}

Check isolation(const Facts& f) {
  if (!f.isolation_readable) return unknown(make("isolation"));
  std::vector<std::string> parts;
  const std::pair<const char*, const std::optional<std::vector<int>>*> lists[] = {
      {"isolated ", &f.isolated}, {"nohz_full ", &f.nohz_full}, {"rcu_nocbs ", &f.rcu_nocbs}};
  for (const auto& [label, list] : lists) {
    if (*list && !(*list)->empty()) parts.push_back(label + sys::format_cpu_list(**list));
  }
  if (parts.empty()) return with(make("isolation"), "no isolated cores", CheckVerdict::kWarn);
  return with(make("isolation"), join(parts, ", "),
              f.serving.empty() ? CheckVerdict::kWarn : CheckVerdict::kOk);
}

// The bracketed (active) word of a THP file; "" when malformed.
std::string bracketed(const std::string& line) {
  const auto a = line.find('['), b = line.find(']');
  if (a == std::string::npos || b == std::string::npos || b <= a + 1) return "";
  return line.substr(a + 1, b - a - 1);
}

Check thp(const Facts& f) {
  if (!f.thp_enabled.ok()) return unknown(make("thp"), f.thp_enabled.status);
  const std::string word = bracketed(f.thp_enabled.text);
  if (word.empty()) return with(make("thp"), f.thp_enabled.text, CheckVerdict::kUnknown);
  if (word == "always") return with(make("thp"), word, CheckVerdict::kFail);
  if (word != "madvise" && word != "never") return with(make("thp"), word, CheckVerdict::kUnknown);
  if (word == "madvise" && bracketed(f.thp_defrag.text) == "always") {
    return with(make("thp"), word + ", defrag always", CheckVerdict::kWarn);
  }
  return with(make("thp"), word, CheckVerdict::kOk);
}

Check numa_balancing(const Facts& f) {
  const FileText& t = f.numa_balancing;
  if (t.status == ReadStatus::kAbsent) {
    return with(make("numa_balancing"), "absent (kernel without NUMA balancing)",
                CheckVerdict::kOk);
  }
  if (!t.ok()) return unknown(make("numa_balancing"), t.status);
  if (t.text == "0") return with(make("numa_balancing"), t.text, CheckVerdict::kOk);
  const bool numeric =
      !t.text.empty() && t.text.find_first_not_of("0123456789") == std::string::npos;
  return with(make("numa_balancing"), t.text,
              numeric ? CheckVerdict::kFail : CheckVerdict::kUnknown);
}

Check swap(const Facts& f) {
  if (!f.swaps_readable) return unknown(make("swap"));
  const bool known = f.swappiness.ok() && !f.swappiness.text.empty() &&
                     f.swappiness.text.find_first_not_of("0123456789") == std::string::npos;
  const std::string swappiness = "swappiness " + (known ? f.swappiness.text : "unknown");
  if (f.swap_devices == 0) return with(make("swap"), "no swap, " + swappiness, CheckVerdict::kOk);
  const std::string value = std::to_string(f.swap_devices) +
                            (f.swap_devices == 1 ? " device, " : " devices, ") +
                            std::to_string(f.swap_kb) + " kB, " + swappiness;
  if (!known) return with(make("swap"), value, CheckVerdict::kUnknown);
  return with(make("swap"), value,
              std::atol(f.swappiness.text.c_str()) <= kMaxSwappiness ? CheckVerdict::kOk
                                                                     : CheckVerdict::kFail);
}

Check irqbalance(const Facts& f) {
  const bool running = !f.irqbalance_pids.empty();
  std::string value = running
                          ? (f.irqbalance_pids.size() == 1 ? "running (pid " : "running (pids ") +
                                join_ints(f.irqbalance_pids) + ")"
                          : "not running";
  if (f.serving.empty()) {
    return with(make("irqbalance"), value, running ? CheckVerdict::kWarn : CheckVerdict::kOk);
  }
  const std::string cores = sys::format_cpu_list(f.serving);
  if (!f.irqs_on_serving) {
    return with(make("irqbalance"), value + "; IRQ affinity not exposed",
                running ? CheckVerdict::kUnknown : CheckVerdict::kOk);
  }
  if (f.irqs_on_serving->empty()) {
    return with(make("irqbalance"), value + "; isolated cores " + cores + " free of IRQs",
                CheckVerdict::kOk);
  }
  value += "; IRQ " + join_ints(*f.irqs_on_serving) + " on isolated cores " + cores;
  return with(make("irqbalance"), value, running ? CheckVerdict::kFail : CheckVerdict::kWarn);
}

Check preemption(const Facts& f) {
  const std::string& m = f.preemption;
  if (m.empty()) return unknown(make("preemption"), f.version.status);
  if (m == "PREEMPT_RT" || m == "PREEMPT") return with(make("preemption"), m, CheckVerdict::kOk);
  if (m == "PREEMPT_DYNAMIC") {
    const auto mode = sys::cmdline_arg(f, "preempt");
    if (!mode) return with(make("preemption"), m, CheckVerdict::kWarn);
    return with(make("preemption"), m + " (preempt=" + *mode + ")",
                *mode == "full" ? CheckVerdict::kOk : CheckVerdict::kWarn);
  }
  if (m == "none") return with(make("preemption"), "no forced preemption", CheckVerdict::kWarn);
  return with(make("preemption"), m, CheckVerdict::kWarn);
}

Check throttle(const Facts& f) {
  if (!f.throttle) return unknown(make("throttle"));
  std::string value = "core " + std::to_string(f.throttle->core) + ", package " +
                      std::to_string(f.throttle->package) + " since boot";
  int64_t delta = 0;
  if (f.throttle_before) {
    delta = f.throttle->total() - f.throttle_before->total();
    value += ", +" + std::to_string(delta) + " in " + fixed(f.window_s, 1) + " s";
  }
  const CheckVerdict v = delta > 0                 ? CheckVerdict::kFail
                         : f.throttle->total() > 0 ? CheckVerdict::kWarn
                                                   : CheckVerdict::kOk;
  return with(make("throttle"), value, v);
}

Check load(const Facts& f) {
  if (!f.load1 || f.cpus.empty()) return unknown(make("load"));
  const double n = static_cast<double>(f.cpus.size());
  const std::string value = "load1 " + fixed(*f.load1, 2) + " on " + std::to_string(f.cpus.size()) +
                            (f.cpus.size() == 1 ? " CPU" : " CPUs");
  const CheckVerdict v = *f.load1 >= n                      ? CheckVerdict::kFail
                         : *f.load1 > kLoadWarnFraction * n ? CheckVerdict::kWarn
                                                            : CheckVerdict::kOk;
  return with(make("load"), value, v);
}

Check steal(const Facts& f) {
  if (!f.stat) return unknown(make("steal"));
  const sys::CpuTimes* before = f.stat_before ? &*f.stat_before : nullptr;
  const double pct = sys::steal_percent(*f.stat, before);
  std::string value = fixed(pct, 2) + " %";
  if (before) {  // the window's ticks are 10 ms per CPU: the since-boot share for context
    value += " over " + fixed(f.window_s, 1) + " s, " +
             fixed(sys::steal_percent(*f.stat, nullptr), 2) + " % since boot";
  } else {
    value += " since boot";
  }
  return with(make("steal"), value, pct < kMaxStealPct ? CheckVerdict::kOk : CheckVerdict::kFail);
}

std::string flags_text(const Facts& f) {
  return f.cpu_flags.empty() ? "none" : join(f.cpu_flags, " ");
}

Check cpu(const Facts& f) {
  if (!f.cpuinfo_readable) return unknown(make("cpu"));
  const std::string model = f.cpu_model.empty() ? "unknown model" : f.cpu_model;
  return with(make("cpu"),
              model + ", " + std::to_string(f.cpus.size()) + " CPUs, flags: " + flags_text(f),
              CheckVerdict::kInfo);
}

Check kernel(const Facts& f) {
  if (!f.osrelease.ok()) return unknown(make("kernel"), f.osrelease.status);
  return with(make("kernel"), f.osrelease.text + (f.version.ok() ? " " + f.version.text : ""),
              CheckVerdict::kInfo);
}

Check cmdline(const Facts& f) {
  if (!f.cmdline.ok()) return unknown(make("cmdline"), f.cmdline.status);
  return with(make("cmdline"), f.cmdline.text, CheckVerdict::kInfo);
}

Check gpu_clocks(const Facts& f) {
  if (!f.roots.live)
    return with(make("gpu_clocks"), "not queried (fixture tree)", CheckVerdict::kInfo);
  const auto exe = sys::find_nvidia_smi(f.roots);
  if (!exe) return with(make("gpu_clocks"), "no NVIDIA GPU", CheckVerdict::kInfo);
  const auto text = sys::run_nvidia_smi(*exe, "-q -d PERFORMANCE");
  if (!text) return with(make("gpu_clocks"), "nvidia-smi failed", CheckVerdict::kUnknown);
  if (text->find("Clocks Event Reasons") == std::string::npos &&
      text->find("Clocks Throttle Reasons") == std::string::npos) {
    return with(make("gpu_clocks"), "no clock event reasons reported", CheckVerdict::kUnknown);
  }
  const auto reasons = active_gpu_clock_reasons(*text);
  if (reasons.empty())
    return with(make("gpu_clocks"), "no slowdown reason active", CheckVerdict::kOk);
  return with(make("gpu_clocks"), join(reasons, ", "), CheckVerdict::kFail);
}

// A per-CPU fact as one word when every CPU agrees, else grouped; "unknown" when not readable.
std::string summary(const CpuLabels& labels) {
  if (labels.empty() || is_marker(labels.front().second)) {
    const bool same = std::all_of(labels.begin(), labels.end(),
                                  [](const auto& l) { return is_marker(l.second); });
    if (same) return "unknown";
  }
  const bool same = std::all_of(labels.begin(), labels.end(),
                                [&](const auto& l) { return l.second == labels.front().second; });
  return same ? labels.front().second : group_cpus(labels);
}

std::string or_unknown(const FileText& t) {
  return t.ok() ? t.text : "unknown";
}

std::string list_or_unknown(const std::optional<std::vector<int>>& l) {
  if (!l) return "unknown";
  return l->empty() ? "none" : sys::format_cpu_list(*l);
}

std::string gpu_names(const SystemRoots& roots) {
  const auto exe = sys::find_nvidia_smi(roots);
  if (!exe) return "none";
  const auto text = sys::run_nvidia_smi(*exe, "--query-gpu=name --format=csv,noheader");
  if (!text) return "unknown";
  std::istringstream in(*text);
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find_first_not_of(" \t\r");
    if (a != std::string::npos)
      names.push_back(line.substr(a, line.find_last_not_of(" \t\r") - a + 1));
  }
  return names.empty() ? "none" : join(names, ", ");
}

}  // namespace

const char* to_string(CheckVerdict v) {
  switch (v) {
    case CheckVerdict::kOk:
      return "ok";
    case CheckVerdict::kWarn:
      return "warn";
    case CheckVerdict::kFail:
      return "fail";
    case CheckVerdict::kUnknown:
      return "unknown";
    case CheckVerdict::kInfo:
      return "info";
  }
  return "unknown";
}

std::vector<std::string> preflight_check_names() {
  std::vector<std::string> names;
  for (const Meta& m : kChecks) names.emplace_back(m.name);
  return names;
}

std::vector<std::string> default_required_checks() {
  return {"governor", "turbo", "thp", "numa_balancing", "swap", "throttle", "steal", "load"};
}

std::vector<Check> run_preflight(const SystemRoots& roots,
                                 const std::vector<std::string>& required) {
  const std::vector<std::string> names = preflight_check_names();
  for (const std::string& r : required) {
    if (std::find(names.begin(), names.end(), r) == names.end()) {
      throw InvalidArgument("unknown preflight check '" + r + "' (known: " + join(names, ", ") +
                            ")");
    }
  }
  const Facts f = sys::read_facts(roots, /*sample_interval=*/true);
  std::vector<Check> checks = {
      governor(f),       freq_lock(f), turbo(f),      cstates(f),    isolation(f), thp(f),
      numa_balancing(f), swap(f),      irqbalance(f), preemption(f), throttle(f),  load(f),
      steal(f),          cpu(f),       kernel(f),     cmdline(f),    gpu_clocks(f)};
  for (Check& c : checks) {
    c.required = std::find(required.begin(), required.end(), c.name) != required.end();
  }
  return checks;
}

std::vector<std::string> strict_failures(const std::vector<Check>& checks) {
  std::vector<std::string> out;
  for (const Check& c : checks) {
    if (c.required && (c.verdict == CheckVerdict::kFail || c.verdict == CheckVerdict::kUnknown)) {
      out.push_back(c.name);
    }
  }
  return out;
}

std::map<std::string, std::string> fingerprint(const SystemRoots& roots) {
  const Facts f = sys::read_facts(roots, /*sample_interval=*/false);
  std::map<std::string, std::string> fp;
  fp["hostname"] = or_unknown(f.hostname);
  fp["kernel"] = or_unknown(f.osrelease);
  fp["kernel_version"] = or_unknown(f.version);
  fp["cmdline"] = or_unknown(f.cmdline);
  fp["cpu_model"] = f.cpu_model.empty() ? "unknown" : f.cpu_model;
  fp["cpu_count"] = std::to_string(f.cpus.size());
  fp["cpu_flags"] = f.cpuinfo_readable ? flags_text(f) : "unknown";
  fp["governor"] = summary(f.governor);
  fp["scaling_driver"] = summary(f.scaling_driver);
  fp["turbo"] = f.turbo_on ? (*f.turbo_on ? "on" : "off") : "unknown";
  const std::string thp_word = bracketed(f.thp_enabled.text), defrag = bracketed(f.thp_defrag.text);
  fp["thp"] = thp_word.empty() ? "unknown" : thp_word;
  fp["thp_defrag"] = defrag.empty() ? "unknown" : defrag;
  fp["numa_balancing"] =
      f.numa_balancing.status == ReadStatus::kAbsent ? "absent" : or_unknown(f.numa_balancing);
  fp["swap"] = !f.swaps_readable     ? "unknown"
               : f.swap_devices == 0 ? "none"
                                     : std::to_string(f.swap_kb) + " kB";
  fp["swappiness"] = or_unknown(f.swappiness);
  fp["isolated"] = list_or_unknown(f.isolated);
  fp["nohz_full"] = list_or_unknown(f.nohz_full);
  fp["preemption"] = f.preemption.empty() ? "unknown" : f.preemption;
  const bool no_cstates = summary(f.cstates) == "unknown";
  fp["cstates_enabled"] = no_cstates                  ? "unknown"
                          : f.cstates_enabled.empty() ? "none"
                                                      : join(f.cstates_enabled, ",");
  fp["mem_total_kb"] = f.mem_total_kb ? std::to_string(*f.mem_total_kb) : "unknown";
  fp["gpu"] = gpu_names(roots);
  return fp;
}

nlohmann::json checks_json(const std::vector<Check>& checks) {
  nlohmann::json out = nlohmann::json::array();
  for (const Check& c : checks) {
    out.push_back({{"name", c.name},
                   {"title", c.title},
                   {"value", c.value},
                   {"expected", c.expected},
                   {"verdict", to_string(c.verdict)},
                   {"required", c.required},
                   {"detail", c.detail}});
  }
  return out;
}

}  // namespace mmrt::verify
