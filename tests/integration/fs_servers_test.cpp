// A filesystem on more than three servers under a real mount: ℓ = 4 with
// t = 1 (`s3oram init` with four endpoints makes the same). Files written
// and fsynced through enough accesses for several evictions read back, also
// after a remount, and the mount's status shows all four servers with the
// threshold.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>

#include "tests/integration/fs_fixture.h"
#include "tests/integration/run_cli.h"

namespace s3oram::testing {
namespace {

TEST(FsServersTest, FourServersMountWriteEvictRemountAndStatus) {
  FsOptions options;
  options.params.parties = 4;
  options.params.threshold = 1;
  auto fs = MountedFs::Create(options);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  ASSERT_EQ(fs->test_fs()->cluster->endpoints().size(), 4u);
  // 40 files of 24 KiB (6 blocks each, 240 blocks): at A = 16, about 15
  // evictions, each over all four servers' SMP rounds.
  std::map<std::string, std::string> files;
  for (int i = 0; i < 40; ++i) {
    const std::string name = "f" + std::to_string(i);
    files[name] = PatternBytes(24576, 1000 + i);
    ASSERT_EQ(WriteAndSync(fs->Path(name), files[name]), 0) << name;
  }
  ExpectFilesIn(*fs, files);
  CliRun status = RunCli(CliArgs(*fs, "status"));
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("sharing     4 servers, privacy threshold t = 1"), std::string::npos)
      << status.output;
  EXPECT_NE(status.output.find("server 3 "), std::string::npos) << status.output;
  std::printf("[ servers  ] four servers, the mount's status:\n%s", status.output.c_str());
  ASSERT_TRUE(fs->Remount());
  ExpectFilesIn(*fs, files);
  CliRun after = RunCli(CliArgs(*fs, "status"));
  EXPECT_EQ(after.exit_code, 0) << after.output;
  // Every server applied the same evictions, and there were several.
  const std::string text = after.output;
  const std::regex server_line(R"(server \d +\S+ +up,.* evictions (\d+))");
  std::set<std::string> counts;
  for (std::sregex_iterator it(text.begin(), text.end(), server_line), end; it != end; ++it) {
    counts.insert((*it)[1]);
  }
  ASSERT_EQ(counts.size(), 1u) << after.output;
  EXPECT_GE(std::stoi(*counts.begin()), 5) << after.output;
}

}  // namespace
}  // namespace s3oram::testing
