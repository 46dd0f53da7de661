// End-to-end POSIX semantics over a real s3oramfs mount (or, with
// S3ORAM_FS_TEST_DIR, over a reference filesystem such as tmpfs or ext4).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/fs_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::FileHasContent;
using testing::FsOptions;
using testing::ListDir;
using testing::MountedFs;
using testing::PatternBytes;
using testing::PreadUpTo;
using testing::PwriteAll;
using testing::ReadFile;
using testing::WriteFile;

constexpr std::size_t kB = 4096;

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int Close() {
    int r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

struct stat Stat(const std::string& p) {
  struct stat st{};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p << ": " << std::strerror(errno);
  return st;
}

struct stat Lstat(const std::string& p) {
  struct stat st{};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p << ": " << std::strerror(errno);
  return st;
}

int ErrnoOf(int r) { return r < 0 ? errno : 0; }
int ErrnoOfL(long r) { return r < 0 ? errno : 0; }

int Renameat2(const std::string& a, const std::string& b, unsigned flags) {
  return static_cast<int>(
      ::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), flags));
}

std::string Readlink(const std::string& p) {
  std::string buf(8192, '\0');
  ssize_t n = ::readlink(p.c_str(), buf.data(), buf.size());
  EXPECT_GE(n, 0) << p << ": " << std::strerror(errno);
  buf.resize(n < 0 ? 0 : static_cast<std::size_t>(n));
  return buf;
}

std::string Zeros(std::size_t n) { return std::string(n, '\0'); }

std::int64_t Ns(const timespec& t) { return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; }

std::int64_t NowNs() {
  timespec t;
  ::clock_gettime(CLOCK_REALTIME, &t);
  return Ns(t);
}

struct statvfs StatVfs(const std::string& p) {
  struct statvfs sv{};
  EXPECT_EQ(::statvfs(p.c_str(), &sv), 0) << std::strerror(errno);
  return sv;
}

// Waits (bounded) until the filesystem reports `want` free blocks; the kernel
// forgets unlinked inodes asynchronously.
::testing::AssertionResult EventuallyFree(const std::string& root, std::uint64_t want) {
  std::uint64_t got = 0;
  for (int i = 0; i < 1000; ++i) {
    got = StatVfs(root).f_bfree;
    if (got == want) return ::testing::AssertionSuccess();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ::testing::AssertionFailure() << "f_bfree is " << got << ", expected " << want;
}

class FsPosixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs_ = MountedFs::Create();
    ASSERT_TRUE(fs_);
  }
  std::string P(std::string_view rel) const { return fs_->Path(rel); }
  std::unique_ptr<MountedFs> fs_;
};

TEST_F(FsPosixTest, RootIsAnEmptyDirectoryOwnedByTheMountingUser) {
  struct stat st = Stat(fs_->root());
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(st.st_gid, ::getegid());
  EXPECT_EQ(st.st_nlink, 2u);
  EXPECT_TRUE(ListDir(fs_->root()).empty());
  if (!fs_->reference()) {
    auto m = testing::FindMount(fs_->root());
    ASSERT_TRUE(m);
    EXPECT_EQ(m->fstype, "fuse.s3oramfs");
    EXPECT_EQ(m->source, fs_->state());
  }
}

TEST_F(FsPosixTest, CreateWriteReadAndOverwrite) {
  const std::string f = P("file");
  std::string data = PatternBytes(300000, 1);
  {
    Fd fd(::open(f.c_str(), O_CREAT | O_EXCL | O_RDWR, 0640));
    ASSERT_TRUE(fd.ok()) << std::strerror(errno);
    ASSERT_TRUE(PwriteAll(fd.get(), data, 0)) << std::strerror(errno);
    struct stat st{};
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_size, 300000);
    EXPECT_EQ(st.st_mode, S_IFREG | 0640);
    EXPECT_EQ(st.st_nlink, 1u);
    for (auto [off, len] : std::vector<std::pair<std::size_t, std::size_t>>{
             {0, 1}, {4095, 2}, {4096, 4096}, {12345, 70000}, {299990, 10}, {0, 300000}}) {
      auto got = PreadUpTo(fd.get(), len, static_cast<off_t>(off));
      ASSERT_TRUE(got);
      EXPECT_EQ(*got, data.substr(off, len)) << "pread(" << off << ", " << len << ")";
    }
    auto past = PreadUpTo(fd.get(), 10, 299999);
    ASSERT_TRUE(past);
    EXPECT_EQ(*past, data.substr(299999));
    auto eof = PreadUpTo(fd.get(), 10, 300000);
    ASSERT_TRUE(eof);
    EXPECT_EQ(eof->size(), 0u);
    // Overwrite across a block boundary and inside a later block.
    std::string patch(20, 'X');
    ASSERT_TRUE(PwriteAll(fd.get(), patch, 4090));
    data.replace(4090, 20, patch);
    ASSERT_TRUE(PwriteAll(fd.get(), "yz", 150001));
    data.replace(150001, 2, "yz");
    auto whole = PreadUpTo(fd.get(), data.size(), 0);
    ASSERT_TRUE(whole);
    EXPECT_EQ(*whole, data);
    EXPECT_EQ(fd.Close(), 0);
  }
  EXPECT_EQ(ErrnoOf(::open(f.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644)), EEXIST);
  EXPECT_TRUE(FileHasContent(f, data));
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(f, data));
  EXPECT_EQ(Stat(f).st_mode, S_IFREG | 0640);
  // O_TRUNC empties it.
  {
    Fd fd(::open(f.c_str(), O_RDWR | O_TRUNC));
    ASSERT_TRUE(fd.ok());
    struct stat st{};
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_size, 0);
  }
  EXPECT_TRUE(FileHasContent(f, ""));
}

TEST_F(FsPosixTest, SequentialWritesAndReadsOfOddSizes) {
  const std::string f = P("seq");
  std::string want;
  std::mt19937_64 g(7);
  {
    Fd fd(::open(f.c_str(), O_CREAT | O_WRONLY, 0644));
    ASSERT_TRUE(fd.ok());
    std::size_t sizes[] = {1, 7, 4096, 5000, 100, 8191, 3, 12289, 4095, 1};
    int i = 0;
    for (std::size_t n : sizes) {
      std::string chunk = PatternBytes(n, 100 + i++);
      ASSERT_TRUE(testing::WriteAllFd(fd.get(), chunk));
      want += chunk;
    }
  }
  Fd fd(::open(f.c_str(), O_RDONLY));
  ASSERT_TRUE(fd.ok());
  std::string got;
  std::size_t sizes[] = {3, 4093, 1, 9000, 17, 65536};
  for (int k = 0; got.size() < want.size() + 1 && k < 100; ++k) {
    std::string buf(sizes[k % 6], '\0');
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    ASSERT_GE(n, 0);
    if (n == 0) break;
    got.append(buf.data(), static_cast<std::size_t>(n));
  }
  EXPECT_EQ(got, want) << testing::DiffSummary(got, want);
}

TEST_F(FsPosixTest, AppendModeWritesAtTheEnd) {
  const std::string f = P("log");
  ASSERT_TRUE(WriteFile(f, "start"));
  std::string big = PatternBytes(5000, 3);
  {
    Fd a(::open(f.c_str(), O_WRONLY | O_APPEND));
    Fd b(::open(f.c_str(), O_WRONLY | O_APPEND));
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(::write(a.get(), "AAA", 3), 3);
    ASSERT_EQ(::lseek(a.get(), 0, SEEK_SET), 0);
    ASSERT_EQ(::write(a.get(), "BB", 2), 2);
    EXPECT_EQ(::lseek(a.get(), 0, SEEK_CUR), 10);
    ASSERT_EQ(::write(b.get(), "C", 1), 1);
    EXPECT_EQ(::lseek(b.get(), 0, SEEK_CUR), 11);
    ASSERT_TRUE(testing::WriteAllFd(a.get(), big));
    struct stat st{};
    ASSERT_EQ(::fstat(b.get(), &st), 0);
    EXPECT_EQ(st.st_size, static_cast<off_t>(11 + big.size()));
  }
  std::string want = "startAAABBC" + big;
  EXPECT_TRUE(FileHasContent(f, want));
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(f, want));
}

