// One server forges a counter on its own disk, its checksums recomputed (what
// a server that lies can do to itself): the highest lease epoch in its lease
// record, or a backup generation. Issue 42: the client used to take the
// largest value any server reported plus one, so the next mount or backup
// copied 2^64-1 to every honest server and locked every client out for good,
// naming an honest server. Now every counter is adopted from what t + 1
// servers agree on (oramcore/protocol/counter_agreement.h): the liar is
// named with the repair, the honest servers keep their values, and the repair
// the message names (a forced rebuild of the liar) brings everything back.
// Real servers, a real mount, the CLI as a user runs it.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "serverd/lease_file.h"
#include "tests/integration/fs_fixture.h"
#include "tests/integration/run_cli.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::CliArgs;
using testing::CliRun;
using testing::MountedFs;
using testing::PatternBytes;
using testing::RunCli;
using testing::WriteFile;

namespace stdfs = std::filesystem;

constexpr std::uint64_t kForged = UINT64_MAX - 1;

std::string DataDir(const MountedFs& fs, std::size_t i) {
  return fs.test_fs()->cluster->dir() + "/data-" + std::to_string(i);
}

// Files written and fsynced through the mount: name -> content.
std::map<std::string, std::string> WriteFiles(MountedFs& fs, int count, std::uint64_t seed,
                                              const std::string& prefix) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < count; ++i) {
    const std::string name = prefix + std::to_string(i);
    files[name] = PatternBytes(20000 + 7919 * static_cast<std::size_t>(i), seed + i);
    EXPECT_TRUE(WriteFile(fs.Path(name), files[name], 0644, /*do_fsync=*/true)) << name;
  }
  return files;
}

// The highest epoch server i's lease record holds (read beside the running server:
// the record is replaced by rename).
std::uint64_t HighestLeaseEpoch(const MountedFs& fs, std::size_t i) {
  auto lease = serverd::LoadLease(DataDir(fs, i));
  EXPECT_TRUE(lease.ok()) << lease.status().ToString();
  return lease.ok() ? lease->highest_epoch : 0;
}

// The newest backup generation in server i's data directory (0: none).
std::uint64_t NewestGeneration(const MountedFs& fs, std::size_t i) {
  std::uint64_t newest = 0;
  for (const auto& e : stdfs::directory_iterator(DataDir(fs, i))) {
    const std::string n = e.path().filename().string();
    if (n.rfind("backup-", 0) != 0 || n.size() < 12 || n.substr(n.size() - 4) != ".bin") continue;
    const std::string digits = n.substr(7, n.size() - 11);
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    newest = std::max<std::uint64_t>(newest, std::stoull(digits));
  }
  return newest;
}

// The liar, stopped, rewrites its lease record's highest epoch with the
// record's BLAKE2b recomputed (SaveLease), and is started again.
void ForgeLeaseEpoch(MountedFs& fs, std::size_t liar) {
  auto& c = *fs.test_fs()->cluster;
  ASSERT_TRUE(c.Kill(liar, SIGTERM).ok());
  auto lease = serverd::LoadLease(DataDir(fs, liar));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  serverd::LeaseRecord forged = *lease;
  forged.highest_epoch = kForged;
  ASSERT_TRUE(serverd::SaveLease(DataDir(fs, liar), forged, /*sync=*/true).ok());
  ASSERT_TRUE(c.Restart(liar).ok());
}

