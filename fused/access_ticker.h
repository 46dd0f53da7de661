// AccessTicker: the clock of a constant-rate mount (-o constant_rate=MS).
//
// One thread runs one job per tick: the oldest queued job (a real access a
// caller asked for), or the idle job (a dummy access) when none is queued.
// So the servers see one access per tick whatever the workload, and nothing
// else from the accesses the jobs make (the schedule below depends only on
// the period and on how long each tick's access takes, never on whether it
// was real).
//
// Schedule: tick k starts at max(start of tick k-1 + period, end of tick
// k-1). Consecutive starts are therefore never closer than the period; a
// tick longer than the period (a slow link, an eviction's wait) delays the
// next one instead of bunching later ones.
//
// A job returns whether it sent anything to the servers. One that did not
// (refused before its access: a bad id, a quarantined block) is followed by
// the idle job in the same tick, so no tick goes silent because of input.
// An idle job that sends nothing is retried a few times in its tick.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace s3oram::fs {

class AccessTicker {
 public:
  using Clock = std::chrono::steady_clock;
  // Returns true if it sent something to the servers.
  using Job = std::function<bool()>;

  // Starts the thread; the first tick is at once.
  AccessTicker(Clock::duration period, Job idle);
  ~AccessTicker();  // Stop()
  AccessTicker(const AccessTicker&) = delete;
  AccessTicker& operator=(const AccessTicker&) = delete;

  // Runs `job` on the ticker thread at the first tick no earlier job is
  // queued for, and returns once it ran: true. False, without running it,
  // once Stop was called.
  bool Run(const Job& job);
  // Runs no more ticks: the tick under way finishes, queued jobs are
  // refused (their Run returns false), the thread is joined. Idempotent.
  void Stop();

  struct Stats {
    std::uint64_t ticks = 0;         // ticks that ran a job (idle or queued)
    std::uint64_t idle_ticks = 0;    // ticks whose access was the idle job's
    std::uint64_t silent_ticks = 0;  // ticks in which nothing was sent at all
    // The shortest time between the starts of two consecutive ticks (the
    // period at least, by construction); zero before the second tick.
    Clock::duration min_gap{};
  };
  Stats stats() const;
  Clock::duration period() const { return period_; }

 private:
  struct Queued {
    const Job* job;
    bool done = false;
    bool ran = false;
  };
  void Loop();

  const Clock::duration period_;
  const Job idle_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // jobs queued, stop, a job done
  std::deque<Queued*> queue_;
  bool stopping_ = false;
  Stats stats_;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace s3oram::fs
