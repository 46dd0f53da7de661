// Client-state backup and restore (oramcore/protocol/state_backup.h) against three real
// s3oram-serverd processes: round trip, wrong passphrase, damaged shares
// (robust decoding names the bad server; two bad servers are an integrity
// error), size padding, a backup older than the servers, the fallback to
// the previous generation, and the removal of abandoned temporary copies.
#include "oramcore/protocol/state_backup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "tests/integration/cluster_fixture.h"
#include "tests/support/test_seed.h"

namespace s3oram::testing {
namespace {

namespace fs = std::filesystem;

// 64 blocks of 256 bytes: evictions every 4 accesses, fast.
OramParams Params() { return SmallParams(256, 4, 4); }

class StateBackupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = TestSeed();
    std::printf("[ seed     ] %llu (blocks written with tags derived from it)\n",
                static_cast<unsigned long long>(seed_));
    fs_ = MakeFs(Params());
    ASSERT_TRUE(fs_);
  }

  // Writes blocks [from, to) with content Content(id, seed_ + round).
  void WriteBlocks(std::uint64_t from, std::uint64_t to, std::uint64_t round) {
    auto c = TestOpen(fs_->state, FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (std::uint64_t id = from; id < to; ++id) {
      ASSERT_TRUE((*c)->Write(id, Content(Params().block_bytes, id, seed_ + round)).ok());
    }
  }

  Result<BackupResult> Backup() {
    auto c = TestOpen(fs_->state, FastRetryOptions());
    if (!c.ok()) return c.status();
    return BackupState(**c);
  }

  RestoreOptions Restore(const std::string& name) const {
    RestoreOptions o;
    o.state_path = fs_->dir.Sub(name);
    o.servers = fs_->cluster->endpoints();
    o.server_keys = fs_->cluster->server_public_keys();
    o.client_key_file = fs_->cluster->client_key_file();
    o.timeout = std::chrono::milliseconds(10000);
    return o;
  }

  std::string BackupFile(std::size_t server, std::uint64_t generation) const {
    return fs_->cluster->dir() + "/data-" + std::to_string(server) + "/backup-" +
           std::to_string(generation) + ".bin";
  }

  // XORs 1 into the low byte of `count` elements spread over the share (an
  // element stays below p, so only the reconstruction can notice).
  void DamageShare(std::size_t server, std::uint64_t generation, std::uint64_t first_elem,
                   int count) {
    const std::string path = BackupFile(server, generation);
    ASSERT_TRUE(fs::exists(path)) << path;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    // The element count from the header (serverd/backup_store.h): the record
    // digests follow the elements.
    std::uint64_t elems = 0;
    f.seekg(16);
    f.read(reinterpret_cast<char*>(&elems), 8);
    ASSERT_GT(elems, 0u);
    for (int k = 0; k < count; ++k) {
      const std::uint64_t e = (first_elem + static_cast<std::uint64_t>(k) * 7919) % elems;
      f.seekg(static_cast<std::streamoff>(32 + 4 * e));
      char b = 0;
      f.read(&b, 1);
      b = static_cast<char>(b ^ 1);
      f.seekp(static_cast<std::streamoff>(32 + 4 * e));
      f.write(&b, 1);
    }
    ASSERT_TRUE(f.good());
  }

  // True if nothing named `name*` (the state, temporaries, WAL) exists.
  bool NothingWritten(const std::string& name) const {
    for (const auto& e : fs::directory_iterator(fs_->dir.path())) {
      if (e.path().filename().string().rfind(name, 0) == 0) return false;
    }
    return true;
  }

  void ExpectBlocks(const std::string& state, std::uint64_t from, std::uint64_t to,
                    std::uint64_t round) {
    auto c = TestOpen(state, FastRetryOptions());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (std::uint64_t id = from; id < to; ++id) {
      auto r = (*c)->Read(id);
      ASSERT_TRUE(r.ok()) << "block " << id << ": " << r.status().ToString();
      EXPECT_EQ(*r, Content(Params().block_bytes, id, seed_ + round)) << "block " << id;
    }
  }

  std::uint64_t seed_ = 0;
  std::unique_ptr<TestFs> fs_;
};

TEST_F(StateBackupTest, RestoreRoundTripAndWrongPassphraseWritesNothing) {
  WriteBlocks(0, 20, 1);
  auto b = Backup();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->generation, 1u);
  EXPECT_EQ(b->padded_bytes, std::uint64_t{1} << 20);

