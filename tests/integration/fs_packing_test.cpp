// Large ORAM blocks through a real mount (64 KiB blocks, 16 slots of 4 KiB;
// fused/block_layout.h): small files and file tails packed into shared
// blocks (statfs and st_blocks show it), sparse files, truncate across
// shared blocks, reuse of freed space without ever showing old bytes,
// appends that relocate fsynced data, `sync DIR` and writeback_delay=0 as
// durability points against SIGKILL, and fsck of the packed layout.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/fs_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::CliPath;
using testing::CmdResult;
using testing::FileHasContent;
using testing::FsOptions;
using testing::MountedFs;
using testing::PatternBytes;
using testing::RunCmd;
using testing::WriteFile;

constexpr std::uint32_t kBlock = 65536;
constexpr std::uint32_t kSlot = 4096;

FsOptions PackedOptions(const std::string& mount_opts = "") {
  FsOptions o;
  o.params = testing::SmallParams(kBlock, 16, 6);
  o.mount_opts = mount_opts;
  return o;
}

std::uint64_t FreeBlocks(const std::string& path) {
  struct statvfs v {};
  EXPECT_EQ(::statvfs(path.c_str(), &v), 0);
  return v.f_bfree;
}

// fsync(2) of a directory: `sync DIR`, which writes every dirty block back.
::testing::AssertionResult SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return ::testing::AssertionFailure() << "open " << dir << ": " << std::strerror(errno);
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) return ::testing::AssertionFailure() << "fsync " << dir << ": " << std::strerror(e);
  return ::testing::AssertionSuccess();
}

class FsPackingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs_ = MountedFs::Create(PackedOptions());
    ASSERT_TRUE(fs_);
    if (fs_->reference()) GTEST_SKIP() << "the layout is the daemon's";
    ASSERT_GE(fs_->params().capacity_blocks, 64u);
  }
  CmdResult Fsck() {
    return RunCmd({CliPath(), "fsck", "-s", fs_->state(), "--passfile", fs_->passfile(), "-n"},
                  std::chrono::seconds(240));
  }
  std::unique_ptr<MountedFs> fs_;
};

