// A filesystem on four servers (ℓ = 4, t = 1) through a real mount:
//  * one server that lies about every retrieval answer (the
//    s3oram-serverd-liar test build, serverd/lie.h), or one whose disk
//    damaged a digest: its answers are outvoted by (or its report of damage
//    left to) the other three, so every file reads back as written; it is
//    excluded, writes go on, `s3oram status` through the mount names it
//    among the four servers it lists, and `s3oram rebuild` rebuilds it in
//    full;
//  * one server killed under the mount: it is excluded, and the mount goes
//    on with the other three (writes, fsync, evictions) without an error;
//    `s3oram rebuild` catches it up (the buckets it missed only), and a
//    catch-up killed halfway leaves it marked, serving nothing, until the
//    next one begins again; back while still mounted, the mount catches it
//    up itself, also after its first catch-up was killed halfway.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "oramcore/tree/geometry.h"
#include "tests/integration/fs_fixture.h"
#include "tests/integration/run_cli.h"
#include "tests/integration/share_damage.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::CliArgs;
using testing::CliRun;
using testing::MountedFs;
using testing::PatternBytes;
using testing::RunCli;
using testing::WriteFile;

using Files = std::map<std::string, std::string>;

std::string Liar() {
  const char* env = std::getenv("S3ORAM_SERVERD_LIAR");
  return env && *env ? env : S3ORAM_TEST_SERVERD_LIAR;
}

// A mounted filesystem on four servers.
std::unique_ptr<MountedFs> MountFourServers() {
  testing::FsOptions options;
  options.params = testing::DefaultFsParams();
  options.params.parties = 4;
  return MountedFs::Create(options);
}

// Writes `count` files of a few tens of KiB (from `seed`) with fsync.
::testing::AssertionResult WriteSomeFiles(MountedFs& fs, int count, std::uint64_t seed,
                                          Files& files) {
  for (int i = 0; i < count; ++i) {
    const std::string name = "f" + std::to_string(i);
    files[name] = PatternBytes(30000 + 20011 * static_cast<std::size_t>(i), seed + i);
    if (!WriteFile(fs.Path(name), files[name], 0644, /*do_fsync=*/true)) {
      return ::testing::AssertionFailure() << "writing " << name;
    }
  }
  return ::testing::AssertionSuccess();
}

// After a liar or a damaged server was excluded as suspect: the status of
// the mount names it EXCLUDED for what it answered and no honest server, a
// 1 MiB write and its fsync go on (no EROFS), then after an unmount the
// server, honest again, is rebuilt in full by `s3oram rebuild` (never caught
// up: none of its buckets is trusted), scrub finds all four consistent, and
// a remount reads every file with another server killed, so through the
// rebuilt share.
void ExpectSuspectExcludedThenRebuiltInFull(MountedFs& fs, std::size_t bad, std::uint64_t seed,
                                            Files& files) {
  auto& cluster = *fs.test_fs()->cluster;
  const std::string endpoint = cluster.endpoints()[bad];
  files["big"] = PatternBytes(1 << 20, seed + 99);
  ASSERT_TRUE(WriteFile(fs.Path("big"), files["big"], 0644, /*do_fsync=*/true))
      << "a write after server " << bad << " was excluded failed";
  testing::ExpectFilesIn(fs, files);
  CliRun st = RunCli(CliArgs(fs, "status"));
  std::printf("[ status   ] of the mount, server %zu excluded:\n%s", bad, st.output.c_str());
  EXPECT_EQ(st.exit_code, 0) << st.output;
  EXPECT_NE(st.output.find("server " + std::to_string(bad) + "    " + endpoint +
                           "  EXCLUDED since eviction "),
            std::string::npos)
      << st.output;
  EXPECT_NE(st.output.find("for what it answered"), std::string::npos) << st.output;
  for (std::size_t i = 0; i < 4; ++i) {
    if (i == bad) continue;
    const std::string line = "server " + std::to_string(i) + "    " + cluster.endpoints()[i];
    EXPECT_EQ(st.output.find(line + "  EXCLUDED"), std::string::npos) << st.output;
    EXPECT_EQ(st.output.find(line + "  WRONG ANSWERS"), std::string::npos) << st.output;
  }
  EXPECT_EQ(st.output.find("STOPPED"), std::string::npos) << st.output;
  EXPECT_NE(fs.daemon_log().find("is excluded from eviction"), std::string::npos)
      << "the daemon did not log the exclusion";
  ASSERT_TRUE(fs.Unmount());

  ASSERT_TRUE(cluster.Kill(bad, SIGTERM).ok());
  ASSERT_TRUE(cluster.Restart(bad).ok());
  const CliRun rebuilt = RunCli(CliArgs(fs, "rebuild", "--server " + std::to_string(bad)));
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  EXPECT_NE(rebuilt.output.find("server " + std::to_string(bad) + " rebuilt from servers"),
            std::string::npos)
      << rebuilt.output;
  EXPECT_EQ(rebuilt.output.find("caught up"), std::string::npos) << rebuilt.output;
  const CliRun scrub = RunCli(CliArgs(fs, "scrub"));
  EXPECT_EQ(scrub.exit_code, 0) << scrub.output;
  EXPECT_NE(scrub.output.find("consistent sharing across all 4 servers"), std::string::npos)
      << scrub.output;
  const std::size_t other = (bad + 1) % 4;
  ASSERT_TRUE(cluster.Kill(other, SIGKILL).ok());
  auto mounted = fs.Mount();
  ASSERT_TRUE(mounted) << mounted.message();
  testing::ExpectFilesIn(fs, files);
}