TEST_F(FsPosixTest, TruncateGrowsWithZerosAndShrinks) {
  const std::string f = P("t");
  std::string d = PatternBytes(3 * kB + 100, 2);
  ASSERT_TRUE(WriteFile(f, d));
  ASSERT_EQ(::truncate(f.c_str(), 5000), 0);
  EXPECT_EQ(Stat(f).st_size, 5000);
  EXPECT_TRUE(FileHasContent(f, d.substr(0, 5000)));
  ASSERT_EQ(::truncate(f.c_str(), 20000), 0);
  EXPECT_TRUE(FileHasContent(f, d.substr(0, 5000) + Zeros(15000)));
  std::string want;
  {
    Fd fd(::open(f.c_str(), O_RDWR));
    ASSERT_TRUE(fd.ok());
    // Shrink into the middle of block 0, then grow: old bytes must not come back.
    ASSERT_EQ(::ftruncate(fd.get(), 100), 0);
    ASSERT_EQ(::ftruncate(fd.get(), 9000), 0);
    auto got = PreadUpTo(fd.get(), 20000, 0);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, d.substr(0, 100) + Zeros(8900)) << testing::DiffSummary(*got, d.substr(0, 100) + Zeros(8900));
    ASSERT_EQ(::ftruncate(fd.get(), 0), 0);
    struct stat st{};
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_size, 0);
    ASSERT_EQ(::ftruncate(fd.get(), 2 * kB), 0);
    ASSERT_TRUE(PwriteAll(fd.get(), "tail", 2 * kB + 10));
    want = Zeros(2 * kB + 10) + "tail";
    got = PreadUpTo(fd.get(), 3 * kB, 0);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, want);
  }
  ASSERT_EQ(::mkdir(P("dir").c_str(), 0755), 0);
  EXPECT_EQ(ErrnoOf(::truncate(P("dir").c_str(), 0)), EISDIR);
  EXPECT_EQ(ErrnoOf(::truncate(P("missing").c_str(), 0)), ENOENT);
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(f, want));
}

// The shrunk tail must be zeroed in stored data, not only in a cache.
TEST_F(FsPosixTest, ShrinkThenGrowAfterRemountGivesZeros) {
  const std::string f = P("s");
  std::string d = PatternBytes(2 * kB + 50, 4);
  ASSERT_TRUE(WriteFile(f, d, 0644, /*do_fsync=*/true));
  ASSERT_TRUE(fs_->Remount());
  ASSERT_EQ(::truncate(f.c_str(), 10), 0);
  ASSERT_EQ(::truncate(f.c_str(), 2 * kB + 50), 0);
  std::string want = d.substr(0, 10) + Zeros(2 * kB + 40);
  EXPECT_TRUE(FileHasContent(f, want));
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(f, want));
}

// Small writes into blocks that hold data and are not cached (after a
// remount) are stored as read-modify-write updates of the ORAM copy: the
// bytes around them, before and past the old end of the file, must come out
// right, after the write and after another remount.
TEST_F(FsPosixTest, SmallOverwritesOfUncachedBlocksKeepTheBytesAround) {
  const std::string f = P("rmw");
  std::string want = PatternBytes(3 * kB + 100, 9);
  ASSERT_TRUE(WriteFile(f, want, 0644, /*do_fsync=*/true));
  ASSERT_TRUE(fs_->Remount());
  {
    Fd fd(::open(f.c_str(), O_WRONLY));
    ASSERT_TRUE(fd.ok());
    // Inside a block; across a block boundary; inside the last block and
    // past the old end (the file grows within its last block).
    const std::pair<std::size_t, std::size_t> writes[] = {
        {10, 5}, {kB - 3, 7}, {2 * kB + 500, 1}, {3 * kB + 90, 40}};
    int i = 0;
    for (auto [off, len] : writes) {
      std::string chunk = PatternBytes(len, 200 + i++);
      ASSERT_EQ(::pwrite(fd.get(), chunk.data(), len, static_cast<off_t>(off)),
                static_cast<ssize_t>(len));
      if (want.size() < off + len) want.resize(off + len, '\0');
      want.replace(off, len, chunk);
    }
  }
  EXPECT_TRUE(FileHasContent(f, want));
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(f, want));
}

TEST_F(FsPosixTest, HolesReadAsZerosAndCostNoBlocks) {
  const std::string f = P("holes");
  Fd fd(::open(f.c_str(), O_CREAT | O_RDWR, 0644));
  ASSERT_TRUE(fd.ok());
  ASSERT_TRUE(PwriteAll(fd.get(), "xyz", 3 * kB + 100));
  ASSERT_TRUE(PwriteAll(fd.get(), "q", 1));
  std::string want = Zeros(3 * kB + 103);
  want.replace(3 * kB + 100, 3, "xyz");
  want[1] = 'q';
  auto got = PreadUpTo(fd.get(), 5 * kB, 0);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, want);
  ASSERT_EQ(::fsync(fd.get()), 0);
  struct stat st{};
  ASSERT_EQ(::fstat(fd.get(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(3 * kB + 103));
  EXPECT_GE(st.st_blocks * 512, static_cast<blkcnt_t>(2 * kB));
  EXPECT_LE(st.st_blocks * 512, static_cast<blkcnt_t>(2 * kB)) << "holes must not be allocated";
  fd.Reset();
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(f, want));
}

TEST_F(FsPosixTest, UnlinkedOpenFileStaysUsableUntilClose) {
  const std::string f = P("victim");
  std::string data = PatternBytes(10000, 5);
  std::uint64_t free0 = fs_->reference() ? 0 : StatVfs(fs_->root()).f_bfree;
  {
    Fd fd(::open(f.c_str(), O_CREAT | O_RDWR, 0644));
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(PwriteAll(fd.get(), data, 0));
    ASSERT_EQ(::fsync(fd.get()), 0);
    ASSERT_EQ(::unlink(f.c_str()), 0);
    struct stat st{};
    EXPECT_EQ(ErrnoOf(::stat(f.c_str(), &st)), ENOENT);
    EXPECT_EQ(ListDir(fs_->root()).count("victim"), 0u);
    auto got = PreadUpTo(fd.get(), 20000, 0);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, data);
    ASSERT_TRUE(PwriteAll(fd.get(), "more", 10000));
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_nlink, 0u);
    EXPECT_EQ(st.st_size, 10004);
    // A new file with the same name is a different file.
    ASSERT_TRUE(WriteFile(f, "new"));
    got = PreadUpTo(fd.get(), 20000, 0);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, data + "more");
    EXPECT_EQ(fd.Close(), 0);
  }
  EXPECT_TRUE(FileHasContent(f, "new"));
  ASSERT_EQ(::unlink(f.c_str()), 0);
  if (!fs_->reference()) {
    EXPECT_TRUE(EventuallyFree(fs_->root(), free0));
  }
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(ListDir(fs_->root()).empty());
  if (!fs_->reference()) {
    EXPECT_EQ(StatVfs(fs_->root()).f_bfree, free0);
  }
}

