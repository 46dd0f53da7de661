// The client's access path and evictor against the servers' real request
// handlers in this process (tests/support/in_process_cluster.h): no server
// processes, no sockets, so every step runs deterministically, and a server
// that is down, restarted or lying is one call away. The real-process tests
// (tests/integration/) keep covering the network, CURVE and crashes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/rebuild.h"
#include "oramcore/tree/eviction_footprint.h"
#include "tests/integration/cluster_fixture.h"
#include "tests/support/in_process_cluster.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::BlockModel;
using testing::InProcessCluster;
using testing::ModelAccess;

// A filesystem on an in-process cluster: the cluster, its client state, and
// the options that reach the cluster. Small blocks, an eviction every
// kEvictRate accesses.
constexpr std::uint32_t kBlockBytes = 128, kEvictRate = 4, kHeight = 4;

struct InProcessFs {
  testing::TempDir dir;
  std::unique_ptr<InProcessCluster> cluster;
  std::string state;
  ClientOptions options;

  explicit InProcessFs(std::size_t servers = 3, std::uint32_t height = kHeight) {
    InProcessCluster::Options o;
    o.servers = servers;
    o.peer_timeout = std::chrono::milliseconds(2000);
    auto c = InProcessCluster::Create(dir.Sub("servers"), o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return;
    cluster = std::move(c).value();
    FsConfig config;
    config.params = testing::SmallParams(kBlockBytes, kEvictRate, height);
    config.params.parties = static_cast<std::uint32_t>(servers);
    config.servers = cluster->endpoints();
    // No link uses CURVE in process; the state keeps the servers' keys all
    // the same (a rebuild's masks derive from them). The client's is unused.
    config.server_keys = cluster->public_keys();
    config.client_key_file = dir.Sub("unused-client.key");
    state = dir.Sub("fs.s3oram");
    const Status st = OramClient::Initialize(state, config, testing::TestPassphrase(),
                                             testing::TestKdf(), false, cluster->connector());
    EXPECT_TRUE(st.ok()) << st.ToString();
    options.connect = cluster->connector();
    // A request to a server that is down fails at once in process; the
    // deadline only names itself in the message.
    options.requests.deadline = std::chrono::milliseconds(1000);
  }

  Result<std::unique_ptr<OramClient>> Open() {
    return OramClient::Open(state, testing::TestPassphrase(), options);
  }
};

// Fills `model` with writes of `count` blocks through `client` (ids 0..count-1).
::testing::AssertionResult WriteBlocks(OramClient& client, BlockModel& model, BlockId count,
                                       std::uint64_t tag) {
  for (BlockId id = 0; id < count; ++id) {
    auto r = ModelAccess(client, model, id, /*write=*/true, tag);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult ReadAll(OramClient& client, BlockModel& model) {
  std::vector<BlockId> ids;
  for (const auto& [id, bytes] : model) ids.push_back(id);
  for (BlockId id : ids) {
    auto r = ModelAccess(client, model, id, /*write=*/false, 0);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

// A liar that adds a nonzero value (from `seed`) to one element (from
// `seed`) of every retrieval answer, counting each change in `lies`.
InProcessCluster::Liar ChangingRetrievalAnswers(std::uint64_t seed, std::uint64_t& lies) {
  return [seed, &lies](wire::Message& m) {
    if (auto* r = std::get_if<wire::RetrieveReply>(&m.body); r && !r->answer.empty()) {
      const std::size_t at = static_cast<std::size_t>(seed % r->answer.size());
      r->answer[at] = field::Add(r->answer[at], 1 + seed % 1000);
      ++lies;
    }
  };
}

// Whether every server of `cluster` has applied exactly `evictions` evictions.
::testing::AssertionResult EveryServerApplied(InProcessCluster& cluster, std::uint64_t evictions) {
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    const std::uint64_t applied = cluster.applied_evictions(i);
    if (applied != evictions) {
      return ::testing::AssertionFailure()
             << "server " << i << " applied " << applied << " evictions, expected " << evictions;
    }
  }
  return ::testing::AssertionSuccess();
}

// The access path end to end: retrieval, recovery, authentication, re-seal
// and root write, across evictions every kEvictRate accesses; every server
// applies every eviction the client commits, and a reopened client reads
// the same bytes.
TEST(InProcessClientTest, RandomAccessesAcrossEvictionsReadBackWhatWasWritten) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  auto rng = testing::SeededRng();
  BlockModel model;
  {
    auto client = fs.Open();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    for (int i = 0; i < 80; ++i) {
      const BlockId id = rng() % 24;
      const bool write = rng() % 2 == 0 || model.count(id) == 0;
      ASSERT_TRUE(ModelAccess(**client, model, id, write, rng())) << "access " << i;
    }
    ASSERT_TRUE((*client)->Close().ok());  // commits the eviction in flight
    const std::uint64_t evictions = (*client)->counters().ne;
    EXPECT_GE(evictions, 80u / kEvictRate - 1);
    EXPECT_TRUE(EveryServerApplied(*fs.cluster, evictions));
  }
  auto again = fs.Open();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(ReadAll(**again, model));
}

// Server 0 gets the seed of its eviction matrices only once every other
// server has its matrices (ClientSession::Seeding::kSeededLast): for every
// eviction attempt its EVICT_STARTED comes after the others'. Sent together,
// a server sent a few bytes would start the share exchange while the others
// still receive megabytes over a home uplink.
TEST(InProcessClientTest, TheSeededServerStartsAnEvictionAfterTheOthers) {
  InProcessFs fs(4);
  ASSERT_TRUE(fs.cluster);
  std::mutex mu;
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::vector<std::size_t>> started;
  for (std::size_t i = 0; i < 4; ++i) {
    fs.cluster->SetLiar(i, [&, i](wire::Message& m) {
      if (auto* r = std::get_if<wire::EvictStartedReply>(&m.body)) {
        std::lock_guard lock(mu);
        started[{r->eviction, r->attempt}].push_back(i);
      }
    });
  }
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, 5 * kEvictRate, 1));
  ASSERT_TRUE((*client)->Close().ok());
  for (std::size_t i = 0; i < 4; ++i) fs.cluster->SetLiar(i, {});
  std::lock_guard lock(mu);
  ASSERT_GE(started.size(), 4u);
  for (const auto& [attempt, order] : started) {
    ASSERT_EQ(order.size(), 4u) << "eviction " << attempt.first;
    EXPECT_EQ(order.back(), 0u) << "eviction " << attempt.first << ": server 0 started before "
                                << "another server had its matrices";
  }
}

// The evictor's early commit: while eviction 0 is in flight, round 1's first
// root write overwrites root slot 0, where the eviction still reads block 0
// from (the servers copied the root aside). Block 0 is then served from the
// client's own copy (RootCopies); with that copy damaged (a power loss, a
// disk error) it is only in the eviction's result, so the access commits the
// eviction at once (Evictor::FinishInFlight) and reads it from where the
// eviction put it: the right bytes, and every server has applied the
// eviction before the round's end.
TEST(InProcessClientTest, ABlockOnlyInTheEvictionsResultCommitsItEarly) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  // Round 0: blocks 0..A-1 in root slots 0..A-1; its end starts eviction 0.
  ASSERT_TRUE(WriteBlocks(**client, model, kEvictRate, 1));
  ASSERT_EQ((*client)->round(), 1u) << "eviction 0 should be in flight";
  // Round 1 overwrites root slot 0 (the write goes with the next request).
  ASSERT_TRUE(ModelAccess(**client, model, 20, /*write=*/true, 2));
  ASSERT_TRUE(ModelAccess(**client, model, 21, /*write=*/true, 3));
  ASSERT_TRUE(EveryServerApplied(*fs.cluster, 0u));
  // The client's copies of the root's blocks are lost.
  {
    const std::string roots = fs.state + ".roots";
    std::FILE* f = std::fopen(roots.c_str(), "r+b");
    ASSERT_NE(f, nullptr) << roots;
    ASSERT_EQ(std::fseek(f, 0, SEEK_END), 0);
    const long size = std::ftell(f);
    ASSERT_GT(size, 0);
    std::rewind(f);
    const std::vector<char> zeros(static_cast<std::size_t>(size), 0);
    ASSERT_EQ(std::fwrite(zeros.data(), 1, zeros.size(), f), zeros.size());
    ASSERT_EQ(std::fclose(f), 0);
  }
  ASSERT_TRUE(ModelAccess(**client, model, 0, /*write=*/false, 0));
  EXPECT_LT((*client)->counters().nr, kEvictRate) << "the round has not ended";
  EXPECT_TRUE(EveryServerApplied(*fs.cluster, 1u));
  EXPECT_TRUE(ReadAll(**client, model));
}

