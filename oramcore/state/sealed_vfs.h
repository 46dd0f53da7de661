// SealedVfs: a SQLite VFS that keeps a database, and its write-ahead log,
// encrypted and authenticated on disk.
//
// File layout (docs/ARCHITECTURE.md, "The state at rest"):
//   database file: a kSealedHeaderBytes header that this VFS never reads or
//     writes after creating it (the state header: format, fs id, wrapped key;
//     oramcore/state/state_header.h), then the database's pages, each of
//     kSealedPageBytes on disk and in SQLite's view alike;
//   WAL (<db>-wal): SQLite's own 32-byte header and 24-byte frame headers in
//     clear (page numbers, salts, checksums; no content), each frame's page
//     sealed like a database page.
// A page is [ciphertext of its first kSealedPageBytes - kSealedReserveBytes
// bytes][24-byte random nonce][16-byte tag], XChaCha20-Poly1305 under the
// VFS's key with the file kind and the page's position as associated data,
// so a page copied to another position or another file fails too. SQLite is
// told to keep the last kSealedReserveBytes of every page unused (the
// database header's "reserved bytes"), which is where nonce and tag live.
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