TEST_F(FsPosixTest, RenameReplacesAndReportsErrors) {
  ASSERT_TRUE(WriteFile(P("a"), "A"));
  ASSERT_TRUE(WriteFile(P("b"), "B"));
  ASSERT_EQ(::rename(P("a").c_str(), P("b").c_str()), 0);
  EXPECT_EQ(ErrnoOf(::access(P("a").c_str(), F_OK)), ENOENT);
  EXPECT_TRUE(FileHasContent(P("b"), "A"));
  // The replaced file stays readable through an open descriptor.
  ASSERT_TRUE(WriteFile(P("c"), "C"));
  {
    Fd old(::open(P("b").c_str(), O_RDONLY));
    ASSERT_TRUE(old.ok());
    ASSERT_EQ(::rename(P("c").c_str(), P("b").c_str()), 0);
    auto got = PreadUpTo(old.get(), 10, 0);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, "A");
  }
  EXPECT_TRUE(FileHasContent(P("b"), "C"));
  // Onto itself, and onto another link of the same inode: no-ops.
  EXPECT_EQ(::rename(P("b").c_str(), P("b").c_str()), 0);
  ASSERT_EQ(::link(P("b").c_str(), P("b2").c_str()), 0);
  EXPECT_EQ(::rename(P("b").c_str(), P("b2").c_str()), 0);
  EXPECT_TRUE(FileHasContent(P("b"), "C"));
  EXPECT_TRUE(FileHasContent(P("b2"), "C"));
  EXPECT_EQ(Stat(P("b")).st_nlink, 2u);
  // A directory over an empty directory.
  ASSERT_EQ(::mkdir(P("d1").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(P("d2").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(P("d1/x"), "x"));
  ASSERT_EQ(::rename(P("d1").c_str(), P("d2").c_str()), 0);
  EXPECT_EQ(ErrnoOf(::access(P("d1").c_str(), F_OK)), ENOENT);
  EXPECT_TRUE(FileHasContent(P("d2/x"), "x"));
  // Errors.
  ASSERT_EQ(::mkdir(P("d3").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(P("d3/y"), "y"));
  EXPECT_EQ(ErrnoOf(::rename(P("d2").c_str(), P("d3").c_str())), ENOTEMPTY);
  EXPECT_EQ(ErrnoOf(::rename(P("b").c_str(), P("d3").c_str())), EISDIR);
  EXPECT_EQ(ErrnoOf(::rename(P("d3").c_str(), P("b").c_str())), ENOTDIR);
  EXPECT_EQ(ErrnoOf(::rename(P("d3").c_str(), P("d3/sub").c_str())), EINVAL);
  EXPECT_EQ(ErrnoOf(::rename(P("missing").c_str(), P("z").c_str())), ENOENT);
  EXPECT_EQ(ErrnoOf(::rename(P("b").c_str(), P("nodir/z").c_str())), ENOENT);
  EXPECT_EQ(ErrnoOf(::rename(P("b").c_str(), P("b2/z").c_str())), ENOTDIR);
  EXPECT_TRUE(FileHasContent(P("d3/y"), "y"));
  EXPECT_TRUE(FileHasContent(P("d2/x"), "x"));
  // Moving a subdirectory between parents moves a link count.
  ASSERT_EQ(::mkdir(P("p1").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(P("p2").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(P("p1/s").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(P("p1/s/f"), "f"));
  EXPECT_EQ(Stat(P("p1")).st_nlink, 3u);
  EXPECT_EQ(Stat(P("p2")).st_nlink, 2u);
  ASSERT_EQ(::rename(P("p1/s").c_str(), P("p2/s").c_str()), 0);
  EXPECT_EQ(Stat(P("p1")).st_nlink, 2u);
  EXPECT_EQ(Stat(P("p2")).st_nlink, 3u);
  EXPECT_EQ(Stat(P("p2/s/..")).st_ino, Stat(P("p2")).st_ino);
  // A file across directories.
  ASSERT_EQ(::rename(P("d3/y").c_str(), P("p1/y2").c_str()), 0);
  ASSERT_TRUE(fs_->Remount());
  EXPECT_EQ(ListDir(fs_->root()), (std::set<std::string>{"b", "b2", "d2", "d3", "p1", "p2"}));
  EXPECT_TRUE(FileHasContent(P("b"), "C"));
  EXPECT_EQ(Stat(P("b2")).st_nlink, 2u);
  EXPECT_TRUE(FileHasContent(P("d2/x"), "x"));
  EXPECT_TRUE(ListDir(P("d3")).empty());
  EXPECT_TRUE(FileHasContent(P("p1/y2"), "y"));
  EXPECT_TRUE(FileHasContent(P("p2/s/f"), "f"));
  EXPECT_EQ(Stat(P("p1")).st_nlink, 2u);
  EXPECT_EQ(Stat(P("p2")).st_nlink, 3u);
  EXPECT_EQ(Stat(fs_->root()).st_nlink, 2u + 4u);
}

TEST_F(FsPosixTest, Renameat2NoReplaceAndExchange) {
  ASSERT_TRUE(WriteFile(P("a"), "A"));
  ASSERT_TRUE(WriteFile(P("b"), "B"));
  EXPECT_EQ(ErrnoOf(Renameat2(P("a"), P("b"), RENAME_NOREPLACE)), EEXIST);
  EXPECT_TRUE(FileHasContent(P("a"), "A"));
  EXPECT_TRUE(FileHasContent(P("b"), "B"));
  ASSERT_EQ(Renameat2(P("a"), P("c"), RENAME_NOREPLACE), 0) << std::strerror(errno);
  EXPECT_EQ(ErrnoOf(::access(P("a").c_str(), F_OK)), ENOENT);
  EXPECT_TRUE(FileHasContent(P("c"), "A"));
  ASSERT_EQ(Renameat2(P("c"), P("b"), RENAME_EXCHANGE), 0) << std::strerror(errno);
  EXPECT_TRUE(FileHasContent(P("c"), "B"));
  EXPECT_TRUE(FileHasContent(P("b"), "A"));
  // A file and a directory in different parents.
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(P("p").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(P("d/in"), "in"));
  ASSERT_EQ(Renameat2(P("b"), P("p/d"), RENAME_NOREPLACE), 0);
  ASSERT_EQ(Renameat2(P("p/d"), P("d"), RENAME_EXCHANGE), 0) << std::strerror(errno);
  EXPECT_TRUE(FileHasContent(P("p/d/in"), "in"));
  EXPECT_TRUE(FileHasContent(P("d"), "A"));
  EXPECT_EQ(Stat(P("p")).st_nlink, 3u);
  EXPECT_EQ(Stat(P("p/d/..")).st_ino, Stat(P("p")).st_ino);
  EXPECT_EQ(ErrnoOf(Renameat2(P("c"), P("missing"), RENAME_EXCHANGE)), ENOENT);
  EXPECT_EQ(ErrnoOf(Renameat2(P("c"), P("x"), RENAME_EXCHANGE | RENAME_NOREPLACE)), EINVAL);
  ASSERT_TRUE(fs_->Remount());
  EXPECT_EQ(ListDir(fs_->root()), (std::set<std::string>{"c", "d", "p"}));
  EXPECT_TRUE(FileHasContent(P("c"), "B"));
  EXPECT_TRUE(FileHasContent(P("d"), "A"));
  EXPECT_TRUE(FileHasContent(P("p/d/in"), "in"));
  EXPECT_EQ(Stat(fs_->root()).st_nlink, 3u);
}

TEST_F(FsPosixTest, MkdirAndRmdir) {
  ASSERT_EQ(::mkdir(P("d").c_str(), 0750), 0);
  struct stat st = Stat(P("d"));
  EXPECT_EQ(st.st_mode, S_IFDIR | 0750);
  EXPECT_EQ(st.st_nlink, 2u);
  EXPECT_EQ(ErrnoOf(::mkdir(P("d").c_str(), 0755)), EEXIST);
  EXPECT_EQ(Stat(fs_->root()).st_nlink, 3u);
  ASSERT_EQ(::mkdir(P("d/e").c_str(), 0755), 0);
  EXPECT_EQ(Stat(P("d")).st_nlink, 3u);
  EXPECT_EQ(ErrnoOf(::rmdir(P("d").c_str())), ENOTEMPTY);
  ASSERT_TRUE(WriteFile(P("d/e/f"), "f"));
  EXPECT_EQ(ErrnoOf(::rmdir(P("d/e").c_str())), ENOTEMPTY);
  ASSERT_EQ(::unlink(P("d/e/f").c_str()), 0);
  ASSERT_EQ(::rmdir(P("d/e").c_str()), 0);
  EXPECT_EQ(Stat(P("d")).st_nlink, 2u);
  EXPECT_EQ(ErrnoOf(::rmdir(P("d/missing").c_str())), ENOENT);
  ASSERT_TRUE(WriteFile(P("g"), "g"));
  EXPECT_EQ(ErrnoOf(::rmdir(P("g").c_str())), ENOTDIR);
  EXPECT_EQ(ErrnoOf(::unlink(P("d").c_str())), EISDIR);
  ASSERT_EQ(::rmdir(P("d").c_str()), 0);
  EXPECT_EQ(ErrnoOf(::access(P("d").c_str(), F_OK)), ENOENT);
  EXPECT_EQ(Stat(fs_->root()).st_nlink, 2u);
  // Deep nesting.
  std::string deep;
  for (int i = 0; i < 20; ++i) {
    deep += (i ? "/" : "") + std::string("lvl") + std::to_string(i);
    ASSERT_EQ(::mkdir(P(deep).c_str(), 0755), 0) << deep;
  }
  ASSERT_TRUE(WriteFile(P(deep + "/leaf"), "leaf"));
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(P(deep + "/leaf"), "leaf"));
  EXPECT_EQ(ListDir(fs_->root()), (std::set<std::string>{"g", "lvl0"}));
  EXPECT_EQ(Stat(P("lvl0")).st_nlink, 3u);
}

TEST_F(FsPosixTest, ReaddirReportsNamesTypesAndInodes) {
  ASSERT_TRUE(WriteFile(P("f"), "f"));
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("f", P("l").c_str()), 0);
  std::map<std::string, std::pair<unsigned, ino_t>> seen;
  DIR* dir = ::opendir(fs_->root().c_str());
  ASSERT_NE(dir, nullptr);
  while (dirent* e = ::readdir(dir)) {
    EXPECT_TRUE(seen.emplace(e->d_name, std::make_pair(unsigned{e->d_type}, e->d_ino)).second)
        << "repeated " << e->d_name;
  }
  ::closedir(dir);
  ASSERT_EQ(seen.size(), 5u);
  ASSERT_TRUE(seen.count(".") && seen.count("..") && seen.count("f") && seen.count("d") &&
              seen.count("l"));
  EXPECT_EQ(seen["f"].first, DT_REG);
  EXPECT_EQ(seen["d"].first, DT_DIR);
  EXPECT_EQ(seen["l"].first, DT_LNK);
  EXPECT_EQ(seen["f"].second, Stat(P("f")).st_ino);
  EXPECT_EQ(seen["d"].second, Stat(P("d")).st_ino);
  EXPECT_EQ(seen["l"].second, Lstat(P("l")).st_ino);
}

TEST_F(FsPosixTest, ReaddirListsManyEntries) {
  std::set<std::string> want;
  for (int i = 0; i < 500; ++i) {
    std::string name = "entry-" + std::to_string(i) + std::string(i % 40, 'x');
    Fd fd(::open(P(name).c_str(), O_CREAT | O_WRONLY, 0644));
    ASSERT_TRUE(fd.ok()) << name << ": " << std::strerror(errno);
    want.insert(name);
  }
  EXPECT_EQ(ListDir(fs_->root()), want);
  ASSERT_TRUE(fs_->Remount());
  EXPECT_EQ(ListDir(fs_->root()), want);
}

// getdents64 continued after adds and removes: every entry that existed
// throughout appears exactly once, nothing repeats.
TEST_F(FsPosixTest, ReaddirOffsetsStayStableWhileEntriesChange) {
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0);
  std::vector<std::string> initial;
  for (int i = 0; i < 300; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "f%03d", i);
    initial.push_back(name);
    Fd fd(::open(P(std::string("d/") + name).c_str(), O_CREAT | O_WRONLY, 0644));
    ASSERT_TRUE(fd.ok());
  }
  Fd dfd(::open(P("d").c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(dfd.ok());
  std::map<std::string, int> seen;
  alignas(8) char buf[1024];
  auto read_chunk = [&]() -> long {
    long n = ::syscall(SYS_getdents64, dfd.get(), buf, sizeof buf);
    for (long pos = 0; pos < n;) {
      // struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, name.
      unsigned short reclen;
      std::memcpy(&reclen, buf + pos + 16, sizeof reclen);
      ++seen[std::string(buf + pos + 19)];
      pos += reclen;
    }
    return n;
  };
  while (seen.size() < 100) ASSERT_GT(read_chunk(), 0);
  // Change the directory: add 100 entries, remove every third initial one.
  std::set<std::string> removed;
  for (int i = 0; i < 100; ++i) {
    Fd fd(::open(P("d/new" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0644));
    ASSERT_TRUE(fd.ok());
  }
  for (std::size_t i = 0; i < initial.size(); i += 3) {
    ASSERT_EQ(::unlink(P("d/" + initial[i]).c_str()), 0);
    removed.insert(initial[i]);
  }
  long n;
  int chunks = 0;
  while ((n = read_chunk()) > 0) ASSERT_LT(++chunks, 1000);
  ASSERT_EQ(n, 0) << std::strerror(errno);
  for (const auto& [name, count] : seen) EXPECT_EQ(count, 1) << name << " listed " << count << " times";
  for (const auto& name : initial) {
    if (!removed.count(name)) {
      EXPECT_EQ(seen.count(name), 1u) << name << " skipped";
    }
  }
  // A fresh listing from offset 0 is exactly the current content.
  ASSERT_EQ(::lseek(dfd.get(), 0, SEEK_SET), 0);
  seen.clear();
  while ((n = read_chunk()) > 0) {
  }
  std::set<std::string> now;
  for (const auto& [name, count] : seen) {
    EXPECT_EQ(count, 1) << name;
    if (name != "." && name != "..") now.insert(name);
  }
  EXPECT_EQ(now, ListDir(P("d")));
  EXPECT_EQ(now.size(), 300u - removed.size() + 100u);
}

TEST_F(FsPosixTest, TelldirSeekdirResumesAtTheSameEntry) {
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(WriteFile(P("e" + std::to_string(i)), ""));
  DIR* dir = ::opendir(fs_->root().c_str());
  ASSERT_NE(dir, nullptr);
  for (int i = 0; i < 40; ++i) ASSERT_NE(::readdir(dir), nullptr);
  long pos = ::telldir(dir);
  std::vector<std::string> first, second;
  for (int i = 0; i < 20; ++i) {
    dirent* e = ::readdir(dir);
    ASSERT_NE(e, nullptr);
    first.push_back(e->d_name);
  }
  // Entries added meanwhile must not disturb the resumed listing of existing ones.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(WriteFile(P("late" + std::to_string(i)), ""));
  ::seekdir(dir, pos);
  while (second.size() < 20) {
    dirent* e = ::readdir(dir);
    ASSERT_NE(e, nullptr);
    if (std::string(e->d_name).rfind("late", 0) == 0) continue;
    second.push_back(e->d_name);
  }
  EXPECT_EQ(first, second);
  ::rewinddir(dir);
  int count = 0;
  while (::readdir(dir)) ++count;
  EXPECT_EQ(count, 2 + 100 + 10);
  ::closedir(dir);
}

TEST_F(FsPosixTest, SymlinksAndReadlink) {
  ASSERT_EQ(::symlink("target-file", P("l1").c_str()), 0);
  EXPECT_EQ(Readlink(P("l1")), "target-file");
  struct stat st = Lstat(P("l1"));
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(st.st_size, 11);
  EXPECT_EQ(ErrnoOf(::stat(P("l1").c_str(), &st)), ENOENT);  // dangling for now
  ASSERT_TRUE(WriteFile(P("target-file"), "T"));
  EXPECT_TRUE(FileHasContent(P("l1"), "T"));
  ASSERT_EQ(::symlink(P("target-file").c_str(), P("l2").c_str()), 0);
  EXPECT_TRUE(FileHasContent(P("l2"), "T"));
  std::string long_target(4000, 'a');
  for (std::size_t i = 100; i < long_target.size(); i += 100) long_target[i] = '/';
  ASSERT_EQ(::symlink(long_target.c_str(), P("long").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(Readlink(P("long")), long_target);
  EXPECT_EQ(ErrnoOf(::symlink("x", P("l1").c_str())), EEXIST);
  char small[4];
  EXPECT_EQ(ErrnoOfL(::readlink(P("target-file").c_str(), small, sizeof small)), EINVAL);
  EXPECT_EQ(::readlink(P("l1").c_str(), small, sizeof small), 4);
  EXPECT_EQ(std::string(small, 4), "targ");
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(P("d/x"), "dx"));
  ASSERT_EQ(::symlink("d", P("ld").c_str()), 0);
  EXPECT_TRUE(FileHasContent(P("ld/x"), "dx"));
  ASSERT_EQ(::unlink(P("l2").c_str()), 0);
  EXPECT_TRUE(FileHasContent(P("target-file"), "T"));
  ASSERT_TRUE(fs_->Remount());
  EXPECT_EQ(Readlink(P("l1")), "target-file");
  EXPECT_EQ(Readlink(P("long")), long_target);
  EXPECT_TRUE(FileHasContent(P("ld/x"), "dx"));
  EXPECT_EQ(ListDir(fs_->root()), (std::set<std::string>{"d", "l1", "ld", "long", "target-file"}));
}

TEST_F(FsPosixTest, HardLinksShareDataAndCountLinks) {
  ASSERT_TRUE(WriteFile(P("a"), "hello"));
  ASSERT_EQ(::link(P("a").c_str(), P("b").c_str()), 0);
  ASSERT_EQ(::mkdir(P("sub").c_str(), 0755), 0);
  ASSERT_EQ(::link(P("a").c_str(), P("sub/c").c_str()), 0);
  EXPECT_EQ(Stat(P("a")).st_ino, Stat(P("b")).st_ino);
  EXPECT_EQ(Stat(P("a")).st_ino, Stat(P("sub/c")).st_ino);
  EXPECT_EQ(Stat(P("a")).st_nlink, 3u);
  {
    Fd fd(::open(P("b").c_str(), O_WRONLY | O_APPEND));
    ASSERT_TRUE(fd.ok());
    ASSERT_EQ(::write(fd.get(), " world", 6), 6);
  }
  EXPECT_TRUE(FileHasContent(P("a"), "hello world"));
  EXPECT_TRUE(FileHasContent(P("sub/c"), "hello world"));
  EXPECT_EQ(ErrnoOf(::link(P("a").c_str(), P("b").c_str())), EEXIST);
  EXPECT_EQ(ErrnoOf(::link(P("sub").c_str(), P("sublink").c_str())), EPERM);
  EXPECT_EQ(ErrnoOf(::link(P("missing").c_str(), P("x").c_str())), ENOENT);
  ASSERT_EQ(::unlink(P("a").c_str()), 0);
  EXPECT_EQ(Stat(P("b")).st_nlink, 2u);
  ASSERT_TRUE(fs_->Remount());
  EXPECT_EQ(Stat(P("b")).st_nlink, 2u);
  EXPECT_EQ(Stat(P("b")).st_ino, Stat(P("sub/c")).st_ino);
  EXPECT_TRUE(FileHasContent(P("sub/c"), "hello world"));
  ASSERT_EQ(::unlink(P("b").c_str()), 0);
  EXPECT_EQ(Stat(P("sub/c")).st_nlink, 1u);
  ASSERT_EQ(::unlink(P("sub/c").c_str()), 0);
  EXPECT_TRUE(ListDir(P("sub")).empty());
}

TEST_F(FsPosixTest, ChmodAndChown) {
  ASSERT_TRUE(WriteFile(P("f"), "x", 0644));
  std::int64_t c0 = Ns(Stat(P("f")).st_ctim);
  ASSERT_EQ(::chmod(P("f").c_str(), 0751), 0);
  struct stat st = Stat(P("f"));
  EXPECT_EQ(st.st_mode, S_IFREG | 0751);
  EXPECT_GE(Ns(st.st_ctim), c0);
  {
    Fd fd(::open(P("f").c_str(), O_RDONLY));
    ASSERT_TRUE(fd.ok());
    ASSERT_EQ(::fchmod(fd.get(), 0600), 0);
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_mode, S_IFREG | 0600);
  }
  ASSERT_EQ(::chown(P("f").c_str(), 1234, 5678), 0);
  st = Stat(P("f"));
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 5678u);
  ASSERT_EQ(::chown(P("f").c_str(), static_cast<uid_t>(-1), 42), 0);
  st = Stat(P("f"));
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 42u);
  ASSERT_EQ(::chmod(P("f").c_str(), 04755), 0);
  EXPECT_EQ(Stat(P("f")).st_mode, S_IFREG | 04755);
  ASSERT_EQ(::symlink("f", P("l").c_str()), 0);
  ASSERT_EQ(::lchown(P("l").c_str(), 7, 8), 0);
  EXPECT_EQ(Lstat(P("l")).st_uid, 7u);
  EXPECT_EQ(Lstat(P("l")).st_gid, 8u);
  EXPECT_EQ(Stat(P("f")).st_uid, 1234u);
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(::chmod(P("d").c_str(), 01700), 0);
  EXPECT_EQ(Stat(P("d")).st_mode, S_IFDIR | 01700);
  EXPECT_EQ(ErrnoOf(::chmod(P("missing").c_str(), 0644)), ENOENT);
  ASSERT_TRUE(fs_->Remount());
  st = Stat(P("f"));
  EXPECT_EQ(st.st_mode, S_IFREG | 04755);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 42u);
  EXPECT_EQ(Lstat(P("l")).st_uid, 7u);
  EXPECT_EQ(Stat(P("d")).st_mode, S_IFDIR | 01700);
}

TEST_F(FsPosixTest, UtimensatSetsOmitsAndNows) {
  ASSERT_TRUE(WriteFile(P("f"), "data"));
  timespec ts[2] = {{1000000000, 123456789}, {1500000000, 987654321}};
  ASSERT_EQ(::utimensat(AT_FDCWD, P("f").c_str(), ts, 0), 0);
  struct stat st = Stat(P("f"));
  EXPECT_EQ(Ns(st.st_atim), 1000000000123456789);
  EXPECT_EQ(Ns(st.st_mtim), 1500000000987654321);
  timespec omit_atime[2] = {{0, UTIME_OMIT}, {1600000000, 5}};
  ASSERT_EQ(::utimensat(AT_FDCWD, P("f").c_str(), omit_atime, 0), 0);
  st = Stat(P("f"));
  EXPECT_EQ(Ns(st.st_atim), 1000000000123456789);
  EXPECT_EQ(Ns(st.st_mtim), 1600000000000000005);
  std::int64_t before = NowNs();
  timespec now_atime[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  ASSERT_EQ(::utimensat(AT_FDCWD, P("f").c_str(), now_atime, 0), 0);
  std::int64_t after = NowNs();
  st = Stat(P("f"));
  EXPECT_GE(Ns(st.st_atim), before - 2000000000);
  EXPECT_LE(Ns(st.st_atim), after + 2000000000);
  EXPECT_EQ(Ns(st.st_mtim), 1600000000000000005);
  ASSERT_EQ(::utimensat(AT_FDCWD, P("f").c_str(), nullptr, 0), 0);
  st = Stat(P("f"));
  EXPECT_GE(Ns(st.st_mtim), before - 2000000000);
  EXPECT_GE(Ns(st.st_ctim), before - 2000000000);
  // futimens, then a write moves mtime to now.
  {
    Fd fd(::open(P("f").c_str(), O_WRONLY));
    ASSERT_TRUE(fd.ok());
    timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    ASSERT_EQ(::futimens(fd.get(), old), 0);
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(Ns(st.st_mtim), 1000000000000000000);
    ASSERT_EQ(::write(fd.get(), "x", 1), 1);
    ASSERT_EQ(::fsync(fd.get()), 0);
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_GE(Ns(st.st_mtim), before - 2000000000) << "write did not update mtime";
  }
  // Symlinks themselves (AT_SYMLINK_NOFOLLOW), and a file left with set times.
  ASSERT_TRUE(WriteFile(P("g"), "g"));
  ASSERT_EQ(::symlink("g", P("l").c_str()), 0);
  timespec lts[2] = {{1100000000, 1}, {1200000000, 2}};
  ASSERT_EQ(::utimensat(AT_FDCWD, P("l").c_str(), lts, AT_SYMLINK_NOFOLLOW), 0);
  EXPECT_EQ(Ns(Lstat(P("l")).st_mtim), 1200000000000000002);
  timespec gts[2] = {{1300000000, 3}, {1400000000, 4}};
  ASSERT_EQ(::utimensat(AT_FDCWD, P("g").c_str(), gts, 0), 0);
  ASSERT_TRUE(fs_->Remount());
  EXPECT_EQ(Ns(Lstat(P("l")).st_mtim), 1200000000000000002);
  st = Stat(P("g"));
  EXPECT_EQ(Ns(st.st_atim), 1300000000000000003);
  EXPECT_EQ(Ns(st.st_mtim), 1400000000000000004);
}

TEST_F(FsPosixTest, StatfsReportsOramBlocks) {
  S3ORAM_SKIP_IN_REFERENCE(*fs_);
  struct statvfs sv = StatVfs(fs_->root());
  const auto& p = fs_->params();
  EXPECT_EQ(sv.f_bsize, p.block_bytes);
  EXPECT_EQ(sv.f_frsize, p.block_bytes);
  EXPECT_EQ(sv.f_blocks, p.capacity_blocks);
  EXPECT_EQ(sv.f_bfree, p.capacity_blocks);
  EXPECT_LE(sv.f_bavail, sv.f_bfree);
  EXPECT_EQ(sv.f_namemax, 255u);
  ASSERT_TRUE(WriteFile(P("f"), PatternBytes(64 * 1024, 1), 0644, true));
  EXPECT_EQ(StatVfs(fs_->root()).f_bfree, p.capacity_blocks - 16);
  EXPECT_EQ(Stat(P("f")).st_blocks * 512, 64 * 1024);
  ASSERT_EQ(::unlink(P("f").c_str()), 0);
  EXPECT_TRUE(EventuallyFree(fs_->root(), p.capacity_blocks));
}

TEST_F(FsPosixTest, UserXattrs) {
  const std::string f = P("f");
  ASSERT_TRUE(WriteFile(f, "x"));
  ASSERT_EQ(::setxattr(f.c_str(), "user.a", "1", 1, 0), 0) << std::strerror(errno);
  EXPECT_EQ(::getxattr(f.c_str(), "user.a", nullptr, 0), 1);
  char buf[4096];
  ASSERT_EQ(::getxattr(f.c_str(), "user.a", buf, sizeof buf), 1);
  EXPECT_EQ(buf[0], '1');
  EXPECT_EQ(ErrnoOfL(::setxattr(f.c_str(), "user.a", "22", 2, XATTR_CREATE)), EEXIST);
  EXPECT_EQ(ErrnoOfL(::setxattr(f.c_str(), "user.b", "x", 1, XATTR_REPLACE)), ENODATA);
  ASSERT_EQ(::setxattr(f.c_str(), "user.a", "22", 2, XATTR_REPLACE), 0);
  ASSERT_EQ(::getxattr(f.c_str(), "user.a", buf, sizeof buf), 2);
  EXPECT_EQ(std::string(buf, 2), "22");
  EXPECT_EQ(ErrnoOfL(::getxattr(f.c_str(), "user.a", buf, 1)), ERANGE);
  std::string bin = PatternBytes(3000, 8);
  bin[0] = '\0';
  bin[1500] = '\0';
  ASSERT_EQ(::setxattr(f.c_str(), "user.bin", bin.data(), bin.size(), 0), 0);
  ASSERT_EQ(::setxattr(f.c_str(), "user.empty", "", 0, 0), 0);
  EXPECT_EQ(::getxattr(f.c_str(), "user.empty", buf, sizeof buf), 0);
  auto list = [&](const std::string& path) {
    std::set<std::string> names;
    ssize_t n = ::listxattr(path.c_str(), nullptr, 0);
    EXPECT_GE(n, 0);
    std::string l(static_cast<std::size_t>(std::max<ssize_t>(n, 0)), '\0');
    n = ::listxattr(path.c_str(), l.data(), l.size());
    EXPECT_GE(n, 0);
    for (std::size_t i = 0; n > 0 && i < static_cast<std::size_t>(n);) {
      std::string name(l.c_str() + i);
      if (name.rfind("user.", 0) == 0) names.insert(name);
      i += name.size() + 1;
    }
    return names;
  };
  EXPECT_EQ(list(f), (std::set<std::string>{"user.a", "user.bin", "user.empty"}));
  EXPECT_EQ(ErrnoOfL(::getxattr(f.c_str(), "user.none", buf, sizeof buf)), ENODATA);
  ASSERT_EQ(::removexattr(f.c_str(), "user.a"), 0);
  EXPECT_EQ(ErrnoOfL(::removexattr(f.c_str(), "user.a")), ENODATA);
  EXPECT_EQ(ErrnoOfL(::getxattr(f.c_str(), "user.a", buf, sizeof buf)), ENODATA);
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(::setxattr(P("d").c_str(), "user.dir", "dv", 2, 0), 0);
  ASSERT_EQ(::symlink("f", P("l").c_str()), 0);
  EXPECT_EQ(ErrnoOfL(::lsetxattr(P("l").c_str(), "user.x", "1", 1, 0)), EPERM);
  ASSERT_TRUE(fs_->Remount());
  EXPECT_EQ(list(f), (std::set<std::string>{"user.bin", "user.empty"}));
  std::string got(4096, '\0');
  ssize_t n = ::getxattr(f.c_str(), "user.bin", got.data(), got.size());
  ASSERT_EQ(n, 3000);
  got.resize(3000);
  EXPECT_EQ(got, bin);
  ASSERT_EQ(::getxattr(P("d").c_str(), "user.dir", buf, sizeof buf), 2);
  EXPECT_EQ(std::string(buf, 2), "dv");
}

TEST_F(FsPosixTest, FsyncFdatasyncAndFlush) {
  const std::string f = P("f");
  std::string data = PatternBytes(20000, 9);
  {
    Fd fd(::open(f.c_str(), O_CREAT | O_RDWR, 0644));
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(PwriteAll(fd.get(), data.substr(0, 15000), 0));
    EXPECT_EQ(::fsync(fd.get()), 0) << std::strerror(errno);
    EXPECT_EQ(::fdatasync(fd.get()), 0) << std::strerror(errno);
    ASSERT_TRUE(PwriteAll(fd.get(), data.substr(15000), 15000));
    EXPECT_EQ(::fdatasync(fd.get()), 0) << std::strerror(errno);
    int dup = ::dup(fd.get());
    ASSERT_GE(dup, 0);
    EXPECT_EQ(::close(dup), 0);  // a flush with the file still open
    EXPECT_EQ(::syncfs(fd.get()), 0) << std::strerror(errno);
    EXPECT_EQ(fd.Close(), 0);
  }
  {
    Fd dfd(::open(fs_->root().c_str(), O_RDONLY | O_DIRECTORY));
    ASSERT_TRUE(dfd.ok());
    EXPECT_EQ(::fsync(dfd.get()), 0) << std::strerror(errno);
  }
  ::sync();
  EXPECT_TRUE(FileHasContent(f, data));
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(f, data));
}

TEST_F(FsPosixTest, FallocateAllocatesZeros) {
  const std::string f = P("f");
  std::uint64_t free0 = fs_->reference() ? 0 : StatVfs(fs_->root()).f_bfree;
  {
    Fd fd(::open(f.c_str(), O_CREAT | O_RDWR, 0644));
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(PwriteAll(fd.get(), "abc", 0));
    ASSERT_EQ(::fallocate(fd.get(), 0, 0, 65536), 0) << std::strerror(errno);
    struct stat st{};
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_size, 65536);
    EXPECT_GE(st.st_blocks * 512, 65536);
    ASSERT_EQ(::fallocate(fd.get(), 0, 100000, 8192), 0) << std::strerror(errno);
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_size, 108192);
    // Blocks 0..15 and 24..26.
    if (!fs_->reference()) {
      EXPECT_EQ(st.st_blocks * 512, 19 * 4096);
      EXPECT_EQ(StatVfs(fs_->root()).f_bfree, free0 - 19);
      for (int mode : {FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                       FALLOC_FL_ZERO_RANGE, FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE}) {
        EXPECT_EQ(ErrnoOf(::fallocate(fd.get(), mode, 0, 4096)), EOPNOTSUPP) << "mode " << mode;
      }
      ASSERT_EQ(::fstat(fd.get(), &st), 0);
      EXPECT_EQ(st.st_size, 108192);
    }
    EXPECT_EQ(::posix_fallocate(fd.get(), 0, 4096), 0);
  }
  std::string want = "abc" + Zeros(108192 - 3);
  EXPECT_TRUE(FileHasContent(f, want));
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(f, want));
}

