// Runs a program as a separate process the way a user would, with bounds: a wall-clock timeout
// and a resident-memory ceiling, both enforced by killing the process (so a regression that
// hangs or takes the machine's memory fails its test instead of the machine). Reports the exit
// status, stdout, stderr and the peak resident memory.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mmrt::testing {

struct RunLimits {
  double timeout_s = 60;
  long rss_limit_kb = 1L << 20;                          // 1 GiB
  std::string stdin_path;                                // empty: /dev/null
  std::vector<std::pair<std::string, std::string>> env;  // set in the child
  std::vector<std::pair<int, rlim_t>> rlimits;  // setrlimit(resource, soft=hard) in the child
};

struct RunResult {
  int rc = -1;               // exit status; 128 + signal when killed by one
  bool timed_out = false;    // killed at the timeout
  bool over_memory = false;  // killed at the memory ceiling
  long peak_rss_kb = 0;
  std::string out, err;
};

inline long rss_kb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// argv[0] is the program's path (no shell, no PATH lookup).
inline RunResult run_process(const std::vector<std::string>& argv, const RunLimits& lim,
                             const std::string& scratch_dir) {
  const std::string out_path = scratch_dir + "/run.stdout", err_path = scratch_dir + "/run.stderr";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int in = ::open(lim.stdin_path.empty() ? "/dev/null" : lim.stdin_path.c_str(), O_RDONLY);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) ::_exit(127);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    for (const auto& [k, v] : lim.env) ::setenv(k.c_str(), v.c_str(), 1);
    for (const auto& [res, v] : lim.rlimits) {
      const rlimit r{v, v};
      ::setrlimit(res, &r);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  rusage ru{};
  for (;;) {
    const pid_t w = ::wait4(pid, &status, WNOHANG, &ru);
    if (w == pid) break;
    r.peak_rss_kb = std::max(r.peak_rss_kb, rss_kb(pid));
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.timed_out && !r.over_memory) {
      if (r.peak_rss_kb > lim.rss_limit_kb) r.over_memory = true;
      if (el > lim.timeout_s) r.timed_out = true;
      if (r.timed_out || r.over_memory) ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r.peak_rss_kb = std::max(r.peak_rss_kb, ru.ru_maxrss);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

}  // namespace mmrt::testing
