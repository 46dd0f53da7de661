// JudgeFreshness against the rule in oramcore/protocol/freshness.h: what
// t + 1 servers agree on decides; one server alone is named, never obeyed.
#include "oramcore/protocol/freshness.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

Counters State(std::uint64_t epoch, std::uint64_t ne) {
  Counters c;
  c.epoch = epoch;
  c.ne = ne;
  return c;
}

ServerFreshness Server(std::uint64_t epoch, std::uint64_t evictions,
                       std::vector<std::uint64_t> generations) {
  return ServerFreshness{epoch, evictions, std::move(generations)};
}

// The reference: count, for each candidate value, how many servers are at or
// above it.
std::uint64_t NaiveAgreed(const std::vector<std::uint64_t>& v, std::size_t k) {
  std::uint64_t best = 0;
  for (std::uint64_t c : v) {
    std::size_t n = 0;
    for (std::uint64_t x : v) n += x >= c;
    if (n >= k) best = std::max(best, c);
  }
  return best;
}

TEST(FreshnessTest, AgreedAtLeastMatchesTheNaiveCount) {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::uint64_t> v(1 + rng() % 6);
    for (auto& x : v) x = rng() % 3 == 0 ? UINT64_MAX - rng() % 2 : rng() % 8;
    for (std::size_t k = 1; k <= v.size() + 1; ++k) {
      ASSERT_EQ(AgreedAtLeast(v, k), k > v.size() ? 0 : NaiveAgreed(v, k)) << "round " << round;
    }
  }
}

TEST(FreshnessTest, CurrentStateIsNotStale) {
  const std::vector<ServerFreshness> s = {Server(5, 3, {1, 2}), Server(5, 4, {1, 2}),
                                          Server(5, 3, {2})};
  auto v = JudgeFreshness(State(5, 3), BackupMark{2, 5}, s, {}, 1);
  EXPECT_FALSE(v.stale) << v.why;
  EXPECT_TRUE(v.inconsistent.empty());
  EXPECT_TRUE(v.warnings.empty());
  EXPECT_EQ(v.agreed_generation, 2u);
}

TEST(FreshnessTest, AMetadataOnlySessionElsewhereMakesTheStateStale) {
  // Another device renamed a file and uploaded generation 3; no tree change.
  const std::vector<ServerFreshness> s = {Server(5, 3, {2, 3}), Server(5, 3, {2, 3}),
                                          Server(5, 3, {2, 3})};
  auto v = JudgeFreshness(State(5, 3), BackupMark{2, 5}, s, {}, 1);
  EXPECT_TRUE(v.stale);
  EXPECT_NE(v.why.find("generation 3"), std::string::npos) << v.why;
  // A state without a mark (made before marks) is judged on the tree only.
  EXPECT_FALSE(JudgeFreshness(State(5, 3), std::nullopt, s, {}, 1).stale);
}

TEST(FreshnessTest, TreeChangesAgreedByTwoServersMakeTheStateStale) {
  const std::vector<ServerFreshness> s = {Server(9, 3, {2}), Server(9, 3, {2}), Server(5, 3, {2})};
  auto v = JudgeFreshness(State(5, 3), BackupMark{2, 5}, s, {}, 1);
  EXPECT_TRUE(v.stale);
  EXPECT_EQ(v.agreed_store_epoch, 9u);
  const std::vector<ServerFreshness> e = {Server(5, 6, {2}), Server(5, 6, {2}), Server(5, 6, {2})};
  EXPECT_TRUE(JudgeFreshness(State(5, 3), BackupMark{2, 5}, e, {}, 1).stale);
  // One eviction ahead is the one a state may have pending.
  const std::vector<ServerFreshness> p = {Server(5, 4, {2}), Server(5, 4, {2}), Server(5, 4, {2})};
  EXPECT_FALSE(JudgeFreshness(State(5, 3), BackupMark{2, 5}, p, {}, 1).stale);
}

