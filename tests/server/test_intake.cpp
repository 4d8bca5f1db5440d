// The intake lanes: a huge body never delays an ordinary one, and the bytes they hold are bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "server/intake.h"

namespace mmrt::server {
namespace {

using namespace std::chrono_literals;

TEST(Intake, AHugeBodyDoesNotDelayAnOrdinaryOne) {
  Intake in({.large_bytes = 1 << 20, .max_queued_bytes = 64 << 20});
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> large_done{false};
  ASSERT_TRUE(in.submit(8 << 20, [&, gate] {
    gate.wait();  // a 62 MB body that takes seconds to parse
    large_done = true;
  }));
  std::promise<void> small_ran;
  ASSERT_TRUE(in.submit(64 << 10, [&] { small_ran.set_value(); }));
  EXPECT_EQ(small_ran.get_future().wait_for(5s), std::future_status::ready)
      << "the ordinary body waited for the huge one";
  EXPECT_FALSE(large_done);
  release.set_value();
  for (int i = 0; i < 500 && in.queued_bytes() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(large_done);
  EXPECT_EQ(in.queued_bytes(), 0u);
}

TEST(Intake, QueuedBytesAreBounded) {
  Intake in({.large_bytes = 1 << 20, .max_queued_bytes = 4 << 20});
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  ASSERT_TRUE(in.submit(3 << 20, [gate] { gate.wait(); }));
  EXPECT_EQ(in.queued_bytes(), size_t{3} << 20);
  EXPECT_FALSE(in.submit(2 << 20, [] { ADD_FAILURE() << "ran past the bound"; }));
  EXPECT_TRUE(in.submit(512 << 10, [] {}));  // fits
  std::promise<void> zero;
  EXPECT_TRUE(in.submit(0, [&] { zero.set_value(); })) << "small work (a trace file) always fits";
  EXPECT_EQ(zero.get_future().wait_for(5s), std::future_status::ready);
  release.set_value();
  for (int i = 0; i < 500 && in.queued_bytes() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(in.queued_bytes(), 0u);
  std::promise<void> ran;
  EXPECT_TRUE(in.submit(2 << 20, [&] { ran.set_value(); }));
  EXPECT_EQ(ran.get_future().wait_for(5s), std::future_status::ready);
  in.stop();
  EXPECT_FALSE(in.submit(0, [] {})) << "stopped";
}

}  // namespace
}  // namespace mmrt::server
