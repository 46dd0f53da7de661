// Rebuilding a lost server's share from the survivors (`s3oram rebuild`).
//
// Server K lost its disk and runs again with an empty data directory. Every
// stored sharing has degree t, so any t + 1 survivors S determine K's share:
//   s_K = sum_{j in S} L_j(x_K) s_j.
// Each survivor j sends c_j = L_j(x_K) s_j + r_j, where the r_j sum to zero
// (pairwise masks the survivors derive from their CURVE keys and a session
// nonce: serverd/rebuild_masks.h). This client forwards every c_j to K, which
// sums them. The client never sums: it and K each see masked terms only, and
// no single c_j says anything about s_j. Steps (docs/ARCHITECTURE.md,
// "Rebuilding a lost server"):
//   1. Check the passphrase, read the state, STATUS every server. If K holds
//      a live store of this filesystem, every server scrubs its share file
//      (protocol/scrub.h): K is replaced only if it has damaged slots (or with
//      force), and never from a damaged survivor. The survivors must serve this
//      filesystem with this shape and agree on applied_evictions — a survivor
//      one eviction behind with that eviction sealed gets its EVICT_COMMIT
//      first (COMMIT is only ever sent after every PREPARE succeeded).
//   2. A new epoch, durable in the state (fences any other client: a write
//      during the rebuild would make K's copy stale).
//   3. REBUILD_BEGIN to K; then, range by range, REBUILD_READ to each of S and
//      REBUILD_WRITE of their replies to K; then REBUILD_FINISH. A K that was
//      excluded (ClientStateStore::exclusions) and still holds its store is
//      caught up instead: BEGIN with catch_up, and only the ranges of the
//      buckets rewritten since it was excluded (BucketsRewrittenBy, from the
//      lower of its exclusion's since_eviction and its own count); K keeps
//      its other buckets, whose shares did not change.
//   4. Unless verify is off, open the filesystem normally (which finishes a
//      pending eviction) and read every live block through the ORAM: each
//      must authenticate.
// The client state changes only in its epoch and seq counters (both forward).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/protocol/catch_up.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/rebuild_report.h"
#include "oramcore/wire/wire.h"

namespace s3oram {

struct RebuildOptions {
  std::size_t target = 0;  // K, 0-based party index
  bool force = false;      // replace a live store on K
  bool verify = true;      // read every live block afterwards
  // An excluded K that still holds its store of this filesystem is caught
  // up (only the buckets it missed are sent) unless this is set, or the
  // buckets it missed are more than half the tree.
  bool full = false;
  ClientOptions client;
  // Upper bound on one REBUILD_READ reply (the ranges are whole buckets; at
  // least one bucket per range).
  std::size_t range_bytes = std::size_t{8} << 20;
  // Progress: phase "rebuild" (done/total in bytes of K's share file data) and
  // "verify" (blocks). Called often; may be empty.
  std::function<void(std::string_view phase, std::uint64_t done, std::uint64_t total)> progress;
  // Every message of the rebuild data path the client sees, for tests that
  // check what it learns: REBUILD_READ replies (with the survivor's index)
  // and REBUILD_WRITE requests as K receives them. The masked terms go from
  // the survivors to K directly; the client sees none.
  std::function<void(std::size_t server, const wire::Message& message)> observe;
};

Result<RebuildReport> RebuildServer(const std::string& state_path, const Secret& passphrase,
                                    const RebuildOptions& options);

}  // namespace s3oram
