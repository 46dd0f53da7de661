// End to end over three real s3oram-serverd processes on 127.0.0.1: every
// access goes through the wire protocol, the share files and the SMP rounds.
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "oramcore/math/elem_packing.h"
#include "oramcore/math/field.h"
#include "oramcore/wire/transport.h"
#include "tests/integration/cluster_fixture.h"
#include "tests/support/test_scale.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::FastRetryOptions;
using testing::SmallParams;
using testing::StartCluster;
using testing::TempDir;

using testing::Content;

class Workload {
 public:
  Workload(OramClient& client, std::mt19937_64& rng) : c_(&client), rng_(rng) {}

  // One random access; checks the returned (previous) content against the model.
  void Step(double write_fraction) {
    const std::uint64_t id = rng_() % c_->params().capacity_blocks;
    const bool write = std::uniform_real_distribution<double>(0, 1)(rng_) < write_fraction;
    std::vector<std::uint8_t> data;
    std::uint64_t tag = rng_();
    if (write) data = Content(c_->block_bytes(), id, tag);
    auto r = c_->Access(write ? AccessOp::kWrite : AccessOp::kRead, id, data);
    ASSERT_TRUE(r.ok()) << "access " << done_ << ": " << r.status().ToString();
    auto it = model_.find(id);
    const auto expect = it == model_.end() ? std::vector<std::uint8_t>(c_->block_bytes(), 0)
                                           : Content(c_->block_bytes(), id, it->second);
    ASSERT_EQ(r.value(), expect) << "block " << id << " at access " << done_;
    ++verified_;
    if (write) model_[id] = tag;
    ++done_;
  }
  // Reads every block and compares with the model.
  void VerifyAll() {
    for (std::uint64_t id = 0; id < c_->params().capacity_blocks; ++id) {
      auto r = c_->Read(id);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      auto it = model_.find(id);
      const auto expect = it == model_.end() ? std::vector<std::uint8_t>(c_->block_bytes(), 0)
                                             : Content(c_->block_bytes(), id, it->second);
      ASSERT_EQ(r.value(), expect) << "block " << id;
      ++verified_;
    }
  }
  std::uint64_t verified() const { return verified_; }
  // Goes on with another client of the same filesystem (reopened).
  void Rebind(OramClient& client) { c_ = &client; }

 private:
  OramClient* c_;
  std::mt19937_64& rng_;
  std::unordered_map<std::uint64_t, std::uint64_t> model_;
  std::uint64_t verified_ = 0;
  std::uint64_t done_ = 0;
};

// 20,000 accesses in the release build (5,000 under the sanitizers).
TEST(ClusterTest, LongMixedWorkloadVerified) {
  const int accesses = testing::ScaledForBuild(12000, 3, 4000);
  auto fs = testing::MakeFs(SmallParams(/*block_bytes=*/256, /*A=*/8, /*H=*/5));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  auto client = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto rng = testing::SeededRng();
  Workload w(**client, rng);
  for (int i = 0; i < accesses; ++i) {
    w.Step(0.5);
    if (::testing::Test::HasFatalFailure()) return;
  }
  w.VerifyAll();
  EXPECT_GE((*client)->stats().evictions, 50u);
  EXPECT_GE(w.verified(), static_cast<std::uint64_t>(accesses));
  EXPECT_TRUE((*client)->position_map().CheckInvariants().ok());
  // Every server agrees on the number of evictions applied.
  for (const auto& r : (*client)->QueryServers(std::chrono::milliseconds(5000))) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.reply.applied_evictions, (*client)->counters().ne);
  }
  // The work counters behind `s3oram bench`'s breakdown: every server did one
  // retrieve and one root write per access (and one for the final reads), and
  // the client accounted time to every phase. A server counts every request
  // it handles, and a request the client resent after a silence (a busy
  // machine) is handled again, so each count may exceed the client's by at
  // most the client's resends.
  const std::uint64_t total = (*client)->stats().accesses;
  const std::uint64_t resends = (*client)->transport_stats().resends;
  for (const auto& r : (*client)->QueryServerStats(std::chrono::milliseconds(5000))) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_GE(r.reply.retrieves, total);
    EXPECT_LE(r.reply.retrieves, total + resends);
    EXPECT_GE(r.reply.root_writes, total);  // + a repair after Open
    EXPECT_GE(r.reply.commits, (*client)->stats().evictions);
    EXPECT_LE(r.reply.commits, (*client)->stats().evictions + resends);
    EXPECT_GT(r.reply.busy_us, 0u);
  }
  const AccessTimings& t = (*client)->stats().timings;
  EXPECT_GT(t.client_compute_ns, 0u);
  EXPECT_GT(t.retrieve_wait_ns, 0u);
  EXPECT_GT(t.root_write_wait_ns, 0u);
  EXPECT_GT(t.state_commit_ns, 0u);
  EXPECT_GT(t.eviction_prepare_wait_ns, 0u);
  EXPECT_GE(t.eviction_ns, t.eviction_prepare_wait_ns + t.eviction_commit_wait_ns);
}

// More than three servers: ℓ = 4 and ℓ = 5 (t = 1 for both: one and two
// servers of redundancy for the degree-2 answers): accesses and evictions over every
// server's shares and SMP rounds, checked against a model, then again after
// the client reopens the state.
class ClusterServersTest : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(ClusterServersTest, MoreServersServeAccessesAndEvictions) {
  const std::uint32_t servers = GetParam();
  OramParams params = SmallParams(/*block_bytes=*/256, /*A=*/8, /*H=*/5);
  params.parties = servers;
  params.threshold = kPrivacyThreshold;
  const int accesses = testing::ScaledForBuild(1500, 3, 600);
  auto fs = testing::MakeFs(params);
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  ASSERT_EQ(cluster->endpoints().size(), servers);
  auto rng = testing::SeededRng();
  std::optional<Workload> w;
  {
    auto client = testing::TestOpen(state, FastRetryOptions());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    EXPECT_EQ((*client)->params().parties, servers);
    w.emplace(**client, rng);
    for (int i = 0; i < accesses; ++i) {
      w->Step(0.5);
      if (::testing::Test::HasFatalFailure()) return;
    }
    w->VerifyAll();
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_GE((*client)->stats().evictions, 10u);
    const auto reports = (*client)->QueryServers(std::chrono::milliseconds(5000));
    ASSERT_EQ(reports.size(), servers);
    for (const auto& r : reports) {
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      EXPECT_EQ(r.reply.applied_evictions, (*client)->counters().ne) << r.endpoint;
    }
    ASSERT_TRUE((*client)->Close().ok());
  }
  // Reopened (a new epoch; the same shares): every block reads back as the
  // model says.
  auto again = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  w->Rebind(**again);
  w->VerifyAll();
  std::printf(
      "[ servers  ] %u servers (t = %u): %d accesses, %llu evictions, %llu blocks "
      "verified (the last %llu after reopening)\n",
      servers, kPrivacyThreshold, accesses,
      static_cast<unsigned long long>((*again)->counters().ne),
      static_cast<unsigned long long>(w->verified()),
      static_cast<unsigned long long>((*again)->params().capacity_blocks));
}

