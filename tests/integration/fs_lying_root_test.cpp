// Issue 42, the first scenario, through a real mount: one server, stopped,
// rewrites the live root slots of fsynced files on its disk (digests
// recomputed: what a server can do to its own files) and is started again.
// The next eviction's PREPARE copies the root into that server's root
// snapshot (root.bin), and the next round's honest root writes replace the
// slots in the live tree on every server: the change lives on only in
// root.bin, and the eviction is refused on every attempt. Scrub used to look
// at the tree only: it exited 0, cleared the recorded problem and named no
// one, and an operator left to guess forced the rebuild of an honest server,
// which copied the liar's root.bin and lost the files for good. Now scrub
// covers root.bin, names the liar and keeps the problem; the forced rebuild
// of an honest server is refused naming the liar; the liar's rebuild lets
// the eviction commit, and every fsynced file reads back.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "oramcore/state/client_state.h"
#include "oramcore/state/state_file.h"
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

// The root slots that hold a live block, from the state at `path`.
std::vector<std::uint32_t> LiveRootSlots(const std::string& path, const std::string& pass) {
  std::vector<std::uint32_t> out;
  auto store = testing::OpenStateWithPassphrase(path, pass);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return out;
  auto pm = (*store)->LoadPositionMap();
  EXPECT_TRUE(pm.ok()) << pm.status().ToString();
  if (!pm.ok()) return out;
  for (BlockId id = 0; id < pm->capacity(); ++id) {
    const PositionEntry* e = pm->Find(id);
    if (e && e->pos.level == 0) out.push_back(e->pos.slot);
  }
  return out;
}

TEST(FsLyingRootTest, ALiveRootSlotHiddenInTheRootSnapshotIsNamedAndRepairedWithNothingLost) {
  testing::FsOptions options;
  options.params = testing::TinyFsParams();
  auto fs = MountedFs::Create(options);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const OramParams& p = options.params;
  const std::uint64_t seed = s3oram::testing::TestSeed();
  const std::size_t liar = seed % 3;
  const std::size_t honest = (liar + 1) % 3;
  std::printf("[ seed     ] %llu: server %zu rewrites the live root slots\n",
              static_cast<unsigned long long>(seed), liar);
  Files files;
  for (int i = 0; i < 5; ++i) {
    const std::string name = "f" + std::to_string(i);
    files[name] = PatternBytes(3000 + 1733 * static_cast<std::size_t>(i), seed + i);
    ASSERT_TRUE(WriteFile(fs->Path(name), files[name], 0644, /*do_fsync=*/true)) << name;
  }
  ASSERT_TRUE(fs->Unmount());

  const std::string pass = testing::ReadWholeFile(fs->passfile());
  const std::vector<std::uint32_t> slots = LiveRootSlots(fs->state(), pass);
  ASSERT_FALSE(slots.empty()) << "no live block in the root to rewrite";
  auto& cluster = *fs->test_fs()->cluster;
  ASSERT_TRUE(cluster.Kill(liar, SIGTERM).ok());
  const std::string shares = cluster.dir() + "/data-" + std::to_string(liar) + "/shares.bin";
  for (std::uint32_t slot : slots) {
    testing::RewriteSlotWithItsDigest(shares, p, 1, slot, seed + slot);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  std::printf("%zu live root slots rewritten on server %zu\n", slots.size(), liar);
  ASSERT_TRUE(cluster.Restart(liar).ok());

  // New files, fsynced, until the eviction that moves the rewritten slots
  // is refused (its write or fsync fails).
  ASSERT_TRUE(fs->Mount());
  bool refused = false;
  for (int i = 0; i < 16 && !refused; ++i) {
    const std::string name = "g" + std::to_string(i);
    const std::string content = PatternBytes(4000, seed + 100 + i);
    if (WriteFile(fs->Path(name), content, 0644, /*do_fsync=*/true)) {
      files[name] = content;
    } else {
      refused = true;
    }
  }
  (void)fs->Unmount();
  ASSERT_TRUE(refused) << "the eviction of the rewritten root slots was not refused:\n"
                       << fs->log() << RunCli(CliArgs(*fs, "status")).output;

  // Scrub finds the change (in root.bin or still in the live root), names
  // the liar and keeps the recorded problem.
  const CliRun scrub = RunCli(CliArgs(*fs, "scrub", "--plain-progress"));
  std::printf("%s\n", scrub.output.c_str());
  EXPECT_EQ(scrub.exit_code, 4) << scrub.output;
  EXPECT_NE(scrub.output.find("server " + std::to_string(liar) + " holds the odd share"),
            std::string::npos)
      << scrub.output;
  EXPECT_EQ(scrub.output.find("repaired"), std::string::npos) << scrub.output;
  EXPECT_NE(RunCli(CliArgs(*fs, "status")).output.find("problem "), std::string::npos);

  // The operator's guess is refused, naming the liar; the liar's rebuild works.
  const CliRun guess =
      RunCli(CliArgs(*fs, "rebuild", "--server " + std::to_string(honest) + " --force"));
  EXPECT_NE(guess.exit_code, 0) << guess.output;
  EXPECT_NE(guess.output.find("--server " + std::to_string(liar) + " --force"), std::string::npos)
      << guess.output;
  const CliRun rebuilt =
      RunCli(CliArgs(*fs, "rebuild", "--server " + std::to_string(liar) + " --force"));
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;

  ASSERT_TRUE(fs->Mount());
  testing::ExpectFilesIn(*fs, files);
  ASSERT_TRUE(
      WriteFile(fs->Path("after"), PatternBytes(30000, seed + 999), 0644, /*do_fsync=*/true));
  ASSERT_TRUE(fs->Unmount());
  const CliRun clean = RunCli(CliArgs(*fs, "scrub", "--plain-progress"));
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(RunCli(CliArgs(*fs, "status")).output.find("problem "), std::string::npos);
}

}  // namespace
}  // namespace s3oram
