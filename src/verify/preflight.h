// System preflight of `mmrt verify`: reads the host's latency knobs (CPU governor and clock lock,
// turbo, C-states, core isolation, THP, NUMA balancing, swap, IRQ balancing, preemption model,
// thermal throttling, competing load, steal, GPU clock event reasons) from sysfs and procfs,
// read-only, and judges each against its latency value. A knob the kernel or VM does not expose
// is `unknown`, never a guess. The roots can point at a fixture tree instead of the live system.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mmrt::verify {

enum class CheckVerdict { kOk, kWarn, kFail, kUnknown, kInfo };
// "ok", "warn", "fail", "unknown", "info".
const char* to_string(CheckVerdict v);

// One judged knob.
struct Check {
  std::string name;      // stable id: "governor", "freq_lock", "turbo", ... (preflight_check_names)
  std::string title;     // for humans: "CPU frequency governor"
  std::string value;     // what was read: "powersave on 0-3, performance on 4-7"
  std::string expected;  // the latency value: "performance"
  CheckVerdict verdict = CheckVerdict::kUnknown;  // kFail: contradicts `expected`; kWarn: weaker
  bool required = false;                          // in the profile's required set
  std::string detail;                             // why it matters / what to do (one sentence)
};

// Where sysfs and procfs are mounted. `live` = false for fixture trees: no 1 s sampling of
// /proc/stat and the throttle counters, no GPU query.
struct SystemRoots {
  std::string sysfs = "/sys", procfs = "/proc";
  bool live = true;
};

// Exit latency (microseconds) above which a C-state counts as deep.
inline constexpr int64_t kDeepCStateLatencyUs = 10;

// Every check name, in report order.
std::vector<std::string> preflight_check_names();
// The default required set for `--preflight strict`: governor, turbo, thp, numa_balancing, swap,
// throttle, steal, load.
std::vector<std::string> default_required_checks();
// Reads every knob; `required` marks which checks the profile requires. Throws NotFound when a
// root does not exist, InvalidArgument for a required name that is no check.
std::vector<Check> run_preflight(const SystemRoots& roots,
                                 const std::vector<std::string>& required);
// Strict-mode outcome: the names of required checks whose verdict is kFail or kUnknown (an
// unreadable required knob cannot be proven).
std::vector<std::string> strict_failures(const std::vector<Check>& checks);
// The machine's fingerprint as flat key -> value strings: hostname, kernel, kernel_version,
// cmdline, cpu_model, cpu_count, cpu_flags, governor, scaling_driver, turbo, thp, thp_defrag,
// numa_balancing, swap, swappiness, isolated, nohz_full, preemption, cstates_enabled,
// mem_total_kb, gpu. Unreadable values are "unknown". Throws NotFound for a missing root.
std::map<std::string, std::string> fingerprint(const SystemRoots& roots);
// The active clock event (throttle) reasons in `nvidia-smi -q -d PERFORMANCE` text, under either
// the "Clocks Throttle Reasons" or the "Clocks Event Reasons" heading, without "Idle" and
// "Applications Clocks Setting"; each reason once, in order of appearance.
std::vector<std::string> active_gpu_clock_reasons(const std::string& nvidia_smi_text);
// [{"name","title","value","expected","verdict","required","detail"}].
nlohmann::json checks_json(const std::vector<Check>& checks);

