#include "oramcore/state/sealed_vfs.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "oramcore/base/random.h"
#include "tests/support/file_bytes.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

namespace stdfs = std::filesystem;

Secret RandomKey() {
  Secret k(kSealedKeyBytes);
  random::Bytes(k.bytes());
  return k;
}

// A header the VFS reads as `format` (bound: a fresh binding nonce).
std::vector<std::uint8_t> Header(std::uint32_t format = kSealedBoundFormat) {
  std::vector<std::uint8_t> h(kSealedHeaderBytes, 0);
  const char magic[] = "test hdr";
  std::copy(magic, magic + 8, h.begin());
  for (int i = 0; i < 4; ++i) h[kSealedFormatOffset + i] = static_cast<std::uint8_t>(format >> (8 * i));
  if (format == kSealedBoundFormat) {
    random::Bytes(std::span<std::uint8_t>(h.data() + kSealedBindingOffset, kSealedBindingBytes));
  }
  return h;
}

using testing::ReadAll;
using testing::WriteAll;

void Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
      << sql << ": " << (err ? err : "");
  sqlite3_free(err);
}

// Every row of t as "k=v;" in key order, or the error.
std::string Dump(sqlite3* db) {
  std::string out;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT k, v FROM t ORDER BY k", -1, &st, nullptr) != SQLITE_OK) {
    return std::string("error: ") + sqlite3_errmsg(db);
  }
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    out += std::to_string(sqlite3_column_int64(st, 0)) + "=" +
           reinterpret_cast<const char*>(sqlite3_column_text(st, 1)) + ";";
  }
  if (rc != SQLITE_DONE) out = std::string("error: ") + sqlite3_errmsg(db);
  sqlite3_finalize(st);
  return out;
}

// A distinctive name per row, long enough that rows span many pages.
std::string Name(int i) { return "tax-return-2026-" + std::to_string(i) + std::string(100, 'q'); }

class SealedVfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    header_ = Header();
    auto v = SealedVfs::Create(RandomKey(), header_);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    vfs_ = std::move(*v);
    path_ = dir_.Sub("state");
  }
  sqlite3* OpenOrDie(bool create = false) {
    auto db = OpenSealedDatabase(path_, *vfs_, create);
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return db.ok() ? *db : nullptr;
  }
  // Creates t with `rows` rows, one transaction each, and closes (the last
  // close checkpoints the log into the database and removes it).
  void Populate(int rows) {
    sqlite3* db = OpenOrDie(true);
    ASSERT_NE(db, nullptr);
    Exec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)");
    for (int i = 0; i < rows; ++i) {
      Exec(db, "INSERT INTO t VALUES(" + std::to_string(i) + ", '" + Name(i) + "')");
    }
    ASSERT_EQ(sqlite3_close_v2(db), SQLITE_OK);
  }
  // A child process commits rows 1..79 one transaction each (optionally
  // leaving one more transaction open), then dies without closing: the log
  // keeps the frames, as after a kill.
  void WriteInAChildThatDies(bool open_transaction) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto db = OpenSealedDatabase(path_, *vfs_, false);
      if (!db.ok()) ::_exit(2);
      sqlite3_exec(*db, "PRAGMA wal_autocheckpoint=0", nullptr, nullptr, nullptr);
      for (int i = 1; i < 80; ++i) {
        const std::string sql =
            "INSERT INTO t VALUES(" + std::to_string(i) + ", '" + Name(i) + "')";
        if (sqlite3_exec(*db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) ::_exit(3);
      }
      if (open_transaction) {
        sqlite3_exec(*db, "BEGIN; INSERT INTO t VALUES(1000, 'never committed');", nullptr, nullptr,
                     nullptr);
      }
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  std::string Expected(int rows) {
    std::string s;
    for (int i = 0; i < rows; ++i) s += std::to_string(i) + "=" + Name(i) + ";";
    return s;
  }

  testing::TempDir dir_;
  std::vector<std::uint8_t> header_;
  std::unique_ptr<SealedVfs> vfs_;
  std::string path_;
};