// The other side of the early commit: a block an access of round 1 took out
// of eviction 0's reach (rewritten to round 1's root) is read from its new
// place, never from where the eviction found it, so nothing commits early
// and the servers see the eviction commit at the round's end, as always.
TEST(InProcessClientTest, ABlockRewrittenBesideTheEvictionIsReadFromItsNewPlace) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, kEvictRate, 1));
  ASSERT_EQ((*client)->round(), 1u) << "eviction 0 should be in flight";
  // Block 0 rewritten in round 1 (taken out of the eviction); once its root
  // write went out (with block 1's access) it is read from its new place,
  // not through the eviction.
  const BlockId ids[] = {0, 1, 0};
  const bool writes[] = {true, false, false};
  for (std::size_t a = 0; a < std::size(ids); ++a) {
    ASSERT_TRUE(ModelAccess(**client, model, ids[a], writes[a], 2 + a)) << "access " << a;
    ASSERT_TRUE(EveryServerApplied(*fs.cluster, 0u)) << "after access " << a;
  }
  EXPECT_TRUE(ReadAll(**client, model));
}

// The plan: a block whose newest copy is a root write not sent yet (the
// write just before, or an earlier item of the same pipelined chunk) is
// read from there, not from its older place in the tree; an item that
// repeats an earlier one's block sees that item's result. Pipelined chunks
// of random reads, writes and updates, with repeats, against a model.
TEST(InProcessClientTest, PipelinedChunksWithRepeatsSeeTheNewestCopyOfEachBlock) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto rng = testing::SeededRng();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
  for (int round = 0; round < 12; ++round) {
    // A write, then at once a read of the same block (its root write pending).
    const BlockId w = rng() % 6;
    ASSERT_TRUE(ModelAccess(**client, model, w, /*write=*/true, rng()));
    ASSERT_TRUE(ModelAccess(**client, model, w, /*write=*/false, 0)) << "round " << round;
    // A chunk of up to kMaxPipelined items over 4 blocks: repeats are certain.
    const std::size_t count = 2 + rng() % (OramClient::kMaxPipelined - 1);
    std::vector<OramClient::BatchItem> items(count);
    std::vector<std::vector<std::uint8_t>> data(count);
    std::vector<std::vector<std::uint8_t>> expected(count);
    const std::uint8_t bump = static_cast<std::uint8_t>(1 + rng() % 200);
    const OramClient::BlockModifier add = [bump](std::span<std::uint8_t> bytes) {
      for (auto& b : bytes) b = static_cast<std::uint8_t>(b + bump);
    };
    for (std::size_t i = 0; i < count; ++i) {
      const BlockId id = rng() % 4;
      items[i].id = id;
      auto& held = model[id];
      switch (rng() % 3) {
        case 0:
          items[i].op = AccessOp::kRead;
          expected[i] = held;
          break;
        case 1:
          items[i].op = AccessOp::kWrite;
          data[i] = testing::Content(kBlockBytes, id, rng());
          items[i].data = data[i];
          expected[i] = held;  // a write returns what the block held before
          held = data[i];
          break;
        default:
          items[i].op = AccessOp::kWrite;
          items[i].modify = &add;
          add(held);
          expected[i] = held;  // an update returns the new content
          break;
      }
    }
    auto results = (*client)->AccessMany(items);
    ASSERT_EQ(results.size(), count);
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_TRUE(results[i].ok())
          << "round " << round << " item " << i << ": " << results[i].status().ToString();
      EXPECT_EQ(*results[i], expected[i])
          << "round " << round << " item " << i << " (block " << items[i].id << ")";
    }
  }
  EXPECT_TRUE(ReadAll(**client, model));
}

