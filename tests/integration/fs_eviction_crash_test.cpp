// Issue 45: the FUSE daemon killed (kill -9) while the servers run its
// eviction, in each of the eviction's stretches: the servers' kernels, their
// SMP exchange (two servers waiting for the third's shares) and the commit
// (two servers committed, the third still at it). The servers are held at
// that point by a fault hold ("name?file": they wait while the file exists),
// so each kill lands where it is meant to, whatever the machine's load.
//
// After the kill:
//  * `s3oram status` answers while the servers still compute the dead
//    client's eviction, and shows it under way;
//  * fsck -n --no-blocks on the state the kill left exits 0 (and a whole
//    fsck -n after the next mount);
//  * the next mount, without -o force, succeeds on its first try: it waits
//    for the eviction it finds under way, and says so ("server 0 is
//    finishing eviction ..."), instead of failing as if a server were down;
//  * every byte written and fsynced before the kill reads back.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "oramcore/wire/transport.h"
#include "tests/integration/fs_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram::testing {
namespace {

using Clock = std::chrono::steady_clock;

enum class Stretch { kKernels, kSmpExchange, kCommit };

const char* Name(Stretch s) {
  switch (s) {
    case Stretch::kKernels:
      return "Kernels";
    case Stretch::kSmpExchange:
      return "SmpExchange";
    case Stretch::kCommit:
      return "Commit";
  }
  return "?";
}

// STATUS of one server, straight over the wire (answered beside a PREPARE).
class StatusProbe {
 public:
  StatusProbe(const cluster::LocalCluster& cluster, std::size_t server, const wire::Header& h)
      : header_(h) {
    auto key = LoadCurveKeypair(cluster.client_key_file());
    EXPECT_TRUE(key.ok()) << key.status().ToString();
    if (!key.ok()) return;
    auto set = NetworkServerSet::Connect({cluster.endpoints()[server]},
                                         {cluster.server_public_keys()[server]}, *key);
    EXPECT_TRUE(set.ok()) << set.status().ToString();
    if (set.ok()) set_ = std::move(set).value();
  }
  Result<wire::StatusReply> Ask() {
    if (!set_) return Status::FailedPrecondition("no connection");
    S3ORAM_ASSIGN_OR_RETURN(
        auto r, set_->Exchange({wire::Encode(header_, wire::StatusRequest{})}, header_,
                               wire::MessageType::kStatusReply, FastRetryOptions().requests));
    return std::get<wire::StatusReply>(r[0].body);
  }

