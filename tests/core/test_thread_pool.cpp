// The thread pool's scheduling niceness: its workers run at the niceness asked for (a server's
// compute below its I/O), the caller keeps its own, and 0 leaves every thread as it was.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "core/thread_pool.h"

namespace mmrt {
namespace {

int my_nice() {
  errno = 0;
  return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
}

// The niceness of the worker threads that ran a chunk of a parallel_for; the caller (checked
// for its own) holds its chunk until a worker has run one, so that workers take part however
// busy the machine is.
std::set<int> worker_nices(ThreadPool& pool, int caller_nice) {
  std::mutex mu;
  std::set<int> seen;
  std::atomic<bool> worker_ran{false};
  const std::thread::id me = std::this_thread::get_id();
  pool.parallel_for(64, 1, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() == me) {
      EXPECT_EQ(my_nice(), caller_nice);
      for (int i = 0; i < 2000 && !worker_ran; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    std::lock_guard<std::mutex> lk(mu);
    seen.insert(my_nice());
    worker_ran = true;
  });
  return seen;
}

TEST(ThreadPool, WorkersRunAtTheNicenessAskedFor) {
  const int base = my_nice();
  if (base >= 15) GTEST_SKIP() << "this process already runs at niceness " << base;
  {
    ThreadPool pool(3, base + 4);
    EXPECT_EQ(worker_nices(pool, base), (std::set<int>{base + 4}));
  }
  {
    ThreadPool pool(3);
    EXPECT_EQ(worker_nices(pool, base), (std::set<int>{base}));
  }
  // A thread lowers itself; 0 changes nothing.
  std::thread([&] {
    EXPECT_TRUE(set_thread_nice(0));
    EXPECT_EQ(my_nice(), base);
    EXPECT_TRUE(set_thread_nice(base + 2));
    EXPECT_EQ(my_nice(), base + 2);
  }).join();
  EXPECT_EQ(my_nice(), base) << "another thread's niceness changed this one's";
}

}  // namespace
}  // namespace mmrt