// A server of four that lies about every retrieval answer (the
// s3oram-serverd-liar build, S3ORAM_LIE=retrieve): a cold mount reads every
// file right (the three others outvote it), names the liar and excludes it.
TEST(FsFourServersTest, ALiarAmongFourIsOutvotedNamedExcludedAndRebuiltInFull) {
  auto fs = MountFourServers();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t seed = s3oram::testing::TestSeed();
  const std::size_t liar = seed % 4;
  std::printf("[ seed     ] %llu: server %zu of four lies about retrievals\n",
              static_cast<unsigned long long>(seed), liar);
  Files files;
  ASSERT_TRUE(WriteSomeFiles(*fs, 4, seed, files));
  ASSERT_TRUE(fs->Unmount());

  auto& cluster = *fs->test_fs()->cluster;
  ASSERT_TRUE(cluster.Kill(liar, SIGTERM).ok());
  const Status restarted = cluster.Restart(liar, {"S3ORAM_LIE=retrieve"}, Liar());
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();

  // A cold mount: every block of every file is retrieved from the servers.
  auto mounted = fs->Mount();
  ASSERT_TRUE(mounted) << mounted.message();
  testing::ExpectFilesIn(*fs, files);
  const std::string endpoint = cluster.endpoints()[liar];
  EXPECT_NE(fs->daemon_log().find("server " + std::to_string(liar) + " (" + endpoint +
                                  ") answered wrongly"),
            std::string::npos)
      << "the daemon did not name the liar";
  ExpectSuspectExcludedThenRebuiltInFull(*fs, liar, seed, files);
}