 private:
  wire::Header header_;
  std::unique_ptr<ServerSet> set_;
};

class FsEvictionCrashTest : public ::testing::TestWithParam<Stretch> {};

TEST_P(FsEvictionCrashTest, NextMountWaitsForTheEvictionAndLosesNoFsyncedByte) {
  const Stretch stretch = GetParam();
  FsOptions options;
  // A = 4: an eviction every 4 accesses.
  options.params = SmallParams(4096, 4, 6);
  options.mount = false;
  // Servers 0 and 1 wait for server 2's held shares as long as the test
  // holds them, not a peer timeout.
  options.peer_timeout_ms = 600000;
  auto fs = MountedFs::Create(options);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  auto& cluster = *fs->test_fs()->cluster;
  const wire::Header h = HeaderFromState(fs->state());
  ASSERT_TRUE(fs->Mount());
  std::mt19937_64 rng = SeededRng();

  std::map<std::string, std::string> durable;  // file -> content fsynced
  std::mutex durable_mu;
  for (int i = 0; i < 4; ++i) {
    const std::string name = "before" + std::to_string(i);
    const std::string content = PatternBytes(3 * 4096 + 100 * i, rng());
    ASSERT_EQ(WriteAndSync(fs->Path(name), content), 0) << name;
    durable[name] = content;
  }

  // The hold: servers stop at the stretch's point while this file exists.
  // They are restarted with it armed under the live mount (which resends
  // what they lose), so every eviction they compute from now on is held.
  const std::string hold = fs->Scratch("hold");
  { std::ofstream(hold) << "held\n"; }
  struct Release {
    std::string path;
    ~Release() { std::filesystem::remove(path); }  // never leaves a server held
  } release{hold};
  std::vector<std::size_t> held;
  std::string point;
  switch (stretch) {
    case Stretch::kKernels:
      point = "server.evict_prepare.first_kernels";
      held = {0, 1, 2};
      break;
    case Stretch::kSmpExchange:
      // Server 2 holds its first round's shares back: 0 and 1 wait for them.
      point = "server.evict_prepare.first_send";
      held = {2};
      break;
    case Stretch::kCommit:
      point = "server.evict_commit.before";
      held = {2};
      break;
  }
  for (std::size_t i : held) {
    ASSERT_TRUE(cluster.Kill(i, SIGTERM).ok());
    ASSERT_TRUE(cluster.Restart(i, {"S3ORAM_FAULT=" + point + "?" + hold}).ok());
  }

  StatusProbe probe(cluster, 0, h);
  auto first = probe.Ask();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::uint64_t applied_before = first->applied_evictions;

  // The writer: fsynced files until the daemon dies (its eviction is held).
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < 64 && !stop.load(); ++i) {
      const std::string name = "during" + std::to_string(i);
      const std::string content = PatternBytes(2 * 4096 + 7 * i, 1000 + i);
      if (WriteAndSync(fs->Path(name), content) != 0) return;  // the daemon died
      const std::lock_guard lock(durable_mu);
      durable[name] = content;
    }
  });
  struct JoinWriter {
    std::atomic<bool>& stop;
    std::thread& t;
    ~JoinWriter() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join_writer{stop, writer};

  // Server 0 in the stretch: then the daemon is killed.
  std::optional<wire::StatusReply> seen;
  const auto give_up = Clock::now() + std::chrono::minutes(5);
  while (!seen && Clock::now() < give_up) {
    auto r = probe.Ask();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const auto phase = static_cast<wire::EvictPhase>(r->evicting_phase);
    const bool there =
        stretch == Stretch::kKernels       ? r->evicting && phase == wire::EvictPhase::kKernels
        : stretch == Stretch::kSmpExchange ? r->evicting && phase == wire::EvictPhase::kPeerWait
                                           : r->applied_evictions > applied_before;
    if (there) {
      seen = *r;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ASSERT_TRUE(seen) << "server 0 never reached the " << Name(stretch) << " stretch";
  const pid_t daemon = fs->pid();
  ASSERT_GT(daemon, 0);
  ASSERT_EQ(::kill(daemon, SIGKILL), 0);
  const auto reaped_by = Clock::now() + std::chrono::seconds(30);
  while (!fs->ReapIfDead() && Clock::now() < reaped_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(fs->mounted()) << "the killed daemon was not reaped";
  stop = true;
  writer.join();
  const std::uint64_t eviction =
      stretch == Stretch::kCommit ? seen->applied_evictions - 1 : seen->evicting_eviction;
  std::printf("[ crash    ] %s: daemon killed during eviction %llu; %zu files fsynced before\n",
              Name(stretch), static_cast<unsigned long long>(eviction), durable.size());

  if (stretch == Stretch::kCommit) {
    // Server 2 still commits (its main loop is held there, so it answers
    // nothing else): it finishes the dead client's COMMIT once released.
    std::filesystem::remove(hold);
  } else {
    // The servers still compute the dead client's eviction: status answers
    // all the same and shows it.
    const auto t0 = Clock::now();
    CmdResult status =
        RunCmd({S3ORAM_TEST_CLI, "status", "-s", fs->state(), "--passfile", fs->passfile()},
               std::chrono::seconds(120));
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(status.exit_code, 0) << status.output;
    EXPECT_NE(status.output.find("evicting: eviction " + std::to_string(eviction)),
              std::string::npos)
        << status.output;
    std::printf("[ crash    ] s3oram status during the eviction: exit %d after %.2f s\n",
                status.exit_code, took);
  }

  // The state the kill left: fsck -n finds nothing wrong in it (phases 1
  // and 2, the state alone: reading the blocks opens a client, which would
  // finish the eviction first, as the mount below does).
  CmdResult fsck = RunCmd({S3ORAM_TEST_CLI, "fsck", "-s", fs->state(), "--passfile", fs->passfile(),
                           "-n", "--no-blocks"},
                          std::chrono::seconds(300));
  EXPECT_EQ(fsck.exit_code, 0) << "fsck -n --no-blocks after the kill:\n" << fsck.output;

  // The next mount, first try, no force. While the servers are held it
  // waits for the eviction and says what it waits for; released, it mounts.
  // (Mounted from this thread: the daemon gets SIGTERM when the thread that
  // started it ends. A watcher releases the hold once the notice is out.)
  std::atomic<bool> told{false}, live_while_held{false};
  std::thread watcher;
  if (stretch != Stretch::kCommit) {
    watcher = std::thread([&] {
      const auto wait_until = Clock::now() + std::chrono::minutes(3);
      while (!told && Clock::now() < wait_until) {
        told = fs->daemon_log().find("is finishing eviction " + std::to_string(eviction)) !=
               std::string::npos;
        if (!told) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      live_while_held = IsS3oramMounted(fs->root());
      std::filesystem::remove(hold);
    });
  }
  const auto mounted = fs->Mount(std::chrono::seconds(600));
  if (watcher.joinable()) watcher.join();
  ASSERT_TRUE(mounted) << "the first mount after the kill";
  if (stretch != Stretch::kCommit) {
    EXPECT_TRUE(told) << "the mount did not say it waits for eviction " << eviction << "; log:\n"
                      << Tail(fs->daemon_log(), 4000);
    EXPECT_FALSE(live_while_held) << "the mount went live while its eviction was held";
  }
  const std::string said = fs->log();
  const auto notice = said.find("is finishing eviction");
  const auto line_start = notice == std::string::npos ? 0 : said.rfind('\n', notice) + 1;
  std::printf("[ crash    ] the next mount (no force) is live%s%s\n",
              notice == std::string::npos ? "" : "; it said: ",
              notice == std::string::npos
                  ? ""
                  : said.substr(line_start, said.find('\n', notice) - line_start).c_str());

  for (const auto& [name, content] : durable) {
    EXPECT_TRUE(FileHasContent(fs->Path(name), content)) << name;
  }
  ASSERT_TRUE(fs->Unmount());
  CmdResult final_fsck =
      RunCmd({S3ORAM_TEST_CLI, "fsck", "-s", fs->state(), "--passfile", fs->passfile(), "-n"},
             std::chrono::seconds(300));
  EXPECT_EQ(final_fsck.exit_code, 0) << final_fsck.output;
}

INSTANTIATE_TEST_SUITE_P(Stretches, FsEvictionCrashTest,
                         ::testing::Values(Stretch::kKernels, Stretch::kSmpExchange,
                                           Stretch::kCommit),
                         [](const auto& p) { return std::string(Name(p.param)); });

}  // namespace
}  // namespace s3oram::testing
