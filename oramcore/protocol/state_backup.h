// Client-state backup: the SQLite state (position map, counters, metadata,
// wrapped master key) as an encrypted, padded, secret-shared blob on the
// servers, and its restore on a machine that has nothing but the server
// addresses and keys, a client key and the passphrase.
//
// Blob (docs/ARCHITECTURE.md, "Client-state backup"; all integers LE):
//   header, kBackupHeaderBytes = 216 bytes:
//     magic "S3ORBAK1" (8), format u32 = 1, header size u32 = 216,
//     fs_id (16), generation u64, created (unix seconds) u64,
//     counters nr, ne, seq, epoch (4 x u64),
//     key wrap: kdf ops u64, kdf mem u64, salt (16), nonce (24), sealed (48)
//       (the master key wrapped under the passphrase exactly as in the state),
//     padded plaintext size u64, AEAD nonce (24)
//   ciphertext: XChaCha20-Poly1305 of the padded plaintext (size + 16 tag)
//     key:  DeriveBackupKey(master) (crypto_kdf, context "s3obakup", id 1;
//           independent of the block key, context "s3oblock")
//     AD:   "s3oram backup v1" (16) || fs_id || generation u64 || header
//   padded plaintext: snapshot size u64 || state file snapshot (its clear
//     header and sealed pages, state_file.h) || zeros, padded
//     to the next power of two >= 1 MiB. The size is all that leaks (its
//     log2), and only to someone who reconstructs the blob.
// The whole blob is packed into field elements (field::Pack) and shared with
// fresh degree-t Shamir polynomials; server i stores only its share (one
// element vector), so a single server learns the padded size and nothing
// else, not even the KDF parameters in the header.
//
// Why the header is inside the shared blob and not beside it: the key wrap
// and counters are what a fresh machine needs before it has any state, and
// sharing them keeps even the Argon2id cost and the access counters from any
// t servers. The AD binds the header to the ciphertext, so a reconstruction
// with altered counters or another generation's number fails authentication.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/protocol/client.h"
#include "oramcore/state/client_state.h"
#include "oramcore/wire/wire.h"

