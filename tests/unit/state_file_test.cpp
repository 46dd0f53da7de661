#include "oramcore/state/state_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "oramcore/base/random.h"
#include "tests/support/file_bytes.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

using testing::ReadAll;
using testing::WriteAll;

void Patch(const std::string& path, std::size_t at, const std::vector<std::uint8_t>& bytes) {
  std::string s = ReadAll(path);
  std::copy(bytes.begin(), bytes.end(), s.begin() + static_cast<std::ptrdiff_t>(at));
  WriteAll(path, s);
}

Secret Pass(const std::string& s) { return Secret::CopyOf(std::string_view(s)); }

class StateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.Sub("vault.s3oram");
    random::Bytes(fs_id_);
    Secret master = NewMasterKey();
    auto wrap = WrapMasterKey(master, Pass("old passphrase"), fs_id_, MinimalKdfParams());
    ASSERT_TRUE(wrap.ok()) << wrap.status().ToString();
    StateHeader h;
    h.fs_id = fs_id_;
    h.wrap = *wrap;
    auto u = UnlockedState::Create(path_, h, std::move(master));
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    auto db = (*u)->OpenDatabase();
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_EQ(sqlite3_exec(*db,
                           "CREATE TABLE fs_dirents(name TEXT); "
                           "INSERT INTO fs_dirents VALUES('tax-return-2026.pdf')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close_v2(*db);
  }
  std::string Names(UnlockedState& u) {
    auto db = u.OpenDatabase();
    if (!db.ok()) return db.status().ToString();
    std::string out;
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(*db, "SELECT name FROM fs_dirents", -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW) {
      out += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    sqlite3_close_v2(*db);
    return out;
  }

  testing::TempDir dir_;
  std::string path_;
  FsId fs_id_{};
};

TEST_F(StateFileTest, OpensOnlyWithThePassphraseAndHidesNames) {
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadAll(path_).find("tax-return"), std::string::npos);

  auto header = ReadStateHeader(path_);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  ASSERT_EQ(header->size(), 1u);
  EXPECT_EQ(header->front().fs_id, fs_id_);

  auto wrong = UnlockedState::Unlock(path_, Pass("guess"));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Status::Code::kPermissionDenied);

  auto u = UnlockedState::Unlock(path_, Pass("old passphrase"));
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(Names(**u), "tax-return-2026.pdf");
}

TEST_F(StateFileTest, PassphraseChangeRewrapsWithoutReencrypting) {
  const std::string before = ReadAll(path_).substr(kSealedHeaderBytes);
  {
    auto u = UnlockedState::Unlock(path_, Pass("old passphrase"));
    ASSERT_TRUE(u.ok());
    auto wrap = WrapMasterKey((*u)->master(), Pass("new passphrase"), fs_id_, MinimalKdfParams());
    ASSERT_TRUE(wrap.ok());
    ASSERT_TRUE((*u)->ReplaceKeyWrap(*wrap).ok());
  }
  EXPECT_EQ(ReadAll(path_).substr(kSealedHeaderBytes), before) << "the database was rewritten";
  EXPECT_FALSE(UnlockedState::Unlock(path_, Pass("old passphrase")).ok());
  auto u = UnlockedState::Unlock(path_, Pass("new passphrase"));
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ((*u)->header().generation, 1u);
  EXPECT_EQ(Names(**u), "tax-return-2026.pdf");
}

// A change killed after copy 1 was written: either passphrase opens, and
// whichever does makes both copies agree on it.
TEST_F(StateFileTest, AChangeCutShortIsFinishedOrUndone) {
  const std::string original = ReadAll(path_);
  StateHeader next;
  {
    auto u = UnlockedState::Unlock(path_, Pass("old passphrase"));
    ASSERT_TRUE(u.ok());
    next = (*u)->header();
    auto wrap = WrapMasterKey((*u)->master(), Pass("new passphrase"), fs_id_, MinimalKdfParams());
    ASSERT_TRUE(wrap.ok());
    next.wrap = *wrap;
    next.generation = 1;
  }
  Patch(path_, kStateHeaderCopyBytes, EncodeStateHeaderCopy(next));
  auto header = ReadStateHeader(path_);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  ASSERT_EQ(header->size(), 2u);
  EXPECT_EQ(header->front().generation, 1u) << "the newer copy is tried first";
  {
    auto u = UnlockedState::Unlock(path_, Pass("new passphrase"));
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    EXPECT_EQ(Names(**u), "tax-return-2026.pdf");
  }
  EXPECT_EQ(ReadStateHeader(path_)->size(), 1u);
  EXPECT_FALSE(UnlockedState::Unlock(path_, Pass("old passphrase")).ok());

  WriteAll(path_, original);
  Patch(path_, kStateHeaderCopyBytes, EncodeStateHeaderCopy(next));
  {
    auto u = UnlockedState::Unlock(path_, Pass("old passphrase"));
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    EXPECT_EQ(Names(**u), "tax-return-2026.pdf");
  }
  EXPECT_EQ(ReadStateHeader(path_)->size(), 1u);
  EXPECT_FALSE(UnlockedState::Unlock(path_, Pass("new passphrase")).ok());
}

