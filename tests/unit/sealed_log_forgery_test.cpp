// Attacks on the sealed state's write-ahead log by someone who can rewrite
// the files but holds no key: SQLite's frame checksums are public (a linear
// function of the bytes), so each forgery below recomputes them, as an
// attacker would, and only the VFS's authentication of the frame header
// (sealed_vfs.h, bound format) stands in the way. Each case also runs on a
// legacy-format file to show that it is a real attack there.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "oramcore/base/random.h"
#include "oramcore/state/sealed_vfs.h"
#include "tests/support/file_bytes.h"
#include "tests/support/temp_dir.h"

namespace s3oram {
namespace {

namespace stdfs = std::filesystem;

constexpr std::size_t kWalHeader = 32;
constexpr std::size_t kFrameHeader = 24;
constexpr std::size_t kFrame = kFrameHeader + kSealedPageBytes;

std::vector<std::uint8_t> Header(std::uint32_t format) {
  std::vector<std::uint8_t> h(kSealedHeaderBytes, 0);
  std::memcpy(h.data(), "test hdr", 8);
  for (int i = 0; i < 4; ++i)
    h[kSealedFormatOffset + i] = static_cast<std::uint8_t>(format >> (8 * i));
  if (format == kSealedBoundFormat) {
    random::Bytes(std::span<std::uint8_t>(h.data() + kSealedBindingOffset, kSealedBindingBytes));
  }
  return h;
}

using testing::ReadAll;
using testing::WriteAll;

std::uint32_t Get32(const std::string& s, std::size_t at) {
  return (std::uint32_t{static_cast<std::uint8_t>(s[at])} << 24) |
         (std::uint32_t{static_cast<std::uint8_t>(s[at + 1])} << 16) |
         (std::uint32_t{static_cast<std::uint8_t>(s[at + 2])} << 8) |
         std::uint32_t{static_cast<std::uint8_t>(s[at + 3])};
}
void Put32(std::string& s, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (24 - 8 * i));
}

// SQLite's WAL checksum (walChecksumBytes): pairs of 32-bit words, in the
// byte order the header's magic names, folded into (s0, s1).
void Checksum(bool big_endian, const std::string& s, std::size_t at, std::size_t n,
              std::uint32_t& s0, std::uint32_t& s1) {
  auto word = [&](std::size_t i) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(s.data() + i);
    return big_endian ? (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
                            (std::uint32_t{p[2]} << 8) | p[3]
                      : (std::uint32_t{p[3]} << 24) | (std::uint32_t{p[2]} << 16) |
                            (std::uint32_t{p[1]} << 8) | p[0];
  };
  for (std::size_t i = at; i < at + n; i += 8) {
    s0 += word(i) + s1;
    s1 += word(i + 4) + s0;
  }
}

std::size_t Frames(const std::string& wal) { return (wal.size() - kWalHeader) / kFrame; }
std::size_t FrameAt(std::size_t k) { return kWalHeader + k * kFrame; }
std::uint32_t PageOf(const std::string& wal, std::size_t k) { return Get32(wal, FrameAt(k)); }
std::uint32_t CommitOf(const std::string& wal, std::size_t k) { return Get32(wal, FrameAt(k) + 4); }
bool CurrentSalt(const std::string& wal, std::size_t k) {
  return wal.compare(FrameAt(k) + 8, 8, wal, 16, 8) == 0;
}

// The chain value a frame's checksum starts from: the previous frame's
// checksum, or the header's for the first frame.
void StartOf(const std::string& wal, std::size_t k, std::uint32_t& s0, std::uint32_t& s1) {
  const std::size_t at = k == 0 ? 24 : FrameAt(k - 1) + 16;
  s0 = Get32(wal, at);
  s1 = Get32(wal, at + 4);
}

// What an attacker does after editing frame headers: fixes every checksum
// of the chain so that SQLite accepts the log as it now reads. The checksum
// covers the page as SQLite wrote it, in clear, which the attacker cannot
// read; but it is a sum, linear in its start value, the header words and the
// page words, so the new value is the old one plus the checksum of the
// differences over an all-zero page. Frame k of `forged` was written at the
// same index of `*sources[k]` (the original log, or an older one it was
// copied from).
void Rechain(std::string& forged, const std::vector<const std::string*>& sources) {
  const bool big = (Get32(forged, 0) & 1) != 0;
  const std::string zeros(kSealedPageBytes, '\0');
  auto zero_page_sum = [&](std::uint32_t s0, std::uint32_t s1, const std::string& wal,
                           std::size_t k, std::uint32_t* out) {
    Checksum(big, wal, FrameAt(k), 8, s0, s1);
    Checksum(big, zeros, 0, kSealedPageBytes, s0, s1);
    out[0] = s0;
    out[1] = s1;
  };
  for (std::size_t k = 0; k < Frames(forged); ++k) {
    if (!CurrentSalt(forged, k)) break;
    const std::string& src = *sources[k];
    std::uint32_t a0, a1, b0, b1, now[2], then[2];
    StartOf(forged, k, a0, a1);
    StartOf(src, k, b0, b1);
    zero_page_sum(a0, a1, forged, k, now);
    zero_page_sum(b0, b1, src, k, then);
    Put32(forged, FrameAt(k) + 16, Get32(src, FrameAt(k) + 16) + now[0] - then[0]);
    Put32(forged, FrameAt(k) + 20, Get32(src, FrameAt(k) + 20) + now[1] - then[1]);
  }
}
void Rechain(std::string& forged, const std::string& original) {
  Rechain(forged, std::vector<const std::string*>(Frames(forged), &original));
}

class SealedLogForgeryTest : public ::testing::TestWithParam<std::uint32_t> {
 protected:
  void SetUp() override {
    Secret key(kSealedKeyBytes);
    random::Bytes(key.bytes());
    auto v = SealedVfs::Create(std::move(key), Header(GetParam()));
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    vfs_ = std::move(*v);
    path_ = dir_.Sub("state");
  }
  bool bound() const { return GetParam() == kSealedBoundFormat; }