// A retrieval answer changed by one server (one element of its degree-2t
// share) recovers to other bytes: the client refuses them (Integrity) and
// returns no byte of them; once the server answers honestly the block reads
// as written.
TEST(InProcessClientTest, AChangedRetrievalAnswerIsRefusedAndNoWrongByteIsReturned) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
  int lies = 0;
  fs.cluster->SetLiar(1, [&](wire::Message& m) {
    if (auto* r = std::get_if<wire::RetrieveReply>(&m.body); r && !r->answer.empty()) {
      r->answer[0] = field::Add(r->answer[0], 1);
      ++lies;
    }
  });
  auto read = (*client)->Read(3);
  EXPECT_GT(lies, 0);
  ASSERT_FALSE(read.ok()) << "a changed answer was accepted";
  EXPECT_EQ(read.status().code(), Status::Code::kIntegrity) << read.status().ToString();
  fs.cluster->SetLiar(1, {});
  EXPECT_TRUE(ReadAll(**client, model));
}

// With four servers (t = 1: any three answers give the degree-2 answer) a
// retrieval answer changed by one server is outvoted: every read returns the
// bytes written, across writes and evictions; each changed answer is counted
// against that server and no other, and the state's problem note names it.
// The liar is then excluded as suspect (durably; not asked again), writes
// and evictions go on with the three others, no catch-up takes it back, and
// `rebuild` replaces its share in full: every block then reads through it
// with another server down. The liar is drawn from the test seed.
TEST(InProcessClientTest, WithFourServersALiarIsOutvotedNamedExcludedAndRebuiltInFull) {
  const std::uint64_t seed = testing::TestSeed();
  const std::size_t liar = seed % 4;
  std::printf("[ seed     ] %llu: server %zu changes its retrieval answers\n",
              static_cast<unsigned long long>(seed), liar);
  InProcessFs fs(4);
  ASSERT_TRUE(fs.cluster);
  BlockModel model;
  {
    auto client = fs.Open();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
    std::uint64_t lies = 0;
    fs.cluster->SetLiar(liar, ChangingRetrievalAnswers(seed, lies));
    const std::uint64_t evictions = (*client)->counters().ne;
    ASSERT_TRUE(ReadAll(**client, model));
    // Every retrieval it answers is changed (and counted): none after the
    // read that found it out.
    const std::uint64_t lies_before = lies;
    ASSERT_TRUE(WriteBlocks(**client, model, 12, 2));
    ASSERT_TRUE(ReadAll(**client, model));
    EXPECT_GT((*client)->counters().ne, evictions + 2) << "the evictions did not go on";
    EXPECT_EQ(lies, lies_before) << "the excluded liar was asked for retrievals again";
    ASSERT_GT(lies, 0u);
    const std::vector<std::uint64_t>& wrong = (*client)->stats().wrong_answers;
    ASSERT_EQ(wrong.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(wrong[i], i == liar ? lies : 0) << "server " << i;
    const auto& note = (*client)->problem_note();
    ASSERT_TRUE(note.has_value());
    EXPECT_FALSE(note->damaged);
    const std::string named = "server " + std::to_string(liar) + " (in-process://server" +
                              std::to_string(liar) + ") answered wrongly";
    EXPECT_NE(note->text.find(named), std::string::npos) << note->text;
    EXPECT_FALSE((*client)->writes_stopped().has_value());
    const auto excluded = (*client)->TakeSnapshot().exclusions;
    ASSERT_EQ(excluded.size(), 1u);
    EXPECT_EQ(excluded[0].server, liar);
    EXPECT_TRUE(excluded[0].suspect);
    EXPECT_NE(excluded[0].reason.find("retrieval answer for an access was wrong"),
              std::string::npos)
        << excluded[0].reason;
    // Honest again, it is still not caught up: none of its buckets is trusted.
    fs.cluster->SetLiar(liar, {});
    auto caught = (*client)->CatchUpExcluded(liar);
    ASSERT_FALSE(caught.ok());
    EXPECT_EQ(caught.status().code(), Status::Code::kFailedPrecondition)
        << caught.status().ToString();
    EXPECT_NE(caught.status().message().find("rebuild it in full"), std::string::npos)
        << caught.status().ToString();
    ASSERT_TRUE((*client)->Close().ok());
  }
  {
    // Durable: the next open leaves it out from the start.
    auto client = fs.Open();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    EXPECT_EQ((*client)->participants().size(), 3u);
    EXPECT_TRUE(ReadAll(**client, model));
    ASSERT_TRUE((*client)->Close().ok());
  }
  RebuildOptions options;
  options.target = liar;
  options.client = fs.options;
  options.verify = false;  // the reads below check it
  auto report = RebuildServer(fs.state, testing::TestPassphrase(), options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_FALSE(report->caught_up) << "a server excluded for lying was caught up";
  // Every block read with another server down: through the rebuilt share.
  const std::size_t other = (liar + 1) % 4;
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->TakeSnapshot().exclusions.empty());
  fs.cluster->SetDown(other, true);
  EXPECT_TRUE(ReadAll(**client, model)) << "a read through the rebuilt server failed";
  for (std::uint64_t w : (*client)->stats().wrong_answers) EXPECT_EQ(w, 0u);
  fs.cluster->SetDown(other, false);
  ASSERT_TRUE((*client)->Close().ok());
}

// With four servers and server 0 (the one seeded while all take part)
// excluded, the lowest participant gets the seeds instead: a round of
// accesses and its eviction upload two full shares and a seed, about two
// thirds of what all four cost (three and a seed), not three full shares.
TEST(InProcessClientTest, WithServerZeroExcludedTheNextParticipantIsSeeded) {
  InProcessFs fs(4);
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
  OramClient& c = **client;
  // Bytes sent per access over four whole rounds (accesses and evictions).
  auto bytes_per_access = [&]() -> double {
    while (c.counters().nr != 0) {
      if (!c.Read(0).ok()) return -1;
    }
    const std::uint64_t before = c.transport_stats().bytes_sent;
    constexpr int kAccesses = 4 * kEvictRate;
    for (int i = 0; i < kAccesses; ++i) {
      auto r = c.Read(static_cast<BlockId>(i % 6));
      if (!r.ok() || *r != model[static_cast<BlockId>(i % 6)]) return -1;
    }
    return static_cast<double>(c.transport_stats().bytes_sent - before) / kAccesses;
  };
  const double all_four = bytes_per_access();
  ASSERT_GT(all_four, 0);
  fs.cluster->SetDown(0, true);
  for (int i = 0; i < 8 && c.TakeSnapshot().exclusions.empty(); ++i) (void)c.Read(1);
  ASSERT_EQ(c.TakeSnapshot().exclusions.size(), 1u);
  ASSERT_EQ(c.session().seeded_party(), 1u);
  const double without_zero = bytes_per_access();
  ASSERT_GT(without_zero, 0);
  std::printf(
      "[ upload   ] %.0f bytes per access with four servers, %.0f with server 0 "
      "excluded\n",
      all_four, without_zero);
  EXPECT_LT(without_zero, 0.8 * all_four) << "server 1 did not get the seeds in server 0's place";
  fs.cluster->SetDown(0, false);
}

// With four servers, a server that reports damaged storage (its stored
// shares failed their digests: an ErrorReply of code kDamaged to the
// retrievals) is excluded as suspect, not a reason to stop writes: every
// read returns the bytes written from the three others, writes and
// evictions go on, the state's problem note does not stop the next open's
// writes, and the exclusion names the damage. With three servers the same
// report stops writes (fail-stop storage: ServerFaultTest).
TEST(InProcessClientTest, WithFourServersAServerReportingDamageIsExcludedAndWritesGoOn) {
  const std::uint64_t seed = testing::TestSeed();
  const std::size_t bad = seed % 4;
  std::printf("[ seed     ] %llu: server %zu reports damaged storage\n",
              static_cast<unsigned long long>(seed), bad);
  InProcessFs fs(4);
  ASSERT_TRUE(fs.cluster);
  BlockModel model;
  std::optional<Result<std::unique_ptr<OramClient>>> first(fs.Open());
  auto& client = *first;
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
  std::uint64_t reports = 0;
  fs.cluster->SetLiar(bad, [&](wire::Message& m) {
    if (std::holds_alternative<wire::RetrieveReply>(m.body)) {
      m.body = wire::ErrorReply{static_cast<std::uint32_t>(Status::Code::kDamaged),
                                "bucket 1 slot 0 failed its digest"};
      ++reports;
    }
  });
  const std::uint64_t evictions = (*client)->counters().ne;
  ASSERT_TRUE(ReadAll(**client, model));
  ASSERT_TRUE(WriteBlocks(**client, model, 12, 2));
  ASSERT_TRUE(ReadAll(**client, model));
  EXPECT_GT(reports, 0u);
  EXPECT_GT((*client)->counters().ne, evictions + 2) << "the evictions did not go on";
  EXPECT_FALSE((*client)->writes_stopped().has_value()) << (*client)->writes_stopped()->ToString();
  const auto& note = (*client)->problem_note();
  EXPECT_FALSE(note.has_value() && note->damaged) << note->text;
  const auto excluded = (*client)->TakeSnapshot().exclusions;
  ASSERT_EQ(excluded.size(), 1u);
  EXPECT_EQ(excluded[0].server, bad);
  EXPECT_TRUE(excluded[0].suspect);
  EXPECT_NE(excluded[0].reason.find("failed its digest"), std::string::npos) << excluded[0].reason;
  fs.cluster->SetLiar(bad, {});
  ASSERT_TRUE((*client)->Close().ok());
  first.reset();
  auto again = fs.Open();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE((*again)->writes_stopped().has_value());
  ASSERT_TRUE(WriteBlocks(**again, model, 4, 3));
  EXPECT_TRUE(ReadAll(**again, model));
  ASSERT_TRUE((*again)->Close().ok());
}

// With four servers a retrieval needs the first three answers: a server
// that lags (its requests held, not answered) does not hold up an access,
// and its answers and root writes come before the next eviction reads the
// root (the evictions go on). No answer is found wrong, and a client opened
// afterwards reads everything back.
TEST(InProcessClientTest, WithFourServersALaggingServerDoesNotHoldUpTheAccesses) {
  InProcessFs fs(4);
  ASSERT_TRUE(fs.cluster);
  BlockModel model;
  {
    auto client = fs.Open();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
    fs.cluster->SetLagging(3, true);
    const std::uint64_t evictions = (*client)->counters().ne;
    ASSERT_TRUE(ReadAll(**client, model));
    ASSERT_TRUE(WriteBlocks(**client, model, 12, 2));
    ASSERT_TRUE(ReadAll(**client, model));
    EXPECT_GT((*client)->counters().ne, evictions + 2) << "the evictions did not go on";
    const std::vector<std::uint64_t>& lagged = (*client)->stats().lagged_answers;
    ASSERT_EQ(lagged.size(), 4u);
    // One retrieval per access: 6 + 12 + 12 accesses, each answered by 0-2.
    EXPECT_GE(lagged[3], 30u);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(lagged[i], 0u) << "server " << i;
    for (std::uint64_t w : (*client)->stats().wrong_answers) EXPECT_EQ(w, 0u);
    fs.cluster->SetLagging(3, false);
    ASSERT_TRUE((*client)->Close().ok());
  }
  auto again = fs.Open();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(ReadAll(**again, model));
  for (std::uint64_t w : (*again)->stats().wrong_answers) EXPECT_EQ(w, 0u);
  EXPECT_TRUE(EveryServerApplied(*fs.cluster, (*again)->counters().ne));
}

// A liar among the three that answer first while the fourth lags: the three
// answers do not verify, so the access waits for the fourth, which outvotes
// the liar. Every read is right and every lie is counted against the liar.
TEST(InProcessClientTest, ALiarAmongTheFirstThreeIsOutvotedByTheLaggingServersAnswer) {
  const std::uint64_t seed = testing::TestSeed();
  const std::size_t liar = seed % 3;
  std::printf("[ seed     ] %llu: server %zu lies, server 3 lags\n",
              static_cast<unsigned long long>(seed), liar);
  InProcessFs fs(4);
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
  std::uint64_t lies = 0;
  fs.cluster->SetLiar(liar, ChangingRetrievalAnswers(seed, lies));
  fs.cluster->SetLagging(3, true);
  ASSERT_TRUE(ReadAll(**client, model));
  ASSERT_TRUE(WriteBlocks(**client, model, 8, 2));
  ASSERT_TRUE(ReadAll(**client, model));
  fs.cluster->SetLiar(liar, {});
  fs.cluster->SetLagging(3, false);
  ASSERT_GT(lies, 0u);
  const std::vector<std::uint64_t>& wrong = (*client)->stats().wrong_answers;
  ASSERT_EQ(wrong.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(wrong[i], i == liar ? lies : 0) << "server " << i;
  EXPECT_FALSE((*client)->writes_stopped().has_value());
}

// A lagging server that fails its held root writes (an error, not found
// down) after the accesses were recorded on the three others: each such
// slot is written again on every server before anything reads the root, so
// its answers are never stale (none is found wrong) and the next eviction's
// check agrees.
TEST(InProcessClientTest, RootWritesALaggingServerFailedAreWrittenAgainOnEveryServer) {
  InProcessFs fs(4);
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
  // At the start of a round, so that the next two accesses do not end it
  // (the eviction would wait for server 3's answers).
  for (int i = 0; i < 8 && (*client)->counters().nr != 0; ++i) {
    ASSERT_TRUE(ModelAccess(**client, model, 5, /*write=*/false, 0));
  }
  ASSERT_EQ((*client)->counters().nr, 0u);
  fs.cluster->SetLagging(3, true);
  // Two accesses: each carries the root write of the access before it to
  // servers 0-2, server 3 holds them.
  ASSERT_TRUE(ModelAccess(**client, model, 0, /*write=*/true, 2));
  ASSERT_TRUE(ModelAccess(**client, model, 1, /*write=*/true, 2));
  // Served at the next access, before its own request, each refused: the
  // slots they wrote stay old on server 3.
  std::uint64_t refused = 0;
  fs.cluster->SetLiar(3, [&refused](wire::Message& m) {
    if (refused < 2 && std::holds_alternative<wire::RetrieveReply>(m.body)) {
      m.body = wire::ErrorReply{static_cast<std::uint32_t>(Status::Code::kIoError),
                                "refused in this test"};
      ++refused;
    }
  });
  fs.cluster->SetLagging(3, false);
  ASSERT_TRUE(ReadAll(**client, model));
  fs.cluster->SetLiar(3, {});
  ASSERT_EQ(refused, 2u);
  ASSERT_TRUE(WriteBlocks(**client, model, 12, 3));
  ASSERT_TRUE(ReadAll(**client, model));
  for (std::uint64_t w : (*client)->stats().wrong_answers) EXPECT_EQ(w, 0u);
  EXPECT_TRUE((*client)->TakeSnapshot().exclusions.empty()) << "a server that answers was excluded";
}

// With four servers, one found down is excluded (durably) and the three
// others go on: accesses, root writes and evictions among them, reads
// right, a reopen with it still down; its shares fall behind. Once it is
// back, a rebuild brings it up to date and takes it back: every server then
// holds every eviction and every block reads back.
TEST(InProcessClientTest, WithFourServersADownServerIsExcludedAndTheOthersGoOn) {
  const std::uint64_t seed = testing::TestSeed();
  const std::size_t down = seed % 4;
  std::printf("[ seed     ] %llu: server %zu goes down\n", static_cast<unsigned long long>(seed),
              down);
  // A tree tall enough that the evictions it misses rewrite less than half
  // of it: it is caught up, not rebuilt in full.
  constexpr std::uint32_t kTallHeight = 9;
  InProcessFs fs(4, kTallHeight);
  ASSERT_TRUE(fs.cluster);
  BlockModel model;
  std::uint64_t excluded_at = 0;
  {
    auto client = fs.Open();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
    fs.cluster->SetDown(down, true);
    ASSERT_TRUE(WriteBlocks(**client, model, 12, 2));
    ASSERT_TRUE(ReadAll(**client, model));
    const auto snapshot = (*client)->TakeSnapshot();
    ASSERT_EQ(snapshot.exclusions.size(), 1u);
    EXPECT_EQ(snapshot.exclusions[0].server, down);
    EXPECT_NE(snapshot.exclusions[0].reason.find("found down since"), std::string::npos)
        << snapshot.exclusions[0].reason;
    excluded_at = snapshot.exclusions[0].since_eviction;
    // Two more evictions among the three.
    const std::uint64_t ne = (*client)->counters().ne;
    while ((*client)->counters().ne < ne + 2) {
      ASSERT_TRUE(WriteBlocks(**client, model, 4, 3));
    }
    ASSERT_TRUE((*client)->Close().ok());
  }
  {
    auto client = fs.Open();  // the excluded server still down
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    EXPECT_TRUE(ReadAll(**client, model));
    for (std::uint64_t w : (*client)->stats().wrong_answers) EXPECT_EQ(w, 0u);
    ASSERT_TRUE((*client)->Close().ok());
  }
  const std::uint64_t down_applied = fs.cluster->applied_evictions(down);
  EXPECT_LE(down_applied, excluded_at + 1);
  fs.cluster->SetDown(down, false);
  RebuildOptions options;
  options.target = down;
  options.client = fs.options;
  options.verify = false;  // the reads below check it, with it among three
  auto report = RebuildServer(fs.state, testing::TestPassphrase(), options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  // Caught up: it kept its store and got only what the evictions since rewrote.
  const std::uint64_t now = fs.cluster->applied_evictions((down + 1) % 4);
  EXPECT_TRUE(report->caught_up);
  EXPECT_EQ(report->caught_up_from, std::min(excluded_at, down_applied));
  const OramParams p = testing::SmallParams(kBlockBytes, kEvictRate, kTallHeight);
  const auto missed = BucketsRewrittenBy(p.geometry(), report->caught_up_from, now);
  EXPECT_EQ(report->buckets_missed,
            static_cast<std::uint64_t>(std::count(missed.begin(), missed.end(), true)));
  EXPECT_GE(report->buckets_sent, report->buckets_missed);
  EXPECT_LT(report->buckets_sent, report->buckets);
  EXPECT_EQ(fs.cluster->applied_evictions(down), now);
  // Another server down: every read now needs the caught-up one's shares.
  // That one is excluded in turn, and caught up too.
  const std::size_t other = (down + 2) % 4;
  {
    auto client = fs.Open();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    EXPECT_TRUE((*client)->TakeSnapshot().exclusions.empty());
    fs.cluster->SetDown(other, true);
    EXPECT_TRUE(ReadAll(**client, model)) << "a read through the caught-up server failed";
    for (std::uint64_t w : (*client)->stats().wrong_answers) EXPECT_EQ(w, 0u);
    ASSERT_TRUE((*client)->Close().ok());
  }
  fs.cluster->SetDown(other, false);
  options.target = other;
  report = RebuildServer(fs.state, testing::TestPassphrase(), options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->caught_up);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->TakeSnapshot().exclusions.empty());
  ASSERT_TRUE(WriteBlocks(**client, model, 2 * kEvictRate, 4));
  EXPECT_TRUE(ReadAll(**client, model));
  for (std::uint64_t w : (*client)->stats().wrong_answers) EXPECT_EQ(w, 0u);
  ASSERT_TRUE((*client)->Close().ok());
  EXPECT_TRUE(EveryServerApplied(*fs.cluster, (*client)->counters().ne));
}

// A catch-up in steps (as a mount runs it, its lock released between
// them): writes and evictions go on between the ranges; the evictions
// between them make buckets already sent stale, and the last pass sends
// those and the root at the counters of that moment. Afterwards the
// caught-up server's shares are current: every block reads with another
// server down.
TEST(InProcessClientTest, ACatchUpInStepsLetsWritesAndEvictionsGoOnBetweenThem) {
  const std::uint64_t seed = testing::TestSeed();
  const std::size_t down = seed % 4;
  std::printf("[ seed     ] %llu: server %zu goes down\n", static_cast<unsigned long long>(seed),
              down);
  constexpr std::uint32_t kTallHeight = 9;
  InProcessFs fs(4, kTallHeight);
  ASSERT_TRUE(fs.cluster);
  BlockModel model;
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
  fs.cluster->SetDown(down, true);
  ASSERT_TRUE(WriteBlocks(**client, model, 12, 2));
  const std::uint64_t missed_from = (*client)->counters().ne;
  while ((*client)->counters().ne < missed_from + 3) {
    ASSERT_TRUE(WriteBlocks(**client, model, 4, 3));
  }
  ASSERT_EQ((*client)->TakeSnapshot().exclusions.size(), 1u);
  fs.cluster->SetDown(down, false);

  std::uint64_t progress_done = 0, progress_total = 0;
  auto run = (*client)->StartCatchUp(
      down,
      [&](std::uint64_t done, std::uint64_t total) {
        EXPECT_LE(done, total);
        progress_done = done;
        progress_total = total;
      },
      /*range_bytes=*/1);  // one bucket per step
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const std::uint64_t started_at = (*client)->counters().ne;
  std::uint64_t steps = 0;
  std::uint64_t tag = 100;
  for (bool done = false; !done; ++steps) {
    ASSERT_LT(steps, 20000u) << "the copy does not end";
    auto step = (*client)->CatchUpStep(**run);
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    done = *step;
    // Between the steps, as a mount's accesses: a write every sixth step,
    // and with them an eviction every kEvictRate writes.
    if (steps % 6 != 0) continue;
    const BlockId id = static_cast<BlockId>((seed + steps) % 18);
    ASSERT_TRUE(ModelAccess(**client, model, id, /*write=*/true, ++tag));
  }
  const std::uint64_t evictions_during_copy = (*client)->counters().ne - started_at;
  EXPECT_GE(evictions_during_copy, 2u) << "too few evictions between the steps to test anything";
  auto report = (*client)->FinishCatchUp(**run);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  std::printf(
      "[ measured ] %llu steps, %llu evictions between them; %llu buckets missed, %llu "
      "sent, %llu in the last pass\n",
      static_cast<unsigned long long>(steps),
      static_cast<unsigned long long>(evictions_during_copy),
      static_cast<unsigned long long>(report->buckets_missed),
      static_cast<unsigned long long>(report->buckets_sent),
      static_cast<unsigned long long>(report->last_pass_buckets));
  EXPECT_TRUE(report->caught_up);
  EXPECT_GE(report->last_pass_buckets, 1u);                 // the root at least
  EXPECT_GT(report->buckets_sent, report->buckets_missed);  // stale ones sent again
  // The copy kept up with the evictions: the last pass, which the accesses
  // wait for, sends fewer buckets than the server missed.
  EXPECT_LT(report->last_pass_buckets, report->buckets_missed);
  EXPECT_EQ(progress_done, progress_total);
  EXPECT_TRUE((*client)->TakeSnapshot().exclusions.empty());
  EXPECT_EQ(fs.cluster->applied_evictions(down), (*client)->counters().ne);
  // Every read now needs the caught-up server's shares.
  const std::size_t other = (down + 1) % 4;
  fs.cluster->SetDown(other, true);
  EXPECT_TRUE(ReadAll(**client, model)) << "a read through the caught-up server failed";
  for (std::uint64_t w : (*client)->stats().wrong_answers) EXPECT_EQ(w, 0u);
  ASSERT_TRUE((*client)->Close().ok());
}

// With four servers, a writable open that finds one down (it does not
// answer the open's questions) excludes it and opens with the other three;
// a read-only open (status) does not exclude anything.
TEST(InProcessClientTest, WithFourServersAnOpenExcludesTheOneThatDoesNotAnswer) {
  const std::uint64_t seed = testing::TestSeed();
  const std::size_t down = seed % 4;
  std::printf("[ seed     ] %llu: server %zu is down at the open\n",
              static_cast<unsigned long long>(seed), down);
  InProcessFs fs(4);
  ASSERT_TRUE(fs.cluster);
  BlockModel model;
  {
    auto client = fs.Open();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
    ASSERT_TRUE((*client)->Close().ok());
  }
  fs.cluster->SetDown(down, true);
  ClientOptions status_options = fs.options;
  status_options.allow_unreachable = true;
  {
    auto shown = OramClient::OpenReadOnly(fs.state, testing::TestPassphrase(), status_options);
    ASSERT_TRUE(shown.ok()) << shown.status().ToString();
    EXPECT_TRUE((*shown)->TakeSnapshot().exclusions.empty()) << "a read-only open excluded";
  }
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const auto exclusions = (*client)->TakeSnapshot().exclusions;
  ASSERT_EQ(exclusions.size(), 1u);
  EXPECT_EQ(exclusions[0].server, down);
  EXPECT_NE(exclusions[0].reason.find("did not answer when this client opened"), std::string::npos)
      << exclusions[0].reason;
  EXPECT_TRUE(ReadAll(**client, model));
  ASSERT_TRUE(WriteBlocks(**client, model, 3 * kEvictRate, 2));
  EXPECT_TRUE(ReadAll(**client, model));
  for (std::uint64_t w : (*client)->stats().wrong_answers) EXPECT_EQ(w, 0u);
}

// With four servers, root writes that go alone (a sync's WRITE_ROOTs, or
// the rewrite of a slot a failed exchange may have reached) to a server
// found down: it is excluded and they go again, afresh, to the three others,
// so the sync succeeds and every block reads back.
TEST(InProcessClientTest, WithFourServersASyncThatFindsAServerDownExcludesItAndSucceeds) {
  const std::uint64_t seed = testing::TestSeed();
  const std::size_t down = seed % 4;
  std::printf("[ seed     ] %llu: server %zu is down at the sync\n",
              static_cast<unsigned long long>(seed), down);
  InProcessFs fs(4);
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
  fs.cluster->SetDown(down, true);
  const Status synced = (*client)->Sync();
  ASSERT_TRUE(synced.ok()) << synced.ToString();
  const auto exclusions = (*client)->TakeSnapshot().exclusions;
  ASSERT_EQ(exclusions.size(), 1u);
  EXPECT_EQ(exclusions[0].server, down);
  EXPECT_NE(exclusions[0].reason.find("did not acknowledge the root write"), std::string::npos)
      << exclusions[0].reason;
  EXPECT_TRUE(ReadAll(**client, model));
  ASSERT_TRUE(WriteBlocks(**client, model, 2 * kEvictRate, 2));
  EXPECT_TRUE(ReadAll(**client, model));
}

// A server that is down fails the access at once, naming the server; nothing
// the client had written is lost, and the accesses go on when it returns.
TEST(InProcessClientTest, ADownServerIsNamedAndTheAccessesGoOnWhenItReturns) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, 5, 1));
  fs.cluster->SetDown(2, true);
  const Status st = (*client)->Write(1, testing::Content(kBlockBytes, 1, 99));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("in-process://server2"), std::string::npos) << st.ToString();
  fs.cluster->SetDown(2, false);
  // The refused write may or may not have reached the servers: either
  // version of block 1 is right, so the model forgets it.
  model.erase(1);
  EXPECT_TRUE(ReadAll(**client, model));
  ASSERT_TRUE(WriteBlocks(**client, model, 12, 2));
  EXPECT_TRUE(ReadAll(**client, model));
}

