// Helpers the OramClient's translation units share (client.cpp,
// client_access.cpp); not part of the client's interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "oramcore/base/random.h"
#include "oramcore/base/time_into.h"
#include "oramcore/math/field.h"
#include "oramcore/protocol/fresh_shares.h"
#include "oramcore/state/client_state.h"

namespace s3oram::client_internal {

using field::Elem;

inline constexpr const char* kEvictKind = kPendingEvictKind;
inline constexpr const char* kRootKind = kPendingRootKind;

using s3oram::ShareVector;

using Clock = std::chrono::steady_clock;
using s3oram::TimeInto;

}  // namespace s3oram::client_internal