namespace s3oram {

inline constexpr std::size_t kBackupHeaderBytes = 216;
inline constexpr std::uint64_t kBackupMinPaddedBytes = std::uint64_t{1} << 20;

// Called as shares move: (done, total) in bytes of share data over all servers.
using BackupProgressFn = std::function<void(std::uint64_t done, std::uint64_t total)>;

struct BackupResult {
  std::uint64_t generation = 0;
  std::uint64_t state_bytes = 0;   // the SQLite snapshot
  std::uint64_t padded_bytes = 0;  // what its size rounds to
  std::uint64_t share_elems = 0;   // elements each server stores
  std::uint64_t epoch = 0;         // the snapshot's epoch (OramClient::RecordBackup)
  // The snapshot's key epoch (its header's generation, raised by each
  // passphrase change): the servers then delete every generation of a lower
  // one, so none made under an earlier passphrase stays (wire::BackupPutRequest).
  std::uint64_t key_epoch = 0;
};

// Snapshots the state of `client` (opened with the passphrase, so it holds
// the backup key), encrypts, shares and uploads it as a new generation (one
// above the newest any server holds). Syncs the client first; the header's
// counters are read from the snapshot itself. Every server must take its
// share; the previous generations stay until the new one is complete, and
// then those of a lower key epoch (an earlier passphrase) go.
Result<BackupResult> BackupState(OramClient& client, const BackupProgressFn& progress = {});
// The same with an explicit backup key (DeriveBackupKey of the unwrapped
// master key), for a client opened read-only: `s3oram backup-state` uses
// that, so it starts no new epoch and does not fence a mounted daemon. The
// snapshot is then whatever that daemon had committed.
Result<BackupResult> BackupStateWithKey(OramClient& client, const Secret& backup_key,
                                        const BackupProgressFn& progress = {});

struct RestoreReport;

struct RestoreOptions {
  std::string state_path;                // created; must not exist
  std::vector<std::string> servers;      // endpoints in party order
  std::vector<std::string> server_keys;  // CURVE public keys (Z85), same order
  std::string client_key_file;           // this machine's CURVE secret key file
  std::uint64_t generation = 0;          // 0: the newest usable one
  bool force = false;                    // accept a backup older than the servers
  // Everything but the publish: the restored state is built, adapted and
  // checked against the servers, `preview` sees it, and it is discarded;
  // state_path is not created. With `force`, the report's lost_blocks are
  // what a forced restore would lose.
  bool dry_run = false;
  // If set, called with the restored state's temporary path (it opens with
  // the passphrase) and the report, after it opened against the servers and
  // before it is published or discarded; an error stops the restore with
  // nothing published. For naming the files of lost_blocks beforehand.
  std::function<Status(const std::string& restored_state, const RestoreReport& report)> preview;
  // Refresh only: replace a state that holds changes no backup has (its last
  // session ended without an upload); the old file is kept beside it as
  // STATE.discarded-<unix time>.
  bool discard_local_changes = false;
  std::chrono::milliseconds timeout{30000};
  // Set by RefreshState: state_path is this filesystem's state (fs_id), left
  // stale (counters) by another client's use of the servers. It is replaced
  // atomically once the restored state checks out, and only if the servers
  // are really ahead of it. Unset: state_path must not exist.
  struct Replace {
    wire::FsId fs_id{};
    Counters counters;
    std::optional<BackupMark> mark;
  };
  std::optional<Replace> replace;
};

struct RestoreReport {
  std::uint64_t generation = 0;
  std::uint64_t created_unix = 0;
  Counters counters;                     // as in the backup
  std::uint64_t state_bytes = 0;
  std::vector<std::size_t> servers_used;  // the t+1 shares that authenticated
  std::string discarded_copy;             // refresh --discard-local-changes: the old state
  // --force over a backup older than the servers: the blocks whose data the
  // restored state cannot locate any more (ascending ids). The restored state
  // has no position for them; the filesystem reports them unreadable.
  std::vector<BlockId> lost_blocks;
  // Things the user must know although the restore succeeded: a server whose
  // share is damaged or missing, a newer generation that failed to
  // authenticate, what --force gave up.
  std::vector<std::string> warnings;
};

// The marker of RestoreState's refusal of a backup older than the servers
// (FailedPrecondition), which --force would accept by giving up the blocks
// RestoreReport::lost_blocks lists.
bool IsOlderThanServersRefusal(const Status& st);

// Restores the state as described in the file comment of state_backup.cpp:
// nothing is written unless a generation authenticates, its counters are
// compatible with every server's (or `force`), and the result opens.
// PermissionDenied for a wrong passphrase; Integrity (naming the servers)
// when no choice of t+1 shares authenticates; FailedPrecondition for a
// backup older than the servers without `force`.
Result<RestoreReport> RestoreState(const RestoreOptions& options, const Secret& passphrase,
                                   const BackupProgressFn& progress = {});

// Replaces a stale state (OramClient::Open refused it with kStaleState:
// another device used the filesystem since; oramcore/protocol/freshness.h)
// with the newest backup on its servers, for the same machine configuration
// (endpoints, server keys, client key file). Locks the state as
// OramClient::Open does. FailedPrecondition, nothing written: if the state is
// not stale (nothing it knows may be thrown away); if it holds changes no
// backup has (its last session ended without uploading it: a crash, fsck -y)
// unless discard_local_changes, which keeps the old file beside it; or if the
// newest backup is older than the servers (the other device did not unmount
// cleanly: `s3oram restore --force` is the deliberate way). At every instant
// the state file is either the old one or the complete new one.
Result<RestoreReport> RefreshState(const std::string& state_path, const Secret& passphrase,
                                   std::chrono::milliseconds timeout,
                                   const BackupProgressFn& progress = {},
                                   bool discard_local_changes = false);

// The complete backup generations of each server, all asked at once; an
// unreachable server carries its error. A server preparing an eviction
// answers too (BACKUP_LIST is served beside the PREPARE).
std::vector<Result<std::vector<wire::BackupInfo>>> ListBackups(ClientSession& session,
                                                               std::chrono::milliseconds timeout);

}  // namespace s3oram
