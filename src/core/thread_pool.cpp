#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"

namespace mmrt {

namespace {
thread_local bool t_inside_pool = false;
std::atomic<int> g_global_threads{0};
}  // namespace

struct ThreadPool::Impl {
  int n_threads = 1;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv_work;
  std::mutex job_mu;  // one parallel_for at a time per pool
  bool stop = false;
  uint64_t generation = 0;  // bumped per job

  // Current job.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0, chunk = 1, n_chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<int> active{0};
  std::exception_ptr error;
  std::mutex error_mu;

  void run_chunks() {
    for (;;) {
      int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n_chunks) break;
      int64_t b = c * chunk, e = std::min(n, b + chunk);
      try {
        (*fn)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(error_mu);
        if (!error) error = std::current_exception();
      }
      done.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  void worker_loop() {
    t_inside_pool = true;
    uint64_t seen = 0;
    for (;;) {
      // Spin briefly for the next job (step loops issue many short jobs back to back).
      bool got = false;
      for (int spin = 0; spin < 20000; ++spin) {
        if (__atomic_load_n(&generation, __ATOMIC_ACQUIRE) != seen ||
            __atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
          got = true;
          break;
        }
        __builtin_ia32_pause();
      }
      std::unique_lock<std::mutex> lk(mu);
      if (!got) cv_work.wait(lk, [&] { return stop || generation != seen; });
      if (stop) return;
      seen = generation;
      active.fetch_add(1, std::memory_order_acq_rel);
      lk.unlock();
      run_chunks();
      active.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
  if (n_threads < 1) throw InvalidArgument("thread pool needs at least 1 thread");
  impl_->n_threads = n_threads;
  for (int i = 1; i < n_threads; ++i) impl_->workers.emplace_back([this] { impl_->worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    __atomic_store_n(&impl_->stop, true, __ATOMIC_RELEASE);
    __atomic_add_fetch(&impl_->generation, 1, __ATOMIC_RELEASE);
  }
  impl_->cv_work.notify_all();
  for (auto& t : impl_->workers) t.join();
}

int ThreadPool::size() const {
  return impl_->n_threads;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn,
                              int chunks_per_thread) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Impl& s = *impl_;
  int64_t max_chunks = (n + grain - 1) / grain;
  if (s.n_threads == 1 || max_chunks == 1 || t_inside_pool) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> job_lk(s.job_mu);
  std::unique_lock<std::mutex> call_lk(s.mu);
  // A worker that woke late for the previous job may still be leaving run_chunks.
  while (s.active.load(std::memory_order_acquire) != 0) __builtin_ia32_pause();
  // Aim for a few chunks per thread for balance, never below the grain.
  int64_t target = std::min<int64_t>(
      max_chunks, static_cast<int64_t>(s.n_threads) * std::max(1, chunks_per_thread));
  s.fn = &fn;
  s.n = n;
  s.chunk = (n + target - 1) / target;
  s.n_chunks = (n + s.chunk - 1) / s.chunk;
  s.next.store(0);
  s.done.store(0);
  s.error = nullptr;
  __atomic_add_fetch(&s.generation, 1, __ATOMIC_RELEASE);
  call_lk.unlock();
  s.cv_work.notify_all();

  t_inside_pool = true;
  s.run_chunks();
  t_inside_pool = false;

  // Wait until all chunks are done and no worker is still inside run_chunks for this job.
  while (s.done.load(std::memory_order_acquire) < s.n_chunks) __builtin_ia32_pause();
  while (s.active.load(std::memory_order_acquire) != 0) __builtin_ia32_pause();
  if (s.error) std::rethrow_exception(s.error);
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    int n = g_global_threads.load();
    return n > 0 ? n : cpu_count();
  }());
  return pool;
}

void ThreadPool::set_global_threads(int n) {
  g_global_threads.store(n);
}

}  // namespace mmrt
