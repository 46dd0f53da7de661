// The server-fault suite under a real mount (issue 22): one server's files
// are damaged (random bytes of a written data slot, of a root slot the
// protocol never writes, of a slot digest, or of the shadow buckets of an
// eviction left in flight by a kill of that server between PREPARE and
// COMMIT), the mounted filesystem is used on (new files written and fsynced,
// old ones read, evictions falling due), then the repair the tools name is
// run. Both block layouts: 4 KiB blocks, one file per block, and 32 KiB
// blocks holding several small files each (the packed layout). Over every
// seed:
//   - no read through the mount returns other bytes than were written;
//   - no fsync reports success for a file that is not there, whole, after
//     the repair (zero fsynced bytes lost);
//   - whatever names a server (the daemon's log, `s3oram status`, scrub)
//     names the damaged one;
//   - after the repair, scrub and fsck are clean and new files can be
//     written and read.
// Seeds: S3ORAM_TEST_SEED + k, each printed; the kind of damage cycles with
// the seed (all four per layout in the release build, two under the
// sanitizers). The engine-level suite (server_fault_test.cpp) covers the store header
// and backup records as well.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "oramcore/tree/geometry.h"
#include "tests/integration/fs_fixture.h"
#include "tests/integration/share_damage.h"
#include "tests/support/test_scale.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

namespace stdfs = std::filesystem;
using testing::CliPath;
using testing::CmdResult;
using testing::FsOptions;
using testing::MountedFs;
using testing::PatternBytes;
using testing::RunCmd;
using testing::WriteFile;


enum class Damage { kDataSlot, kUnusedRootSlot, kDigest, kShadowInFlight };
const char* Name(Damage d) {
  switch (d) {
    case Damage::kDataSlot: return "a written data slot";
    case Damage::kUnusedRootSlot: return "a root slot the protocol never writes";
    case Damage::kDigest: return "a slot digest";
    case Damage::kShadowInFlight: return "the shadow buckets of an eviction in flight";
  }
  return "?";
}

struct Layout {
  const char* name;
  std::uint32_t block_bytes;
  std::size_t min_file, max_file;  // file sizes written
};
void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }
const Layout kDirect{"Direct4K", 4096, 2000, 2 * 4096};
const Layout kPacked{"Packed32K", 32768, 300, 6000};

// s3oram ARGS on the mount's state.
CmdResult Cli(MountedFs& fs, std::vector<std::string> args) {
  std::vector<std::string> argv = {CliPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"-s", fs.state(), "--passfile", fs.passfile()});
  return RunCmd(argv, std::chrono::seconds(300));
}

// A small filesystem (A = 8, H = 6) whose servers give up on a dead peer
// in 2 s, mounted with `mount_opts`.
std::unique_ptr<MountedFs> MountSmall(std::uint32_t block_bytes, const std::string& mount_opts) {
  FsOptions o;
  o.params = testing::SmallParams(block_bytes, 8, 6);
  o.peer_timeout_ms = 2000;
  o.mount_opts = mount_opts;
  return MountedFs::Create(o);
}

class FsServerFaultTest : public ::testing::TestWithParam<Layout> {
 protected:
  void RunOneSeed(std::uint64_t seed, Damage kind);
};