TEST(FreshnessTest, OneServerAloneCannotMakeAStateStaleButIsNamed) {
  const std::vector<std::string> names = {"server 0 (a)", "server 1 (b)", "server 2 (c)"};
  const std::vector<ServerFreshness> s = {Server(5, 3, {2}), Server(UINT64_MAX, 3, {2, UINT64_MAX}),
                                          Server(5, 3, {2})};
  auto v = JudgeFreshness(State(5, 3), BackupMark{2, 5}, s, names, 1);
  EXPECT_FALSE(v.stale) << v.why;
  ASSERT_EQ(v.warnings.size(), 2u);
  for (const auto& w : v.warnings) EXPECT_NE(w.find("server 1 (b)"), std::string::npos) << w;
  EXPECT_TRUE(v.inconsistent.empty());
}

TEST(FreshnessTest, OneServerAloneCannotHideAnotherDevicesUse) {
  // Server 2 replays an old view (epoch, evictions and backup list).
  const std::vector<ServerFreshness> s = {Server(9, 8, {2, 3}), Server(9, 8, {2, 3}),
                                          Server(5, 3, {2})};
  auto v = JudgeFreshness(State(5, 3), BackupMark{2, 5}, s, {}, 1);
  EXPECT_TRUE(v.stale);
  EXPECT_EQ(v.agreed_generation, 3u);
}

TEST(FreshnessTest, ALoneServerAheadInEvictionsIsInconsistent) {
  const std::vector<std::string> names = {"server 0 (a)", "server 1 (b)", "server 2 (c)"};
  const std::vector<ServerFreshness> s = {Server(5, 3, {2}), Server(5, 3, {2}), Server(5, 9, {2})};
  auto v = JudgeFreshness(State(5, 3), BackupMark{2, 5}, s, names, 1);
  EXPECT_FALSE(v.stale);
  EXPECT_NE(v.inconsistent.find("server 2 (c)"), std::string::npos) << v.inconsistent;
}

// One eviction ahead is what a pending eviction leaves (it committed on
// one server first); without one pending it is a lone server's claim,
// named with its repair, and t + 1 servers ahead make the state stale.
TEST(FreshnessTest, OneEvictionAheadIsInconsistentUnlessTheStateHasItPending) {
  const std::vector<std::string> names = {"server 0 (a)", "server 1 (b)", "server 2 (c)"};
  const std::vector<ServerFreshness> lone = {Server(5, 3, {2}), Server(5, 4, {2}),
                                             Server(5, 3, {2})};
  auto pending = JudgeFreshness(State(5, 3), BackupMark{2, 5}, lone, names, 1, true);
  EXPECT_FALSE(pending.stale);
  EXPECT_TRUE(pending.inconsistent.empty()) << pending.inconsistent;
  auto none = JudgeFreshness(State(5, 3), BackupMark{2, 5}, lone, names, 1, false);
  EXPECT_FALSE(none.stale) << none.why;
  EXPECT_NE(none.inconsistent.find("server 1 (b)"), std::string::npos) << none.inconsistent;
  EXPECT_NE(none.inconsistent.find("rebuild --server 1 --force"), std::string::npos)
      << none.inconsistent;
  const std::vector<ServerFreshness> two = {Server(5, 4, {2}), Server(5, 4, {2}),
                                            Server(5, 3, {2})};
  EXPECT_TRUE(JudgeFreshness(State(5, 3), BackupMark{2, 5}, two, names, 1, false).stale);
  EXPECT_FALSE(JudgeFreshness(State(5, 3), BackupMark{2, 5}, two, names, 1, true).stale);
}

TEST(FreshnessTest, AGenerationCountsOncePerServer) {
  // A server listing one generation twice is still one holder.
  const std::vector<ServerFreshness> s = {Server(5, 3, {2, 7, 7}), Server(5, 3, {2}),
                                          Server(5, 3, {2})};
  EXPECT_EQ(NewestAgreedGeneration(s, 2), 2u);
  EXPECT_EQ(NewestAgreedGeneration(s, 1), 7u);
  EXPECT_EQ(NewestAgreedGeneration(s, 4), 0u);
}

}  // namespace
}  // namespace s3oram
