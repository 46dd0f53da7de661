// Durability of s3oramfs: clean unmount/remount, fsync then SIGKILL, and
// SIGKILL of the daemon at random moments of a write-heavy workload. After
// every crash the state file must pass SQLite's integrity check and the
// filesystem's own invariants, every file fsynced before the kill must be
// intact, and no file may show bytes it was never given. In reference mode
// (S3ORAM_FS_TEST_DIR) only the writer is killed: that checks the tests' logic.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fused/metadata_store.h"
#include "tests/integration/fs_fixture.h"
#include "tests/support/test_scale.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::FileHasContent;
using testing::FsOptions;
using testing::ListDir;
using testing::MountedFs;
using testing::PatternBytes;
using testing::ReadFile;
using testing::WriteFile;

// PRAGMA integrity_check on the state file and MetadataStore::CheckInvariants;
// only while the filesystem is not mounted.
::testing::AssertionResult CheckStateFile(const MountedFs& fs) {
  if (fs.reference()) return ::testing::AssertionSuccess();
  testing::TestStateDb handle;
  if (Status s = testing::OpenTestStateDb(fs.state(), handle); !s.ok()) {
    return ::testing::AssertionFailure() << "opening " << fs.state() << ": " << s.ToString();
  }
  sqlite3* db = handle.db;
  std::string result;
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr);
  while (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    if (!result.empty()) result += "\n";
    result += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  }
  std::string err = rc == SQLITE_OK ? "" : sqlite3_errmsg(db);
  sqlite3_finalize(st);
  if (!err.empty()) return ::testing::AssertionFailure() << "integrity_check: " << err;
  if (result != "ok") return ::testing::AssertionFailure() << "PRAGMA integrity_check: " << result;
  auto store =
      fs::MetadataStore::Open(handle.state, fs.params().capacity_blocks, fs.params().block_bytes);
  if (!store.ok()) {
    return ::testing::AssertionFailure() << "MetadataStore::Open: " << store.status().ToString();
  }
  Status inv = (*store)->CheckInvariants();
  if (!inv.ok()) return ::testing::AssertionFailure() << "CheckInvariants: " << inv.ToString();
  return ::testing::AssertionSuccess();
}

struct stat Stat(const std::string& p) {
  struct stat st{};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p << ": " << std::strerror(errno);
  return st;
}

TEST(FsPersistenceTest, WriteUnmountRemountVerify) {
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  std::map<std::string, std::string> files;
  ASSERT_EQ(::mkdir(fs->Path("dir").c_str(), 0750), 0);
  ASSERT_EQ(::mkdir(fs->Path("dir/sub").c_str(), 0755), 0);
  int i = 0;
  for (std::size_t size : {0, 1, 4095, 4096, 4097, 100000, 300001}) {
    std::string name = (i % 2 ? "dir/f" : "dir/sub/f") + std::to_string(size);
    files[name] = PatternBytes(size, 1000 + i++);
    ASSERT_TRUE(WriteFile(fs->Path(name), files[name], 0600));
  }
  ASSERT_EQ(::symlink("sub/f4095", fs->Path("dir/link").c_str()), 0);
  ASSERT_EQ(::link(fs->Path("dir/f4096").c_str(), fs->Path("hard").c_str()), 0);
  ASSERT_EQ(::setxattr(fs->Path("dir").c_str(), "user.k", "v", 1, 0), 0);
  timespec ts[2] = {{1000000000, 1}, {1100000000, 2}};
  ASSERT_EQ(::utimensat(AT_FDCWD, fs->Path("dir/f100000").c_str(), ts, 0), 0);
  std::uint64_t free_before;
  {
    struct statvfs sv{};
    ASSERT_EQ(::statvfs(fs->root().c_str(), &sv), 0);
    free_before = sv.f_bfree;
  }
  ASSERT_TRUE(fs->Unmount());
  EXPECT_TRUE(CheckStateFile(*fs));
  ASSERT_TRUE(fs->Mount());
  for (const auto& [name, data] : files) {
    EXPECT_TRUE(FileHasContent(fs->Path(name), data));
    EXPECT_EQ(Stat(fs->Path(name)).st_mode, S_IFREG | 0600) << name;
  }
  EXPECT_TRUE(FileHasContent(fs->Path("dir/link"), files["dir/sub/f4095"]));
  EXPECT_EQ(ListDir(fs->root()), (std::set<std::string>{"dir", "hard"}));
  EXPECT_EQ(Stat(fs->Path("dir")).st_mode, S_IFDIR | 0750);
  EXPECT_EQ(Stat(fs->Path("dir")).st_nlink, 3u);
  std::string target(64, '\0');
  ssize_t n = ::readlink(fs->Path("dir/link").c_str(), target.data(), target.size());
  ASSERT_GT(n, 0);
  target.resize(static_cast<std::size_t>(n));
  EXPECT_EQ(target, "sub/f4095");
  EXPECT_EQ(Stat(fs->Path("hard")).st_nlink, 2u);
  EXPECT_EQ(Stat(fs->Path("hard")).st_ino, Stat(fs->Path("dir/f4096")).st_ino);
  char v[8];
  EXPECT_EQ(::getxattr(fs->Path("dir").c_str(), "user.k", v, sizeof v), 1);
  EXPECT_EQ(Stat(fs->Path("dir/f100000")).st_mtim.tv_sec, 1100000000);
  EXPECT_EQ(Stat(fs->Path("dir/f100000")).st_mtim.tv_nsec, 2);
  struct statvfs sv{};
  ASSERT_EQ(::statvfs(fs->root().c_str(), &sv), 0);
  EXPECT_EQ(sv.f_bfree, free_before);
  ASSERT_TRUE(fs->Unmount());
  EXPECT_TRUE(CheckStateFile(*fs));
}

