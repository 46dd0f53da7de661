// A client process killed (SIGKILL) at random points — inside accesses, inside
// evictions, between PREPARE and COMMIT — loses nothing it committed: the next
// Open finishes or redoes the pending eviction and every block reads back.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "tests/integration/cluster_fixture.h"
#include "tests/support/test_scale.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::FastRetryOptions;
using testing::SmallParams;
using testing::StartCluster;
using testing::TempDir;

constexpr std::uint32_t kBlock = 1024;

std::vector<std::uint8_t> Content(std::uint64_t id, std::uint64_t tag) {
  return testing::Content(kBlock, id, tag);
}

// Child: writes random blocks forever, announcing each write on `fd` before
// (kind 1) and after (kind 2) it. Never returns.
[[noreturn]] void WriterChild(const std::string& state, std::uint64_t seed, int fd) {
  auto client = testing::TestOpen(state, FastRetryOptions());
  if (!client.ok()) {
    std::fprintf(stderr, "child: %s\n", client.status().ToString().c_str());
    ::_exit(3);
  }
  std::mt19937_64 rng(seed);
  const std::uint64_t n = (*client)->params().capacity_blocks;
  for (int i = 0; i < 1000000; ++i) {
    std::uint64_t rec[3] = {1, rng() % n, rng()};
    if (::write(fd, rec, sizeof rec) != sizeof rec) ::_exit(4);
    if (!(*client)->Write(rec[1], Content(rec[1], rec[2])).ok()) ::_exit(5);
    rec[0] = 2;
    if (::write(fd, rec, sizeof rec) != sizeof rec) ::_exit(4);
  }
  ::_exit(0);
}

// Kills a writer child `rounds` times, each after a random delay, and checks
// after each kill that every write it reported complete reads back.
void KillWritersAndVerify(testing::TestFs& fs, int rounds, const char* what) {
  const std::string& state = fs.state;
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::unordered_map<std::uint64_t, std::uint64_t> model;  // id -> tag of committed content
  int recovered_evictions = 0;
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      WriterChild(state, seed + 1000 + round, fds[1]);
    }
    ::close(fds[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 400));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited early with " << WEXITSTATUS(status);

    // Replay what the child announced: completed writes are committed; the
    // one in flight may or may not be.
    std::uint64_t rec[3];
    std::optional<std::pair<std::uint64_t, std::uint64_t>> in_flight;
    while (::read(fds[0], rec, sizeof rec) == sizeof rec) {
      if (rec[0] == 1) in_flight = {rec[1], rec[2]};
      if (rec[0] == 2) {
        model[rec[1]] = rec[2];
        in_flight.reset();
      }
    }
    ::close(fds[0]);

    auto client = testing::TestOpen(state, FastRetryOptions());
    ASSERT_TRUE(client.ok()) << "round " << round << ": " << client.status().ToString();
    recovered_evictions += static_cast<int>((*client)->stats().eviction_retries);
    if (in_flight) {
      auto r = (*client)->Read(in_flight->first);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      auto it = model.find(in_flight->first);
      const auto old = it == model.end() ? std::vector<std::uint8_t>(kBlock, 0)
                                         : Content(in_flight->first, it->second);
      const auto fresh = Content(in_flight->first, in_flight->second);
      ASSERT_TRUE(r.value() == old || r.value() == fresh)
          << "round " << round << ": in-flight block " << in_flight->first << " is neither";
      if (r.value() == fresh) model[in_flight->first] = in_flight->second;
    }
    for (const auto& [id, tag] : model) {
      auto r = (*client)->Read(id);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r.value(), Content(id, tag)) << "round " << round << ": block " << id;
    }
    // Open finished the eviction the kill left under way (one the reads
    // started since is not committed anywhere yet).
    for (const auto& s : (*client)->QueryServers(std::chrono::milliseconds(5000))) {
      ASSERT_TRUE(s.status.ok());
      EXPECT_EQ(s.reply.applied_evictions, (*client)->counters().ne);
    }
  }
  std::printf("[ crash    ] %s: %d kills, %d recovered a pending eviction, %zu blocks verified\n",
              what, rounds, recovered_evictions, model.size());
  EXPECT_GT(model.size(), 0u);
}

TEST(ClientCrashTest, KilledClientLosesNothingCommitted) {
  auto fs = testing::MakeFs(SmallParams(kBlock, 16, 5));
  ASSERT_TRUE(fs);
  KillWritersAndVerify(*fs, testing::ScaledForBuild(16, 3, 5), "kills at random moments");
}

