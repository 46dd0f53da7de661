// RebuildReport: what a rebuild or a catch-up of one server did
// (oramcore/protocol/rebuild.h), for the command's summary, the mount's log
// and the tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace s3oram {

struct RebuildReport {
  std::vector<std::size_t> participants;  // S
  std::uint64_t buckets = 0;              // in the tree
  std::uint64_t buckets_written = 0;      // not holes on every participant
  // Masked terms S sent K straight over the peer channel (none through the
  // client).
  std::uint64_t bytes_relayed = 0;
  std::uint64_t evictions_committed = 0;  // laggard survivors brought forward
  std::uint64_t blocks_verified = 0;
  std::uint64_t backup_generation = 0;  // the state uploaded after verifying (0: not)
  // The root snapshot of an eviction under way was rebuilt too (root.bin).
  bool root_snapshot = false;
  // K was caught up rather than rebuilt: `buckets_missed` buckets (the root
  // and what the evictions from `caught_up_from` on rewrote) came from the
  // others, in ranges of `buckets_sent` (short gaps of kept buckets between
  // them included); K kept the rest.
  bool caught_up = false;
  std::uint64_t caught_up_from = 0;  // evictions K had applied
  std::uint64_t buckets_missed = 0;
  std::uint64_t buckets_sent = 0;  // every bucket for a full rebuild
  // A mount's catch-up copies while the accesses go on, then sends what
  // changed meanwhile (and the root) in a last pass they wait for
  // (CatchUpRun): the buckets of that pass, included in buckets_sent.
  std::uint64_t last_pass_buckets = 0;
};

}  // namespace s3oram