TEST_F(FsPackingTest, SmallFilesShareBlocksAndSurviveRemountAndFsck) {
  const std::uint64_t free0 = FreeBlocks(fs_->root());
  std::map<std::string, std::string> files;
  std::uint64_t slots = 0;
  for (int i = 0; i < 40; ++i) {
    const std::size_t size = 1 + (static_cast<std::size_t>(i) * 2711) % 12000;
    const std::string name = "small" + std::to_string(i);
    files[name] = PatternBytes(size, 100 + i);
    ASSERT_TRUE(WriteFile(fs_->Path(name), files[name]));
    slots += (size + kSlot - 1) / kSlot;
  }
  ASSERT_TRUE(SyncDir(fs_->root()));
  const std::uint64_t used = free0 - FreeBlocks(fs_->root());
  // Packed: the slots they need, in whole blocks, plus what first fit
  // leaves unused at block ends; one block per file without packing.
  EXPECT_LE(used, (slots + 15) / 16 + 3) << slots << " slots";
  EXPECT_LT(used, 40u / 3);
  struct stat st {};
  ASSERT_EQ(::stat(fs_->Path("small0").c_str(), &st), 0);
  EXPECT_EQ(st.st_blocks, static_cast<blkcnt_t>(kSlot / 512)) << "a 1-byte file holds one slot";
  ASSERT_TRUE(fs_->Remount());
  for (const auto& [name, data] : files) EXPECT_TRUE(FileHasContent(fs_->Path(name), data)) << name;
  ASSERT_TRUE(fs_->Unmount());
  CmdResult r = Fsck();
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(FsPackingTest, TailsSparseFilesAndTruncateAcrossSharedBlocks) {
  // Neighbours sharing blocks with the files below; they must never change.
  std::map<std::string, std::string> keep;
  for (int i = 0; i < 6; ++i) {
    keep["n" + std::to_string(i)] = PatternBytes(3000 + 500 * i, 7 + i);
    ASSERT_TRUE(WriteFile(fs_->Path("n" + std::to_string(i)), keep["n" + std::to_string(i)]));
  }
  // Three whole blocks and a 5000-byte tail.
  std::string big = PatternBytes(3 * kBlock + 5000, 1);
  ASSERT_TRUE(WriteFile(fs_->Path("big"), big));
  // Sparse: 10 bytes far out, a hole before them.
  {
    const int fd = ::open(fs_->Path("sparse").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "0123456789", 10, 5 * kBlock + 123), 10);
    ASSERT_EQ(::close(fd), 0);
  }
  std::string sparse(5 * kBlock + 133, '\0');
  sparse.replace(5 * kBlock + 123, 10, "0123456789");
  struct stat st {};
  ASSERT_EQ(::stat(fs_->Path("sparse").c_str(), &st), 0);
  EXPECT_EQ(st.st_blocks, static_cast<blkcnt_t>(kSlot / 512)) << "the hole costs nothing";
  ASSERT_TRUE(SyncDir(fs_->root()));
  // Truncate into the tail, then past the old end: the cut bytes read as zeros.
  ASSERT_EQ(::truncate(fs_->Path("big").c_str(), 3 * kBlock + 100), 0);
  ASSERT_EQ(::truncate(fs_->Path("big").c_str(), 3 * kBlock + 9000), 0);
  big.resize(3 * kBlock + 100);
  big.resize(3 * kBlock + 9000, '\0');
  // Truncate a small neighbour to a few bytes and grow it back.
  ASSERT_EQ(::truncate(fs_->Path("n2").c_str(), 10), 0);
  ASSERT_EQ(::truncate(fs_->Path("n2").c_str(), 4000), 0);
  keep["n2"] = keep["n2"].substr(0, 10) + std::string(3990, '\0');
  EXPECT_TRUE(FileHasContent(fs_->Path("big"), big));
  EXPECT_TRUE(FileHasContent(fs_->Path("sparse"), sparse));
  for (const auto& [name, data] : keep) EXPECT_TRUE(FileHasContent(fs_->Path(name), data)) << name;
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(fs_->Path("big"), big));
  EXPECT_TRUE(FileHasContent(fs_->Path("sparse"), sparse));
  for (const auto& [name, data] : keep) EXPECT_TRUE(FileHasContent(fs_->Path(name), data)) << name;
  ASSERT_TRUE(fs_->Unmount());
  CmdResult r = Fsck();
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(FsPackingTest, FreedSlotsAreReusedAndNeverShowTheirOldBytes) {
  const std::uint64_t free0 = FreeBlocks(fs_->root());
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 30; ++i) {
      ASSERT_TRUE(WriteFile(fs_->Path("r" + std::to_string(i)),
                            std::string(1000 + 100 * i, static_cast<char>('a' + round))));
    }
    ASSERT_TRUE(SyncDir(fs_->root()));
    for (int i = 0; i < 30; i += 2)
      ASSERT_EQ(::unlink(fs_->Path("r" + std::to_string(i)).c_str()), 0);
    // New files in the freed slots, grown by truncate only: all zeros.
    for (int i = 0; i < 15; ++i) {
      const std::string p = fs_->Path("z" + std::to_string(round) + "_" + std::to_string(i));
      ASSERT_TRUE(WriteFile(p, "x"));
      ASSERT_EQ(::truncate(p.c_str(), 3000), 0);
      EXPECT_TRUE(FileHasContent(p, "x" + std::string(2999, '\0'))) << p;
    }
    ASSERT_TRUE(SyncDir(fs_->root()));
    for (int i = 0; i < 15; ++i) {
      ASSERT_EQ(::unlink(fs_->Path("z" + std::to_string(round) + "_" + std::to_string(i)).c_str()),
                0);
    }
  }
  for (int i = 1; i < 30; i += 2) {
    EXPECT_TRUE(
        FileHasContent(fs_->Path("r" + std::to_string(i)), std::string(1000 + 100 * i, 'c')));
  }
  for (int i = 1; i < 30; i += 2)
    ASSERT_EQ(::unlink(fs_->Path("r" + std::to_string(i)).c_str()), 0);
  ASSERT_TRUE(SyncDir(fs_->root()));
  ASSERT_TRUE(fs_->Remount());  // unlinked inodes are freed once the kernel forgets them
  EXPECT_EQ(FreeBlocks(fs_->root()), free0) << "every slot came back";
}