TEST(FsPersistenceTest, FsyncedDataSurviveSigkill) {
  auto fs = MountedFs::Create();
  ASSERT_TRUE(fs);
  std::string a = PatternBytes(40000, 1);
  std::string b = PatternBytes(9000, 2);
  ASSERT_EQ(::mkdir(fs->Path("d").c_str(), 0755), 0);
  {
    int fd = ::open(fs->Path("d/a").c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(testing::PwriteAll(fd, a, 0));
    ASSERT_EQ(::fsync(fd), 0);
    // Overwrite a range in place and extend, then fsync again.
    std::string patch = PatternBytes(5000, 3);
    ASSERT_TRUE(testing::PwriteAll(fd, patch, 38000));
    a.resize(38000);
    a += patch;
    ASSERT_EQ(::fdatasync(fd), 0);
    ::close(fd);
  }
  ASSERT_TRUE(WriteFile(fs->Path("b"), b, 0644, /*do_fsync=*/true));
  // Written but not fsynced: may be lost, must not be garbage.
  std::string c = PatternBytes(20000, 4);
  {
    int fd = ::open(fs->Path("c").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(testing::WriteAllFd(fd, c));
    ASSERT_TRUE(fs->Kill9());  // with the file still open
    ::close(fd);
  }
  EXPECT_TRUE(CheckStateFile(*fs));
  ASSERT_TRUE(fs->Mount());
  EXPECT_TRUE(FileHasContent(fs->Path("d/a"), a));
  EXPECT_TRUE(FileHasContent(fs->Path("b"), b));
  if (auto got = ReadFile(fs->Path("c"))) {
    EXPECT_LE(got->size(), c.size());
    for (std::size_t i = 0; i < got->size(); ++i) {
      if ((*got)[i] != 0 && (*got)[i] != c[i]) {
        ADD_FAILURE() << "c: byte " << i << " was never written there";
        break;
      }
    }
  }
  // The filesystem keeps working after the crash.
  ASSERT_TRUE(WriteFile(fs->Path("after"), "after", 0644, true));
  ASSERT_TRUE(fs->Unmount());
  EXPECT_TRUE(CheckStateFile(*fs));
  ASSERT_TRUE(fs->Mount());
  EXPECT_TRUE(FileHasContent(fs->Path("after"), "after"));
  EXPECT_TRUE(FileHasContent(fs->Path("d/a"), a));
}

// --- SIGKILL at random moments -------------------------------------------------

std::string FileContent(std::uint64_t seed, int round, int index, std::size_t size) {
  return PatternBytes(size, seed ^ (static_cast<std::uint64_t>(round) << 32) ^
                                static_cast<std::uint64_t>(index) * 7919);
}

std::string FileName(int round, int index) {
  return "r" + std::to_string(round) + "/f" + std::to_string(index);
}

// The workload, in a child process: new files of random sizes, written in
// random chunks; about 60% are fsynced, and only after fsync returned is
// "index size" appended to the journal (outside the mount). Never returns.
[[noreturn]] void Writer(const std::string& root, const std::string& journal, std::uint64_t seed,
                         int round) {
  std::mt19937_64 g(seed + static_cast<std::uint64_t>(round));
  int jfd = ::open(journal.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (jfd < 0) ::_exit(2);
  for (int index = 0; index < 1000; ++index) {
    std::size_t size = std::uniform_int_distribution<std::size_t>(1, 48 * 1024)(g);
    bool sync = std::uniform_int_distribution<int>(0, 9)(g) < 6;
    std::string data = FileContent(seed, round, index, size);
    std::string path = root + "/" + FileName(round, index);
    int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) ::_exit(3);
    for (std::size_t off = 0; off < size;) {
      std::size_t len = std::min(size - off, std::uniform_int_distribution<std::size_t>(1, 12000)(g));
      if (!testing::PwriteAll(fd, std::string_view(data).substr(off, len), static_cast<off_t>(off))) {
        ::_exit(4);
      }
      off += len;
    }
    if (sync) {
      if (::fsync(fd) != 0) ::_exit(5);
      std::string line = std::to_string(index) + " " + std::to_string(size) + "\n";
      if (::write(jfd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(6);
    }
    if (::close(fd) != 0) ::_exit(7);
  }
  ::_exit(0);
}

TEST(FsPersistenceTest, SigkillAtRandomMomentsDuringWrites) {
  FsOptions o;
  o.params = testing::LargeFsParams();
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const int kRounds = testing::ScaledForBuild(14, 2, 6);
  // One fsynced file per round stays, and is checked after every later crash.
  std::vector<std::pair<std::string, std::string>> sentinels;
  std::size_t total_synced = 0, total_seen = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round) + " (S3ORAM_TEST_SEED=" + std::to_string(seed) + ")");
    ASSERT_EQ(::mkdir(fs->Path("r" + std::to_string(round)).c_str(), 0755), 0);
    const std::string journal = fs->Scratch("journal-" + std::to_string(round));
    pid_t writer = ::fork();
    if (writer == 0) Writer(fs->root(), journal, seed, round);
    ASSERT_GT(writer, 0);
    // Kill at a random moment after the round's first fsync returned, so that
    // every round has fsynced data to check however slow the build (ASan) or
    // the machine: a fixed window from the start killed some rounds before
    // their first fsync.
    const auto started = std::chrono::steady_clock::now();
    bool journaled = false;
    while (std::chrono::steady_clock::now() - started < std::chrono::seconds(120)) {
      struct stat jst{};
      if (::stat(journal.c_str(), &jst) == 0 && jst.st_size > 0) {
        journaled = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!journaled) {
      ::kill(writer, SIGKILL);
      (void)testing::WaitPidFor(writer, std::chrono::seconds(60), nullptr);
    }
    ASSERT_TRUE(journaled) << "the writer fsynced nothing within 120 s";
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 2300)(rng)));
    const auto kill_after = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    ASSERT_TRUE(fs->Kill9());
    ::kill(writer, SIGKILL);
    int status = 0;
    ASSERT_TRUE(testing::WaitPidFor(writer, std::chrono::seconds(60), &status));
    if (WIFEXITED(status)) {
      // It ends on its own only if it ran out of work (0) or saw the dead mount.
      EXPECT_NE(WEXITSTATUS(status), 2) << "writer could not open its journal";
      if (!fs->reference()) {
        EXPECT_NE(WEXITSTATUS(status), 0) << "writer finished before the kill";
      }
    }
    ASSERT_TRUE(CheckStateFile(*fs)) << "after the kill " << kill_after.count() << " ms into round "
                                     << round;
    ASSERT_TRUE(fs->Mount());
    // Every fsynced file of this round is intact.
    std::map<int, std::size_t> synced;
    {
      std::ifstream in(journal);
      int index;
      std::size_t size;
      while (in >> index >> size) synced[index] = size;
    }
    total_synced += synced.size();
    for (const auto& [index, size] : synced) {
      EXPECT_TRUE(FileHasContent(fs->Path(FileName(round, index)),
                                 FileContent(seed, round, index, size)))
          << "fsynced before the kill at " << kill_after.count() << " ms";
    }
    // Every other file of this round holds only its own bytes (or zeros).
    for (const auto& name : ListDir(fs->Path("r" + std::to_string(round)))) {
      int index = std::stoi(name.substr(1));
      if (synced.count(index)) continue;
      ++total_seen;
      auto got = ReadFile(fs->Path(FileName(round, index)));
      ASSERT_TRUE(got) << name << ": " << std::strerror(errno);
      std::string want = FileContent(seed, round, index, 48 * 1024);
      EXPECT_LE(got->size(), want.size()) << name;
      for (std::size_t i = 0; i < got->size() && i < want.size(); ++i) {
        if ((*got)[i] != 0 && (*got)[i] != want[i]) {
          ADD_FAILURE() << FileName(round, index) << " (not fsynced) byte " << i
                        << " holds data never written there";
          break;
        }
      }
    }
    for (const auto& [path, data] : sentinels) EXPECT_TRUE(FileHasContent(fs->Path(path), data));
    // Keep the first fsynced file; delete the rest to bound space and time.
    bool kept = false;
    for (const auto& name : ListDir(fs->Path("r" + std::to_string(round)))) {
      int index = std::stoi(name.substr(1));
      if (!kept && synced.count(index)) {
        sentinels.emplace_back(FileName(round, index), FileContent(seed, round, index, synced[index]));
        kept = true;
        continue;
      }
      ASSERT_EQ(::unlink(fs->Path(FileName(round, index)).c_str()), 0);
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
  std::printf("[ info     ] %zu fsynced files verified, %zu unsynced files checked, %zu sentinels\n",
              total_synced, total_seen, sentinels.size());
  // At least the first fsynced file of every round (the kill waits for it).
  EXPECT_GE(total_synced, static_cast<std::size_t>(kRounds))
      << "the workload fsynced too little to test anything";
  ASSERT_TRUE(fs->Unmount());
  EXPECT_TRUE(CheckStateFile(*fs));
  ASSERT_TRUE(fs->Mount());
  for (const auto& [path, data] : sentinels) EXPECT_TRUE(FileHasContent(fs->Path(path), data));
}

}  // namespace
}  // namespace s3oram
