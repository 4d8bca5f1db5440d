// The server's side of the media sandbox: feeding, watching and replacing workers (their
// processes and buffers: process.h).
#include "sandbox/media_sandbox.h"

#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "sandbox/process.h"
#include "sandbox/wire.h"

namespace mmrt::sandbox {

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr double kStartTimeoutS = 60;  // a loaded machine or a sanitizer build starts slowly
constexpr double kExitGraceS = 0.2;    // a worker that closed its socket must be gone by then
constexpr double kIdleCpuS = 0.5;      // CPU a worker may use between items (none is needed)

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
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
  std::string exe;        // what is executed ("/proc/self/exe": this binary, even if replaced)
  std::string exe_shown;  // its path, for messages
  int32_t lifetime_cpu_seconds = 0;
  std::vector<std::unique_ptr<Lane>> lanes;
  std::atomic<uint32_t> next_slot{1};
  std::atomic<int64_t> items{0}, failed{0}, started{0}, lost{0}, switches{0};

  explicit Impl(const MediaSandboxConfig& c) : cfg(c) {
    exe = exe_shown = cfg.worker_exe;
    if (exe.empty()) {
      exe = "/proc/self/exe";
      char buf[4096];
      const ssize_t n = ::readlink(exe.c_str(), buf, sizeof buf - 1);
      exe_shown = n > 0 ? std::string(buf, static_cast<size_t>(n)) : exe;
    }
    lifetime_cpu_seconds = std::max(600, 100 * cfg.cpu_seconds);
  }

  std::unique_ptr<Process> spawn() {
    SpawnSpec spec{exe,
                   exe_shown,
                   cfg.model_dir,
                   cfg.isa,
                   cfg.memory_bytes,
                   cfg.shared_bytes,
                   cfg.cpu_seconds,
                   lifetime_cpu_seconds,
                   cfg.test_hooks};
    auto p = spawn_worker(spec);
    started.fetch_add(1);
    return p;
  }

