// Reads the facts the preflight judges: per-CPU cpufreq and cpuidle files, turbo, THP, swap,
// isolation, the IRQ balancer, the preemption model, counters, the CPU model. Read-only.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>

#include "verify/preflight.h"

namespace mmrt::verify::sys {
namespace {

namespace fs = std::filesystem;

constexpr size_t kCpuinfoBytes = 64 << 10;  // the first processors' model name and flags
constexpr size_t kCmdlineBytes = 64 << 10;
// Long enough that one 10 ms tick of steal on one CPU stays under the 1 % limit on a few CPUs.
constexpr auto kLiveSampleWindow = std::chrono::milliseconds(1000);

std::string trimmed(std::string_view s) {
  const auto a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return {};
  return std::string(s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1));
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
}

// A per-file label: its first line, or a marker for an absent or unreadable file.
std::string file_label(const fs::path& p) {
  const FileText f = read_line(p);
  if (f.status == ReadStatus::kAbsent) return std::string(kNotExposed);
  if (!f.ok()) return std::string(kUnreadable);
  return f.text;
}

fs::path cpu_path(const Facts& f, int cpu) {
  return fs::path(f.roots.sysfs) / "devices/system/cpu" / ("cpu" + std::to_string(cpu));
}

CpuLabels per_cpu(const Facts& f, const char* rel) {
  CpuLabels out;
  for (int cpu : f.cpus) out.emplace_back(cpu, file_label(cpu_path(f, cpu) / rel));
  return out;
}

void read_turbo(Facts& f) {
  const fs::path cpu = fs::path(f.roots.sysfs) / "devices/system/cpu";
  const FileText status = read_line(cpu / "intel_pstate/status");
  const FileText no_turbo = read_line(cpu / "intel_pstate/no_turbo");
  const bool pstate_on = !(status.ok() && status.text == "off");
  if (pstate_on && no_turbo.ok() && (no_turbo.text == "0" || no_turbo.text == "1")) {
    f.turbo_on = no_turbo.text == "0";
    f.turbo_source = "intel_pstate no_turbo=" + no_turbo.text;
    if (status.ok()) f.turbo_source += ", status " + status.text;
    const FileText pct = read_line(cpu / "intel_pstate/min_perf_pct");
    if (pct.ok()) f.turbo_source += ", min_perf_pct " + pct.text;
    return;
  }
  const FileText boost = read_line(cpu / "cpufreq/boost");
  if (boost.ok() && (boost.text == "0" || boost.text == "1")) {
    f.turbo_on = boost.text == "1";
    f.turbo_source = "cpufreq boost=" + boost.text;
  }
}

// The numbered cpuidle states of one CPU, in index order.
std::vector<fs::path> idle_states(const fs::path& dir) {
  std::vector<std::pair<int, fs::path>> states;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind("state", 0) == 0 && all_digits(n.substr(5))) {
      states.emplace_back(std::atoi(n.c_str() + 5), it->path());
    }
  }
  std::sort(states.begin(), states.end());
  std::vector<fs::path> out;
  for (auto& s : states) out.push_back(std::move(s.second));
  return out;
}

void read_cstates(Facts& f) {
  for (int cpu : f.cpus) {
    const fs::path dir = cpu_path(f, cpu) / "cpuidle";
    std::error_code ec;
    const std::vector<fs::path> states = idle_states(dir);
    if (states.empty()) {
      f.cstates.emplace_back(cpu, fs::is_directory(dir, ec) ? "no deep states" : kNotExposed);
      continue;
    }
    std::vector<std::string> deep_on;
    bool deep = false, unreadable = false;
    for (const fs::path& s : states) {
      const FileText name = read_line(s / "name"), latency = read_line(s / "latency"),
                     disable = read_line(s / "disable");
      if (!name.ok() || !latency.ok() || !disable.ok()) {
        unreadable = true;
        continue;
      }
      const bool on = disable.text == "0";
      auto& names = f.cstates_enabled;
      if (on && std::find(names.begin(), names.end(), name.text) == names.end()) {
        names.push_back(name.text);
      }
      if (std::strtoll(latency.text.c_str(), nullptr, 10) <= kDeepCStateLatencyUs) continue;
      deep = true;
      if (on) deep_on.push_back(name.text);
    }
    std::string label;
    for (const auto& n : deep_on) label += (label.empty() ? "" : " ") + n;
    if (!deep_on.empty()) {
      label += " enabled";
    } else {
      label = unreadable ? kUnreadable : deep ? "deep states disabled" : "no deep states";
    }
    f.cstates.emplace_back(cpu, std::move(label));
  }
}

