// Internal to src/sandbox/: a worker process as the server holds it (its socket and the
// buffers it shares with the server), and how it is started and stopped.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/isa.h"

namespace mmrt::sandbox {

// A buffer shared with a worker: a memfd mapped here once, reused from request to request.
struct Slot {
  uint32_t id = 0;
  int fd = -1;
  void* map = nullptr;
  size_t capacity = 0;
  bool sent = false;                // the worker has it mapped
  std::atomic<bool> leased{false};  // a features tensor still views it
  ~Slot();
};

// A memfd of `capacity` bytes mapped read-write; ResourceExhausted when that fails.
std::shared_ptr<Slot> make_slot(uint32_t id, size_t capacity, const char* name);

// SIGKILL (a worker holds nothing worth a graceful exit), then reap. Returns the wait status.
int kill_and_reap(pid_t pid);

// One worker process and the buffers it holds; destroying it stops the process.
struct Process {
  pid_t pid = 0;
  int sock = -1;
  bool ready = false;
  bool bound = false;  // has served a tenant (then it serves only that one)
  std::string tenant;
  std::shared_ptr<Slot> input;
  std::vector<std::shared_ptr<Slot>> outputs;
  std::vector<uint32_t> forget;  // buffers to tell the worker to unmap
  int64_t shared_sent = 0;       // capacity of every buffer it was ever given
  double cpu_after_reply = 0;    // its CPU time when it last answered
  double cpu_checked = -1;       // its CPU time when it was last chosen for an item
  Process() = default;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() { stop(); }
  int stop();  // closes the socket, kills and reaps; returns the wait status
};

// What a worker is started with (`mmrt media-worker` options).
struct SpawnSpec {
  std::string exe;        // what is executed
  std::string exe_shown;  // its path, for messages
  std::string model_dir;
  Isa isa = Isa::kAvx512Bf16;
  int64_t memory_bytes = 0, shared_bytes = 0;
  int32_t cpu_seconds = 0, lifetime_cpu_seconds = 0;
  bool test_hooks = false;
};

// Starts a worker: its socket on descriptor 3, /dev/null on 0-2, nothing else open, its own
// process group, default signals, a minimal environment. Unavailable when it cannot start.
std::unique_ptr<Process> spawn_worker(const SpawnSpec& spec);

// CPU seconds a process has used (-1 when unknown).
double cpu_seconds_of(pid_t pid);
// Waits up to `seconds` for `fd` to be readable (or hung up).
bool wait_readable(int fd, double seconds);

}  // namespace mmrt::sandbox
