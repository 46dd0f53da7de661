// Helpers the OramClient's translation units share (client.cpp,
// client_access.cpp); not part of the client's interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "oramcore/base/random.h"
#include "oramcore/math/field.h"
#include "oramcore/math/random_elems.h"
#include "oramcore/math/shamir.h"
#include "oramcore/state/client_state.h"

namespace s3oram::client_internal {

using field::Elem;

inline constexpr const char* kEvictKind = kPendingEvictKind;
inline constexpr const char* kRootKind = kPendingRootKind;

// Shares `secret` (n elements) among `parties` with threshold t, drawing the
// polynomial coefficients from the CSPRNG. outs[i] receives party i's n shares.
inline void ShareVector(std::span<const Elem> secret, std::size_t t,
                        std::vector<std::vector<Elem>>& outs) {
  std::vector<Elem> coeffs(secret.size() * t);
  random::Elems(coeffs);
  std::vector<Elem*> ptrs;
  for (auto& o : outs) {
    o.resize(secret.size());
    ptrs.push_back(o.data());
  }
  shamir::Create(secret, t, coeffs, ptrs);
}

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