// A server of four whose disk damaged the digests of two root slots
// (stopped, its shares.bin changed, started again; two, because the first
// access may rewrite one of them before it reads the root): the first
// retrieval it serves reports damaged storage, and with three others it is excluded instead of
// the mount turning read-only. Then damage on another server that `s3oram
// scrub` finds first: scrub excludes it, and the next mount writes.
TEST(FsFourServersTest, ADamagedServerAmongFourIsExcludedAndTheMountStaysWritable) {
  auto fs = MountFourServers();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t seed = s3oram::testing::TestSeed();
  const std::size_t bad = (seed + 2) % 4;
  Files files;
  ASSERT_TRUE(WriteSomeFiles(*fs, 4, seed, files));
  ASSERT_TRUE(fs->Unmount());
  auto& cluster = *fs->test_fs()->cluster;
  ASSERT_TRUE(cluster.Kill(bad, SIGTERM).ok());
  auto rng = s3oram::testing::SeededRng();
  const std::string where =
      testing::DamageShareFile(cluster.dir() + "/data-" + std::to_string(bad) + "/shares.bin",
                               fs->params(), testing::ShareDamage::kTwoRootDigests, rng);
  std::printf("[ seed     ] %llu: server %zu of four: %s damaged\n",
              static_cast<unsigned long long>(seed), bad, where.c_str());
  ASSERT_TRUE(cluster.Restart(bad).ok());

  auto mounted = fs->Mount();
  ASSERT_TRUE(mounted) << mounted.message();
  testing::ExpectFilesIn(*fs, files);
  ExpectSuspectExcludedThenRebuiltInFull(*fs, bad, seed, files);
  if (HasFatalFailure()) return;

  // Damage that `s3oram scrub` finds first, unmounted: scrub excludes that
  // server, and the next mount is writable without it. (The server the
  // check above killed was excluded as down; it is caught up first.)
  ASSERT_TRUE(fs->Unmount());
  const std::size_t other = (bad + 1) % 4;
  ASSERT_TRUE(cluster.Restart(other).ok());
  const CliRun caught = RunCli(CliArgs(*fs, "rebuild", "--server " + std::to_string(other)));
  ASSERT_EQ(caught.exit_code, 0) << caught.output;
  const std::size_t second = (bad + 2) % 4;
  ASSERT_TRUE(cluster.Kill(second, SIGTERM).ok());
  const std::string again =
      testing::DamageShareFile(cluster.dir() + "/data-" + std::to_string(second) + "/shares.bin",
                               fs->params(), testing::ShareDamage::kDigest, rng);
  std::printf("[ damage   ] server %zu: %s damaged, for scrub to find\n", second, again.c_str());
  ASSERT_TRUE(cluster.Restart(second).ok());
  const CliRun scrub = RunCli(CliArgs(*fs, "scrub"));
  EXPECT_EQ(scrub.exit_code, 4) << scrub.output;
  EXPECT_NE(scrub.output.find("server " + std::to_string(second) + ": EXCLUDED now"),
            std::string::npos)
      << scrub.output;
  mounted = fs->Mount();
  ASSERT_TRUE(mounted) << mounted.message();
  files["after-scrub"] = PatternBytes(200000, seed + 5);
  ASSERT_TRUE(WriteFile(fs->Path("after-scrub"), files["after-scrub"], 0644, /*do_fsync=*/true))
      << "a write after scrub excluded server " << second << " failed";
  testing::ExpectFilesIn(*fs, files);
  const CliRun st = RunCli(CliArgs(*fs, "status"));
  EXPECT_NE(st.output.find("server " + std::to_string(second) + "    " +
                           cluster.endpoints()[second] + "  EXCLUDED since eviction "),
            std::string::npos)
      << st.output;
  EXPECT_EQ(st.output.find("STOPPED"), std::string::npos) << st.output;
}

// A server of four that changed stored shares together with their digests
// (stopped; every slot of the leaf-level bucket the next eviction reads, and
// of its sibling, rewritten with its digest recomputed; started again), so
// that it reports no damage: whichever meets the change first, a retrieval
// (its answer outvoted) or that eviction (its inputs' MAC_OPEN: the one
// server without which the others open to authentic values), names and
// excludes it, the eviction goes on among the others, and the mount stays
// writable; `s3oram rebuild` then rebuilds it in full.
TEST(FsFourServersTest, AServerThatRewroteSharesAndDigestsIsExcludedAndTheMountGoesOn) {
  auto fs = MountFourServers();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t seed = s3oram::testing::TestSeed();
  const std::size_t liar = (seed + 3) % 4;
  Files files;
  ASSERT_TRUE(WriteSomeFiles(*fs, 3, seed, files));
  ASSERT_TRUE(fs->Unmount());
  const OramParams& p = fs->params();
  const TreeGeometry geo = p.geometry();
  std::uint64_t ne = 0;
  {
    auto store =
        testing::OpenStateWithPassphrase(fs->state(), testing::ReadWholeFile(fs->passfile()));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ne = (*store)->counters().ne;
  }
  auto& cluster = *fs->test_fs()->cluster;
  ASSERT_TRUE(cluster.Kill(liar, SIGTERM).ok());
  const std::string shares = cluster.dir() + "/data-" + std::to_string(liar) + "/shares.bin";
  const BucketId leaf_bucket = geo.BucketOnPath(geo.EvictionLeaf(ne), p.height);
  std::uint64_t rewritten = 0;
  for (const BucketId b : {leaf_bucket, TreeGeometry::Sibling(leaf_bucket)}) {
    for (std::uint32_t slot = 0; slot < p.bucket_size; ++slot) {
      testing::RewriteSlotWithItsDigest(shares, p, b, slot, seed + ++rewritten);
      ASSERT_FALSE(HasFatalFailure());
    }
  }
  std::printf(
      "[ seed     ] %llu: server %zu rewrote buckets %llu and %llu (eviction %llu reads "
      "them) with their digests\n",
      static_cast<unsigned long long>(seed), liar, static_cast<unsigned long long>(leaf_bucket),
      static_cast<unsigned long long>(TreeGeometry::Sibling(leaf_bucket)),
      static_cast<unsigned long long>(ne));
  ASSERT_TRUE(cluster.Restart(liar).ok());

  auto mounted = fs->Mount();
  ASSERT_TRUE(mounted) << mounted.message();
  ExpectSuspectExcludedThenRebuiltInFull(*fs, liar, seed, files);
  const std::string log = fs->daemon_log();
  std::printf("[ found by ] %s\n",
              log.find("holds the odd shares") != std::string::npos ? "the eviction's inputs"
              : log.find("answered wrongly") != std::string::npos   ? "a retrieval"
                                                                    : "?");
}

