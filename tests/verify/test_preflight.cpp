// System preflight and telemetry: each fixture state (this machine's real files, a box tuned for
// latency, a laptop with distribution defaults, an AMD box with boost on) gives the expected
// value and verdict per check; strict failures, the fingerprint, the GPU clock event reason
// parser, telemetry reads and deltas, the live system, and bad roots.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "verify/preflight.h"
#include "verify/telemetry.h"

using namespace mmrt;
using namespace mmrt::verify;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(MMRT_SOURCE_DIR) / "tests/verify/fixtures/sys";

SystemRoots roots_of(const fs::path& dir) {
  SystemRoots r;
  r.sysfs = (dir / "sys").string();
  r.procfs = (dir / "proc").string();
  r.live = false;
  return r;
}

SystemRoots fixture(const std::string& state) {
  return roots_of(kFixtures / state);
}

std::map<std::string, Check> by_name(const std::vector<Check>& checks) {
  std::map<std::string, Check> m;
  for (const Check& c : checks) m[c.name] = c;
  return m;
}

std::map<std::string, Check> preflight(const SystemRoots& r) {
  return by_name(run_preflight(r, default_required_checks()));
}

void expect_check(const std::map<std::string, Check>& m, const std::string& name,
                  CheckVerdict verdict, const std::string& value) {
  auto it = m.find(name);
  ASSERT_NE(it, m.end()) << name;
  EXPECT_EQ(to_string(it->second.verdict), std::string(to_string(verdict))) << name;
  EXPECT_EQ(it->second.value, value) << name;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A writable copy of a fixture state in a fresh temporary directory, removed on destruction.
struct TempTree {
  fs::path dir;
  explicit TempTree(const std::string& state) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() /
          ("mmrt_preflight_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::copy(kFixtures / state, dir, fs::copy_options::recursive);
  }
  ~TempTree() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  SystemRoots roots() const { return roots_of(dir); }
};

}  // namespace

TEST(Preflight, NamesAndDefaultRequiredSet) {
  const std::vector<std::string> names = preflight_check_names();
  ASSERT_EQ(names.size(), 17u);
  EXPECT_EQ(names.front(), "governor");
  EXPECT_EQ(names.back(), "gpu_clocks");
  for (const std::string& r : default_required_checks()) {
    EXPECT_NE(std::find(names.begin(), names.end(), r), names.end()) << r;
  }
  EXPECT_EQ(default_required_checks().size(), 8u);
  EXPECT_STREQ(to_string(CheckVerdict::kOk), "ok");
  EXPECT_STREQ(to_string(CheckVerdict::kWarn), "warn");
  EXPECT_STREQ(to_string(CheckVerdict::kFail), "fail");
  EXPECT_STREQ(to_string(CheckVerdict::kUnknown), "unknown");
  EXPECT_STREQ(to_string(CheckVerdict::kInfo), "info");
}

