// FairMutex (fused/fair_mutex.h): mutual exclusion under contention, and
// waiters admitted in the order they arrived.
#include "fused/fair_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace s3oram::fs {
namespace {

// Waits (bounded) until `m` has `n` waiters; false if that never happens.
bool AwaitWaiters(const FairMutex& m, std::uint64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (m.waiters() != n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(FairMutexTest, WaitersAreAdmittedInTheOrderTheyArrived) {
  FairMutex m;
  m.lock();
  std::mutex order_mu;
  std::vector<int> order;
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&, i] {
      const std::lock_guard<FairMutex> lock(m);
      const std::lock_guard<std::mutex> o(order_mu);
      order.push_back(i);
    });
    // Thread i has taken its ticket before thread i + 1 starts.
    ASSERT_TRUE(AwaitWaiters(m, static_cast<std::uint64_t>(i) + 1)) << "thread " << i;
  }
  EXPECT_FALSE(m.try_lock()) << "held";
  m.unlock();
  for (auto& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(m.waiters(), 0u);
  EXPECT_TRUE(m.try_lock()) << "free again";
  m.unlock();
}

TEST(FairMutexTest, ExcludesUnderContention) {
  FairMutex m;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::uint64_t count = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        const std::lock_guard<FairMutex> lock(m);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        ++count;
        inside.fetch_sub(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(count, 4u * 20000u);
}

}  // namespace
}  // namespace s3oram::fs