  // In a child that dies without closing (the log stays, as after a kill):
  // `sql`, each statement its own transaction, after the table exists.
  void RunInAChildThatDies(const std::string& path, const std::vector<std::string>& sql) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto db = OpenSealedDatabase(path, *vfs_, !stdfs::exists(path));
      if (!db.ok()) ::_exit(2);
      sqlite3_exec(*db, "PRAGMA wal_autocheckpoint=0", nullptr, nullptr, nullptr);
      for (const auto& s : sql) {
        if (sqlite3_exec(*db, s.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) ::_exit(3);
      }
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  // The rows of t as "count:sum", "refused: <why>" if the state does not
  // open, "opened broken: <why>" if it opens but cannot be read.
  std::string Open(const std::string& path, const std::string& db, const std::string& wal) {
    WriteAll(path, db);
    WriteAll(path + "-wal", wal);
    stdfs::remove(path + "-shm");
    auto opened = OpenSealedDatabase(path, *vfs_, false);
    if (!opened.ok()) return "refused: " + opened.status().ToString();
    sqlite3_stmt* st = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(*opened, "SELECT count(*), total(k) FROM t", -1, &st, nullptr) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      out = std::to_string(sqlite3_column_int64(st, 0)) + ":" +
            std::to_string(static_cast<long long>(sqlite3_column_double(st, 1)));
    } else {
      // Opened, but its content is broken: a half-applied transaction.
      out = std::string("opened broken: ") + sqlite3_errmsg(*opened);
    }
    sqlite3_finalize(st);
    sqlite3_close_v2(*opened);
    return out;
  }

  // A log holding: the table with one row; a transaction T of 60 long rows
  // (many frames); then ten one-row transactions.
  void MakeLog() {
    std::vector<std::string> sql = {"CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)",
                                    "INSERT INTO t VALUES(0, 'first')"};
    std::string t = "BEGIN;";
    for (int i = 1; i <= 60; ++i) {
      t += "INSERT INTO t VALUES(" + std::to_string(i) + ", '" + std::string(300, 'x') + "');";
    }
    sql.push_back(t + "COMMIT;");
    for (int i = 100; i < 110; ++i)
      sql.push_back("INSERT INTO t VALUES(" + std::to_string(i) + ", 'y')");
    RunInAChildThatDies(path_, sql);
    db_ = ReadAll(path_);
    wal_ = ReadAll(path_ + "-wal");
    // T's frames: from after the second commit to its own commit.
    std::size_t commits = 0;
    for (std::size_t k = 0; k < Frames(wal_); ++k) {
      if (CommitOf(wal_, k) == 0) continue;
      ++commits;
      if (commits == 2) t_first_ = k + 1;
      if (commits == 3) t_commit_ = k;
    }
    ASSERT_GT(t_commit_, t_first_ + 4) << "T must span several frames";
  }

  // What a reader may see: all of it, the state before T, or a refusal;
  // never part of T.
  static bool Whole(const std::string& seen) {
    return seen.rfind("refused", 0) == 0 || seen == "1:0" || seen == "61:1830" || seen == "71:2875";
  }