TEST(Preflight, TunedLatencyIsAllOk) {
  const auto m = preflight(fixture("tuned-latency"));
  using V = CheckVerdict;
  expect_check(m, "governor", V::kOk, "performance on 0-7");
  expect_check(m, "freq_lock", V::kOk, "locked at 3000 MHz on 0-7");
  expect_check(m, "turbo", V::kOk,
               "off (intel_pstate no_turbo=1, status active, min_perf_pct 100)");
  expect_check(m, "cstates", V::kOk, "deep states disabled on 0-7");
  expect_check(m, "isolation", V::kOk, "isolated 4-7, nohz_full 4-7, rcu_nocbs 4-7");
  expect_check(m, "thp", V::kOk, "madvise");
  expect_check(m, "numa_balancing", V::kOk, "0");
  expect_check(m, "swap", V::kOk, "no swap, swappiness 10");
  expect_check(m, "irqbalance", V::kOk, "not running; isolated cores 4-7 free of IRQs");
  expect_check(m, "preemption", V::kOk, "PREEMPT_RT");
  expect_check(m, "throttle", V::kOk, "core 0, package 0 since boot");
  expect_check(m, "load", V::kOk, "load1 0.02 on 8 CPUs");
  expect_check(m, "steal", V::kOk, "0.00 % since boot");
  expect_check(m, "cpu", V::kInfo,
               "Intel(R) Xeon(R) Platinum 8480+, 8 CPUs, flags: avx2 avx512f avx512_bf16 "
               "avx512_vnni amx");
  expect_check(m, "kernel", V::kInfo,
               "6.1.0-18-rt-amd64 #1 SMP PREEMPT_RT Debian 6.1.76-1 (2024-02-01)");
  EXPECT_EQ(m.at("cmdline").verdict, V::kInfo);
  EXPECT_NE(m.at("cmdline").value.find("isolcpus=4-7 nohz_full=4-7"), std::string::npos);
  expect_check(m, "gpu_clocks", V::kInfo, "not queried (fixture tree)");
  EXPECT_TRUE(m.at("governor").required);
  EXPECT_FALSE(m.at("freq_lock").required);
  EXPECT_EQ(m.at("governor").expected, "performance");
  EXPECT_NE(m.at("turbo").detail.find("latency-performance profile keeps it on"),
            std::string::npos);
  EXPECT_TRUE(
      strict_failures(run_preflight(fixture("tuned-latency"), default_required_checks())).empty());
}

TEST(Preflight, LaptopDefaultsFail) {
  const auto checks = run_preflight(fixture("laptop-default"), default_required_checks());
  const auto m = by_name(checks);
  using V = CheckVerdict;
  expect_check(m, "governor", V::kFail, "powersave on 0-7");
  expect_check(m, "freq_lock", V::kFail, "400-4700 MHz on 0-7");
  expect_check(m, "turbo", V::kFail, "on (intel_pstate no_turbo=0, status active, min_perf_pct 9)");
  expect_check(m, "cstates", V::kFail, "C6 C8 C10 enabled on 0-7");
  expect_check(m, "isolation", V::kWarn, "no isolated cores");
  expect_check(m, "thp", V::kFail, "always");
  expect_check(m, "numa_balancing", V::kFail, "1");
  expect_check(m, "swap", V::kFail, "1 device, 16777212 kB, swappiness 60");
  expect_check(m, "irqbalance", V::kWarn, "running (pid 733)");
  expect_check(m, "preemption", V::kWarn, "PREEMPT_DYNAMIC");
  expect_check(m, "throttle", V::kWarn, "core 28, package 17 since boot");
  expect_check(m, "load", V::kFail, "load1 9.50 on 8 CPUs");
  expect_check(m, "steal", V::kFail, "5.80 % since boot");
  expect_check(m, "cpu", V::kInfo, "13th Gen Intel(R) Core(TM) i7-1365U, 8 CPUs, flags: avx2");
  EXPECT_EQ(strict_failures(checks),
            (std::vector<std::string>{"governor", "turbo", "thp", "numa_balancing", "swap", "load",
                                      "steal"}));
}

TEST(Preflight, AmdBoostMixedGovernorsAndAbsentKnobs) {
  const auto checks = run_preflight(fixture("amd-boost"), default_required_checks());
  const auto m = by_name(checks);
  using V = CheckVerdict;
  expect_check(m, "governor", V::kFail, "performance on 0-1, ondemand on 2-3");
  expect_check(m, "freq_lock", V::kFail, "1500-3500 MHz on 0-3");
  expect_check(m, "turbo", V::kFail, "on (cpufreq boost=1)");
  expect_check(m, "cstates", V::kFail, "deep states disabled on 0-1, C2 enabled on 2-3");
  expect_check(m, "isolation", V::kOk, "isolated 2-3");
  expect_check(m, "thp", V::kOk, "never");
  expect_check(m, "numa_balancing", V::kOk, "absent (kernel without NUMA balancing)");
  expect_check(m, "swap", V::kOk, "1 device, 4194300 kB, swappiness 10");
  expect_check(m, "irqbalance", V::kOk, "running (pid 900); isolated cores 2-3 free of IRQs");
  expect_check(m, "preemption", V::kOk, "PREEMPT");
  expect_check(m, "throttle", V::kUnknown, "not exposed");
  EXPECT_EQ(m.at("throttle").detail, "not exposed by this kernel/VM");
  expect_check(m, "load", V::kWarn, "load1 2.50 on 4 CPUs");
  expect_check(m, "steal", V::kOk, "0.00 % since boot");
  EXPECT_EQ(strict_failures(checks), (std::vector<std::string>{"governor", "turbo", "throttle"}));
}

