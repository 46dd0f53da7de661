// BlockCodec (oramcore/protocol/block_codec.h): a sealed slot opens as its
// block and version only; any changed element of it, tags included, is
// refused; during a rotation slots of both keys open and combinations verify
// on the shared half; after it, only the new key's.
#include "oramcore/protocol/block_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "oramcore/base/random.h"
#include "oramcore/base/secret.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/math/field.h"

namespace s3oram {
namespace {

using field::Elem;

OramParams Params(std::uint32_t mac_elems) {
  OramParams p;
  p.height = 4;
  p.bucket_size = 8;
  p.evict_rate = 4;
  p.block_bytes = 512;
  p.capacity_blocks = 32;
  p.mac_elems = mac_elems;
  return p;
}

Secret RandomMaster() {
  random::EnsureInitialized();
  Secret s(kMasterKeyBytes);
  random::Bytes(std::span<std::uint8_t>(s.data(), s.size()));
  return s;
}

FsId RandomFsId() {
  FsId id{};
  random::Bytes(id);
  return id;
}

std::vector<std::uint8_t> RandomBlock(const OramParams& p) {
  std::vector<std::uint8_t> b(p.block_bytes);
  random::Bytes(b);
  return b;
}

// slot a + c * slot b, element-wise: what a random combination of committed
// slots opens to (the share MAC is linear).
std::vector<Elem> Combine(const std::vector<Elem>& a, const std::vector<Elem>& b, Elem c) {
  std::vector<Elem> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = field::Add(a[i], field::Mul(c, b[i]));
  return out;
}

class BlockCodecTest : public ::testing::Test {
 protected:
  const OramParams p_ = Params(OramParams{}.mac_elems);
  const FsId fs_ = RandomFsId();
  const Secret master_ = RandomMaster();
  const ShareMacSecrets macs_ = DeriveShareMacSecrets(master_);
  std::vector<Elem> NewSlot() const { return std::vector<Elem>(p_.elems_per_slot()); }
};

TEST_F(BlockCodecTest, ASealedSlotOpensAsItsBlockAndVersionOnly) {
  BlockCodec codec(master_, fs_, p_, &macs_);
  ASSERT_TRUE(codec.has_share_mac());
  const auto block = RandomBlock(p_);
  auto slot = NewSlot();
  codec.Seal(7, 3, block, slot);
  std::vector<std::uint8_t> plain(p_.block_bytes);
  bool packed = false;
  ASSERT_TRUE(codec.Open(7, 3, slot, plain, &packed));
  EXPECT_TRUE(packed);
  EXPECT_EQ(plain, block);
  EXPECT_TRUE(codec.SlotMacValid(slot));
  // Another block's or another version's slot: refused, nothing returned.
  EXPECT_FALSE(codec.Open(8, 3, slot, plain));
  EXPECT_TRUE(std::all_of(plain.begin(), plain.end(), [](std::uint8_t b) { return b == 0; }));
  EXPECT_FALSE(codec.Open(7, 2, slot, plain));
  EXPECT_FALSE(codec.Open(7, 4, slot, plain));
  // Another filesystem's key: refused.
  BlockCodec other(RandomMaster(), fs_, p_, &macs_);
  EXPECT_FALSE(other.Open(7, 3, slot, plain));
}

TEST_F(BlockCodecTest, EveryChangedElementIsRefusedTagsIncluded) {
  BlockCodec codec(master_, fs_, p_, &macs_);
  const auto block = RandomBlock(p_);
  auto slot = NewSlot();
  codec.Seal(1, 1, block, slot);
  std::vector<std::uint8_t> plain(p_.block_bytes);
  for (std::size_t i = 0; i < slot.size(); ++i) {
    auto changed = slot;
    changed[i] = field::Add(changed[i], 1);
    EXPECT_FALSE(codec.Open(1, 1, changed, plain)) << "element " << i << " of " << slot.size();
    // The tags alone catch it, whether in the data or in a tag.
    EXPECT_FALSE(codec.SlotMacValid(changed)) << "element " << i;
  }
  ASSERT_TRUE(codec.Open(1, 1, slot, plain));
  EXPECT_EQ(plain, block);
}

TEST_F(BlockCodecTest, WithoutShareMacsOnlyTheSealIsChecked) {
  const OramParams p = Params(0);
  BlockCodec codec(master_, fs_, p, nullptr);
  EXPECT_FALSE(codec.has_share_mac());
  EXPECT_EQ(codec.combination_check(), BlockCodec::CombinationCheck::kNone);
  const auto block = RandomBlock(p);
  std::vector<Elem> slot(p.elems_per_slot());
  ASSERT_EQ(slot.size(), p.data_elems_per_slot());
  codec.Seal(5, 9, block, slot);
  std::vector<std::uint8_t> plain(p.block_bytes);
  ASSERT_TRUE(codec.Open(5, 9, slot, plain));
  EXPECT_EQ(plain, block);
  slot[0] = field::Add(slot[0], 1);
  EXPECT_FALSE(codec.Open(5, 9, slot, plain));
}

TEST_F(BlockCodecTest, CombinationsOfOneKeysSlotsVerifyAndAChangedOneDoesNot) {
  BlockCodec codec(master_, fs_, p_, &macs_);
  EXPECT_EQ(codec.combination_check(), BlockCodec::CombinationCheck::kWhole);
  auto a = NewSlot();
  auto b = NewSlot();
  codec.Seal(1, 1, RandomBlock(p_), a);
  codec.Seal(2, 1, RandomBlock(p_), b);
  const Elem c = static_cast<Elem>(random::Below(field::kPrime - 1) + 1);
  EXPECT_TRUE(codec.CombinationMacValid(Combine(a, b, c)));
  b[3] = field::Add(b[3], 1);
  EXPECT_FALSE(codec.CombinationMacValid(Combine(a, b, c)));
}

TEST_F(BlockCodecTest, ARotationOpensBothKeysSealsUnderTheNewAndForgetsTheOld) {
  BlockCodec before(master_, fs_, p_, &macs_);
  auto old_slot = NewSlot();
  const auto old_block = RandomBlock(p_);
  before.Seal(1, 1, old_block, old_slot);

  const Secret new_master = RandomMaster();
  const ShareMacSecrets new_macs = RotateShareMacSecrets(macs_);
  BlockCodec during(new_master, fs_, p_, &new_macs, BlockCodec::PreviousKeys{&master_, &macs_});
  EXPECT_EQ(during.combination_check(), BlockCodec::CombinationCheck::kOneHalf);
  std::vector<std::uint8_t> plain(p_.block_bytes);
  ASSERT_TRUE(during.Open(1, 1, old_slot, plain));
  EXPECT_EQ(plain, old_block);
  auto new_slot = NewSlot();
  const auto new_block = RandomBlock(p_);
  during.Seal(2, 1, new_block, new_slot);
  // Sealed and tagged under the new keys only.
  EXPECT_FALSE(before.Open(2, 1, new_slot, plain));
  // A combination of both keys' slots verifies on the half they share.
  const Elem c = static_cast<Elem>(random::Below(field::kPrime - 1) + 1);
  EXPECT_TRUE(during.CombinationMacValid(Combine(old_slot, new_slot, c)));
  auto changed = new_slot;
  changed[0] = field::Add(changed[0], 1);
  EXPECT_FALSE(during.CombinationMacValid(Combine(old_slot, changed, c)));

  during.ForgetPrevious();
  EXPECT_EQ(during.combination_check(), BlockCodec::CombinationCheck::kWhole);
  EXPECT_FALSE(during.Open(1, 1, old_slot, plain));
  ASSERT_TRUE(during.Open(2, 1, new_slot, plain));
  EXPECT_EQ(plain, new_block);
}

TEST_F(BlockCodecTest, ARotationBegunBeforeHalvesChecksNoCombination) {
  // Both halves replaced at once (a rotation begun by a build before halves):
  // no half is shared, so no combination of mixed slots can be verified.
  ShareMacSecrets all_new = DeriveShareMacSecrets(RandomMaster());
  BlockCodec during(RandomMaster(), fs_, p_, &all_new, BlockCodec::PreviousKeys{&master_, &macs_});
  EXPECT_EQ(during.combination_check(), BlockCodec::CombinationCheck::kNone);
}

}  // namespace
}  // namespace s3oram
