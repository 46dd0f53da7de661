// The filesystem's master key and how it is kept: a random 256-bit key per
// filesystem, stored only wrapped (XChaCha20-Poly1305) under a key derived
// from the passphrase with Argon2id. Changing the passphrase rewraps the same
// master key, so no block is touched.
//
// Guarantees:
//  * The master key comes from the OS CSPRNG and exists in memory only inside
//    Secret (guarded, zeroed after use); the derived wrapping key is zeroed as
//    soon as the wrap or unwrap is done.
//  * The wrap authenticates the filesystem id and the KDF parameters (they are
//    associated data), so a wrapped key copied to another filesystem, or KDF
//    parameters lowered by someone editing the state file, do not unwrap.
//  * A wrong passphrase is reported as PermissionDenied and nothing else: the
//    tag check cannot tell a wrong passphrase from a damaged record, and says so.
#pragma once

#include <array>
#include <cstdint>

#include "oramcore/base/ids.h"
#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"

namespace s3oram {

inline constexpr std::size_t kMasterKeyBytes = 32;

// Argon2id cost. Stored with the wrapped key so that unwrapping uses exactly
// what wrapping used; tunable per filesystem (s3oram init/passwd --kdf-*).
struct KdfParams {
  std::uint64_t ops = 0;        // passes (crypto_pwhash opslimit)
  std::uint64_t mem_bytes = 0;  // memory (crypto_pwhash memlimit)
  bool operator==(const KdfParams&) const = default;
};
// libsodium's MODERATE level: 3 passes over 256 MiB (about a second here).
KdfParams DefaultKdfParams();
// The smallest costs libsodium accepts. For tests and benchmarks only: a
// passphrase protected this way falls quickly to guessing.
KdfParams MinimalKdfParams();
// InvalidArgument naming the allowed range if libsodium would refuse them.
Status ValidateKdfParams(const KdfParams& kdf);

// The least cost a user may choose without saying --insecure-kdf: OWASP's
// Password Storage Cheat Sheet floor for Argon2id, which trades memory for
// passes (46 MiB x 1, 19 MiB x 2, 12 MiB x 3, 9 MiB x 4, 7 MiB x 5).
// Expressed as: at least 7 MiB, memory x passes at least 35 MiB, and a
// single pass only with at least 46 MiB.
inline constexpr std::uint64_t kKdfFloorMemBytes = std::uint64_t{7} << 20;
inline constexpr std::uint64_t kKdfFloorWork = std::uint64_t{35} << 20;  // bytes x passes
inline constexpr std::uint64_t kKdfFloorOnePassMemBytes = std::uint64_t{46} << 20;
// InvalidArgument naming the floor and the flag that overrides it if `kdf`
// is below it (libsodium's MODERATE default is far above it).
Status CheckKdfFloor(const KdfParams& kdf);

struct KeyWrap {
  KdfParams kdf;
  std::array<std::uint8_t, 16> salt{};
  std::array<std::uint8_t, 24> nonce{};
  std::array<std::uint8_t, kMasterKeyBytes + 16> sealed{};  // ciphertext || tag
  bool operator==(const KeyWrap&) const = default;
};

// A fresh random master key.
Secret NewMasterKey();

// Wraps `master` for filesystem `fs_id` under `passphrase` with a fresh salt
// and nonce.
Result<KeyWrap> WrapMasterKey(const Secret& master, const Secret& passphrase, const FsId& fs_id,
                              const KdfParams& kdf);

// The master key, or PermissionDenied if the passphrase is wrong (or the
// record was altered).
Result<Secret> UnwrapMasterKey(const KeyWrap& wrap, const Secret& passphrase, const FsId& fs_id);

}  // namespace s3oram
