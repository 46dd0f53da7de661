// A state file put back to an earlier point of its own history: the same
// file's older bytes, or its log cut at an earlier commit. Every piece still
// authenticates (the sealed VFS cannot know which version is the newest);
// the servers do, and t + 1 of them having applied more requests than the
// state holds (beyond the one that may be in flight) makes Open refuse it
// as rolled back, before anything is written. Also: a kill at any point
// leaves a state that opens (the one-request rule is kept on every path).
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/integration/cluster_fixture.h"
#include "tests/support/file_bytes.h"

namespace s3oram {
namespace {

namespace stdfs = std::filesystem;

using testing::ReadAll;
using testing::WriteAll;

struct Copy {
  std::string db, wal;
};
Copy Take(const std::string& state) { return {ReadAll(state), ReadAll(state + "-wal")}; }
void Put(const std::string& state, const Copy& c) {
  WriteAll(state, c.db);
  WriteAll(state + "-wal", c.wal);
  stdfs::remove(state + "-shm");
}

TEST(StateRollbackTest, AnOlderCopyOrALogCutWithinTheSessionIsRefused) {
  auto fs = testing::MakeFs(testing::SmallParams(4096, 4, 3));
  ASSERT_TRUE(fs);
  const std::string& state = fs->state;
  const std::size_t bytes = fs->config.params.block_bytes;
  Copy early, late;
  {
    auto client = testing::TestOpen(state);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    for (BlockId id = 0; id < 4; ++id) {
      ASSERT_TRUE((*client)->Write(id, testing::Content(bytes, id, 1)).ok());
    }
    early = Take(state);
    // Twelve more accesses, three evictions among them.
    for (BlockId id = 4; id < 16; ++id) {
      ASSERT_TRUE((*client)->Write(id, testing::Content(bytes, id, 1)).ok());
    }
    // The eviction the servers compute in the background commits here, so
    // that dropping the client below sends no more than a kill would.
    ASSERT_TRUE((*client)->SettleEviction().ok());
    late = Take(state);
    // The process dies here (the client is dropped without Close, so the
    // copies are what a kill would leave; the drop itself folds the log in).
  }
  ASSERT_FALSE(early.wal.empty());
  ASSERT_GT(late.wal.size(), early.wal.size());
  ASSERT_EQ(late.wal.compare(0, early.wal.size(), early.wal), 0)
      << "no checkpoint between the copies: the early log is a prefix of the late one";

  auto expect_rolled_back = [&](const Copy& c, const std::string& what) {
    Put(state, c);
    auto client = testing::TestOpen(state);
    ASSERT_FALSE(client.ok()) << what << " opened";
    EXPECT_EQ(client.status().code(), Status::Code::kStaleState) << client.status().ToString();
    EXPECT_NE(client.status().message().find("rolled back"), std::string::npos)
        << what << ": " << client.status().ToString();
    EXPECT_NE(client.status().message().find("s3oram restore"), std::string::npos)
        << client.status().ToString();
  };
  // The whole file as it was four accesses in.
  expect_rolled_back(early, "the early copy");
  // The late file with its log cut at the early copy's last commit.
  expect_rolled_back(Copy{late.db, late.wal.substr(0, early.wal.size())}, "the cut log");
  // Read-only opens that ask for it still work, for salvage.
  {
    Put(state, early);
    ClientOptions o;
    o.allow_stale = true;
    auto ro = OramClient::OpenReadOnly(state, testing::TestPassphrase(), o);
    EXPECT_TRUE(ro.ok()) << ro.status().ToString();
  }
  // The newest copy opens, and every block reads back: nothing was written
  // by the refused opens.
  Put(state, late);
  auto client = testing::TestOpen(state);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  for (BlockId id = 0; id < 16; ++id) {
    auto r = (*client)->Read(id);
    ASSERT_TRUE(r.ok()) << id << ": " << r.status().ToString();
    EXPECT_TRUE(*r == testing::Content(bytes, id, 1)) << id;
  }
}

// The other direction: every server put back together to an old copy of
// its data directory (a provider's snapshot restored on all three). The
// refusal names every server, not only the first, and says why: no server
// lost data alone, so no rebuild helps. The newest data put back open again.
TEST(StateRollbackTest, ServersRolledBackTogetherAreAllNamed) {
  auto fs = testing::MakeFs(testing::SmallParams(4096, 4, 3));
  ASSERT_TRUE(fs);
  auto& cluster = *fs->cluster;
  const std::size_t bytes = fs->config.params.block_bytes;
  auto data = [&](std::size_t i, const std::string& suffix) {
    return cluster.dir() + "/data-" + std::to_string(i) + suffix;
  };
  // Copies each stopped server's data directory to data-i<suffix>, or back.
  auto copy_all = [&](const std::string& from, const std::string& to) {
    for (std::size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(cluster.Kill(i, SIGTERM).ok());
      stdfs::remove_all(data(i, to));
      stdfs::copy(data(i, from), data(i, to), stdfs::copy_options::recursive);
      ASSERT_TRUE(cluster.Restart(i).ok());
    }
  };
  auto write = [&](BlockId first, BlockId last) {
    auto client = testing::TestOpen(fs->state);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    for (BlockId id = first; id < last; ++id) {
      ASSERT_TRUE((*client)->Write(id, testing::Content(bytes, id, 1)).ok());
    }
    ASSERT_TRUE((*client)->Close().ok());
  };
  write(0, 4);
  copy_all("", ".old");
  write(4, 16);  // three evictions
  copy_all("", ".new");
  copy_all(".old", "");

  auto refused = testing::TestOpen(fs->state);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kFailedPrecondition)
      << refused.status().ToString();
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NE(refused.status().message().find("server " + std::to_string(i) + " ("),
              std::string::npos)
        << refused.status().ToString();
  }
  EXPECT_NE(refused.status().message().find("every server is behind this state"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(refused.status().message().find("rebuild"), std::string::npos)
      << refused.status().ToString();

  copy_all(".new", "");
  auto client = testing::TestOpen(fs->state);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  for (BlockId id = 0; id < 16; ++id) {
    auto r = (*client)->Read(id);
    ASSERT_TRUE(r.ok()) << id << ": " << r.status().ToString();
    EXPECT_TRUE(*r == testing::Content(bytes, id, 1)) << id;
  }
}

}  // namespace
}  // namespace s3oram