// Bounded readers shared by the preflight and the telemetry sampler.
namespace sys {

inline constexpr size_t kMaxFileBytes = size_t{1} << 20;

enum class ReadStatus { kOk, kAbsent, kUnreadable };
struct FileText {
  ReadStatus status = ReadStatus::kAbsent;
  std::string text;  // at most the requested bytes; empty unless kOk
  bool ok() const { return status == ReadStatus::kOk; }
};
// Reads at most `max_bytes` of a file; never throws for a missing or unreadable file.
FileText read_file(const std::filesystem::path& path, size_t max_bytes = kMaxFileBytes);
// The first line of a (small) file without surrounding whitespace.
FileText read_line(const std::filesystem::path& path);

// Kernel CPU lists: "0-3,8,10-11" <-> {0,1,2,3,8,10,11}. Parsing ignores blanks and "(null)";
// nullopt for malformed text.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);
std::string format_cpu_list(const std::vector<int>& cpus);
// Online CPUs (sysfs cpu/online, else the cpu[0-9]+ directories), sorted.
std::vector<int> online_cpus(const SystemRoots& roots);

// Cumulative jiffies of the all-CPU line of /proc/stat.
struct CpuTimes {
  uint64_t busy = 0;  // user + nice + system + irq + softirq (steal excluded)
  uint64_t steal = 0;
  uint64_t total = 0;  // user .. steal (guest time is already inside user and nice)
};
std::optional<CpuTimes> read_cpu_times(const SystemRoots& roots);
// Percentages of `now - before` (since boot when `before` is null); 0 for an empty interval.
double steal_percent(const CpuTimes& now, const CpuTimes* before);
double busy_percent(const CpuTimes& now, const CpuTimes* before);
// First field of /proc/loadavg.
std::optional<double> read_load1(const SystemRoots& roots);

// Thermal throttle counters: core counters summed over CPUs, package counters summed over
// physical packages (each CPU of a package shows its package's); nullopt when none is exposed.
struct ThrottleCounts {
  int64_t core = 0, package = 0;
  int64_t total() const { return core + package; }
};
std::optional<ThrottleCounts> read_throttle_counts(const SystemRoots& roots);
// Hottest thermal zone or hwmon input in degrees Celsius; nullopt when none is exposed.
std::optional<double> read_max_temperature_c(const SystemRoots& roots);

// The nvidia-smi executable found on PATH; nullopt when absent or when `roots` is not live.
std::optional<std::filesystem::path> find_nvidia_smi(const SystemRoots& roots);
// Runs it with `args` (a fixed option string); its standard output (at most 256 KiB), nullopt when
// it cannot start or exits non-zero.
std::optional<std::string> run_nvidia_smi(const std::filesystem::path& exe, std::string_view args);
// Throws NotFound naming the root when sysfs or procfs is not a directory.
void require_roots(const SystemRoots& roots);

// Per online CPU: a file's first line, or kNotExposed / kUnreadable.
using CpuLabels = std::vector<std::pair<int, std::string>>;
inline constexpr std::string_view kNotExposed = "not exposed", kUnreadable = "unreadable";

// Everything the checks and the fingerprint judge, as read (before any judgment). Single knobs
// are FileText first lines.
struct Facts {
  SystemRoots roots;
  std::vector<int> cpus;  // online
  CpuLabels governor, scaling_driver, min_freq_khz, max_freq_khz;
  // "C6 C10 enabled" (deep states left enabled), "deep states disabled", "no deep states".
  CpuLabels cstates;
  std::vector<std::string> cstates_enabled;  // every enabled state's name, on any CPU
  std::optional<bool> turbo_on;              // nullopt: neither intel_pstate nor cpufreq boost
  std::string turbo_source;                  // "intel_pstate no_turbo=1, status active, ..."
  FileText thp_enabled, thp_defrag, numa_balancing, swappiness;
  FileText osrelease, version, realtime, cmdline, hostname;
  bool swaps_readable = false;
  int swap_devices = 0;
  int64_t swap_kb = 0;
  bool isolation_readable = false;  // sysfs isolated/nohz_full or the command line
  std::optional<std::vector<int>> isolated, nohz_full, rcu_nocbs;
  std::vector<int> serving;                         // isolated or nohz_full CPUs
  std::vector<int> irqbalance_pids;                 // processes whose comm is irqbalance
  std::optional<std::vector<int>> irqs_on_serving;  // nullopt: no IRQ affinity exposed
  std::string preemption;  // PREEMPT_RT | PREEMPT | PREEMPT_DYNAMIC | PREEMPT_LAZY | none | ""
  std::optional<ThrottleCounts> throttle, throttle_before;
  std::optional<CpuTimes> stat, stat_before;  // *_before: the live sample window's start
  double window_s = 0;                        // 0: one read, cumulative since boot
  std::optional<double> load1;
  bool cpuinfo_readable = false;
  std::string cpu_model;
  std::vector<std::string> cpu_flags;  // avx2, avx512f, avx512_bf16, avx512_vnni, amx present
  std::optional<int64_t> mem_total_kb;
};
// Reads the facts; with `sample_interval` on a live system, /proc/stat and the throttle counters
// are read twice 1 s apart. Throws NotFound for a missing root.
Facts read_facts(const SystemRoots& roots, bool sample_interval);
// The value of `key=` on the kernel command line (before "--"); nullopt when absent.
std::optional<std::string> cmdline_arg(const Facts& f, std::string_view key);

}  // namespace sys
}  // namespace mmrt::verify