TEST(Preflight, ThisMachineReportsAbsentKnobsAsUnknown) {
  const auto checks = run_preflight(fixture("this-machine"), default_required_checks());
  const auto m = by_name(checks);
  using V = CheckVerdict;
  for (const char* name : {"governor", "freq_lock", "turbo", "cstates", "throttle"}) {
    expect_check(m, name, V::kUnknown, "not exposed");
    EXPECT_EQ(m.at(name).detail, "not exposed by this kernel/VM") << name;
  }
  expect_check(m, "isolation", V::kWarn, "no isolated cores");
  expect_check(m, "thp", V::kOk, "madvise");
  expect_check(m, "numa_balancing", V::kOk, "0");
  expect_check(m, "swap", V::kOk, "no swap, swappiness 60");
  expect_check(m, "irqbalance", V::kOk, "not running");
  expect_check(m, "preemption", V::kWarn, "PREEMPT_DYNAMIC");
  expect_check(m, "load", V::kOk, "load1 0.03 on 2 CPUs");
  expect_check(m, "steal", V::kOk, "0.21 % since boot");
  expect_check(m, "cpu", V::kInfo, "AMD EPYC, 2 CPUs, flags: avx2");
  expect_check(m, "kernel", V::kInfo, "6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0");
  EXPECT_EQ(strict_failures(checks), (std::vector<std::string>{"governor", "turbo", "throttle"}));
}

TEST(Preflight, EditedStates) {
  TempTree t("tuned-latency");
  const fs::path mm = t.dir / "sys/kernel/mm/transparent_hugepage";
  write_text(mm / "defrag", "[always] defer defer+madvise madvise never\n");
  write_text(t.dir / "sys/devices/system/cpu/cpu5/cpufreq/scaling_governor", "schedutil\n");
  fs::remove(t.dir / "sys/devices/system/cpu/cpu6/cpufreq/scaling_min_freq");
  write_text(t.dir / "proc/4242/comm", "irqbalance\n");
  write_text(t.dir / "proc/irq/30/smp_affinity_list", "0-7\n");
  fs::remove(t.dir / "sys/kernel/realtime");
  write_text(t.dir / "proc/sys/kernel/version", "#1 SMP PREEMPT_DYNAMIC Debian 6.12.9-1\n");
  std::string cmdline = read_text(t.dir / "proc/cmdline");
  cmdline.insert(cmdline.find('\n'), " preempt=full");
  write_text(t.dir / "proc/cmdline", cmdline);
  const auto m = preflight(t.roots());
  using V = CheckVerdict;
  expect_check(m, "thp", V::kWarn, "madvise, defrag always");
  expect_check(m, "governor", V::kFail, "performance on 0-4,6-7, schedutil on 5");
  expect_check(m, "freq_lock", V::kUnknown,
               "locked at 3000 MHz on 0-5,7, not exposed on 6");  // half a pair is no value
  expect_check(m, "irqbalance", V::kFail, "running (pid 4242); IRQ 30 on isolated cores 4-7");
  expect_check(m, "preemption", V::kOk, "PREEMPT_DYNAMIC (preempt=full)");
}

