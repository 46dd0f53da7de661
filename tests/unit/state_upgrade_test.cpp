#include "oramcore/state/state_upgrade.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "oramcore/base/random.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/state/client_state.h"
#include "oramcore/state/state_file.h"
#include "tests/support/file_bytes.h"
#include "tests/support/temp_dir.h"

namespace s3oram {
namespace {

constexpr std::string_view kPass = "the old state's passphrase";

using testing::ReadAll;

Secret Pass(std::string_view s = kPass) { return Secret::CopyOf(s); }

void Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
      << sql << ": " << (err ? err : "");
  sqlite3_free(err);
}

std::string Hex(std::span<const std::uint8_t> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::uint8_t x : b) s += {d[x >> 4], d[x & 15]};
  return s;
}

class StateUpgradeTest : public ::testing::Test {
 protected:
  // A state as versions before encryption at rest wrote it: a plain SQLite
  // file in WAL mode with the client's tables, a filesystem table with a
  // distinctive name, and the key wrap in meta rows. Made by copying a sealed
  // state's database out in clear and adding the rows the old format had.
  void SetUp() override {
    old_ = dir_.Sub("vault.s3oram");
    const std::string sealed_path = dir_.Sub("sealed");
    FsConfig c;
    random::Bytes(c.fs_id);
    c.params.height = 3;
    c.params.bucket_size = 4;
    c.params.evict_rate = 2;
    c.params.block_bytes = 64;
    c.params.capacity_blocks = 8;
    c.params.parties = 3;
    c.params.threshold = 1;
    c.allow_unsafe = true;
    c.servers = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"};
    for (int i = 0; i < 3; ++i) c.server_keys.push_back(GenerateCurveKeypair()->public_key);
    c.client_key_file = "/nonexistent/client.key";
    Secret master = NewMasterKey();
    c.key_wrap = *WrapMasterKey(master, Pass(), c.fs_id, MinimalKdfParams());
    wrap_ = c.key_wrap;
    {
      auto store = ClientStateStore::Create(sealed_path, c, Secret::CopyOf(master.bytes()));
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      ClientStateStore::Batch b;
      b.SetCounters({1, 2, 30, 4});
      b.PutPosition(3, {{8, 3, 0}, 5});
      ASSERT_TRUE((*store)->Commit(b, true).ok());
    }
    auto u = UnlockedState::UnlockWithMaster(sealed_path, std::move(master));
    ASSERT_TRUE(u.ok());
    auto src = (*u)->OpenDatabase();
    ASSERT_TRUE(src.ok());
    Exec(*src,
         "CREATE TABLE fs_dirents(name TEXT); INSERT INTO fs_dirents "
         "VALUES('tax-return-2026.pdf')");
    sqlite3* plain = nullptr;
    ASSERT_EQ(sqlite3_open(old_.c_str(), &plain), SQLITE_OK);
    sqlite3_backup* bk = sqlite3_backup_init(plain, "main", *src, "main");
    ASSERT_NE(bk, nullptr);
    ASSERT_EQ(sqlite3_backup_step(bk, -1), SQLITE_DONE);
    sqlite3_backup_finish(bk);
    sqlite3_close_v2(*src);
    Exec(plain, "PRAGMA journal_mode=WAL");
    Exec(plain, "INSERT INTO meta VALUES ('kdf_ops', " + std::to_string(wrap_.kdf.ops) +
                    "), ('kdf_mem', " + std::to_string(wrap_.kdf.mem_bytes) + "), ('key_salt', x'" +
                    Hex(wrap_.salt) + "'), ('key_nonce', x'" + Hex(wrap_.nonce) +
                    "'), ('key_sealed', x'" + Hex(wrap_.sealed) + "')");
    sqlite3_close_v2(plain);
    ASSERT_NE(ReadAll(old_).find("tax-return"), std::string::npos) << "the old format is clear";
  }