// A read-only open to show the filesystem (s3oram status: allow_stale and
// allow_unreachable) with server 1 down: it opens, holding what servers 0
// and 2 said (STATUS, backups, lease) and server 1's failure, named, and
// judges freshness by the two that answered. Any other open fails naming
// server 1.
TEST(InProcessClientTest, AnOpenForStatusShowsTheServersThatAnswerBesideADownOne) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  {
    auto client = fs.Open();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    BlockModel model;
    ASSERT_TRUE(WriteBlocks(**client, model, 6, 1));
  }
  fs.cluster->SetDown(1, true);
  ClientOptions o = fs.options;
  o.allow_stale = true;
  o.allow_unreachable = true;
  auto shown = OramClient::OpenReadOnly(fs.state, testing::TestPassphrase(), o);
  ASSERT_TRUE(shown.ok()) << shown.status().ToString();
  const OramClient::OpeningViews& v = (*shown)->opened_with();
  ASSERT_EQ(v.reports.size(), 3u);
  ASSERT_EQ(v.leases.size(), 3u);
  ASSERT_EQ(v.backups.size(), 3u);
  for (std::size_t i : {0, 2}) {
    ASSERT_TRUE(v.reports[i].status.ok()) << i << ": " << v.reports[i].status.ToString();
    EXPECT_GT(v.reports[i].reply.applied_seq, 0u) << i;
    ASSERT_TRUE(v.leases[i].ok()) << i << ": " << v.leases[i].status().ToString();
    EXPECT_EQ(v.leases[i]->holder_epoch, 0u) << i;  // released at the close
    EXPECT_TRUE(v.backups[i].ok()) << i;
  }
  EXPECT_TRUE(IsSilence(v.reports[1].status)) << v.reports[1].status.ToString();
  EXPECT_NE(v.reports[1].status.message().find("in-process://server1"), std::string::npos)
      << v.reports[1].status.ToString();
  EXPECT_FALSE(v.leases[1].ok());
  EXPECT_FALSE(v.backups[1].ok());
  EXPECT_FALSE((*shown)->freshness().stale) << (*shown)->freshness().why;
  EXPECT_TRUE((*shown)->freshness().inconsistent.empty()) << (*shown)->freshness().inconsistent;

  o.allow_unreachable = false;
  auto refused = OramClient::OpenReadOnly(fs.state, testing::TestPassphrase(), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("in-process://server1"), std::string::npos)
      << refused.status().ToString();
  o.allow_unreachable = true;  // a writable open never leaves a server out
  auto writer = OramClient::Open(fs.state, testing::TestPassphrase(), o);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("in-process://server1"), std::string::npos)
      << writer.status().ToString();
}

