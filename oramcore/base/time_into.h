// TimeInto: adds the wall-clock time of a scope to a nanosecond counter
// (the client's AccessTimings). The time is added once: at Stop() or at
// destruction, whichever comes first.
#pragma once

#include <chrono>
#include <cstdint>

namespace s3oram {

// Adds the time from construction to Stop() (or to destruction, whichever
// comes first) to a nanosecond counter; the time is added once.
class TimeInto {
 public:
  explicit TimeInto(std::uint64_t& sink) : sink_(&sink), start_(std::chrono::steady_clock::now()) {}
  ~TimeInto() { Stop(); }
  TimeInto(const TimeInto&) = delete;
  TimeInto& operator=(const TimeInto&) = delete;

  void Stop() {
    if (sink_ == nullptr) return;
    *sink_ += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now() - start_)
                                             .count());
    sink_ = nullptr;
  }

 private:
  std::uint64_t* sink_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace s3oram
