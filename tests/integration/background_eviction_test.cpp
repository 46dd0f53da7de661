// Background eviction against a model: random reads and writes race the
// evictions the servers compute beside them (slowed in every SMP round so
// that each one spans many accesses), with the client closed and reopened
// at random points of a round. Every read is checked against an in-memory
// model, the position map's invariants after every access, and the servers'
// counters show that accesses really ran while an eviction was started but
// not committed.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <chrono>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "tests/integration/cluster_fixture.h"
#include "tests/support/test_scale.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::FastRetryOptions;
using testing::SmallParams;

TEST(BackgroundEvictionTest, RandomAccessesRacingEvictionsMatchAModel) {
  constexpr std::uint32_t kA = 8, kH = 4, kBlock = 256;
  const OramParams params = SmallParams(kBlock, kA, kH);
  auto fs = testing::MakeFs(params);
  ASSERT_TRUE(fs);
  {
    const Status st = testing::RestartAllWithFault(*fs, "server.evict_prepare.mid_rounds~15");
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const std::uint64_t ids = 3 * kA;
  testing::BlockModel model;
  auto client = testing::TestOpen(fs->state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();

  const int accesses = static_cast<int>(kA) * testing::ScaledForBuild(24, 4, 8);
  int beside_an_eviction = 0, reopened = 0;
  int reopen_at = static_cast<int>(rng() % kA);
  for (int i = 0; i < accesses; ++i) {
    const BlockId id = rng() % ids;
    const bool write = rng() % 2 == 0;
    ASSERT_TRUE(testing::ModelAccess(**client, model, id, write, rng()))
        << "access " << i << " (seed " << seed << ")";
    const Status inv = (*client)->position_map().CheckInvariants();
    ASSERT_TRUE(inv.ok()) << "access " << i << ": " << inv.ToString();
    // Once the first round is over an eviction has always been started that
    // the servers have not applied: it commits only at the end of the round
    // after its own.
    if (static_cast<std::uint64_t>(i + 1) > kA) {
      for (const auto& s : (*client)->QueryServers(std::chrono::seconds(10))) {
        ASSERT_TRUE(s.status.ok()) << s.status.ToString();
        ASSERT_EQ(s.reply.applied_evictions, (*client)->counters().ne);
      }
      const std::uint64_t started = static_cast<std::uint64_t>(i + 1) / kA;
      if ((*client)->counters().ne < started) ++beside_an_eviction;
    }
    // A clean close commits the eviction in flight; the next Open goes on.
    // Once every five rounds, at a random access of the round.
    if (i % (5 * static_cast<int>(kA)) == reopen_at) {
      reopen_at = static_cast<int>(rng() % kA);
      client->reset();
      client = testing::TestOpen(fs->state, FastRetryOptions());
      ASSERT_TRUE(client.ok()) << client.status().ToString();
      ++reopened;
    }
  }
  std::printf("[ background ] seed %llu: %d accesses, %d ran beside an eviction not yet "
              "committed, %d reopenings\n",
              static_cast<unsigned long long>(seed), accesses, beside_an_eviction, reopened);
  // At most the first round and A accesses after each reopening run with no
  // eviction in flight.
  EXPECT_GE(beside_an_eviction, accesses - static_cast<int>(kA) * (1 + reopened) - reopened);
  for (const auto& [id, want] : model) {
    auto r = (*client)->Read(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value(), want) << "block " << id;
  }
}

// A new state has no eviction time to pace by: during its first eviction the
// client asks the servers' progress and paces by their extrapolation, so the
// round beside that eviction is held back access by access instead of all at
// its end. Servers spend 8 s in round 1 of every eviction, and the test
// spaces the accesses of the round beside it by 150 ms: once the eviction has
// run 1 s the client asks, learns it is in round 1 after e (so at least
// e R = 4e at H = 4), and access n > 4 of the round (A = 16) is due no
// earlier than 4e n / 16 > e. Slower accesses only come later in the same
// long round 1, where the same holds: nothing here needs the machine to be
// fast, only to make 5 accesses in 8 s.
TEST(BackgroundEvictionTest, TheFirstEvictionOfANewStateIsPacedByTheServersProgress) {
  constexpr std::uint32_t kA = 16, kH = 4, kBlock = 256;
  const OramParams params = SmallParams(kBlock, kA, kH);
  auto fs = testing::MakeFs(params);
  ASSERT_TRUE(fs);
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(fs->cluster->Kill(i, SIGTERM).ok());
    const Status st =
        fs->cluster->Restart(i, {"S3ORAM_FAULT=server.evict_prepare.first_round~8000"});
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  auto client = testing::TestOpen(fs->state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  for (BlockId id = 0; id < kA; ++id) {
    ASSERT_TRUE((*client)->Write(id, testing::Content(kBlock, id, 1)).ok());
  }
  // Eviction 0 is under way beside the next round; nothing has paced yet.
  EXPECT_EQ((*client)->stats().timings.eviction_pace_ns, 0u);
  for (BlockId id = 0; id + 1 < kA; ++id) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    auto r = (*client)->Read(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value(), testing::Content(kBlock, id, 1));
  }
  EXPECT_EQ((*client)->counters().ne, 0u) << "eviction 0 committed before its round ended";
  EXPECT_GT((*client)->stats().timings.eviction_pace_ns, 0u)
      << "no access of the round beside the first eviction was paced";
  // The round's last access commits eviction 0; the state keeps its time.
  ASSERT_TRUE((*client)->Read(kA - 1).ok());
  EXPECT_EQ((*client)->counters().ne, 1u);
  client->reset();
  auto store = testing::TestOpenStore(fs->state);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_GT((*store)->eviction_estimate_ms(), 0u);
}

}  // namespace
}  // namespace s3oram
