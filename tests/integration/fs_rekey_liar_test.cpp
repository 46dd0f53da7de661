// Issue 42: a server that lies while a master-key rotation is under way. A
// rotation can last days (a rekey interrupted after its first chunk resumes
// later), and its buckets mix slots tagged under the share MAC key before
// and after it. The eviction check used to leave the share MAC out for the
// whole rotation, so one server that rewrote the buckets the next
// evictions read (its digests recomputed: what a server can do to its own
// disk) had them commit a consistent sharing of wrong values: fsynced files
// were lost for good and nobody was named. A rekey now replaces one half of
// the share MAC key and keeps the other (crypto/share_mac_secrets.h), and
// the check verifies that half, so the eviction is refused before COMMIT;
// scrub names the server, the rebuild it names repairs it, and every
// fsynced byte reads back, before and after the rotation is resumed.
// Real servers, a real mount, the CLI as a user runs it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "oramcore/state/client_state.h"
#include "oramcore/state/state_file.h"
#include "oramcore/tree/geometry.h"
#include "tests/integration/fs_fixture.h"
#include "tests/integration/run_cli.h"
#include "tests/integration/share_damage.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::CliArgs;
using testing::CliPath;
using testing::CliRun;
using testing::MountedFs;
using testing::PatternBytes;
using testing::RunCli;
using testing::WriteFile;

using Files = std::map<std::string, std::string>;

// The number of evictions the state at `path` has committed.
std::uint64_t CommittedEvictions(const std::string& path, const std::string& pass) {
  auto store = testing::OpenStateWithPassphrase(path, pass);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? (*store)->counters().ne : 0;
}

