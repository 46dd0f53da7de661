// InconsistentSlots against sharings made here: digests of consistent
// sharings pass, one changed share is found in exactly its slot, damaged
// slots are skipped, and malformed replies never pass.
#include "oramcore/protocol/consistency.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "oramcore/math/shamir.h"
#include "oramcore/math/slot_digest.h"
#include "oramcore/wire/wire.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using field::Elem;

struct Sharings {
  std::size_t parties = 3, t = 1, slots = 7, m = 13;
  std::vector<std::vector<Elem>> rows;
  std::vector<std::vector<Elem>> shares;  // [party][slot * m + c]
};

Sharings Make(std::mt19937_64& rng) {
  Sharings s;
  std::vector<Elem> xs;
  for (std::size_t i = 0; i < s.parties; ++i) xs.push_back(shamir::PartyX(i));
  s.rows = shamir::ParityChecks(xs, s.t).value();
  s.shares.assign(s.parties, std::vector<Elem>(s.slots * s.m));
  for (std::size_t k = 0; k < s.slots * s.m; ++k) {
    const Elem a = static_cast<Elem>(rng() % field::kPrime), b = static_cast<Elem>(rng() % field::kPrime);
    for (std::size_t i = 0; i < s.parties; ++i) {
      s.shares[i][k] = field::Add(a, field::Mul(b, xs[i]));  // a + b x: degree t = 1
    }
  }
  return s;
}

std::vector<std::vector<Elem>> Digests(const Sharings& s, const digest::DigestKey& key) {
  std::vector<std::vector<Elem>> out(s.parties);
  for (std::size_t i = 0; i < s.parties; ++i) {
    for (std::size_t k = 0; k < s.slots; ++k) {
      digest::SlotDigest d{};
      EXPECT_TRUE(key.Digest({s.shares[i].data() + k * s.m, s.m}, &d));
      out[i].insert(out[i].end(), d.begin(), d.end());
    }
  }
  return out;
}

TEST(ConsistencyUnitTest, FindsExactlyTheChangedSlot) {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 50; ++round) {
    Sharings s = Make(rng);
    digest::Seed key_seed{};
    for (auto& b : key_seed) b = static_cast<std::uint8_t>(rng());
    const digest::DigestKey key(key_seed, s.m);
    EXPECT_TRUE(InconsistentSlots(s.rows, Digests(s, key)).empty()) << "round " << round;
    const std::size_t party = rng() % s.parties, slot = rng() % s.slots;
    Elem& e = s.shares[party][slot * s.m + rng() % s.m];
    e = field::Add(e, 1 + static_cast<Elem>(rng() % 1000));
    const auto d = Digests(s, key);
    EXPECT_EQ(InconsistentSlots(s.rows, d), std::vector<std::size_t>{slot}) << "round " << round;
    // A slot some server flags damaged is left to that flag.
    std::vector<std::vector<std::uint8_t>> skip(s.parties, std::vector<std::uint8_t>(s.slots, 0));
    skip[(party + 1) % s.parties][slot] = 1;
    EXPECT_TRUE(InconsistentSlots(s.rows, d, skip).empty()) << "round " << round;
  }
}

TEST(ConsistencyUnitTest, MalformedRepliesNeverPass) {
  std::mt19937_64 rng(1);
  Sharings s = Make(rng);
  const digest::DigestKey key(digest::Seed{}, s.m);
  auto d = Digests(s, key);
  d[1].pop_back();  // one server answered a different size
  EXPECT_EQ(InconsistentSlots(s.rows, d).size(), s.slots);
  auto e = Digests(s, key);
  e.pop_back();  // a server missing
  EXPECT_EQ(InconsistentSlots(s.rows, e).size(), s.slots);
}

