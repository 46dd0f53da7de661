// A lying server under a mounted filesystem (issue 4): with a TamperProxy in
// front of one server flipping bits in every retrieval answer, read(2) of a
// file fails with EIO — never returns other bytes — and the daemon's log
// names the server set. Once the server answers honestly again, the same
// file reads back exactly: the failed reads changed nothing.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "tests/integration/fs_fixture.h"
#include "tests/support/tamper_proxy.h"

namespace s3oram {
namespace {

using testing::FsOptions;
using testing::MountedFs;
using testing::TamperMode;
using testing::TamperProxy;

TEST(FsTamperTest, ALyingServerMakesReadsFailWithEioNeverOtherBytes) {
  if (!testing::ReferenceDir().empty()) GTEST_SKIP() << "needs the s3oramfs daemon";
  FsOptions o;
  o.mount_opts = "cache_size=1";
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);
  const std::string data = testing::PatternBytes(64 * 1024, 11);
  ASSERT_TRUE(testing::WriteFile(fs->Path("f"), data));
  ASSERT_TRUE(fs->Unmount());

  auto& cl = *fs->test_fs()->cluster;
  auto proxy = TamperProxy::Start(cl.endpoints()[1], cl.server_public_keys()[1],
                                  cl.client_key_file());
  ASSERT_TRUE(proxy);
  testing::RepointServer(fs->state(), 1, proxy->endpoint(), proxy->public_key());
  proxy->SetMode(TamperMode::kBitFlip, 1.0);
  ASSERT_TRUE(fs->Mount());

  int fd = ::open(fs->Path("f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string buf(data.size(), '\0');
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
  const int err = errno;
  ::close(fd);
  EXPECT_EQ(n, -1) << "a read through a lying server returned " << n << " bytes";
  EXPECT_EQ(err, EIO) << std::strerror(err);
  EXPECT_GT(proxy->tampered(), 0u);
  EXPECT_NE(fs->daemon_log().find("failed authentication"), std::string::npos)
      << fs->daemon_log();
  EXPECT_NE(fs->daemon_log().find(proxy->endpoint()), std::string::npos)
      << "the log does not name the server set";

  // Nothing was lost. A block whose path kept failing is quarantined for
  // the mount's life (SECURITY.md, failed accesses): the next mount reads it.
  proxy->SetMode(TamperMode::kNone, 0);
  ASSERT_TRUE(fs->Remount());
  EXPECT_TRUE(testing::FileHasContent(fs->Path("f"), data));
  ASSERT_TRUE(fs->Unmount());
}

}  // namespace
}  // namespace s3oram