// The evictor: an eviction that cannot finish because a server is down is
// finished (or tried again) once the server returns, and every server then
// holds the same count of applied evictions as the client.
TEST(InProcessClientTest, AnEvictionThatMeetsADownServerIsFinishedWhenItReturns) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, kEvictRate, 1));  // up to the first eviction
  const std::uint64_t before = (*client)->counters().ne;
  fs.cluster->SetDown(0, true);
  int failures = 0;
  for (BlockId id = kEvictRate; id < 3 * kEvictRate; ++id) {
    if (!(*client)->Write(id, testing::Content(kBlockBytes, id, 5)).ok()) ++failures;
  }
  EXPECT_GT(failures, 0) << "accesses went on with a server down";
  fs.cluster->SetDown(0, false);
  for (BlockId id = kEvictRate; id < 3 * kEvictRate; ++id) model.erase(id);
  ASSERT_TRUE(WriteBlocks(**client, model, 4 * kEvictRate, 3));
  EXPECT_TRUE(ReadAll(**client, model));
  ASSERT_TRUE((*client)->Close().ok());  // commits the eviction in flight
  const std::uint64_t evictions = (*client)->counters().ne;
  EXPECT_GT(evictions, before);
  EXPECT_TRUE(EveryServerApplied(*fs.cluster, evictions));
}

