// `s3oram fsck` end to end: a tree of files written through a real mount
// (three real serverd processes), unmounted, then the real `s3oram` binary
// on the state file. A clean filesystem exits 0; each injected corruption
// (made with SQL, or in one server's share file, while nothing is mounted)
// makes fsck exit non-zero naming the problem, and the repairs of -y leave a
// filesystem that checks clean and mounts with its data.
#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/slot_digest.h"
#include "serverd/share_store.h"
#include "tests/integration/fs_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::CliPath;
using testing::CmdResult;
using testing::FileHasContent;
using testing::MountedFs;
using testing::PatternBytes;
using testing::ReadWholeFile;
using testing::RunCmd;
using testing::WriteFile;

// Runs one statement list on the (unmounted) state file.
::testing::AssertionResult Sql(const std::string& state, const std::string& sql) {
  testing::TestStateDb handle;
  if (Status s = testing::OpenTestStateDb(state, handle); !s.ok()) {
    return ::testing::AssertionFailure() << "open " << state << ": " << s.ToString();
  }
  sqlite3* db = handle.db;
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  if (rc != SQLITE_OK) return ::testing::AssertionFailure() << sql << ": " << msg;
  return ::testing::AssertionSuccess();
}

// The integers of the first row of a query (empty if none).
std::vector<std::int64_t> Row(const std::string& state, const std::string& sql) {
  std::vector<std::int64_t> out;
  testing::TestStateDb handle;
  if (Status s = testing::OpenTestStateDb(state, handle); !s.ok()) {
    ADD_FAILURE() << "open " << state << ": " << s.ToString();
    return out;
  }
  sqlite3* db = handle.db;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    for (int i = 0; i < sqlite3_column_count(st); ++i) out.push_back(sqlite3_column_int64(st, i));
  }
  sqlite3_finalize(st);
  return out;
}

// The inode of root-relative `path` (names looked up in fs_dirents).
std::int64_t InoOf(const std::string& state, const std::string& path) {
  std::int64_t ino = 1;
  std::size_t start = 0;
  while (start < path.size()) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    const std::string name = path.substr(start, slash - start);
    auto r = Row(state, "SELECT ino FROM fs_dirents WHERE parent = " + std::to_string(ino) +
                            " AND name = CAST('" + name + "' AS BLOB)");
    if (r.empty()) return -1;
    ino = r[0];
    start = slash + 1;
  }
  return ino;
}

class FsFsckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    fs_ = MountedFs::Create();
    ASSERT_TRUE(fs_);
    if (fs_->reference()) GTEST_SKIP() << "fsck needs the s3oramfs daemon";
    // A small tree: nested directories, files of several sizes (several
    // blocks, a partial last block, an empty one), a symlink, a hard link.
    ASSERT_EQ(::mkdir(fs_->Path("dir").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(fs_->Path("dir/sub").c_str(), 0750), 0);
    const std::map<std::string, std::size_t> sizes = {
        {"a", 10000}, {"dir/b", 5000}, {"dir/sub/c", 9000}, {"dir/empty", 0}, {"dir/sub/d", 20000}};
    std::uint64_t i = 0;
    for (const auto& [name, size] : sizes) {
      files_[name] = PatternBytes(size, seed_ + i++);
      ASSERT_TRUE(WriteFile(fs_->Path(name), files_[name]));
    }
    ASSERT_EQ(::symlink("sub/c", fs_->Path("dir/link").c_str()), 0);
    ASSERT_EQ(::link(fs_->Path("a").c_str(), fs_->Path("dir/hard").c_str()), 0);
    ASSERT_TRUE(fs_->Unmount());
  }

  CmdResult Fsck(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {CliPath(),    "fsck",       "-s",
                                     fs_->state(), "--passfile", fs_->passfile()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    CmdResult r = RunCmd(argv, std::chrono::seconds(240));
    std::string cmd;
    for (const auto& a : flags) cmd += " " + a;
    std::fprintf(stderr, "[ fsck     ] s3oram fsck%s -> exit %d\n", cmd.c_str(), r.exit_code);
    // S3ORAM_TEST_VERBOSE=1 shows what fsck printed.
    if (const char* v = std::getenv("S3ORAM_TEST_VERBOSE"); v && *v == '1') {
      std::fprintf(stderr, "%s\n", r.output.c_str());
    }
    return r;
  }

  std::uint64_t seed_ = 0;
  std::unique_ptr<MountedFs> fs_;
  std::map<std::string, std::string> files_;
};