  // Reaps a worker that stopped answering and says why, as the error for its request.
  Error lost_worker(std::unique_ptr<Process>& p, const std::string& doing, bool timed_out) {
    const pid_t pid = p->pid;
    int status = 0;
    bool exited = false;
    if (!timed_out) {  // it is gone or going: collect its own status, within a grace period
      const int64_t until = now_ns() + static_cast<int64_t>(kExitGraceS * 1e9);
      while (!exited) {
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) exited = true;
        if (r < 0 && errno != EINTR) break;
        if (exited || now_ns() > until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (exited) p->pid = 0;
    p.reset();  // stops it if it is still there
    lost.fetch_add(1);
    const std::string who = "the media worker (pid " + std::to_string(pid) + ")";
    if (timed_out)
      return ResourceExhausted(doing + " took longer than " + std::to_string(cfg.timeout_s) +
                               " s (the media sandbox's limit); " + who + " was stopped");
    if (!exited)
      return InternalError(who + " closed its socket without exiting while " + doing +
                           "; it was stopped");
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
                           "operator), or at its lifetime CPU limit" + how + "; retry");
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
    const std::string what =
        "starting ('" + exe_shown + " media-worker' for '" + cfg.model_dir + "')";
    if (!wait_readable(p->sock, std::max(kStartTimeoutS, cfg.timeout_s))) {
      const pid_t pid = p->pid;
      p.reset();
      throw Unavailable("media sandbox: the worker (pid " + std::to_string(pid) +
                        ") did not report ready within " + std::to_string(kStartTimeoutS) + " s");
    }
    wire::Ready r;
    const long n = wire::receive_message(p->sock, &r, sizeof r, {}, nullptr);
    if (n <= 0) {
      Error e = lost_worker(p, what, false);
      throw Unavailable("media sandbox: cannot start a worker: " + std::string(e.what()) +
                        " (is '" + exe_shown + "' the mmrt binary?)");
    }
    p->ready =
        n == static_cast<long>(sizeof r) && r.magic == wire::kMagic && r.version == wire::kVersion;
    if (!p->ready) {
      p.reset();
      throw Unavailable("media sandbox: '" + exe_shown +
                        "' is not an mmrt media worker of this version");
    }
    if (r.status != wire::Status::kOk) {
      p.reset();
      throw Unavailable("media sandbox: the worker could not start: " + clean_message(r.message));
    }
    if (r.open_fds != wire::kWorkerFd + 1) {
      p.reset();
      throw Unavailable("media sandbox: the worker started with " + std::to_string(r.open_fds) +
                        " open descriptors (0-3 expected): something leaks descriptors into it");
    }
    p->cpu_after_reply = std::max(0.0, cpu_seconds_of(p->pid));  // start-up is not idle time
  }

  // Why the lane's worker must not take the next item ("" when it may).
  std::string unfit(const Process& p, const std::string& tenant, size_t new_shared) const {
    if (p.bound && p.tenant != tenant) return "tenant";
    if (!p.ready) return "";
    const double cpu = p.cpu_checked;
    if (cpu >= 0 && cpu - p.cpu_after_reply > kIdleCpuS) return "idle";
    if (cpu >= 0 && cpu + cfg.cpu_seconds + 2 > lifetime_cpu_seconds) return "old";
    if (p.shared_sent + static_cast<int64_t>(new_shared) > cfg.shared_bytes) return "buffers";
    return "";
  }

  // Shared-buffer capacity the item would add to `p` (new input and output buffers).
  size_t new_buffers(const Process& p, const Job& job, size_t out_need) const {
    size_t n = 0;
    if (!p.input || p.input->capacity < job.bytes.size()) n += input_capacity(job.bytes.size());
    bool fits = false;
    for (const auto& s : p.outputs) fits = fits || (!s->leased.load() && s->capacity >= out_need);
    if (!fits) n += round_up(out_need, 2 * kMiB);
    return n;
  }
  static size_t input_capacity(size_t bytes) { return round_up(std::max(bytes, 4 * kMiB), kMiB); }

  // The lane's worker for `job`: a worker of another tenant, one that computed while idle, one
  // near its lifetime CPU limit or its shared-buffer budget is replaced (by the spare).
  Process& acquire(Lane& L, const Job& job, size_t out_need) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!L.current) L.current = L.spare ? std::move(L.spare) : spawn();
      if (!L.current->ready) {
        try {
          await_ready(L.current);
        } catch (const Error&) {
          L.pid.store(0);
          throw;
        }
      }
      L.current->cpu_checked = cpu_seconds_of(L.current->pid);  // read once per item
      const std::string why = unfit(*L.current, job.tenant, new_buffers(*L.current, job, out_need));
      if (why.empty()) break;
      if (why == "tenant") switches.fetch_add(1);
      if (why == "idle") lost.fetch_add(1);
      if (why == "buffers" && !L.current->bound)
        throw ResourceExhausted(
            "the media item needs more shared buffer space than the "
            "sandbox gives one worker (" +
            std::to_string(cfg.shared_bytes >> 20) + " MiB)");
      L.current.reset();
    }
    if (!L.current) throw InternalError("media sandbox: no worker for the lane");
    L.current->bound = true;
    L.current->tenant = job.tenant;
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

  // Moves the worker's soft CPU limit to what it has used (as acquire() read it; it has been
  // idle since) plus one item's budget, below the hard limit acquire() keeps it away from.
  void arm_cpu_limit(const Process& p) const {
    const double used = p.cpu_checked;
    if (used < 0) return;
    const rlim_t soft = static_cast<rlim_t>(used) + 1 + static_cast<rlim_t>(cfg.cpu_seconds);
    const rlimit lim{std::min<rlim_t>(soft, static_cast<rlim_t>(lifetime_cpu_seconds)),
                     static_cast<rlim_t>(lifetime_cpu_seconds)};
    ::prlimit(p.pid, RLIMIT_CPU, &lim, nullptr);
  }

  size_t output_need(const Job& job) const {
    // Unknown from the header: as much as the worker could make within its limits. Pruned
    // tokens' kept list follows the features.
    const int64_t want =
        job.estimate.feature_bytes > 0
            ? job.estimate.feature_bytes +
                  (job.options.video_prune_threshold > 0 ? job.estimate.n_tokens * 4 : 0)
            : std::min(cfg.memory_bytes, cfg.shared_bytes);
    if (want > cfg.shared_bytes)
      throw ResourceExhausted("the media item's features would take " + std::to_string(want) +
                              " bytes, more than the sandbox's limit of " +
                              std::to_string(cfg.shared_bytes) + " per worker");
    return static_cast<size_t>(std::max<int64_t>(want, 1));
  }

  models::PreparedMedia exchange(Lane& L, const Job& job, size_t out_need) {
    Process& p = *L.current;
    const std::string doing = std::string("decoding a ") + models::modality_name(job.modality) +
                              " of " + std::to_string(job.bytes.size()) + " bytes";
    if (!p.input || p.input->capacity < job.bytes.size()) {
      auto fresh =
          make_slot(next_slot.fetch_add(1), input_capacity(job.bytes.size()), "mmrt-media-in");
      if (p.input && p.input->sent) p.forget.push_back(p.input->id);
      p.input = std::move(fresh);
    }
    if (!job.bytes.empty()) std::memcpy(p.input->map, job.bytes.data(), job.bytes.size());
    std::shared_ptr<Slot> out = output_slot(p, out_need);

    wire::Request q;
    if (::getrandom(&q.id, sizeof q.id, 0) != static_cast<ssize_t>(sizeof q.id))
      q.id = static_cast<uint64_t>(now_ns());  // (cannot happen for 8 bytes)
    q.modality = static_cast<uint32_t>(job.modality);
    q.hook = static_cast<uint32_t>(job.hook);
    q.options = job.options;
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
    if (wait_readable(p.sock, 0)) {  // it spoke unasked: a reply queued ahead, or it is gone
      L.current.reset();
      lost.fetch_add(1);
      throw InternalError("the media worker sent a message nobody asked for; it was stopped");
    }
    arm_cpu_limit(p);
    if (!wire::send_message(p.sock, &q, sizeof q, fds, true))
      throw lost_worker(L.current, doing, false);
    const int64_t shared = (q.input.has_fd ? static_cast<int64_t>(p.input->capacity) : 0) +
                           (q.output.has_fd ? static_cast<int64_t>(out->capacity) : 0);
    p.shared_sent += shared;
    p.input->sent = out->sent = true;
    if (!wait_readable(p.sock, cfg.timeout_s)) throw lost_worker(L.current, doing, true);
    wire::Reply r;
    const long n = wire::receive_message(p.sock, &r, sizeof r, {}, nullptr);
    if (n <= 0) throw lost_worker(L.current, doing, false);
    p.cpu_after_reply = std::max(0.0, cpu_seconds_of(p.pid));
    if (n != static_cast<long>(sizeof r) || r.magic != wire::kMagic || r.id != q.id) {
      L.current.reset();
      lost.fetch_add(1);
      throw InternalError("the media worker sent a malformed reply while " + doing +
                          "; it was stopped");
    }
    if (r.status != wire::Status::kOk) {
      failed.fetch_add(1);
      const ErrorCode code = r.code >= 0 && r.code <= static_cast<int32_t>(ErrorCode::kInternal)
                                 ? static_cast<ErrorCode>(r.code)
                                 : ErrorCode::kInternal;
      throw Error(code, clean_message(r.message));
    }
    try {
      return adopt_reply(r, out, job);
    } catch (const Error&) {
      L.current.reset();  // a worker that lies about its output is not used again
      lost.fetch_add(1);
      throw;
    }
  }

  // The features as a view of the output buffer, after checking every field of the reply (and
  // against the header estimate where that is exact).
  models::PreparedMedia adopt_reply(const wire::Reply& r, const std::shared_ptr<Slot>& out,
                                    const Job& job) {
    auto bad = [&](const std::string& what) {
      return InternalError("the media worker's reply " + what + " (decoding a " +
                           models::modality_name(job.modality) + " of " +
                           std::to_string(job.bytes.size()) + " bytes); it was stopped");
    };
    if (r.dtype > static_cast<uint32_t>(DType::kI64)) throw bad("has an unknown dtype");
    if (r.rank < 1 || r.rank > static_cast<uint32_t>(wire::kMaxRank) ||
        r.n_dims > static_cast<uint32_t>(wire::kMaxDims))
      throw bad("has an unexpected rank");
    const DType dt = static_cast<DType>(r.dtype);
    Shape shape;
    uint64_t bytes = dtype_size(dt);
    for (uint32_t i = 0; i < r.rank; ++i) {
      if (r.shape[i] < 0) throw bad("has a negative shape");
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(r.shape[i]), &bytes))
        throw bad("describes more data than there is");
      shape.push_back(r.shape[i]);
    }
    if (bytes != r.output_bytes || bytes > out->capacity || bytes % 4 != 0 ||
        r.n_kept > (out->capacity - bytes) / 4)
      throw bad("describes more data than there is");
    models::PreparedMedia m;
    for (uint32_t i = 0; i < r.n_dims; ++i) {
      if (r.dims[i] < 0) throw bad("has negative dims");
      m.dims.push_back(r.dims[i]);
    }
    if (r.n_tokens < 0 || r.encoder_cost < 0) throw bad("has negative counts");
    m.n_tokens = r.n_tokens;
    m.encoder_cost = r.encoder_cost;
    // Durations are only reported: a hostile worker's values cannot exceed what it was given.
    m.decode_ns = std::clamp<int64_t>(r.decode_ns, 0, int64_t{1} << 50);
    m.resample_ns = std::clamp<int64_t>(r.resample_ns, 0, int64_t{1} << 50);
    // A video slice's duration places its tokens in time: a finite, non-negative number of
    // seconds (a day at most), or the item is refused.
    if (!(r.slice_seconds >= 0 && r.slice_seconds <= 86400)) throw bad("has a bad slice duration");
    m.slice_seconds = r.slice_seconds;
    const models::MediaEstimate& e = job.estimate;
    if (e.exact &&
        (m.dims != e.dims || m.n_tokens != e.n_tokens || m.encoder_cost != e.encoder_cost ||
         (e.feature_bytes > 0 && bytes != static_cast<uint64_t>(e.feature_bytes))))
      throw bad("disagrees with what the file's header says");
    if (r.n_kept > 0) {
      // Pruned tokens: as many as the item's, increasing, within the header's (full) count.
      if (r.n_kept != static_cast<uint64_t>(m.n_tokens))
        throw bad("keeps a token count other than its own");
      const auto* kept =
          reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(out->map) + bytes);
      m.kept_tokens.assign(kept, kept + r.n_kept);
      int64_t prev = -1;
      for (int32_t q : m.kept_tokens) {
        if (q <= prev || q >= e.n_tokens) throw bad("keeps tokens out of order or range");
        prev = q;
      }
    }
    out->leased.store(true);
    std::shared_ptr<void> lease(out->map, [out](void*) { out->leased.store(false); });
    m.features = Tensor::view(out->map, dt, std::move(shape), std::move(lease));
    items.fetch_add(1);
    return m;
  }

  // A spare for the lane, started now; a failure is said by the next item that needs it.
  void start_spare(Lane& L) {
    if (L.spare) return;
    try {
      L.spare = spawn();
    } catch (const Error&) {
    }
  }
};