void FsServerFaultTest::RunOneSeed(std::uint64_t seed, Damage kind) {
  const Layout& layout = GetParam();
  std::mt19937_64 rng(seed);
  // Short waits: a dead server fails an operation in seconds, not minutes.
  auto fs = MountSmall(layout.block_bytes, "writeback_delay=0,timeout=3,evict_timeout=20");
  ASSERT_TRUE(fs);
  if (fs->reference()) GTEST_SKIP() << "needs the s3oramfs daemon";
  const OramParams& p = fs->params();
  auto& cluster = *fs->test_fs()->cluster;
  const std::size_t bad = rng() % 3;
  const std::string dir = cluster.dir() + "/data-" + std::to_string(bad);
  std::printf("[ seed     ] %llu: %s, server %zu, %s\n", static_cast<unsigned long long>(seed),
              layout.name, bad, Name(kind));
  std::fflush(stdout);

  // What an fsync acknowledged (name -> content); `tried` counts attempts.
  std::map<std::string, std::string> synced;
  int next_name = 0;
  std::string last_error;
  std::vector<std::string> unpromised;  // written, write failed, not removed yet
  auto write_synced = [&]() {
    const std::string name = "f" + std::to_string(next_name++);
    const std::size_t size = layout.min_file + rng() % (layout.max_file - layout.min_file + 1);
    const std::string content = PatternBytes(size, rng());
    if (auto r = WriteFile(fs->Path(name), content, 0644, /*do_fsync=*/true); r) {
      synced[name] = content;
      return true;
    } else {
      last_error = r.message();
    }
    // Whatever is there is not promised. While the mount is read-only
    // (fail-stop) the unlink fails too; the file is removed after the repair.
    if (::unlink(fs->Path(name).c_str()) != 0 && errno != ENOENT) unpromised.push_back(name);
    return false;
  };

  // Healthy: every write succeeds; enough for a few evictions.
  for (int i = 0; i < 3 * static_cast<int>(p.evict_rate); ++i) {
    ASSERT_TRUE(write_synced()) << "file " << i << " on a healthy filesystem: " << last_error;
  }
  ASSERT_TRUE(fs->Unmount());

  // The damage.
  ASSERT_TRUE(cluster.Kill(bad, SIGTERM).ok());
  const std::string shares = dir + "/shares.bin";
  std::string where;
  switch (kind) {
    case Damage::kDataSlot:
      where = testing::DamageShareFile(shares, p, testing::ShareDamage::kDataSlot, rng);
      break;
    case Damage::kUnusedRootSlot:
      where = testing::DamageShareFile(shares, p, testing::ShareDamage::kUnusedRootSlot, rng);
      break;
    case Damage::kDigest:
      where = testing::DamageShareFile(shares, p, testing::ShareDamage::kDigest, rng);
      break;
    case Damage::kShadowInFlight: {
      // The server dies between its PREPARE and the COMMIT, with its shadow
      // sealed on disk; the others may have committed.
      ASSERT_TRUE(cluster.Restart(bad, {"S3ORAM_FAULT=server.evict_commit.before"}).ok());
      ASSERT_TRUE(fs->Mount());
      for (int i = 0; i < 4 * static_cast<int>(p.evict_rate) && !cluster.Exited(bad); ++i) {
        write_synced();
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!cluster.Exited(bad) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      ASSERT_TRUE(cluster.Exited(bad)) << "no eviction reached server " << bad << "'s commit";
      (void)fs->Unmount();  // its backup upload may fail: a server is down
      // The sealed shadow lies in free places of shares.bin.
      const auto shadow = testing::ShadowInFile(shares);
      ASSERT_FALSE(shadow.empty()) << "the sealed shadow is on disk";
      const std::size_t i = rng() % shadow.size();
      const std::uint64_t bucket_bytes = p.bucket_size * p.slot_bytes();
      if (rng() % 2 == 0) {
        const std::uint64_t at = shadow[i].data + rng() % (bucket_bytes - 16);
        testing::FlipBytes(shares, at, 16, rng);
        where = "shadow bucket " + std::to_string(i) + " (shares.bin offset " +
                std::to_string(at) + ")";
      } else {
        const std::uint64_t slot = rng() % p.bucket_size;
        testing::FlipBytes(shares, shadow[i].digests + slot * 8, 8, rng);
        where = "the digest of shadow bucket " + std::to_string(i) + " slot " + std::to_string(slot);
      }
      break;
    }
  }
  if (HasFatalFailure()) return;
  std::printf("  damaged %s\n", where.c_str());
  std::fflush(stdout);
  ASSERT_TRUE(cluster.Restart(bad).ok());

  // Keep using it: new files (fsynced) and reads of old ones. A failure is
  // allowed (EIO while the damage is in the way); a wrong byte is not.
  std::size_t failed = 0, wrong = 0, ops = 0;
  std::string named;
  if (fs->Mount()) {
    for (int k = 0; k < 3 * static_cast<int>(p.evict_rate); ++k, ++ops) {
      if (rng() % 2 == 0 || synced.empty()) {
        failed += !write_synced();
      } else {
        auto it = synced.begin();
        std::advance(it, static_cast<long>(rng() % synced.size()));
        auto got = testing::ReadFile(fs->Path(it->first));
        if (!got) {
          ++failed;
        } else {
          wrong += *got != it->second;
        }
      }
    }
    // Fail-stop: once the daemon met the damage, the mount is read-only
    // until the repair (changes fail with EROFS at once, nothing is taken
    // that could not be stored), and s3oram status says so.
    if (fs->daemon_log().find("a server reported damaged storage") != std::string::npos) {
      const int fd = ::open(fs->Path("after-stop").c_str(), O_CREAT | O_WRONLY, 0644);
      const int open_errno = errno;
      if (fd >= 0) ::close(fd);
      EXPECT_EQ(fd, -1) << "a file was created after the writes stopped";
      EXPECT_EQ(open_errno, EROFS);
      EXPECT_EQ(::mkdir(fs->Path("dir-after-stop").c_str(), 0755), -1);
      EXPECT_EQ(errno, EROFS);
      EXPECT_FALSE(write_synced()) << "a write succeeded after the writes stopped";
      const std::string status = Cli(*fs, {"status"}).output;
      EXPECT_NE(status.find("writes      STOPPED"), std::string::npos) << status;
      std::printf("  the daemon met the damage: the mount turned read-only (EROFS)\n");
    }
    named += Cli(*fs, {"status"}).output;
    (void)fs->Unmount();
  } else {
    // Opening had to finish an eviction the damaged server refuses: nothing
    // can be used until the repair, and the refusal names that server.
    const std::string log = fs->log();
    const std::size_t at = log.rfind("cannot open");
    const std::size_t from = at == std::string::npos ? 0 : log.rfind('\n', at) + 1;
    const std::string line = log.substr(from, log.find('\n', from) - from);
    std::printf("  the mount refused to start while the server is damaged: %s\n", line.c_str());
    EXPECT_NE(line.find("server " + std::to_string(bad)), std::string::npos) << line;
    EXPECT_NE(line.find("s3oram rebuild --server " + std::to_string(bad)), std::string::npos)
        << line;
  }
  named += fs->log() + fs->daemon_log();
  if (kind == Damage::kShadowInFlight) {
    // The mount before was unmounted while this server was down, so only
    // this server kept its lease: taken over as a crashed client's, on it
    // alone, without --force.
    EXPECT_NE(named.find("taking over the lease of a crashed client of this state file on this "
                         "machine (1 of 3 servers held it)"),
              std::string::npos)
        << named;
  }
  std::printf("  while damaged: %zu of %zu operations failed\n", failed, ops);
  std::fflush(stdout);
  EXPECT_EQ(wrong, 0u) << "a read returned other bytes than were written";
  EXPECT_TRUE(testing::OtherServersNamed(named, bad).empty()) << "an honest server was named:\n" << named;

  // The repair the tools name: scrub says which server, rebuild repairs it.
  const CmdResult scrub = Cli(*fs, {"scrub", "--plain-progress"});
  EXPECT_TRUE(testing::OtherServersNamed(scrub.output, bad).empty()) << scrub.output;
  if (scrub.exit_code != 0) {
    EXPECT_NE(scrub.output.find("server " + std::to_string(bad)), std::string::npos)
        << scrub.output;
  }
  const std::string server = std::to_string(bad);
  CmdResult rebuilt = Cli(*fs, {"rebuild", "--server", server, "--plain-progress"});
  if (rebuilt.exit_code == 2 && rebuilt.output.find("--force") != std::string::npos) {
    // Its share file verifies (the damage was elsewhere, or consumed): the
    // operator who knows which disk failed forces it.
    rebuilt = Cli(*fs, {"rebuild", "--server", server, "--force", "--plain-progress"});
  }
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  const CmdResult clean = Cli(*fs, {"scrub", "--plain-progress"});
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  // Files whose write failed while the mount was read-only: their blocks
  // were marked lost at unmount (reads fail); removing them works now.
  if (!unpromised.empty()) {
    ASSERT_TRUE(fs->Mount());
    for (const std::string& name : unpromised) {
      if (::unlink(fs->Path(name).c_str()) != 0) {
        EXPECT_EQ(errno, ENOENT) << "rm " << name << " after the repair: " << std::strerror(errno);
      }
    }
    ASSERT_TRUE(fs->Unmount());
    std::printf("  removed %zu files whose write had failed, after the repair\n", unpromised.size());
  }
  CmdResult fsck = Cli(*fs, {"fsck", "-n"});
  EXPECT_EQ(fsck.exit_code, 0) << fsck.output;

  // Zero fsynced bytes lost, and the filesystem works on.
  ASSERT_TRUE(fs->Mount());
  std::size_t lost = 0;
  for (const auto& [name, content] : synced) {
    auto got = testing::ReadFile(fs->Path(name));
    if (!got || *got != content) {
      ++lost;
      ADD_FAILURE() << name << " (" << content.size() << " bytes, fsynced) "
                    << (got ? "differs" : "cannot be read") << " after the repair";
    }
  }
  for (int i = 0; i < 2 * static_cast<int>(p.evict_rate); ++i) {
    ASSERT_TRUE(write_synced()) << "a write after the repair failed: " << last_error << "\n"
                                << fs->log();
  }
  ASSERT_TRUE(fs->Unmount());
  ASSERT_TRUE(fs->Mount());
  for (const auto& [name, content] : synced) {
    auto got = testing::ReadFile(fs->Path(name));
    EXPECT_TRUE(got && *got == content) << name << " after a remount";
  }
  ASSERT_TRUE(fs->Unmount());
  std::printf("  after the repair: %zu fsynced files, %zu lost\n", synced.size(), lost);
}

TEST_P(FsServerFaultTest, DamageOnOneServerLosesNoFsyncedByteAndIsRepaired) {
  const std::uint64_t base = testing::TestSeed();
  const Damage kinds[] = {Damage::kDataSlot, Damage::kUnusedRootSlot, Damage::kDigest,
                          Damage::kShadowInFlight};
  // Every kind once per layout; the sanitizer build takes two, starting
  // where the seed says (so repeated runs cover all four).
  const int seeds = testing::ScaledForBuild(4, 2, 2);
  for (int k = 0; k < seeds; ++k) {
    SCOPED_TRACE("seed " + std::to_string(base + k));
    RunOneSeed(base + k, kinds[(base + k) % 4]);
    if (HasFatalFailure() || IsSkipped()) return;
  }
  std::printf("[ cases    ] %s: %d seeds, one kind of damage each\n", GetParam().name, seeds);
}

INSTANTIATE_TEST_SUITE_P(Layouts, FsServerFaultTest, ::testing::Values(kDirect, kPacked),
                         [](const auto& p) { return std::string(p.param.name); });

// A write whose write-back never succeeded (here: a server's damaged storage
// fails every access) and that unmount therefore drops must not read back
// as older bytes or zeros later: its blocks are marked lost, reads of them
// fail with EIO (after the repair, after a remount), fsck lists them, and a
// new write of a block, or fsck -y --zero-damaged, ends it.
TEST(FsLostWriteTest, AWriteBackDroppedAtUnmountFailsReadsUntilRewritten) {
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  // Written data stay in the daemon's cache until unmount.
  auto fs = MountSmall(4096, "writeback_delay=600,timeout=3,evict_timeout=20");
  ASSERT_TRUE(fs);
  if (fs->reference()) GTEST_SKIP() << "needs the s3oramfs daemon";
  const OramParams& p = fs->params();
  auto& cluster = *fs->test_fs()->cluster;
  const std::size_t bad = rng() % 3;
  auto cli = [&](std::vector<std::string> args) { return Cli(*fs, std::move(args)); };
  const std::string kept = PatternBytes(3 * 4096, rng());
  ASSERT_TRUE(WriteFile(fs->Path("kept"), kept, 0644, /*do_fsync=*/true));
  const std::string dropped = PatternBytes(3 * 4096, rng());
  ASSERT_TRUE(WriteFile(fs->Path("dropped"), dropped));  // no fsync: cached

  // The damage every retrieval meets (a root slot the protocol never
  // writes), made while the mount still holds the write.
  ASSERT_TRUE(cluster.Kill(bad, SIGTERM).ok());
  const std::string where = testing::DamageShareFile(
      cluster.dir() + "/data-" + std::to_string(bad) + "/shares.bin", p,
      testing::ShareDamage::kUnusedRootSlot, rng);
  std::printf("[ seed     ] %llu: server %zu, %s\n", static_cast<unsigned long long>(seed), bad,
              where.c_str());
  ASSERT_TRUE(cluster.Restart(bad).ok());
  (void)fs->Unmount();
  const std::string log = fs->daemon_log();
  ASSERT_NE(log.find("unsynced data are lost: 3 blocks marked lost"), std::string::npos) << log;

  const CmdResult rebuilt = cli({"rebuild", "--server", std::to_string(bad), "--plain-progress"});
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  ASSERT_TRUE(fs->Mount());
  EXPECT_EQ(testing::ReadFile(fs->Path("kept")), kept);
  errno = 0;
  EXPECT_FALSE(testing::ReadFile(fs->Path("dropped"))) << "the dropped write read back as data";
  EXPECT_EQ(errno, EIO);
  // The first block written again (no truncation): it reads back, the
  // others still fail.
  const std::string again = PatternBytes(4096, rng());
  {
    const int fd = ::open(fs->Path("dropped").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::pwrite(fd, again.data(), again.size(), 0), static_cast<ssize_t>(again.size()));
    EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
    ::close(fd);
  }
  {
    const int fd = ::open(fs->Path("dropped").c_str(), O_RDONLY | O_DIRECT);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    alignas(4096) static char buf[4096];
    EXPECT_EQ(::pread(fd, buf, sizeof buf, 0), 4096) << std::strerror(errno);
    EXPECT_EQ(std::string(buf, sizeof buf), again);
    EXPECT_EQ(::pread(fd, buf, sizeof buf, 4096), -1) << "block 1 read back as data";
    EXPECT_EQ(errno, EIO);
    ::close(fd);
  }
  ASSERT_TRUE(fs->Unmount());

  const CmdResult check = cli({"fsck", "-n"});
  EXPECT_EQ(check.exit_code, 4) << check.output;
  EXPECT_NE(check.output.find("lost its last write"), std::string::npos) << check.output;
  const CmdResult repair = cli({"fsck", "-y", "--zero-damaged"});
  EXPECT_EQ(repair.exit_code, 1) << repair.output;
  EXPECT_EQ(cli({"fsck", "-n"}).exit_code, 0);
  ASSERT_TRUE(fs->Mount());
  const auto after = testing::ReadFile(fs->Path("dropped"));
  ASSERT_TRUE(after) << std::strerror(errno);
  EXPECT_EQ(*after, again + std::string(2 * 4096, '\0'))
      << "blocks 1 and 2 read as what the servers hold (never written: zeros)";
  ASSERT_TRUE(fs->Unmount());
}

}  // namespace
}  // namespace s3oram
