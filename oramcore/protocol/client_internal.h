// Helpers the OramClient's translation units share (client.cpp,
// client_access.cpp); not part of the client's interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "oramcore/base/random.h"
#include "oramcore/math/field.h"
#include "oramcore/protocol/fresh_shares.h"
#include "oramcore/state/client_state.h"

namespace s3oram::client_internal {

using field::Elem;

inline constexpr const char* kEvictKind = kPendingEvictKind;
inline constexpr const char* kRootKind = kPendingRootKind;

using s3oram::ShareVector;

using Clock = std::chrono::steady_clock;

// Adds the time from construction to Stop() (or to destruction, whichever
// comes first) to a nanosecond counter; the time is added once.
class TimeInto {
 public:
  explicit TimeInto(std::uint64_t& sink) : sink_(&sink), start_(Clock::now()) {}
  ~TimeInto() { Stop(); }
  TimeInto(const TimeInto&) = delete;
  TimeInto& operator=(const TimeInto&) = delete;

  void Stop() {
    if (sink_ == nullptr) return;
    *sink_ += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count());
    sink_ = nullptr;
  }

 private:
  std::uint64_t* sink_;
  Clock::time_point start_;
};

}  // namespace s3oram::client_internal