// OddShareOut against a tagged value shared here: the server whose share
// was changed is named, for live values and for the zero of a dummy slot;
// nothing is named when two shares are wrong or without a consistent pair.
TEST(OddShareOutTest, NamesTheServerWhoseShareWasChanged) {
  auto rng = testing::SeededRng();
  std::array<std::uint8_t, share_mac::kKeyBytes> secret{};
  for (auto& b : secret) b = static_cast<std::uint8_t>(rng());
  const std::size_t d = 40;
  const share_mac::ShareMacKey key(secret, d);
  const std::size_t m = key.slot_elems();
  std::vector<Elem> xs;
  for (std::size_t i = 0; i < 3; ++i) xs.push_back(shamir::PartyX(i));
  auto share = [&](const std::vector<Elem>& value) {
    std::vector<std::vector<Elem>> out(3, std::vector<Elem>(m));
    for (std::size_t c = 0; c < m; ++c) {
      const Elem slope = static_cast<Elem>(rng() % field::kPrime);
      for (std::size_t i = 0; i < 3; ++i) out[i][c] = field::Add(value[c], field::Mul(slope, xs[i]));
    }
    return out;
  };
  for (const bool dummy : {false, true}) {
    std::vector<Elem> value(m, 0);
    if (!dummy) {
      for (std::size_t c = 0; c < d; ++c) value[c] = static_cast<Elem>(rng() % field::kPrime);
      key.Tag(value);
    }
    for (std::size_t bad = 0; bad < 3; ++bad) {
      auto shares = share(value);
      const std::size_t at = rng() % m;
      shares[bad][at] = field::Add(shares[bad][at], 1 + static_cast<Elem>(rng() % 1000));
      const auto odd = OddShareOut(shares, key);
      ASSERT_TRUE(odd.has_value()) << "dummy=" << dummy << " bad=" << bad;
      EXPECT_EQ(*odd, bad);
      // A second wrong share: no pair agrees on an authentic value.
      const std::size_t other = (bad + 1) % 3;
      shares[other][0] = field::Add(shares[other][0], 7);
      EXPECT_FALSE(OddShareOut(shares, key).has_value()) << "two wrong shares were attributed";
    }
  }
  // Consistent shares: every pair opens the same authentic value, so more
  // than one candidate; not a case to attribute.
  std::vector<Elem> zero(m, 0);
  EXPECT_FALSE(OddShareOut(share(zero), key).has_value());
  // Malformed: a share of another length.
  auto shares = share(zero);
  shares[1].pop_back();
  EXPECT_FALSE(OddShareOut(shares, key).has_value());
}

// The predicate form, over four of five parties (as an eviction's MAC_OPEN
// among the participants left when one is excluded): the one whose share of
// the tagged value was changed is named by its position, whichever it is,
// and nothing is named when the predicate accepts nothing.
TEST(OddShareOutTest, NamesTheOddOneOfFourParticipantsByPredicate) {
  auto rng = testing::SeededRng();
  std::array<std::uint8_t, share_mac::kKeyBytes> secret{};
  for (auto& b : secret) b = static_cast<std::uint8_t>(rng());
  const std::size_t d = 40;
  const share_mac::ShareMacKey key(secret, d);
  const std::size_t m = key.slot_elems();
  const std::vector<std::size_t> parties = {0, 2, 3, 4};  // server 1 excluded
  std::vector<Elem> value(m, 0);
  for (std::size_t c = 0; c < d; ++c) value[c] = static_cast<Elem>(rng() % field::kPrime);
  key.Tag(value);
  auto verify = [&key](std::span<const Elem> v) { return key.Verify(v); };
  for (std::size_t bad = 0; bad < parties.size(); ++bad) {
    std::vector<std::vector<Elem>> shares(parties.size(), std::vector<Elem>(m));
    for (std::size_t c = 0; c < m; ++c) {
      const Elem slope = static_cast<Elem>(rng() % field::kPrime);
      for (std::size_t k = 0; k < parties.size(); ++k) {
        shares[k][c] = field::Add(value[c], field::Mul(slope, shamir::PartyX(parties[k])));
      }
    }
    const std::size_t at = rng() % m;
    shares[bad][at] = field::Add(shares[bad][at], 1 + static_cast<Elem>(rng() % 1000));
    const auto odd = OddShareOut(shares, m, verify, parties);
    ASSERT_TRUE(odd.has_value()) << "bad=" << bad;
    EXPECT_EQ(*odd, bad);
    EXPECT_FALSE(OddShareOut(
                     shares, m, [](std::span<const Elem>) { return false; }, parties)
                     .has_value());
  }
}

}  // namespace
}  // namespace s3oram
