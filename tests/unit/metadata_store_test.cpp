// Tests of the filesystem metadata store against real SQLite files in a
// private temporary directory: every operation and its error codes, rename
// semantics, readdir stability, block allocation, persistence, crash orphans,
// schema refusal, and a seeded randomized model test.
#include "fused/metadata_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/support/bare_state.h"
#include "tests/support/test_seed.h"

namespace s3oram::fs {
namespace {

namespace stdfs = std::filesystem;

constexpr std::uint32_t kBlock = 4096;

class MetadataStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/s3oram-meta-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/state.db";
    testing::CreateBareStateFile(path_);
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    stdfs::remove_all(dir_, ec);
  }

  void OpenStore(std::uint64_t capacity = 64) {
    store_.reset();
    auto r = MetadataStore::Open(testing::TestState(path_), capacity, kBlock);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    store_ = std::move(r).value();
  }

  void RawSql(const std::string& sql) {
    sqlite3* db = nullptr;
    db = testing::OpenTestStateDb(path_);
    ASSERT_NE(db, nullptr);
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    std::string msg = err ? err : "";
    sqlite3_free(err);
    sqlite3_close(db);
    ASSERT_EQ(rc, SQLITE_OK) << msg;
  }

  void ExpectInvariants() {
    Status s = store_->CheckInvariants();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  Ino MakeFile(Ino parent, const std::string& name) {
    Attr a;
    EXPECT_EQ(store_->Create(parent, name, S_IFREG | 0644, 1000, 1000, 0, &a), 0) << name;
    return a.ino;
  }
  Ino MakeDir(Ino parent, const std::string& name) {
    Attr a;
    EXPECT_EQ(store_->Mkdir(parent, name, 0755, 1000, 1000, &a), 0) << name;
    return a.ino;
  }
  Attr Get(Ino ino) {
    Attr a;
    EXPECT_EQ(store_->GetAttr(ino, &a), 0);
    return a;
  }
  std::vector<DirEntry> List(Ino dir) {
    std::vector<DirEntry> all;
    std::uint64_t cookie = 0;
    for (;;) {
      std::vector<DirEntry> page;
      EXPECT_EQ(store_->ReadDir(dir, cookie, 3, &page), 0);
      if (page.empty()) break;
      for (auto& e : page) all.push_back(e);
      cookie = page.back().cookie;
    }
    return all;
  }
  std::set<std::string> Names(Ino dir) {
    std::set<std::string> s;
    for (auto& e : List(dir)) s.insert(e.name);
    return s;
  }

  std::string dir_, path_;
  std::unique_ptr<MetadataStore> store_;
};

TEST_F(MetadataStoreTest, RootCreatedOnFirstOpen) {
  OpenStore();
  Attr root = Get(kRootIno);
  EXPECT_EQ(root.mode, static_cast<std::uint32_t>(S_IFDIR | 0755));
  EXPECT_EQ(root.nlink, 2u);
  EXPECT_EQ(root.uid, ::getuid());
  EXPECT_EQ(root.gid, ::getgid());
  EXPECT_TRUE(List(kRootIno).empty());
  FsStats st;
  ASSERT_EQ(store_->StatFs(&st), 0);
  EXPECT_EQ(st.total_blocks, 64u);
  EXPECT_EQ(st.free_blocks, 64u);
  EXPECT_EQ(st.block_bytes, kBlock);
  EXPECT_EQ(st.inodes, 1u);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, MissingStateFileIsNotFound) {
  // Found missing before any connection: when the state is unlocked.
  auto r = UnlockedState::UnlockWithMaster(dir_ + "/nope.db",
                                           Secret::CopyOf(testing::TestStateMaster().bytes()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
}

TEST_F(MetadataStoreTest, CreateLookupGetAttrAndErrors) {
  OpenStore();
  Attr f;
  ASSERT_EQ(store_->Create(kRootIno, "a.txt", 0640, 7, 8, 0, &f), 0);
  EXPECT_EQ(f.mode, static_cast<std::uint32_t>(S_IFREG | 0640));
  EXPECT_EQ(f.uid, 7u);
  EXPECT_EQ(f.gid, 8u);
  EXPECT_EQ(f.nlink, 1u);
  EXPECT_EQ(f.size, 0u);
  EXPECT_GT(f.ctime_ns, 0);
  Attr l;
  ASSERT_EQ(store_->Lookup(kRootIno, "a.txt", &l), 0);
  EXPECT_EQ(l.ino, f.ino);
  ASSERT_EQ(store_->Lookup(kRootIno, ".", &l), 0);
  EXPECT_EQ(l.ino, kRootIno);
  ASSERT_EQ(store_->Lookup(kRootIno, "..", &l), 0);
  EXPECT_EQ(l.ino, kRootIno);

  EXPECT_EQ(store_->Lookup(kRootIno, "missing", &l), ENOENT);
  EXPECT_EQ(store_->Lookup(f.ino, "x", &l), ENOTDIR);
  EXPECT_EQ(store_->Lookup(999, "x", &l), ENOENT);
  EXPECT_EQ(store_->GetAttr(999, &l), ENOENT);
  EXPECT_EQ(store_->Create(kRootIno, "a.txt", 0644, 0, 0, 0, &l), EEXIST);
  EXPECT_EQ(store_->Create(f.ino, "x", 0644, 0, 0, 0, &l), ENOTDIR);
  EXPECT_EQ(store_->Create(999, "x", 0644, 0, 0, 0, &l), ENOENT);
  std::string long_name(256, 'n');
  EXPECT_EQ(store_->Create(kRootIno, long_name, 0644, 0, 0, 0, &l), ENAMETOOLONG);
  EXPECT_EQ(store_->Lookup(kRootIno, long_name, &l), ENAMETOOLONG);
  EXPECT_EQ(store_->Create(kRootIno, std::string(255, 'n'), 0644, 0, 0, 0, &l), 0);
  EXPECT_EQ(store_->Create(kRootIno, "", 0644, 0, 0, 0, &l), EINVAL);
  EXPECT_EQ(store_->Create(kRootIno, "a/b", 0644, 0, 0, 0, &l), EINVAL);
  EXPECT_EQ(store_->Create(kRootIno, "d", S_IFDIR | 0755, 0, 0, 0, &l), EINVAL);

  Attr fifo;
  ASSERT_EQ(store_->Create(kRootIno, "fifo", S_IFIFO | 0600, 0, 0, 0, &fifo), 0);
  EXPECT_EQ(fifo.mode & S_IFMT, static_cast<std::uint32_t>(S_IFIFO));
  Attr dev;
  ASSERT_EQ(store_->Create(kRootIno, "dev", S_IFCHR | 0600, 0, 0, 0x0103, &dev), 0);
  EXPECT_EQ(dev.rdev, 0x0103u);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, MkdirRmdirNlinkAndErrors) {
  OpenStore();
  Ino d = MakeDir(kRootIno, "d");
  EXPECT_EQ(Get(kRootIno).nlink, 3u);
  EXPECT_EQ(Get(d).nlink, 2u);
  Ino sub = MakeDir(d, "sub");
  EXPECT_EQ(Get(d).nlink, 3u);
  Attr l;
  ASSERT_EQ(store_->Lookup(sub, "..", &l), 0);
  EXPECT_EQ(l.ino, d);
  EXPECT_EQ(store_->Mkdir(kRootIno, "d", 0755, 0, 0, &l), EEXIST);
  MakeFile(d, "f");
  EXPECT_EQ(store_->Rmdir(kRootIno, "d", nullptr), ENOTEMPTY);
  EXPECT_EQ(store_->Rmdir(d, "f", nullptr), ENOTDIR);
  EXPECT_EQ(store_->Rmdir(d, "nope", nullptr), ENOENT);
  EXPECT_EQ(store_->Unlink(kRootIno, "d", nullptr), EISDIR);
  ASSERT_EQ(store_->Unlink(d, "f", nullptr), 0);
  Ino removed = 0;
  ASSERT_EQ(store_->Rmdir(d, "sub", &removed), 0);
  EXPECT_EQ(removed, sub);
  EXPECT_EQ(Get(d).nlink, 2u);
  // A removed directory is an orphan: it cannot receive entries.
  EXPECT_EQ(store_->Create(sub, "x", 0644, 0, 0, 0, &l), ENOENT);
  ExpectInvariants();
  ASSERT_EQ(store_->ForgetOrphan(sub, nullptr), 0);
  EXPECT_EQ(store_->GetAttr(sub, &l), ENOENT);
  ASSERT_EQ(store_->Rmdir(kRootIno, "d", nullptr), 0);
  EXPECT_EQ(Get(kRootIno).nlink, 2u);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, SymlinkReadLink) {
  OpenStore();
  Attr s;
  ASSERT_EQ(store_->Symlink(kRootIno, "ln", "some/where", 5, 6, &s), 0);
  EXPECT_EQ(s.mode, static_cast<std::uint32_t>(S_IFLNK | 0777));
  EXPECT_EQ(s.size, 10u);
  std::string t;
  ASSERT_EQ(store_->ReadLink(s.ino, &t), 0);
  EXPECT_EQ(t, "some/where");
  Ino f = MakeFile(kRootIno, "f");
  EXPECT_EQ(store_->ReadLink(f, &t), EINVAL);
  EXPECT_EQ(store_->ReadLink(999, &t), ENOENT);
  EXPECT_EQ(store_->Symlink(kRootIno, "ln", "x", 0, 0, &s), EEXIST);
  EXPECT_EQ(store_->Symlink(kRootIno, "long", std::string(4096, 'x'), 0, 0, &s), ENAMETOOLONG);
  EXPECT_EQ(store_->Symlink(kRootIno, "empty", "", 0, 0, &s), ENOENT);
  bool orphaned = false;
  ASSERT_EQ(store_->Unlink(kRootIno, "ln", &orphaned), 0);
  EXPECT_TRUE(orphaned);
  ASSERT_EQ(store_->ForgetOrphan(s.ino, nullptr), 0);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, HardLinkCounts) {
  OpenStore();
  Ino f = MakeFile(kRootIno, "f");
  Ino d = MakeDir(kRootIno, "d");
  Attr a;
  ASSERT_EQ(store_->Link(f, d, "f2", &a), 0);
  EXPECT_EQ(a.nlink, 2u);
  ASSERT_EQ(store_->Link(f, kRootIno, "f3", &a), 0);
  EXPECT_EQ(a.nlink, 3u);
  EXPECT_EQ(store_->Link(f, d, "f2", &a), EEXIST);
  EXPECT_EQ(store_->Link(d, kRootIno, "dl", &a), EPERM);
  EXPECT_EQ(store_->Link(999, kRootIno, "x", &a), ENOENT);
  EXPECT_EQ(store_->Link(f, f, "x", &a), ENOTDIR);
  ExpectInvariants();
  bool orphaned = true;
  ASSERT_EQ(store_->Unlink(kRootIno, "f", &orphaned), 0);
  EXPECT_FALSE(orphaned);
  EXPECT_EQ(Get(f).nlink, 2u);
  ASSERT_EQ(store_->Unlink(d, "f2", &orphaned), 0);
  EXPECT_FALSE(orphaned);
  ASSERT_EQ(store_->Unlink(kRootIno, "f3", &orphaned), 0);
  EXPECT_TRUE(orphaned);
  EXPECT_EQ(Get(f).nlink, 0u);  // still there while open
  EXPECT_EQ(store_->Link(f, kRootIno, "back", &a), ENOENT);
  EXPECT_EQ(store_->Unlink(kRootIno, "f3", &orphaned), ENOENT);
  ExpectInvariants();
  ASSERT_EQ(store_->ForgetOrphan(f, nullptr), 0);
  EXPECT_EQ(store_->GetAttr(f, &a), ENOENT);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, RenameBasicsAndReplace) {
  OpenStore();
  Ino a = MakeFile(kRootIno, "a");
  Ino b = MakeFile(kRootIno, "b");
  Ino d1 = MakeDir(kRootIno, "d1");
  Ino d2 = MakeDir(kRootIno, "d2");
  Ino orphan = 99;
  // Plain move into another directory.
  ASSERT_EQ(store_->Rename(kRootIno, "a", d1, "a2", 0, &orphan), 0);
  EXPECT_EQ(orphan, 0u);
  Attr l;
  EXPECT_EQ(store_->Lookup(kRootIno, "a", &l), ENOENT);
  ASSERT_EQ(store_->Lookup(d1, "a2", &l), 0);
  EXPECT_EQ(l.ino, a);
  // Replace a file: the old target becomes an orphan.
  ASSERT_EQ(store_->Rename(d1, "a2", kRootIno, "b", 0, &orphan), 0);
  EXPECT_EQ(orphan, b);
  EXPECT_EQ(Get(b).nlink, 0u);
  ASSERT_EQ(store_->ForgetOrphan(b, nullptr), 0);
  // Directory moves fix parent link counts.
  ASSERT_EQ(store_->Rename(kRootIno, "d2", d1, "d2", 0, &orphan), 0);
  EXPECT_EQ(Get(kRootIno).nlink, 3u);
  EXPECT_EQ(Get(d1).nlink, 3u);
  ASSERT_EQ(store_->Lookup(d2, "..", &l), 0);
  EXPECT_EQ(l.ino, d1);
  // Replace an empty dir by a dir.
  Ino d3 = MakeDir(kRootIno, "d3");
  ASSERT_EQ(store_->Rename(d1, "d2", kRootIno, "d3", 0, &orphan), 0);
  EXPECT_EQ(orphan, d3);
  EXPECT_EQ(Get(kRootIno).nlink, 4u);  // d1, d3(now d2's inode)
  EXPECT_EQ(Get(d1).nlink, 2u);
  ASSERT_EQ(store_->ForgetOrphan(d3, nullptr), 0);
  ExpectInvariants();
  // Same entry, and two links to one inode: no-ops.
  ASSERT_EQ(store_->Rename(kRootIno, "b", kRootIno, "b", 0, &orphan), 0);
  ASSERT_EQ(store_->Link(a, kRootIno, "hl", &l), 0);
  ASSERT_EQ(store_->Rename(kRootIno, "b", kRootIno, "hl", 0, &orphan), 0);
  EXPECT_EQ(orphan, 0u);
  EXPECT_EQ(Get(a).nlink, 2u);
  EXPECT_EQ(store_->Rename(kRootIno, "nope", kRootIno, "x", 0, &orphan), ENOENT);
  EXPECT_EQ(store_->Rename(kRootIno, "b", kRootIno, std::string(256, 'x'), 0, &orphan),
            ENAMETOOLONG);
  EXPECT_EQ(store_->Rename(kRootIno, "b", a, "x", 0, &orphan), ENOTDIR);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, RenameFlagMatrix) {
  OpenStore();
  Ino f = MakeFile(kRootIno, "f");
  Ino g = MakeFile(kRootIno, "g");
  Ino d = MakeDir(kRootIno, "d");
  Ino e = MakeDir(kRootIno, "e");
  Ino inner = MakeFile(e, "inner");
  Ino sub = MakeDir(d, "sub");
  Ino o = 0;
  // NOREPLACE onto an existing entry.
  EXPECT_EQ(store_->Rename(kRootIno, "f", kRootIno, "g", kRenameNoReplace, &o), EEXIST);
  ASSERT_EQ(store_->Rename(kRootIno, "f", kRootIno, "f_new", kRenameNoReplace, &o), 0);
  ASSERT_EQ(store_->Rename(kRootIno, "f_new", kRootIno, "f", 0, &o), 0);
  // Both flags, unknown flags.
  EXPECT_EQ(store_->Rename(kRootIno, "f", kRootIno, "g", kRenameNoReplace | kRenameExchange, &o),
            EINVAL);
  EXPECT_EQ(store_->Rename(kRootIno, "f", kRootIno, "g", 8, &o), EINVAL);
  // EXCHANGE needs both.
  EXPECT_EQ(store_->Rename(kRootIno, "f", kRootIno, "zz", kRenameExchange, &o), ENOENT);
  // EXCHANGE file <-> dir across directories fixes link counts.
  ASSERT_EQ(store_->Rename(kRootIno, "f", d, "sub", kRenameExchange, &o), 0);
  Attr l;
  ASSERT_EQ(store_->Lookup(kRootIno, "f", &l), 0);
  EXPECT_EQ(l.ino, sub);
  ASSERT_EQ(store_->Lookup(d, "sub", &l), 0);
  EXPECT_EQ(l.ino, f);
  EXPECT_EQ(Get(d).nlink, 2u);
  EXPECT_EQ(Get(kRootIno).nlink, 5u);  // d, e, f(=sub)
  ExpectInvariants();
  ASSERT_EQ(store_->Rename(kRootIno, "f", d, "sub", kRenameExchange, &o), 0);
  ExpectInvariants();
  // Replace semantics.
  EXPECT_EQ(store_->Rename(kRootIno, "d", kRootIno, "e", 0, &o), ENOTEMPTY);
  EXPECT_EQ(store_->Rename(kRootIno, "d", kRootIno, "g", 0, &o), ENOTDIR);
  EXPECT_EQ(store_->Rename(kRootIno, "g", kRootIno, "d", 0, &o), EISDIR);
  // Into its own subtree.
  EXPECT_EQ(store_->Rename(kRootIno, "d", sub, "x", 0, &o), EINVAL);
  EXPECT_EQ(store_->Rename(kRootIno, "d", d, "x", 0, &o), EINVAL);
  EXPECT_EQ(store_->Rename(kRootIno, "d", sub, "x", kRenameNoReplace, &o), EINVAL);
  MakeFile(sub, "deep");
  EXPECT_EQ(store_->Rename(kRootIno, "d", sub, "deep", kRenameExchange, &o), EINVAL);
  EXPECT_EQ(store_->Rename(sub, "deep", kRootIno, "d", kRenameExchange, &o), EINVAL);
  // EXCHANGE of two dirs in different parents keeps counts.
  ASSERT_EQ(store_->Rename(d, "sub", kRootIno, "e", kRenameExchange, &o), 0);
  ASSERT_EQ(store_->Lookup(d, "sub", &l), 0);
  EXPECT_EQ(l.ino, e);
  ASSERT_EQ(store_->Lookup(e, "inner", &l), 0);
  EXPECT_EQ(l.ino, inner);
  (void)g;
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, ReadDirCookiesStayStable) {
  OpenStore();
  Ino d = MakeDir(kRootIno, "d");
  for (int i = 0; i < 10; ++i) MakeFile(d, "f" + std::to_string(i));
  std::vector<DirEntry> page;
  ASSERT_EQ(store_->ReadDir(d, 0, 4, &page), 0);
  ASSERT_EQ(page.size(), 4u);
  std::set<std::string> seen;
  for (auto& e : page) {
    EXPECT_EQ(e.type, static_cast<std::uint32_t>(S_IFREG));
    seen.insert(e.name);
  }
  std::uint64_t cookie = page.back().cookie;
  // Changes while listing: remove seen and unseen entries, add new ones.
  ASSERT_EQ(store_->Unlink(d, "f0", nullptr), 0);
  ASSERT_EQ(store_->Unlink(d, "f7", nullptr), 0);
  MakeFile(d, "new1");
  MakeDir(d, "new2");
  std::multiset<std::string> rest;
  for (;;) {
    ASSERT_EQ(store_->ReadDir(d, cookie, 4, &page), 0);
    if (page.empty()) break;
    for (auto& e : page) {
      EXPECT_GT(e.cookie, cookie);
      cookie = e.cookie;
      rest.insert(e.name);
    }
  }
  for (auto& n : rest) EXPECT_EQ(seen.count(n), 0u) << n << " returned twice";
  for (const char* n : {"f4", "f5", "f6", "f8", "f9"}) EXPECT_EQ(rest.count(n), 1u) << n;
  EXPECT_EQ(rest.count("f7"), 0u);
  EXPECT_EQ(store_->ReadDir(MakeFile(kRootIno, "plain"), 0, 10, &page), ENOTDIR);
  EXPECT_EQ(store_->ReadDir(999, 0, 10, &page), ENOENT);
}

TEST_F(MetadataStoreTest, SetAttrAndTimestamps) {
  OpenStore();
  Ino f = MakeFile(kRootIno, "f");
  Attr before = Get(f);
  SetAttrIn in;
  in.mask = kSetMode | kSetUid | kSetGid | kSetAtime | kSetMtime;
  in.mode = S_IFDIR | 04711;  // type bits ignored
  in.uid = 42;
  in.gid = 43;
  in.atime_ns = 111;
  in.mtime_ns = 222;
  Attr a;
  ASSERT_EQ(store_->SetAttr(f, in, &a), 0);
  EXPECT_EQ(a.mode, static_cast<std::uint32_t>(S_IFREG | 04711));
  EXPECT_EQ(a.uid, 42u);
  EXPECT_EQ(a.gid, 43u);
  EXPECT_EQ(a.atime_ns, 111);
  EXPECT_EQ(a.mtime_ns, 222);
  EXPECT_GE(a.ctime_ns, before.ctime_ns);
  in.mask = kSetCtime;
  in.ctime_ns = 5;
  ASSERT_EQ(store_->SetAttr(f, in, &a), 0);
  EXPECT_EQ(a.ctime_ns, 5);
  in.mask = 1u << 20;
  EXPECT_EQ(store_->SetAttr(f, in, &a), EINVAL);
  EXPECT_EQ(store_->SetAttr(999, SetAttrIn{}, &a), ENOENT);
  // Creating an entry updates the parent's mtime.
  Attr root_before = Get(kRootIno);
  MakeFile(kRootIno, "g");
  EXPECT_GE(Get(kRootIno).mtime_ns, root_before.mtime_ns);
}

TEST_F(MetadataStoreTest, Xattrs) {
  OpenStore();
  Ino f = MakeFile(kRootIno, "f");
  EXPECT_EQ(store_->SetXattr(f, "user.a", "1", 0), 0);
  EXPECT_EQ(store_->SetXattr(f, "user.a", "2", kXattrCreate), EEXIST);
  EXPECT_EQ(store_->SetXattr(f, "user.b", "2", kXattrReplace), ENODATA);
  EXPECT_EQ(store_->SetXattr(f, "user.a", "3", kXattrReplace), 0);
  EXPECT_EQ(store_->SetXattr(f, "user.b", std::string("\0x", 2), kXattrCreate), 0);
  EXPECT_EQ(store_->SetXattr(f, "user.empty", "", 0), 0);
  std::string v;
  ASSERT_EQ(store_->GetXattr(f, "user.a", &v), 0);
  EXPECT_EQ(v, "3");
  ASSERT_EQ(store_->GetXattr(f, "user.b", &v), 0);
  EXPECT_EQ(v, std::string("\0x", 2));
  ASSERT_EQ(store_->GetXattr(f, "user.empty", &v), 0);
  EXPECT_EQ(v, "");
  EXPECT_EQ(store_->GetXattr(f, "user.none", &v), ENODATA);
  std::vector<std::string> names;
  ASSERT_EQ(store_->ListXattr(f, &names), 0);
  EXPECT_EQ(names, (std::vector<std::string>{"user.a", "user.b", "user.empty"}));
  EXPECT_EQ(store_->RemoveXattr(f, "user.a"), 0);
  EXPECT_EQ(store_->RemoveXattr(f, "user.a"), ENODATA);
  EXPECT_EQ(store_->GetXattr(f, "user.a", &v), ENODATA);
  EXPECT_EQ(store_->SetXattr(f, "", "x", 0), EINVAL);
  EXPECT_EQ(store_->SetXattr(f, "user.x", "x", kXattrCreate | kXattrReplace), EINVAL);
  EXPECT_EQ(store_->SetXattr(f, std::string(256, 'n'), "x", 0), ERANGE);
  EXPECT_EQ(store_->SetXattr(f, "user.big", std::string(kMaxXattrValueBytes + 1, 'v'), 0), E2BIG);
  EXPECT_EQ(store_->SetXattr(999, "user.a", "1", 0), ENOENT);
  EXPECT_EQ(store_->ListXattr(999, &names), ENOENT);
  // Xattrs go with the inode.
  ASSERT_EQ(store_->Unlink(kRootIno, "f", nullptr), 0);
  ASSERT_EQ(store_->ForgetOrphan(f, nullptr), 0);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, BlocksHolesAllocationAndEnospc) {
  OpenStore(8);
  Ino f = MakeFile(kRootIno, "f");
  Ino d = MakeDir(kRootIno, "d");
  std::optional<BlockId> got;
  ASSERT_EQ(store_->GetBlock(f, 0, &got), 0);
  EXPECT_FALSE(got.has_value());
  BlockId id = 0;
  // A hole beyond the size cannot be mapped without raising the size.
  EXPECT_EQ(store_->MapBlock(f, 3, 0, &id), EINVAL);
  EXPECT_EQ(store_->MapBlock(d, 0, 1, &id), EISDIR);
  EXPECT_EQ(store_->MapBlock(999, 0, 1, &id), ENOENT);
  // Sparse: blocks 0 and 5 only.
  BlockId b0 = 0, b5 = 0;
  ASSERT_EQ(store_->MapBlock(f, 0, 10, &b0), 0);
  ASSERT_EQ(store_->MapBlock(f, 5, 5 * kBlock + 100, &b5), 0);
  EXPECT_NE(b0, b5);
  EXPECT_EQ(Get(f).size, 5u * kBlock + 100);
  EXPECT_EQ(Get(f).mapped_bytes / kBlock, 2u);
  ASSERT_EQ(store_->MapBlock(f, 0, 10, &id), 0);  // existing block, size kept
  EXPECT_EQ(id, b0);
  EXPECT_EQ(Get(f).size, 5u * kBlock + 100);
  for (std::uint64_t i = 1; i < 5; ++i) {
    ASSERT_EQ(store_->GetBlock(f, i, &got), 0);
    EXPECT_FALSE(got.has_value()) << i;
  }
  ASSERT_EQ(store_->GetBlock(f, 5, &got), 0);
  EXPECT_EQ(got, b5);
  ExpectInvariants();
  // Fill the ORAM.
  Ino g = MakeFile(kRootIno, "g");
  std::set<BlockId> ids{b0, b5};
  for (std::uint64_t i = 0; i < 6; ++i) {
    ASSERT_EQ(store_->MapBlock(g, i, (i + 1) * kBlock, &id), 0) << i;
    EXPECT_LT(id, 8u);
    EXPECT_TRUE(ids.insert(id).second);
  }
  EXPECT_EQ(store_->MapBlock(g, 6, 7 * kBlock, &id), ENOSPC);
  EXPECT_EQ(Get(g).size, 6u * kBlock);  // the failed call changed nothing
  FsStats st;
  ASSERT_EQ(store_->StatFs(&st), 0);
  EXPECT_EQ(st.free_blocks, 0u);
  // Truncate frees blocks entirely beyond the new size (keeps the partial one).
  std::vector<BlockId> freed;
  Attr a;
  ASSERT_EQ(store_->Truncate(g, 2 * kBlock + 1, &freed, &a), 0);
  EXPECT_EQ(freed.size(), 3u);
  EXPECT_EQ(a.size, 2u * kBlock + 1);
  EXPECT_EQ(a.mapped_bytes / kBlock, 3u);
  ASSERT_EQ(store_->StatFs(&st), 0);
  EXPECT_EQ(st.free_blocks, 3u);
  ExpectInvariants();
  std::set<BlockId> reused;
  for (std::uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(store_->MapBlock(f, 1 + i, 0, &id), 0);
    reused.insert(id);
  }
  EXPECT_EQ(reused, std::set<BlockId>(freed.begin(), freed.end()));
  EXPECT_EQ(store_->MapBlock(f, 4, 0, &id), ENOSPC);
  // Growing truncate maps nothing; truncate errors.
  ASSERT_EQ(store_->Truncate(g, 100 * kBlock, nullptr, &a), 0);
  EXPECT_EQ(a.mapped_bytes / kBlock, 3u);
  EXPECT_EQ(store_->Truncate(d, 0, nullptr, &a), EISDIR);
  EXPECT_EQ(store_->Truncate(999, 0, nullptr, &a), ENOENT);
  // Orphan blocks are freed by ForgetOrphan only.
  ASSERT_EQ(store_->Unlink(kRootIno, "g", nullptr), 0);
  ASSERT_EQ(store_->StatFs(&st), 0);
  EXPECT_EQ(st.free_blocks, 0u);
  freed.clear();
  ASSERT_EQ(store_->ForgetOrphan(g, &freed), 0);
  EXPECT_EQ(freed.size(), 3u);
  ASSERT_EQ(store_->StatFs(&st), 0);
  EXPECT_EQ(st.free_blocks, 3u);
  ASSERT_EQ(store_->Truncate(f, 0, nullptr, &a), 0);
  EXPECT_EQ(a.mapped_bytes / kBlock, 0u);
  ASSERT_EQ(store_->StatFs(&st), 0);
  EXPECT_EQ(st.free_blocks, 8u);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, PrepareWriteGetBlocksAndValidLengths) {
  OpenStore(6);
  Ino f = MakeFile(kRootIno, "f");
  std::vector<BlockMapping> maps;
  Attr before;
  // A write of [kBlock + 10, 3 * kBlock + 5) maps blocks 1..3, all fresh.
  ASSERT_EQ(store_->PrepareWrite(f, kBlock + 10, 2 * kBlock - 5, &maps, &before), 0);
  EXPECT_EQ(before.size, 0u);
  ASSERT_EQ(maps.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(maps[i].idx, i + 1);
    EXPECT_EQ(maps[i].valid, 0u);
  }
  EXPECT_EQ(Get(f).size, 3u * kBlock + 5);
  EXPECT_EQ(Get(f).mapped_bytes / kBlock, 3u);
  // MarkWritten sets valid to the part below the size; unknown blocks and
  // extents not mapped there are ignored.
  ASSERT_EQ(store_->MarkWritten({{f, 1, maps[0].at()},
                                 {f, 3, maps[2].at()},
                                 {f, 2, Extent{999, 0, 0}},
                                 {f, 7, maps[0].at()}}),
            0);
  std::vector<BlockMapping> got;
  Attr attr;
  ASSERT_EQ(store_->GetBlocks(f, 0, 10, &got, &attr), 0);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].valid, kBlock);
  EXPECT_EQ(got[1].valid, 0u);
  EXPECT_EQ(got[2].valid, 5u);
  EXPECT_EQ(attr.size, 3u * kBlock + 5);
  ExpectInvariants();
  // Shrinking into a block lowers its valid length; growing keeps it.
  ASSERT_EQ(store_->Truncate(f, kBlock + 7, nullptr, &attr), 0);
  ASSERT_EQ(store_->Truncate(f, 3 * kBlock + 5, nullptr, &attr), 0);
  ASSERT_EQ(store_->GetBlocks(f, 1, 1, &got, &attr), 0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].valid, 7u);
  ExpectInvariants();
  ASSERT_EQ(store_->PrepareWrite(f, 2 * kBlock, 4, &maps, &attr), 0);
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0].valid, 0u);  // block 2 was freed by the shrink and mapped afresh
  // A write inside the file keeps the size and the existing mappings.
  std::vector<BlockMapping> again;
  ASSERT_EQ(store_->PrepareWrite(f, 2 * kBlock, 1, &again, &before), 0);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, maps[0].id);
  EXPECT_EQ(before.size, 3u * kBlock + 5);
  EXPECT_EQ(Get(f).size, 3u * kBlock + 5);
  // All or nothing: f holds blocks 1 and 2, so 5 more do not fit in the 4 left.
  Ino g = MakeFile(kRootIno, "g");
  EXPECT_EQ(store_->PrepareWrite(g, 0, 5 * kBlock, &maps, &before), ENOSPC);
  EXPECT_EQ(Get(g).size, 0u);
  EXPECT_EQ(Get(g).mapped_bytes / kBlock, 0u);
  // A freed and reused block comes back unwritten.
  ASSERT_EQ(store_->Truncate(f, 0, nullptr, &attr), 0);
  ASSERT_EQ(store_->PrepareWrite(g, 0, 6 * kBlock, &maps, &before), 0);
  ASSERT_EQ(maps.size(), 6u);
  for (const auto& m : maps) EXPECT_EQ(m.valid, 0u) << m.idx;
  // Errors.
  Ino d = MakeDir(kRootIno, "d");
  EXPECT_EQ(store_->PrepareWrite(d, 0, 1, &maps, &before), EISDIR);
  EXPECT_EQ(store_->GetBlocks(d, 0, 1, &maps, &attr), EISDIR);
  EXPECT_EQ(store_->PrepareWrite(f, static_cast<std::uint64_t>(INT64_MAX), 2, &maps, &before),
            EFBIG);
  EXPECT_EQ(store_->PrepareWrite(999, 0, 1, &maps, &before), ENOENT);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, ReopenPersistsEverything) {
  OpenStore();
  Ino d = MakeDir(kRootIno, "dir");
  Ino f = MakeFile(d, "file");
  BlockId id = 0;
  ASSERT_EQ(store_->MapBlock(f, 1, 2 * kBlock, &id), 0);
  ASSERT_EQ(store_->SetXattr(f, "user.k", "v", 0), 0);
  Attr s;
  ASSERT_EQ(store_->Symlink(kRootIno, "ln", "dir/file", 0, 0, &s), 0);
  ASSERT_EQ(store_->Link(f, kRootIno, "hard", &s), 0);
  ASSERT_EQ(store_->Sync(), 0);
  store_.reset();

  // Different geometry is refused.
  auto wrong = MetadataStore::Open(testing::TestState(path_), 65, kBlock);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Status::Code::kFailedPrecondition);

  OpenStore();
  Attr a;
  ASSERT_EQ(store_->Lookup(kRootIno, "dir", &a), 0);
  EXPECT_EQ(a.ino, d);
  ASSERT_EQ(store_->Lookup(d, "file", &a), 0);
  EXPECT_EQ(a.ino, f);
  EXPECT_EQ(a.nlink, 2u);
  EXPECT_EQ(a.size, 2u * kBlock);
  std::optional<BlockId> got;
  ASSERT_EQ(store_->GetBlock(f, 1, &got), 0);
  EXPECT_EQ(got, id);
  std::string v;
  ASSERT_EQ(store_->GetXattr(f, "user.k", &v), 0);
  EXPECT_EQ(v, "v");
  EXPECT_EQ(store_->ReadLink(f, &v), EINVAL);
  ASSERT_EQ(store_->Lookup(kRootIno, "ln", &a), 0);
  ASSERT_EQ(store_->ReadLink(a.ino, &v), 0);
  EXPECT_EQ(v, "dir/file");
  // New inode numbers are not reused.
  Ino g = MakeFile(kRootIno, "g");
  EXPECT_GT(g, a.ino);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, OrphansPurgedAfterCrash) {
  OpenStore();
  Ino f = MakeFile(kRootIno, "f");
  Ino keep = MakeFile(kRootIno, "keep");
  BlockId id = 0;
  ASSERT_EQ(store_->MapBlock(f, 0, 1, &id), 0);
  ASSERT_EQ(store_->MapBlock(keep, 0, 1, &id), 0);
  Ino d = MakeDir(kRootIno, "d");
  bool orphaned = false;
  ASSERT_EQ(store_->Unlink(kRootIno, "f", &orphaned), 0);
  ASSERT_TRUE(orphaned);
  ASSERT_EQ(store_->Rmdir(kRootIno, "d", nullptr), 0);
  store_.reset();  // "crash": ForgetOrphan never called

  OpenStore();
  ExpectInvariants();
  std::uint64_t n = 0;
  ASSERT_EQ(store_->PurgeOrphans(&n), 0);
  EXPECT_EQ(n, 2u);
  Attr a;
  EXPECT_EQ(store_->GetAttr(f, &a), ENOENT);
  EXPECT_EQ(store_->GetAttr(d, &a), ENOENT);
  EXPECT_EQ(store_->GetAttr(keep, &a), 0);
  FsStats st;
  ASSERT_EQ(store_->StatFs(&st), 0);
  EXPECT_EQ(st.free_blocks, 63u);
  EXPECT_EQ(st.inodes, 2u);
  ASSERT_EQ(store_->PurgeOrphans(&n), 0);
  EXPECT_EQ(n, 0u);
  ExpectInvariants();
}