TEST(Preflight, UnreadableFileIsUnknown) {
  // A directory where the file should be opens but fails to read (even for root, unlike a file
  // without read permission).
  TempTree t("tuned-latency");
  const fs::path gov = t.dir / "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor";
  fs::remove(gov);
  fs::create_directory(gov);
  EXPECT_EQ(sys::read_file(gov).status, sys::ReadStatus::kUnreadable);
  EXPECT_EQ(sys::read_file(t.dir / "no/such/file").status, sys::ReadStatus::kAbsent);
  const auto m = preflight(t.roots());
  expect_check(m, "governor", CheckVerdict::kUnknown, "performance on 0-2,4-7, unreadable on 3");
  fs::remove(t.dir / "sys/kernel/mm/transparent_hugepage/enabled");
  fs::create_directory(t.dir / "sys/kernel/mm/transparent_hugepage/enabled");
  const auto m2 = preflight(t.roots());
  expect_check(m2, "thp", CheckVerdict::kUnknown, "unreadable");
  EXPECT_EQ(m2.at("thp").detail, "could not be read (permission denied?)");
}

TEST(Preflight, ReadsAreBounded) {
  TempTree t("tuned-latency");
  const fs::path big = t.dir / "big";
  write_text(big, std::string(3 << 20, 'x'));
  EXPECT_EQ(sys::read_file(big).text.size(), sys::kMaxFileBytes);
  EXPECT_EQ(sys::read_file(big, 10).text, "xxxxxxxxxx");
  EXPECT_EQ(sys::read_line(big).text.size(), 4096u);
}

TEST(Preflight, Fingerprint) {
  const auto tuned = fingerprint(fixture("tuned-latency"));
  for (const char* key : {"hostname",        "kernel",       "kernel_version",
                          "cmdline",         "cpu_model",    "cpu_count",
                          "cpu_flags",       "governor",     "scaling_driver",
                          "turbo",           "thp",          "thp_defrag",
                          "numa_balancing",  "swap",         "swappiness",
                          "isolated",        "nohz_full",    "preemption",
                          "cstates_enabled", "mem_total_kb", "gpu"}) {
    EXPECT_TRUE(tuned.count(key)) << key;
  }
  EXPECT_EQ(tuned.size(), 21u);
  EXPECT_EQ(tuned.at("hostname"), "latency-01");
  EXPECT_EQ(tuned.at("kernel"), "6.1.0-18-rt-amd64");
  EXPECT_EQ(tuned.at("kernel_version"), "#1 SMP PREEMPT_RT Debian 6.1.76-1 (2024-02-01)");
  EXPECT_EQ(tuned.at("cpu_model"), "Intel(R) Xeon(R) Platinum 8480+");
  EXPECT_EQ(tuned.at("cpu_count"), "8");
  EXPECT_EQ(tuned.at("cpu_flags"), "avx2 avx512f avx512_bf16 avx512_vnni amx");
  EXPECT_EQ(tuned.at("governor"), "performance");
  EXPECT_EQ(tuned.at("scaling_driver"), "intel_pstate");
  EXPECT_EQ(tuned.at("turbo"), "off");
  EXPECT_EQ(tuned.at("thp"), "madvise");
  EXPECT_EQ(tuned.at("thp_defrag"), "madvise");
  EXPECT_EQ(tuned.at("numa_balancing"), "0");
  EXPECT_EQ(tuned.at("swap"), "none");
  EXPECT_EQ(tuned.at("swappiness"), "10");
  EXPECT_EQ(tuned.at("isolated"), "4-7");
  EXPECT_EQ(tuned.at("nohz_full"), "4-7");
  EXPECT_EQ(tuned.at("preemption"), "PREEMPT_RT");
  EXPECT_EQ(tuned.at("cstates_enabled"), "POLL,C1,C1E");
  EXPECT_EQ(tuned.at("mem_total_kb"), "263842148");
  EXPECT_EQ(tuned.at("gpu"), "none");

  const auto laptop = fingerprint(fixture("laptop-default"));
  EXPECT_EQ(laptop.at("governor"), "powersave");
  EXPECT_EQ(laptop.at("turbo"), "on");
  EXPECT_EQ(laptop.at("thp"), "always");
  EXPECT_EQ(laptop.at("swap"), "16777212 kB");
  EXPECT_EQ(laptop.at("isolated"), "none");
  EXPECT_EQ(laptop.at("nohz_full"), "none");  // "(null)"
  EXPECT_EQ(laptop.at("cstates_enabled"), "POLL,C1,C1E,C6,C8,C10");
  EXPECT_EQ(laptop.at("cpu_flags"), "avx2");

  const auto amd = fingerprint(fixture("amd-boost"));
  EXPECT_EQ(amd.at("governor"), "performance on 0-1, ondemand on 2-3");
  EXPECT_EQ(amd.at("scaling_driver"), "acpi-cpufreq");
  EXPECT_EQ(amd.at("numa_balancing"), "absent");
  EXPECT_EQ(amd.at("isolated"), "2-3");
  EXPECT_EQ(amd.at("preemption"), "PREEMPT");

  const auto here = fingerprint(fixture("this-machine"));
  EXPECT_EQ(here.at("hostname"), "vm");
  EXPECT_EQ(here.at("kernel"), "6.18.44-fc-v1045");
  EXPECT_EQ(here.at("cpu_model"), "AMD EPYC");
  EXPECT_EQ(here.at("cpu_count"), "2");
  EXPECT_EQ(here.at("governor"), "unknown");
  EXPECT_EQ(here.at("turbo"), "unknown");
  EXPECT_EQ(here.at("cstates_enabled"), "unknown");
  EXPECT_EQ(here.at("isolated"), "none");
  EXPECT_EQ(here.at("nohz_full"), "unknown");
  EXPECT_EQ(here.at("mem_total_kb"), "24683584");
}

