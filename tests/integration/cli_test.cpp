// The s3oram command line as users run it: the real binary, real servers.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <regex>
#include <string>

#include "tests/integration/cluster_fixture.h"

namespace s3oram {
namespace {

using testing::TempDir;

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CliRun RunCli(const std::string& args) {
  const char* cli = std::getenv("S3ORAM_CLI");
  std::string cmd = std::string(cli ? cli : S3ORAM_TEST_CLI) + " " + args + " 2>&1";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(CliTest, ParamsReportsSafeBucketSizeForPaperSetting) {
  CliRun r = RunCli("params --evict-rate 280 --height 14");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(bucket size Z\s+(\d+))"))) << r.output;
  EXPECT_GE(std::stoi(m[1]), 460) << r.output;
  CliRun json = RunCli("params --evict-rate 280 --height 14 --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_NE(json.output.find("\"bucket_size\": "), std::string::npos);
}

TEST(CliTest, ParamsRefusesUnsafeBucketSizeUnlessAllowed) {
  CliRun r = RunCli("params --evict-rate 280 --height 8 --bucket-size 333");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("overflow"), std::string::npos) << r.output;
  CliRun forced = RunCli("params --evict-rate 280 --height 8 --bucket-size 333 --allow-unsafe-params");
  EXPECT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(forced.output.find("UNSAFE"), std::string::npos) << forced.output;
}

TEST(CliTest, ClusterInitStatusAndStop) {
  TempDir dir;
  CliRun start = RunCli("cluster start --dir " + dir.Sub("c") + " --log-level warn");
  ASSERT_EQ(start.exit_code, 0) << start.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(start.output, m, std::regex(R"(servers:(( --server \S+){3}))")))
      << start.output;
  const std::string servers = m[1];
  CliRun init = RunCli("init --state " + dir.Sub("fs.s3oram") + servers +
                    " --block-size 512 --capacity 256K --evict-rate 8");
  EXPECT_EQ(init.exit_code, 0) << init.output;
  EXPECT_NE(init.output.find("bucket size Z"), std::string::npos) << init.output;
  CliRun status = RunCli("status --state " + dir.Sub("fs.s3oram"));
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("server 2"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find(" up,"), std::string::npos) << status.output;
  // init refuses to overwrite the state file.
  CliRun again = RunCli("init --state " + dir.Sub("fs.s3oram") + servers);
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("already exists"), std::string::npos) << again.output;
  CliRun stop = RunCli("cluster stop --dir " + dir.Sub("c"));
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  CliRun down = RunCli("status --timeout-ms 500 --state " + dir.Sub("fs.s3oram"));
  EXPECT_NE(down.exit_code, 0) << down.output;
}

TEST(CliTest, BenchVerifiesAndReportsJson) {
  CliRun r = RunCli("bench --block-size 512 --height 4 --evict-rate 8 --accesses 300 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* key : {"\"mean_ms\"", "\"p50_ms\"", "\"p99_ms\"", "\"accesses_per_s\"",
                          "\"client_server_bytes_per_access\"", "\"server_server_bytes_per_access\""}) {
    EXPECT_NE(r.output.find(key), std::string::npos) << key << " missing in " << r.output;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"("evictions": (\d+))")));
  EXPECT_GE(std::stoi(m[1]), 30);
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"("server_server_bytes_per_access": (\d+))")));
  EXPECT_GT(std::stoll(m[1]), 0);
}

}  // namespace
}  // namespace s3oram
