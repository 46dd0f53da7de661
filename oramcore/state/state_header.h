// The clear header of a client state file: what must be read before the
// passphrase, and nothing else.
//
// The first kSealedHeaderBytes (4096) of the state file hold two copies, at
// offsets 0 and kStateHeaderCopyBytes, each (integers little-endian):
//   magic "S3ORSTAT" (8), format u32 (1 or 2), page size u32 = 4096,
//   generation u64 (raised by each passphrase change),
//   fs_id (16), key wrap: kdf ops u64, kdf mem u64, salt (16), nonce (24),
//   sealed (48),
//   format 2 only: binding nonce (16), random per file,
//   BLAKE2b-256 of the fields above (32),
//   zeros to the end of the copy.
// The format and the binding nonce are where the sealed VFS reads them
// (sealed_vfs.h): format 2 files are sealed under a key of their own and
// authenticate their log's frame headers; format 1 files (made before) are
// converted (state_file.h, ConvertToCurrentFormat).
// The key wrap authenticates the fs id and KDF parameters (key_wrap.h); the
// binding nonce and the format select the page key, so changing either opens
// nothing. The other unauthenticated fields (magic, page size, generation)
// are checked exactly; the checksum catches accidental damage before any
// passphrase is asked for.
//
// Two copies make a passphrase change crash-safe without a journal: it
// writes copy 1, syncs, writes copy 0, syncs. A reader that finds two valid
// copies of different generations (a change cut short) tries the newer one
// first; anything else that is not two identical valid copies is damage,
// refused with a message naming the copy and the byte range.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "oramcore/base/ids.h"
#include "oramcore/base/status.h"
#include "oramcore/crypto/key_wrap.h"

namespace s3oram {

// The format new files get; kStateLegacyFormat files are still read.
inline constexpr std::uint32_t kStateFormat = 2;
inline constexpr std::uint32_t kStateLegacyFormat = 1;
inline constexpr std::size_t kStateHeaderCopyBytes = 2048;
inline constexpr std::size_t kStateHeaderUsedBytes = 192;  // format 2 fields and checksum, per copy

struct StateHeader {
  std::uint32_t format = kStateFormat;
  FsId fs_id{};
  std::uint64_t generation = 0;
  KeyWrap wrap;
  std::array<std::uint8_t, 16> binding{};  // format 2
  bool operator==(const StateHeader&) const = default;
};

// One copy, kStateHeaderCopyBytes long.
std::vector<std::uint8_t> EncodeStateHeaderCopy(const StateHeader& h);
// The whole header region (kSealedHeaderBytes): two identical copies.
std::vector<std::uint8_t> EncodeStateHeader(const StateHeader& h);

// The copies worth trying, newest generation first: one if both copies are
// identical, two if a passphrase change was cut short. Corruption (naming
// `what`, the copy and the damage) otherwise.
Result<std::vector<StateHeader>> ParseStateHeader(std::span<const std::uint8_t> region,
                                                  const std::string& what);

// True if `prefix` starts like a plain SQLite database: a state file from
// before the state was encrypted (s3oram upgrade-state converts it).
bool LooksLikePlainSqlite(std::span<const std::uint8_t> prefix);

}  // namespace s3oram
