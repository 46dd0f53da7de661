#include "fused/access_ticker.h"

#include <optional>

namespace s3oram::fs {
namespace {

// An idle job that sent nothing (its random block was refused) is tried
// again this often in the same tick.
constexpr int kIdleAttempts = 4;

}  // namespace

AccessTicker::AccessTicker(Clock::duration period, Job idle)
    : period_(period), idle_(std::move(idle)), thread_([this] { Loop(); }) {}

AccessTicker::~AccessTicker() { Stop(); }

bool AccessTicker::Run(const Job& job) {
  Queued q{&job};
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return false;
  queue_.push_back(&q);
  cv_.wait(lock, [&q] { return q.done; });
  return q.ran;
}

void AccessTicker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

AccessTicker::Stats AccessTicker::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void AccessTicker::Loop() {
  std::optional<Clock::time_point> last_start;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (last_start) {
      // Wakes for Stop only: a job queued meanwhile waits for its tick.
      cv_.wait_until(lock, *last_start + period_, [this] { return stopping_; });
    }
    if (stopping_) break;
    const Clock::time_point start = Clock::now();
    if (last_start) {
      const Clock::duration gap = start - *last_start;
      if (stats_.ticks < 2 || gap < stats_.min_gap) stats_.min_gap = gap;
    }
    last_start = start;
    Queued* q = nullptr;
    if (!queue_.empty()) {
      q = queue_.front();
      queue_.pop_front();
    }
    lock.unlock();
    bool sent = false;
    bool idle = false;
    if (q) sent = (*q->job)();
    for (int attempt = 0; !sent && attempt < kIdleAttempts; ++attempt) {
      idle = true;
      sent = idle_();
    }
    lock.lock();
    ++stats_.ticks;
    if (idle && sent) ++stats_.idle_ticks;
    if (!sent) ++stats_.silent_ticks;
    if (q) {
      q->ran = true;
      q->done = true;
      cv_.notify_all();
    }
  }
  for (Queued* q : queue_) q->done = true;  // refused: ran stays false
  queue_.clear();
  cv_.notify_all();
}

}  // namespace s3oram::fs
