#include "core/thread_pool.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"

namespace mmrt {

struct ThreadPool::Impl {
  int n_threads = 1;
  std::vector<std::thread> workers;
  std::vector<std::thread::id> worker_ids;  // [n_threads - 1], fixed after construction
  // The thread running the current job's share on the caller side (a call from inside the job
  // on this thread runs serially, as from any worker).
  std::atomic<std::thread::id> caller{};
  std::mutex mu;
  std::condition_variable cv_work;
  std::mutex job_mu;  // one parallel_for at a time per pool
  bool stop = false;
  uint64_t generation = 0;  // bumped per job

  // Current job.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0, chunk = 1, n_chunks = 0;
  std::atomic<int64_t> next{0};
  // Contiguous mode: per thread, its share of the chunks as (front << 32 | back), one cache line
  // each. The owner takes the front, other threads the back.
  bool contiguous = false;
  struct alignas(64) Share {
    std::atomic<uint64_t> fb{0};
  };
  std::unique_ptr<Share[]> shares;
  std::atomic<int64_t> done{0};
  std::atomic<int> active{0};
  std::exception_ptr error;
  std::mutex error_mu;

  // Contiguous mode: the next chunk for thread `me`, or -1 when every share is empty.
  int64_t take(int me) {
    for (int i = 0; i < n_threads; ++i) {
      const int t = (me + i) % n_threads;
      std::atomic<uint64_t>& fb = shares[t].fb;
      uint64_t v = fb.load(std::memory_order_acquire);
      for (;;) {
        const uint64_t f = v >> 32, b = v & 0xffffffffu;
        if (f >= b) break;
        const uint64_t nv = t == me ? ((f + 1) << 32 | b) : (f << 32 | (b - 1));
        if (fb.compare_exchange_weak(v, nv, std::memory_order_acq_rel))
          return static_cast<int64_t>(t == me ? f : b - 1);
      }
    }
    return -1;
  }

  void run_chunks(int me) {
    for (;;) {
      const int64_t c = contiguous ? take(me) : next.fetch_add(1, std::memory_order_relaxed);
      if (c < 0 || c >= n_chunks) break;
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

  // Whether the calling thread is running a chunk of this pool's current job.
  bool inside() const {
    const std::thread::id me = std::this_thread::get_id();
    if (caller.load(std::memory_order_acquire) == me) return true;
    for (const auto& id : worker_ids)
      if (id == me) return true;
    return false;
  }

  void worker_loop(int me) {
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
      run_chunks(me);
      active.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
};

bool set_thread_nice(int nice) {
  if (nice <= 0) return true;
  return ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)),
                       std::min(nice, 19)) == 0;
}

ThreadPool::ThreadPool(int n_threads, int nice) : impl_(std::make_unique<Impl>()) {
  if (n_threads < 1) throw InvalidArgument("thread pool needs at least 1 thread");
  impl_->n_threads = n_threads;
  impl_->shares = std::make_unique<Impl::Share[]>(static_cast<size_t>(n_threads));
  impl_->workers.reserve(static_cast<size_t>(n_threads - 1));
  impl_->worker_ids.reserve(static_cast<size_t>(n_threads - 1));
  // Workers wait for their ids to be recorded before looking at any job.
  std::unique_lock<std::mutex> lk(impl_->mu);
  for (int i = 1; i < n_threads; ++i) {
    try {
      impl_->workers.emplace_back([this, i, nice] {
        set_thread_nice(nice);
        { std::lock_guard<std::mutex> wait(impl_->mu); }
        impl_->worker_loop(i);
      });
    } catch (const std::system_error& e) {
      // Out of threads or memory for their stacks: stop the ones started, then say so.
      lk.unlock();
      shut_down();
      throw ResourceExhausted("cannot start compute thread " + std::to_string(i + 1) + " of " +
                              std::to_string(n_threads) + ": " + e.what() +
                              " (ask for fewer with --threads)");
    }
    impl_->worker_ids.push_back(impl_->workers.back().get_id());
  }
}

void ThreadPool::shut_down() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    __atomic_store_n(&impl_->stop, true, __ATOMIC_RELEASE);
    __atomic_add_fetch(&impl_->generation, 1, __ATOMIC_RELEASE);
  }
  impl_->cv_work.notify_all();
  for (auto& t : impl_->workers) t.join();
  impl_->workers.clear();
}

ThreadPool::~ThreadPool() {
  shut_down();
}

int ThreadPool::size() const {
  return impl_->n_threads;
}

int ThreadPool::thread_index() const {
  const std::thread::id me = std::this_thread::get_id();
  for (size_t i = 0; i < impl_->worker_ids.size(); ++i)
    if (impl_->worker_ids[i] == me) return static_cast<int>(i) + 1;
  return 0;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn,
                              int chunks_per_thread) {
  run(n, grain, fn, chunks_per_thread, false);
}

void ThreadPool::parallel_for_contiguous(int64_t n, int64_t grain,
                                         const std::function<void(int64_t, int64_t)>& fn,
                                         int chunks_per_thread) {
  run(n, grain, fn, chunks_per_thread, true);
}

void ThreadPool::run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                     int chunks_per_thread, bool contiguous) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Impl& s = *impl_;
  int64_t max_chunks = (n + grain - 1) / grain;
  if (s.n_threads == 1 || max_chunks == 1 || s.inside()) {
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
  s.contiguous = contiguous;
  if (contiguous)
    for (int t = 0; t < s.n_threads; ++t) {
      const uint64_t f = static_cast<uint64_t>(s.n_chunks * t / s.n_threads);
      const uint64_t b = static_cast<uint64_t>(s.n_chunks * (t + 1) / s.n_threads);
      s.shares[t].fb.store(f << 32 | b, std::memory_order_relaxed);
    }
  s.done.store(0);
  s.error = nullptr;
  __atomic_add_fetch(&s.generation, 1, __ATOMIC_RELEASE);
  call_lk.unlock();
  s.cv_work.notify_all();

  s.caller.store(std::this_thread::get_id(), std::memory_order_release);
  s.run_chunks(0);
  s.caller.store(std::thread::id{}, std::memory_order_release);

  // Wait until all chunks are done and no worker is still inside run_chunks for this job.
  while (s.done.load(std::memory_order_acquire) < s.n_chunks) __builtin_ia32_pause();
  while (s.active.load(std::memory_order_acquire) != 0) __builtin_ia32_pause();
  if (s.error) std::rethrow_exception(s.error);
}

}  // namespace mmrt
