// A server's shares of the client-state backups (BACKUP_PUT / LIST / GET).
//
// The server stores, per backup generation, one opaque vector of field
// elements: its degree-t Shamir share of the client's encrypted, padded state
// blob (oramcore/protocol/state_backup.h). It cannot read anything from it but its
// length, which depends only on the padded size (a power of two).
//
// Files in the data directory, beside shares.bin (which this never touches):
//   backup-<generation>.bin   a complete generation: a 32-byte header
//                             (magic 'S3BK', version 2, generation, element
//                             count, key epoch (zero in files from before
//                             key epochs), all little-endian), the elements as u32
//                             LE, then one 16-byte BLAKE2b digest per record
//                             of 4096 elements. The name's generation must
//                             match the header's and the size must match the
//                             count, or the file is ignored (and reported in
//                             the log). Get checks every record it reads and
//                             answers Damaged if one changed on disk. Version
//                             1 files (no digests) are served unchecked.
//   backup-upload.tmp         the upload in progress, if any.
//
// Crash safety: an upload is appended to backup-upload.tmp in order (offset 0
// restarts it). Only the last chunk makes it a generation: header written,
// fdatasync, rename to backup-<generation>.bin, fsync of the directory, and
// only then are generations older than the two newest unlinked, and before
// them every generation of a lower key epoch (wire::BackupPutRequest: made
// under a passphrase since changed; Open repeats this). So a crash or
// a client that disappears mid-upload leaves the previous complete generations
// exactly as they were; a restarted server deletes the stale temp file.
//
// Idempotency: the transport resends a request whose reply was lost, so a
// chunk that was already stored (same generation, same range) is answered
// with success again instead of an error, as is the last chunk of a
// generation that is already complete.
//
// Not thread-safe (the request handler serialises requests).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/wire/wire.h"

namespace s3oram::serverd {

class BackupStore {
 public:
  // Generations kept: the newest and the one before it (the fallback if the
  // newest fails to authenticate on restore).
  static constexpr std::size_t kKeptGenerations = 2;

  // Scans `dir` (which must exist) for complete generations and removes a
  // stale upload. `sync` = false skips fdatasync/fsync (tests, benchmarks).
  static Result<std::unique_ptr<BackupStore>> Open(const std::string& dir, bool sync = true);
  ~BackupStore();
  BackupStore(const BackupStore&) = delete;
  BackupStore& operator=(const BackupStore&) = delete;

  // Stores one chunk (see wire::BackupPutRequest); returns the number of
  // elements of the upload stored so far. InvalidArgument for a malformed
  // chunk (sizes, ranges, a generation not newer than the newest complete
  // one), FailedPrecondition for one out of order or of a key epoch below
  // the newest complete generation's.
  Result<std::uint64_t> Put(std::uint64_t generation, std::uint64_t offset, std::uint64_t total,
                            bool last, std::span<const field::Elem> shares,
                            std::uint64_t key_epoch);
  // Complete generations, ascending.
  std::vector<wire::BackupInfo> List() const;
  // Up to `count` elements of `generation` from `offset` (fewer at the end);
  // *total receives the generation's size. NotFound for an unknown
  // generation; Damaged if a record it reads does not match its digest;
  // Corruption if the file is short or holds an element not below p.
  Result<std::vector<field::Elem>> Get(std::uint64_t generation, std::uint64_t offset,
                                       std::uint32_t count, std::uint64_t* total) const;
  // Deletes every generation and any upload (a new filesystem replaced the old).
  Status RemoveAll();

 private:
  BackupStore() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace s3oram::serverd
