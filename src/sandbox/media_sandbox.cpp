// The server's side of the media sandbox: starting, feeding, watching and replacing workers.
#include "sandbox/media_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "sandbox/wire.h"

namespace mmrt::sandbox {

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr int64_t kMaxFeatureBytes = int64_t{16} << 30;
constexpr double kStartTimeoutS = 60;  // a loaded machine or a sanitizer build starts slowly

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

std::string errno_text() {
  return std::strerror(errno);
}

// A buffer shared with a worker: a memfd mapped here once, reused from request to request.
struct Slot {
  uint32_t id = 0;
  int fd = -1;
  void* map = nullptr;
  size_t capacity = 0;
  bool sent = false;                // the worker has it mapped
  std::atomic<bool> leased{false};  // a features tensor still views it
  ~Slot() {
    if (map) ::munmap(map, capacity);
    if (fd >= 0) ::close(fd);
  }
};

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

// One worker process and the buffers it holds.
struct Process {
  pid_t pid = 0;
  int sock = -1;
  bool ready = false;
  bool bound = false;  // has served a tenant (then it serves only that one)
  std::string tenant;
  std::shared_ptr<Slot> input;
  std::vector<std::shared_ptr<Slot>> outputs;
  std::vector<uint32_t> forget;  // buffers to tell the worker to unmap
};

bool wait_readable(int fd, double seconds) {
  pollfd p{fd, POLLIN, 0};
  const int ms = static_cast<int>(std::min(seconds * 1000.0, 2.0e9));
  for (;;) {
    const int r = ::poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

// Printable ASCII of a worker's message (it may be anything).
std::string clean_message(const char (&m)[wire::kMessageBytes]) {
  std::string s;
  for (size_t i = 0; i < wire::kMessageBytes && m[i]; ++i)
    s += (m[i] >= 0x20 && m[i] < 0x7f) ? m[i] : '?';
  return s.empty() ? "(no message)" : s;
}

}  // namespace

struct MediaSandbox::Impl {
  struct Lane {
    std::mutex mu;
    std::unique_ptr<Process> current, spare;
    std::atomic<pid_t> pid{0};
  };

  MediaSandboxConfig cfg;
  std::string exe;
  std::vector<std::unique_ptr<Lane>> lanes;
  std::atomic<uint32_t> next_slot{1};
  std::atomic<uint64_t> next_request{1};
  std::atomic<int64_t> items{0}, failed{0}, started{0}, lost{0}, switches{0};

  explicit Impl(const MediaSandboxConfig& c) : cfg(c) {
    exe = cfg.worker_exe;
    if (exe.empty()) {
      char buf[4096];
      const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
      if (n <= 0) throw Unavailable("media sandbox: cannot find this executable: " + errno_text());
      exe.assign(buf, static_cast<size_t>(n));
    }
  }

  std::unique_ptr<Process> spawn() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
      throw Unavailable("media sandbox: socketpair failed: " + errno_text());
    if (sv[1] <= wire::kWorkerFd) {  // keep dup2 below from being a no-op that keeps CLOEXEC
      const int moved = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
      ::close(sv[1]);
      sv[1] = moved;
    }
    const std::string isa(isa_name(cfg.isa));
    std::vector<std::string> args = {exe,
                                     "media-worker",
                                     "--model",
                                     cfg.model_dir,
                                     "--isa",
                                     isa,
                                     "--memory-bytes",
                                     std::to_string(cfg.memory_bytes),
                                     "--cpu-seconds",
                                     std::to_string(cfg.cpu_seconds)};
    if (cfg.test_hooks) args.push_back("--test-hooks");
    std::vector<std::string> env = {"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1",
                                    "MMRT_THREADS=1"};
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
    ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_adddup2(&fa, 2, 1);  // stdout belongs to the server
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
    const int rc = ::posix_spawn(&pid, exe.c_str(), &fa, &at, argv.data(), envp.data());
    ::posix_spawn_file_actions_destroy(&fa);
    ::posix_spawnattr_destroy(&at);
    ::close(sv[1]);
    if (rc != 0) {
      ::close(sv[0]);
      throw Unavailable("media sandbox: cannot start the worker '" + exe +
                        "': " + std::strerror(rc));
    }
    auto p = std::make_unique<Process>();
    p->pid = pid;
    p->sock = sv[0];
    started.fetch_add(1);
    return p;
  }

  // Stops a worker for good: SIGKILL (it holds nothing worth a graceful exit), then reaps it.
  // Returns its wait status.
  static int reap(Process& p) {
    int status = 0;
    if (p.sock >= 0) ::close(p.sock);
    p.sock = -1;
    if (p.pid > 0) {
      ::kill(p.pid, SIGKILL);
      while (::waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    p.pid = 0;
    return status;
  }

  // Reaps a worker that stopped answering and says why, as the error for its request.
  Error lost_worker(std::unique_ptr<Process>& p, const std::string& doing, bool timed_out) {
    const pid_t pid = p->pid;
    int status = 0;
    if (!timed_out) {  // it is gone or going: collect its status before anyone kills it
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      p->pid = 0;
    }
    reap(*p);
    p.reset();
    lost.fetch_add(1);
    const std::string who = "the media worker (pid " + std::to_string(pid) + ")";
    if (timed_out)
      return ResourceExhausted(doing + " took longer than " + std::to_string(cfg.timeout_s) +
                               " s (the media sandbox's limit); " + who + " was stopped");
    if (WIFEXITED(status))
      return InternalError(who + " exited with status " + std::to_string(WEXITSTATUS(status)) +
                           " while " + doing);
    const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    const std::string how = " while " + doing + " (" + signal_name(sig) + ")";
    switch (sig) {
      case SIGSYS:
        return InternalError(who + " was stopped by its seccomp filter: it made a forbidden " +
                             "system call" + how + "; a decoder exploit, or a bug in mmrt");
      case SIGXCPU:
        return ResourceExhausted(doing + " used more than " + std::to_string(cfg.cpu_seconds) +
                                 " s of CPU time, the media worker's limit" + how);
      case SIGKILL:
        return Unavailable(who + " was killed from outside (the out-of-memory killer or an " +
                           "operator)" + how + "; retry");
      case SIGSEGV:
      case SIGBUS:
      case SIGILL:
      case SIGFPE:
      case SIGABRT:
      case SIGTRAP:
        return FormatError(who + " crashed" + how + "; the file is probably malformed");
      default:
        return Unavailable(who + " stopped" + how);
    }
  }

  void await_ready(std::unique_ptr<Process>& p) {
    if (p->ready) return;
    const std::string what = "starting ('" + exe + " media-worker' for '" + cfg.model_dir + "')";
    if (!wait_readable(p->sock, std::max(kStartTimeoutS, cfg.timeout_s))) {
      const pid_t pid = p->pid;
      reap(*p);
      p.reset();
      throw Unavailable("media sandbox: the worker (pid " + std::to_string(pid) +
                        ") did not report ready within " + std::to_string(kStartTimeoutS) + " s");
    }
    wire::Ready r;
    const long n = wire::receive_message(p->sock, &r, sizeof r, {}, nullptr);
    if (n <= 0) {
      Error e = lost_worker(p, what, false);
      throw Unavailable("media sandbox: cannot start a worker: " + std::string(e.what()) +
                        " (is '" + exe + "' the mmrt binary?)");
    }
    if (n != static_cast<long>(sizeof r) || r.magic != wire::kMagic ||
        r.version != wire::kVersion) {
      reap(*p);
      p.reset();
      throw Unavailable("media sandbox: '" + exe + "' is not an mmrt media worker of this version");
    }
    if (r.status != wire::Status::kOk) {
      reap(*p);
      p.reset();
      throw Unavailable("media sandbox: the worker could not start: " + clean_message(r.message));
    }
    p->ready = true;
  }

  // The lane's worker for `tenant`, started (and the spare promoted) as needed.
  Process& acquire(Lane& L, const std::string& tenant) {
    if (L.current && L.current->bound && L.current->tenant != tenant) {
      reap(*L.current);
      L.current.reset();
      switches.fetch_add(1);
    }
    if (!L.current) L.current = L.spare ? std::move(L.spare) : spawn();
    if (!L.current->ready) {
      try {
        await_ready(L.current);
      } catch (const Error&) {
        L.pid.store(0);
        throw;
      }
    }
    L.current->bound = true;
    L.current->tenant = tenant;
    L.pid.store(L.current->pid);
    return *L.current;
  }

  std::shared_ptr<Slot> output_slot(Process& p, size_t need) {
    std::shared_ptr<Slot> best;
    for (auto& s : p.outputs)
      if (!s->leased.load() && s->capacity >= need && (!best || s->capacity < best->capacity))
        best = s;
    if (!best) {
      best = make_slot(next_slot.fetch_add(1), round_up(need, 2 * kMiB), "mmrt-media-out");
      p.outputs.push_back(best);
    }
    return best;
  }

  // Idle output buffers beyond cfg.idle_output_bytes go, the largest first.
  void trim(Process& p) {
    for (;;) {
      size_t idle = 0;
      std::shared_ptr<Slot>* largest = nullptr;
      for (auto& s : p.outputs)
        if (!s->leased.load()) {
          idle += s->capacity;
          if (!largest || s->capacity > (*largest)->capacity) largest = &s;
        }
      if (idle <= cfg.idle_output_bytes || !largest) return;
      if ((*largest)->sent) p.forget.push_back((*largest)->id);
      p.outputs.erase(p.outputs.begin() + (largest - p.outputs.data()));
    }
  }

  // Moves the worker's soft CPU limit to what it has used plus one item's budget.
  void arm_cpu_limit(const Process& p) const {
    clockid_t clock;
    timespec used{};
    if (::clock_getcpuclockid(p.pid, &clock) != 0 || ::clock_gettime(clock, &used) != 0) return;
    const rlimit lim{static_cast<rlim_t>(used.tv_sec + 1 + cfg.cpu_seconds), RLIM_INFINITY};
    ::prlimit(p.pid, RLIMIT_CPU, &lim, nullptr);
  }

  models::PreparedMedia exchange(Lane& L, const Job& job) {
    Process& p = *L.current;
    const std::string doing = std::string("decoding a ") + models::modality_name(job.modality) +
                              " of " + std::to_string(job.bytes.size()) + " bytes";
    if (!p.input || p.input->capacity < job.bytes.size()) {
      if (p.input && p.input->sent) p.forget.push_back(p.input->id);
      p.input = make_slot(next_slot.fetch_add(1),
                          round_up(std::max(job.bytes.size(), 4 * kMiB), kMiB), "mmrt-media-in");
    }
    if (!job.bytes.empty()) std::memcpy(p.input->map, job.bytes.data(), job.bytes.size());
    const int64_t want = job.feature_bytes > 0 ? job.feature_bytes : cfg.memory_bytes;
    if (want > kMaxFeatureBytes)
      throw ResourceExhausted("the media item's features would take " + std::to_string(want) +
                              " bytes, more than the sandbox's limit of " +
                              std::to_string(kMaxFeatureBytes));
    std::shared_ptr<Slot> out = output_slot(p, static_cast<size_t>(want));

    wire::Request q;
    q.id = next_request.fetch_add(1);
    q.modality = static_cast<uint32_t>(job.modality);
    q.hook = static_cast<uint32_t>(job.hook);
    q.input = {p.input->id, p.input->sent ? 0u : 1u, p.input->capacity};
    q.output = {out->id, out->sent ? 0u : 1u, out->capacity};
    q.input_bytes = job.bytes.size();
    while (!p.forget.empty() && q.n_forget < wire::kMaxForget) {
      q.forget[q.n_forget++] = p.forget.back();
      p.forget.pop_back();
    }
    std::vector<int> fds;
    if (q.input.has_fd) fds.push_back(p.input->fd);
    if (q.output.has_fd) fds.push_back(out->fd);
    arm_cpu_limit(p);
    if (!wire::send_message(p.sock, &q, sizeof q, fds)) throw lost_worker(L.current, doing, false);
    if (!wait_readable(p.sock, cfg.timeout_s)) throw lost_worker(L.current, doing, true);
    wire::Reply r;
    const long n = wire::receive_message(p.sock, &r, sizeof r, {}, nullptr);
    if (n <= 0) throw lost_worker(L.current, doing, false);
    if (n != static_cast<long>(sizeof r) || r.magic != wire::kMagic || r.id != q.id) {
      reap(p);
      L.current.reset();
      lost.fetch_add(1);
      throw InternalError("the media worker sent a malformed reply while " + doing);
    }
    p.input->sent = out->sent = true;
    if (r.status != wire::Status::kOk) {
      failed.fetch_add(1);
      const ErrorCode code = r.code >= 0 && r.code <= static_cast<int32_t>(ErrorCode::kInternal)
                                 ? static_cast<ErrorCode>(r.code)
                                 : ErrorCode::kInternal;
      throw Error(code, clean_message(r.message));
    }
    return adopt_reply(r, out, doing);
  }

  // The features as a view of the output buffer, after checking every field of the reply.
  models::PreparedMedia adopt_reply(const wire::Reply& r, const std::shared_ptr<Slot>& out,
                                    const std::string& doing) {
    auto bad = [&](const std::string& what) {
      return InternalError("the media worker's reply " + what + " (" + doing + ")");
    };
    if (r.dtype > static_cast<uint32_t>(DType::kI64)) throw bad("has an unknown dtype");
    if (r.rank < 1 || r.rank > static_cast<uint32_t>(wire::kMaxRank) ||
        r.n_dims > static_cast<uint32_t>(wire::kMaxDims))
      throw bad("has an unexpected rank");
    const DType dt = static_cast<DType>(r.dtype);
    Shape shape;
    uint64_t elems = 1;
    for (uint32_t i = 0; i < r.rank; ++i) {
      if (r.shape[i] < 0 || r.shape[i] > kMaxFeatureBytes) throw bad("has a negative shape");
      shape.push_back(r.shape[i]);
      elems = elems * static_cast<uint64_t>(r.shape[i]);
      if (elems > static_cast<uint64_t>(kMaxFeatureBytes)) throw bad("describes too much data");
    }
    const uint64_t bytes = elems * dtype_size(dt);
    if (bytes != r.output_bytes || bytes > out->capacity)
      throw bad("disagrees with its output size");
    if (r.n_tokens < 0 || r.encoder_cost < 0) throw bad("has negative counts");
    models::PreparedMedia m;
    m.modality = static_cast<models::Modality>(0);
    for (uint32_t i = 0; i < r.n_dims; ++i) m.dims.push_back(r.dims[i]);
    m.n_tokens = r.n_tokens;
    m.encoder_cost = r.encoder_cost;
    out->leased.store(true);
    std::shared_ptr<void> lease(out->map, [out](void*) { out->leased.store(false); });
    m.features = Tensor::view(out->map, dt, std::move(shape), std::move(lease));
    items.fetch_add(1);
    return m;
  }
};

MediaSandbox::MediaSandbox(const MediaSandboxConfig& cfg, int lanes)
    : impl_(std::make_unique<Impl>(cfg)) {
  if (cfg.memory_bytes < (int64_t{16} << 20) || cfg.cpu_seconds < 1 || !(cfg.timeout_s > 0))
    throw InvalidArgument(
        "media sandbox: memory must be >= 16 MiB, CPU time >= 1 s and the timeout > 0");
  for (int i = 0; i < std::max(1, lanes); ++i) {
    impl_->lanes.push_back(std::make_unique<Impl::Lane>());
    impl_->lanes.back()->current = impl_->spawn();
  }
  for (auto& L : impl_->lanes) {  // all start at once; then each must report ready
    impl_->await_ready(L->current);
    L->pid.store(L->current->pid);
  }
  for (auto& L : impl_->lanes) L->spare = impl_->spawn();
}

MediaSandbox::~MediaSandbox() {
  for (auto& L : impl_->lanes) {
    std::lock_guard<std::mutex> lk(L->mu);
    for (auto* p : {&L->current, &L->spare})
      if (*p) Impl::reap(**p);
  }
}

models::PreparedMedia MediaSandbox::preprocess(int lane, const Job& job) {
  if (lane < 0 || lane >= lanes())
    throw InvalidArgument("media sandbox: no lane " + std::to_string(lane));
  Impl::Lane& L = *impl_->lanes[static_cast<size_t>(lane)];
  std::lock_guard<std::mutex> lk(L.mu);
  impl_->acquire(L, job.tenant);
  models::PreparedMedia m;
  try {
    m = impl_->exchange(L, job);
  } catch (...) {
    if (!L.current) L.pid.store(0);
    if (!L.spare) {  // start the replacement now, while the error goes back
      try {
        L.spare = impl_->spawn();
      } catch (const Error&) {  // the next item that needs it says why
      }
    }
    throw;
  }
  m.modality = job.modality;
  impl_->trim(*L.current);
  if (!L.spare) {  // off this item's path: after its decode
    try {
      L.spare = impl_->spawn();
    } catch (const Error&) {  // the next item that needs it says why
    }
  }
  return m;
}

SandboxStats MediaSandbox::stats() const {
  SandboxStats s;
  s.items = impl_->items.load();
  s.failed = impl_->failed.load();
  s.workers_started = impl_->started.load();
  s.workers_lost = impl_->lost.load();
  s.tenant_switches = impl_->switches.load();
  return s;
}

pid_t MediaSandbox::worker_pid(int lane) const {
  return lane >= 0 && lane < lanes() ? impl_->lanes[static_cast<size_t>(lane)]->pid.load() : 0;
}

int MediaSandbox::lanes() const {
  return static_cast<int>(impl_->lanes.size());
}

}  // namespace mmrt::sandbox