TEST(Preflight, ChecksJson) {
  const auto checks = run_preflight(fixture("laptop-default"), {"governor"});
  const nlohmann::json j = checks_json(checks);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), checks.size());
  EXPECT_EQ(j[0]["name"], "governor");
  EXPECT_EQ(j[0]["title"], "CPU frequency governor");
  EXPECT_EQ(j[0]["value"], "powersave on 0-7");
  EXPECT_EQ(j[0]["expected"], "performance");
  EXPECT_EQ(j[0]["verdict"], "fail");
  EXPECT_EQ(j[0]["required"], true);
  EXPECT_EQ(j[1]["required"], false);
  EXPECT_TRUE(j[0]["detail"].is_string());
}

TEST(Preflight, CpuLists) {
  EXPECT_EQ(sys::parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(sys::parse_cpu_list(""), std::vector<int>{});
  EXPECT_EQ(sys::parse_cpu_list(" (null)\n"), std::vector<int>{});
  EXPECT_FALSE(sys::parse_cpu_list("3-1"));
  EXPECT_FALSE(sys::parse_cpu_list("a"));
  EXPECT_FALSE(sys::parse_cpu_list("1,,2"));
  EXPECT_EQ(sys::format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(sys::format_cpu_list({}), "");
}

TEST(Preflight, GpuClockReasons) {
  const fs::path gpu = kFixtures / "gpu";
  EXPECT_EQ(active_gpu_clock_reasons(read_text(gpu / "throttle-reasons-older.txt")),
            (std::vector<std::string>{"SW Power Cap", "SW Thermal Slowdown"}));
  EXPECT_EQ(active_gpu_clock_reasons(read_text(gpu / "event-reasons-newer.txt")),
            (std::vector<std::string>{"HW Slowdown", "HW Thermal Slowdown", "SW Power Cap"}));
  EXPECT_TRUE(active_gpu_clock_reasons(read_text(gpu / "event-reasons-idle.txt")).empty());
  EXPECT_TRUE(active_gpu_clock_reasons("").empty());
  EXPECT_TRUE(active_gpu_clock_reasons("SW Power Cap : Active\n").empty());  // outside a section
}

TEST(Preflight, LiveSystemDoesNotThrow) {
  std::vector<Check> checks;
  ASSERT_NO_THROW(checks = run_preflight(SystemRoots{}, default_required_checks()));
  std::vector<std::string> names;
  for (const Check& c : checks) {
    names.push_back(c.name);
    EXPECT_FALSE(c.title.empty()) << c.name;
    EXPECT_FALSE(c.value.empty()) << c.name;
  }
  EXPECT_EQ(names, preflight_check_names());
  std::map<std::string, std::string> fp;
  ASSERT_NO_THROW(fp = fingerprint(SystemRoots{}));
  EXPECT_EQ(fp.size(), 21u);
}

TEST(Preflight, BadInput) {
  SystemRoots missing = fixture("no-such-state");
  EXPECT_THROW(run_preflight(missing, {}), NotFound);
  EXPECT_THROW(fingerprint(missing), NotFound);
  EXPECT_THROW(TelemetrySampler(missing, std::chrono::milliseconds(10), now_ns()), NotFound);
  try {
    run_preflight(missing, {});
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-state"), std::string::npos);
  }
  EXPECT_THROW(run_preflight(fixture("tuned-latency"), {"govrnor"}), InvalidArgument);
  EXPECT_THROW(TelemetrySampler(fixture("tuned-latency"), std::chrono::milliseconds(0), now_ns()),
               InvalidArgument);
}

TEST(Telemetry, ReadOnceFromFixtures) {
  const TelemetrySample tuned = TelemetrySampler::read_once(fixture("tuned-latency"), nullptr, 1.5);
  EXPECT_DOUBLE_EQ(tuned.t_s, 1.5);
  EXPECT_DOUBLE_EQ(tuned.temp_c, 45.0);
  EXPECT_EQ(tuned.throttle_count, 0);
  EXPECT_DOUBLE_EQ(tuned.steal_pct, 0);
  EXPECT_NEAR(tuned.busy_pct, 100.0 * 604000 / 9606000, 1e-9);  // since boot
  EXPECT_DOUBLE_EQ(tuned.load1, 0.02);
  EXPECT_EQ(tuned.gpu_reasons, "");

  const TelemetrySample laptop = TelemetrySampler::read_once(fixture("laptop-default"), nullptr, 0);
  EXPECT_DOUBLE_EQ(laptop.temp_c, 80.25);  // hwmon beats the thermal zones
  EXPECT_EQ(laptop.throttle_count, 28 + 17);
  EXPECT_NEAR(laptop.steal_pct, 100.0 * 250000 / 4312000, 1e-9);

  const TelemetrySample here = TelemetrySampler::read_once(fixture("this-machine"), nullptr, 0);
  EXPECT_TRUE(std::isnan(here.temp_c));
  EXPECT_EQ(here.throttle_count, -1);
}

TEST(Telemetry, PackageCountersCountOncePerPackage) {
  TempTree t("laptop-default");
  const fs::path cpu = t.dir / "sys/devices/system/cpu";
  for (int c = 0; c < 8; ++c) {
    const fs::path d = cpu / ("cpu" + std::to_string(c));
    write_text(d / "topology/physical_package_id", c < 4 ? "0\n" : "1\n");
    if (c >= 4) write_text(d / "thermal_throttle/package_throttle_count", "5\n");
  }
  const auto counts = sys::read_throttle_counts(t.roots());
  ASSERT_TRUE(counts);
  EXPECT_EQ(counts->core, 28);
  EXPECT_EQ(counts->package, 17 + 5);
  expect_check(preflight(t.roots()), "throttle", CheckVerdict::kWarn,
               "core 28, package 22 since boot");
}

TEST(Telemetry, DeltasBetweenTwoReads) {
  TempTree t("tuned-latency");
  const SystemRoots r = t.roots();
  const TelemetrySample first = TelemetrySampler::read_once(r, nullptr, 0);
  // +100 user, +50 system, +800 idle, +50 steal: 1000 jiffies, 15 % busy, 5 % steal.
  const fs::path stat = t.dir / "proc/stat";
  std::string text = read_text(stat);
  const std::string old_line = "cpu  500000 1000 100000 9000000 2000 0 3000 0 0 0";
  ASSERT_EQ(text.rfind(old_line, 0), 0u);
  text.replace(0, old_line.size(), "cpu  500100 1000 100050 9000800 2000 0 3000 50 0 0");
  write_text(stat, text);
  write_text(t.dir / "sys/devices/system/cpu/cpu2/thermal_throttle/core_throttle_count", "3\n");
  write_text(t.dir / "sys/class/thermal/thermal_zone1/temp", "71500\n");
  const TelemetrySample second = TelemetrySampler::read_once(r, &first, 1);
  EXPECT_NEAR(second.steal_pct, 5.0, 1e-9);
  EXPECT_NEAR(second.busy_pct, 15.0, 1e-9);
  EXPECT_EQ(second.throttle_count, 3);
  EXPECT_DOUBLE_EQ(second.temp_c, 71.5);
  // The same counters again: an empty interval.
  const TelemetrySample third = TelemetrySampler::read_once(r, &second, 2);
  EXPECT_DOUBLE_EQ(third.steal_pct, 0);
  EXPECT_DOUBLE_EQ(third.busy_pct, 0);
}

TEST(Telemetry, Json) {
  TelemetrySample a;
  a.t_s = 0.5;
  a.throttle_count = 4;
  a.steal_pct = 1.25;
  a.busy_pct = 50;
  a.load1 = 0.75;
  a.gpu_reasons = "SW Power Cap";
  TelemetrySample b = a;
  b.temp_c = 61.5;
  const nlohmann::json j = telemetry_json({a, b});
  ASSERT_EQ(j.size(), 2u);
  EXPECT_TRUE(j[0]["temp_c"].is_null());
  EXPECT_DOUBLE_EQ(j[1]["temp_c"].get<double>(), 61.5);
  EXPECT_DOUBLE_EQ(j[0]["t_s"].get<double>(), 0.5);
  EXPECT_EQ(j[0]["throttle"], 4);
  EXPECT_DOUBLE_EQ(j[0]["steal_pct"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(j[0]["busy_pct"].get<double>(), 50);
  EXPECT_DOUBLE_EQ(j[0]["load1"].get<double>(), 0.75);
  EXPECT_EQ(j[0]["gpu_reasons"], "SW Power Cap");
  EXPECT_EQ(j[0].size(), 7u);
}

TEST(Telemetry, SamplerCollectsUntilStopped) {
  const int64_t t0 = now_ns();
  TelemetrySampler s(fixture("tuned-latency"), std::chrono::milliseconds(10), t0);
  EXPECT_TRUE(s.samples().empty());
  s.start();
  s.start();  // no-op while running
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  s.stop();
  const auto got = s.samples();
  ASSERT_GE(got.size(), 2u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_DOUBLE_EQ(got[i].temp_c, 45.0);
    // The first sample is the baseline reading (no interval yet); then unchanged counters: an
    // empty interval.
    if (i == 0) {
      EXPECT_TRUE(std::isnan(got[i].steal_pct));
    } else {
      EXPECT_DOUBLE_EQ(got[i].steal_pct, 0);
    }
    if (i > 0) {
      EXPECT_GT(got[i].t_s, got[i - 1].t_s);
    }
  }
  EXPECT_GT(got.front().t_s, 0);
  s.stop();  // idempotent
  EXPECT_EQ(s.samples().size(), got.size());
}

TEST(Telemetry, LiveSamplerRuns) {
  TelemetrySampler s(SystemRoots{}, std::chrono::milliseconds(20), now_ns());
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // The destructor stops it.
  const auto got = s.samples();
  for (size_t i = 1; i < got.size(); ++i) {  // [0] is the baseline reading
    EXPECT_GE(got[i].busy_pct, 0);
    EXPECT_LE(got[i].busy_pct, 100.0 + 1e-9);
  }
}
