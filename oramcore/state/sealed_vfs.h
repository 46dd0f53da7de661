// SealedVfs: a SQLite VFS that keeps a database, and its write-ahead log,
// encrypted and authenticated on disk.
//
// File layout (docs/ARCHITECTURE.md, "The state at rest"):
//   database file: a kSealedHeaderBytes header (the state header: format,
//     fs id, wrapped key, binding nonce; oramcore/state/state_header.h) that
//     this VFS writes only when it creates the file and reads only for the
//     two fields below, then the database's pages, each of kSealedPageBytes
//     on disk and in SQLite's view alike;
//   WAL (<db>-wal): SQLite's own 32-byte header and 24-byte frame headers in
//     clear (page numbers, salts, checksums; no content), each frame's page
//     sealed like a database page.
// A page is [ciphertext of its first kSealedPageBytes - kSealedReserveBytes
// bytes][24-byte random nonce][16-byte tag], XChaCha20-Poly1305. SQLite is
// told to keep the last kSealedReserveBytes of every page unused (the
// database header's "reserved bytes"), which is where nonce and tag live.
//
// Two formats, named by the u32 at kSealedFormatOffset of the header:
//  * bound (kSealedBoundFormat, every file made now): the file's key is a
//    keyed hash of the VFS's key and the header's binding nonce (random per
//    file), and a log page's associated data holds its offset and bytes 0-15
//    of its frame header (page number, commit size, salts). So a page moved
//    to another position, a frame relabelled, turned into a commit or carried
//    into another log generation, and a page or log of another file all fail;
//    a header relabelled as legacy opens nothing. (A frame SQLite writes with
//    zero salts, to fill them in at the commit, which it does in a
//    transaction larger than its page cache, is sealed under the log
//    header's salts, the ones it then gets.)
//  * legacy (kSealedLegacyFormat, files made before): the VFS's key itself,
//    the file kind and the page's position as associated data. Frame headers
//    are not authenticated; such a file is converted (state_file.h).
//
// Guarantees:
//  * No byte of database or log content reaches the disk in clear. Every
//    other kind of file SQLite might create (rollback journals, temporary
//    and transient files) is refused; connections use temp_store=MEMORY and
//    WAL mode, so none is needed (OpenSealedDatabase sets both).
//  * A page whose tag does not verify (tampering, a wrong key, a torn or
//    truncated page) is never returned: the read fails with
//    SQLITE_IOERR_DATA and last_error() names the file and the page.
//  * A write that would overwrite the reserved bytes (a database without
//    the reservation) is refused rather than corrupting data.
// Not covered: an older version of the same file (a byte copy taken
// earlier, or the log cut at an earlier commit) authenticates; the client
// compares the state's counters with the servers' to refuse that
// (protocol/client.h).
// The page size is fixed (kSealedPageBytes) so pages can be located before
// the database header, itself encrypted, has been read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"

struct sqlite3;
struct sqlite3_vfs;

namespace s3oram {

inline constexpr std::size_t kSealedHeaderBytes = 4096;
inline constexpr std::size_t kSealedPageBytes = 4096;
inline constexpr std::size_t kSealedReserveBytes = 24 + 16;  // nonce, tag
inline constexpr std::size_t kSealedKeyBytes = 32;
// Where in the header the format and the binding nonce are.
inline constexpr std::size_t kSealedFormatOffset = 8;  // u32, little-endian
inline constexpr std::size_t kSealedBindingOffset = 144;
inline constexpr std::size_t kSealedBindingBytes = 16;
inline constexpr std::uint32_t kSealedLegacyFormat = 1;
inline constexpr std::uint32_t kSealedBoundFormat = 2;

struct SealedVfsState;  // the registered sqlite3_vfs, key and messages

class SealedVfs {
 public:
  // Registers a VFS under a name of its own holding `key` (kSealedKeyBytes).
  // `new_file_header` (kSealedHeaderBytes, or empty) is written at the start
  // of a database file this VFS creates; without it, creating one is refused.
  static Result<std::unique_ptr<SealedVfs>> Create(Secret key,
                                                   std::vector<std::uint8_t> new_file_header = {});
  // Unregisters. Every connection opened through it must be closed first.
  ~SealedVfs();
  SealedVfs(const SealedVfs&) = delete;
  SealedVfs& operator=(const SealedVfs&) = delete;

  const std::string& name() const { return name_; }
  // The header written into files this VFS creates from now on.
  void SetNewFileHeader(std::vector<std::uint8_t> header);
  // The last authentication or layout failure ("" if none), for messages.
  std::string last_error() const;

 private:
  SealedVfs() = default;
  std::unique_ptr<SealedVfsState> impl_;
  std::string name_;
};

// Opens (or, with create, makes) a database through `vfs`: WAL mode,
// temp_store=MEMORY, the reserved bytes every sealed page needs, and a first
// read of the schema so that a wrong key or a damaged first page is reported
// here, as Corruption naming `path`, rather than at some later query.
Result<sqlite3*> OpenSealedDatabase(const std::string& path, SealedVfs& vfs, bool create,
                                    bool read_only = false);

}  // namespace s3oram