TEST_F(MetadataStoreTest, UnknownSchemaVersionRefused) {
  OpenStore();
  store_.reset();
  RawSql("UPDATE fs_meta SET value = 99 WHERE key = 'schema_version'");
  auto r = MetadataStore::Open(testing::TestState(path_), 64, kBlock);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_NE(r.status().message().find("99"), std::string::npos);
  RawSql("DELETE FROM fs_meta WHERE key = 'schema_version'");
  r = MetadataStore::Open(testing::TestState(path_), 64, kBlock);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
}

TEST_F(MetadataStoreTest, CheckInvariantsDetectsDamage) {
  OpenStore();
  Ino f = MakeFile(kRootIno, "f");
  BlockId id = 0;
  ASSERT_EQ(store_->MapBlock(f, 0, 1, &id), 0);
  ExpectInvariants();
  RawSql("UPDATE fs_inodes SET nlink = 5 WHERE ino = " + std::to_string(f));
  EXPECT_EQ(store_->CheckInvariants().code(), Status::Code::kCorruption);
  RawSql("UPDATE fs_inodes SET nlink = 1 WHERE ino = " + std::to_string(f));
  ExpectInvariants();
  RawSql("INSERT INTO fs_free_blocks(block_id) VALUES (" + std::to_string(id) + ")");
  EXPECT_EQ(store_->CheckInvariants().code(), Status::Code::kCorruption);
  RawSql("DELETE FROM fs_free_blocks");
  RawSql("UPDATE fs_inodes SET size = 0 WHERE ino = " + std::to_string(f));
  EXPECT_EQ(store_->CheckInvariants().code(), Status::Code::kCorruption);
}

