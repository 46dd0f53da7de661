// AccessTicker (fused/access_ticker.h): one job per tick, the idle job when
// none waits, queued jobs in order, ticks never closer than the period, a
// job that sent nothing followed by the idle job in its tick, Stop refusing
// what is queued. Every assertion is about order and counts or a lower
// bound on time (which a busy machine can only make larger), never about how
// fast anything ran.
#include "fused/access_ticker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace s3oram::fs {
namespace {

using namespace std::chrono_literals;

// What ran on the ticker thread, in order: "idle" or a job's name.
class Log {
 public:
  void Add(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(std::move(what));
  }
  std::vector<std::string> entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_;
  }
  std::size_t size() const { return entries().size(); }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> entries_;
};

void WaitFor(const std::function<bool()>& done) {
  // Bounded: a broken ticker fails the test instead of hanging it.
  for (int i = 0; i < 3000 && !done(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(done());
}

TEST(AccessTickerTest, IdleTicksRunTheIdleJobAtLeastAPeriodApart) {
  Log log;
  AccessTicker ticker(20ms, [&] {
    log.Add("idle");
    return true;
  });
  WaitFor([&] { return log.size() >= 10; });
  ticker.Stop();
  const auto s = ticker.stats();
  EXPECT_EQ(s.ticks, log.size());
  EXPECT_EQ(s.idle_ticks, s.ticks);
  EXPECT_EQ(s.silent_ticks, 0u);
  EXPECT_GE(s.min_gap, 20ms);
}

TEST(AccessTickerTest, QueuedJobsTakeTicksInOrderInsteadOfTheIdleJob) {
  Log log;
  std::atomic<bool> go{false};
  AccessTicker ticker(5ms, [&] {
    if (go) log.Add("idle");
    return true;
  });
  go = true;
  // Four callers queue one after the other; each Run returns once its job
  // ran, so the jobs ran in the order they were queued.
  for (int i = 0; i < 4; ++i) {
    const AccessTicker::Job job = [&log, i] {
      log.Add("job" + std::to_string(i));
      return true;
    };
    ASSERT_TRUE(ticker.Run(job));
  }
  ticker.Stop();
  std::vector<std::string> jobs;
  for (const auto& e : log.entries()) {
    if (e != "idle") jobs.push_back(e);
  }
  EXPECT_EQ(jobs, (std::vector<std::string>{"job0", "job1", "job2", "job3"}));
  const auto s = ticker.stats();
  // Each tick ran exactly one of them: the jobs took 4 ticks, the idle job
  // the others.
  EXPECT_EQ(s.ticks - s.idle_ticks, 4u);
  EXPECT_GE(s.min_gap, 5ms);
}

TEST(AccessTickerTest, AJobThatSentNothingIsFollowedByTheIdleJobInItsTick) {
  Log log;
  std::atomic<bool> go{false};
  AccessTicker ticker(5ms, [&] {
    if (go) log.Add("idle");
    return true;
  });
  const AccessTicker::Job refused = [&log] {
    log.Add("refused");
    return false;  // e.g. a read of a block beyond the capacity
  };
  go = true;
  ASSERT_TRUE(ticker.Run(refused));
  ticker.Stop();
  const auto entries = log.entries();
  auto it = std::find(entries.begin(), entries.end(), "refused");
  ASSERT_NE(it, entries.end());
  ASSERT_NE(it + 1, entries.end()) << "no idle job after the refused one";
  EXPECT_EQ(*(it + 1), "idle");
  EXPECT_EQ(ticker.stats().silent_ticks, 0u);
}

TEST(AccessTickerTest, AnIdleJobThatNeverSendsLeavesTheTickSilentAndCounted) {
  std::atomic<int> calls{0};
  AccessTicker ticker(5ms, [&] {
    ++calls;
    return false;  // the servers unreachable
  });
  WaitFor([&] { return ticker.stats().ticks >= 3; });
  ticker.Stop();
  const auto s = ticker.stats();
  EXPECT_EQ(s.silent_ticks, s.ticks);
  EXPECT_EQ(s.idle_ticks, 0u);
  // A bounded number of tries per tick, not a loop.
  EXPECT_LE(static_cast<std::uint64_t>(calls.load()), s.ticks * 4 + 4);
}

TEST(AccessTickerTest, StopRefusesJobsAndIsIdempotent) {
  AccessTicker ticker(5ms, [] { return true; });
  ticker.Stop();
  bool ran = false;
  const AccessTicker::Job job = [&ran] {
    ran = true;
    return true;
  };
  EXPECT_FALSE(ticker.Run(job));
  EXPECT_FALSE(ran);
  ticker.Stop();
}

// A job queued while the ticker is stopping is refused, never left waiting.
TEST(AccessTickerTest, AJobWaitingWhenTheTickerStopsIsRefused) {
  std::atomic<bool> in_slow{false};
  std::atomic<bool> release{false};
  AccessTicker ticker(5ms, [] { return true; });
  const AccessTicker::Job slow = [&] {
    in_slow = true;
    while (!release) std::this_thread::sleep_for(1ms);
    return true;
  };
  std::thread first([&] { EXPECT_TRUE(ticker.Run(slow)); });
  WaitFor([&] { return in_slow.load(); });
  std::atomic<int> second_result{-1};
  const AccessTicker::Job never = [] { return true; };
  std::thread second([&] { second_result = ticker.Run(never) ? 1 : 0; });
  std::this_thread::sleep_for(20ms);  // lets `second` queue (either way it must not hang)
  std::thread stopper([&] { ticker.Stop(); });
  release = true;
  first.join();
  stopper.join();
  second.join();
  // Queued before the stop, it either ran on the slow job's next tick (the
  // stop came after that tick began) or was refused; it never hangs.
  EXPECT_NE(second_result.load(), -1);
}

}  // namespace
}  // namespace s3oram::fs