// isolcpus=[flag,...,]<cpu-list>: drops the leading flags (nohz, domain, managed_irq).
std::optional<std::vector<int>> parse_isolcpus(const std::string& v) {
  size_t start = 0;
  while (start < v.size() && std::isalpha(static_cast<unsigned char>(v[start]))) {
    const auto comma = v.find(',', start);
    if (comma == std::string::npos) return std::nullopt;
    start = comma + 1;
  }
  return parse_cpu_list(std::string_view(v).substr(start));
}

void read_isolation(Facts& f) {
  const fs::path cpu = fs::path(f.roots.sysfs) / "devices/system/cpu";
  f.isolation_readable = f.cmdline.ok();
  const auto from_sysfs = [&](const char* file) -> std::optional<std::vector<int>> {
    const FileText t = read_line(cpu / file);
    if (!t.ok()) return std::nullopt;
    f.isolation_readable = true;
    return parse_cpu_list(t.text);
  };
  f.isolated = from_sysfs("isolated");
  if (const auto v = cmdline_arg(f, "isolcpus"); !f.isolated && v) f.isolated = parse_isolcpus(*v);
  f.nohz_full = from_sysfs("nohz_full");
  if (const auto v = cmdline_arg(f, "nohz_full"); !f.nohz_full && v) {
    f.nohz_full = parse_cpu_list(*v);
  }
  if (const auto v = cmdline_arg(f, "rcu_nocbs")) f.rcu_nocbs = parse_cpu_list(*v);
  std::set<int> serving;
  for (const auto* l : {&f.isolated, &f.nohz_full}) {
    if (*l) serving.insert((*l)->begin(), (*l)->end());
  }
  f.serving.assign(serving.begin(), serving.end());
}

void read_swap(Facts& f) {
  const FileText t = read_file(fs::path(f.roots.procfs) / "swaps");
  f.swaps_readable = t.ok();
  std::istringstream in(t.text);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, type;
    int64_t size = 0;
    if (fields >> name >> type >> size) ++f.swap_devices, f.swap_kb += size;
  }
  f.swappiness = read_line(fs::path(f.roots.procfs) / "sys/vm/swappiness");
}

