// A mutex that admits its waiters in the order they arrived (a ticket lock
// on a condition variable).
//
// Why: the ORAM engine is held for a whole access, or a pipelined batch of
// up to eight (seconds each on an aged filesystem or a slow link). With
// std::mutex the thread that unlocks usually takes the lock again before a
// woken waiter runs, so a write-back thread issuing batch after batch could
// keep a reader of another file waiting for many of them. Here a waiter is
// served once the holders that arrived before it are done: a read waits for
// at most the batches already queued ahead of it.
//
// Meets the standard Lockable requirements (std::lock_guard, std::unique_lock).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

namespace s3oram::fs {

class FairMutex {
 public:
  FairMutex() = default;
  FairMutex(const FairMutex&) = delete;
  FairMutex& operator=(const FairMutex&) = delete;

  void lock() {
    std::unique_lock<std::mutex> guard(mu_);
    const std::uint64_t ticket = next_++;
    turn_.wait(guard, [&] { return serving_ == ticket; });
    held_since_ = std::chrono::steady_clock::now();
  }
  bool try_lock() {
    const std::lock_guard<std::mutex> guard(mu_);
    if (serving_ != next_) return false;  // held, or others wait
    ++next_;
    held_since_ = std::chrono::steady_clock::now();
    return true;
  }
  void unlock() {
    {
      const std::lock_guard<std::mutex> guard(mu_);
      ++serving_;
      held_since_.reset();
    }
    // Every waiter checks whether its ticket is up; one is.
    turn_.notify_all();
  }
  // Threads waiting in lock() now (for tests and diagnostics).
  std::uint64_t waiters() const {
    const std::lock_guard<std::mutex> guard(mu_);
    return next_ - serving_ - (next_ > serving_ ? 1 : 0);
  }
  // Since when the holder has held it; nullopt when free (diagnostics).
  std::optional<std::chrono::steady_clock::time_point> held_since() const {
    const std::lock_guard<std::mutex> guard(mu_);
    return held_since_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable turn_;
  std::uint64_t next_ = 0;     // the ticket the next arrival takes
  std::uint64_t serving_ = 0;  // the ticket that holds (or may take) the lock
  std::optional<std::chrono::steady_clock::time_point> held_since_;
};

}  // namespace s3oram::fs
