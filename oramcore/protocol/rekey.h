// Rotating a filesystem's master key (`s3oram rekey`): after it, nothing on
// the servers or in the client state opens with the previous master key, so
// a copy of the state made before (with the passphrase of its day) opens
// nothing of today's data.
//
// Steps (docs/ARCHITECTURE.md, "Rotating the master key"):
//   1. The state is rewritten under a new random master key, wrapped under
//      the new passphrase at the next key epoch, and records the rotation as
//      under way with the previous key inside (state/master_key_switch.h).
//      The caller then uploads a state backup at that key epoch, so every
//      server drops the backups of the old one.
//   2. Re-seal (RunRekey): every block the filesystem holds is read through
//      an ordinary ORAM access, in id order, which writes it back sealed and
//      tagged under the new keys. Progress: the next block id, in the state.
//   3. Purge: ordinary accesses go on until every bucket of the tree has been
//      rewritten by an eviction whose round began after step 2 ended: the
//      2^H evictions after it cover every leaf's path (reverse-lexicographic
//      order), and each rewrites its buckets from live blocks and zeros, so
//      stale copies under the previous key are gone from every server's
//      share file. Progress: the eviction count to reach, in the state.
//   4. The rotation ends (the previous key leaves the state); the caller
//      uploads a backup again.
// Every step is made of ordinary accesses and commits, so a kill at any
// point is recovered by the next Open, and RunRekey goes on from the
// recorded progress. To the servers a rotation looks like any workload of
// that many accesses. While it is under way any client of the state (a
// mount, fsck) opens blocks under either key (OramClient::rekey).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "oramcore/base/status.h"
#include "oramcore/protocol/client.h"

namespace s3oram {

// What a rotation of this filesystem costs from where `client` stands (its
// state records a rotation or not), in ORAM accesses: one per block held to
// re-seal, then the purge's rounds.
struct RekeyCost {
  std::uint64_t reseal_accesses = 0;
  std::uint64_t purge_accesses = 0;  // at most
  std::uint64_t evictions = 0;       // at most, each one per evict_rate accesses
  std::uint64_t total_accesses() const { return reseal_accesses + purge_accesses; }
};
RekeyCost EstimateRekey(const OramClient& client);

struct RekeyOptions {
  // Phase "reseal" (done/total in blocks) and "purge" (in evictions).
  // Called after every chunk of accesses; may be empty.
  std::function<void(std::string_view phase, std::uint64_t done, std::uint64_t total)> progress;
};

struct RekeyReport {
  std::uint64_t resealed = 0;        // blocks read by this run
  std::uint64_t purge_accesses = 0;  // accesses of this run's purge
  std::uint64_t evictions = 0;       // committed during this run
};

// Steps 2 to 4 for the rotation `client`'s state records (FailedPrecondition
// if none), from its recorded progress. A block that does not authenticate
// stops it (Integrity, naming the block; `s3oram fsck` repairs, then run it
// again); so does any failure of the servers. Nothing is lost either way.
Result<RekeyReport> RunRekey(OramClient& client, const RekeyOptions& options = {});

}  // namespace s3oram
