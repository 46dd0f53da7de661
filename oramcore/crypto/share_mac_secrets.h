// The key material of the share MAC (math/share_mac.h): one 32-byte secret
// per half of its tag elements, and how it changes in a rekey.
//
// Invariants. Before a filesystem's first rekey both halves are
// DeriveShareMacKey(master) (subkeys.h), which is the key every slot was
// tagged under before halves existed, so such a state needs no stored
// secret. A rekey (state/master_key_switch.h) replaces exactly one half by a
// fresh random secret, the other one than the rekey before it, and keeps the
// previous pair until the rotation ends: slots not re-tagged yet verify
// under the previous pair, re-tagged ones under the current pair, and every
// slot under the half both pairs share (SharedHalf). After two rekeys no
// secret of the key before them is left.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <optional>

#include "oramcore/base/secret.h"
#include "oramcore/math/share_mac.h"

namespace s3oram {

struct ShareMacSecrets {
  std::array<Secret, share_mac::kHalves> half;
  // The half the last rekey replaced (0 before any: the first replaces 1).
  std::size_t last_replaced = 0;

  ShareMacSecrets Copy() const;
  bool Equals(const ShareMacSecrets& other) const;
};

// Both halves DeriveShareMacKey(master): a state whose rekeys (if any) all
// predate halves. `master` has kMasterKeyBytes.
ShareMacSecrets DeriveShareMacSecrets(const Secret& master);

// `from` with the half after `from.last_replaced` replaced by fresh random
// bytes (the OS CSPRNG), and last_replaced naming it.
ShareMacSecrets RotateShareMacSecrets(const ShareMacSecrets& from);

// The half whose secret `a` and `b` share, if any (constant time per half).
// Two pairs of a rotation share one; a rotation started before halves
// existed (both halves replaced at once) shares none.
std::optional<std::size_t> SharedHalf(const ShareMacSecrets& a, const ShareMacSecrets& b);

// The key for slots of `data_elems` data elements.
std::unique_ptr<share_mac::ShareMacKey> MakeShareMacKey(const ShareMacSecrets& secrets,
                                                        std::size_t data_elems);

}  // namespace s3oram