// Randomized model test: random operations on a small tree; every errno and
// every directory listing must match an in-memory model, and the store's
// invariants must hold after each step.
struct ModelNode {
  bool dir = false;
  std::uint32_t nlink = 0;
  std::uint64_t size = 0;
  std::map<std::string, Ino> children;  // dirs only
  std::map<std::uint64_t, bool> blocks; // regular files: mapped indices
};

TEST_F(MetadataStoreTest, RandomizedAgainstModel) {
  constexpr std::uint64_t kCap = 8;  // small, so ENOSPC happens
  OpenStore(kCap);
  std::mt19937_64 rng = s3oram::testing::SeededRng();
  std::map<Ino, ModelNode> model;
  model[kRootIno].dir = true;
  model[kRootIno].nlink = 2;
  std::uint64_t mapped_total = 0;
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  auto dirs = [&]() {
    std::vector<Ino> v;
    for (auto& [ino, n] : model) if (n.dir) v.push_back(ino);
    return v;
  };
  auto parent_of = [&](Ino dir) -> Ino {
    for (auto& [ino, n] : model) {
      for (auto& [nm, c] : n.children) if (c == dir && model[c].dir) return ino;
    }
    return 0;
  };
  auto in_subtree = [&](Ino dir, Ino anc) {
    for (Ino cur = dir; cur != 0; cur = cur == kRootIno ? 0 : parent_of(cur)) {
      if (cur == anc) return true;
    }
    return false;
  };
  auto forget = [&](Ino ino) {
    mapped_total -= model[ino].blocks.size();
    model.erase(ino);
    ASSERT_EQ(store_->ForgetOrphan(ino, nullptr), 0);
  };
  auto drop_link = [&](Ino ino) {
    ModelNode& n = model[ino];
    if (n.dir) n.nlink = 0; else n.nlink--;
    if (n.nlink == 0) forget(ino);
  };

  std::map<int, int> rename_rcs;  // errno -> count, to show the test reaches each case
  int enospc = 0;
  for (int step = 0; step < 600; ++step) {
    auto ds = dirs();
    Ino p = ds[pick(ds.size())];
    std::string nm = names[pick(names.size())];
    auto it = model[p].children.find(nm);
    std::optional<Ino> ex;
    if (it != model[p].children.end()) ex = it->second;
    int op = static_cast<int>(pick(7));
    SCOPED_TRACE("step " + std::to_string(step) + " op " + std::to_string(op));
    switch (op) {
      case 0: {  // create
        Attr a;
        int rc = store_->Create(p, nm, 0644, 0, 0, 0, &a);
        ASSERT_EQ(rc, ex ? EEXIST : 0);
        if (!ex) {
          model[a.ino].nlink = 1;
          model[p].children[nm] = a.ino;
        }
        break;
      }
      case 1: {  // mkdir
        Attr a;
        int rc = store_->Mkdir(p, nm, 0755, 0, 0, &a);
        ASSERT_EQ(rc, ex ? EEXIST : 0);
        if (!ex) {
          model[a.ino].dir = true;
          model[a.ino].nlink = 2;
          model[p].children[nm] = a.ino;
          model[p].nlink++;
        }
        break;
      }
      case 2: {  // unlink or rmdir
        if (rng() % 2) {
          int rc = store_->Unlink(p, nm, nullptr);
          int want = !ex ? ENOENT : model[*ex].dir ? EISDIR : 0;
          ASSERT_EQ(rc, want);
          if (want == 0) {
            model[p].children.erase(nm);
            drop_link(*ex);
          }
        } else {
          int rc = store_->Rmdir(p, nm, nullptr);
          int want = !ex ? ENOENT
                     : !model[*ex].dir ? ENOTDIR
                     : !model[*ex].children.empty() ? ENOTEMPTY : 0;
          ASSERT_EQ(rc, want);
          if (want == 0) {
            model[p].children.erase(nm);
            model[p].nlink--;
            drop_link(*ex);
          }
        }
        break;
      }
      case 3: {  // link
        std::vector<Ino> files;
        for (auto& [ino, n] : model) if (!n.dir) files.push_back(ino);
        if (files.empty()) break;
        Ino f = files[pick(files.size())];
        Attr a;
        ASSERT_EQ(store_->Link(f, p, nm, &a), ex ? EEXIST : 0);
        if (!ex) {
          model[f].nlink++;
          model[p].children[nm] = f;
        }
        break;
      }
      case 4:
      case 5: {  // rename
        Ino q = ds[pick(ds.size())];
        std::string nm2 = names[pick(names.size())];
        unsigned flags = std::vector<unsigned>{0, 0, kRenameNoReplace, kRenameExchange}[pick(4)];
        auto it2 = model[q].children.find(nm2);
        std::optional<Ino> ex2;
        if (it2 != model[q].children.end()) ex2 = it2->second;
        Ino orphan = 0;
        int rc = store_->Rename(p, nm, q, nm2, flags, &orphan);
        int want = 0;
        bool same = p == q && nm == nm2;
        if (!ex) {
          want = ENOENT;
        } else if (flags & kRenameExchange) {
          if (!ex2) want = ENOENT;
          else if (same) want = 0;
          else if ((model[*ex].dir && in_subtree(q, *ex)) || (model[*ex2].dir && in_subtree(p, *ex2)))
            want = EINVAL;
        } else if (ex2 && (flags & kRenameNoReplace)) {
          want = EEXIST;
        } else if (ex2 && *ex2 == *ex) {
          want = 0;
        } else if (model[*ex].dir && in_subtree(q, *ex)) {
          want = EINVAL;
        } else if (ex2) {
          bool sd = model[*ex].dir, dd = model[*ex2].dir;
          if (sd && !dd) want = ENOTDIR;
          else if (!sd && dd) want = EISDIR;
          else if (dd && !model[*ex2].children.empty()) want = ENOTEMPTY;
        }
        rename_rcs[rc]++;
        ASSERT_EQ(rc, want) << "rename " << p << "/" << nm << " -> " << q << "/" << nm2
                            << " flags " << flags;
        if (want != 0 || same || (ex2 && *ex2 == *ex)) break;
        if (flags & kRenameExchange) {
          model[p].children[nm] = *ex2;
          model[q].children[nm2] = *ex;
          if (p != q) {
            int delta = (model[*ex].dir ? 1 : 0) - (model[*ex2].dir ? 1 : 0);
            model[q].nlink += delta;
            model[p].nlink -= delta;
          }
          break;
        }
        if (ex2) {
          EXPECT_EQ(orphan, model[*ex2].dir || model[*ex2].nlink == 1 ? *ex2 : 0u);
          model[q].children.erase(nm2);
          if (model[*ex2].dir) model[q].nlink--;
          drop_link(*ex2);
        }
        model[p].children.erase(nm);
        model[q].children[nm2] = *ex;
        if (model[*ex].dir && p != q) {
          model[p].nlink--;
          model[q].nlink++;
        }
        break;
      }
      case 6: {  // map a block or truncate
        if (!ex || model[*ex].dir) break;
        Ino f = *ex;
        ModelNode& n = model[f];
        if (rng() % 3 != 0) {
          std::uint64_t idx = rng() % 6;
          BlockId id = 0;
          int rc = store_->MapBlock(f, idx, (idx + 1) * kBlock, &id);
          bool has = n.blocks.count(idx) != 0;
          ASSERT_EQ(rc, has || mapped_total < kCap ? 0 : ENOSPC);
          if (rc == ENOSPC) ++enospc;
          if (rc == 0) {
            if (!has) ++mapped_total;
            n.blocks[idx] = true;
            n.size = std::max<std::uint64_t>(n.size, (idx + 1) * kBlock);
          }
        } else {
          std::uint64_t sz = rng() % (6 * kBlock);
          Attr a;
          ASSERT_EQ(store_->Truncate(f, sz, nullptr, &a), 0);
          std::uint64_t keep = (sz + kBlock - 1) / kBlock;
          for (auto bi = n.blocks.begin(); bi != n.blocks.end();) {
            if (bi->first >= keep) {
              bi = n.blocks.erase(bi);
              --mapped_total;
            } else {
              ++bi;
            }
          }
          n.size = sz;
          EXPECT_EQ(a.mapped_bytes / kBlock, n.blocks.size());
        }
        break;
      }
    }
    Status s = store_->CheckInvariants();
    ASSERT_TRUE(s.ok()) << s.ToString();
    // Compare every directory and inode with the model.
    for (auto& [ino, n] : model) {
      Attr a;
      ASSERT_EQ(store_->GetAttr(ino, &a), 0) << ino;
      ASSERT_EQ(a.nlink, n.nlink) << ino;
      if (!n.dir) {
        ASSERT_EQ(a.size, n.size) << ino;
        ASSERT_EQ(a.mapped_bytes / kBlock, n.blocks.size()) << ino;
        continue;
      }
      std::map<std::string, Ino> listed;
      for (auto& e : List(ino)) listed[e.name] = e.ino;
      ASSERT_EQ(listed, n.children) << "directory " << ino;
    }
    FsStats st;
    ASSERT_EQ(store_->StatFs(&st), 0);
    ASSERT_EQ(st.free_blocks, kCap - mapped_total);
    ASSERT_EQ(st.inodes, model.size());
  }
  std::string dist;
  for (auto& [rc, n] : rename_rcs) dist += " errno " + std::to_string(rc) + " x" + std::to_string(n);
  std::printf("rename results:%s; ENOSPC x%d\n", dist.c_str(), enospc);
  EXPECT_GT(rename_rcs[0], 10);
  store_.reset();
  OpenStore(kCap);
  ExpectInvariants();
}

// Blocks an unmount could not write back are marked lost (MarkLost): GetBlocks
// says so until a write-back of the block (MarkWritten of its extent), a
// truncation below it or freeing the file; unmapped blocks are not marked,
// and the marks survive reopening the store.
TEST_F(MetadataStoreTest, LostBlocksAreMarkedUntilWrittenTruncatedOrFreed) {
  OpenStore(16);
  Ino f = MakeFile(kRootIno, "f");
  Ino g = MakeFile(kRootIno, "g");
  std::vector<BlockMapping> maps, gmaps;
  Attr before;
  ASSERT_EQ(store_->PrepareWrite(f, 0, 4 * kBlock, &maps, &before), 0);
  ASSERT_EQ(store_->PrepareWrite(g, 0, kBlock, &gmaps, &before), 0);
  Ino h = MakeFile(kRootIno, "h");  // unlinked while open: nobody reads it again
  ASSERT_EQ(store_->PrepareWrite(h, 0, kBlock, &gmaps, &before), 0);
  bool h_orphaned = false;
  ASSERT_EQ(store_->Unlink(kRootIno, "h", &h_orphaned), 0);
  std::size_t marked = 0;
  ASSERT_EQ(
      store_->MarkLost({{f, 0}, {f, 2}, {f, 3}, {f, 9}, {g, 0}, {999, 0}, {h, 0}}, &marked), 0);
  EXPECT_EQ(marked, 4u) << "(f, 9) and inode 999 are not mapped, h is unlinked";
  ExpectInvariants();
  OpenStore(16);  // the marks are in the state
  auto lost_of = [&](Ino ino) {
    std::vector<BlockMapping> got;
    Attr attr;
    EXPECT_EQ(store_->GetBlocks(ino, 0, 10, &got, &attr), 0);
    std::vector<std::uint64_t> out;
    for (const auto& m : got) {
      if (m.lost) out.push_back(m.idx);
    }
    return out;
  };
  EXPECT_EQ(lost_of(f), (std::vector<std::uint64_t>{0, 2, 3}));
  // A write-back of block 0 to another extent than its own changes nothing;
  // of its own extent, it ends the mark.
  ASSERT_EQ(store_->MarkWritten({{f, 0, Extent{999, 0, 0}}}), 0);
  EXPECT_EQ(lost_of(f), (std::vector<std::uint64_t>{0, 2, 3}));
  ASSERT_EQ(store_->MarkWritten({{f, 0, maps[0].at()}}), 0);
  EXPECT_EQ(lost_of(f), (std::vector<std::uint64_t>{2, 3}));
  // Truncating below block 3 drops its mark with its mapping.
  Attr attr;
  ASSERT_EQ(store_->Truncate(f, 3 * kBlock, nullptr, &attr), 0);
  EXPECT_EQ(lost_of(f), (std::vector<std::uint64_t>{2}));
  ExpectInvariants();
  // Freeing the file drops the rest.
  bool orphaned = false;
  ASSERT_EQ(store_->Unlink(kRootIno, "f", &orphaned), 0);
  ASSERT_TRUE(orphaned);
  std::vector<BlockId> freed;
  ASSERT_EQ(store_->ForgetOrphan(f, &freed), 0);
  std::vector<std::pair<Ino, std::uint64_t>> all;
  ASSERT_EQ(store_->LostBlocks(&all), 0);
  EXPECT_EQ(all, (std::vector<std::pair<Ino, std::uint64_t>>{{g, 0}}));
  ExpectInvariants();
}

}  // namespace
}  // namespace s3oram::fs