// Process ids whose comm is `name` (processes that exit during the scan are skipped).
std::vector<int> pids_named(const fs::path& proc, std::string_view name) {
  std::vector<int> pids;
  std::error_code ec;
  for (fs::directory_iterator it(proc, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (!all_digits(n)) continue;
    const FileText comm = read_line(it->path() / "comm");
    if (comm.ok() && comm.text == name) pids.push_back(std::atoi(n.c_str()));
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

// IRQs whose affinity includes one of `cpus` (sorted); nullopt when no IRQ affinity is exposed.
std::optional<std::vector<int>> irqs_on(const fs::path& proc, const std::vector<int>& cpus) {
  std::vector<int> irqs;
  bool any = false;
  std::error_code ec;
  for (fs::directory_iterator it(proc / "irq", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (!all_digits(n)) continue;
    const FileText line = read_line(it->path() / "smp_affinity_list");
    const auto list = line.ok() ? parse_cpu_list(line.text) : std::nullopt;
    if (!list) continue;
    any = true;
    const auto serving = [&](int x) { return std::binary_search(cpus.begin(), cpus.end(), x); };
    if (std::any_of(list->begin(), list->end(), serving)) irqs.push_back(std::atoi(n.c_str()));
  }
  if (!any) return std::nullopt;
  std::sort(irqs.begin(), irqs.end());
  return irqs;
}

// The model from the `uname -v` string; "" when unreadable.
std::string preemption_model(const Facts& f) {
  if (f.realtime.ok() && f.realtime.text == "1") return "PREEMPT_RT";
  if (!f.version.ok()) return "";
  std::istringstream in(f.version.text);
  const std::vector<std::string> toks{std::istream_iterator<std::string>(in), {}};
  for (size_t i = 0; i < toks.size(); ++i) {
    const bool rt_pair = toks[i] == "PREEMPT" && i + 1 < toks.size() && toks[i + 1] == "RT";
    if (toks[i] == "PREEMPT_RT" || rt_pair) return "PREEMPT_RT";
  }
  for (const char* m : {"PREEMPT_DYNAMIC", "PREEMPT_LAZY", "PREEMPT"}) {
    if (std::find(toks.begin(), toks.end(), m) != toks.end()) return m;
  }
  return "none";
}

void read_cpuinfo(Facts& f) {
  const FileText t = read_file(fs::path(f.roots.procfs) / "cpuinfo", kCpuinfoBytes);
  f.cpuinfo_readable = t.ok();
  std::istringstream in(t.text);
  std::string line;
  std::set<std::string> flags;
  bool have_flags = false;
  // The first processor's block ends at the first blank line.
  while (std::getline(in, line) && line.find_first_not_of(" \t") != std::string::npos) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trimmed(std::string_view(line).substr(0, colon));
    const std::string value = trimmed(std::string_view(line).substr(colon + 1));
    if (key == "model name" && f.cpu_model.empty()) f.cpu_model = value;
    if ((key == "flags" || key == "Features") && !have_flags) {
      std::istringstream words(value);
      flags.insert(std::istream_iterator<std::string>(words), {});
      have_flags = true;
    }
  }
  for (const char* flag : {"avx2", "avx512f", "avx512_bf16", "avx512_vnni"}) {
    if (flags.count(flag)) f.cpu_flags.emplace_back(flag);
  }
  if (flags.count("amx_tile") || flags.count("amx_bf16") || flags.count("amx_int8")) {
    f.cpu_flags.emplace_back("amx");
  }
}

std::optional<int64_t> mem_total_kb(const fs::path& proc) {
  const FileText t = read_file(proc / "meminfo", 16 << 10);
  std::istringstream in(t.text);
  std::string key;
  int64_t kb = 0;
  while (in >> key) {
    if (key == "MemTotal:" && in >> kb) return kb;
    in.ignore(1 << 12, '\n');
  }
  return std::nullopt;
}

void read_counters(Facts& f, bool sample_interval) {
  f.stat = read_cpu_times(f.roots);
  f.throttle = read_throttle_counts(f.roots);
  if (!sample_interval || !f.roots.live) return;
  f.stat_before = f.stat;
  f.throttle_before = f.throttle;
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(kLiveSampleWindow);
  f.stat = read_cpu_times(f.roots);
  f.throttle = read_throttle_counts(f.roots);
  f.window_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::optional<std::string> cmdline_arg(const Facts& f, std::string_view key) {
  if (!f.cmdline.ok()) return std::nullopt;
  std::istringstream in(f.cmdline.text);
  std::string tok;
  const std::string prefix = std::string(key) + "=";
  while (in >> tok && tok != "--") {
    if (tok.rfind(prefix, 0) == 0) return tok.substr(prefix.size());
  }
  return std::nullopt;
}

Facts read_facts(const SystemRoots& roots, bool sample_interval) {
  require_roots(roots);
  Facts f;
  f.roots = roots;
  const fs::path sys = roots.sysfs, proc = roots.procfs;
  f.cpus = online_cpus(roots);
  f.governor = per_cpu(f, "cpufreq/scaling_governor");
  f.scaling_driver = per_cpu(f, "cpufreq/scaling_driver");
  f.min_freq_khz = per_cpu(f, "cpufreq/scaling_min_freq");
  f.max_freq_khz = per_cpu(f, "cpufreq/scaling_max_freq");
  read_cstates(f);
  read_turbo(f);
  f.thp_enabled = read_line(sys / "kernel/mm/transparent_hugepage/enabled");
  f.thp_defrag = read_line(sys / "kernel/mm/transparent_hugepage/defrag");
  f.numa_balancing = read_line(proc / "sys/kernel/numa_balancing");
  f.osrelease = read_line(proc / "sys/kernel/osrelease");
  f.version = read_line(proc / "sys/kernel/version");
  f.realtime = read_line(sys / "kernel/realtime");
  f.hostname = read_line(proc / "sys/kernel/hostname");
  f.cmdline = read_file(proc / "cmdline", kCmdlineBytes);
  f.cmdline.text = trimmed(std::string_view(f.cmdline.text).substr(0, f.cmdline.text.find('\n')));
  read_swap(f);
  read_isolation(f);
  f.irqbalance_pids = pids_named(proc, "irqbalance");
  if (!f.serving.empty()) f.irqs_on_serving = irqs_on(proc, f.serving);
  f.preemption = preemption_model(f);
  read_counters(f, sample_interval);
  f.load1 = read_load1(roots);
  read_cpuinfo(f);
  f.mem_total_kb = mem_total_kb(proc);
  return f;
}

}  // namespace mmrt::verify::sys