TEST_F(FsPackingTest, AppendsWithFsyncRelocateWithoutLosingAByteToSigkill) {
  const std::string path = fs_->Path("log");
  std::string want;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 24; ++i) {
    const std::string rec = PatternBytes(1500 + 37 * i, 500 + i);
    ASSERT_EQ(::write(fd, rec.data(), rec.size()), static_cast<ssize_t>(rec.size()));
    ASSERT_EQ(::fsync(fd), 0);
    want += rec;
  }
  ::close(fd);
  ASSERT_TRUE(fs_->Kill9());
  ASSERT_TRUE(fs_->Mount());
  EXPECT_TRUE(FileHasContent(path, want));
}

TEST_F(FsPackingTest, SyncOfTheDirectoryMakesACopiedTreeDurable) {
  ASSERT_EQ(::mkdir(fs_->Path("tree").c_str(), 0755), 0);
  std::map<std::string, std::string> files;
  for (int i = 0; i < 30; ++i) {
    const std::string p = fs_->Path("tree/f" + std::to_string(i));
    files[p] = PatternBytes(200 + 97 * i, 900 + i);
    ASSERT_TRUE(WriteFile(p, files[p]));
  }
  ASSERT_TRUE(SyncDir(fs_->Path("tree")));
  ASSERT_TRUE(fs_->Kill9());
  ASSERT_TRUE(fs_->Mount());
  for (const auto& [p, data] : files) EXPECT_TRUE(FileHasContent(p, data)) << p;
}

TEST(FsPackingOptionTest, WritebackDelayZeroWritesBackAtClose) {
  auto fs = MountedFs::Create(PackedOptions("writeback_delay=0"));
  ASSERT_TRUE(fs);
  if (fs->reference()) GTEST_SKIP() << "the daemon's option";
  const std::string data = PatternBytes(7000, 3);
  ASSERT_TRUE(WriteFile(fs->Path("f"), data));  // close, no fsync
  ASSERT_TRUE(fs->Kill9());
  ASSERT_TRUE(fs->Mount());
  EXPECT_TRUE(FileHasContent(fs->Path("f"), data));
  EXPECT_NE(fs->daemon_log().find("write-back delay 0 s"), std::string::npos) << fs->daemon_log();
}

// The last unmount's cache summary: {demand and readahead loads, of them
// readahead}; {-1, -1} if there is none.
std::pair<long, long> LastLoads(const std::string& log) {
  static const std::regex re(R"(cache: \d+ hits, (\d+) loads \((\d+) readahead\))");
  std::pair<long, long> last{-1, -1};
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it) {
    last = {std::stol((*it)[1]), std::stol((*it)[2])};
  }
  return last;
}

// Reads `path` block by block with O_DIRECT (no kernel page cache, no kernel
// readahead: each read is the daemon's), calling after(b) after block b.
::testing::AssertionResult ReadDirectByBlock(const std::string& path, const std::string& want,
                                             const std::function<bool(std::size_t)>& after) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0)
    return ::testing::AssertionFailure() << "open " << path << ": " << std::strerror(errno);
  void* raw = nullptr;
  if (::posix_memalign(&raw, 4096, kBlock) != 0) {
    ::close(fd);
    return ::testing::AssertionFailure() << "posix_memalign";
  }
  std::unique_ptr<void, decltype(&std::free)> buf(raw, &std::free);
  std::string got;
  for (std::size_t b = 0;; ++b) {
    const ssize_t n = ::pread(fd, buf.get(), kBlock, static_cast<off_t>(b * kBlock));
    if (n < 0) {
      ::close(fd);
      return ::testing::AssertionFailure() << "pread block " << b << ": " << std::strerror(errno);
    }
    if (n == 0) break;
    got.append(static_cast<const char*>(buf.get()), static_cast<std::size_t>(n));
    if (!after(b)) {
      ::close(fd);
      return ::testing::AssertionFailure() << "after block " << b;
    }
  }
  ::close(fd);
  if (got != want) return ::testing::AssertionFailure() << "content differs";
  return ::testing::AssertionSuccess();
}

