// The single-writer lease a server keeps for its filesystem, on disk.
//
// File `lease` in the data directory: magic "S3LEASE1" (8), holder epoch u64,
// highest epoch ever granted u64, acquired (Unix ms) u64, holder length u32,
// holder bytes, BLAKE2b-128 of all
// that. Saved by writing `lease.tmp`, fdatasync, rename, fsync of the
// directory, so a crash leaves either the old record or the new one, never a
// mix; a record whose checksum fails is Corruption (the server then refuses to
// start rather than forget who holds the filesystem).
#pragma once

#include <cstdint>
#include <string>

#include "oramcore/base/status.h"

namespace s3oram::serverd {

struct LeaseRecord {
  std::uint64_t holder_epoch = 0;  // 0: free
  // The highest epoch ever granted here (kept when the lease is released):
  // a new holder's epoch must be above it, so epochs never repeat.
  std::uint64_t highest_epoch = 0;
  std::string holder;              // opaque (sealed by the client)
  std::uint64_t acquired_unix_ms = 0;
  bool held() const { return holder_epoch != 0; }
};

inline constexpr std::size_t kMaxLeaseHolderBytes = 4096;

// The record in dir, or a free lease if there is no file.
Result<LeaseRecord> LoadLease(const std::string& dir);
// Replaces the record atomically (durably unless sync is false).
Status SaveLease(const std::string& dir, const LeaseRecord& record, bool sync);

}  // namespace s3oram::serverd