MediaSandbox::MediaSandbox(const MediaSandboxConfig& cfg, int lanes)
    : impl_(std::make_unique<Impl>(cfg)) {
  if (cfg.memory_bytes < (int64_t{16} << 20) || cfg.shared_bytes < (int64_t{16} << 20) ||
      cfg.cpu_seconds < 1 || !(cfg.timeout_s > 0))
    throw InvalidArgument(
        "media sandbox: memory and shared buffers must be >= 16 MiB, CPU time >= 1 s and the "
        "timeout > 0");
  for (int i = 0; i < std::max(1, lanes); ++i) {
    impl_->lanes.push_back(std::make_unique<Impl::Lane>());
    impl_->lanes.back()->current = impl_->spawn();
  }
  for (auto& L : impl_->lanes) {  // all start at once; then each must report ready
    impl_->await_ready(L->current);
    L->pid.store(L->current->pid);
  }
  for (auto& L : impl_->lanes) impl_->start_spare(*L);
}

MediaSandbox::~MediaSandbox() {
  for (auto& L : impl_->lanes) {
    std::lock_guard<std::mutex> lk(L->mu);
    L->current.reset();
    L->spare.reset();
  }
}

models::PreparedMedia MediaSandbox::preprocess(int lane, const Job& job) {
  if (lane < 0 || lane >= lanes())
    throw InvalidArgument("media sandbox: no lane " + std::to_string(lane));
  Impl::Lane& L = *impl_->lanes[static_cast<size_t>(lane)];
  std::lock_guard<std::mutex> lk(L.mu);
  const size_t out_need = impl_->output_need(job);
  models::PreparedMedia m;
  try {
    impl_->acquire(L, job, out_need);
    m = impl_->exchange(L, job, out_need);
  } catch (...) {
    if (!L.current) L.pid.store(0);
    impl_->start_spare(L);  // the replacement starts while the error goes back
    throw;
  }
  m.modality = job.modality;
  impl_->trim(*L.current);
  impl_->start_spare(L);  // off this item's path: after its decode
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