  // Wrong passphrase: refused, and not a byte written.
  auto wrong = RestoreState(Restore("restored.s3oram"), Secret::CopyOf(std::string_view("nope")));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Status::Code::kPermissionDenied) << wrong.status().ToString();
  EXPECT_NE(wrong.status().message().find("wrong passphrase"), std::string::npos);
  EXPECT_TRUE(NothingWritten("restored.s3oram"));

  // The original state is gone (new machine): only servers, keys, passphrase.
  for (const char* s : {"", "-wal", "-shm"}) fs::remove(fs_->state + s);
  auto r = RestoreState(Restore("restored.s3oram"), TestPassphrase());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->generation, 1u);
  EXPECT_TRUE(r->warnings.empty()) << r->warnings.front();
  const std::string restored = fs_->dir.Sub("restored.s3oram");
  EXPECT_EQ(fs::status(restored).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  ExpectBlocks(restored, 0, 20, 1);

  // Never over an existing state.
  auto again = RestoreState(Restore("restored.s3oram"), TestPassphrase());
  EXPECT_EQ(again.status().code(), Status::Code::kAlreadyExists) << again.status().ToString();
}

// A backup or restore killed mid-way leaves its sealed temporary copy
// beside the state; the next backup or restore beside it removes every one
// whose writer is gone (its flock can be taken) and keeps one still held.
TEST_F(StateBackupTest, AbandonedTemporaryCopiesAreRemovedAndLiveOnesKept) {
  WriteBlocks(0, 4, 1);
  const std::string state = fs_->state;
  auto make = [](const std::string& path) {
    std::ofstream(path) << "sealed bytes of a killed run";
    return fs::exists(path);
  };
  ASSERT_TRUE(make(state + ".snapshot-AbCd12"));
  ASSERT_TRUE(make(state + ".snapshot-AbCd12-wal"));
  ASSERT_TRUE(make(state + ".restore-Zz9_x0"));
  ASSERT_TRUE(make(state + ".restore-live00"));
  ASSERT_TRUE(make(state + ".restore-notours"));  // not mkstemp's six characters
  const int held = ::open((state + ".restore-live00").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);  // a writer that is still running

  auto b = Backup();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(fs::exists(state + ".snapshot-AbCd12"));
  EXPECT_FALSE(fs::exists(state + ".snapshot-AbCd12-wal"));
  EXPECT_FALSE(fs::exists(state + ".restore-Zz9_x0"));
  EXPECT_TRUE(fs::exists(state + ".restore-live00")) << "removed under a live writer";
  EXPECT_TRUE(fs::exists(state + ".restore-notours"));
  ::close(held);

  // A restore (a new device's attach) cleans beside its own target.
  const std::string target = fs_->dir.Sub("attached.s3oram");
  ASSERT_TRUE(make(target + ".restore-Q1w2e3"));
  auto r = RestoreState(Restore("attached.s3oram"), TestPassphrase());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(fs::exists(target + ".restore-Q1w2e3"));
  for (const auto& e : fs::directory_iterator(fs_->dir.path())) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.rfind("attached.s3oram.", 0) != 0) << name << " left behind";
  }
  ExpectBlocks(target, 0, 4, 1);
}