TEST_F(StateFileTest, EveryDamagedHeaderByteIsRefusedBeforeThePassphrase) {
  const std::string original = ReadAll(path_);
  std::mt19937_64 rng = testing::SeededRng();
  for (int trial = 0; trial < 200; ++trial) {
    // Half in the used fields of either copy, half anywhere in the header.
    std::size_t at = trial % 2 == 0 ? (trial % 4 == 0 ? 0 : kStateHeaderCopyBytes) +
                                          rng() % kStateHeaderUsedBytes
                                    : rng() % kSealedHeaderBytes;
    std::string bad = original;
    bad[at] = static_cast<char>(bad[at] ^ (1 + rng() % 255));
    WriteAll(path_, bad);
    auto header = ReadStateHeader(path_);
    ASSERT_FALSE(header.ok()) << "byte " << at;
    EXPECT_EQ(header.status().code(), Status::Code::kCorruption) << header.status().ToString();
    const std::string copy = "copy " + std::to_string(at / kStateHeaderCopyBytes);
    EXPECT_NE(header.status().message().find(copy), std::string::npos)
        << "byte " << at << ": " << header.status().ToString();
    EXPECT_FALSE(UnlockedState::Unlock(path_, Pass("old passphrase")).ok());
  }
  WriteAll(path_, original);
  EXPECT_TRUE(UnlockedState::Unlock(path_, Pass("old passphrase")).ok());
}

// A state of format 1 (one key for every copy, frame headers not
// authenticated) is rewritten once into the current format: same content,
// a binding of its own, and the caller's lock carried over to the new file.
TEST_F(StateFileTest, ALegacyStateIsReboundWithItsContentAndLock) {
  const std::string legacy = dir_.Sub("legacy.s3oram");
  Secret master = NewMasterKey();
  auto wrap = WrapMasterKey(master, Pass("p"), fs_id_, MinimalKdfParams());
  ASSERT_TRUE(wrap.ok());
  StateHeader h;
  h.format = kStateLegacyFormat;
  h.fs_id = fs_id_;
  h.wrap = *wrap;
  {
    auto u = UnlockedState::Create(legacy, h, std::move(master));
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    auto db = (*u)->OpenDatabase();
    ASSERT_TRUE(db.ok());
    ASSERT_EQ(sqlite3_exec(*db, "CREATE TABLE fs_dirents(name TEXT); INSERT INTO fs_dirents "
                                "VALUES('will.odt')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close_v2(*db);
  }
  auto before = ReadStateHeader(legacy);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(before->front().format, kStateLegacyFormat);

  auto u = UnlockedState::Unlock(legacy, Pass("p"));
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_FALSE((*u)->current_format());
  int lock = ::open(legacy.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX | LOCK_NB), 0);
  ASSERT_TRUE((*u)->Rebind(&lock).ok());
  EXPECT_TRUE((*u)->current_format());
  EXPECT_EQ(Names(**u), "will.odt");
  auto after = ReadStateHeader(legacy);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->front().format, kStateFormat);
  EXPECT_NE(after->front().binding, (std::array<std::uint8_t, 16>{}));
  EXPECT_EQ(after->front().wrap, before->front().wrap);
  // The lock is on the new file.
  const int other = ::open(legacy.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(other, 0);
  EXPECT_NE(::flock(other, LOCK_EX | LOCK_NB), 0);
  ::close(other);
  ::close(lock);
  EXPECT_FALSE(std::filesystem::exists(legacy + ".converting"));
  // Opened afresh with the passphrase, as a mount would.
  auto again = UnlockedState::Unlock(legacy, Pass("p"));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Names(**again), "will.odt");
  // Every new file gets a binding of its own.
  auto mine = ReadStateHeader(path_);
  ASSERT_TRUE(mine.ok());
  EXPECT_NE(mine->front().binding, after->front().binding);
}

TEST_F(StateFileTest, PlainAndForeignFilesAreNamedForWhatTheyAre) {
  const std::string plain = dir_.Sub("old.s3oram");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(plain.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close_v2(db);
  auto h = ReadStateHeader(plain);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(h.status().message().find("s3oram upgrade-state " + plain), std::string::npos)
      << h.status().ToString();

  const std::string other = dir_.Sub("notes.txt");
  WriteAll(other, std::string(8192, 'x'));
  h = ReadStateHeader(other);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("not an s3oram client state"), std::string::npos)
      << h.status().ToString();

  WriteAll(other, ReadAll(path_).substr(0, 1000));
  h = ReadStateHeader(other);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("truncated"), std::string::npos) << h.status().ToString();

  EXPECT_EQ(ReadStateHeader(dir_.Sub("absent")).status().code(), Status::Code::kNotFound);
}

TEST_F(StateFileTest, CreateRefusesAnExistingFile) {
  StateHeader h;
  h.fs_id = fs_id_;
  auto again = UnlockedState::Create(path_, h, NewMasterKey());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Status::Code::kAlreadyExists);
  auto u = UnlockedState::Unlock(path_, Pass("old passphrase"));
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(Names(**u), "tax-return-2026.pdf");
}

}  // namespace
}  // namespace s3oram
