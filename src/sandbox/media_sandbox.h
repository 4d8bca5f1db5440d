// Media decoding in worker processes that can do nothing but compute (the server side).
//
// Each lane (one per media thread of the engine) owns a worker process, `mmrt media-worker`,
// started with posix_spawn from `worker_exe` with every descriptor but its socket closed. Before
// it reads any request the worker loads the checkpoint's preprocessing settings (no weights),
// limits its memory (RLIMIT_DATA, RLIMIT_AS) and CPU time (RLIMIT_CPU, moved per item by the
// server) and drops to a seccomp-bpf allow-list: no open, no write, no socket, no exec, no
// ptrace, no executable or shared anonymous memory. Bytes go in through an input buffer it shares
// with the server; it writes the features straight into an output buffer the server sized from the
// header estimate, so nothing is copied on the way out. A worker serves one tenant: a request of
// another tenant gets a fresh process (a spare is kept started), so a decoder exploit cannot see
// another tenant's media, and neither the model nor the server's memory is reachable from it. A
// crash, a forbidden system call, a limit hit or a timeout fails that request with an error saying
// which, and the lane goes on with a new worker.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/isa.h"
#include "models/model.h"

namespace mmrt::sandbox {

struct MediaSandboxConfig {
  bool enabled = false;                     // the engine's switch (--media-sandbox on|off)
  std::string worker_exe;                   // the mmrt binary; empty: this process's executable
  std::string model_dir;                    // the checkpoint whose preprocessing the workers apply
  Isa isa = Isa::kAvx512Bf16;               // highest kernel variant the workers use
  int64_t memory_bytes = int64_t{1} << 30;  // heap a worker may add after start (RLIMIT_DATA)
  int32_t cpu_seconds = 10;                 // CPU time per media item (RLIMIT_CPU)
  double timeout_s = 30;                    // wall time per media item
  size_t idle_output_bytes = size_t{512} << 20;  // output buffers kept per worker for reuse
  // Shared buffers one worker may ever be given (it can keep them mapped): a worker that would
  // pass it is replaced first; the largest item's features must fit in it.
  int64_t shared_bytes = int64_t{4} << 30;
  bool test_hooks = false;  // tests only: workers obey Job::hook
};

// What tests make a worker do instead of its job (honoured only with test_hooks): each is what
// a decoder exploit might try.
enum class TestHook : uint32_t {
  kNone,
  kForbiddenSyscall,  // calls socket(2)
  kExecMemory,        // maps executable memory
  kSharedMemory,      // maps shared anonymous memory (outside RLIMIT_DATA)
  kGrowsDownMemory,   // maps a MAP_GROWSDOWN region (outside RLIMIT_DATA)
  kCrash,             // executes an illegal instruction
  kSpin,              // loops forever
  kCloseSocket,       // closes its socket, then waits forever
  kForgedReply,       // answers with a reply of absurd sizes
  kSpinAfterReply,    // does the job, then computes while idle
};

struct Job {
  models::Modality modality = models::Modality::kImage;
  std::span<const uint8_t> bytes;  // the encoded file
  std::string tenant;              // a worker serves one tenant only
  // From the header (Processor::estimate): sizes the output buffer, and when it is exact the
  // worker's reply must match it field for field.
  models::MediaEstimate estimate;
  models::MediaOptions options;  // the request's settings for the item
  TestHook hook = TestHook::kNone;
};

struct SandboxStats {
  int64_t items = 0;   // media items preprocessed successfully
  int64_t failed = 0;  // items the worker reported an error for (bad media, limits)
  int64_t workers_started = 0;
  int64_t workers_lost = 0;     // crashed, killed, timed out or stopped by seccomp
  int64_t tenant_switches = 0;  // workers retired because another tenant's media came
};

class MediaSandbox {
 public:
  // Starts one worker per lane and waits until each is confined and ready. Unavailable, naming
  // the reason (the executable, seccomp, the checkpoint), when one cannot start.
  MediaSandbox(const MediaSandboxConfig& cfg, int lanes);
  ~MediaSandbox();  // closes the workers' sockets, reaps them (SIGKILL after a grace period)
  MediaSandbox(const MediaSandbox&) = delete;
  MediaSandbox& operator=(const MediaSandbox&) = delete;

  // Preprocesses one item on `lane` (one caller per lane at a time). The features are a view
  // of shared memory, kept for the lane's reuse once the last copy of the tensor is released.
  // Throws the worker's error for bad media, and for a lost worker: FormatError (it crashed),
  // ResourceExhausted (CPU or time limit), Internal (stopped by seccomp, hung up, or a reply
  // that fails a check), Unavailable (killed from outside, or no new worker could start).
  models::PreparedMedia preprocess(int lane, const Job& job);

  SandboxStats stats() const;
  // The process serving `lane` now (0 while none is started): for tests and diagnostics.
  pid_t worker_pid(int lane) const;
  int lanes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The worker's side, run by `mmrt media-worker` (tools/). Returns the process exit status.
// Only descriptors 0-3 may be open (3: the socket); stdin and stderr are /dev/null.
struct WorkerOptions {
  int fd = -1;  // the socket to the server
  std::string model_dir;
  Isa isa = Isa::kAvx512Bf16;
  int64_t memory_bytes = int64_t{1} << 30;
  int64_t shared_bytes = int64_t{4} << 30;  // address space for the shared buffers
  int32_t cpu_seconds = 10;                 // the first item's CPU time
  int32_t lifetime_cpu_seconds = 3600;      // the hard CPU limit: SIGKILL there
  bool test_hooks = false;
};
int run_media_worker(const WorkerOptions& opts);

}  // namespace mmrt::sandbox