TEST_F(FsFsckTest, CleanFilesystemExitsZero) {
  CmdResult r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(": 0 error(s)"), std::string::npos) << r.output;
  // Every block holding file data was read: 3 + 2 + 3 + 5 blocks of 4 KiB.
  EXPECT_NE(r.output.find("13 block(s) read"), std::string::npos) << r.output;
  r = Fsck({"-y"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = Fsck({"-n", "--no-blocks"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Operational and usage errors.
  CmdResult bad = RunCmd({CliPath(), "fsck", "-s", fs_->Scratch("missing.s3oram"), "-n"});
  EXPECT_EQ(bad.exit_code, 8) << bad.output;
  bad = RunCmd({CliPath(), "fsck", "-s", fs_->state(), "-n", "-y"});
  EXPECT_EQ(bad.exit_code, 16) << bad.output;
  bad = RunCmd({CliPath(), "fsck", "-s", fs_->state(), "--bogus"});
  EXPECT_EQ(bad.exit_code, 16) << bad.output;
  bad = RunCmd({CliPath(), "fsck", "-s", fs_->state(), "-n"}, std::chrono::seconds(60), "",
               {"S3ORAM_PASSPHRASE=not the passphrase"});
  EXPECT_EQ(bad.exit_code, 8) << bad.output;
  // The data are intact after all those reads; a mounted filesystem is refused.
  ASSERT_TRUE(fs_->Mount());
  bad = Fsck({"-n", "--no-blocks"});
  EXPECT_EQ(bad.exit_code, 8) << bad.output;
  EXPECT_NE(bad.output.find("is mounted on " + fs_->root()), std::string::npos) << bad.output;
  for (const auto& [name, data] : files_) EXPECT_TRUE(FileHasContent(fs_->Path(name), data));
}

TEST_F(FsFsckTest, DeletedPositionOfAReferencedBlock) {
  const std::int64_t ino = InoOf(fs_->state(), "dir/b");
  ASSERT_GT(ino, 0);
  auto block =
      Row(fs_->state(), "SELECT block_id FROM fs_blocks WHERE ino = " + std::to_string(ino) +
                            " AND idx = 1 AND valid > 0");
  ASSERT_EQ(block.size(), 1u);
  ASSERT_TRUE(Sql(fs_->state(), "DELETE FROM positions WHERE id = " + std::to_string(block[0])));
  CmdResult r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("(/dir/b) block 1 (bytes 4096..8191"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("has no position in the ORAM"), std::string::npos) << r.output;
  // -y alone does not drop data; --zero-damaged does (and is a correction).
  r = Fsck({"-y"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  r = Fsck({"-y", "--zero-damaged"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs_->Mount());
  std::string want = files_["dir/b"];
  std::fill(want.begin() + 4096, want.end(), '\0');
  EXPECT_TRUE(FileHasContent(fs_->Path("dir/b"), want));
}

TEST_F(FsFsckTest, WrongLinkCount) {
  const std::int64_t ino = InoOf(fs_->state(), "dir/sub/d");
  ASSERT_GT(ino, 0);
  ASSERT_TRUE(
      Sql(fs_->state(), "UPDATE fs_inodes SET nlink = 3 WHERE ino = " + std::to_string(ino)));
  CmdResult r = Fsck({"-n", "--no-blocks"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("inode " + std::to_string(ino) + " (/dir/sub/d) has nlink 3, expected 1"),
            std::string::npos)
      << r.output;
  r = Fsck({"-y"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(FsFsckTest, OrphanGoesToLostFoundAndStaysReadable) {
  const std::int64_t ino = InoOf(fs_->state(), "dir/sub/c");
  ASSERT_GT(ino, 0);
  ASSERT_TRUE(Sql(fs_->state(), "DELETE FROM fs_dirents WHERE ino = " + std::to_string(ino)));
  CmdResult r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("file inode " + std::to_string(ino) +
                          " (nlink 1, size 9000) is not reachable from the root"),
            std::string::npos)
      << r.output;
  r = Fsck({"-y"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs_->Mount());
  struct stat st{};
  ASSERT_EQ(::stat(fs_->Path("lost+found").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode, S_IFDIR | 0700u);
  EXPECT_TRUE(FileHasContent(fs_->Path("lost+found/#" + std::to_string(ino)), files_["dir/sub/c"]));
  EXPECT_EQ(::access(fs_->Path("dir/sub/c").c_str(), F_OK), -1);
}

TEST_F(FsFsckTest, PositionOutsideTheTree) {
  const std::int64_t ino = InoOf(fs_->state(), "a");
  auto block =
      Row(fs_->state(),
          "SELECT block_id FROM fs_blocks WHERE ino = " + std::to_string(ino) + " AND idx = 0");
  ASSERT_EQ(block.size(), 1u);
  // Leaf 1 is the root bucket's number, not a leaf.
  ASSERT_TRUE(
      Sql(fs_->state(), "UPDATE positions SET leaf = 1 WHERE id = " + std::to_string(block[0])));
  CmdResult r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("(/a) block 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is outside the tree: leaf 1 is not a leaf"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("skipped: the position map cannot be loaded"), std::string::npos)
      << r.output;
}

TEST_F(FsFsckTest, DuplicatePosition) {
  const std::int64_t a = InoOf(fs_->state(), "a");
  const std::int64_t b = InoOf(fs_->state(), "dir/b");
  auto pa = Row(fs_->state(),
                "SELECT p.id, p.leaf, p.level, p.slot FROM positions p JOIN fs_blocks b "
                "ON b.block_id = p.id WHERE b.ino = " +
                    std::to_string(a) + " AND b.idx = 0");
  auto pb = Row(fs_->state(),
                "SELECT p.id FROM positions p JOIN fs_blocks b ON b.block_id = p.id "
                "WHERE b.ino = " +
                    std::to_string(b) + " AND b.idx = 0");
  ASSERT_EQ(pa.size(), 4u);
  ASSERT_EQ(pb.size(), 1u);
  ASSERT_TRUE(Sql(fs_->state(), "UPDATE positions SET leaf = " + std::to_string(pa[1]) +
                                    ", level = " + std::to_string(pa[2]) +
                                    ", slot = " + std::to_string(pa[3]) +
                                    " WHERE id = " + std::to_string(pb[0])));
  CmdResult r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("is claimed by 2 blocks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(/a) block 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(/dir/b) block 0"), std::string::npos) << r.output;
  // Both hold file data: -y cannot choose and leaves it.
  r = Fsck({"-y"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
}

// Rewrites the slot of ORAM block `id` on server `server` (nothing mounted,
// the server stopped and restarted here) together with the digest stored
// beside it, as a memory fault before the digest or a server rewriting its
// own file would: no digest check sees it, the block no longer authenticates.
void DamageBlockBehindItsDigest(testing::MountedFs& fs, std::int64_t id, std::size_t server,
                                std::uint64_t seed) {
  auto pos = Row(fs.state(), "SELECT leaf, level, slot FROM positions WHERE id = " +
                                 std::to_string(id));
  ASSERT_EQ(pos.size(), 3u) << "block " << id << " has no position";
  const OramParams& p = fs.params();
  const std::uint64_t bucket = static_cast<std::uint64_t>(pos[0]) >> (p.height - pos[1]);
  const auto slot = static_cast<std::uint64_t>(pos[2]);
  auto& cluster = *fs.test_fs()->cluster;
  ASSERT_TRUE(cluster.Kill(server, SIGTERM).ok());
  const std::string shares = cluster.dir() + "/data-" + std::to_string(server) + "/shares.bin";
  // Where the bucket and its digests lie now (buckets move as evictions commit).
  auto at = serverd::StoreInspection::InspectFile(shares);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  const int fd = ::open(shares.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << shares << ": " << std::strerror(errno);
  digest::Seed key_seed{};
  ASSERT_EQ(::pread(fd, key_seed.data(), key_seed.size(), 80), 32);  // meta record: seed at 80
  const std::size_t m = p.elems_per_slot();
  std::vector<field::Elem> x(m);
  const auto data_at = static_cast<off_t>((*at)[bucket].data + slot * m * sizeof(field::Elem));
  ASSERT_EQ(::pread(fd, x.data(), m * sizeof(field::Elem), data_at),
            static_cast<ssize_t>(m * sizeof(field::Elem)));
  x[seed % m] = field::Add(x[seed % m], 1 + static_cast<field::Elem>(seed % 1000));
  digest::SlotDigest d{};
  ASSERT_TRUE(digest::DigestKey(key_seed, m).Digest(x, &d));
  ASSERT_EQ(::pwrite(fd, x.data(), m * sizeof(field::Elem), data_at),
            static_cast<ssize_t>(m * sizeof(field::Elem)));
  ASSERT_EQ(::pwrite(fd, d.data(), sizeof(d),
                     static_cast<off_t>((*at)[bucket].digests + slot * sizeof(d))),
            static_cast<ssize_t>(sizeof(d)));
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
  const Status restarted = cluster.Restart(server);
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  // A block written in the last two rounds also has a copy of its root write
  // in the client's own root copies (background eviction), which an access
  // reads, and so heals, once the next round overwrote its root slot. This
  // test is about damage no copy heals: the copies go too.
  std::filesystem::remove(fs.state() + ".roots");
  std::fprintf(stderr, "[ damage   ] block %lld: bucket %llu slot %lld rewritten on server %zu\n",
               static_cast<long long>(id), static_cast<unsigned long long>(bucket),
               static_cast<long long>(pos[2]), server);
}

// Issue 22, damaged blocks, with real servers and a real mount. A block's
// slot rewritten on one server behind its digest makes the sharing
// inconsistent: every read through that bucket fails, scrub names the slot,
// fsck refuses to zero anything (the reads fail because of the
// inconsistency, not because the data are gone), and rebuilding that server
// restores everything. Rebuilding another server instead leaves a consistent
// sharing of a wrong value: only that block is destroyed (it fails
// authentication, the servers agree). It can then be overwritten in place,
// or zeroed by `fsck -y --zero-damaged`, which really frees it (no position:
// a partial write starts from zeros), and after `rm` new files, packed and
// whole, get ids that work. Every fsync succeeds and every byte reads back.
TEST_F(FsFsckTest, DamagedBlocksAreRepairedOverwrittenZeroedAndReused) {
  const std::size_t server = seed_ % 3;
  auto block_of = [&](const std::string& path, int idx) {
    const std::int64_t ino = InoOf(fs_->state(), path);
    auto r = Row(fs_->state(), "SELECT block_id FROM fs_blocks WHERE ino = " + std::to_string(ino) +
                                   " AND idx = " + std::to_string(idx));
    return r.empty() ? std::int64_t{-1} : r[0];
  };
  auto cli = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {CliPath()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"-s", fs_->state(), "--passfile", fs_->passfile(), "--plain-progress"});
    CmdResult r = RunCmd(argv, std::chrono::seconds(240));
    std::fprintf(stderr, "[ cli      ] s3oram %s ... -> exit %d\n", args[0].c_str(), r.exit_code);
    return r;
  };
  auto rebuild = [&](std::size_t k, bool verify) {
    std::vector<std::string> args = {"rebuild", "--server", std::to_string(k), "--force"};
    if (!verify) args.push_back("--no-verify");
    return cli(args);
  };

  // 1. The server that was changed is rebuilt: nothing is lost.
  const std::int64_t d1 = block_of("dir/sub/d", 1);
  ASSERT_GE(d1, 0);
  DamageBlockBehindItsDigest(*fs_, d1, server, seed_);
  CmdResult r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("(/dir/sub/d) block 1"), std::string::npos) << r.output;
  r = Fsck({"-y", "--zero-damaged"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("not zeroed"), std::string::npos) << r.output;
  EXPECT_FALSE(Row(fs_->state(), "SELECT id FROM positions WHERE id = " + std::to_string(d1)).empty())
      << "a block was zeroed although the servers disagree";
  CmdResult scrub = cli({"scrub"});
  EXPECT_EQ(scrub.exit_code, 4) << scrub.output;
  EXPECT_NE(scrub.output.find("INCONSISTENT: 1 slots"), std::string::npos) << scrub.output;
  EXPECT_NE(scrub.output.find("server " + std::to_string(server) + " holds the odd share"),
            std::string::npos)
      << scrub.output;
  r = rebuild(server, /*verify=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(cli({"scrub"}).exit_code, 0);
  r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // 2. Rebuilding another server instead is refused: the share MAC names
  //    the wrong one. With a second server damaged too nothing can be named,
  //    and the rebuild of the third destroys block 0 of `a` (a consistent
  //    sharing of a wrong value); it is overwritten in place.
  const std::int64_t a0 = block_of("a", 0);
  ASSERT_GE(a0, 0);
  DamageBlockBehindItsDigest(*fs_, a0, server, seed_ + 1);
  r = rebuild((server + 1) % 3, /*verify=*/false);
  EXPECT_EQ(r.exit_code, 2) << r.output;  // a failed precondition
  EXPECT_NE(r.output.find("refusing to rebuild"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--server " + std::to_string(server) + " --force"), std::string::npos)
      << r.output;
  DamageBlockBehindItsDigest(*fs_, a0, (server + 2) % 3, seed_ + 11);
  ASSERT_EQ(rebuild((server + 1) % 3, /*verify=*/false).exit_code, 0);
  EXPECT_EQ(cli({"scrub"}).exit_code, 0) << "the servers agree again";
  ASSERT_TRUE(fs_->Mount());
  {
    const int fd = ::open(fs_->Path("a").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    char buf[16];
    EXPECT_EQ(::pread(fd, buf, sizeof buf, 0), -1) << "a destroyed block was read";
    EXPECT_EQ(errno, EIO);
    ::close(fd);
  }
  const std::string fresh = PatternBytes(4096, seed_ + 7);
  {
    const int fd = ::open(fs_->Path("a").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, fresh.data(), fresh.size(), 0), 4096);
    EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
    EXPECT_EQ(::close(fd), 0);
  }
  files_["a"].replace(0, 4096, fresh);
  ASSERT_TRUE(fs_->Remount());
  EXPECT_TRUE(FileHasContent(fs_->Path("a"), files_["a"]));
  ASSERT_TRUE(fs_->Unmount());

  // 3. The same for block 1 of `dir/sub/c`, zeroed by fsck, then written
  //    partly; then freed by rm, and new files take its place.
  const std::int64_t c1 = block_of("dir/sub/c", 1);
  ASSERT_GE(c1, 0);
  DamageBlockBehindItsDigest(*fs_, c1, server, seed_ + 2);
  DamageBlockBehindItsDigest(*fs_, c1, (server + 1) % 3, seed_ + 12);
  ASSERT_EQ(rebuild((server + 2) % 3, /*verify=*/false).exit_code, 0);
  r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("(/dir/sub/c) block 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not authenticate"), std::string::npos) << r.output;
  r = Fsck({"-y", "--zero-damaged"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Row(fs_->state(), "SELECT id FROM positions WHERE id = " + std::to_string(c1)).empty())
      << "the zeroed block keeps its position";
  r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs_->Mount());
  std::string& c = files_["dir/sub/c"];
  std::fill(c.begin() + 4096, c.begin() + std::min<std::size_t>(c.size(), 8192), '\0');
  const std::string patch = PatternBytes(100, seed_ + 8);
  {
    const int fd = ::open(fs_->Path("dir/sub/c").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, patch.data(), patch.size(), 4096 + 10), 100);
    EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
    EXPECT_EQ(::close(fd), 0);
  }
  c.replace(4096 + 10, 100, patch);
  EXPECT_TRUE(FileHasContent(fs_->Path("dir/sub/c"), c));
  ASSERT_EQ(::unlink(fs_->Path("dir/sub/c").c_str()), 0);
  ASSERT_EQ(::unlink(fs_->Path("dir/link").c_str()), 0);  // pointed at c
  files_.erase("dir/sub/c");
  for (int i = 0; i < 12; ++i) {
    const std::string name = "new-" + std::to_string(i);
    files_[name] = PatternBytes(i % 3 == 0 ? 3 * 4096 + 77 : 300 + 97 * i, seed_ + 20 + i);
    ASSERT_TRUE(WriteFile(fs_->Path(name), files_[name], 0644, /*do_fsync=*/true)) << name;
  }
  ASSERT_TRUE(fs_->Remount());
  for (const auto& [name, data] : files_) EXPECT_TRUE(FileHasContent(fs_->Path(name), data)) << name;
  ASSERT_TRUE(fs_->Unmount());
  r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(FsFsckTest, DamagedShareIsReportedWithItsFile) {
  // Enough further writes for a few evictions (A = 16), so that blocks
  // leave the root and a damaged bucket below it spoils only some paths.
  ASSERT_TRUE(fs_->Mount());
  ASSERT_TRUE(WriteFile(fs_->Path("big"), PatternBytes(64 * 4096, seed_ + 100)));
  ASSERT_TRUE(fs_->Unmount());
  const std::int64_t ino = InoOf(fs_->state(), "dir/sub/d");
  ASSERT_GT(ino, 0);
  // The deepest written block of the file: corrupting a bucket spoils every
  // retrieval through it, so a leaf-side bucket keeps the damage local.
  auto pos = Row(fs_->state(),
                 "SELECT p.leaf, p.level, p.slot, b.idx FROM positions p JOIN fs_blocks b ON "
                 "b.block_id = p.id WHERE b.ino = " +
                     std::to_string(ino) + " AND b.valid > 0 ORDER BY p.level DESC LIMIT 1");
  ASSERT_EQ(pos.size(), 4u);
  const OramParams& p = fs_->params();
  const std::uint64_t bucket = static_cast<std::uint64_t>(pos[0]) >> (p.height - pos[1]);
  // Where the bucket lies now (serverd/share_store.h: buckets move between
  // places as evictions commit).
  const std::string shares = fs_->test_fs()->cluster->dir() + "/data-1/shares.bin";
  auto places = serverd::StoreInspection::InspectFile(shares);
  ASSERT_TRUE(places.ok()) << places.status().ToString();
  const std::uint64_t offset =
      (*places)[bucket].data + static_cast<std::uint64_t>(pos[2]) * p.slot_bytes();
  std::fprintf(stderr, "[ fsck     ] corrupting %s at bucket %llu slot %lld (offset %llu)\n",
               shares.c_str(), static_cast<unsigned long long>(bucket),
               static_cast<long long>(pos[2]), static_cast<unsigned long long>(offset));
  int fd = ::open(shares.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << shares << ": " << std::strerror(errno);
  std::vector<field::Elem> elems(p.slot_bytes() / sizeof(field::Elem));
  const std::size_t bytes = elems.size() * sizeof(field::Elem);
  ASSERT_EQ(::pread(fd, elems.data(), bytes, static_cast<off_t>(offset)),
            static_cast<ssize_t>(bytes));
  // Still field elements (so the server accepts them), every one changed.
  for (auto& e : elems) e = static_cast<field::Elem>((e + 1) % field::kPrime);
  ASSERT_EQ(::pwrite(fd, elems.data(), bytes, static_cast<off_t>(offset)),
            static_cast<ssize_t>(bytes));
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);

  // The server finds the damage itself (the slot no longer matches its digest)
  // and names itself; fsck names the file and the repair, and -y cannot make
  // it go away (zeroing would discard data the rebuild recovers).
  CmdResult r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("(/dir/sub/d) block " + std::to_string(pos[3])), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("server 1 has damaged storage: bucket " + std::to_string(bucket) +
                          " slot " + std::to_string(pos[2])),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("s3oram rebuild --server 1"), std::string::npos) << r.output;
  // Only blocks whose path crosses the damaged (leaf-side) bucket are named
  // unreadable. Once the damage stopped evictions and the root filled up,
  // the blocks left are listed as not checked, not as unreadable (before,
  // nearly all 64 blocks of "big" were called unreadable). The damaged file
  // is named either way: as unreadable if fsck reached it before the root
  // filled, else as not checked.
  std::size_t big_unreadable = 0;
  for (std::size_t at = r.output.find("(/big) block"); at != std::string::npos;
       at = r.output.find("(/big) block", at + 1)) {
    const std::size_t eol = r.output.find('\n', at);
    if (r.output.substr(at, eol - at).find("cannot be read until a server is repaired") !=
        std::string::npos) {
      ++big_unreadable;
    }
  }
  EXPECT_LT(big_unreadable, 32u) << r.output;
  // Exit 4 (problems left) when the blocks can be read past the damage, or 8
  // when opening the filesystem must first finish an eviction that the
  // damaged server refuses (the first fsck's reads may have made one due);
  // either way nothing is zeroed and the repair is named.
  r = Fsck({"-y", "--zero-damaged"});
  EXPECT_TRUE(r.exit_code == 4 || r.exit_code == 8) << r.exit_code << ": " << r.output;
  EXPECT_NE(r.output.find("s3oram rebuild --server 1"), std::string::npos) << r.output;
  // The metadata are fine: without the block phase nothing is found.
  r = Fsck({"-n", "--no-blocks"});
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // A scrub finds the same damage on server 1 alone.
  auto cli = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {CliPath()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"-s", fs_->state(), "--passfile", fs_->passfile(), "--plain-progress"});
    return RunCmd(argv, std::chrono::seconds(240));
  };
  CmdResult scrub = cli({"scrub"});
  EXPECT_EQ(scrub.exit_code, 4) << scrub.output;
  EXPECT_NE(scrub.output.find("server 1: DAMAGED: 1 slots"), std::string::npos) << scrub.output;
  EXPECT_NE(scrub.output.find("bucket " + std::to_string(bucket) + " slot " + std::to_string(pos[2])),
            std::string::npos)
      << scrub.output;
  EXPECT_NE(scrub.output.find("server 0: "), std::string::npos) << scrub.output;
  EXPECT_EQ(scrub.output.find("server 0: DAMAGED"), std::string::npos) << scrub.output;
  EXPECT_EQ(scrub.output.find("server 2: DAMAGED"), std::string::npos) << scrub.output;

  // Rebuilding an honest server from the damaged one is refused, even with
  // --force, and changes nothing.
  for (bool force : {false, true}) {
    std::vector<std::string> args = {"rebuild", "--server", "0"};
    if (force) args.push_back("--force");
    CmdResult wrong = cli(args);
    EXPECT_EQ(wrong.exit_code, 2) << wrong.output;
    EXPECT_NE(wrong.output.find("rebuild that server instead: s3oram rebuild --server 1"),
              std::string::npos)
        << wrong.output;
  }
  r = Fsck({"-n", "--no-blocks"});
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // The repair the messages name: server 1 rebuilt from servers 0 and 2, no
  // --force needed since its share file is the damaged one.
  CmdResult rebuilt = cli({"rebuild", "--server", "1"});
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.output;
  r = Fsck({"-n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  scrub = cli({"scrub"});
  EXPECT_EQ(scrub.exit_code, 0) << scrub.output;
  // A healthy live server is not replaced without --force.
  CmdResult healthy = cli({"rebuild", "--server", "2"});
  EXPECT_EQ(healthy.exit_code, 2) << healthy.output;
  EXPECT_NE(healthy.output.find("every slot of it verifies"), std::string::npos) << healthy.output;
  ASSERT_TRUE(fs_->Mount());
  EXPECT_TRUE(ReadWholeFile(fs_->Path("big")) == PatternBytes(64 * 4096, seed_ + 100));
  for (const auto& [name, content] : files_) {
    EXPECT_TRUE(ReadWholeFile(fs_->Path(name)) == content) << name << " after the rebuild";
  }
  ASSERT_TRUE(fs_->Unmount());
}

}  // namespace
}  // namespace s3oram