TEST_F(FsPosixTest, SparseFileHasFewBlocks) {
  const std::string f = P("sparse");
  std::uint64_t free0 = fs_->reference() ? 0 : StatVfs(fs_->root()).f_bfree;
  const off_t far = 64LL << 20;  // beyond the 16 MiB capacity of the test ORAM
  {
    Fd fd(::open(f.c_str(), O_CREAT | O_RDWR, 0644));
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(PwriteAll(fd.get(), "E", far));
    ASSERT_TRUE(PwriteAll(fd.get(), "M", 10LL << 20));
    ASSERT_EQ(::fsync(fd.get()), 0);
    struct stat st{};
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_size, far + 1);
    EXPECT_LE(st.st_blocks * 512, 2 * 4096);
    auto hole = PreadUpTo(fd.get(), 8192, 32LL << 20);
    ASSERT_TRUE(hole);
    EXPECT_EQ(*hole, Zeros(8192));
    auto tail = PreadUpTo(fd.get(), 10, far - 1);
    ASSERT_TRUE(tail);
    EXPECT_EQ(*tail, std::string("\0E", 2));
    if (!fs_->reference()) {
      EXPECT_EQ(StatVfs(fs_->root()).f_bfree, free0 - 2);
    }
  }
  ASSERT_TRUE(fs_->Remount());
  Fd fd(::open(f.c_str(), O_RDONLY));
  ASSERT_TRUE(fd.ok());
  auto mid = PreadUpTo(fd.get(), 3, (10LL << 20) - 1);
  ASSERT_TRUE(mid);
  EXPECT_EQ(*mid, std::string("\0M\0", 3));
  EXPECT_EQ(Stat(f).st_size, far + 1);
}

