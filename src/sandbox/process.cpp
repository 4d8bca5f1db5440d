#include "sandbox/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "sandbox/wire.h"

namespace mmrt::sandbox {

namespace {
constexpr size_t kMiB = size_t{1} << 20;
std::string errno_text() {
  return std::strerror(errno);
}
}  // namespace

Slot::~Slot() {
  if (map) ::munmap(map, capacity);
  if (fd >= 0) ::close(fd);
}

std::shared_ptr<Slot> make_slot(uint32_t id, size_t capacity, const char* name) {
  auto s = std::make_shared<Slot>();
  s->id = id;
  s->capacity = capacity;
  s->fd = ::memfd_create(name, MFD_CLOEXEC);
  if (s->fd < 0 || ::ftruncate(s->fd, static_cast<off_t>(capacity)) != 0)
    throw ResourceExhausted("cannot create a " + std::to_string(capacity / kMiB) +
                            " MiB buffer shared with the media worker: " + errno_text());
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
  if (p == MAP_FAILED)
    throw ResourceExhausted("cannot map a " + std::to_string(capacity / kMiB) +
                            " MiB buffer shared with the media worker: " + errno_text());
  s->map = p;
  return s;
}

int kill_and_reap(pid_t pid) {
  int status = 0;
  if (pid <= 0) return 0;
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

int Process::stop() {
  if (sock >= 0) ::close(sock);
  sock = -1;
  const int status = kill_and_reap(pid);
  pid = 0;
  return status;
}

double cpu_seconds_of(pid_t pid) {
  clockid_t clock;
  timespec t{};
  if (::clock_getcpuclockid(pid, &clock) != 0 || ::clock_gettime(clock, &t) != 0) return -1;
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

bool wait_readable(int fd, double seconds) {
  pollfd p{fd, POLLIN, 0};
  const int64_t deadline = now_ns() + static_cast<int64_t>(std::min(seconds, 1e6) * 1e9);
  for (;;) {
    const int64_t left_ms = std::max<int64_t>(0, (deadline - now_ns()) / 1000000);
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, INT32_MAX)));
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

std::unique_ptr<Process> spawn_worker(const SpawnSpec& cfg) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    throw Unavailable("media sandbox: socketpair failed: " + errno_text());
  if (sv[1] <= wire::kWorkerFd) {  // keep dup2 below from being a no-op that keeps CLOEXEC
    const int moved = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
    ::close(sv[1]);
    if (moved < 0) {
      ::close(sv[0]);
      throw Unavailable("media sandbox: cannot move a descriptor: " + errno_text());
    }
    sv[1] = moved;
  }
  const std::string isa(isa_name(cfg.isa));
  std::vector<std::string> args = {cfg.exe,
                                   "media-worker",
                                   "--model",
                                   cfg.model_dir,
                                   "--isa",
                                   isa,
                                   "--memory-bytes",
                                   std::to_string(cfg.memory_bytes),
                                   "--shared-bytes",
                                   std::to_string(cfg.shared_bytes),
                                   "--cpu-seconds",
                                   std::to_string(cfg.cpu_seconds),
                                   "--lifetime-cpu-seconds",
                                   std::to_string(cfg.lifetime_cpu_seconds)};
  if (cfg.test_hooks) args.push_back("--test-hooks");
  std::vector<std::string> env = {"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MMRT_THREADS=1"};
  for (const char* k : {"LD_LIBRARY_PATH", "UBSAN_OPTIONS"})
    if (const char* v = std::getenv(k)) env.push_back(std::string(k) + "=" + v);
  // A sanitizer build's worker: crashes arrive as the signal itself (the runtime's handler
  // would need system calls the filter forbids), and no leak check at exit.
  const char* asan = std::getenv("ASAN_OPTIONS");
  env.push_back(std::string("ASAN_OPTIONS=") + (asan ? std::string(asan) + ":" : "") +
                "handle_segv=0:handle_sigbus=0:handle_sigill=0:handle_sigfpe=0:handle_abort=0:"
                "detect_leaks=0");
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  for (auto& e : env) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawn_file_actions_adddup2(&fa, sv[1], wire::kWorkerFd);
  // Nothing of the server's: not its stdin, nor its stdout or stderr (a worker could forge
  // log lines there, or map a log file).
  ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  ::posix_spawn_file_actions_adddup2(&fa, 1, 2);
  ::posix_spawn_file_actions_addclosefrom_np(&fa, wire::kWorkerFd + 1);
  ::posix_spawnattr_init(&at);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&at, &none);
  ::posix_spawnattr_setsigdefault(&at, &all);
  ::posix_spawnattr_setpgroup(&at, 0);  // a terminal's Ctrl-C goes to the server, not to it
  ::posix_spawnattr_setflags(
      &at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, cfg.exe.c_str(), &fa, &at, argv.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&at);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    throw Unavailable("media sandbox: cannot start the worker '" + cfg.exe_shown +
                      "': " + std::strerror(rc));
  }
  auto p = std::make_unique<Process>();
  p->pid = pid;
  p->sock = sv[0];
  return p;
}

}  // namespace mmrt::sandbox
