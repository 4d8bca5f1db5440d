// A fixed-size pool of worker threads with a fork-join parallel_for used by the kernels.
// The calling thread takes part in the work, so a pool of N threads uses N+1 cores at most;
// ThreadPool(n) creates n-1 workers to occupy exactly n cores. There is no process-wide pool:
// whoever owns the compute (a Backend) creates one and passes it down.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace mmrt {

// Lowers the calling thread's scheduling priority to `nice` (1..19; Linux: per thread), so that
// latency-critical threads (a server's I/O) win the cores from it when both are runnable. false
// when the system refuses (the thread keeps its priority); 0 does nothing.
bool set_thread_nice(int nice);

class ThreadPool {
 public:
  // n_threads = total threads used by parallel_for, including the caller (>= 1). `nice` > 0
  // lowers the workers' scheduling priority (set_thread_nice); the caller's is its own.
  explicit ThreadPool(int n_threads, int nice = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;

  // Calls fn(begin, end) over [0, n) split into chunks of at least `grain` items, on all threads;
  // returns when every chunk is done. Exceptions from fn are rethrown (the first one) here.
  // Calls from inside a running fn execute serially (no nested parallelism). Threads take
  // chunks as they finish; `chunks_per_thread` (>= 1) chunks each (grain permitting) balance
  // uneven progress: memory-bound work where one core may run slower wants more.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                    int chunks_per_thread = 4);

  // As parallel_for, but every thread owns a contiguous share of the chunks and runs it front to
  // back; a thread done with its share takes chunks from the back of another's. Each thread then
  // walks one sequential range (one memory stream, what the hardware prefetcher follows) and
  // uneven progress is still balanced. For memory-streaming work such as matrix-vector products.
  void parallel_for_contiguous(int64_t n, int64_t grain,
                               const std::function<void(int64_t, int64_t)>& fn,
                               int chunks_per_thread = 16);

  // Which of the pool's threads is running: 1..size()-1 for its workers, 0 for any other
  // thread (the caller of parallel_for). Indexes per-thread scratch memory.
  int thread_index() const;

 private:
  void shut_down();  // stops and joins every worker
  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
           int chunks_per_thread, bool contiguous);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt
