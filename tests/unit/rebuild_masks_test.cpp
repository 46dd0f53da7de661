// Rebuild masks: pairwise seeds are symmetric, the masks of all participants
// sum to zero, streams are deterministic per (seed, bucket), differ across
// sessions, buckets and pairs, and are canonical field elements.
#include "serverd/rebuild_masks.h"

#include <gtest/gtest.h>
#include <sodium.h>

#include <set>
#include <vector>

#include "oramcore/base/random.h"

namespace s3oram::serverd::rebuild {
namespace {

struct Party {
  Secret secret{kKeyBytes};
  PublicKey pub{};
};

Party NewParty() {
  Party p;
  random::Bytes(p.secret.bytes());
  EXPECT_EQ(crypto_scalarmult_base(p.pub.data(), p.secret.data()), 0);
  return p;
}

SessionNonce NewNonce() {
  SessionNonce n{};
  random::Bytes(n);
  return n;
}

// The rebuild the masks below are for: server 3 by servers 0..2.
constexpr std::uint32_t kTarget = 3;
constexpr std::array<std::uint32_t, 3> kParticipants = {0, 1, 2};

// Party `me`'s pair masks among `parties` (every other party is a peer).
std::vector<PairMask> MasksOf(const std::vector<Party>& parties, std::size_t me,
                              const SessionNonce& nonce) {
  std::vector<PairMask> out;
  for (std::size_t j = 0; j < parties.size(); ++j) {
    if (j == me) continue;
    auto seed = PairSeed(parties[me].secret, parties[me].pub, parties[j].pub, nonce, kTarget,
                         kParticipants);
    EXPECT_TRUE(seed.ok()) << seed.status().ToString();
    out.push_back(PairMask{std::move(seed).value(), me < j});
  }
  return out;
}

TEST(RebuildMasksTest, PairSeedsAreSymmetricAndSessionBound) {
  random::EnsureInitialized();
  Party a = NewParty(), b = NewParty(), c = NewParty();
  const SessionNonce n1 = NewNonce(), n2 = NewNonce();
  auto ab = PairSeed(a.secret, a.pub, b.pub, n1, kTarget, kParticipants);
  auto ba = PairSeed(b.secret, b.pub, a.pub, n1, kTarget, kParticipants);
  auto ab2 = PairSeed(a.secret, a.pub, b.pub, n2, kTarget, kParticipants);
  auto ac = PairSeed(a.secret, a.pub, c.pub, n1, kTarget, kParticipants);
  ASSERT_TRUE(ab.ok() && ba.ok() && ab2.ok() && ac.ok());
  EXPECT_TRUE(ab->Equals(*ba));
  EXPECT_FALSE(ab->Equals(*ab2));
  EXPECT_FALSE(ab->Equals(*ac));
  // Another target or participant set under the same nonce: another seed
  // (with four servers or more a client may rebuild several).
  const std::array<std::uint32_t, 3> others = {0, 1, 4};
  auto other_target = PairSeed(a.secret, a.pub, b.pub, n1, 2, kParticipants);
  auto other_set = PairSeed(a.secret, a.pub, b.pub, n1, kTarget, others);
  ASSERT_TRUE(other_target.ok() && other_set.ok());
  EXPECT_FALSE(ab->Equals(*other_target));
  EXPECT_FALSE(ab->Equals(*other_set));
  // A third party's keys give another seed: c cannot compute a-b's.
  auto cb = PairSeed(c.secret, c.pub, b.pub, n1, kTarget, kParticipants);
  ASSERT_TRUE(cb.ok());
  EXPECT_FALSE(ab->Equals(*cb));
  // Degenerate inputs are refused.
  EXPECT_FALSE(PairSeed(a.secret, a.pub, a.pub, n1, kTarget, kParticipants).ok());
  PublicKey zero{};
  EXPECT_FALSE(PairSeed(a.secret, a.pub, zero, n1, kTarget, kParticipants).ok());
  EXPECT_FALSE(PairSeed(Secret(16), a.pub, b.pub, n1, kTarget, kParticipants).ok());
}

TEST(RebuildMasksTest, MasksOfAllParticipantsSumToZero) {
  random::EnsureInitialized();
  for (std::size_t n : {2u, 3u, 4u}) {
    std::vector<Party> parties;
    for (std::size_t i = 0; i < n; ++i) parties.push_back(NewParty());
    const SessionNonce nonce = NewNonce();
    const std::size_t len = 1001;
    std::vector<std::vector<Elem>> masked(n, std::vector<Elem>(len, 0));
    std::vector<Elem> scratch;
    for (std::size_t i = 0; i < n; ++i) {
      auto pairs = MasksOf(parties, i, nonce);
      ApplyMasks(pairs, 77, masked[i], scratch);
    }
    std::size_t zeros_in_one = 0;
    for (std::size_t k = 0; k < len; ++k) {
      Elem sum = 0;
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_LT(masked[i][k], field::kPrime);
        sum = field::Add(sum, masked[i][k]);
      }
      EXPECT_EQ(sum, 0u) << "element " << k << " with " << n << " parties";
      zeros_in_one += masked[0][k] == 0;
    }
    // Each single mask is noise, not zero.
    EXPECT_LE(zeros_in_one, 1u);
  }
}

TEST(RebuildMasksTest, StreamsAreDeterministicAndDifferPerBucketAndSession) {
  random::EnsureInitialized();
  Party a = NewParty(), b = NewParty();
  const SessionNonce n1 = NewNonce(), n2 = NewNonce();
  auto s1 = PairSeed(a.secret, a.pub, b.pub, n1, kTarget, kParticipants);
  auto s2 = PairSeed(a.secret, a.pub, b.pub, n2, kTarget, kParticipants);
  ASSERT_TRUE(s1.ok() && s2.ok());
  std::vector<Elem> x(4096), y(4096), z(4096), w(4096), prefix(100);
  MaskStream(*s1, 5, x);
  MaskStream(*s1, 5, y);
  MaskStream(*s1, 6, z);
  MaskStream(*s2, 5, w);
  MaskStream(*s1, 5, prefix);
  EXPECT_EQ(x, y);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), x.begin()));
  std::size_t same_bucket = 0, same_session = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    same_bucket += x[k] == z[k];
    same_session += x[k] == w[k];
    ASSERT_LT(x[k], field::kPrime);
  }
  EXPECT_LE(same_bucket, 1u);
  EXPECT_LE(same_session, 1u);
  // Roughly uniform: the top bit of a 31-bit element is set about half the time.
  std::size_t high = 0;
  for (Elem e : x) high += e >> 30;
  EXPECT_GT(high, 4096u / 2 - 200);
  EXPECT_LT(high, 4096u / 2 + 200);
}

}  // namespace
}  // namespace s3oram::serverd::rebuild
