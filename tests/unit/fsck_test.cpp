// The fsck checker (fused/fsck.h) on a bare state file: the ORAM tables are
// made by hand with a tiny tree (H = 3, Z = 8, A = 4, 16 blocks of 16 bytes)
// and the filesystem through MetadataStore, so every problem can be injected
// with SQL. Checks that legal crash states are not reported, that each
// injected problem is reported, and that the repairs leave a clean state.
#include "fused/fsck.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "fused/metadata_store.h"
#include "oramcore/protocol/eviction_record.h"
#include "oramcore/state/client_state.h"
#include "oramcore/tree/planner.h"
#include "tests/support/sealed_state.h"
#include "tests/support/temp_dir.h"

namespace s3oram::fs {
namespace {

using testing::TempDir;

constexpr std::uint64_t kCapacity = 16;
constexpr std::uint32_t kBlock = 16;

void Sql(const std::string& path, const std::string& sql) {
  sqlite3* db = s3oram::testing::OpenTestStateDb(path);
  ASSERT_NE(db, nullptr);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << sql << ": " << msg;
}

std::string Messages(const FsckPhaseResult& r) {
  std::string out;
  for (const auto& p : r.problems)
    out += "  [" + std::string(p.repairable ? "R" : "U") + "] " + p.message + "\n";
  return out;
}

class FsckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = dir_.Sub("state.s3oram");
    Sql(state_,
        "CREATE TABLE meta(key TEXT PRIMARY KEY, value);"
        "INSERT INTO meta VALUES ('height', 3), ('bucket_size', 8), ('evict_rate', 4),"
        " ('block_bytes', 16), ('capacity_blocks', 16), ('parties', 3), ('threshold', 1);"
        "CREATE TABLE counters(id INTEGER PRIMARY KEY, nr, ne, seq, epoch);"
        "INSERT INTO counters VALUES (0, 2, 3, 40, 2);"
        "CREATE TABLE pending(seq INTEGER PRIMARY KEY, kind TEXT, payload BLOB);"
        "CREATE TABLE positions(id INTEGER PRIMARY KEY, leaf, level, slot, version);");
    auto m = MetadataStore::Open(s3oram::testing::TestState(state_), kCapacity, kBlock);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    meta_ = std::move(m).value();
    // /f: 40 bytes in three written blocks; /d/g: one block allocated but never
    // written back (legal); /h: written then truncated to 0 (its block is free
    // but keeps its position: legal).
    Attr a;
    ASSERT_EQ(meta_->Create(kRootIno, "f", S_IFREG | 0644, 0, 0, 0, &a), 0);
    f_ = a.ino;
    ASSERT_EQ(meta_->Mkdir(kRootIno, "d", 0755, 0, 0, &a), 0);
    d_ = a.ino;
    ASSERT_EQ(meta_->Create(d_, "g", S_IFREG | 0644, 0, 0, 0, &a), 0);
    g_ = a.ino;
    ASSERT_EQ(meta_->Create(kRootIno, "h", S_IFREG | 0644, 0, 0, 0, &a), 0);
    h_ = a.ino;
    std::vector<BlockMapping> maps;
    ASSERT_EQ(meta_->PrepareWrite(f_, 0, 40, &maps, &a), 0);
    std::vector<WrittenExtent> written;
    for (const auto& m2 : maps) {
      f_blocks_.push_back(m2.id);
      written.push_back({f_, m2.idx, m2.at()});
    }
    ASSERT_EQ(meta_->MarkWritten(written), 0);
    ASSERT_EQ(meta_->PrepareWrite(g_, 0, 5, &maps, &a), 0);
    ASSERT_EQ(meta_->PrepareWrite(h_, 0, 16, &maps, &a), 0);
    const BlockId h_block = maps.at(0).id;
    ASSERT_EQ(meta_->MarkWritten({{h_, 0, maps.at(0).at()}}), 0);
    ASSERT_EQ(meta_->Truncate(h_, 0, nullptr, &a), 0);
    // Positions: f's blocks at leaves, h's stale copy in root slot 1 (< nr).
    Sql(state_, "INSERT INTO positions VALUES (" + std::to_string(f_blocks_[0]) +
                    ", 8, 3, 0, 1), (" + std::to_string(f_blocks_[1]) + ", 9, 3, 0, 4), (" +
                    std::to_string(f_blocks_[2]) + ", 10, 1, 2, 2), (" + std::to_string(h_block) +
                    ", 12, 0, 1, 7)");
    ASSERT_TRUE(meta_->CheckInvariants().ok());
  }

