// Who holds a filesystem's single-writer lease, as the holder describes
// itself to the servers: machine id, boot id, host name, user, process id,
// the state file and what it is doing (e.g. the mount point), plus when.
//
// The description travels sealed under the filesystem's master key
// (BlockSealer with a block id no data block can have, version = the epoch),
// so servers store an opaque blob and learn nothing, while a second client
// with the passphrase can name the holder in its refusal. A client without
// the key (read-only `status`) sees only the epoch and the times.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "oramcore/crypto/block_seal.h"

namespace s3oram {

struct LeaseHolder {
  std::string machine_id;  // /etc/machine-id
  std::string boot_id;     // /proc/sys/kernel/random/boot_id
  std::string host;
  std::string user;
  std::int64_t pid = 0;
  std::string state_path;  // absolute
  std::string purpose;     // "mounted on /mnt/x", "fsck", ...
  std::int64_t since_unix = 0;
};

// This process, about to use `state_path` for `purpose`.
LeaseHolder CurrentLeaseHolder(const std::string& state_path, const std::string& purpose);

// One line for messages: "user@host pid 1234 (mounted on /mnt/x), since 2026-…".
std::string DescribeHolder(const LeaseHolder& h);

// True when `h` is certainly dead: it ran on this machine, on the same state
// file, and either the machine rebooted since or its process is gone. Only
// then may a lease be taken over without --force (the holder crashed).
bool HolderIsDeadLocalTwin(const LeaseHolder& h, const std::string& state_path);

// Id under which the description is sealed: beyond every data block id
// (capacities stop at 2^32 blocks).
inline constexpr std::uint64_t kLeaseHolderSealId = ~std::uint64_t{0};

std::string SealHolder(const BlockSealer& sealer, std::uint64_t epoch, const LeaseHolder& h);
// nullopt if it does not authenticate as epoch's description for this filesystem.
std::optional<LeaseHolder> OpenHolder(const BlockSealer& sealer, std::uint64_t epoch,
                                      const std::string& sealed);

}  // namespace s3oram
