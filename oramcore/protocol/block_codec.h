// BlockCodec: what a block becomes in a slot, and back (the client's one
// place for it, in both directions):
//   Seal: the block's bytes sealed as (id, version) (crypto/block_seal.h),
//         packed into the slot's data elements (math/elem_packing.h), the
//         share-MAC tags over the whole slot (math/share_mac.h) when the
//         filesystem has them;
//   Open: every one of those checked, the tags included, so that no changed
//         element of a slot goes unnoticed (the seal covers only the data).
// During a master-key rotation (rekey.h) it opens blocks and verifies tags
// under the previous keys as well as the current ones, and seals and tags
// under the current ones only. Holds key material; zeroed on destruction
// (Secret, ShareMacKey).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "oramcore/base/ids.h"
#include "oramcore/base/secret.h"
#include "oramcore/crypto/block_seal.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/math/field.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/tree/params.h"
#include "oramcore/tree/position_map.h"

namespace s3oram {

class BlockCodec {
 public:
  // The keys of a rotation under way: blocks not re-sealed yet are under
  // `master`, slots not re-tagged yet under `share_mac` (null without share
  // MACs).
  struct PreviousKeys {
    const Secret* master = nullptr;
    const ShareMacSecrets* share_mac = nullptr;
  };
  // `share_mac` null: a filesystem made before share MACs (slots carry no
  // tags). Nothing of the secrets is kept but the keys derived from them.
  BlockCodec(const Secret& master, const FsId& fs_id, const OramParams& params,
             const ShareMacSecrets* share_mac, std::optional<PreviousKeys> previous = std::nullopt);
  BlockCodec(const BlockCodec&) = delete;
  BlockCodec& operator=(const BlockCodec&) = delete;

  // The rotation ended: the previous keys are forgotten.
  void ForgetPrevious();

  // `slot` gets elems_per_slot elements: `plain` (block_bytes) sealed as
  // (id, version), packed, tagged; the rest of the data part zero.
  void Seal(BlockId id, std::uint64_t version, std::span<const std::uint8_t> plain,
            std::span<field::Elem> slot) const;
  // True, and `plain` the block's bytes, only if `slot` holds block `id` as
  // `version` under a key this codec accepts, its tags valid; false and
  // `plain` zeroed otherwise. *packed (if given) says whether the data part
  // was even a valid packing (a wrong one is garbage, not an old version).
  [[nodiscard]] bool Open(BlockId id, std::uint64_t version, std::span<const field::Elem> slot,
                          std::span<std::uint8_t> plain, bool* packed = nullptr) const;

  bool has_share_mac() const { return mac_ != nullptr; }
  // Whether `slot` carries valid share-MAC tags (current or previous key);
  // has_share_mac() only.
  bool SlotMacValid(std::span<const field::Elem> slot) const;
  // What a check of an opened random combination of slots can verify now: a
  // combination of slots tagged under two keys verifies under neither, so
  // during a rotation only the half of the tags both keys share (none for a
  // rotation begun before halves existed).
  enum class CombinationCheck { kNone, kOneHalf, kWhole };
  CombinationCheck combination_check() const;
  // Whether an opened combination carries the tags combination_check() names
  // (has_share_mac() only).
  bool CombinationMacValid(std::span<const field::Elem> opened) const;

  // The keys themselves, for what is not a slot: the lease holder's sealed
  // description (lease_holder.h) and the attribution of an odd share
  // (consistency.h OddShareOut). previous_mac() is null outside a rotation.
  const BlockSealer& sealer() const { return sealer_; }
  const share_mac::ShareMacKey* mac() const { return mac_.get(); }
  const share_mac::ShareMacKey* previous_mac() const { return previous_mac_.get(); }

 private:
  OramParams params_;
  BlockSealer sealer_;
  std::unique_ptr<share_mac::ShareMacKey> mac_;
  std::unique_ptr<share_mac::ShareMacKey> previous_mac_;
  std::optional<std::size_t> rotation_shared_half_;
};

}  // namespace s3oram
