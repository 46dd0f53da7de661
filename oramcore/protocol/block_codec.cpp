#include "oramcore/protocol/block_codec.h"

#include <algorithm>
#include <vector>

namespace s3oram {

using field::Elem;

BlockCodec::BlockCodec(const Secret& master, const FsId& fs_id, const OramParams& params,
                       const ShareMacSecrets* share_mac, std::optional<PreviousKeys> previous)
    : params_(params), sealer_(master, fs_id) {
  const auto data_elems = static_cast<std::size_t>(params.data_elems_per_slot());
  if (share_mac != nullptr) mac_ = MakeShareMacKey(*share_mac, data_elems);
  if (!previous) return;
  if (previous->master != nullptr) sealer_.AcceptPrevious(*previous->master);
  if (mac_ && previous->share_mac != nullptr) {
    previous_mac_ = MakeShareMacKey(*previous->share_mac, data_elems);
    rotation_shared_half_ = SharedHalf(*previous->share_mac, *share_mac);
  }
}

void BlockCodec::ForgetPrevious() {
  sealer_.ForgetPrevious();
  previous_mac_.reset();
  rotation_shared_half_.reset();
}

void BlockCodec::Seal(BlockId id, std::uint64_t version, std::span<const std::uint8_t> plain,
                      std::span<Elem> slot) const {
  std::vector<std::uint8_t> sealed(params_.sealed_bytes());
  sealer_.Seal(id, version, plain, sealed);
  std::fill(slot.begin(), slot.end(), Elem{0});
  field::Pack(sealed, slot.first(static_cast<std::size_t>(params_.data_elems_per_slot())));
  if (mac_) mac_->Tag(slot);
}

bool BlockCodec::Open(BlockId id, std::uint64_t version, std::span<const Elem> slot,
                      std::span<std::uint8_t> plain, bool* packed) const {
  std::vector<std::uint8_t> sealed(params_.sealed_bytes());
  const bool unpacked =
      field::Unpack(slot.first(static_cast<std::size_t>(params_.data_elems_per_slot())), sealed);
  if (packed != nullptr) *packed = unpacked;
  const bool valid =
      unpacked && (!mac_ || SlotMacValid(slot)) && sealer_.Open(id, version, sealed, plain);
  if (!valid) std::fill(plain.begin(), plain.end(), std::uint8_t{0});
  return valid;
}

bool BlockCodec::SlotMacValid(std::span<const Elem> slot) const {
  return mac_->Verify(slot) || (previous_mac_ && previous_mac_->Verify(slot));
}

BlockCodec::CombinationCheck BlockCodec::combination_check() const {
  if (!mac_) return CombinationCheck::kNone;
  if (!previous_mac_) return CombinationCheck::kWhole;
  return rotation_shared_half_ ? CombinationCheck::kOneHalf : CombinationCheck::kNone;
}

bool BlockCodec::CombinationMacValid(std::span<const Elem> opened) const {
  if (!previous_mac_) return mac_->Verify(opened);
  // Both keys give the shared half the same rows, so one VerifyHalf covers
  // slots tagged under either.
  return rotation_shared_half_ && mac_->VerifyHalf(opened, *rotation_shared_half_);
}

}  // namespace s3oram