TEST_F(SealedVfsTest, RoundTripsAndNoContentReachesTheDisk) {
  Populate(200);
  const std::string bytes = ReadAll(path_);
  ASSERT_GE(bytes.size(), kSealedHeaderBytes + 5 * kSealedPageBytes);
  EXPECT_EQ((bytes.size() - kSealedHeaderBytes) % kSealedPageBytes, 0u);
  EXPECT_TRUE(bytes.substr(0, kSealedHeaderBytes) == std::string(header_.begin(), header_.end()));
  EXPECT_EQ(bytes.find("tax-return"), std::string::npos);
  EXPECT_EQ(bytes.find("qqqq"), std::string::npos);
  EXPECT_EQ(bytes.find("SQLite format"), std::string::npos);
  EXPECT_EQ(bytes.find("CREATE TABLE"), std::string::npos);
  EXPECT_FALSE(stdfs::exists(path_ + "-wal"));

  sqlite3* db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(Dump(db), Expected(200));
  sqlite3_close_v2(db);
}

TEST_F(SealedVfsTest, TheLogIsSealedAndASecondConnectionReadsThroughIt) {
  Populate(1);
  sqlite3* writer = OpenOrDie();
  ASSERT_NE(writer, nullptr);
  Exec(writer, "PRAGMA wal_autocheckpoint=0");
  for (int i = 1; i < 100; ++i) {
    Exec(writer, "INSERT INTO t VALUES(" + std::to_string(i) + ", '" + Name(i) + "')");
  }
  const std::string wal = ReadAll(path_ + "-wal");
  ASSERT_GT(wal.size(), 50 * kSealedPageBytes) << "the rows are in the log";
  EXPECT_EQ(wal.find("tax-return"), std::string::npos);
  EXPECT_EQ(wal.find("qqqq"), std::string::npos);
  const std::string shm = ReadAll(path_ + "-shm");
  EXPECT_EQ(shm.find("tax-return"), std::string::npos);

  sqlite3* reader = OpenOrDie();
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(Dump(reader), Expected(100));
  sqlite3_close_v2(reader);
  sqlite3_close_v2(writer);
}

// A transaction larger than the connection's page cache spills pages into
// the log before its commit, and a page changed again after it spilled is
// rewritten in place in its frame (then the frames' checksums are redone):
// every page must still authenticate, for the writer and for a second
// connection, before and after a checkpoint. (A client state commit with
// eight pending root writes of 256 KiB blocks is ~2.2 MB.)
TEST_F(SealedVfsTest, ATransactionThatSpillsAndRewritesPagesInPlaceReadsBack) {
  Populate(1);
  sqlite3* writer = OpenOrDie();
  ASSERT_NE(writer, nullptr);
  Exec(writer, "PRAGMA wal_autocheckpoint=0");
  Exec(writer, "PRAGMA cache_size=8");  // pages: the transaction below spills
  sqlite3* reader = OpenOrDie();
  ASSERT_NE(reader, nullptr);
  std::string want = "0=" + Name(0) + ";";
  for (int round = 0; round < 3; ++round) {
    Exec(writer, "BEGIN IMMEDIATE");
    for (int i = 1; i < 60; ++i) {
      const int k = round * 100 + i;
      Exec(writer, "INSERT INTO t VALUES(" + std::to_string(k) + ", '" + Name(k) +
                       std::string(3000, 'z') + "')");
    }
    // The same pages again, after they spilled.
    for (int i = 1; i < 60; i += 2) {
      const int k = round * 100 + i;
      Exec(writer, "UPDATE t SET v = '" + Name(k) + "' WHERE k = " + std::to_string(k));
    }
    Exec(writer, "COMMIT");
    for (int i = 1; i < 60; ++i) {
      const int k = round * 100 + i;
      want += std::to_string(k) + "=" + Name(k) + (i % 2 == 1 ? "" : std::string(3000, 'z')) + ";";
    }
    EXPECT_EQ(Dump(writer), want) << "round " << round << ": " << vfs_->last_error();
    EXPECT_EQ(Dump(reader), want) << "round " << round << ": " << vfs_->last_error();
  }
  sqlite3_close_v2(reader);
  sqlite3_close_v2(writer);
  sqlite3* again = OpenOrDie();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(Dump(again), want) << vfs_->last_error();
  sqlite3_close_v2(again);
}

TEST_F(SealedVfsTest, AKilledWriterLosesNoCommittedTransaction) {
  Populate(1);
  WriteInAChildThatDies(/*open_transaction=*/true);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(stdfs::exists(path_ + "-wal"));
  sqlite3* db = OpenOrDie();  // recovers the log through the VFS
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(Dump(db), Expected(80));
  sqlite3_close_v2(db);
}

