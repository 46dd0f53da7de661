// The key hierarchy of a filesystem. One random master key (key_wrap.h: kept
// only wrapped under the passphrase) and four independent 256-bit subkeys
// derived from it with libsodium's crypto_kdf (BLAKE2b), one context each, so
// that no key ever serves two purposes:
//   block  "s3oblock" id 1  seals every ORAM block (block_seal.h)
//   state  "s3ostate" id 1  seals the client state's pages (state/sealed_vfs.h)
//   backup "s3obakup" id 1  seals the state backup blob (protocol/state_backup.h)
//   share  "s3osmac_" id 1  keys the linear MAC on every slot (math/share_mac.h)
// A subkey reveals nothing of the master key or of its siblings. The contexts
// and ids are part of the on-disk formats: changing one makes every existing
// filesystem unreadable.
#pragma once

#include <cstddef>

#include "oramcore/base/secret.h"

namespace s3oram {

inline constexpr std::size_t kSubkeyBytes = 32;

// Each takes a master key of kMasterKeyBytes (aborts otherwise: a programming
// error, never input) and returns kSubkeyBytes.
Secret DeriveBlockKey(const Secret& master);
Secret DeriveStateKey(const Secret& master);
Secret DeriveBackupKey(const Secret& master);
Secret DeriveShareMacKey(const Secret& master);

}  // namespace s3oram