// Server k is killed (SIGKILL) while the mount writes: the first request
// that needs it finds it down, the client excludes it (durably) and goes on
// with the other three: a 1 MiB write and its fsync (16 evictions) succeed,
// every file reads back, and status names it EXCLUDED. After an unmount it
// is restarted (its stale store) and `s3oram rebuild --server k` brings it
// up to date and takes it back: scrub finds every server consistent, and a
// remount reads every file with all four.
TEST(FsFourServersTest, AKilledServerIsExcludedAndTheMountGoesOnWithTheOtherThree) {
  auto fs = MountFourServers();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t seed = s3oram::testing::TestSeed();
  const std::size_t k = seed % 4;
  std::printf("[ seed     ] %llu: server %zu of four is killed\n",
              static_cast<unsigned long long>(seed), k);
  Files files;
  ASSERT_TRUE(WriteSomeFiles(*fs, 3, seed, files));
  auto& cluster = *fs->test_fs()->cluster;
  ASSERT_TRUE(cluster.Kill(k, SIGKILL).ok());
  files["big"] = PatternBytes(1 << 20, seed + 99);
  ASSERT_TRUE(WriteFile(fs->Path("big"), files["big"], 0644, /*do_fsync=*/true))
      << "a write with one of four servers killed failed";
  testing::ExpectFilesIn(*fs, files);
  const std::string endpoint = cluster.endpoints()[k];
  CliRun st = RunCli(CliArgs(*fs, "status"));
  std::printf("[ status   ] of the mount, server %zu killed:\n%s", k, st.output.c_str());
  EXPECT_NE(st.output.find("server " + std::to_string(k) + "    " + endpoint +
                           "  EXCLUDED since eviction "),
            std::string::npos)
      << st.output;
  EXPECT_NE(fs->daemon_log().find("is excluded from eviction"), std::string::npos)
      << "the daemon did not log the exclusion";
  ASSERT_TRUE(fs->Unmount());
  // Still down: scrub checks the three others and says so.
  CliRun scrub = RunCli(CliArgs(*fs, "scrub", "--timeout-ms 3000"));
  EXPECT_EQ(scrub.exit_code, 0) << scrub.output;
  EXPECT_NE(scrub.output.find("server " + std::to_string(k) + ": EXCLUDED, not checked"),
            std::string::npos)
      << scrub.output;
  EXPECT_NE(scrub.output.find("consistent sharing across all 3 servers"), std::string::npos)
      << scrub.output;

  ASSERT_TRUE(cluster.Restart(k).ok());
  const CliRun rebuilt = RunCli(CliArgs(*fs, "rebuild", "--server " + std::to_string(k)));
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  // It kept its store: only what it missed is sent.
  EXPECT_NE(rebuilt.output.find("server " + std::to_string(k) + " caught up from servers"),
            std::string::npos)
      << rebuilt.output;
  scrub = RunCli(CliArgs(*fs, "scrub"));
  EXPECT_EQ(scrub.exit_code, 0) << scrub.output;
  EXPECT_NE(scrub.output.find("consistent sharing across all 4 servers"), std::string::npos)
      << scrub.output;
  auto mounted = fs->Mount();
  ASSERT_TRUE(mounted) << mounted.message();
  testing::ExpectFilesIn(*fs, files);
  st = RunCli(CliArgs(*fs, "status"));
  EXPECT_EQ(st.output.find("EXCLUDED"), std::string::npos) << st.output;
}

