#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <thread>

#include "core/tensor.h"
#include "core/thread_pool.h"

using namespace mmrt;

TEST(Tensor, EmptyIsAlignedAndSized) {
  Tensor t = Tensor::empty(DType::kBF16, {3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  EXPECT_EQ(t.nbytes(), 30u);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{5, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.describe(), "bf16[3, 5]");
}

TEST(Tensor, TypedAccessChecksDtype) {
  Tensor t = Tensor::zeros(DType::kF32, {4});
  EXPECT_NO_THROW(t.data<float>());
  EXPECT_THROW(t.data<int32_t>(), InvalidArgument);
}

TEST(Tensor, SliceSelectReshapeShareMemory) {
  Tensor t = Tensor::empty(DType::kI32, {4, 3});
  std::iota(t.data<int32_t>(), t.data<int32_t>() + 12, 0);
  Tensor row = t.select(2);
  EXPECT_EQ(row.shape(), (Shape{3}));
  EXPECT_EQ(row.data<int32_t>()[0], 6);
  Tensor col = t.slice(1, 1, 2);  // [4, 1], strided
  EXPECT_EQ(col.shape(), (Shape{4, 1}));
  Tensor c = col.contiguous();
  EXPECT_EQ(c.data<int32_t>()[3], 10);
  Tensor r = t.reshape({2, -1});
  EXPECT_EQ(r.shape(), (Shape{2, 6}));
  EXPECT_EQ(r.raw(), t.raw());
  EXPECT_THROW(t.reshape({5, 2}), InvalidArgument);
  EXPECT_THROW(t.slice(0, 3, 5), InvalidArgument);
  // Non-contiguous column view: a strided clone gathers the right elements.
  Tensor cols = t.slice(1, 0, 2);
  EXPECT_FALSE(cols.is_contiguous());
  Tensor cl = cols.clone();
  EXPECT_EQ(cl.data<int32_t>()[2], 3);
  EXPECT_EQ(cl.data<int32_t>()[3], 4);
}

TEST(Tensor, ViewKeepsOwnerAlive) {
  auto buf = aligned_alloc_shared(16, true);
  std::weak_ptr<void> w = buf;
  Tensor v = Tensor::view(buf.get(), DType::kF32, {4}, buf);
  buf.reset();
  EXPECT_FALSE(w.expired());
  v = Tensor();
  EXPECT_TRUE(w.expired());
}

TEST(Tensor, ToConvertsFloats) {
  Tensor t = Tensor::empty(DType::kF32, {3});
  t.data<float>()[0] = 1.0f;
  t.data<float>()[1] = -2.5f;
  t.data<float>()[2] = 65504.f;
  Tensor h = t.to(DType::kF16);
  EXPECT_EQ(h.data<f16_t>()[0].bits, 0x3c00);
  Tensor b = h.to(DType::kBF16).to(DType::kF32);
  EXPECT_EQ(b.data<float>()[1], -2.5f);
  EXPECT_THROW(t.to(DType::kI32), Unimplemented);
}

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 7, 100, 12345}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, 3, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, ContiguousSharesCoverRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 7, 100, 12345})
    for (int cpt : {1, 4, 16}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for_contiguous(
          n, 3,
          [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          },
          cpt);
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "n " << n << " chunks/thread " << cpt;
    }
  // One thread slowed down (a busy core): the others take the rest of its share from the back,
  // so it runs only the chunk it was stuck in.
  std::vector<std::atomic<int>> hits(300);
  std::atomic<int> slow_claimed{0};
  std::atomic<int> slow_chunks{0};
  std::atomic<std::thread::id> slow_thread{};
  pool.parallel_for_contiguous(
      300, 1,
      [&](int64_t b, int64_t e) {
        if (slow_claimed.exchange(1) == 0) {
          slow_thread.store(std::this_thread::get_id());
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        if (std::this_thread::get_id() == slow_thread.load()) ++slow_chunks;
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      },
      16);
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_EQ(slow_chunks.load(), 1) << "the slowed thread's share was not taken over";
  // Also from inside a job (runs serially) and with a throwing body.
  EXPECT_THROW(pool.parallel_for_contiguous(100, 1,
                                            [](int64_t b, int64_t) {
                                              if (b >= 50) throw InvalidArgument("boom");
                                            }),
               InvalidArgument);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(4, 1, [&](int64_t, int64_t) {
    pool.parallel_for_contiguous(10, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  });
  EXPECT_EQ(sum.load(), 40);
}

TEST(ThreadPool, RethrowsAndStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](int64_t b, int64_t) {
                                   if (b >= 50) throw InvalidArgument("boom");
                                 }),
               InvalidArgument);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(1000, 10, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 1000);
}

TEST(ThreadPool, ManyShortJobsFromTwoCallers) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  auto work = [&] {
    for (int j = 0; j < 500; ++j)
      pool.parallel_for(64, 1, [&](int64_t b, int64_t e) { total += e - b; });
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 500 * 64);
}