  struct Run {
    FsckPhaseResult p1, p2;
  };
  Run Check(FsckOptions options = {}) {
    auto snap = FsckSnapshot::Load(*s3oram::testing::TestState(state_));
    EXPECT_TRUE(snap.ok()) << snap.status().ToString();
    if (!snap.ok()) return {};
    Run r;
    r.p1 = CheckOram(*snap, options);
    std::set<BlockId> deleted;
    for (const auto& f : r.p1.repairs) {
      if (f.kind == FsckRepair::Kind::kDeletePosition) deleted.insert(f.a);
    }
    r.p2 = CheckMetadata(*snap, options, deleted);
    return r;
  }
  // Applies every repair, then expects a clean check.
  void RepairAndExpectClean(FsckOptions options = {}) {
    Run r = Check(options);
    ASSERT_TRUE(ApplyFsckRepairs(*s3oram::testing::TestState(state_), r.p1.repairs).ok());
    ASSERT_TRUE(ApplyFsckRepairs(*s3oram::testing::TestState(state_), r.p2.repairs).ok());
    Run again = Check(options);
    EXPECT_TRUE(again.p1.problems.empty()) << Messages(again.p1);
    EXPECT_TRUE(again.p2.problems.empty()) << Messages(again.p2);
    EXPECT_TRUE(meta_->CheckInvariants().ok()) << meta_->CheckInvariants().ToString();
  }

  TempDir dir_;
  std::string state_;
  std::unique_ptr<MetadataStore> meta_;
  Ino f_ = 0, d_ = 0, g_ = 0, h_ = 0;
  std::vector<BlockId> f_blocks_;
};

TEST_F(FsckTest, CleanStateAndLegalCrashStatesReportNothing) {
  // An unlinked-but-open file (nlink 0, no entry) is a legal crash state.
  bool orphaned = false;
  ASSERT_EQ(meta_->Unlink(d_, "g", &orphaned), 0);
  ASSERT_TRUE(orphaned);
  // So is a pending eviction that matches the eviction counter (ne = 3).
  Sql(state_, "INSERT INTO pending VALUES (3, 'evict', X'030000000000000001000000')");
  Run r = Check();
  EXPECT_TRUE(r.p1.problems.empty()) << Messages(r.p1);
  EXPECT_TRUE(r.p2.problems.empty()) << Messages(r.p2);
  EXPECT_TRUE(r.p1.position_map_loadable);
  EXPECT_TRUE(r.p1.repairs.empty());
  EXPECT_TRUE(r.p2.repairs.empty());
  EXPECT_EQ(r.p1.notes.size(), 1u);
  EXPECT_EQ(r.p2.notes.size(), 1u);
}

TEST_F(FsckTest, PositionOutsideTheTreeAndDuplicateSlot) {
  // Block 0 (written) gets a leaf outside the tree; h's free block collides
  // with f's block 1 (bucket 9, slot 0).
  Sql(state_, "UPDATE positions SET leaf = 99 WHERE id = " + std::to_string(f_blocks_[0]));
  Sql(state_, "UPDATE positions SET leaf = 9, level = 3, slot = 0 WHERE leaf = 12");
  Run r = Check();
  EXPECT_FALSE(r.p1.position_map_loadable);
  ASSERT_EQ(r.p1.problems.size(), 2u) << Messages(r.p1);
  EXPECT_NE(r.p1.problems[0].message.find("outside the tree"), std::string::npos);
  EXPECT_NE(r.p1.problems[0].message.find("(/f) block 0"), std::string::npos)
      << r.p1.problems[0].message;
  EXPECT_FALSE(r.p1.problems[0].repairable);  // file data: only with --zero-damaged
  EXPECT_NE(r.p1.problems[1].message.find("claimed by 2 blocks"), std::string::npos);
  EXPECT_TRUE(r.p1.problems[1].repairable);  // the free block's row goes
  // With --zero-damaged everything is repairable; block 0 then reads as zeros.
  RepairAndExpectClean(FsckOptions{true});
}

