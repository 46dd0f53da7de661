// The largest frame each socket of the protocol may carry, derived from a
// store's shape, so that a peer cannot make a server or a client buffer more
// than the protocol itself ever needs (ZMQ_MAXMSGSIZE on every socket;
// docs/SECURITY.md, transport).
//
// Guarantee: every message the client, the servers and the rebuild produce
// for a store of this shape with `parties` servers fits its direction's
// limit (MessageLimitsTest encodes the largest instance of each kind). The
// limits are upper bounds with a small allowance for headers and fixed
// fields, not exact sizes.
#pragma once

#include <cstdint>

#include "oramcore/wire/wire.h"

namespace s3oram::wire {

// The most share data one rebuild range moves (one participant's
// REBUILD_TERMS); a range is at least one bucket.
inline constexpr std::uint64_t kMaxRangeBytes = std::uint64_t{16} << 20;
// Every message without a vector of shares (STATUS, LEASE_*, INIT, ...).
inline constexpr std::uint64_t kSmallMessageBytes = std::uint64_t{64} << 10;

struct MessageLimits {
  std::uint64_t request_bytes = 0;  // client -> server (the clients' socket)
  std::uint64_t reply_bytes = 0;    // server -> client
  std::uint64_t peer_bytes = 0;     // server -> server (SMP_SHARES, REBUILD_TERMS)
};

// `parties`: the number of servers.
MessageLimits LimitsFor(const StoreShape& shape, std::uint32_t parties);

// Buckets one rebuild range holds for this shape: as many as fit in
// kMaxRangeBytes (or `wanted_bytes` if smaller), at least one.
std::uint64_t RebuildRangeBuckets(const StoreShape& shape, std::uint64_t wanted_bytes);

}  // namespace s3oram::wire