TEST_F(FsPosixTest, FilesLargerThan4GiB) {
  const std::string f = P("big");
  const off_t g4 = 4LL << 30, g5 = 5LL << 30;
  {
    Fd fd(::open(f.c_str(), O_CREAT | O_RDWR, 0644));
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(PwriteAll(fd.get(), "hello", g5)) << std::strerror(errno);
    ASSERT_TRUE(PwriteAll(fd.get(), "XYZW", g4 - 2)) << std::strerror(errno);
    struct stat st{};
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_size, g5 + 5);
    EXPECT_LE(st.st_blocks * 512, 3 * 4096);
    auto got = PreadUpTo(fd.get(), 10, g5);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, "hello");
    got = PreadUpTo(fd.get(), 4, g4 - 2);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, "XYZW");
    got = PreadUpTo(fd.get(), 4096, g4 + 4096);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, Zeros(4096));
  }
  ASSERT_TRUE(fs_->Remount());
  {
    Fd fd(::open(f.c_str(), O_RDWR));
    ASSERT_TRUE(fd.ok());
    auto got = PreadUpTo(fd.get(), 10, g5);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, "hello");
    got = PreadUpTo(fd.get(), 4, g4 - 2);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, "XYZW");
    ASSERT_EQ(::ftruncate(fd.get(), 6LL << 30), 0);
    ASSERT_EQ(::ftruncate(fd.get(), g4 + 1), 0);
    got = PreadUpTo(fd.get(), 10, g4 - 2);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, "XYZ");
    struct stat st{};
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_size, g4 + 1);
  }
}