TEST(FsRekeyLiarTest, BucketsRewrittenByOneServerDuringARotationAreRefusedNamedAndRepaired) {
  testing::FsOptions options;
  options.params = testing::TinyFsParams();
  auto fs = MountedFs::Create(options);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const OramParams& p = options.params;
  const std::uint64_t seed = s3oram::testing::TestSeed();
  const std::size_t liar = seed % 3;
  std::printf(
      "[ seed     ] %llu: server %zu rewrites the next evictions' buckets during a "
      "rekey\n",
      static_cast<unsigned long long>(seed), liar);
  Files files;
  for (int i = 0; i < 4; ++i) {
    const std::string name = "old" + std::to_string(i);
    files[name] = PatternBytes(12000 + 4001 * static_cast<std::size_t>(i), seed + i);
    ASSERT_TRUE(WriteFile(fs->Path(name), files[name], 0644, /*do_fsync=*/true)) << name;
  }
  ASSERT_TRUE(fs->Unmount());

  // A rotation interrupted after its first chunk of re-sealing (the same
  // passphrase before and after: the key changes all the same).
  const std::string pass = testing::ReadWholeFile(fs->passfile());
  auto killed =
      testing::RunCmd({CliPath(), "rekey", "-s", fs->state(), "--passfile", fs->passfile(),
                       "--new-passfile", fs->passfile(), "--insecure-kdf", "--plain-progress"},
                      std::chrono::seconds(300), "", {"S3ORAM_FAULT=rekey.reseal.after_chunk"});
  ASSERT_TRUE(WIFSIGNALED(killed.wait_status)) << "not killed:\n" << killed.output;
  const CliRun mid = RunCli(CliArgs(*fs, "status"));
  EXPECT_NE(mid.output.find("rekey       UNDER WAY"), std::string::npos) << mid.output;
  EXPECT_NE(mid.output.find("checked for consistency and by half of the share MAC"),
            std::string::npos)
      << mid.output;

  // The liar, stopped, rewrites every slot of the buckets below the root on
  // the paths of the next two evictions (levels 1 and 2), each with its
  // digest recomputed, and is started again.
  const std::uint64_t ne = CommittedEvictions(fs->state(), pass);
  const TreeGeometry geo = p.geometry();
  auto& cluster = *fs->test_fs()->cluster;
  ASSERT_TRUE(cluster.Kill(liar, SIGTERM).ok());
  const std::string shares = cluster.dir() + "/data-" + std::to_string(liar) + "/shares.bin";
  std::uint64_t rewritten = 0;
  for (std::uint64_t e = ne; e < ne + 2; ++e) {
    for (std::uint32_t level = 1; level <= 2; ++level) {
      const std::uint64_t bucket = geo.BucketOnPath(geo.EvictionLeaf(e), level);
      for (std::uint32_t slot = 0; slot < p.bucket_size; ++slot) {
        testing::RewriteSlotWithItsDigest(shares, p, bucket, slot, seed + ++rewritten);
        ASSERT_FALSE(::testing::Test::HasFatalFailure());
      }
    }
  }
  std::printf("%llu slots rewritten on server %zu (evictions %llu and %llu)\n",
              static_cast<unsigned long long>(rewritten), liar, static_cast<unsigned long long>(ne),
              static_cast<unsigned long long>(ne + 1));
  ASSERT_TRUE(cluster.Restart(liar).ok());

  // The eviction is refused: at the mount if the killed rekey left it
  // pending, else at the write or fsync of a new file that drives it.
  // Before the fix every eviction committed.
  bool refused = false;
  if (!fs->Mount()) {
    const std::string log = fs->log();
    EXPECT_NE(log.find("eviction " + std::to_string(ne) + " was refused"), std::string::npos)
        << log;
    EXPECT_NE(log.find("run s3oram scrub"), std::string::npos) << log;
    refused = true;
  } else {
    for (int i = 0; i < 12 && !refused; ++i) {
      const std::string name = "new" + std::to_string(i);
      const std::string content = PatternBytes(20000, seed + 100 + i);
      if (WriteFile(fs->Path(name), content, 0644, /*do_fsync=*/true)) {
        files[name] = content;
      } else {
        refused = true;
      }
    }
    std::printf("%zu new files fsynced before the refusal\n", files.size() - 4);
    (void)fs->Unmount();  // may report the refused eviction
  }
  ASSERT_TRUE(refused) << "files written and fsynced through evictions of buckets a server "
                          "rewrote: the evictions were not checked";
  EXPECT_EQ(CommittedEvictions(fs->state(), pass), ne) << "an eviction committed";

  // Scrub names the liar (the other two servers open to authentic values
  // under one key of the rotation or the other); the rebuild it names works.
  const CliRun scrub = RunCli(CliArgs(*fs, "scrub", "--plain-progress"));
  std::printf("%s\n", scrub.output.c_str());
  EXPECT_EQ(scrub.exit_code, 4) << scrub.output;
  EXPECT_NE(scrub.output.find("server " + std::to_string(liar) + " holds the odd share"),
            std::string::npos)
      << scrub.output;
  EXPECT_NE(scrub.output.find("--server " + std::to_string(liar) + " --force"), std::string::npos)
      << scrub.output;
  const CliRun rebuilt =
      RunCli(CliArgs(*fs, "rebuild", "--server " + std::to_string(liar) + " --force"));
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;

  // Every fsynced byte is there, before and after the rotation ends.
  ASSERT_TRUE(fs->Mount());
  testing::ExpectFilesIn(*fs, files);
  ASSERT_TRUE(fs->Unmount());
  EXPECT_GT(CommittedEvictions(fs->state(), pass), ne) << "the refused eviction never committed";
  auto resumed =
      testing::RunCmd({CliPath(), "rekey", "-s", fs->state(), "--passfile", fs->passfile(),
                       "--new-passfile", fs->passfile(), "--insecure-kdf", "--plain-progress"},
                      std::chrono::seconds(300));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("rekey done: "), std::string::npos) << resumed.output;
  const CliRun after = RunCli(CliArgs(*fs, "status"));
  EXPECT_NE(after.output.find("checked for consistency and by share MAC"), std::string::npos)
      << after.output;
  const CliRun clean = RunCli(CliArgs(*fs, "scrub", "--plain-progress"));
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  ASSERT_TRUE(fs->Mount());
  testing::ExpectFilesIn(*fs, files);
}

}  // namespace
}  // namespace s3oram