// A sequential reader finds every next block fetched ahead by the daemon
// (the default readahead, ramping up to 8 blocks ahead): of 13 blocks only
// the first is loaded by a read. With readahead=0 every block is.
TEST(FsReadaheadTest, ASequentialReaderFindsTheNextBlockFetchedAhead) {
  auto fs = MountedFs::Create(PackedOptions("log_level=debug"));
  ASSERT_TRUE(fs);
  if (fs->reference()) GTEST_SKIP() << "the daemon's cache";
  const std::string path = fs->Path("movie");
  const std::string data = PatternBytes(12 * kBlock + 1000, 77);  // 12 blocks and a tail
  ASSERT_TRUE(WriteFile(path, data));
  ASSERT_TRUE(SyncDir(fs->root()));
  ASSERT_TRUE(fs->Remount());  // empty caches
  const std::size_t blocks = 13;
  ASSERT_TRUE(ReadDirectByBlock(path, data, [&](std::size_t b) {
    if (b + 1 >= blocks) return true;
    // Wait (bounded) until the daemon says block b+1 is in its cache, so the
    // next read finds it there.
    const std::string line = "readahead: block " + std::to_string(b + 1) + " of inode ";
    for (int i = 0; i < 600; ++i) {
      if (fs->daemon_log().find(line) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "no readahead of block " << b + 1 << " in 30 s; log:\n"
                  << fs->daemon_log().substr(
                         fs->daemon_log().size() > 4000 ? fs->daemon_log().size() - 4000 : 0);
    return false;
  }));
  ASSERT_TRUE(fs->Unmount());
  EXPECT_EQ(LastLoads(fs->daemon_log()), std::make_pair(13L, 12L))
      << "13 loads, 12 of them readahead (every block but the first)";

  fs->set_mount_opts("readahead=0");
  ASSERT_TRUE(fs->Mount());
  ASSERT_TRUE(ReadDirectByBlock(path, data, [](std::size_t) { return true; }));
  ASSERT_TRUE(fs->Unmount());
  EXPECT_EQ(LastLoads(fs->daemon_log()), std::make_pair(13L, 0L));
  EXPECT_NE(fs->daemon_log().find("readahead 0 blocks"), std::string::npos);
}

// Readahead ramps up from one block: a reader that reads the first block of
// a long file and stops (file(1), a thumbnailer) has cost one access it did
// not need, not the 8 of a full window (readahead=8, the default, given so
// the test keeps its meaning if the default changes).
TEST(FsReadaheadTest, AReaderThatStopsAfterOneBlockCostsOneAccessItDidNotNeed) {
  auto fs = MountedFs::Create(PackedOptions("log_level=debug,readahead=8"));
  ASSERT_TRUE(fs);
  if (fs->reference()) GTEST_SKIP() << "the daemon's cache";
  const std::string path = fs->Path("movie");
  const std::string data = PatternBytes(12 * kBlock + 1000, 78);
  ASSERT_TRUE(WriteFile(path, data));
  ASSERT_TRUE(SyncDir(fs->root()));
  ASSERT_TRUE(fs->Remount());  // empty caches
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  void* raw = nullptr;
  ASSERT_EQ(::posix_memalign(&raw, 4096, kBlock), 0);
  std::unique_ptr<void, decltype(&std::free)> buf(raw, &std::free);
  const ssize_t n = ::pread(fd, buf.get(), kBlock, 0);
  ::close(fd);
  ASSERT_EQ(n, static_cast<ssize_t>(kBlock)) << std::strerror(errno);
  EXPECT_EQ(std::string(static_cast<const char*>(buf.get()), kBlock), data.substr(0, kBlock));
  // The readahead the read started is done once block 1 is in the cache
  // (a window of 8 would have loaded blocks 1-8 in the same batch).
  bool fetched = false;
  for (int i = 0; i < 600 && !fetched; ++i) {
    fetched = fs->daemon_log().find("readahead: block 1 of inode ") != std::string::npos;
    if (!fetched) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(fetched) << "no readahead of block 1 in 30 s";
  ASSERT_TRUE(fs->Unmount());
  EXPECT_EQ(LastLoads(fs->daemon_log()), std::make_pair(2L, 1L))
      << "2 loads, 1 of them readahead (block 1)";
}

}  // namespace
}  // namespace s3oram