TEST_F(FsPosixTest, MmapReadsAndSharedWrites) {
  const std::string f = P("m");
  std::string d = PatternBytes(3 * kB + 1000, 9);
  ASSERT_TRUE(WriteFile(f, d));
  {
    Fd fd(::open(f.c_str(), O_RDWR));
    ASSERT_TRUE(fd.ok());
    void* m = ::mmap(nullptr, d.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    ASSERT_NE(m, MAP_FAILED) << std::strerror(errno);
    char* p = static_cast<char*>(m);
    EXPECT_EQ(std::string_view(p, d.size()), d);
    std::memset(p + 10, 'M', 10);
    p[2 * kB + 5] = 'N';
    p[d.size() - 1] = 'Z';
    d.replace(10, 10, std::string(10, 'M'));
    d[2 * kB + 5] = 'N';
    d[d.size() - 1] = 'Z';
    EXPECT_EQ(::msync(m, d.size(), MS_SYNC), 0) << std::strerror(errno);
    EXPECT_EQ(::munmap(m, d.size()), 0);
    // MAP_PRIVATE writes never reach the file.
    void* pm = ::mmap(nullptr, d.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), 0);
    ASSERT_NE(pm, MAP_FAILED);
    static_cast<char*>(pm)[0] = '!';
    ::munmap(pm, d.size());
  }
  EXPECT_TRUE(FileHasContent(f, d));
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(f, d));
  Fd fd(::open(f.c_str(), O_RDONLY));
  ASSERT_TRUE(fd.ok());
  void* m = ::mmap(nullptr, d.size(), PROT_READ, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_EQ(std::string_view(static_cast<char*>(m), d.size()), d);
  ::munmap(m, d.size());
}