// The header's key wrap comes from the snapshot, not from what the client
// read at open: a passphrase changed while the client was open (passwd on a
// mounted filesystem) is the one the backup needs.
TEST_F(StateBackupTest, PassphraseChangedWhileOpenIsTheOneTheBackupNeeds) {
  WriteBlocks(0, 3, 6);
  auto c = TestOpen(fs_->state, FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Secret fresh = Secret::CopyOf(std::string_view("a new passphrase for the backup test"));
  {
    // What s3oram passwd does: only the state's clear header changes.
    auto unlocked = testing::TestUnlock(fs_->state);
    ASSERT_TRUE(unlocked.ok()) << unlocked.status().ToString();
    const wire::FsId fs_id = (*unlocked)->header().fs_id;
    auto wrap = WrapMasterKey((*unlocked)->master(), fresh, fs_id, TestKdf());
    ASSERT_TRUE(wrap.ok());
    ASSERT_TRUE((*unlocked)->ReplaceKeyWrap(*wrap).ok());
  }
  ASSERT_TRUE(BackupState(**c).ok());
  c->reset();
  auto old_pass = RestoreState(Restore("pw.s3oram"), TestPassphrase());
  EXPECT_EQ(old_pass.status().code(), Status::Code::kPermissionDenied)
      << old_pass.status().ToString();
  auto r = RestoreState(Restore("pw.s3oram"), fresh);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto opened = OramClient::Open(fs_->dir.Sub("pw.s3oram"), fresh, FastRetryOptions());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto block = (*opened)->Read(1);
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  EXPECT_EQ(*block, Content(Params().block_bytes, 1, seed_ + 6));
}

TEST_F(StateBackupTest, DamagedSharesAreNamedOrRefused) {
  WriteBlocks(0, 10, 2);
  ASSERT_TRUE(Backup().ok());
  // One damaged share: the other two authenticate; the bad server is named.
  DamageShare(1, 1, 1000, 5);
  auto r = RestoreState(Restore("one-bad.s3oram"), TestPassphrase());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->servers_used, (std::vector<std::size_t>{0, 2}));
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_NE(r->warnings[0].find("server 1 (" + fs_->cluster->endpoints()[1] + ")"),
            std::string::npos)
      << r->warnings[0];
  // The server finds the damage itself (record digests) and refuses to serve
  // it, naming the damaged elements.
  EXPECT_NE(r->warnings[0].find("damaged storage"), std::string::npos) << r->warnings[0];
  EXPECT_NE(r->warnings[0].find("do not match their digest"), std::string::npos) << r->warnings[0];
  ExpectBlocks(fs_->dir.Sub("one-bad.s3oram"), 0, 10, 2);

  // Two damaged shares (different places): two servers refuse, one share is
  // not enough, and the failure names both.
  DamageShare(2, 1, 5000, 5);
  auto bad = RestoreState(Restore("two-bad.s3oram"), TestPassphrase());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kUnavailable) << bad.status().ToString();
  for (std::size_t i : {1u, 2u}) {
    EXPECT_NE(bad.status().message().find("server " + std::to_string(i) + " (" +
                                          fs_->cluster->endpoints()[i] + "): damaged storage"),
              std::string::npos)
        << bad.status().ToString();
  }
  EXPECT_TRUE(NothingWritten("two-bad.s3oram"));
}

TEST_F(StateBackupTest, NewestGenerationFailingFallsBackToThePreviousOne) {
  WriteBlocks(0, 6, 3);
  auto first = Backup();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = Backup();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_EQ(second->generation, 2u);
  DamageShare(0, 2, 10, 3);
  DamageShare(1, 2, 20000, 3);
  auto r = RestoreState(Restore("fallback.s3oram"), TestPassphrase());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->generation, 1u);
  ASSERT_FALSE(r->warnings.empty());
  EXPECT_NE(r->warnings[0].find("backup generation 2"), std::string::npos) << r->warnings[0];
  ExpectBlocks(fs_->dir.Sub("fallback.s3oram"), 0, 6, 3);
}

TEST_F(StateBackupTest, PaddingHidesTheStateSize) {
  WriteBlocks(0, 4, 4);
  auto small = Backup();
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  // Grow the state file by ~400 KiB (a table of the test's own: the
  // snapshot copies it like any other).
  {
    testing::TestStateDb state;
    ASSERT_TRUE(testing::OpenTestStateDb(fs_->state, state).ok());
    sqlite3* db = state.db;
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE test_filler(b BLOB);"
                           "INSERT INTO test_filler SELECT randomblob(4096) FROM "
                           "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c "
                           "WHERE x < 100) SELECT x FROM c);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
  }
  auto large = Backup();
  ASSERT_TRUE(large.ok()) << large.status().ToString();
  std::printf("state sizes: %llu and %llu bytes\n",
              static_cast<unsigned long long>(small->state_bytes),
              static_cast<unsigned long long>(large->state_bytes));
  ASSERT_GT(large->state_bytes, small->state_bytes + (300u << 10));
  ASSERT_LT(large->state_bytes, std::uint64_t{1} << 20);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(fs::file_size(BackupFile(i, small->generation)),
              fs::file_size(BackupFile(i, large->generation)))
        << "server " << i;
  }
  EXPECT_EQ(small->share_elems, large->share_elems);
}

