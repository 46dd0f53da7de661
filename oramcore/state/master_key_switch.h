// Replacing a filesystem's master key in its client state: the first step of
// `s3oram rekey` (oramcore/protocol/rekey.h), which then re-seals every block.
//
// The state is copied into a new file sealed under the new master key, whose
// header wraps it under the new passphrase at the next key epoch (generation
// + 1), and the copy records the rotation as under way, keeping the previous
// master key inside the sealed database (ClientStateStore::rekey): blocks on
// the servers are still sealed under it. The copy is built beside the state
// (`<path>.rekeying`), synced and renamed over it.
//
// Crash rule: a kill at any point leaves at `path` either the old file (the
// old passphrase opens it, nothing changed; the next run removes a copy left
// beside it) or the new one (only the new passphrase opens it, and the
// rotation resumes from it). The old file's write-ahead log is folded into
// it before the copy and never paired with the new file.
#pragma once

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/state/state_file.h"

namespace s3oram {

// `from` is the unlocked state (no database connection to it may be open);
// `new_wrap` wraps `new_master` (kMasterKeyBytes) under the new passphrase.
// If `lock_fd` points at a descriptor holding the caller's flock on the
// state, the new file is locked before the rename and *lock_fd replaced, so
// the lock never lapses. Returns the new file's header.
Result<StateHeader> SwitchMasterKey(UnlockedState& from, const KeyWrap& new_wrap,
                                    const Secret& new_master, int* lock_fd);

}  // namespace s3oram
