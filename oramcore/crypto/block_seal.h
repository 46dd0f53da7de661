// BlockSealer: authenticated encryption of ORAM block payloads before they
// are secret-shared.
//
// A sealed block is nonce (24) || ciphertext (B) || tag (16), XChaCha20-
// Poly1305 under a block key derived from the master key (libsodium KDF,
// context "s3oblock"). The associated data bind the filesystem id, the block
// id and the block's version (position map; bumped on every rewrite), so:
//  * a flipped bit, a share from another filesystem, another block's answer,
//    or an older version of this block (a server rolled back or replaying)
//    fails Open, which the client reports as an Integrity error (EIO);
//  * even if every server colludes, the reconstructed payload reveals nothing
//    but its length, which is the same for every block.
// Nonces are random (192 bits), never derived from the version: a version
// can repeat after a client crash, a random nonce does not.
//
// During a master-key rotation (oramcore/protocol/rekey.h) a sealer also
// opens blocks sealed under the previous master key's block key; it always
// seals under the current one. The associated data are the same, so an older
// version sealed under either key is still refused.
#pragma once

#include <cstdint>
#include <span>

#include "oramcore/base/ids.h"
#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/crypto/seal_format.h"

namespace s3oram {

class BlockSealer {
 public:
  // `master` must hold kMasterKeyBytes; only the derived block key is kept.
  BlockSealer(const Secret& master, const FsId& fs_id);

  // out.size() must be plaintext.size() + kSealOverhead.
  void Seal(std::uint64_t block_id, std::uint64_t version, std::span<const std::uint8_t> plaintext,
            std::span<std::uint8_t> out) const;
  // out.size() must be sealed.size() - kSealOverhead. False (out zeroed) if
  // the block does not authenticate as (block_id, version) of this filesystem.
  [[nodiscard]] bool Open(std::uint64_t block_id, std::uint64_t version,
                          std::span<const std::uint8_t> sealed, std::span<std::uint8_t> out) const;

  // Open also tries the block key of `previous_master` (kMasterKeyBytes)
  // until ForgetPrevious.
  void AcceptPrevious(const Secret& previous_master);
  void ForgetPrevious() { previous_key_ = Secret(); }

 private:
  bool OpenUnder(const Secret& key, std::span<const std::uint8_t> ad,
                 std::span<const std::uint8_t> sealed, std::span<std::uint8_t> out) const;
  Secret key_;
  Secret previous_key_;  // empty unless a rotation is under way
  FsId fs_id_;
};

}  // namespace s3oram