// The liar, stopped, copies its newest backup to generation 2^64-2 with the
// header's generation changed to match (the record digests cover the
// elements, not the header), and is started again.
void ForgeBackupGeneration(MountedFs& fs, std::size_t liar) {
  auto& c = *fs.test_fs()->cluster;
  ASSERT_TRUE(c.Kill(liar, SIGTERM).ok());
  const std::uint64_t newest = NewestGeneration(fs, liar);
  ASSERT_GT(newest, 0u) << "server " << liar << " holds no backup to copy";
  const std::string from = DataDir(fs, liar) + "/backup-" + std::to_string(newest) + ".bin";
  const std::string to = DataDir(fs, liar) + "/backup-" + std::to_string(kForged) + ".bin";
  stdfs::copy_file(from, to);
  std::fstream f(to, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << to;
  char gen[8];
  for (int b = 0; b < 8; ++b) gen[b] = static_cast<char>(kForged >> (8 * b));
  f.seekp(8);  // magic, version, then the generation (serverd/backup_store.h)
  f.write(gen, sizeof gen);
  ASSERT_TRUE(f.good());
  f.close();
  ASSERT_TRUE(c.Restart(liar).ok());
}

void ExpectNamed(const std::string& output, std::size_t liar) {
  EXPECT_NE(output.find("server " + std::to_string(liar) + " ("), std::string::npos) << output;
  EXPECT_NE(output.find("rebuild --server " + std::to_string(liar) + " --force"), std::string::npos)
      << output;
  for (std::size_t i = 0; i < 3; ++i) {
    if (i == liar) continue;
    EXPECT_EQ(output.find("rebuild --server " + std::to_string(i)), std::string::npos)
        << "an honest server is named for repair: " << output;
  }
}

TEST(FsLyingCountersTest, AForgedLeaseEpochIsNamedNeverCopiedAndRebuildRepairsIt) {
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t seed = s3oram::testing::TestSeed();
  const std::size_t liar = seed % 3;
  std::printf("[ seed     ] %llu: server %zu forges its lease record's highest epoch\n",
              static_cast<unsigned long long>(seed), liar);
  auto files = WriteFiles(*fs, 5, seed, "f");
  ASSERT_TRUE(fs->Unmount());

  ForgeLeaseEpoch(*fs, liar);
  const CliRun status = RunCli(CliArgs(*fs, "status"));
  std::printf("%s\n", status.output.c_str());
  EXPECT_NE(status.output.find("SERVER INCONSISTENT: server " + std::to_string(liar) + " (tcp://"),
            std::string::npos)
      << status.output;

  // The mount is refused, naming the liar and its repair; no honest server
  // took an epoch anywhere near the forged one.
  ASSERT_FALSE(fs->Mount(std::chrono::seconds(60)));
  ExpectNamed(fs->log() + fs->daemon_log(), liar);
  for (std::size_t i = 0; i < 3; ++i) {
    if (i == liar) continue;
    EXPECT_LT(HighestLeaseEpoch(*fs, i), std::uint64_t{1} << 32) << "server " << i;
  }
  const CliRun fsck = RunCli(CliArgs(*fs, "fsck", "-n"));
  EXPECT_EQ(fsck.output.find("rebuild --server " + std::to_string((liar + 1) % 3)),
            std::string::npos)
      << fsck.output;

  // The repair the message names.
  const CliRun rebuilt =
      RunCli(CliArgs(*fs, "rebuild", "--server " + std::to_string(liar) + " --force"));
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  EXPECT_LT(HighestLeaseEpoch(*fs, liar), std::uint64_t{1} << 32);
  ASSERT_TRUE(fs->Mount());
  testing::ExpectFilesIn(*fs, files);
  auto more = WriteFiles(*fs, 2, seed + 100, "g");
  ASSERT_TRUE(fs->Remount());
  testing::ExpectFilesIn(*fs, files);
  testing::ExpectFilesIn(*fs, more);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_LT(HighestLeaseEpoch(*fs, i), std::uint64_t{1} << 32) << "server " << i;
  }
}

TEST(FsLyingCountersTest, AForgedBackupGenerationIsNamedNeverCopiedAndRebuildRepairsIt) {
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t seed = s3oram::testing::TestSeed();
  const std::size_t liar = seed % 3;
  std::printf("[ seed     ] %llu: server %zu forges a backup generation\n",
              static_cast<unsigned long long>(seed), liar);
  auto files = WriteFiles(*fs, 4, seed, "f");
  ASSERT_TRUE(fs->Unmount());  // uploads a backup
  const std::uint64_t honest_before = NewestGeneration(*fs, (liar + 1) % 3);
  ASSERT_GT(honest_before, 0u);

  ForgeBackupGeneration(*fs, liar);
  const CliRun status = RunCli(CliArgs(*fs, "status"));
  std::printf("%s\n", status.output.c_str());
  EXPECT_NE(status.output.find("SERVER INCONSISTENT: server " + std::to_string(liar) + " (tcp://"),
            std::string::npos)
      << status.output;
  EXPECT_NE(status.output.find("backup generation " + std::to_string(kForged)), std::string::npos)
      << status.output;

  // A session goes on (the mount needs no backup); its unmount's upload and a
  // backup by hand are refused naming the liar; no honest server holds a
  // generation near the forged one.
  ASSERT_TRUE(fs->Mount());
  auto more = WriteFiles(*fs, 2, seed + 100, "g");
  ASSERT_TRUE(fs->Unmount());
  const CliRun backup = RunCli(CliArgs(*fs, "backup-state"));
  EXPECT_NE(backup.exit_code, 0) << backup.output;
  ExpectNamed(backup.output, liar);
  for (std::size_t i = 0; i < 3; ++i) {
    if (i == liar) continue;
    EXPECT_EQ(NewestGeneration(*fs, i), honest_before) << "server " << i;
  }

  // The repair the message names, then a backup that every server takes, and
  // a restore on a new device from it holds every file.
  const CliRun rebuilt =
      RunCli(CliArgs(*fs, "rebuild", "--server " + std::to_string(liar) + " --force"));
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  const CliRun again = RunCli(CliArgs(*fs, "backup-state"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  // (The rebuild uploads one too.) Every server holds the same newest one,
  // above the last before the forgery and nowhere near the forged one.
  const std::uint64_t now = NewestGeneration(*fs, 0);
  EXPECT_GT(now, honest_before);
  EXPECT_LT(now, honest_before + 10);
  for (std::size_t i = 1; i < 3; ++i) EXPECT_EQ(NewestGeneration(*fs, i), now) << "server " << i;
  ASSERT_TRUE(fs->Mount());
  testing::ExpectFilesIn(*fs, files);
  testing::ExpectFilesIn(*fs, more);
}

}  // namespace
}  // namespace s3oram