// A server excluded while two or more evictions ran is caught up with the
// buckets those evictions rewrote. Killed in the middle of that (its share
// file then holds some new buckets and some old), it restarts still marked:
// it serves nothing (status shows it being caught up, the client keeps it
// excluded), and the next `s3oram rebuild` begins the catch-up again from
// the state its header names (not a rebuild in full), after which every
// server is consistent and every file reads through its share.
TEST(FsFourServersTest, ACatchUpKilledHalfwayIsBegunAgainAndNeverServesTheMix) {
  auto fs = MountFourServers();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t seed = s3oram::testing::TestSeed();
  const std::size_t k = (seed + 1) % 4;
  std::printf(
      "[ seed     ] %llu: server %zu of four is killed, then killed again in its catch-up\n",
      static_cast<unsigned long long>(seed), k);
  Files files;
  ASSERT_TRUE(WriteSomeFiles(*fs, 2, seed, files));
  auto& cluster = *fs->test_fs()->cluster;
  ASSERT_TRUE(cluster.Kill(k, SIGKILL).ok());
  files["big"] = PatternBytes(1 << 20, seed + 7);
  ASSERT_TRUE(WriteFile(fs->Path("big"), files["big"], 0644, /*do_fsync=*/true));
  ASSERT_TRUE(fs->Unmount());

  // The first catch-up write kills it: some buckets are new, others not.
  ASSERT_TRUE(cluster.Restart(k, {"S3ORAM_FAULT=server.catch_up.after_write@1"}).ok());
  const CliRun cut = RunCli(CliArgs(*fs, "rebuild", "--server " + std::to_string(k)));
  EXPECT_NE(cut.exit_code, 0) << cut.output;
  // It killed itself at the point; reap it (bounded) before the restart.
  bool exited = false;
  for (int i = 0; i < 100 && !(exited = cluster.Exited(k)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(exited) << "server " << k << " did not stop at the fault point";
  ASSERT_TRUE(cluster.Restart(k).ok());
  const std::string log = testing::ReadWholeFile(cluster.log_path(k));
  EXPECT_NE(log.find("was being caught up when the server stopped"), std::string::npos) << log;
  const CliRun st = RunCli(CliArgs(*fs, "status"));
  std::printf("[ status   ] after the cut catch-up:\n%s", st.output.c_str());
  EXPECT_NE(st.output.find("EXCLUDED"), std::string::npos) << st.output;
  EXPECT_NE(st.output.find("being rebuilt or caught up"), std::string::npos) << st.output;

  const CliRun rebuilt = RunCli(CliArgs(*fs, "rebuild", "--server " + std::to_string(k)));
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  EXPECT_NE(rebuilt.output.find("server " + std::to_string(k) + " caught up from servers"),
            std::string::npos)
      << "not caught up again:\n"
      << rebuilt.output;
  const CliRun scrub = RunCli(CliArgs(*fs, "scrub"));
  EXPECT_EQ(scrub.exit_code, 0) << scrub.output;
  EXPECT_NE(scrub.output.find("consistent sharing across all 4 servers"), std::string::npos)
      << scrub.output;
  // Every file reads with another server killed: through k's share.
  ASSERT_TRUE(cluster.Kill((k + 1) % 4, SIGKILL).ok());
  auto mounted = fs->Mount();
  ASSERT_TRUE(mounted) << mounted.message();
  testing::ExpectFilesIn(*fs, files);
}

// A killed server that comes back with its data while the filesystem stays
// mounted is caught up by the mount itself (its keep-alive beat asks the
// excluded server every few seconds), without a remount, also when it is
// killed again in the middle of the first catch-up: only the buckets
// the evictions since rewrote are sent, while files are still written (the
// catch-up goes in ranges between the accesses, then a last pass), it takes
// part again, and the files written before, while it was out, while it was
// caught up and after read back; then every server is consistent.
TEST(FsFourServersTest, AServerThatReturnsIsCaughtUpByTheMountWithoutARemount) {
  auto fs = MountFourServers();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t seed = s3oram::testing::TestSeed();
  const std::size_t k = (seed + 2) % 4;
  std::printf("[ seed     ] %llu: server %zu of four is killed and restarted under the mount\n",
              static_cast<unsigned long long>(seed), k);
  Files files;
  ASSERT_TRUE(WriteSomeFiles(*fs, 2, seed, files));
  auto& cluster = *fs->test_fs()->cluster;
  ASSERT_TRUE(cluster.Kill(k, SIGKILL).ok());
  files["while-down"] = PatternBytes(1 << 20, seed + 3);
  ASSERT_TRUE(WriteFile(fs->Path("while-down"), files["while-down"], 0644, /*do_fsync=*/true));
  CliRun st = RunCli(CliArgs(*fs, "status"));
  ASSERT_NE(st.output.find("EXCLUDED since eviction"), std::string::npos) << st.output;
  // Back, it is killed by the first range its catch-up writes (a returning
  // server that fails again), and comes back again, marked: the mount
  // begins the catch-up again by itself.
  ASSERT_TRUE(cluster.Restart(k, {"S3ORAM_FAULT=server.catch_up.after_write@1"}).ok());
  bool exited = false;
  for (int i = 0; i < 300 && !(exited = cluster.Exited(k)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(exited) << "server " << k << " was not killed by its first catch-up within 30 s:\n"
                      << fs->daemon_log();
  ASSERT_TRUE(cluster.Restart(k).ok());
  // Bounded: the mount asks every 10 s; a few beats at most. Files are
  // written (with evictions among them) while it is caught up: the mount
  // goes on between the catch-up's ranges.
  bool back = false;
  for (int i = 0; i < 90 && !back; ++i) {
    const std::string name = "during-" + std::to_string(i);
    files[name] = PatternBytes(64 << 10, seed + 100 + static_cast<std::uint64_t>(i));
    ASSERT_TRUE(WriteFile(fs->Path(name), files[name], 0644, /*do_fsync=*/true));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    back = fs->daemon_log().find("caught up in") != std::string::npos;
  }
  ASSERT_TRUE(back) << "the mount did not catch server " << k << " up within 90 s:\n"
                    << fs->daemon_log();
  {
    const std::string log = fs->daemon_log();
    const auto at = log.rfind("caught up in");
    std::printf("[ catch-up ] %s\n", log.substr(at, log.find('\n', at) - at).c_str());
  }
  st = RunCli(CliArgs(*fs, "status"));
  std::printf("[ status   ] after the catch-up:\n%s", st.output.c_str());
  EXPECT_EQ(st.output.find("EXCLUDED"), std::string::npos) << st.output;
  files["after"] = PatternBytes(300000, seed + 4);
  ASSERT_TRUE(WriteFile(fs->Path("after"), files["after"], 0644, /*do_fsync=*/true));
  testing::ExpectFilesIn(*fs, files);
  ASSERT_TRUE(fs->Unmount());
  const CliRun scrub = RunCli(CliArgs(*fs, "scrub"));
  EXPECT_EQ(scrub.exit_code, 0) << scrub.output;
  EXPECT_NE(scrub.output.find("consistent sharing across all 4 servers"), std::string::npos)
      << scrub.output;
  // With another server down, every file still reads: the caught-up one's
  // shares are among the three each read needs.
  const std::size_t other = (k + 1) % 4;
  ASSERT_TRUE(cluster.Kill(other, SIGKILL).ok());
  auto mounted = fs->Mount();
  ASSERT_TRUE(mounted) << mounted.message();
  testing::ExpectFilesIn(*fs, files);
}

}  // namespace
}  // namespace s3oram
