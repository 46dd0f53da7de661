// Catching up an excluded server from inside an open client (a mount's
// keep-alive beat: OramClient::CatchUpExcluded). Implemented in rebuild.cpp,
// whose data path it shares with `s3oram rebuild`'s catch-up (rebuild.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "oramcore/base/status.h"
#include "oramcore/protocol/client_session.h"
#include "oramcore/protocol/rebuild_report.h"

namespace s3oram {

// Catches up the excluded server `target` from inside an open client (a
// mount), under its lease and epoch, with its connections: the same data
// path as a rebuild's catch-up, sourced from the client's participants. The
// caller has settled every eviction and root write (the participants agree
// on the tree) and holds the client's lock. It does not readmit the server
// (OramClient::CatchUpExcluded does). Unavailable: the server still does not
// answer; FailedPrecondition (naming the fix): it holds no store of this
// filesystem to catch up, or missed more than half the tree; nothing was
// changed on any server then.
// `progress` (may be empty): bytes of missed buckets sent so far, and in all.
Result<RebuildReport> CatchUpExcludedServer(
    ClientSession& session, std::size_t target,
    const std::function<void(std::uint64_t done_bytes, std::uint64_t total_bytes)>& progress = {});

}  // namespace s3oram