// A SIGKILL can stop a page image's write between two kernel pages (frames
// are never page-aligned in the log), leaving part of the new image and part
// of the old bytes. That newest frame is discarded as SQLite discards any
// torn frame; the same damage before a commit is refused.
TEST_F(SealedVfsTest, ATornNewestLogFrameIsDiscardedButDamageBeforeACommitIsRefused) {
  Populate(1);
  WriteInAChildThatDies(/*open_transaction=*/false);
  if (HasFatalFailure()) return;
  const std::string db_bytes = ReadAll(path_);
  const std::string wal = ReadAll(path_ + "-wal");
  constexpr std::size_t kFrame = 24 + kSealedPageBytes;
  ASSERT_EQ((wal.size() - 32) % kFrame, 0u);
  const std::size_t frames = (wal.size() - 32) / kFrame;
  ASSERT_GT(frames, 10u);
  std::mt19937_64 rng = testing::SeededRng();
  auto tear = [&](std::size_t frame) {
    std::string torn = wal;
    // The image's second kernel page never arrived: older bytes remain.
    const std::size_t page = 32 + frame * kFrame + 24;
    for (std::size_t i = page + 2000; i < page + kSealedPageBytes; ++i) {
      torn[i] = static_cast<char>(rng());
    }
    return torn;
  };
  auto reopen = [&](const std::string& log) {
    WriteAll(path_, db_bytes);
    WriteAll(path_ + "-wal", log);
    stdfs::remove(path_ + "-shm");
    auto db = OpenSealedDatabase(path_, *vfs_, false);
    if (!db.ok()) return db.status().ToString();
    std::string rows = Dump(*db);
    sqlite3_close_v2(*db);
    return rows;
  };

  // The newest frame (row 79's commit) torn: row 79 was never committed.
  EXPECT_EQ(reopen(tear(frames - 1)), Expected(79));
  // Cut inside the newest frame: the same.
  EXPECT_EQ(reopen(wal.substr(0, wal.size() - 1000)), Expected(79));
  // Damage to an early frame, with commits after it: refused, not dropped.
  const std::string refused = reopen(tear(3));
  EXPECT_NE(refused, Expected(80));
  EXPECT_NE(refused.find("failed authentication"), std::string::npos) << refused;
  EXPECT_NE(vfs_->last_error().find("write-ahead log failed authentication"), std::string::npos)
      << vfs_->last_error();
  // And the untouched log recovers everything.
  EXPECT_EQ(reopen(wal), Expected(80));
}

TEST_F(SealedVfsTest, EveryFlippedByteIsRefusedAndNamed) {
  Populate(120);
  const std::string good = ReadAll(path_);
  std::mt19937_64 rng = testing::SeededRng();
  const std::size_t pages = (good.size() - kSealedHeaderBytes) / kSealedPageBytes;
  for (int trial = 0; trial < 60; ++trial) {
    // Every page at least once across the sampled offsets, plus the
    // first page's nonce and tag.
    std::size_t at = kSealedHeaderBytes + (trial < static_cast<int>(pages)
                                               ? trial * kSealedPageBytes + rng() % kSealedPageBytes
                                               : rng() % (good.size() - kSealedHeaderBytes));
    if (trial == 0) at = kSealedHeaderBytes + kSealedPageBytes - 1;
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ (1 + rng() % 255));
    WriteAll(path_, bad);
    auto db = OpenSealedDatabase(path_, *vfs_, false);
    std::string outcome;
    if (!db.ok()) {
      outcome = db.status().ToString();
    } else {
      outcome = Dump(*db);
      sqlite3* handle = *db;
      if (outcome.rfind("error", 0) != 0) {
        // The damaged page may belong to free space: it must still not pass.
        sqlite3_stmt* st = nullptr;
        sqlite3_prepare_v2(handle, "PRAGMA integrity_check", -1, &st, nullptr);
        int rc = sqlite3_step(st);
        outcome = rc == SQLITE_ROW
                      ? std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)))
                      : std::string("error: ") + sqlite3_errmsg(handle);
        sqlite3_finalize(st);
      }
      sqlite3_close_v2(handle);
    }
    EXPECT_NE(outcome, Expected(120)) << "byte " << at;
    EXPECT_NE(outcome, "ok") << "byte " << at << " went unnoticed";
    const std::size_t page = (at - kSealedHeaderBytes) / kSealedPageBytes + 1;
    EXPECT_NE(vfs_->last_error().find("failed authentication at page " + std::to_string(page)),
              std::string::npos)
        << "byte " << at << ": " << vfs_->last_error() << " / " << outcome;
  }
  WriteAll(path_, good);
  sqlite3* db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(Dump(db), Expected(120));
  sqlite3_close_v2(db);
}

