// The client's own copies of what it wrote to the root in the last two rounds
// of accesses (background eviction, docs/ARCHITECTURE.md): while the servers
// compute the eviction of round r, round r + 1 overwrites the live root slot
// by slot, and a block the eviction is moving out of an overwritten slot is
// read from here instead (the access still retrieves a path, with an all-zero
// select, so the servers see the same access).
//
// Guarantees: entries are the packed sealed blocks exactly as shared (the
// seal binds them to block id and version; the slot is where the caller
// looks them up, not authenticated), so a stale, foreign or damaged entry
// fails authentication against the id and version the caller expects and is
// treated as missing; nothing here is trusted. The file is private (0600), lives
// beside the client state and survives a crash of the process; it is not
// synced, so a power loss may lose entries (never corrupt an answer).
// Not thread-safe (the client serialises accesses).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"

namespace s3oram {

class RootCopies {
 public:
  // Opens (creating, mode 0600) `path` sized for `entries` entries of
  // `elems_per_entry` elements. A file of another size is reset.
  static Result<std::unique_ptr<RootCopies>> Open(const std::string& path, std::size_t entries,
                                                  std::size_t elems_per_entry);
  ~RootCopies();
  RootCopies(const RootCopies&) = delete;
  RootCopies& operator=(const RootCopies&) = delete;

  // Where round `round`'s write of root slot `slot` is kept (two rounds of
  // `slots_per_round` slots alternate).
  static std::size_t Index(std::uint64_t round, std::uint32_t slot, std::size_t slots_per_round) {
    return static_cast<std::size_t>(round % 2) * slots_per_round + slot;
  }
  Status Put(std::size_t index, std::span<const field::Elem> elems);
  // The entry, or nullopt if it cannot be read or holds a value that is not a
  // field element (never written reads as zeros: the caller's authentication
  // rejects it).
  std::optional<std::vector<field::Elem>> Get(std::size_t index) const;
  const std::string& path() const { return path_; }

 private:
  RootCopies() = default;
  std::string path_;
  int fd_ = -1;
  std::size_t entries_ = 0;
  std::size_t elems_ = 0;
};

}  // namespace s3oram
