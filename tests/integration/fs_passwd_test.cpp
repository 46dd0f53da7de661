// Issue 24, point 2: `s3oram passwd` revokes the old passphrase. After it,
// the old passphrase opens neither the state nor any backup generation on
// the servers: not the newest (re-wrapped), not an older one asked for by
// number (deleted from every server's disk), not through `attach`. A passwd
// killed between the state's change and its upload leaves the old
// generations on the servers, and the next backup removes them. A device
// still on the old passphrase (a copy of the state made before) cannot put
// an old-passphrase backup back. The real CLI, daemon and servers
// throughout; the servers' data directories are read to see what they keep.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "oramcore/base/private_file.h"
#include "tests/integration/fs_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::CliPath;
using testing::MountedFs;
using testing::PatternBytes;
using testing::RunCmd;
using testing::WriteFile;

namespace stdfs = std::filesystem;

// The backup generations whose files are in server i's data directory
// (serverd/backup_store.h: backup-<generation>.bin), ascending.
std::vector<std::uint64_t> GenerationsOnDisk(const MountedFs& fs, std::size_t server) {
  std::vector<std::uint64_t> out;
  const std::string dir = fs.test_fs()->cluster->dir() + "/data-" + std::to_string(server);
  for (const auto& e : stdfs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("backup-", 0) == 0 && name.size() > 11 &&
        name.compare(name.size() - 4, 4, ".bin") == 0) {
      out.push_back(std::stoull(name.substr(7, name.size() - 11)));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void ExpectOnEveryServer(const MountedFs& fs, const std::vector<std::uint64_t>& generations,
                         const std::string& when) {
  for (std::size_t i = 0; i < fs.test_fs()->cluster->endpoints().size(); ++i) {
    EXPECT_EQ(GenerationsOnDisk(fs, i), generations) << "server " << i << ", " << when;
  }
}

// Writes `pass` to a new file `path` (mode 0600) and returns the path.
std::string WritePassfile(const std::string& path, const std::string& pass) {
  EXPECT_TRUE(WritePrivateFile(
                  path, std::span(reinterpret_cast<const std::uint8_t*>(pass.data()), pass.size()))
                  .ok());
  return path;
}

// --server/--server-key for every server, and this machine's client key.
std::vector<std::string> MachineArgs(const MountedFs& fs) {
  const auto& c = *fs.test_fs()->cluster;
  std::vector<std::string> argv;
  for (std::size_t i = 0; i < c.endpoints().size(); ++i) {
    argv.insert(argv.end(),
                {"--server", c.endpoints()[i], "--server-key", c.server_public_key_file(i)});
  }
  argv.insert(argv.end(), {"--client-key", c.client_key_file()});
  return argv;
}

testing::CmdResult RunCli(const std::vector<std::string>& argv,
                          const std::vector<std::string>& env = {}) {
  return RunCmd(argv, std::chrono::seconds(120), "", env);
}

TEST(FsPasswdTest, AfterPasswdTheOldPassphraseOpensNoStateAndNoBackup) {
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::printf("[ seed     ] %llu (file contents)\n", static_cast<unsigned long long>(seed));
  const std::string state = fs->state();

  // Three generations under the first passphrase: two unmounts and an
  // on-demand backup. The servers keep the newest two.
  const std::string kept = PatternBytes(300000, seed);
  ASSERT_TRUE(WriteFile(fs->Path("kept"), kept));
  const std::string first = testing::ReadWholeFile(fs->passfile());
  const std::string first_file = WritePassfile(fs->Scratch("first-pass"), first);
  const std::string second_file =
      WritePassfile(fs->Scratch("second-pass"), "the second passphrase");
  // Mounted: refused, nothing changed (the revoking upload needs the state
  // to itself).
  auto busy = RunCli({CliPath(), "passwd", "-s", state, "--passfile", first_file, "--new-passfile",
                      second_file, "--insecure-kdf"});
  EXPECT_EQ(busy.exit_code, 1) << busy.output;
  EXPECT_NE(busy.output.find("is in use"), std::string::npos) << busy.output;
  ASSERT_TRUE(fs->Unmount());
  ASSERT_TRUE(fs->Mount());
  const std::string later = PatternBytes(70000, seed + 1);
  ASSERT_TRUE(WriteFile(fs->Path("later"), later));
  ASSERT_TRUE(fs->Unmount());
  auto b3 = RunCli({CliPath(), "backup-state", "-s", state, "--passfile", fs->passfile()});
  ASSERT_EQ(b3.exit_code, 0) << b3.output;
  ExpectOnEveryServer(*fs, {2, 3}, "before any passwd");
  // Another device's state, or a copy of this one, made before the change.
  const std::string old_copy = fs->Scratch("old-copy.s3oram");
  stdfs::copy_file(state, old_copy);

  const std::string third = "the third passphrase";
  const std::string third_file = WritePassfile(fs->Scratch("third-pass"), third);

  // 1. passwd killed between the state's change and the upload.
  auto killed = RunCli({CliPath(), "passwd", "-s", state, "--passfile", first_file, "--new-passfile",
                        second_file, "--insecure-kdf"},
                       {"S3ORAM_FAULT=passwd.before_upload"});
  ASSERT_TRUE(WIFSIGNALED(killed.wait_status)) << killed.output;
  auto first_on_state = RunCli({CliPath(), "status", "-s", state, "--passfile", first_file});
  EXPECT_EQ(first_on_state.exit_code, 1) << first_on_state.output;
  EXPECT_NE(first_on_state.output.find("wrong passphrase"), std::string::npos)
      << first_on_state.output;
  ExpectOnEveryServer(*fs, {2, 3}, "after a passwd killed before its upload");
  // The next backup (here on demand; an unmount does the same) finishes it.
  auto b4 = RunCli({CliPath(), "backup-state", "-s", state, "--passfile", second_file});
  ASSERT_EQ(b4.exit_code, 0) << b4.output;
  EXPECT_NE(b4.output.find("as generation 4"), std::string::npos) << b4.output;
  ExpectOnEveryServer(*fs, {4}, "after the backup that follows the killed passwd");

  // 2. A whole passwd revokes by itself.
  auto pw = RunCli({CliPath(), "passwd", "-s", state, "--passfile", second_file, "--new-passfile",
                    third_file, "--insecure-kdf"});
  ASSERT_EQ(pw.exit_code, 0) << pw.output;
  EXPECT_NE(pw.output.find("backup generation 5 uploaded"), std::string::npos) << pw.output;
  ExpectOnEveryServer(*fs, {5}, "after passwd");

  // 3. Neither earlier passphrase opens anything.
  const std::string attached = fs->Scratch("attached.s3oram");
  for (const std::string& old_file : {first_file, second_file}) {
    SCOPED_TRACE(old_file);
    auto st = RunCli({CliPath(), "status", "-s", state, "--passfile", old_file});
    EXPECT_EQ(st.exit_code, 1) << st.output;
    EXPECT_NE(st.output.find("wrong passphrase"), std::string::npos) << st.output;
    const std::string restored = fs->Scratch("restored-old.s3oram");
    for (std::uint64_t g = 0; g <= 5; ++g) {  // 0: the newest usable one
      auto argv = MachineArgs(*fs);
      argv.insert(argv.begin(), {CliPath(), "restore", "-s", restored, "--passfile", old_file});
      if (g != 0) argv.insert(argv.end(), {"--generation", std::to_string(g)});
      auto r = RunCli(argv);
      EXPECT_EQ(r.exit_code, 1) << "generation " << g << ": " << r.output;
      const bool deleted = g >= 1 && g <= 4;
      EXPECT_NE(r.output.find(deleted ? "is not held" : "wrong passphrase"), std::string::npos)
          << "generation " << g << ": " << r.output;
      EXPECT_FALSE(stdfs::exists(restored)) << "generation " << g;
    }
    auto argv = MachineArgs(*fs);
    argv.insert(argv.begin(), {CliPath(), "attach", "-s", attached, "--passfile", old_file,
                               "--mountpoint", fs->root()});
    auto at = RunCli(argv);
    EXPECT_EQ(at.exit_code, 1) << at.output;
    EXPECT_NE(at.output.find("wrong passphrase"), std::string::npos) << at.output;
    EXPECT_FALSE(stdfs::exists(attached));
  }

  // 4. A state still on the first passphrase cannot put a backup of it back,
  // nor change its passphrase (stale: it has not seen the newer backups).
  auto stale_pw = RunCli({CliPath(), "passwd", "-s", old_copy, "--passfile", first_file,
                          "--new-passfile", third_file, "--insecure-kdf"});
  EXPECT_EQ(stale_pw.exit_code, 1) << stale_pw.output;
  EXPECT_NE(stale_pw.output.find("stale state"), std::string::npos) << stale_pw.output;
  ExpectOnEveryServer(*fs, {5}, "after a stale state's passwd");
  // The client refuses first (the state has not seen the newer generations:
  // stale); the servers would refuse its key epoch too
  // (BackupStoreTest.ANewKeyEpochRemovesEveryGenerationOfTheOldOne).
  auto stale = RunCli({CliPath(), "backup-state", "-s", old_copy, "--passfile", first_file});
  EXPECT_NE(stale.exit_code, 0) << stale.output;
  EXPECT_NE(stale.output.find("stale state"), std::string::npos) << stale.output;
  ExpectOnEveryServer(*fs, {5}, "after an old-passphrase state tried a backup");

  // 5. The current passphrase attaches and mounts, every byte there.
  auto argv = MachineArgs(*fs);
  argv.insert(argv.begin(), {CliPath(), "attach", "-s", attached, "--passfile", third_file,
                             "--mountpoint", fs->root()});
  auto at = RunCli(argv);
  ASSERT_EQ(at.exit_code, 0) << at.output;
  stdfs::remove(fs->passfile());  // the mount's -o passfile= names this file
  WritePassfile(fs->passfile(), third);
  fs->test_fs()->state = attached;
  ASSERT_TRUE(fs->Mount());
  EXPECT_TRUE(testing::FileHasContent(fs->Path("kept"), kept));
  EXPECT_TRUE(testing::FileHasContent(fs->Path("later"), later));
  ASSERT_TRUE(fs->Unmount());
  ExpectOnEveryServer(*fs, {5, 6}, "after the attached device's unmount");
}

}  // namespace
}  // namespace s3oram