// The eviction's consistency check: a server whose EVICT_CHECK digests do
// not match what it prepared (a liar, or damage between prepare and check)
// stops the commit on every attempt, and the client refuses evictions for a
// while (Integrity); nothing written is lost, and once the server answers
// honestly the next client finishes the eviction and the evictions go on.
TEST(InProcessClientTest, AnEvictionCheckThatDisagreesStopsTheCommit) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, kEvictRate - 1, 1));
  const std::uint64_t before = (*client)->counters().ne;
  int lies = 0;
  fs.cluster->SetLiar(2, [&](wire::Message& m) {
    if (auto* r = std::get_if<wire::EvictCheckReply>(&m.body); r && !r->digests.empty()) {
      r->digests[0] = field::Add(r->digests[0], 1);
      ++lies;
    }
  });
  Status first_refusal;
  for (BlockId id = kEvictRate - 1; id < 3 * kEvictRate; ++id) {
    const Status st = (*client)->Write(id, testing::Content(kBlockBytes, id, 2));
    if (!st.ok() && first_refusal.ok()) first_refusal = st;
  }
  ASSERT_GT(lies, 0) << "no eviction was checked";
  EXPECT_EQ((*client)->counters().ne, before) << "an eviction committed on a check that lied";
  EXPECT_EQ(first_refusal.code(), Status::Code::kIntegrity) << first_refusal.ToString();
  fs.cluster->SetLiar(2, {});
  client->reset();
  auto again = fs.Open();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (BlockId id = kEvictRate - 1; id < 3 * kEvictRate; ++id) model.erase(id);
  ASSERT_TRUE(WriteBlocks(**again, model, 4 * kEvictRate, 3));
  EXPECT_TRUE(ReadAll(**again, model));
  EXPECT_GT((*again)->counters().ne, before);
}