TEST_F(FsPosixTest, ErrorCodes) {
  struct stat st{};
  ASSERT_TRUE(WriteFile(P("file"), "f"));
  ASSERT_EQ(::mkdir(P("dir").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(P("dir/x"), "x"));
  // ENOENT
  EXPECT_EQ(ErrnoOf(::open(P("missing").c_str(), O_RDONLY)), ENOENT);
  EXPECT_EQ(ErrnoOf(::stat(P("missing").c_str(), &st)), ENOENT);
  EXPECT_EQ(ErrnoOf(::open(P("missing/x").c_str(), O_CREAT | O_WRONLY, 0644)), ENOENT);
  EXPECT_EQ(ErrnoOf(::unlink(P("missing").c_str())), ENOENT);
  EXPECT_EQ(ErrnoOf(::mkdir(P("missing/d").c_str(), 0755)), ENOENT);
  // EEXIST
  EXPECT_EQ(ErrnoOf(::mkdir(P("file").c_str(), 0755)), EEXIST);
  EXPECT_EQ(ErrnoOf(::mkdir(P("dir").c_str(), 0755)), EEXIST);
  EXPECT_EQ(ErrnoOf(::open(P("file").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644)), EEXIST);
  EXPECT_EQ(ErrnoOf(::symlink("t", P("dir").c_str())), EEXIST);
  EXPECT_EQ(ErrnoOf(::link(P("file").c_str(), P("dir").c_str())), EEXIST);
  // ENOTDIR
  EXPECT_EQ(ErrnoOf(::open(P("file/x").c_str(), O_RDONLY)), ENOTDIR);
  EXPECT_EQ(ErrnoOf(::mkdir(P("file/x").c_str(), 0755)), ENOTDIR);
  EXPECT_EQ(ErrnoOf(::open(P("file").c_str(), O_RDONLY | O_DIRECTORY)), ENOTDIR);
  EXPECT_EQ(ErrnoOf(::rmdir(P("file").c_str())), ENOTDIR);
  // EISDIR
  EXPECT_EQ(ErrnoOf(::open(P("dir").c_str(), O_WRONLY)), EISDIR);
  EXPECT_EQ(ErrnoOf(::open(P("dir").c_str(), O_RDWR)), EISDIR);
  EXPECT_EQ(ErrnoOf(::unlink(P("dir").c_str())), EISDIR);
  // ENOTEMPTY
  EXPECT_EQ(ErrnoOf(::rmdir(P("dir").c_str())), ENOTEMPTY);
  // ENAMETOOLONG at 256 bytes; 255 is fine.
  const std::string n256(256, 'n'), n255(255, 'n');
  EXPECT_EQ(ErrnoOf(::open(P(n256).c_str(), O_CREAT | O_WRONLY, 0644)), ENAMETOOLONG);
  EXPECT_EQ(ErrnoOf(::mkdir(P(n256).c_str(), 0755)), ENAMETOOLONG);
  EXPECT_EQ(ErrnoOf(::symlink("t", P(n256).c_str())), ENAMETOOLONG);
  EXPECT_EQ(ErrnoOf(::rename(P("file").c_str(), P(n256).c_str())), ENAMETOOLONG);
  EXPECT_EQ(ErrnoOf(::link(P("file").c_str(), P(n256).c_str())), ENAMETOOLONG);
  EXPECT_EQ(ErrnoOf(::stat(P(n256).c_str(), &st)), ENAMETOOLONG);
  ASSERT_TRUE(WriteFile(P(n255), "long name"));
  EXPECT_TRUE(FileHasContent(P(n255), "long name"));
  EXPECT_EQ(ListDir(fs_->root()), (std::set<std::string>{"dir", "file", n255}));
  EXPECT_EQ(::unlink(P(n255).c_str()), 0);
  EXPECT_TRUE(FileHasContent(P("file"), "f"));
}

TEST(FsPosixTinyTest, EnospcWhenTheOramIsFull) {
  FsOptions o;
  o.params = testing::TinyFsParams();
  auto fs = MountedFs::Create(o);
  ASSERT_TRUE(fs);
  S3ORAM_SKIP_IN_REFERENCE(*fs);
  const std::uint64_t cap = o.params.capacity_blocks;
  ASSERT_EQ(StatVfs(fs->root()).f_bfree, cap);
  const std::string f = fs->Path("fill");
  int first_error = 0;
  const char* failed_call = "nothing";
  std::size_t written = 0;
  {
    Fd fd(::open(f.c_str(), O_CREAT | O_WRONLY, 0644));
    ASSERT_TRUE(fd.ok());
    std::string chunk = PatternBytes(kB, 1);
    for (std::uint64_t i = 0; i < cap + 16 && !first_error; ++i) {
      ssize_t n = ::write(fd.get(), chunk.data(), chunk.size());
      if (n < 0) {
        first_error = errno;
        failed_call = "write";
      } else {
        written += static_cast<std::size_t>(n);
      }
    }
    if (!first_error && ::fsync(fd.get()) != 0) {
      first_error = errno;
      failed_call = "fsync";
    }
    if (!first_error && fd.Close() != 0) {
      first_error = errno;
      failed_call = "close";
    }
  }
  EXPECT_EQ(first_error, ENOSPC) << "wrote " << written << " bytes into a " << cap * kB
                                 << "-byte ORAM; " << failed_call
                                 << " failed first: " << std::strerror(first_error);
  // write(2) may succeed into the page cache; if it failed, it was at the limit.
  if (std::string(failed_call) == "write") {
    EXPECT_LE(written, cap * kB);
  }
  EXPECT_EQ(StatVfs(fs->root()).f_bfree, 0u);
  // Metadata-only operations still work; data do not.
  ASSERT_EQ(::mkdir(fs->Path("d").c_str(), 0755), 0);
  ASSERT_EQ(::truncate(fs->Path("fill").c_str(), 1LL << 30), 0);  // holes are free
  {
    Fd fd(::open(fs->Path("d/g").c_str(), O_CREAT | O_RDWR, 0644));
    ASSERT_TRUE(fd.ok());
    EXPECT_EQ(ErrnoOf(::fallocate(fd.get(), 0, 0, 8192)), ENOSPC);
    int e = 0;
    if (::write(fd.get(), "x", 1) < 0) e = errno;
    if (!e && ::fsync(fd.get()) != 0) e = errno;
    EXPECT_EQ(e, ENOSPC);
  }
  // Freeing space makes room again.
  ASSERT_EQ(::unlink(f.c_str()), 0);
  ASSERT_EQ(::unlink(fs->Path("d/g").c_str()), 0);
  EXPECT_TRUE(EventuallyFree(fs->root(), cap));
  std::string data = PatternBytes(10 * kB, 2);
  ASSERT_TRUE(WriteFile(fs->Path("again"), data, 0644, true));
  ASSERT_TRUE(fs->Remount());
  EXPECT_TRUE(FileHasContent(fs->Path("again"), data));
  EXPECT_EQ(StatVfs(fs->root()).f_bfree, cap - 10);
}

TEST_F(FsPosixTest, ConcurrentWritersOnDifferentFiles) {
  constexpr int kThreads = 4;
  std::vector<std::string> want(kThreads);
  std::vector<std::thread> threads;
  std::vector<int> errors(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    want[t] = PatternBytes(64 * 1024 + 123 * t, 50 + t);
    threads.emplace_back([&, t] {
      std::string path = P("w" + std::to_string(t));
      int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0644);
      if (fd < 0) {
        errors[t] = errno;
        return;
      }
      for (std::size_t off = 0; off < want[t].size(); off += 1000) {
        if (!testing::WriteAllFd(fd, std::string_view(want[t]).substr(off, 1000))) {
          errors[t] = errno;
          break;
        }
      }
      if (!errors[t] && ::fsync(fd) != 0) errors[t] = errno;
      if (::close(fd) != 0 && !errors[t]) errors[t] = errno;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], 0) << std::strerror(errors[t]);
    EXPECT_TRUE(FileHasContent(P("w" + std::to_string(t)), want[t]));
  }
  ASSERT_TRUE(fs_->Remount());
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(FileHasContent(P("w" + std::to_string(t)), want[t]));
}

