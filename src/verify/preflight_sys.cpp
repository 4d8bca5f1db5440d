// Bounded sysfs/procfs readers shared by the preflight checks and the telemetry sampler, and the
// parser of the GPU clock event reasons.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "core/error.h"
#include "verify/preflight.h"

namespace mmrt::verify {
namespace sys {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxCommandOutput = size_t{256} << 10;
constexpr size_t kSmallFileBytes = 4096;

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

template <typename T>
std::optional<T> parse_number(std::string_view s) {
  s = trim(s);
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Directory entries named `prefix` followed by digits only, sorted by that number.
std::vector<std::pair<int, fs::path>> numbered_entries(const fs::path& dir,
                                                       std::string_view prefix) {
  std::vector<std::pair<int, fs::path>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const auto n = parse_number<int>(std::string_view(name).substr(prefix.size()));
    if (n && std::isdigit(static_cast<unsigned char>(name[prefix.size()]))) {
      out.emplace_back(*n, it->path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<int64_t> read_int(const fs::path& p) {
  const FileText line = read_line(p);
  return line.ok() ? parse_number<int64_t>(line.text) : std::nullopt;
}

}  // namespace

FileText read_file(const fs::path& path, size_t max_bytes) {
  FileText out;
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    out.status =
        (errno == ENOENT || errno == ENOTDIR) ? ReadStatus::kAbsent : ReadStatus::kUnreadable;
    return out;
  }
  std::string text(std::min<size_t>(max_bytes, 4096), '\0');
  size_t used = 0;
  while (used < max_bytes) {
    if (used == text.size()) text.resize(std::min(max_bytes, text.size() * 2));
    const ssize_t n = ::read(f.fd, text.data() + used, text.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.status = ReadStatus::kUnreadable;
      return out;
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  text.resize(used);
  out.status = ReadStatus::kOk;
  out.text = std::move(text);
  return out;
}

FileText read_line(const fs::path& path) {
  FileText f = read_file(path, kSmallFileBytes);
  const std::string_view s = f.text;
  f.text = std::string(trim(s.substr(0, s.find('\n'))));
  return f;
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  text = trim(text);
  std::vector<int> cpus;
  if (text.empty() || text == "(null)") return cpus;
  constexpr int kMaxCpu = 1 << 16;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const auto dash = item.find('-');
    const auto lo = parse_number<int>(item.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : parse_number<int>(item.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi >= kMaxCpu) return std::nullopt;
    for (int c = *lo; c <= *hi; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> online_cpus(const SystemRoots& roots) {
  const fs::path dir = fs::path(roots.sysfs) / "devices/system/cpu";
  if (const FileText line = read_line(dir / "online"); line.ok()) {
    if (auto cpus = parse_cpu_list(line.text); cpus && !cpus->empty()) return *cpus;
  }
  std::vector<int> cpus;
  for (const auto& [n, path] : numbered_entries(dir, "cpu")) cpus.push_back(n);
  return cpus;
}

std::optional<CpuTimes> read_cpu_times(const SystemRoots& roots) {
  FileText f = read_file(fs::path(roots.procfs) / "stat", 64 << 10);
  if (!f.ok() || f.text.compare(0, 4, "cpu ") != 0) return std::nullopt;
  const size_t eol = f.text.find('\n');
  std::istringstream line(f.text.substr(4, eol == std::string::npos ? eol : eol - 4));
  uint64_t v[8] = {};  // user nice system idle iowait irq softirq steal
  int n = 0;
  while (n < 8 && line >> v[n]) ++n;
  if (n < 4) return std::nullopt;
  CpuTimes t;
  t.busy = v[0] + v[1] + v[2] + v[5] + v[6];
  t.steal = v[7];
  t.total = t.busy + v[3] + v[4] + v[7];
  return t;
}

namespace {
double percent_of(uint64_t part_now, uint64_t part_before, const CpuTimes& now,
                  const CpuTimes* before) {
  const uint64_t total0 = before ? before->total : 0;
  if (now.total <= total0 || part_now < part_before) return 0;
  return 100.0 * static_cast<double>(part_now - part_before) /
         static_cast<double>(now.total - total0);
}
}  // namespace

double steal_percent(const CpuTimes& now, const CpuTimes* before) {
  return percent_of(now.steal, before ? before->steal : 0, now, before);
}

double busy_percent(const CpuTimes& now, const CpuTimes* before) {
  return percent_of(now.busy, before ? before->busy : 0, now, before);
}

std::optional<double> read_load1(const SystemRoots& roots) {
  const FileText line = read_line(fs::path(roots.procfs) / "loadavg");
  if (!line.ok()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(line.text.c_str(), &end);
  if (end == line.text.c_str() || v < 0) return std::nullopt;
  return v;
}

std::optional<ThrottleCounts> read_throttle_counts(const SystemRoots& roots) {
  const fs::path dir = fs::path(roots.sysfs) / "devices/system/cpu";
  std::optional<ThrottleCounts> out;
  std::map<int64_t, int64_t> package_counts;  // physical package id -> its counter
  for (int cpu : online_cpus(roots)) {
    const fs::path c = dir / ("cpu" + std::to_string(cpu));
    const auto core = read_int(c / "thermal_throttle/core_throttle_count");
    const auto package = read_int(c / "thermal_throttle/package_throttle_count");
    if (!core && !package) continue;
    if (!out) out.emplace();
    out->core += core.value_or(0);
    if (package) {
      int64_t& p = package_counts[read_int(c / "topology/physical_package_id").value_or(0)];
      p = std::max(p, *package);
    }
  }
  for (const auto& [id, count] : package_counts) out->package += count;
  return out;
}

std::optional<double> read_max_temperature_c(const SystemRoots& roots) {
  std::optional<double> hottest;
  const auto take = [&](const fs::path& p) {
    if (const auto milli = read_int(p)) {
      const double c = static_cast<double>(*milli) / 1000.0;
      if (!hottest || c > *hottest) hottest = c;
    }
  };
  const fs::path cls = fs::path(roots.sysfs) / "class";
  for (const auto& [n, zone] : numbered_entries(cls / "thermal", "thermal_zone")) {
    take(zone / "temp");
  }
  for (const auto& [n, hwmon] : numbered_entries(cls / "hwmon", "hwmon")) {
    std::error_code ec;
    for (fs::directory_iterator it(hwmon, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.rfind("temp", 0) == 0 && name.size() > 10 &&
          name.compare(name.size() - 6, 6, "_input") == 0) {
        take(it->path());
      }
    }
  }
  return hottest;
}

std::optional<fs::path> find_nvidia_smi(const SystemRoots& roots) {
  const char* path = std::getenv("PATH");
  if (!roots.live || !path) return std::nullopt;
  std::string_view dirs = path;
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
    if (dir.empty()) continue;
    const fs::path exe = fs::path(dir) / "nvidia-smi";
    std::error_code ec;
    if (fs::is_regular_file(exe, ec) && ::access(exe.c_str(), X_OK) == 0) return exe;
  }
  return std::nullopt;
}

std::optional<std::string> run_nvidia_smi(const fs::path& exe, std::string_view args) {
  // Bounded in time too: a wedged driver can make nvidia-smi hang, and the preflight must not.
  std::string command = "timeout -k 2 10 '";
  for (char c : exe.string()) command += c == '\'' ? std::string("'\\''") : std::string(1, c);
  command += "' ";
  command += args;
  command += " 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return std::nullopt;
  std::string out;
  char buf[4096];
  size_t n = 0;
  while (out.size() < kMaxCommandOutput && (n = std::fread(buf, 1, sizeof buf, pipe)) > 0) {
    out.append(buf, std::min(n, kMaxCommandOutput - out.size()));
  }
  const int status = ::pclose(pipe);
  if (status != 0) return std::nullopt;
  return out;
}

void require_roots(const SystemRoots& roots) {
  for (const std::string& root : {roots.sysfs, roots.procfs}) {
    std::error_code ec;
    if (!fs::is_directory(root, ec)) throw NotFound("system root " + root + " does not exist");
  }
}

}  // namespace sys

std::vector<std::string> active_gpu_clock_reasons(const std::string& nvidia_smi_text) {
  std::vector<std::string> reasons;
  std::istringstream in(nvidia_smi_text);
  std::string line;
  size_t section_indent = std::string::npos;  // npos: outside a reasons section
  while (std::getline(in, line)) {
    const std::string_view body = sys::trim(line);
    if (body.empty()) continue;
    const size_t indent = line.find_first_not_of(" \t");
    if (body == "Clocks Throttle Reasons" || body == "Clocks Event Reasons") {
      section_indent = indent;
      continue;
    }
    if (section_indent == std::string::npos) continue;
    if (indent <= section_indent) {
      section_indent = std::string::npos;
      continue;
    }
    const auto colon = body.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string name(sys::trim(body.substr(0, colon)));
    if (sys::trim(body.substr(colon + 1)) != "Active") continue;
    if (name == "Idle" || name == "Applications Clocks Setting") continue;
    if (std::find(reasons.begin(), reasons.end(), name) == reasons.end()) reasons.push_back(name);
  }
  return reasons;
}

}  // namespace mmrt::verify
