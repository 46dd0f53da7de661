// AdoptCounter / NextAgreedCounter against the rule in
// oramcore/protocol/counter_agreement.h, and a naive reference: t servers can
// neither push an adopted counter further than kMaxCounterLead nor to the
// end of its range, and are named when they try.
#include "oramcore/protocol/counter_agreement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

std::string Name(std::size_t i) { return "server " + std::to_string(i) + " (test)"; }

// The reference: the largest candidate at least t + 1 values reach, the
// floor at least; then every value within the lead of it.
AdoptedCounter Naive(const std::vector<std::uint64_t>& v, std::uint64_t floor, std::size_t t) {
  AdoptedCounter c;
  c.agreed = floor;
  for (std::uint64_t cand : v) {
    std::size_t n = 0;
    for (std::uint64_t x : v) n += x >= cand;
    if (n >= t + 1) c.agreed = std::max(c.agreed, cand);
  }
  c.value = c.agreed;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const bool within = v[i] <= c.agreed || v[i] - c.agreed <= kMaxCounterLead;
    if (within) {
      c.value = std::max(c.value, v[i]);
    } else {
      c.outliers.push_back(i);
    }
  }
  return c;
}

TEST(CounterAgreementTest, MatchesTheNaiveRule) {
  const std::uint64_t seed = testing::TestSeed();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20000; ++round) {
    const std::size_t parties = 3 + rng() % 3;
    const std::size_t t = 1 + rng() % ((parties - 1) / 2);
    const std::uint64_t base =
        rng() % 4 == 0 ? UINT64_MAX - rng() % (3 * kMaxCounterLead) : rng() % 1000;
    std::vector<std::uint64_t> v;
    for (std::size_t i = 0; i < parties; ++i) {
      switch (rng() % 4) {
        case 0:
          v.push_back(base);
          break;
        case 1:
          v.push_back(base > 5 ? base - rng() % 5 : base);
          break;
        case 2:
          v.push_back(base + std::min<std::uint64_t>(UINT64_MAX - base, rng() % 3));
          break;
        default:
          v.push_back(rng() % 2 ? UINT64_MAX : base / 2 + rng() % (2 * kMaxCounterLead + 2));
      }
    }
    const std::uint64_t floor = rng() % 3 == 0 ? base : rng() % 100;
    const AdoptedCounter got = AdoptCounter(v, floor, t);
    const AdoptedCounter want = Naive(v, floor, t);
    ASSERT_EQ(got.agreed, want.agreed) << "round " << round;
    ASSERT_EQ(got.value, want.value) << "round " << round;
    ASSERT_EQ(got.outliers, want.outliers) << "round " << round;
  }
}

TEST(CounterAgreementTest, OneForgedServerIsNamedAndNotFollowed) {
  // Server 2's lease record says 2^64-2: the next epoch follows the other two.
  const std::vector<std::uint64_t> epochs = {41, 41, UINT64_MAX - 1};
  auto next = NextAgreedCounter(epochs, 40, 1, "epoch", Name);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(next.status().message().find("server 2 (test) reports epoch 18446744073709551614"),
            std::string::npos)
      << next.status().ToString();
  EXPECT_NE(next.status().message().find("s3oram rebuild --server 2 --force"), std::string::npos);
  EXPECT_EQ(next.status().message().find("server 0"), std::string::npos);
}

TEST(CounterAgreementTest, ALoneServerALittleAheadIsBelieved) {
  // A lease granted by server 0 alone before its client stopped.
  const std::vector<std::uint64_t> epochs = {44, 41, 41};
  auto next = NextAgreedCounter(epochs, 41, 1, "epoch", Name);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, 45u);
  // At the edge of the lead, and one past it.
  const std::vector<std::uint64_t> edge = {41 + kMaxCounterLead, 41, 41};
  EXPECT_EQ(*NextAgreedCounter(edge, 0, 1, "epoch", Name), 42 + kMaxCounterLead);
  const std::vector<std::uint64_t> past = {42 + kMaxCounterLead, 41, 41};
  EXPECT_FALSE(NextAgreedCounter(past, 0, 1, "epoch", Name).ok());
}

TEST(CounterAgreementTest, TheClientsOwnValueIsAFloorAndRaisesTheLead) {
  // This state ran elsewhere under a later epoch than t + 1 servers saw.
  const std::vector<std::uint64_t> epochs = {3, 3, 900};
  EXPECT_EQ(*NextAgreedCounter(epochs, 1000, 1, "epoch", Name), 1001u);
  EXPECT_EQ(*NextAgreedCounter(epochs, 0, 1, "epoch", Name), 901u);
}

TEST(CounterAgreementTest, TheLastValueNeedsTPlusOneServersAndNamesNone) {
  const std::vector<std::uint64_t> epochs = {UINT64_MAX, UINT64_MAX, 7};
  auto next = NextAgreedCounter(epochs, 0, 1, "epoch", Name);
  ASSERT_FALSE(next.ok());
  EXPECT_NE(next.status().message().find("2 servers report epoch 2^64-1"), std::string::npos)
      << next.status().ToString();
  EXPECT_EQ(next.status().message().find("rebuild --server"), std::string::npos);
}

}  // namespace
}  // namespace s3oram