TEST_F(StateBackupTest, BackupOlderThanTheServersNeedsForce) {
  WriteBlocks(0, 8, 5);
  ASSERT_TRUE(Backup().ok());
  // Accesses after the backup (enough for evictions) that it does not know.
  WriteBlocks(8, 20, 5);
  auto refused = RestoreState(Restore("old.s3oram"), TestPassphrase());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kFailedPrecondition);
  const std::string& m = refused.status().message();
  EXPECT_NE(m.find("older than the servers"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot be located"), std::string::npos) << m;
  EXPECT_NE(m.find("--force"), std::string::npos) << m;
  EXPECT_NE(m.find("--dry-run"), std::string::npos) << m;
  EXPECT_TRUE(IsOlderThanServersRefusal(refused.status())) << m;
  EXPECT_TRUE(NothingWritten("old.s3oram"));

  // A forced dry run says beforehand what the forced restore loses (issue
  // 42: it used to say only "what was written after that backup"), shows the
  // restored state to `preview`, and writes nothing.
  RestoreOptions dry = Restore("old.s3oram");
  dry.force = true;
  dry.dry_run = true;
  bool previewed = false;
  dry.preview = [&](const std::string& restored, const RestoreReport&) {
    previewed = std::filesystem::exists(restored);
    return Status::Ok();
  };
  auto would = RestoreState(dry, TestPassphrase());
  ASSERT_TRUE(would.ok()) << would.status().ToString();
  EXPECT_TRUE(previewed);
  EXPECT_TRUE(NothingWritten("old.s3oram"));

  RestoreOptions forced = Restore("old.s3oram");
  forced.force = true;
  auto r = RestoreState(forced, TestPassphrase());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lost_blocks, would->lost_blocks) << "the dry run predicted other losses";
  ASSERT_FALSE(r->warnings.empty());
  EXPECT_NE(r->warnings[0].find("forced"), std::string::npos) << r->warnings[0];
  // It opens (the salvaged state is consistent with the servers' counters).
  auto c = TestOpen(fs_->dir.Sub("old.s3oram"), FastRetryOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // What the salvage gave up is listed block by block; every other block of
  // the backup reads back exactly (blocks 0..7 were not written after it).
  std::printf("forced restore lost %zu blocks\n", r->lost_blocks.size());
  const std::set<BlockId> lost(r->lost_blocks.begin(), r->lost_blocks.end());
  for (BlockId id = 0; id < 8; ++id) {
    EXPECT_EQ((*c)->Holds(id), lost.count(id) == 0) << "block " << id;
    if (lost.count(id) != 0) continue;
    auto got = (*c)->Read(id);
    ASSERT_TRUE(got.ok()) << "block " << id << ": " << got.status().ToString();
    EXPECT_EQ(*got, Content(Params().block_bytes, id, seed_ + 5)) << "block " << id;
  }
  // Every later access and eviction works: enough writes for several
  // evictions (the planner's view of the tree must match the servers'),
  // then everything reads back.
  std::map<BlockId, std::vector<std::uint8_t>> model;
  for (int k = 0; k < 6 * static_cast<int>(Params().evict_rate); ++k) {
    const BlockId id = static_cast<BlockId>(k % 24);
    model[id] = Content(Params().block_bytes, id, seed_ + 100 + k);
    const Status st = (*c)->Write(id, model[id]);
    ASSERT_TRUE(st.ok()) << "write " << k << " of block " << id << ": " << st.ToString();
  }
  for (const auto& [id, want] : model) {
    auto got = (*c)->Read(id);
    ASSERT_TRUE(got.ok()) << "block " << id << ": " << got.status().ToString();
    EXPECT_EQ(*got, want) << "block " << id;
  }
}

}  // namespace
}  // namespace s3oram::testing
