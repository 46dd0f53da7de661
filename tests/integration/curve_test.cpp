// CURVE on every link (issue 4): with the right keys everything works (the
// rest of the suite); here, each way of getting a key wrong is refused with
// a clear error on both sides, and key files readable by others are refused.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include "oramcore/crypto/curve_keys.h"
#include "serverd/config.h"
#include "tests/integration/cluster_fixture.h"

namespace s3oram {
namespace {

using testing::FastRetryOptions;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits (bounded) until `needle` shows up in server i's log.
bool LogShows(const cluster::LocalCluster& c, std::size_t i, const std::string& needle) {
  for (int k = 0; k < 50; ++k) {
    if (ReadFile(c.log_path(i)).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

ClientOptions Quick() {
  ClientOptions o = FastRetryOptions();
  o.requests.deadline = std::chrono::milliseconds(8000);
  return o;
}

TEST(CurveTest, UnauthorizedClientKeyIsRefusedOnBothSides) {
  auto fs = testing::MakeFs(testing::SmallParams(128, 4, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  // A second client with a key of its own, unknown to the servers.
  auto stranger = GenerateCurveKeypair();
  ASSERT_TRUE(stranger.ok());
  ASSERT_TRUE(WriteCurveKeypair(*stranger, dir.Sub("stranger")).ok());
  FsConfig other = config;
  other.client_key_file = dir.Sub("stranger.key");
  // PermissionDenied, not Unavailable: the refused handshake is reported as
  // such at once rather than waited out until the deadline (a timing-free
  // way to tell the two apart).
  Status st = OramClient::Initialize(dir.Sub("other.s3oram"), other, testing::TestPassphrase(),
                                     testing::TestKdf(), /*overwrite_servers=*/true);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kPermissionDenied) << st.ToString();
  EXPECT_NE(st.message().find("refused this client's CURVE key"), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("authorized_clients"), std::string::npos) << st.ToString();
  EXPECT_TRUE(LogShows(*cluster, 0, stranger->public_key + " is not authorized"))
      << ReadFile(cluster->log_path(0));
  // The servers kept the real filesystem: the authorized client still works.
  auto c = testing::TestOpen(state, Quick());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Write(1, testing::Content(128, 1, 1)).ok());
}

TEST(CurveTest, WrongServerKeyInTheStateIsRefused) {
  auto fs = testing::MakeFs(testing::SmallParams(128, 4, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  FsConfig wrong = config;
  wrong.server_keys[1] = wrong.server_keys[2];  // a real key, of another server
  Status st = OramClient::Initialize(dir.Sub("wrong.s3oram"), wrong, testing::TestPassphrase(),
                                     testing::TestKdf(), /*overwrite_servers=*/true);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("server 1"), std::string::npos) << st.ToString();
  EXPECT_TRUE(st.code() == Status::Code::kPermissionDenied ||
              st.code() == Status::Code::kUnavailable)
      << st.ToString();
  EXPECT_NE(st.message().find("CURVE"), std::string::npos) << st.ToString();
}

TEST(CurveTest, UnknownPeerIsRefusedAndBothServersSayWhy) {
  auto fs = testing::MakeFs(testing::SmallParams(128, 4, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  // Server 2 now presents a key server 0 does not know: give it a fresh
  // keypair (its peers still list the old public key).
  auto fresh = GenerateCurveKeypair();
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(WriteCurveKeypair(*fresh, dir.Sub("server-2-new")).ok());
  auto cfg = serverd::LoadServerConfig(cluster->config_path(2));
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  cfg->secret_key_file = dir.Sub("server-2-new.key");
  ASSERT_TRUE(cluster->Kill(2, SIGTERM).ok());
  std::ofstream(cluster->config_path(2), std::ios::trunc) << serverd::RenderServerConfig(*cfg);
  {
    const Status restarted = cluster->Restart(2);
    ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  }

  // The client, which knows server 2 by its old key, is refused by it...
  auto c = testing::TestOpen(state, Quick());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("server 2"), std::string::npos) << c.status().ToString();
  // ...and server 0 refuses server 2 as a peer, while server 2 reports that
  // its peer turned it away.
  EXPECT_TRUE(LogShows(*cluster, 0, "refused a peers connection"))
      << ReadFile(cluster->log_path(0));
  EXPECT_TRUE(LogShows(*cluster, 0, fresh->public_key)) << ReadFile(cluster->log_path(0));
  EXPECT_TRUE(LogShows(*cluster, 2, "link to peer 0"))
      << ReadFile(cluster->log_path(2));
}

TEST(CurveTest, KeyFilesReadableByOthersAreRefused) {
  auto fs = testing::MakeFs(testing::SmallParams(128, 4, 4));
  ASSERT_TRUE(fs);
  auto& [dir, cluster, config, state, passfile] = *fs;
  // The client's key file.
  ASSERT_EQ(::chmod(config.client_key_file.c_str(), 0644), 0);
  auto c = testing::TestOpen(state, Quick());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kPermissionDenied) << c.status().ToString();
  EXPECT_NE(c.status().message().find("chmod 600"), std::string::npos) << c.status().ToString();
  ASSERT_EQ(::chmod(config.client_key_file.c_str(), 0600), 0);
  // A server's key file: the server refuses to start, and says why.
  auto cfg = serverd::LoadServerConfig(cluster->config_path(1));
  ASSERT_TRUE(cfg.ok());
  ASSERT_TRUE(cluster->Kill(1, SIGTERM).ok());
  ASSERT_EQ(::chmod(cfg->secret_key_file.c_str(), 0640), 0);
  Status restart = cluster->Restart(1);
  ASSERT_FALSE(restart.ok());
  EXPECT_NE(restart.message().find("chmod 600"), std::string::npos) << restart.ToString();
  ASSERT_EQ(::chmod(cfg->secret_key_file.c_str(), 0600), 0);
  {
    const Status restarted = cluster->Restart(1);
    ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  }
  auto ok = testing::TestOpen(state, Quick());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
}

}  // namespace
}  // namespace s3oram