// Random operations on a few files (with hard links) against an in-memory
// model; compared after every read, and in full after a remount.
TEST_F(FsPosixTest, RandomizedAgainstModel) {
  auto rng = testing::SeededRng();
  ASSERT_EQ(::mkdir(P("sub").c_str(), 0755), 0);
  const std::vector<std::string> names = {"a", "b", "c", "sub/d", "sub/e"};
  std::map<std::string, std::shared_ptr<std::string>> model;  // name -> shared content
  auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  auto existing = [&]() -> std::string {
    if (model.empty()) return "";
    auto it = model.begin();
    std::advance(it, static_cast<long>(pick(model.size())));
    return it->first;
  };
  auto compare = [&](const std::string& name, const char* when) {
    auto got = ReadFile(P(name));
    ASSERT_TRUE(got) << name << ": " << std::strerror(errno) << " " << when;
    ASSERT_EQ(*got, *model[name]) << name << " " << when << ": " << testing::DiffSummary(*got, *model[name]);
  };
  int remounts = 0;
  for (int step = 0; step < 300; ++step) {
    const std::string name = names[pick(names.size())];
    int op = static_cast<int>(pick(100));
    SCOPED_TRACE("step " + std::to_string(step) + " op " + std::to_string(op) + " on " + name);
    if (op < 30) {  // pwrite
      std::size_t off = pick(96 * 1024), len = 1 + pick(12 * 1024);
      std::string data = PatternBytes(len, rng());
      Fd fd(::open(P(name).c_str(), O_CREAT | O_WRONLY, 0644));
      ASSERT_TRUE(fd.ok()) << std::strerror(errno);
      ASSERT_TRUE(PwriteAll(fd.get(), data, static_cast<off_t>(off)));
      auto& m = model[name];
      if (!m) m = std::make_shared<std::string>();
      if (m->size() < off + len) m->resize(off + len, '\0');
      m->replace(off, len, data);
      if (pick(4) == 0) {
        ASSERT_EQ(::fsync(fd.get()), 0);
      }
    } else if (op < 40) {  // append
      std::string data = PatternBytes(1 + pick(8192), rng());
      Fd fd(::open(P(name).c_str(), O_CREAT | O_WRONLY | O_APPEND, 0644));
      ASSERT_TRUE(fd.ok());
      ASSERT_TRUE(testing::WriteAllFd(fd.get(), data));
      auto& m = model[name];
      if (!m) m = std::make_shared<std::string>();
      *m += data;
    } else if (op < 52) {  // truncate
      if (!model.count(name)) continue;
      std::size_t size = pick(100 * 1024);
      ASSERT_EQ(::truncate(P(name).c_str(), static_cast<off_t>(size)), 0);
      model[name]->resize(size, '\0');
    } else if (op < 70) {  // partial read
      if (!model.count(name)) {
        EXPECT_EQ(ErrnoOf(::open(P(name).c_str(), O_RDONLY)), ENOENT);
        continue;
      }
      std::size_t off = pick(110 * 1024), len = 1 + pick(16 * 1024);
      Fd fd(::open(P(name).c_str(), O_RDONLY));
      ASSERT_TRUE(fd.ok());
      auto got = PreadUpTo(fd.get(), len, static_cast<off_t>(off));
      ASSERT_TRUE(got);
      const std::string& m = *model[name];
      std::string want = off < m.size() ? m.substr(off, len) : "";
      ASSERT_EQ(*got, want) << "pread(" << off << ", " << len << ")";
    } else if (op < 78) {  // whole-file compare
      if (model.count(name)) compare(name, "during run");
    } else if (op < 85) {  // rename onto another name
      std::string from = existing();
      if (from.empty()) continue;
      std::string to = names[pick(names.size())];
      ASSERT_EQ(::rename(P(from).c_str(), P(to).c_str()), 0) << from << " -> " << to;
      if (from != to && model[from] != model[to]) {
        model[to] = model[from];
        model.erase(from);
      } else if (from != to) {
        // Two links to one inode: rename is a no-op.
      }
    } else if (op < 91) {  // unlink
      std::string victim = existing();
      if (victim.empty()) continue;
      ASSERT_EQ(::unlink(P(victim).c_str()), 0);
      model.erase(victim);
    } else if (op < 96) {  // hard link
      std::string from = existing();
      if (from.empty() || model.count(name)) continue;
      ASSERT_EQ(::link(P(from).c_str(), P(name).c_str()), 0);
      model[name] = model[from];
    } else if (op < 99) {  // link counts
      for (const auto& [n, content] : model) {
        EXPECT_EQ(Stat(P(n)).st_nlink, static_cast<nlink_t>(content.use_count())) << n;
      }
    } else if (remounts < 2) {
      ++remounts;
      ASSERT_TRUE(fs_->Remount());
    }
  }
  ASSERT_TRUE(fs_->Remount());
  std::set<std::string> want_root = {"sub"}, want_sub;
  for (const auto& [n, content] : model) {
    if (n.rfind("sub/", 0) == 0) want_sub.insert(n.substr(4));
    else want_root.insert(n);
  }
  EXPECT_EQ(ListDir(fs_->root()), want_root);
  EXPECT_EQ(ListDir(P("sub")), want_sub);
  for (const auto& [n, content] : model) {
    compare(n, "after remount");
    EXPECT_EQ(Stat(P(n)).st_nlink, static_cast<nlink_t>(content.use_count())) << n;
  }
}

}  // namespace
}  // namespace s3oram
