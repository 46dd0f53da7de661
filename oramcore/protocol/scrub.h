// Scrubbing: every server checks every slot of its share file against the
// digest stored with it (serverd/share_store.h, SCRUB in wire.h), range by
// range, so that a damaged disk is found before a read needs it. Used by
// `s3oram scrub` (and its timer) and by `s3oram rebuild` before it replaces a
// live store (a damaged survivor must not be a rebuild's source, and an
// honest server must not be rebuilt from a damaged one).
//
// What it guarantees: a slot changed on a server's disk in a way that does not
// depend on that server's digest key is reported with its bucket and slot. It
// does not detect a server that lies (it can answer SCRUB as it likes).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/tree/params.h"
#include "oramcore/wire/wire.h"

namespace s3oram {

struct DamagedSlot {
  std::uint64_t bucket = 0;  // 1-based, or wire::kRootSnapshotBucket
  std::uint32_t slot = 0;
};

struct ScrubFindings {
  std::uint64_t buckets = 0;        // checked
  std::uint64_t damaged = 0;        // slots found damaged
  std::vector<DamagedSlot> listed;  // the first kScrubListed of them
};
inline constexpr std::size_t kScrubListed = 32;

// One SCRUB exchange with one server: buckets [first, first + count).
using ScrubAsk = std::function<Result<wire::ScrubReply>(std::uint64_t first, std::uint32_t count)>;

// Scrubs one server's whole share file for a tree of parameters p, in ranges
// of at most wire::kMaxScrubBytes, then the root snapshot of a pending
// eviction if it holds one (wire::kRootSnapshotBucket). progress(done, total) counts buckets; may
// be empty.
Result<ScrubFindings> ScrubWholeStore(
    const OramParams& p, const ScrubAsk& ask,
    const std::function<void(std::uint64_t, std::uint64_t)>& progress);

// "bucket 41 slot 1, bucket 97 slot 0 and 3 more" for a report line.
std::string DescribeDamage(const ScrubFindings& f);

// One PARITY exchange (wire.h) with every server checked, the same request
// to each: the replies in the order of ScrubAndCompare's `servers`.
using ParityAsk = std::function<Result<std::vector<wire::ParityReply>>(
    std::uint64_t first, std::uint32_t count, const wire::ParitySeed& seed)>;

struct ConsistencyFindings {
  // Each server's own digest check, by party index (a server not checked:
  // zero buckets).
  std::vector<ScrubFindings> servers;
  // Slots no server flags as damaged whose shares are not one sharing
  // (oramcore/protocol/consistency.h): not attributable to a server.
  ScrubFindings inconsistent;
  // Whether every server held a root snapshot of a pending eviction, which
  // was then compared too (its slots are listed under wire::kRootSnapshotBucket).
  bool root_snapshot_checked = false;
};

// Scrubs the whole share file of every server of `servers` (party indices,
// ascending: all of them, or the participants when one is excluded) as
// ScrubWholeStore does and, range by range with a fresh public seed, checks
// their sharings against each other with their code's parity checks
// (shamir::ParityChecks over their points); then the same for the root
// snapshot of a pending eviction, when every one of them holds one.
// progress counts buckets, as ScrubWholeStore.
Result<ConsistencyFindings> ScrubAndCompare(
    const OramParams& p, const std::vector<std::vector<field::Elem>>& parity_rows,
    const std::vector<std::size_t>& servers, const ParityAsk& ask,
    const std::function<void(std::uint64_t, std::uint64_t)>& progress);

}  // namespace s3oram