TEST_F(FsckTest, RootSlotAtOrAboveNrAndCounters) {
  Sql(state_, "UPDATE positions SET slot = 5 WHERE leaf = 12");
  Sql(state_, "UPDATE counters SET nr = 9");  // > A = 4
  Run r = Check();
  ASSERT_EQ(r.p1.problems.size(), 1u) << Messages(r.p1);  // slot 5 < nr 9, but nr > A
  EXPECT_NE(r.p1.problems[0].message.find("exceeds the eviction rate"), std::string::npos);
  Sql(state_, "UPDATE counters SET nr = 2");
  r = Check();
  ASSERT_EQ(r.p1.problems.size(), 1u) << Messages(r.p1);
  EXPECT_NE(r.p1.problems[0].message.find("root slot 5"), std::string::npos);
  RepairAndExpectClean();
}

TEST_F(FsckTest, CapacityBeyondTheTree) {
  Sql(state_, "UPDATE meta SET value = 17 WHERE key = 'capacity_blocks'");  // A * 2^(H-1) = 16
  Run r = Check();
  ASSERT_EQ(r.p1.problems.size(), 1u) << Messages(r.p1);
  EXPECT_NE(r.p1.problems[0].message.find("exceeds what the tree holds"), std::string::npos);
  EXPECT_FALSE(r.p1.problems[0].repairable);
}

// A background eviction's record (format 2, with its plan) is as legal a
// crash state as a foreground one's 12 bytes (issue 42: fsck used to call it
// a stray operation and exit non-zero after every kill during an eviction).
TEST_F(FsckTest, APendingBackgroundEvictionIsANote) {
  TreeGeometry geo;
  geo.height = 3;
  geo.bucket_size = 8;
  PositionMap pm(geo, kCapacity);
  auto plan = PlanEviction(geo, 3, pm);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto bytes = EncodeEvictionRecord(EvictionRecord{3, 2, *plan, {}});
  ASSERT_GT(bytes.size(), 12u);
  std::string hex;
  for (std::uint8_t b : bytes) {
    static const char* kDigits = "0123456789ABCDEF";
    hex += kDigits[b >> 4];
    hex += kDigits[b & 15];
  }
  Sql(state_, "INSERT INTO pending VALUES (3, 'evict', X'" + hex + "')");
  Run r = Check();
  EXPECT_TRUE(r.p1.problems.empty()) << Messages(r.p1);
  ASSERT_EQ(r.p1.notes.size(), 1u);
  EXPECT_NE(r.p1.notes[0].find("eviction 3 (attempt 2, background) is pending"), std::string::npos)
      << r.p1.notes[0];
  // A damaged one is reported as such, not passed.
  Sql(state_,
      "UPDATE pending SET payload = X'" + hex.substr(0, hex.size() - 2) + "' WHERE seq = 3");
  r = Check();
  ASSERT_EQ(r.p1.problems.size(), 1u) << Messages(r.p1);
  EXPECT_NE(r.p1.problems[0].message.find("unreadable"), std::string::npos) << Messages(r.p1);
}

TEST_F(FsckTest, StrayPendingOperation) {
  Sql(state_, "INSERT INTO pending VALUES (9, 'evict', X'070000000000000001000000')");
  Run r = Check();
  ASSERT_EQ(r.p1.problems.size(), 1u) << Messages(r.p1);
  EXPECT_NE(r.p1.problems[0].message.find("stray pending eviction 7"), std::string::npos);
  EXPECT_FALSE(r.p1.problems[0].repairable);
}

TEST_F(FsckTest, WrittenBlockWithoutPositionIsDataLoss) {
  Sql(state_, "DELETE FROM positions WHERE id = " + std::to_string(f_blocks_[1]));
  Run r = Check();
  ASSERT_EQ(r.p2.problems.size(), 1u) << Messages(r.p2);
  EXPECT_NE(r.p2.problems[0].message.find("(/f) block 1 (bytes 16..31"), std::string::npos)
      << r.p2.problems[0].message;
  EXPECT_NE(r.p2.problems[0].message.find("no position"), std::string::npos);
  EXPECT_FALSE(r.p2.problems[0].repairable);
  RepairAndExpectClean(FsckOptions{true});
}

// Issue 45: a daemon killed after an access logged its root write but before
// it was sent leaves the block without a position row; the next open sends
// the write and gives it one. That is not data loss (it was reported as such
// by fsck -n right after a kill, and --zero-damaged would have zeroed it).
TEST_F(FsckTest, ABlockWhoseRootWriteIsPendingIsNotLost) {
  const BlockId id = f_blocks_[1];
  Sql(state_, "DELETE FROM positions WHERE id = " + std::to_string(id));
  // slot 2 (u32), the block id (u64), mapped 1, new leaf 9 (u64), version 5
  // (u64), no elements (the metadata phase reads only the id and `mapped`).
  std::string hex = "02000000";
  for (int i = 0; i < 8; ++i) {
    static const char* kDigits = "0123456789ABCDEF";
    const auto b = static_cast<unsigned>((id >> (8 * i)) & 0xFF);
    hex += kDigits[b >> 4];
    hex += kDigits[b & 15];
  }
  hex +=
      "01"
      "0900000000000000"
      "0500000000000000"
      "00000000";
  Sql(state_, "INSERT INTO pending VALUES (" + std::to_string(kPendingRootKey + 2) +
                  ", 'root', X'" + hex + "')");
  Run r = Check();
  EXPECT_TRUE(r.p2.problems.empty()) << Messages(r.p2);
  // The same record for an access that maps nothing does not count.
  Sql(state_, "UPDATE pending SET payload = X'" + hex.substr(0, 24) + "00" + hex.substr(26) + "'");
  r = Check();
  ASSERT_EQ(r.p2.problems.size(), 1u) << Messages(r.p2);
  EXPECT_NE(r.p2.problems[0].message.find("no position"), std::string::npos);
}

TEST_F(FsckTest, WrongLinkCountsAreReportedAndFixed) {
  Sql(state_, "UPDATE fs_inodes SET nlink = 5 WHERE ino = " + std::to_string(f_));
  Sql(state_, "UPDATE fs_inodes SET nlink = 7 WHERE ino = " + std::to_string(d_));
  Run r = Check();
  ASSERT_EQ(r.p2.problems.size(), 2u) << Messages(r.p2);
  EXPECT_NE(r.p2.problems[0].message.find("(/f) has nlink 5, expected 1"), std::string::npos)
      << Messages(r.p2);
  EXPECT_NE(r.p2.problems[1].message.find("(/d) has nlink 7, expected 2"), std::string::npos)
      << Messages(r.p2);
  RepairAndExpectClean();
}

TEST_F(FsckTest, OrphansGoToLostFound) {
  // f loses its entry (an orphan with data); d's entry too, so g hangs below
  // an unreachable directory.
  Sql(state_, "DELETE FROM fs_dirents WHERE name = CAST('f' AS BLOB) OR name = CAST('d' AS BLOB)");
  Run r = Check();
  EXPECT_EQ(r.p2.problems.size(), 2u) << Messages(r.p2);  // f and d (g is found through d)
  RepairAndExpectClean();
  Attr lf, a;
  ASSERT_EQ(meta_->Lookup(kRootIno, kLostFoundName, &lf), 0);
  EXPECT_EQ(lf.mode, S_IFDIR | 0700u);
  EXPECT_EQ(lf.nlink, 3u);  // ".", its entry, and d's ".."
  ASSERT_EQ(meta_->Lookup(lf.ino, "#" + std::to_string(f_), &a), 0);
  EXPECT_EQ(a.size, 40u);
  ASSERT_EQ(meta_->Lookup(lf.ino, "#" + std::to_string(d_), &a), 0);
  ASSERT_EQ(meta_->Lookup(d_, "g", &a), 0);
  Attr root;
  ASSERT_EQ(meta_->GetAttr(kRootIno, &root), 0);
  EXPECT_EQ(root.nlink, 3u);  // ".", "..", lost+found's ".."
}

TEST_F(FsckTest, ExistingLostFoundAndNameClash) {
  Attr lf, a;
  ASSERT_EQ(meta_->Mkdir(kRootIno, kLostFoundName, 0700, 0, 0, &lf), 0);
  const std::string taken = "#" + std::to_string(f_);
  ASSERT_EQ(meta_->Create(lf.ino, taken, S_IFREG | 0600, 0, 0, 0, &a), 0);
  Sql(state_, "DELETE FROM fs_dirents WHERE name = CAST('f' AS BLOB)");
  Run r = Check();
  ASSERT_EQ(r.p2.problems.size(), 1u) << Messages(r.p2);
  EXPECT_NE(r.p2.problems[0].message.find("as " + taken + ".1"), std::string::npos)
      << Messages(r.p2);
  RepairAndExpectClean();
  ASSERT_EQ(meta_->Lookup(lf.ino, taken + ".1", &a), 0);
  EXPECT_EQ(a.ino, f_);
}

TEST_F(FsckTest, DanglingEntriesAndDirectoryCycles) {
  // An entry to a missing inode, and a cycle: d moved below a directory e
  // that is itself below d, detached from the root.
  Sql(state_, "INSERT INTO fs_dirents(parent, name, ino) VALUES (1, CAST('ghost' AS BLOB), 999)");
  Attr e;
  ASSERT_EQ(meta_->Mkdir(d_, "e", 0755, 0, 0, &e), 0);
  Sql(state_, "UPDATE fs_dirents SET parent = " + std::to_string(e.ino) +
                  " WHERE name = CAST('d' AS BLOB)");
  Run r = Check();
  std::string all = Messages(r.p2);
  EXPECT_NE(all.find("points to missing inode 999"), std::string::npos) << all;
  EXPECT_NE(all.find("part of a cycle"), std::string::npos) << all;
  RepairAndExpectClean();
  Attr lf, a;
  ASSERT_EQ(meta_->Lookup(kRootIno, kLostFoundName, &lf), 0);
  ASSERT_EQ(meta_->Lookup(kRootIno, "ghost", &a), ENOENT);
}

TEST_F(FsckTest, LeakedBlocksAndAllocatorState) {
  // A block id neither mapped nor free, and a position for an id that was
  // never allocated.
  Sql(state_, "DELETE FROM fs_free_blocks");
  Sql(state_, "INSERT INTO positions VALUES (14, 15, 3, 4, 1)");
  Run r = Check();
  std::string all = Messages(r.p2);
  EXPECT_NE(all.find("neither mapped by a file nor free (leaked)"), std::string::npos) << all;
  EXPECT_NE(all.find("never allocated to a file (leaked): 14"), std::string::npos) << all;
  RepairAndExpectClean();
}

TEST_F(FsckTest, BlocksBeyondTheSizeAndBadValidLengths) {
  Sql(state_, "UPDATE fs_inodes SET size = 20 WHERE ino = " + std::to_string(f_));
  Run r = Check();
  std::string all = Messages(r.p2);
  EXPECT_NE(all.find("(/f) block 2 (bytes 32..47"), std::string::npos) << all;
  EXPECT_NE(all.find("beyond the file size 20"), std::string::npos) << all;
  EXPECT_NE(all.find("valid length 16 beyond the file size or its extent: set to 4"), std::string::npos) << all;
  RepairAndExpectClean();
}

TEST_F(FsckTest, StateWithoutFilesystemTables) {
  TempDir other;
  const std::string path = other.Sub("bare.s3oram");
  Sql(path,
      "CREATE TABLE meta(key TEXT PRIMARY KEY, value);"
      "INSERT INTO meta VALUES ('height', 3), ('bucket_size', 8), ('evict_rate', 4),"
      " ('block_bytes', 16), ('capacity_blocks', 16);"
      "CREATE TABLE counters(id INTEGER PRIMARY KEY, nr, ne, seq, epoch);"
      "INSERT INTO counters VALUES (0, 0, 0, 1, 1);"
      "CREATE TABLE pending(seq INTEGER PRIMARY KEY, kind TEXT, payload BLOB);"
      "CREATE TABLE positions(id INTEGER PRIMARY KEY, leaf, level, slot, version);");
  auto snap = FsckSnapshot::Load(*s3oram::testing::TestState(path));
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  EXPECT_FALSE(snap->has_fs);
  EXPECT_TRUE(CheckOram(*snap, {}).problems.empty());
  FsckPhaseResult p2 = CheckMetadata(*snap, {});
  EXPECT_TRUE(p2.problems.empty());
  EXPECT_EQ(p2.notes.size(), 1u);
}

}  // namespace
}  // namespace s3oram::fs