  testing::TempDir dir_;
  std::unique_ptr<SealedVfs> vfs_;
  std::string path_, db_, wal_;
  std::size_t t_first_ = 0, t_commit_ = 0;
};

TEST_P(SealedLogForgeryTest, TheUntouchedLogRecoversEverything) {
  MakeLog();
  if (HasFatalFailure()) return;
  EXPECT_EQ(Open(path_, db_, wal_), "71:2875");
  // And the forger's arithmetic is right: rechaining an untouched log
  // changes no byte.
  std::string same = wal_;
  Rechain(same, wal_);
  EXPECT_TRUE(same == wal_);
}

// A frame in the middle of T marked as a commit: SQLite would stop its
// recovery there and open half of T.
TEST_P(SealedLogForgeryTest, AForgedCommitFrameIsRefused) {
  MakeLog();
  if (HasFatalFailure()) return;
  std::string forged = wal_;
  const std::size_t mid = (t_first_ + t_commit_) / 2;
  Put32(forged, FrameAt(mid) + 4, CommitOf(wal_, t_commit_));
  Rechain(forged, wal_);
  // The rest of the log cut off too, so the forged frame is the last one.
  std::string cut = forged.substr(0, FrameAt(mid + 1));
  const std::string seen = Open(path_, db_, forged);
  const std::string seen_cut = Open(path_, db_, cut);
  if (bound()) {
    EXPECT_EQ(seen.rfind("refused", 0), 0u) << seen;
    EXPECT_NE(seen.find("failed authentication"), std::string::npos) << seen;
    // Alone at the end it reads as a torn last write: discarded, with T.
    EXPECT_EQ(seen_cut, "1:0");
  } else {
    EXPECT_FALSE(Whole(seen) && Whole(seen_cut))
        << "the legacy format is expected to open half of T: " << seen << " / " << seen_cut;
  }
}

// A frame's page number rewritten: its image would land on another page.
TEST_P(SealedLogForgeryTest, ARelabelledFrameIsRefused) {
  MakeLog();
  if (HasFatalFailure()) return;
  std::string forged = wal_;
  const std::size_t a = t_first_ + 1, b = t_first_ + 2;
  ASSERT_NE(PageOf(wal_, a), PageOf(wal_, b));
  Put32(forged, FrameAt(a), PageOf(wal_, b));
  Put32(forged, FrameAt(b), PageOf(wal_, a));
  Rechain(forged, wal_);
  const std::string seen = Open(path_, db_, forged);
  if (bound()) {
    EXPECT_EQ(seen.rfind("refused", 0), 0u) << seen;
  } else {
    EXPECT_NE(seen.rfind("refused", 0), 0u) << "legacy frames carry no page number: " << seen;
  }
}

// A frame of an earlier log generation (same offset, salts rewritten to the
// current ones) spliced into the current log.
TEST_P(SealedLogForgeryTest, AFrameFromAnOlderLogGenerationIsRefused) {
  MakeLog();
  if (HasFatalFailure()) return;
  const std::string old_wal = wal_;
  // Fold the log into the database and start a new generation over it.
  {
    WriteAll(path_, db_);
    WriteAll(path_ + "-wal", wal_);
    stdfs::remove(path_ + "-shm");
    auto db = OpenSealedDatabase(path_, *vfs_, false);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_EQ(sqlite3_exec(*db, "PRAGMA wal_checkpoint(RESTART)", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close_v2(*db);
  }
  std::vector<std::string> sql;
  for (int i = 200; i < 240; ++i) {
    sql.push_back("INSERT INTO t VALUES(" + std::to_string(i) + ", '" + std::string(300, 'z') +
                  "')");
  }
  RunInAChildThatDies(path_, sql);
  const std::string db = ReadAll(path_);
  const std::string wal = ReadAll(path_ + "-wal");
  ASSERT_GT(Frames(wal), 10u);
  ASSERT_NE(wal.compare(16, 8, old_wal, 16, 8), 0) << "a new generation has new salts";
  ASSERT_EQ(Open(path_, db, wal), "111:11655");
  // Frame 3 of the old generation, relabelled with the current salts.
  std::string forged = wal;
  const std::size_t k = 3;
  forged.replace(FrameAt(k), kFrame, old_wal, FrameAt(k), kFrame);
  forged.replace(FrameAt(k) + 8, 8, wal, 16, 8);
  std::vector<const std::string*> sources(Frames(forged), &wal);
  sources[k] = &old_wal;
  Rechain(forged, sources);
  const std::string seen = Open(path_, db, forged);
  if (bound()) {
    EXPECT_EQ(seen.rfind("refused", 0), 0u) << seen;
    EXPECT_NE(seen.find("failed authentication"), std::string::npos) << seen;
  } else {
    EXPECT_NE(seen.rfind("refused", 0), 0u) << "legacy frames carry no salt: " << seen;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, SealedLogForgeryTest,
                         ::testing::Values(kSealedBoundFormat, kSealedLegacyFormat),
                         [](const auto& p) {
                           return p.param == kSealedBoundFormat ? std::string("Bound")
                                                                : std::string("Legacy");
                         });

// Two files under the same key (two copies of one filesystem's state): a
// page, or a whole log, of one is not accepted in the other.
TEST(SealedCopiesTest, APageOrLogOfAnotherCopyIsRefused) {
  testing::TempDir dir;
  Secret key(kSealedKeyBytes);
  random::Bytes(key.bytes());
  auto vfs = SealedVfs::Create(std::move(key));
  ASSERT_TRUE(vfs.ok());
  const std::string a = dir.Sub("a"), b = dir.Sub("b");
  for (const std::string& path : {a, b}) {
    (*vfs)->SetNewFileHeader(Header(kSealedBoundFormat));
    auto db = OpenSealedDatabase(path, **vfs, true);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_EQ(sqlite3_exec(*db,
                           "PRAGMA wal_autocheckpoint=0; CREATE TABLE t(k INTEGER PRIMARY KEY, v "
                           "TEXT); INSERT INTO t VALUES(1, 'same');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_close_v2(*db), SQLITE_OK);
  }
  const std::string a_bytes = ReadAll(a), b_bytes = ReadAll(b);
  ASSERT_EQ(a_bytes.size(), b_bytes.size());
  // B with A's page 2 (the table's root, same content in both).
  std::string mixed = b_bytes;
  mixed.replace(kSealedHeaderBytes + kSealedPageBytes, kSealedPageBytes, a_bytes,
                kSealedHeaderBytes + kSealedPageBytes, kSealedPageBytes);
  WriteAll(b, mixed);
  auto db = OpenSealedDatabase(b, **vfs, false);
  std::string outcome = "opened";
  if (db.ok()) {
    if (sqlite3_exec(*db, "SELECT * FROM t", nullptr, nullptr, nullptr) != SQLITE_OK) {
      outcome = std::string("refused: ") + sqlite3_errmsg(*db);
    }
    sqlite3_close_v2(*db);
  } else {
    outcome = "refused: " + db.status().ToString();
  }
  EXPECT_EQ(outcome.rfind("refused", 0), 0u) << outcome;
  EXPECT_NE((*vfs)->last_error().find("failed authentication at page 2"), std::string::npos)
      << (*vfs)->last_error();
  // B as it was, with a log written for A beside it.
  WriteAll(b, b_bytes);
  {
    auto da = OpenSealedDatabase(a, **vfs, false);
    ASSERT_TRUE(da.ok());
    ASSERT_EQ(sqlite3_exec(*da,
                           "PRAGMA wal_autocheckpoint=0; INSERT INTO t VALUES(2, 'a only'); "
                           "INSERT INTO t VALUES(3, 'a only'); INSERT INTO t VALUES(4, 'a only')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    WriteAll(b + "-wal", ReadAll(a + "-wal"));
    sqlite3_close_v2(*da);
  }
  stdfs::remove(b + "-shm");
  auto db2 = OpenSealedDatabase(b, **vfs, false);
  EXPECT_FALSE(db2.ok()) << "B opened with A's log";
  if (db2.ok()) sqlite3_close_v2(*db2);
  EXPECT_NE((*vfs)->last_error().find("write-ahead log failed authentication"), std::string::npos)
      << (*vfs)->last_error();
}

// The header's format turned from bound to legacy (the page key would then
// be the VFS's own): nothing opens.
TEST(SealedCopiesTest, AFileRelabelledAsLegacyOpensNothing) {
  testing::TempDir dir;
  Secret key(kSealedKeyBytes);
  random::Bytes(key.bytes());
  auto vfs = SealedVfs::Create(std::move(key), Header(kSealedBoundFormat));
  ASSERT_TRUE(vfs.ok());
  const std::string path = dir.Sub("s");
  {
    auto db = OpenSealedDatabase(path, **vfs, true);
    ASSERT_TRUE(db.ok());
    ASSERT_EQ(sqlite3_exec(*db, "CREATE TABLE t(k)", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close_v2(*db);
  }
  std::string bytes = ReadAll(path);
  bytes[kSealedFormatOffset] = static_cast<char>(kSealedLegacyFormat);
  WriteAll(path, bytes);
  auto db = OpenSealedDatabase(path, **vfs, false);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("failed authentication at page 1"), std::string::npos)
      << db.status().ToString();
  // And an unknown format is refused by name.
  bytes[kSealedFormatOffset] = 7;
  WriteAll(path, bytes);
  auto db7 = OpenSealedDatabase(path, **vfs, false);
  ASSERT_FALSE(db7.ok());
  EXPECT_NE(db7.status().message().find("format 7"), std::string::npos) << db7.status().ToString();
}

}  // namespace
}  // namespace s3oram