INSTANTIATE_TEST_SUITE_P(FourAndFive, ClusterServersTest, ::testing::Values(4u, 5u),
                         [](const ::testing::TestParamInfo<std::uint32_t>& param) {
                           return std::to_string(param.param) + "Servers";
                         });

TEST(ClusterTest, ServerShutsDownCleanlyOnSigterm) {
  auto fs = testing::MakeFs(SmallParams(64, 4, 3));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  std::vector<std::uint8_t> block(64, 0x42);
  {
    auto c = testing::TestOpen(state, FastRetryOptions());
    ASSERT_TRUE(c.ok());
    for (std::uint64_t id = 0; id < 10; ++id) ASSERT_TRUE((*c)->Write(id, block).ok());
  }
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(cluster->Kill(i, SIGTERM).ok());
    const int status = cluster->last_wait_status();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "server " << i << " did not exit cleanly (wait status " << status << ")";
    {
      const Status restarted = cluster->Restart(i);
      ASSERT_TRUE(restarted.ok()) << restarted.ToString();
    }
  }
  auto c = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (std::uint64_t id = 0; id < 10; ++id) {
    auto r = (*c)->Read(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value(), block);
  }
}

TEST(ClusterTest, StatePersistsAcrossClientRestart) {
  auto fs = testing::MakeFs(SmallParams(100, 4, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  auto rng = testing::SeededRng();
  std::unordered_map<std::uint64_t, std::uint64_t> tags;
  {
    auto client = testing::TestOpen(state, FastRetryOptions());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    for (std::uint64_t id = 0; id < config.params.capacity_blocks; ++id) {
      tags[id] = rng();
      ASSERT_TRUE((*client)->Write(id, Content(100, id, tags[id])).ok());
    }
    ASSERT_TRUE((*client)->Sync().ok());
  }
  auto client = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  for (std::uint64_t id = 0; id < config.params.capacity_blocks; ++id) {
    auto r = (*client)->Read(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value(), Content(100, id, tags[id])) << "block " << id;
  }
}

// One round trip per access: each access's root write travels with the next
// retrieval, so a block read (or rewritten) right after it was written is
// found in the root slot its deferred write fills, and Sync sends the last one.
TEST(ClusterTest, BlockAccessedRightAfterItsWriteIsReadFromTheDeferredRootWrite) {
  auto fs = testing::MakeFs(SmallParams(100, 4, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  {
    auto client = testing::TestOpen(state, FastRetryOptions());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    const BlockId x = 3;
    for (std::uint64_t round = 0; round < 12; ++round) {  // crosses three evictions (A = 4)
      ASSERT_TRUE((*client)->Write(x, Content(100, x, 2 * round)).ok());
      auto r = (*client)->Read(x);  // the write above is still deferred
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(*r, Content(100, x, 2 * round)) << "round " << round;
      // Rewrite it while the read's root write (the same content) is deferred.
      auto w = (*client)->Access(AccessOp::kWrite, x, Content(100, x, 2 * round + 1));
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      ASSERT_EQ(*w, Content(100, x, 2 * round)) << "round " << round;
      if (round % 5 == 4) {
        ASSERT_TRUE((*client)->Sync().ok());
      }
    }
    // Nothing of the transport went to waste: without evictions between,
    // k accesses after a Sync are k requests per server.
    ASSERT_TRUE((*client)->Sync().ok());
    for (int i = 0; i < 4 && (*client)->counters().nr != 0; ++i) {  // to just after an eviction
      ASSERT_TRUE((*client)->Read(x).ok());
      ASSERT_TRUE((*client)->Sync().ok());
    }
    ASSERT_EQ((*client)->counters().nr, 0u);
    const std::uint64_t ne = (*client)->counters().ne;
    // Bytes of requests, resends (a busy machine) left out.
    auto requested = [&] {
      const TransportStats& t = (*client)->transport_stats();
      return t.bytes_sent - t.bytes_resent;
    };
    const std::uint64_t sent = requested();
    ASSERT_TRUE((*client)->Read(x).ok());
    const std::uint64_t one_retrieve = requested() - sent;
    ASSERT_TRUE((*client)->Read(x).ok());
    const std::uint64_t combined = requested() - sent - one_retrieve;
    ASSERT_EQ((*client)->counters().ne, ne);
    // The second access carried the first one's root write: m more elements
    // per server but server 0, which gets their seed (wire::ShareSeed), and no
    // request of its own.
    EXPECT_EQ(combined - one_retrieve,  // slot, count, share seed, shares packed at 31 bits
              3 * (4 + 4 + 36) + 2 * wire::PackedElemBytes(config.params.elems_per_slot()));
  }
  auto client = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto r = (*client)->Read(3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, Content(100, 3, 23));
}

// Update is a read-modify-write in one access: the modifier sees the block's
// current content (zeros if never written), the result is stored and
// returned, and on the wire it is one request per server like any access.
TEST(ClusterTest, UpdateIsOneAccessThatRewritesTheBlockItRead) {
  auto fs = testing::MakeFs(SmallParams(100, 4, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  auto rng = testing::SeededRng();
  auto client = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<std::vector<std::uint8_t>> model(config.params.capacity_blocks,
                                               std::vector<std::uint8_t>(100, 0));
  for (int i = 0; i < 60; ++i) {  // crosses evictions (A = 4)
    const BlockId id = rng() % 8;
    const std::size_t at = rng() % 100;
    const auto value = static_cast<std::uint8_t>(rng());
    std::vector<std::uint8_t> seen;
    auto r = (*client)->Update(id, [&](std::span<std::uint8_t> b) {
      seen.assign(b.begin(), b.end());
      b[at] = value;
    });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(seen, model[id]) << "update " << i << " of block " << id;
    model[id][at] = value;
    EXPECT_EQ(*r, model[id]);
  }
  // On the wire an update is a read: from the same point of the eviction
  // cycle (just after one, after a Sync), the second access of a pair sends
  // the same bytes whether it reads or updates.
  auto second_access_bytes = [&](bool update) -> std::uint64_t {
    EXPECT_TRUE((*client)->Sync().ok());
    for (int i = 0; i < 4 && (*client)->counters().nr != 0; ++i) {
      EXPECT_TRUE((*client)->Read(1).ok());
      EXPECT_TRUE((*client)->Sync().ok());
    }
    EXPECT_EQ((*client)->counters().nr, 0u);
    EXPECT_TRUE((*client)->Read(1).ok());
    // Bytes of requests, resends (a busy machine) left out.
    auto requested = [&] {
      const TransportStats& t = (*client)->transport_stats();
      return t.bytes_sent - t.bytes_resent;
    };
    const std::uint64_t sent = requested();
    if (update) {
      EXPECT_TRUE((*client)->Update(2, [](std::span<std::uint8_t> b) { b[0] ^= 1; }).ok());
      model[2][0] ^= 1;
    } else {
      EXPECT_TRUE((*client)->Read(2).ok());
    }
    return requested() - sent;
  };
  EXPECT_EQ(second_access_bytes(true), second_access_bytes(false));
  ASSERT_TRUE((*client)->Sync().ok());
  (*client).reset();  // closes the client (releases the lease)
  auto reopened = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  for (BlockId id = 0; id < 8; ++id) {
    auto r = (*reopened)->Read(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, model[id]) << "block " << id;
  }
}

TEST(ClusterTest, ServerKilledAndRestartedBetweenAccesses) {
  // A kill during an eviction leaves the two other servers waiting for the
  // dead one's shares until their peer timeout: a short one keeps the fifteen
  // kills from costing minutes (a slow peer only costs a new attempt).
  auto fs = testing::MakeFs(SmallParams(128, 4, 4), /*peer_timeout_ms=*/3000);
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  auto client = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto rng = testing::SeededRng();
  Workload w(**client, rng);
  for (int round = 0; round < 12; ++round) {
    // Vary where in the eviction cycle the kill lands.
    const int steps = 1 + static_cast<int>(rng() % 13);
    for (int i = 0; i < steps; ++i) {
      w.Step(0.6);
      if (::testing::Test::HasFatalFailure()) return;
    }
    const std::size_t victim = rng() % 3;
    ASSERT_TRUE(cluster->Kill(victim, SIGKILL).ok());
    {
      const Status restarted = cluster->Restart(victim);
      ASSERT_TRUE(restarted.ok()) << restarted.ToString();
    }
  }
  // Killed while the client is mid-access: the client resends until the server is back.
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(cluster->Kill(round % 3, SIGKILL).ok());
    auto pending = std::async(std::launch::async, [&] { w.Step(0.5); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_TRUE(cluster->Restart(round % 3).ok());
    pending.get();
    if (::testing::Test::HasFatalFailure()) return;
  }
  for (int i = 0; i < 100; ++i) {
    w.Step(0.5);
    if (::testing::Test::HasFatalFailure()) return;
  }
  w.VerifyAll();
  EXPECT_GE((*client)->stats().evictions, 10u);
}

// ServerSet::Wait over the network (wire/server_set.h): with server 1
// stopped (SIGSTOP), kEach gives servers 0 and 2's answers to every request
// and server 1's silence, named; kEvery fails every request for every
// server, naming server 1. With a long deadline, server 1 is found down by a
// liveness check, and the calls after that fail at once for it. Resumed, it
// counts as up again by itself, and every server answers both ways.
TEST(ClusterTest, EachServerOnItsOwnAnswersBesideAStoppedOne) {
  auto fs = testing::MakeFs(SmallParams(128, 4, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  auto client_key = LoadCurveKeypair(cluster->client_key_file());
  ASSERT_TRUE(client_key.ok());
  auto set =
      NetworkServerSet::Connect(cluster->endpoints(), cluster->server_public_keys(), *client_key);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  wire::Header h = testing::HeaderFromState(state);
  // STATUS and LEASE_QUERY to every server, each call under new seqs (a
  // late reply to an earlier call is never taken for an answer).
  std::vector<std::vector<std::vector<std::uint8_t>>> frames;
  frames.reserve(16);
  auto ask = [&](ServerSet::Wait wait, std::chrono::milliseconds deadline) {
    std::vector<ServerSet::RequestView> views;
    const std::pair<wire::Body, wire::MessageType> requests[] = {
        {wire::StatusRequest{}, wire::MessageType::kStatusReply},
        {wire::LeaseQueryRequest{}, wire::MessageType::kLeaseReply}};
    for (const auto& [body, expected] : requests) {
      ++h.seq;
      frames.emplace_back(3, wire::Encode(h, body));
      views.push_back({h, expected, &frames.back()});
    }
    return (*set)->ExchangeAnswers({0, 1, 2}, views, TransportOptions{deadline / 2, deadline},
                                   wait);
  };
  const std::string& stopped = cluster->endpoints()[1];
  ASSERT_TRUE(cluster->Kill(1, SIGSTOP).ok());
  struct Resume {
    cluster::LocalCluster& c;
    ~Resume() { (void)c.Kill(1, SIGCONT); }
  } resume{*cluster};

  const auto each = ask(ServerSet::Wait::kEach, std::chrono::milliseconds(1500));
  ASSERT_EQ(each.size(), 2u);
  for (std::size_t r = 0; r < each.size(); ++r) {
    ASSERT_EQ(each[r].size(), 3u);
    for (std::size_t k : {0, 2}) {
      ASSERT_TRUE(each[r][k].reply.ok())
          << "request " << r << ", server " << k << ": " << each[r][k].reply.status().ToString();
      EXPECT_EQ(each[r][k].reply->header.type,
                r == 0 ? wire::MessageType::kStatusReply : wire::MessageType::kLeaseReply);
    }
    ASSERT_FALSE(each[r][1].reply.ok());
    EXPECT_TRUE(IsSilence(each[r][1].reply.status())) << each[r][1].reply.status().ToString();
    EXPECT_NE(each[r][1].reply.status().message().find(stopped), std::string::npos)
        << each[r][1].reply.status().ToString();
  }

  const auto every = ask(ServerSet::Wait::kEvery, std::chrono::milliseconds(1500));
  ASSERT_EQ(every.size(), 2u);
  for (std::size_t r = 0; r < every.size(); ++r) {
    for (std::size_t k = 0; k < 3; ++k) {
      ASSERT_FALSE(every[r][k].reply.ok()) << "request " << r << ", server " << k;
      EXPECT_NE(every[r][k].reply.status().message().find(stopped), std::string::npos)
          << every[r][k].reply.status().ToString();
    }
  }

  // Failure detection (wire/liveness_monitor.h): with a deadline of a
  // minute, the stopped server is checked and found down (within about 5 s),
  // and the call fails naming it as down (not as silent past the deadline).
  const auto down = ask(ServerSet::Wait::kEvery, std::chrono::minutes(1));
  ASSERT_EQ(down.size(), 2u);
  const std::string down_says = "down: server 1 (" + stopped + ") is down since ";
  for (std::size_t k = 0; k < 3; ++k) {
    ASSERT_FALSE(down[0][k].reply.ok()) << "server " << k;
    EXPECT_TRUE(IsSilence(down[0][k].reply.status())) << down[0][k].reply.status().ToString();
    EXPECT_NE(down[0][k].reply.status().message().find(down_says), std::string::npos)
        << down[0][k].reply.status().ToString();
    EXPECT_NE(down[0][k].reply.status().message().find("liveness check"), std::string::npos)
        << down[0][k].reply.status().ToString();
  }
  ASSERT_TRUE((*set)->Down(1).has_value());
  EXPECT_FALSE((*set)->Down(0).has_value());
  EXPECT_FALSE((*set)->Down(2).has_value());
  // Known down: the next call fails at once, sending nothing to anyone.
  const std::uint64_t sent_before = (*set)->stats().bytes_sent;
  const auto at_once = ask(ServerSet::Wait::kEvery, std::chrono::minutes(10));
  EXPECT_EQ((*set)->stats().bytes_sent, sent_before) << "requests were sent to a known-down set";
  for (std::size_t k = 0; k < 3; ++k) {
    ASSERT_FALSE(at_once[1][k].reply.ok()) << "server " << k;
    EXPECT_NE(at_once[1][k].reply.status().message().find(down_says), std::string::npos)
        << at_once[1][k].reply.status().ToString();
  }
  // Each on its own: the others answer, the down one fails at once.
  const auto each_down = ask(ServerSet::Wait::kEach, std::chrono::minutes(10));
  for (std::size_t r = 0; r < each_down.size(); ++r) {
    EXPECT_TRUE(each_down[r][0].reply.ok() && each_down[r][2].reply.ok()) << "request " << r;
    ASSERT_FALSE(each_down[r][1].reply.ok());
    EXPECT_NE(each_down[r][1].reply.status().message().find(down_says), std::string::npos)
        << each_down[r][1].reply.status().ToString();
  }

  // Resumed: the monitor's next check finds it (it checks every 0.5 s; the
  // wait is bounded), and every server answers again, both ways.
  ASSERT_TRUE(cluster->Kill(1, SIGCONT).ok());
  for (int i = 0; i < 600 && (*set)->Down(1).has_value(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE((*set)->Down(1).has_value())
      << "server 1 still counts as down a minute after SIGCONT";
  for (ServerSet::Wait wait : {ServerSet::Wait::kEach, ServerSet::Wait::kEvery}) {
    const auto all = ask(wait, std::chrono::milliseconds(30000));
    for (std::size_t r = 0; r < all.size(); ++r) {
      for (std::size_t k = 0; k < 3; ++k) {
        EXPECT_TRUE(all[r][k].reply.ok())
            << "request " << r << ", server " << k << ": " << all[r][k].reply.status().ToString();
      }
    }
  }
}

// The quick reads (STATUS, LEASE_QUERY, BACKUP_LIST, STATS) are answered
// while the server's worker is held inside another request (the fault hold
// at "server.serve" keeps it there while a file exists, as an access
// reading cold buckets from a busy disk would for seconds): only the
// serving loop can answer them then, from the state before the held
// request. A client's quick read sent behind its own held request waits for
// it (a client's requests are answered in the order it sent them): its
// LEASE_QUERY behind its LEASE_ACQUIRE sees the lease it took.
TEST(ClusterTest, QuickReadsAreAnsweredWhileTheWorkerIsHeld) {
  auto fs = testing::MakeFs(SmallParams(128, 4, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  const std::string hold = dir.Sub("hold");
  ASSERT_TRUE(cluster->Kill(0, SIGTERM).ok());
  ASSERT_TRUE(cluster->Restart(0, {"S3ORAM_FAULT=server.serve?" + hold}).ok());
  auto client_key = LoadCurveKeypair(cluster->client_key_file());
  ASSERT_TRUE(client_key.ok());
  auto connect = [&] {
    return NetworkServerSet::Connect({cluster->endpoints()[0]}, {cluster->server_public_keys()[0]},
                                     *client_key);
  };
  auto held = connect();
  auto asking = connect();
  ASSERT_TRUE(held.ok() && asking.ok());
  wire::Header h = testing::HeaderFromState(state);
  auto next = [&] {
    ++h.seq;
    return h;
  };
  { std::ofstream(hold) << "held\n"; }

  // Connection 1: a LEASE_ACQUIRE under a new epoch, which the worker takes
  // and is held in, then a LEASE_QUERY.
  std::vector<ServerSet::Outgoing> behind(2);
  wire::Header acquire = next();
  ++acquire.epoch;
  behind[0].header = acquire;
  behind[0].expected_reply = wire::MessageType::kLeaseReply;
  behind[0].frames = {wire::Encode(acquire, wire::LeaseAcquireRequest{false, "test holder"})};
  behind[1].header = next();
  behind[1].header.epoch = acquire.epoch;
  behind[1].expected_reply = wire::MessageType::kLeaseReply;
  behind[1].frames = {wire::Encode(behind[1].header, wire::LeaseQueryRequest{})};
  const TransportOptions patient{std::chrono::seconds(120), std::chrono::seconds(120)};
  auto held_replies = std::async(std::launch::async,
                                 [&] { return (*held)->ExchangeSequence({0}, behind, patient); });
  // Destroyed before the future: a failed assertion releases the worker.
  struct Release {
    std::string file;
    ~Release() { std::filesystem::remove(file); }
  } release{hold};

  // Connection 2: every quick read, answered while the worker is held.
  std::vector<std::vector<std::vector<std::uint8_t>>> frames;
  frames.reserve(4);
  std::vector<ServerSet::RequestView> views;
  const std::pair<wire::Body, wire::MessageType> quick[] = {
      {wire::StatusRequest{}, wire::MessageType::kStatusReply},
      {wire::LeaseQueryRequest{}, wire::MessageType::kLeaseReply},
      {wire::BackupListRequest{}, wire::MessageType::kBackupListReply},
      {wire::StatsRequest{}, wire::MessageType::kStatsReply}};
  for (const auto& [body, expected] : quick) {
    const wire::Header q = next();
    frames.push_back({wire::Encode(q, body)});
    views.push_back({q, expected, &frames.back()});
  }
  const auto answers = (*asking)->ExchangeAnswers(
      {0}, views, TransportOptions{std::chrono::seconds(10), std::chrono::seconds(10)},
      ServerSet::Wait::kEach);
  ASSERT_EQ(answers.size(), 4u);
  for (std::size_t r = 0; r < answers.size(); ++r) {
    ASSERT_TRUE(answers[r][0].reply.ok()) << wire::MessageTypeName(views[r].expected_reply) << ": "
                                          << answers[r][0].reply.status().ToString();
    EXPECT_EQ(answers[r][0].reply->header.type, views[r].expected_reply);
  }
  const auto& status = std::get<wire::StatusReply>(answers[0][0].reply->body);
  EXPECT_TRUE(status.initialized);
  EXPECT_EQ(status.server_index, 0u);
  // Answered from the state before the held LEASE_ACQUIRE.
  EXPECT_EQ(std::get<wire::LeaseReply>(answers[1][0].reply->body).holder_epoch, 0u);
  // The worker is still held, so connection 1 has no answer yet.
  EXPECT_EQ(held_replies.wait_for(std::chrono::seconds(0)), std::future_status::timeout);

  std::filesystem::remove(hold);
  const auto replies = held_replies.get();
  ASSERT_EQ(replies.size(), 2u);
  ASSERT_TRUE(replies[0].ok()) << replies[0].status().ToString();
  EXPECT_TRUE(std::get<wire::LeaseReply>((*replies[0])[0].body).granted);
  ASSERT_TRUE(replies[1].ok()) << replies[1].status().ToString();
  EXPECT_EQ(std::get<wire::LeaseReply>((*replies[1])[0].body).holder_epoch, acquire.epoch);
}

// A server answers STATUS and STATS while it prepares an eviction (it runs
// the PREPARE on a thread of its own), with the eviction's progress. Server 2
// dies at the point where it has queued its first round's shares
// (S3ORAM_FAULT), so servers 0 and 1 wait in the PREPARE for its shares until
// their peer timeout: server 0 is asked meanwhile. Once server 2 is back, the
// eviction finishes and every block reads back.
TEST(ClusterTest, ServerTellsARunningEvictionsProgress) {
  constexpr std::uint32_t kA = 4, kH = 4;
  auto fs = testing::MakeFs(SmallParams(128, kA, kH));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  auto client_key = LoadCurveKeypair(cluster->client_key_file());
  ASSERT_TRUE(client_key.ok());
  auto raw = NetworkServerSet::Connect({cluster->endpoints()[0]},
                                       {cluster->server_public_keys()[0]}, *client_key);
  ASSERT_TRUE(raw.ok());
  auto client = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const std::vector<std::uint8_t> data = Content(128, 1, 1);
  for (std::uint32_t i = 0; i + 1 < kA; ++i) ASSERT_TRUE((*client)->Write(i, data).ok());
  const wire::Header h = testing::HeaderFromState(state);
  ASSERT_TRUE(cluster->Kill(2, SIGKILL).ok());
  ASSERT_TRUE(cluster->Restart(2, {"S3ORAM_FAULT=server.evict_prepare.mid_rounds"}).ok());
  // The access that fills the root's last slot runs eviction 0.
  auto last = std::async(std::launch::async, [&] { return (*client)->Write(kA - 1, data); });

  // Polled until server 0 waits for its peers (it stays there until its
  // peer timeout, or until server 2 comes back below).
  std::optional<wire::StatusReply> seen;
  for (int poll = 0; poll < 1200 && !seen; ++poll) {
    auto r = (*raw)->Exchange({wire::Encode(h, wire::StatusRequest{})}, h,
                              wire::MessageType::kStatusReply, FastRetryOptions().requests);
    ASSERT_TRUE(r.ok()) << "STATUS during the PREPARE: " << r.status().ToString();
    const auto& reply = std::get<wire::StatusReply>(r.value()[0].body);
    if (reply.evicting &&
        reply.evicting_phase == static_cast<std::uint32_t>(wire::EvictPhase::kPeerWait)) {
      seen = reply;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ASSERT_TRUE(seen) << "server 0 never reported waiting for its peers";
  EXPECT_EQ(seen->evicting_eviction, 0u);
  EXPECT_GE(seen->evicting_attempt, 1u);
  EXPECT_EQ(seen->evicting_rounds, kH);
  EXPECT_GE(seen->evicting_round, 1u);
  EXPECT_LE(seen->evicting_round, kH);
  EXPECT_LT(seen->evicting_permille, 1000u);
  EXPECT_STREQ(wire::EvictPhaseName(seen->evicting_phase), "peer wait");
  EXPECT_EQ(seen->applied_evictions, 0u);  // what it said when the PREPARE began
  auto stats = (*raw)->Exchange({wire::Encode(h, wire::StatsRequest{})}, h,
                                wire::MessageType::kStatsReply, FastRetryOptions().requests);
  EXPECT_TRUE(stats.ok()) << "STATS during the PREPARE: " << stats.status().ToString();
  // The backups' reads too (a client opening the filesystem after a crash
  // lists them while the servers finish the dead client's eviction): the
  // list comes back while the same attempt still runs, not after it.
  auto list = (*raw)->Exchange({wire::Encode(h, wire::BackupListRequest{})}, h,
                               wire::MessageType::kBackupListReply, FastRetryOptions().requests);
  EXPECT_TRUE(list.ok()) << "BACKUP_LIST during the PREPARE: " << list.status().ToString();
  auto still = (*raw)->Exchange({wire::Encode(h, wire::StatusRequest{})}, h,
                                wire::MessageType::kStatusReply, FastRetryOptions().requests);
  ASSERT_TRUE(still.ok()) << still.status().ToString();
  const auto& during = std::get<wire::StatusReply>(still.value()[0].body);
  EXPECT_TRUE(during.evicting && during.evicting_eviction == seen->evicting_eviction &&
              during.evicting_attempt == seen->evicting_attempt)
      << "BACKUP_LIST was answered only after the PREPARE of eviction " << seen->evicting_eviction
      << " attempt " << seen->evicting_attempt << " ended (now: evicting " << during.evicting
      << ", eviction " << during.evicting_eviction << " attempt " << during.evicting_attempt << ")";

  // Server 2 died at its fault point; bring it back without one.
  for (int i = 0; i < 600 && !cluster->Exited(2); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(cluster->Exited(2)) << "server 2 did not reach its fault point";
  ASSERT_TRUE(cluster->Restart(2).ok());
  ASSERT_TRUE(last.get().ok());
  // The eviction runs in the background and commits at the end of the next
  // round (again with a new attempt if the first ran out): every block reads
  // back during it and after it, and it counted.
  for (std::uint32_t i = 0; i < 2 * kA; ++i) {
    auto r = (*client)->Read(i % kA);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value(), data) << "block " << i % kA;
  }
  EXPECT_GE((*client)->counters().ne, 1u);
  auto after = (*raw)->Exchange({wire::Encode(h, wire::StatusRequest{})}, h,
                                wire::MessageType::kStatusReply, FastRetryOptions().requests);
  ASSERT_TRUE(after.ok());
  // Eviction 0 is done; the next one (started at the end of the next round)
  // may be running.
  const auto& now = std::get<wire::StatusReply>(after.value()[0].body);
  EXPECT_GE(now.applied_evictions, 1u);
  EXPECT_TRUE(!now.evicting || now.evicting_eviction >= 1u) << now.evicting_eviction;
}

// Busy is not down (issue 45). The client waits for an eviction every
// server still computes (held at a fault hold: "name?file"): every 5 s it
// asks their STATUS and tells what they do (ClientOptions::on_wait). When
// one of them stops answering (SIGSTOP), the wait ends at the next ask,
// naming that server, not at the eviction's deadline (ten minutes here):
// the access that ran it succeeds, the eviction stays due, and the next
// access, which needs it, fails at once naming the server.
TEST(ClusterTest, AWaitForAnEvictionTellsBusyServersFromADownOne) {
  constexpr std::uint32_t kA = 4, kH = 4;
  auto fs = testing::MakeFs(SmallParams(128, kA, kH));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  const std::string hold = dir.Sub("hold");
  { std::ofstream(hold) << "held\n"; }
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(cluster->Kill(i, SIGTERM).ok());
    ASSERT_TRUE(
        cluster->Restart(i, {"S3ORAM_FAULT=server.evict_prepare.first_kernels?" + hold}).ok());
  }
  std::mutex told_mu;
  std::vector<std::string> told;
  ClientOptions options = FastRetryOptions();
  options.requests.deadline = std::chrono::milliseconds(3000);
  options.evictions.deadline = std::chrono::minutes(10);
  options.on_wait = [&](const std::string& what) {
    const std::lock_guard lock(told_mu);
    told.push_back(what);
  };
  // The client's log, to read what the eviction's failure said.
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  auto client = testing::TestOpen(state, options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  // Destroyed before the client (which settles its eviction): nothing
  // stays stopped or held, whatever failed.
  struct Unblock {
    cluster::LocalCluster& c;
    std::string hold;
    ~Unblock() {
      (void)c.Kill(1, SIGCONT);
      std::filesystem::remove(hold);
      auto& sinks = spdlog::default_logger()->sinks();
      sinks.erase(sinks.end() - 1);
    }
  } unblock{*cluster, hold};

  const std::vector<std::uint8_t> data = Content(128, 1, 1);
  // Round 0 fills the root and starts eviction 0 (held on every server);
  // round 1's last access must finish it first.
  auto writes = std::async(std::launch::async, [&]() -> Status {
    for (std::uint32_t i = 0; i < 2 * kA; ++i) {
      S3ORAM_RETURN_IF_ERROR((*client)->Write(i % kA, data));
    }
    return Status::Ok();
  });
  std::string first;
  for (int i = 0; i < 1200 && first.empty(); ++i) {
    {
      const std::lock_guard lock(told_mu);
      if (!told.empty()) first = told.front();
    }
    if (first.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(first.empty()) << "the client never said what it waits for";
  EXPECT_NE(first.find("server 0 is finishing eviction 0 (attempt 1, round 1/4, kernels)"),
            std::string::npos)
      << first;
  EXPECT_NE(first.find("server 2 is finishing eviction 0"), std::string::npos) << first;

  ASSERT_TRUE(cluster->Kill(1, SIGSTOP).ok());
  // Bounded far below the eviction's deadline: the wait ends at the next
  // ask (5 s) plus STATUS's deadline (3 s).
  ASSERT_EQ(writes.wait_for(std::chrono::minutes(3)), std::future_status::ready)
      << "the client still waits for a stopped server";
  const Status written = writes.get();
  EXPECT_TRUE(written.ok()) << written.ToString();
  const std::string said = log.str();
  // Server 1 is named as silent past STATUS's deadline, or as found down by
  // a liveness check (wire/liveness_monitor.h), whichever came first.
  const std::string silent =
      "waiting for eviction 0: server 1 stopped answering: timeout: " + cluster->endpoints()[1] +
      " did not answer within 3000 ms (no STATUS_REPLY)";
  const std::string down = "waiting for eviction 0: server 1 stopped answering: down: server 1 (" +
                           cluster->endpoints()[1] + ") is down since ";
  EXPECT_TRUE(said.find(silent) != std::string::npos || said.find(down) != std::string::npos)
      << said;
  // The next access needs the eviction: it fails, naming server 1.
  const Status next = (*client)->Write(0, data);
  EXPECT_EQ(next.code(), Status::Code::kUnavailable) << next.ToString();
  EXPECT_TRUE(IsSilence(next)) << next.ToString();
  EXPECT_NE(next.message().find(cluster->endpoints()[1]), std::string::npos) << next.ToString();

  // Server 1 back, the hold released: the same client goes on, once its
  // liveness check found server 1 again (it checks every 0.5 s; until then
  // a write fails at once, naming server 1 as down).
  ASSERT_TRUE(cluster->Kill(1, SIGCONT).ok());
  std::filesystem::remove(hold);
  Status resumed = Status::Unavailable("not tried");
  for (int tries = 0; tries < 300 && !resumed.ok(); ++tries) {
    resumed = (*client)->Write(0, data);
    if (!resumed.ok()) {
      ASSERT_TRUE(IsSilence(resumed)) << resumed.ToString();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_TRUE(resumed.ok()) << resumed.ToString();
  for (std::uint32_t i = 0; i < 2 * kA; ++i) {
    auto st = (*client)->Write(i % kA, data);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  auto back = (*client)->Read(0);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
}

// Byte-frequency chi-square of share-file contents, ignoring all-zero slots
// (never written: a zero is the public sharing of the empty tree). Elements are
// little-endian words < 2^31 - 1: bytes 0-2 are uniform on 256 values, byte 3 on 128.
struct ChiSquare {
  double low_bytes = 0;   // 255 degrees of freedom
  double high_byte = 0;   // 127 degrees of freedom
  std::uint64_t samples = 0;
};

// Over the data region [4096, data_end) (the slot digests follow it).
ChiSquare ShareFileChiSquare(const std::string& path, std::size_t slot_bytes,
                             std::size_t data_end) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (buf.size() > data_end) buf.resize(data_end);
  std::vector<double> low(256, 0), high(128, 0);
  std::uint64_t slots = 0;
  // Each distinct slot once: an eviction copies a parent bucket into the
  // sibling unchanged, so the same random share can sit in two slots, and
  // counting its bytes twice inflates the statistic (it made this test fail
  // about once in tens of runs, old builds and new alike).
  std::unordered_set<std::string_view> seen;
  for (std::size_t off = 4096; off + slot_bytes <= buf.size(); off += slot_bytes) {
    bool nonzero = false;
    for (std::size_t k = 0; k < slot_bytes && !nonzero; ++k) nonzero = buf[off + k] != 0;
    if (!nonzero) continue;
    if (!seen.insert(std::string_view(buf.data() + off, slot_bytes)).second) continue;
    ++slots;
    for (std::size_t k = 0; k < slot_bytes; ++k) {
      auto b = static_cast<std::uint8_t>(buf[off + k]);
      if (k % 4 == 3) {
        if (b < 128) high[b] += 1;
        else high[0] += 1e9;  // impossible for a canonical element: fail loudly
      } else {
        low[b] += 1;
      }
    }
  }
  ChiSquare r;
  double n_low = 0, n_high = 0;
  for (double v : low) n_low += v;
  for (double v : high) n_high += v;
  for (double v : low) r.low_bytes += (v - n_low / 256) * (v - n_low / 256) / (n_low / 256);
  for (double v : high) r.high_byte += (v - n_high / 128) * (v - n_high / 128) / (n_high / 128);
  r.samples = slots;
  return r;
}

// Upper 1e-6 quantile of chi-square with k degrees of freedom (Wilson-Hilferty).
double ChiSquareCritical(double k) {
  const double z = 4.753;
  const double h = 2.0 / (9.0 * k);
  return k * std::pow(1 - h + z * std::sqrt(h), 3);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ClusterTest, ShareFilesAreRandomAndHoldNoPlaintext) {
  const std::uint32_t B = 240;
  const std::string marker = "PLAINTEXT-MARKER-s3oram-";
  std::vector<std::uint8_t> pattern(B);
  for (std::size_t i = 0; i < B; ++i) pattern[i] = static_cast<std::uint8_t>(marker[i % marker.size()]);
  std::vector<std::uint8_t> zeros(B, 0);
  std::vector<std::string> share_files;
  std::size_t slot_bytes = 0;
  TempDir dir;
  for (int run = 0; run < 2; ++run) {
    auto cluster = StartCluster(dir.Sub("cluster" + std::to_string(run)));
    ASSERT_TRUE(cluster);
    FsConfig config;
    config.params = SmallParams(B, 4, 4);
    testing::UseCluster(config, *cluster);
    slot_bytes = config.params.slot_bytes();
    const std::string state = dir.Sub("fs" + std::to_string(run) + ".s3oram");
    ASSERT_TRUE(testing::TestInitialize(state, config).ok());
    auto client = testing::TestOpen(state, FastRetryOptions());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    // The same highly structured data, in the same order, in both runs.
    for (int pass = 0; pass < 3; ++pass) {
      for (std::uint64_t id = 0; id < config.params.capacity_blocks; ++id) {
        ASSERT_TRUE((*client)->Write(id, id % 2 ? pattern : zeros).ok());
      }
    }
    client->reset();
    cluster->Stop();
    share_files.push_back(ReadFile(dir.Sub("cluster" + std::to_string(run)) + "/data-0/shares.bin"));
    const std::size_t data_end =
        4096 + config.params.geometry().num_buckets() * config.params.bucket_size * slot_bytes;
    const auto chi = ShareFileChiSquare(dir.Sub("cluster" + std::to_string(run)) + "/data-0/shares.bin",
                                        slot_bytes, data_end);
    std::printf("[ chi2     ] run %d: %llu non-zero slots, low bytes %.1f (critical %.1f), "
                "high byte %.1f (critical %.1f)\n",
                run, static_cast<unsigned long long>(chi.samples), chi.low_bytes,
                ChiSquareCritical(255), chi.high_byte, ChiSquareCritical(127));
    EXPECT_GT(chi.samples, 100u);
    EXPECT_LT(chi.low_bytes, ChiSquareCritical(255));
    EXPECT_LT(chi.high_byte, ChiSquareCritical(127));
    // No plaintext: neither the marker bytes nor their packed field encoding.
    const std::string& shares = share_files.back();
    EXPECT_EQ(shares.find(marker.substr(0, 12)), std::string::npos);
    std::vector<field::Elem> packed(field::ElemsForBytes(B));
    field::Pack(pattern, packed);
    std::string packed_bytes(reinterpret_cast<const char*>(packed.data()), 16);
    EXPECT_EQ(shares.find(packed_bytes), std::string::npos);
  }
  // Two inits with the same data give different share files.
  ASSERT_EQ(share_files[0].size(), share_files[1].size());
  std::size_t differing = 0, nonzero = 0;
  for (std::size_t i = 4096; i < share_files[0].size(); ++i) {
    if (share_files[0][i] || share_files[1][i]) ++nonzero;
    if (share_files[0][i] != share_files[1][i]) ++differing;
  }
  EXPECT_GT(nonzero, 0u);
  EXPECT_GT(double(differing), 0.95 * double(nonzero));
}

TEST(ClusterTest, UnsafeBucketSizeOverflowIsDetectedNotSilent) {
  TempDir dir;
  auto cluster = StartCluster(dir.Sub("cluster"));
  ASSERT_TRUE(cluster);
  FsConfig config;
  config.params = SmallParams(64, 4, 5);
  config.params.bucket_size = 4;  // Z = A: overflows quickly
  config.allow_unsafe = true;
  testing::UseCluster(config, *cluster);
  EXPECT_FALSE(ValidateParams(config.params, false).ok());
  const std::string state = dir.Sub("fs.s3oram");
  ASSERT_TRUE(testing::TestInitialize(state, config).ok());
  auto client = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto rng = testing::SeededRng();
  std::unordered_map<std::uint64_t, std::uint64_t> model;
  bool overflowed = false;
  for (int i = 0; i < 5000 && !overflowed; ++i) {
    const std::uint64_t id = rng() % config.params.capacity_blocks;
    const std::uint64_t tag = rng();
    auto r = (*client)->Access(AccessOp::kWrite, id, Content(64, id, tag));
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Status::Code::kOverflow) << r.status().ToString();
      overflowed = true;
      break;
    }
    auto it = model.find(id);
    EXPECT_EQ(r.value(), it == model.end() ? std::vector<std::uint8_t>(64, 0)
                                           : Content(64, id, it->second));
    model[id] = tag;
  }
  EXPECT_TRUE(overflowed) << "Z = A should overflow within 5000 accesses";
  // Nothing was sent for the failed eviction: the servers are still consistent
  // with the committed state.
  for (const auto& r : (*client)->QueryServers(std::chrono::milliseconds(5000))) {
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(r.reply.applied_evictions, (*client)->counters().ne);
    EXPECT_EQ(r.reply.prepared_eviction, 0u);
  }
}

TEST(ClusterTest, OpenRefusesServersOfAnotherFilesystem) {
  TempDir dir;
  auto cluster = StartCluster(dir.Sub("cluster"));
  ASSERT_TRUE(cluster);
  FsConfig config;
  config.params = SmallParams(64, 4, 3);
  testing::UseCluster(config, *cluster);
  ASSERT_TRUE(testing::TestInitialize(dir.Sub("a.s3oram"), config).ok());
  // A second init on the same servers is refused without overwrite...
  Status again = testing::TestInitialize(dir.Sub("b.s3oram"), config);
  EXPECT_EQ(again.code(), Status::Code::kAlreadyExists) << again.ToString();
  // ...and with overwrite the old state no longer opens.
  ASSERT_TRUE(testing::TestInitialize(dir.Sub("c.s3oram"), config, /*overwrite_servers=*/true).ok());
  auto old = testing::TestOpen(dir.Sub("a.s3oram"), FastRetryOptions());
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("another filesystem"), std::string::npos)
      << old.status().ToString();
  // Servers listed in the wrong order are refused.
  FsConfig swapped = config;
  std::swap(swapped.servers[0], swapped.servers[1]);
  std::swap(swapped.server_keys[0], swapped.server_keys[1]);
  EXPECT_FALSE(testing::TestInitialize(dir.Sub("d.s3oram"), swapped, true).ok());
}

}  // namespace
}  // namespace s3oram

namespace s3oram {
namespace {

// A root write that reached only one server (the client died mid-access) makes
// root slot nr inconsistent, and the root lies on every path. The next client
// must rewrite that slot before it retrieves anything, and requests still
// queued from the dead client must be refused (fenced by the new epoch).
TEST(ClusterTest, PartialRootWriteIsRepairedAndStaleClientFenced) {
  auto fs = testing::MakeFs(SmallParams(64, 8, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  std::vector<std::vector<std::uint8_t>> blocks;
  wire::Header h;
  wire::WriteRootRequest stale;
  auto client_key = LoadCurveKeypair(cluster->client_key_file());
  ASSERT_TRUE(client_key.ok());
  auto raw = NetworkServerSet::Connect({cluster->endpoints()[0]},
                                       {cluster->server_public_keys()[0]}, *client_key);
  ASSERT_TRUE(raw.ok());
  {
    auto a = testing::TestOpen(state, FastRetryOptions());
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    for (std::uint64_t id = 0; id < 5; ++id) {  // 5 < A: no eviction, nr = 5
      blocks.push_back(Content(64, id, 7 * id + 1));
      ASSERT_TRUE((*a)->Write(id, blocks.back()).ok());
    }
    // The client's last request before it dies: a fresh sharing of
    // something, which reaches server 0 only.
    h = testing::HeaderFromState(state);
    stale.slot = static_cast<std::uint32_t>((*a)->counters().nr);
    stale.share.assign(config.params.elems_per_slot(), 12345);
    auto sent = (*raw)->Exchange({wire::Encode(h, stale)}, h, wire::MessageType::kWriteRootReply,
                                 FastRetryOptions().requests);
    ASSERT_TRUE(sent.ok()) << sent.status().ToString();  // the holder's epoch: accepted
  }

  auto b = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (std::uint64_t id = 0; id < 5; ++id) {
    auto r = (*b)->Read(id);
    ASSERT_TRUE(r.ok()) << "block " << id << ": " << r.status().ToString();
    EXPECT_EQ(r.value(), blocks[id]);
  }
  // The same stale request arriving now is refused: client b's epoch is newer.
  h.seq += 100;
  stale.slot = static_cast<std::uint32_t>((*b)->counters().nr);
  auto fenced = (*raw)->Exchange({wire::Encode(h, stale)}, h, wire::MessageType::kWriteRootReply,
                                 FastRetryOptions().requests);
  ASSERT_FALSE(fenced.ok());
  EXPECT_NE(fenced.status().message().find("fenced"), std::string::npos)
      << fenced.status().ToString();
  for (std::uint64_t id = 0; id < 5; ++id) {
    auto r = (*b)->Read(id);
    ASSERT_TRUE(r.ok()) << "block " << id << ": " << r.status().ToString();
    EXPECT_EQ(r.value(), blocks[id]);
  }
}

}  // namespace
}  // namespace s3oram
