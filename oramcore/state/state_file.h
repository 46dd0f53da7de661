// UnlockedState: a client state file whose key is known, and the only way to
// reach the database inside it.
//
// The state key is a subkey of the filesystem's master key (crypto_kdf,
// context "s3ostate"), so the state opens exactly when the passphrase
// unwraps the master key, and changing the passphrase re-encrypts nothing.
// Every connection to the database goes through the SealedVfs this object
// owns (sealed_vfs.h); it must outlive them.
#pragma once

#include <memory>
#include <string>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/state/sealed_vfs.h"
#include "oramcore/state/state_header.h"

struct sqlite3;

namespace s3oram {

// Reads the clear header of the state file at `path`: what can be known
// without the passphrase (fs id, KDF cost, and whether a passphrase change
// was cut short). FailedPrecondition naming `s3oram upgrade-state` for a
// state from before encryption; Corruption for damage; NotFound if absent.
Result<std::vector<StateHeader>> ReadStateHeader(const std::string& path);

class UnlockedState {
 public:
  // Unwraps the master key with `passphrase` (PermissionDenied if it does
  // not), trying the newest header copy first, and makes the two copies
  // identical again if a passphrase change was cut short.
  static Result<std::unique_ptr<UnlockedState>> Unlock(const std::string& path,
                                                       const Secret& passphrase);
  // The same with the master key already in hand (restore, attach).
  static Result<std::unique_ptr<UnlockedState>> UnlockWithMaster(const std::string& path,
                                                                 Secret master);
  // Makes a new state file (mode 0600; AlreadyExists if `path` exists) with
  // `header`, holding an empty database that opens with `master`.
  static Result<std::unique_ptr<UnlockedState>> Create(const std::string& path,
                                                       const StateHeader& header, Secret master);
  ~UnlockedState();
  UnlockedState(const UnlockedState&) = delete;
  UnlockedState& operator=(const UnlockedState&) = delete;

  const std::string& path() const { return path_; }
  const StateHeader& header() const { return header_; }
  const Secret& master() const { return master_; }
  SealedVfs& vfs() { return *vfs_; }

  // A new connection to the database (WAL, temp_store=MEMORY); the caller
  // closes it, before this object goes.
  Result<sqlite3*> OpenDatabase(bool read_only = false);

  // A passphrase change: `wrap` (of the same master key) under generation
  // + 1, written to copy 1, synced, then to copy 0, synced.
  Status ReplaceKeyWrap(const KeyWrap& wrap);

  // Whether the file is of the current format (kStateFormat): sealed under a
  // key of its own, its log's frame headers authenticated.
  bool current_format() const { return header_.format == kStateFormat; }
  // Rewrites the state into a new file of the current format with a fresh
  // binding nonce, built beside it (`<path>.converting`), synced and renamed
  // over it: a kill at any point leaves the old file or the new one, each
  // whole. No connection to the database may be open. If `lock_fd` points
  // at a descriptor holding the caller's flock on the state, the new file
  // is locked through a new descriptor before the rename and *lock_fd is
  // replaced by it (the old one closed), so the lock never lapses.
  Status Rebind(int* lock_fd = nullptr);

 private:
  UnlockedState() = default;
  std::string path_;
  StateHeader header_;
  Secret master_;
  std::unique_ptr<SealedVfs> vfs_;
};

// Puts `tmp`, a complete and synced state file, in the place of `path` by
// one rename, and syncs the directory: a kill leaves one file or the other
// at `path`, each whole. If `lock_fd` points at a descriptor holding the
// caller's flock on `path`, `tmp` is locked first and *lock_fd replaced, so
// the lock never lapses. FailedPrecondition if `path` still has a log
// (another process has it open); nothing is replaced then. The fault points
// `before_rename` and `after_rename` are passed on each side of the rename.
// Returns tmp's header. The caller removes `tmp` after a failure.
Result<StateHeader> RenameStateOver(const std::string& tmp, const std::string& path, int* lock_fd,
                                    const char* before_rename, const char* after_rename);

// A consistent copy of `from`'s database (SQLite's backup API, inside one
// read transaction) in the file `to`, which must be absent or empty: a file
// of the current format under `header` with a fresh binding nonce, its log
// folded into it when the copy is closed. Not synced.
Status WriteSealedCopy(UnlockedState& from, StateHeader header, const std::string& to);

}  // namespace s3oram