// The same with every server slowed down in each SMP round of an eviction
// (S3ORAM_FAULT name~ms sleeps there), so that the evictions run in the
// background for many of the writer's accesses: the kills land while an
// eviction is computed beside the next round's accesses (background
// eviction), and recovery finishes it from its logged plan.
TEST(ClientCrashTest, KilledWhileAnEvictionRunsBesideTheAccessesLosesNothing) {
  auto fs = testing::MakeFs(SmallParams(kBlock, 16, 5));
  ASSERT_TRUE(fs);
  {
    const Status st = testing::RestartAllWithFault(*fs, "server.evict_prepare.mid_rounds~25");
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  KillWritersAndVerify(*fs, testing::ScaledForBuild(16, 3, 5), "kills beside slowed evictions");
}

// An access's root write is deferred to the next request, but it is logged
// before Access returns: a process that ends right after a Write (no Sync, no
// Close, no destructor) loses nothing, and the next Open sends the write.
TEST(ClientCrashTest, WriteThatReturnedSurvivesAnExitBeforeItsRootWriteIsSent) {
  auto fs = testing::MakeFs(SmallParams(kBlock, 16, 5));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  const BlockId x = 7, y = 11;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto client = testing::TestOpen(state, FastRetryOptions());
    if (!client.ok()) ::_exit(3);
    if (!(*client)->Write(x, Content(x, 1)).ok() || !(*client)->Sync().ok()) ::_exit(4);
    if (!(*client)->Write(y, Content(y, 1)).ok()) ::_exit(5);  // root write sent with the next
    if (!(*client)->Write(x, Content(x, 2)).ok()) ::_exit(6);  // root write never sent
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  {
    auto store = testing::TestOpenStore(state);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto pending = (*store)->LoadPending();
    ASSERT_TRUE(pending.ok());
    ASSERT_EQ(pending->size(), 1u);
    EXPECT_EQ((*pending)[0].kind, kPendingRootKind);
    // The third access's write, under the key of its root slot.
    EXPECT_EQ((*pending)[0].seq, kPendingRootKey + 2);
  }
  auto client = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto rx = (*client)->Read(x);
  ASSERT_TRUE(rx.ok()) << rx.status().ToString();
  EXPECT_EQ(*rx, Content(x, 2));
  auto ry = (*client)->Read(y);
  ASSERT_TRUE(ry.ok()) << ry.status().ToString();
  EXPECT_EQ(*ry, Content(y, 1));
}

// Four servers: a client opens, server 3 stops (SIGSTOP), and the client's
// writes go on with the other three while server 3 lags; the process then
// exits as a crash would, before server 3 acknowledged their root writes,
// and server 3 loses them (killed while stopped, started again). The state
// logs those writes as lagging; the next Open writes them again on every
// server: every block reads back, and no answer of server 3 is found wrong
// (a root slot it missed would make each of its answers wrong).
TEST(ClientCrashTest, RootWritesALaggingServerLostAreWrittenAgainByTheNextOpen) {
  OramParams p = SmallParams(kBlock, 16, 5);
  p.parties = 4;
  auto fs = testing::MakeFs(p);
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  constexpr BlockId kBlocks = 6;
  {
    auto client = testing::TestOpen(state, FastRetryOptions());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    for (BlockId id = 0; id < kBlocks; ++id) ASSERT_TRUE((*client)->Write(id, Content(id, 1)).ok());
    ASSERT_TRUE((*client)->Close().ok());
  }
  const pid_t stopped = cluster->pid(3);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto client = testing::TestOpen(state, FastRetryOptions());
    if (!client.ok()) ::_exit(3);
    // Every Open rewrites a root slot on every server first: before the stop.
    if (!(*client)->Read(0).ok()) ::_exit(6);
    if (::kill(stopped, SIGSTOP) != 0) ::_exit(4);
    for (BlockId id = 0; id < kBlocks; ++id) {
      if (!(*client)->Write(id, Content(id, 2)).ok()) break;
      const std::uint64_t done = id;
      if (::write(fds[1], &done, sizeof done) != sizeof done) ::_exit(5);
    }
    ::_exit(0);  // no Close: as a crash
  }
  ::close(fds[1]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::vector<std::uint64_t> tag(kBlocks, 1);
  std::uint64_t done = 0;
  std::size_t completed = 0;
  while (::read(fds[0], &done, sizeof done) == sizeof done) {
    tag.at(done) = 2;
    ++completed;
  }
  ::close(fds[0]);
  // The first write cannot find server 3 down (nothing lagged before it),
  // and carries the read's root write, which server 3 lags on.
  ASSERT_GE(completed, 1u);
  ASSERT_TRUE(cluster->Kill(3, SIGKILL).ok());
  ASSERT_TRUE(cluster->Restart(3).ok());
  {
    auto store = testing::TestOpenStore(state);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto pending = (*store)->LoadPending();
    ASSERT_TRUE(pending.ok());
    std::size_t lagging = 0;
    for (const auto& op : *pending) lagging += op.kind == kPendingLagKind ? 1 : 0;
    EXPECT_GE(lagging, 1u);
  }
  auto client = testing::TestOpen(state, FastRetryOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  for (BlockId id = 0; id < kBlocks; ++id) {
    auto r = (*client)->Read(id);
    ASSERT_TRUE(r.ok()) << "block " << id << ": " << r.status().ToString();
    // The write that was under way when the child stopped may or may not
    // have happened.
    if (id == completed && completed < kBlocks) {
      EXPECT_TRUE(*r == Content(id, 1) || *r == Content(id, 2)) << "block " << id;
    } else {
      EXPECT_EQ(*r, Content(id, tag[id])) << "block " << id;
    }
  }
  for (std::uint64_t w : (*client)->stats().wrong_answers) EXPECT_EQ(w, 0u);
}

}  // namespace
}  // namespace s3oram