TEST_F(SealedVfsTest, AnotherKeyIsRefusedAtOpen) {
  Populate(3);
  auto other = SealedVfs::Create(RandomKey());
  ASSERT_TRUE(other.ok());
  auto db = OpenSealedDatabase(path_, **other, false);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), Status::Code::kCorruption);
  EXPECT_NE(db.status().message().find("failed authentication at page 1"), std::string::npos)
      << db.status().ToString();
}

TEST_F(SealedVfsTest, TruncationIsRefused) {
  Populate(50);
  const std::string good = ReadAll(path_);
  for (std::size_t keep :
       {std::size_t{100}, kSealedHeaderBytes + 1000, good.size() - kSealedPageBytes / 2}) {
    WriteAll(path_, good.substr(0, keep));
    auto db = OpenSealedDatabase(path_, *vfs_, false);
    std::string outcome = db.ok() ? Dump(*db) : db.status().ToString();
    if (db.ok()) sqlite3_close_v2(*db);
    EXPECT_NE(outcome, Expected(50)) << keep;
    EXPECT_TRUE(vfs_->last_error().find("truncated") != std::string::npos)
        << keep << ": " << vfs_->last_error() << " / " << outcome;
  }
}

TEST_F(SealedVfsTest, PlainSqliteCannotReadIt) {
  Populate(5);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  EXPECT_NE(sqlite3_exec(db, "SELECT * FROM t", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_NE(std::string(sqlite3_errmsg(db)).find("not a database"), std::string::npos)
      << sqlite3_errmsg(db);
  sqlite3_close_v2(db);
}

TEST_F(SealedVfsTest, ClearTextFilesAreRefused) {
  Populate(1);
  sqlite3* db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  // Leaving WAL mode would need a rollback journal.
  EXPECT_NE(sqlite3_exec(db, "PRAGMA journal_mode=DELETE; INSERT INTO t VALUES(5, 'x')", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close_v2(db);
  db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  // Temporary tables and sorts stay in memory.
  Exec(db, "CREATE TEMP TABLE scratch(x); INSERT INTO scratch SELECT v FROM t");
  Exec(db, "SELECT * FROM t ORDER BY v DESC");
  sqlite3_close_v2(db);
}

// A snapshot without a file in clear: the backup API copies the sealed
// database into memory (pages opened on the way), and back into a new sealed
// file (pages sealed afresh) with the same page size and reservation.
TEST_F(SealedVfsTest, BackupThroughMemoryMakesASealedCopy) {
  Populate(40);
  sqlite3* db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  sqlite3* mem = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &mem), SQLITE_OK);
  sqlite3_backup* b = sqlite3_backup_init(mem, "main", db, "main");
  ASSERT_NE(b, nullptr) << sqlite3_errmsg(mem);
  EXPECT_EQ(sqlite3_backup_step(b, -1), SQLITE_DONE);
  EXPECT_EQ(sqlite3_backup_finish(b), SQLITE_OK);
  sqlite3_close_v2(db);
  EXPECT_EQ(Dump(mem), Expected(40));

  const std::string copy = dir_.Sub("copy");
  auto c = OpenSealedDatabase(copy, *vfs_, /*create=*/true);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  b = sqlite3_backup_init(*c, "main", mem, "main");
  ASSERT_NE(b, nullptr) << sqlite3_errmsg(*c);
  EXPECT_EQ(sqlite3_backup_step(b, -1), SQLITE_DONE) << vfs_->last_error();
  EXPECT_EQ(sqlite3_backup_finish(b), SQLITE_OK);
  sqlite3_close_v2(*c);
  sqlite3_close_v2(mem);
  EXPECT_EQ(ReadAll(copy).find("tax-return"), std::string::npos);
  c = OpenSealedDatabase(copy, *vfs_, false);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(Dump(*c), Expected(40));
  sqlite3_close_v2(*c);
}

// The sealed bytes look uniformly random: a chi-square test over byte
// values (255 degrees of freedom; 400 is exceeded with probability < 1e-8).
TEST_F(SealedVfsTest, SealedBytesAreUniform) {
  Populate(300);
  const std::string bytes = ReadAll(path_).substr(kSealedHeaderBytes);
  std::vector<double> counts(256, 0);
  for (unsigned char b : bytes) counts[b] += 1;
  const double expected = static_cast<double>(bytes.size()) / 256;
  double chi2 = 0;
  for (double c : counts) chi2 += (c - expected) * (c - expected) / expected;
  std::printf("chi-square %.1f over %zu bytes\n", chi2, bytes.size());
  EXPECT_LT(chi2, 400.0);
}

}  // namespace
}  // namespace s3oram