// The root write queue: two pipelined accesses leave their root writes
// queued; a Sync that sends them while a server is down leaves root slots
// that two servers rewrote and the third did not. The next access must not
// read the root before those slots are rewritten on every server (a slot
// whose shares disagree turns every retrieval through it into garbage): it
// reads the right bytes.
TEST(InProcessClientTest, RootWritesThatReachedSomeServersAreRewrittenBeforeTheNextRead) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const auto first = testing::Content(kBlockBytes, 0, 7),
             second = testing::Content(kBlockBytes, 1, 7);
  const OramClient::BatchItem items[] = {{AccessOp::kWrite, 0, first, nullptr},
                                         {AccessOp::kWrite, 1, second, nullptr}};
  for (const auto& r : (*client)->AccessMany(items)) ASSERT_TRUE(r.ok()) << r.status().ToString();
  fs.cluster->SetDown(2, true);
  const Status sync = (*client)->Sync();
  ASSERT_FALSE(sync.ok()) << "the root writes reached a server that is down";
  fs.cluster->SetDown(2, false);
  for (BlockId id : {BlockId{0}, BlockId{1}}) {
    auto read = (*client)->Read(id);
    ASSERT_TRUE(read.ok()) << "block " << id << ": " << read.status().ToString();
    EXPECT_EQ(*read, id == 0 ? first : second) << "block " << id;
  }
}