  // The upgraded file opens with the passphrase and holds what the old one did.
  void ExpectUpgraded() {
    const std::string bytes = ReadAll(old_);
    EXPECT_EQ(bytes.find("tax-return"), std::string::npos);
    EXPECT_EQ(bytes.find("SQLite format"), std::string::npos);
    auto u = UnlockedState::Unlock(old_, Pass());
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    EXPECT_EQ((*u)->header().wrap, wrap_);
    std::shared_ptr<UnlockedState> shared(std::move(*u));
    auto store = ClientStateStore::Open(shared);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->counters(), (Counters{1, 2, 30, 4}));
    auto map = (*store)->LoadPositionMap();
    ASSERT_TRUE(map.ok());
    ASSERT_NE(map->Find(3), nullptr);
    EXPECT_EQ(map->Find(3)->version, 5u);
    auto db = shared->OpenDatabase();
    ASSERT_TRUE(db.ok());
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(*db, "SELECT name FROM fs_dirents", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "tax-return-2026.pdf");
    sqlite3_finalize(st);
    // The wrap left the database for the header.
    ASSERT_EQ(sqlite3_prepare_v2(*db, "SELECT count(*) FROM meta WHERE key LIKE 'key_%'", -1, &st,
                                 nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close_v2(*db);
  }

  // `s3oram upgrade-state` killed at fault point `point`.
  int RunCliKilledAt(const std::string& point) {
    const std::string passfile = dir_.Sub("pass");
    {
      std::ofstream out(passfile);
      out << kPass << "\n";
    }
    ::chmod(passfile.c_str(), 0600);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("S3ORAM_FAULT", point.c_str(), 1);
      const std::string cli = S3ORAM_TEST_CLI;
      ::execl(cli.c_str(), "s3oram", "upgrade-state", "-s", old_.c_str(), "--passfile",
              passfile.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  }

  testing::TempDir dir_;
  std::string old_;
  KeyWrap wrap_;
};

TEST_F(StateUpgradeTest, OldStatesAreRefusedNamingTheCommandThenUpgraded) {
  auto refused = ReadStateHeader(old_);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("s3oram upgrade-state " + old_), std::string::npos)
      << refused.status().ToString();

  const std::string before = ReadAll(old_);
  auto wrong = UpgradeState(old_, Pass("not it"));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(ReadAll(old_), before) << "a wrong passphrase changed the file";

  auto r = UpgradeState(old_, Pass());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->pages, 0u);
  ExpectUpgraded();
  EXPECT_FALSE(::access((old_ + ".upgrading").c_str(), F_OK) == 0);

  auto again = UpgradeState(old_, Pass());
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already encrypted"), std::string::npos);
}

// A kill at either point leaves a usable file: the old one (and a rerun
// upgrades it) or the new one.
TEST_F(StateUpgradeTest, AKillAtAnyPointLeavesTheOldOrTheNewFile) {
  const std::string original = ReadAll(old_);
  for (const std::string point : {"upgrade.copied", "upgrade.renamed"}) {
    SCOPED_TRACE(point);
    {
      std::ofstream out(old_, std::ios::binary | std::ios::trunc);
      out << original;
    }
    const int status = RunCliKilledAt(point);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    const bool sealed = ReadStateHeader(old_).ok();
    if (point == "upgrade.copied") {
      EXPECT_FALSE(sealed) << "killed before the rename, yet the file changed";
      EXPECT_EQ(ReadAll(old_), original);
      auto r = UpgradeState(old_, Pass());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    } else {
      EXPECT_TRUE(sealed) << "killed after the rename, yet the old file is there";
    }
    ExpectUpgraded();
  }
}

// A sealed state of format 1 is rewritten in the current format (as the
// next mount would do), and a kill before or after the rename leaves the
// old file or the new one, each with its content.
TEST_F(StateUpgradeTest, ASealedFormatOneStateIsConvertedAndAKillLeavesEitherFile) {
  auto make_legacy = [&] {
    std::remove(old_.c_str());
    Secret master = NewMasterKey();
    StateHeader h;
    h.format = kStateLegacyFormat;
    random::Bytes(h.fs_id);
    auto wrap = WrapMasterKey(master, Pass(), h.fs_id, MinimalKdfParams());
    ASSERT_TRUE(wrap.ok());
    h.wrap = *wrap;
    auto u = UnlockedState::Create(old_, h, std::move(master));
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    auto db = (*u)->OpenDatabase();
    ASSERT_TRUE(db.ok());
    Exec(*db, "CREATE TABLE notes(v TEXT); INSERT INTO notes VALUES('kept')");
    sqlite3_close_v2(*db);
  };
  auto format_and_content = [&]() -> std::string {
    auto header = ReadStateHeader(old_);
    if (!header.ok()) return header.status().ToString();
    auto u = UnlockedState::Unlock(old_, Pass());
    if (!u.ok()) return u.status().ToString();
    auto db = (*u)->OpenDatabase();
    if (!db.ok()) return db.status().ToString();
    sqlite3_stmt* st = nullptr;
    std::string v = "none";
    if (sqlite3_prepare_v2(*db, "SELECT v FROM notes", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    sqlite3_close_v2(*db);
    return std::to_string(header->front().format) + ":" + v;
  };
  for (const std::string point : {"state.convert.before_rename", "state.convert.after_rename"}) {
    SCOPED_TRACE(point);
    make_legacy();
    if (HasFatalFailure()) return;
    ASSERT_EQ(format_and_content(), "1:kept");
    const int status = RunCliKilledAt(point);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    EXPECT_EQ(format_and_content(), point == "state.convert.before_rename" ? "1:kept" : "2:kept");
  }
  auto r = UpgradeState(old_, Pass());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("already encrypted in the current format"),
            std::string::npos)
      << r.status().ToString();
  make_legacy();
  r = UpgradeState(old_, Pass());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->from_format, kStateLegacyFormat);
  EXPECT_EQ(format_and_content(), "2:kept");
  EXPECT_FALSE(::access((old_ + ".converting").c_str(), F_OK) == 0);
}

}  // namespace
}  // namespace s3oram