// Root writes the state logged but no server acknowledged (the client went
// away while a server was down) are sent by the next Open: the blocks they
// carry read back.
TEST(InProcessClientTest, RootWritesLoggedButNotSentAreSentByTheNextOpen) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  BlockModel model;
  {
    auto client = fs.Open();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    ASSERT_TRUE(WriteBlocks(**client, model, kEvictRate + 2, 1));
    fs.cluster->SetDown(1, true);
    client->reset();  // its last root write stays logged in the state
    fs.cluster->SetDown(1, false);
  }
  // Server 1 still holds the lease of the client gone (this process is
  // alive, so it is not certainly a crashed one): taken over.
  fs.options.force_lease = true;
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(ReadAll(**client, model));
}

// A server restarted between two accesses (its handler and store reopened
// from its directory) serves the same shares.
TEST(InProcessClientTest, AServerRestartedBetweenAccessesLosesNothing) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  BlockModel model;
  ASSERT_TRUE(WriteBlocks(**client, model, 2 * kEvictRate + 1, 1));
  for (std::size_t i = 0; i < fs.cluster->size(); ++i) {
    ASSERT_TRUE(fs.cluster->Restart(i).ok()) << "server " << i;
    ASSERT_TRUE(ReadAll(**client, model)) << "after restarting server " << i;
  }
}

// A server that lost its disk (its directory emptied) is named by the next
// Open, then rebuilt from the others (RebuildServer through the same
// in-process connection: the survivors' masked contributions combined on
// it); every block reads back, and every retrieval needs all three shares,
// the rebuilt one among them.
TEST(InProcessClientTest, AServerThatLostItsDiskIsRebuiltFromTheOthers) {
  InProcessFs fs;
  ASSERT_TRUE(fs.cluster);
  BlockModel model;
  {
    auto client = fs.Open();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    ASSERT_TRUE(WriteBlocks(**client, model, 3 * kEvictRate + 2, 1));
    ASSERT_TRUE((*client)->Close().ok());
  }
  ASSERT_TRUE(fs.cluster->Wipe(1).ok());
  {
    auto refused = fs.Open();
    ASSERT_FALSE(refused.ok()) << "a server that lost its data was not noticed";
    EXPECT_NE(refused.status().message().find("rebuild --server 1"), std::string::npos)
        << refused.status().ToString();
  }
  RebuildOptions options;
  options.target = 1;
  options.client = fs.options;
  auto report = RebuildServer(fs.state, testing::TestPassphrase(), options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->blocks_verified, model.size());
  auto client = fs.Open();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(ReadAll(**client, model));
  ASSERT_TRUE(WriteBlocks(**client, model, 2 * kEvictRate, 2));
  EXPECT_TRUE(ReadAll(**client, model));
}

}  // namespace
}  // namespace s3oram
