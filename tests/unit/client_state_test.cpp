// Tests of the SQLite client-state store against real files in a private
// temporary directory: round trips, atomicity, file mode, and refusal (without
// modification) of anything that is not a valid s3oram state.
#include "oramcore/state/client_state.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "oramcore/crypto/curve_keys.h"
#include "oramcore/state/master_key_switch.h"
#include "oramcore/state/state_file.h"
#include "tests/support/test_seed.h"

namespace s3oram {
namespace {

namespace fs = std::filesystem;

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// The master key of every state these tests make (its wrap in MakeConfig).
const Secret& TestMaster() {
  static const Secret* master = new Secret(NewMasterKey());
  return *master;
}

Result<std::unique_ptr<ClientStateStore>> CreateStore(const std::string& path,
                                                      const FsConfig& config) {
  return ClientStateStore::Create(path, config, Secret::CopyOf(TestMaster().bytes()));
}

// Opens as OramClient::Open does once the passphrase has unwrapped the key.
Result<std::unique_ptr<ClientStateStore>> OpenStore(const std::string& path) {
  S3ORAM_ASSIGN_OR_RETURN(auto unlocked,
                          UnlockedState::UnlockWithMaster(path, Secret::CopyOf(TestMaster().bytes())));
  return ClientStateStore::Open(std::shared_ptr<UnlockedState>(std::move(unlocked)));
}

bool IsSealedState(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  return in.gcount() == 8 && std::memcmp(magic, "S3ORSTAT", 8) == 0;
}

// Runs SQL on a file directly, bypassing the store (to build foreign or
// damaged databases): through the sealed VFS for a state file, plainly for
// anything else.
void RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::unique_ptr<UnlockedState> unlocked;
  if (IsSealedState(path)) {
    auto u = UnlockedState::UnlockWithMaster(path, Secret::CopyOf(TestMaster().bytes()));
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    unlocked = std::move(*u);
    auto opened = unlocked->OpenDatabase();
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    db = *opened;
  } else {
    ASSERT_EQ(
        sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr),
        SQLITE_OK);
  }
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << sql << ": " << msg;
}

OramParams SmallParams() {
  OramParams p;
  p.height = 4;
  p.bucket_size = 8;
  p.evict_rate = 4;
  p.block_bytes = 4096;
  p.capacity_blocks = 32;  // = A * 2^(H-1)
  p.lambda = 80;
  p.parties = 3;
  p.threshold = 1;
  return p;
}

FsConfig MakeConfig(std::mt19937_64& rng, OramParams params = SmallParams()) {
  FsConfig c;
  for (auto& b : c.fs_id) b = static_cast<std::uint8_t>(rng());
  c.params = params;
  c.servers = {"tcp://10.0.0.1:7100", "tcp://10.0.0.2:7100", "tcp://[::1]:7100"};
  for (int i = 0; i < 3; ++i) {
    auto k = GenerateCurveKeypair();
    EXPECT_TRUE(k.ok());
    if (k.ok()) c.server_keys.push_back(k->public_key);
  }
  c.client_key_file = "/home/someone/.config/s3oramfs/laptop.key";
  c.allow_unsafe = true;
  auto wrap = WrapMasterKey(TestMaster(), Secret::CopyOf(std::string_view("pass")), c.fs_id,
                            MinimalKdfParams());
  EXPECT_TRUE(wrap.ok());
  if (wrap.ok()) c.key_wrap = *wrap;
  return c;
}

void ExpectSameConfig(const FsConfig& a, const FsConfig& b) {
  EXPECT_EQ(a.fs_id, b.fs_id);
  EXPECT_EQ(a.params.height, b.params.height);
  EXPECT_EQ(a.params.bucket_size, b.params.bucket_size);
  EXPECT_EQ(a.params.evict_rate, b.params.evict_rate);
  EXPECT_EQ(a.params.block_bytes, b.params.block_bytes);
  EXPECT_EQ(a.params.capacity_blocks, b.params.capacity_blocks);
  EXPECT_EQ(a.params.lambda, b.params.lambda);
  EXPECT_EQ(a.params.parties, b.params.parties);
  EXPECT_EQ(a.params.threshold, b.params.threshold);
  EXPECT_EQ(a.servers, b.servers);
  EXPECT_EQ(a.allow_unsafe, b.allow_unsafe);
  EXPECT_EQ(a.key_wrap, b.key_wrap);
  EXPECT_EQ(a.server_keys, b.server_keys);
  EXPECT_EQ(a.client_key_file, b.client_key_file);
}

class ClientStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "s3oram-state-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    rng_ = testing::SeededRng();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // A freshly created, closed state file.
  std::string MakeState(const std::string& name, const FsConfig& config) {
    std::string path = Path(name);
    auto created = CreateStore(path, config);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return path;
  }

  // Open must fail with Corruption whose message contains every needle, and
  // leave the file byte-identical.
  void ExpectRefused(const std::string& path, const std::vector<std::string>& needles) {
    std::vector<char> before = ReadAll(path);
    auto r = OpenStore(path);
    ASSERT_FALSE(r.ok()) << path << " was accepted";
    EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
    for (const std::string& n : needles) {
      EXPECT_NE(r.status().message().find(n), std::string::npos)
          << "message \"" << r.status().message() << "\" lacks \"" << n << "\"";
    }
    EXPECT_EQ(ReadAll(path), before) << path << " was modified";
  }

  std::string dir_;
  std::mt19937_64 rng_;
};

TEST_F(ClientStateTest, CreateOpenRoundTrip) {
  FsConfig config = MakeConfig(rng_);
  std::string path = Path("state.db");
  {
    auto created = CreateStore(path, config);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    ExpectSameConfig((*created)->config(), config);
    EXPECT_EQ((*created)->counters(), Counters{});
    EXPECT_EQ((*created)->path(), path);
  }
  Counters c{7, 3, ~std::uint64_t{0}, std::uint64_t{1} << 63};  // full u64 range round-trips
  {
    auto opened = OpenStore(path);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    ExpectSameConfig((*opened)->config(), config);
    EXPECT_EQ((*opened)->counters(), Counters{});
    ClientStateStore::Batch b;
    EXPECT_TRUE(b.empty());
    b.SetCounters(c);
    EXPECT_FALSE(b.empty());
    ASSERT_TRUE((*opened)->Commit(b).ok());
    EXPECT_EQ((*opened)->counters(), c);
    // An empty batch is a no-op.
    EXPECT_TRUE((*opened)->Commit(ClientStateStore::Batch{}).ok());
  }
  auto reopened = OpenStore(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->counters(), c);
  ExpectSameConfig((*reopened)->config(), config);
}

TEST_F(ClientStateTest, RoundTripOfEdgeValuesInConfig) {
  OramParams p = SmallParams();
  p.height = 40;
  p.evict_rate = 0xffffffffu;
  p.bucket_size = kMaxBucketSize;
  p.block_bytes = 0xffffffffu;
  p.capacity_blocks = kMaxCapacityBlocks;
  p.lambda = 0;
  FsConfig config = MakeConfig(rng_, p);
  config.servers.clear();
  config.server_keys.clear();
  config.allow_unsafe = false;
  std::string path = MakeState("edge.db", config);
  auto opened = OpenStore(path);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ExpectSameConfig((*opened)->config(), config);
}

TEST_F(ClientStateTest, CreateRejectsUnloadableParams) {
  OramParams p = SmallParams();
  p.capacity_blocks = 33;  // > A * 2^(H-1)
  auto r = CreateStore(Path("bad.db"), MakeConfig(rng_, p));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_FALSE(fs::exists(Path("bad.db")));
  p = SmallParams();
  p.height = 63;
  EXPECT_FALSE(CreateStore(Path("bad.db"), MakeConfig(rng_, p)).ok());
  EXPECT_FALSE(fs::exists(Path("bad.db")));
}

// Sizes the position map would be allocated from are bounded before any
// allocation (fuzz/regressions/client_state_fuzz: huge-capacity, huge-bucket-size).
TEST_F(ClientStateTest, OpenRefusesSizesNoFilesystemHas) {
  FsConfig config = MakeConfig(rng_);
  std::string cap = MakeState("cap.db", config);
  RawSql(cap, "UPDATE meta SET value = 40 WHERE key = 'height'; "
              "UPDATE meta SET value = 549755813888 WHERE key = 'capacity_blocks'");
  ExpectRefused(cap, {"capacity_blocks", "2^32"});
  std::string z = MakeState("z.db", config);
  RawSql(z, "UPDATE meta SET value = 2537621762 WHERE key = 'bucket_size'");
  ExpectRefused(z, {"bucket_size", "exceeds"});
}

// The eviction pace survives a reopen; a state without one (older, or new)
// reads 0.
TEST_F(ClientStateTest, EvictionEstimateRoundTrips) {
  const std::string path = MakeState("state.db", MakeConfig(rng_));
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->eviction_estimate_ms(), 0u);
    ClientStateStore::Batch b;
    b.SetEvictionEstimate(46100);
    EXPECT_FALSE(b.empty());
    ASSERT_TRUE((*store)->Commit(b).ok());
    EXPECT_EQ((*store)->eviction_estimate_ms(), 46100u);
    ClientStateStore::Batch again;
    again.SetEvictionEstimate(41490);
    ASSERT_TRUE((*store)->Commit(again).ok());
  }
  auto reopened = OpenStore(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->eviction_estimate_ms(), 41490u);
}

// An exclusion (a server left out) is durable, replaced per server, read
// back in server order (with its suspect mark), and removed by a
// readmission, mark and all; a server beyond the filesystem's is refused,
// and so is a record with a row missing or a mark other than 1.
TEST_F(ClientStateTest, ExclusionsRoundTripAndMalformedOnesAreRefused) {
  FsConfig config = MakeConfig(rng_);
  const std::string path = MakeState("state.db", config);
  const auto parties = static_cast<std::uint32_t>(config.params.parties);
  ASSERT_GE(parties, 3u);
  const Exclusion last{parties - 1, 7, 1700000000, "down: it did not answer"};
  const Exclusion first{0, 9, 1700000500, "it reported damaged storage", /*suspect=*/true};
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_TRUE((*store)->exclusions().empty());
    ClientStateStore::Batch b;
    b.Exclude(Exclusion{parties - 1, 3, 1, "first reason"});
    EXPECT_FALSE(b.empty());
    ASSERT_TRUE((*store)->Commit(b, /*durable=*/true).ok());
    ClientStateStore::Batch again;
    again.Exclude(last);
    again.Exclude(first);
    ASSERT_TRUE((*store)->Commit(again, /*durable=*/true).ok());
    EXPECT_EQ((*store)->exclusions(), (std::vector<Exclusion>{first, last}));
    ClientStateStore::Batch beyond;
    beyond.Exclude(Exclusion{parties, 1, 1, "no such server"});
    EXPECT_EQ((*store)->Commit(beyond).code(), Status::Code::kInvalidArgument);
  }
  {
    auto reopened = OpenStore(path);
    ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
    EXPECT_EQ((*reopened)->exclusions(), (std::vector<Exclusion>{first, last}));
    ClientStateStore::Batch b;
    b.Readmit(0);
    ASSERT_TRUE((*reopened)->Commit(b, /*durable=*/true).ok());
    EXPECT_EQ((*reopened)->exclusions(), (std::vector<Exclusion>{last}));
  }
  // Excluded again for being down: the readmission left no mark behind.
  const Exclusion down{0, 11, 1700000900, "down"};
  {
    auto reopened = OpenStore(path);
    ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
    EXPECT_EQ((*reopened)->exclusions(), (std::vector<Exclusion>{last}));
    ClientStateStore::Batch b;
    b.Exclude(down);
    ASSERT_TRUE((*reopened)->Commit(b, /*durable=*/true).ok());
  }
  auto again = OpenStore(path);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->exclusions(), (std::vector<Exclusion>{down, last}));

  std::string partial = MakeState("partial.db", config);
  RawSql(partial,
         "INSERT INTO meta(key, value) VALUES ('excluded_since_1', 4), ('excluded_unix_1', 5)");
  ExpectRefused(partial, {"malformed exclusion record 'excluded_since_1'"});
  std::string far = MakeState("far.db", config);
  RawSql(far,
         "INSERT INTO meta(key, value) VALUES ('excluded_since_40', 4), ('excluded_unix_40', 5), "
         "('excluded_reason_40', 'x')");
  ExpectRefused(far, {"malformed exclusion record"});
  std::string mark = MakeState("mark.db", config);
  RawSql(mark,
         "INSERT INTO meta(key, value) VALUES ('excluded_since_1', 4), ('excluded_unix_1', 5), "
         "('excluded_reason_1', 'x'), ('excluded_suspect_1', 2)");
  ExpectRefused(mark, {"malformed exclusion record 'excluded_since_1'"});
}

TEST_F(ClientStateTest, CommitPositionsAndReload) {
  FsConfig config = MakeConfig(rng_);
  std::string path = MakeState("state.db", config);
  const TreeGeometry geo = config.params.geometry();

  // Random distinct slots for a random subset of blocks.
  std::map<BlockId, PositionEntry> expect;
  std::set<std::tuple<LeafId, std::uint32_t, std::uint32_t>> used_buckets_slots;
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ClientStateStore::Batch b;
    for (BlockId id = 0; id < config.params.capacity_blocks; ++id) {
      if (rng_() % 4 == 0) continue;
      for (;;) {
        LeafId leaf = geo.first_leaf() + rng_() % geo.num_leaves();
        auto level = static_cast<std::uint32_t>(rng_() % geo.levels());
        auto slot = static_cast<std::uint32_t>(rng_() % geo.bucket_size);
        if (!used_buckets_slots.insert({geo.BucketOnPath(leaf, level), 0, slot}).second) continue;
        PositionEntry e{{leaf, level, slot}, rng_()};
        expect[id] = e;
        b.PutPosition(id, e);
        break;
      }
    }
    ASSERT_TRUE((*store)->Commit(b, /*durable=*/true).ok());

    // Second batch: erase two blocks and move one (an upsert of an existing id).
    ASSERT_GE(expect.size(), 3u);
    auto it = expect.begin();
    BlockId gone1 = (it++)->first, gone2 = (it++)->first, moved = it->first;
    ClientStateStore::Batch b2;
    b2.ErasePosition(gone1);
    b2.ErasePosition(gone2);
    PositionEntry target = expect[gone1];  // the slot gone1 frees
    target.version = ~std::uint64_t{0};
    b2.PutPosition(moved, target);
    ASSERT_TRUE((*store)->Commit(b2).ok());
    expect.erase(gone1);
    expect.erase(gone2);
    expect[moved] = target;

    // The store's own map agrees.
    auto map = (*store)->LoadPositionMap();
    ASSERT_TRUE(map.ok()) << map.status().ToString();
    EXPECT_EQ(map->live_blocks(), expect.size());
  }
  auto store = OpenStore(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto map = (*store)->LoadPositionMap();
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->capacity(), config.params.capacity_blocks);
  EXPECT_EQ(map->live_blocks(), expect.size());
  for (BlockId id = 0; id < config.params.capacity_blocks; ++id) {
    const PositionEntry* e = map->Find(id);
    auto want = expect.find(id);
    if (want == expect.end()) {
      EXPECT_EQ(e, nullptr) << "block " << id;
      continue;
    }
    ASSERT_NE(e, nullptr) << "block " << id;
    EXPECT_EQ(e->pos, want->second.pos) << "block " << id;
    EXPECT_EQ(e->version, want->second.version) << "block " << id;
  }
}

TEST_F(ClientStateTest, FailedBatchAppliesNothing) {
  FsConfig config = MakeConfig(rng_);
  std::string path = MakeState("state.db", config);
  const TreeGeometry geo = config.params.geometry();
  const Counters base{1, 2, 3, 4};
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok());
    ClientStateStore::Batch b;
    b.SetCounters(base);
    b.PutPosition(0, {{geo.first_leaf(), 0, 0}, 1});
    b.AddPending({10, "write_root", {1, 2, 3}});
    ASSERT_TRUE((*store)->Commit(b).ok());

    // Everything in this batch is valid except the pending seq 10, which is
    // already present: the primary-key violation comes last, after the
    // counters, positions and erase have been executed inside the transaction.
    ClientStateStore::Batch bad;
    bad.SetCounters({9, 9, 9, 9});
    bad.ErasePosition(0);
    bad.PutPosition(1, {{geo.first_leaf() + 1, 2, 3}, 5});
    bad.AddPending({11, "evict", {}});
    bad.AddPending({10, "evict", {4}});
    Status s = (*store)->Commit(bad, /*durable=*/true);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.ToString();
    EXPECT_EQ((*store)->counters(), base);  // in-memory counters unchanged

    // The connection is still usable after the rollback.
    ClientStateStore::Batch good;
    good.AddPending({12, "evict", {}});
    ASSERT_TRUE((*store)->Commit(good).ok());
  }
  auto store = OpenStore(path);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->counters(), base);
  auto map = (*store)->LoadPositionMap();
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->live_blocks(), 1u);
  EXPECT_NE(map->Find(0), nullptr);
  EXPECT_EQ(map->Find(1), nullptr);
  auto pending = (*store)->LoadPending();
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->size(), 2u);
  EXPECT_EQ((*pending)[0].seq, 10u);
  EXPECT_EQ((*pending)[0].kind, "write_root");
  EXPECT_EQ((*pending)[0].payload, (std::vector<std::uint8_t>{1, 2, 3}));
  EXPECT_EQ((*pending)[1].seq, 12u);
}

TEST_F(ClientStateTest, CommitRejectsPositionsOutsideTheTree) {
  FsConfig config = MakeConfig(rng_);
  std::string path = MakeState("state.db", config);
  const TreeGeometry geo = config.params.geometry();
  auto store = OpenStore(path);
  ASSERT_TRUE(store.ok());
  const Position good{geo.first_leaf(), 0, 0};
  struct Case {
    BlockId id;
    Position pos;
  };
  for (Case c : {Case{config.params.capacity_blocks, good},
                 Case{0, {0, 0, 0}},
                 Case{0, {geo.first_leaf() - 1, 0, 0}},
                 Case{0, {geo.first_leaf() << 1, 0, 0}},
                 Case{0, {geo.first_leaf(), config.params.height + 1, 0}},
                 Case{0, {geo.first_leaf(), 0, config.params.bucket_size}}}) {
    ClientStateStore::Batch b;
    b.SetCounters({5, 5, 5, 5});
    b.PutPosition(c.id, {c.pos, 1});
    Status s = (*store)->Commit(b);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  }
  EXPECT_EQ((*store)->counters(), Counters{});
  auto map = (*store)->LoadPositionMap();
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->live_blocks(), 0u);
}

TEST_F(ClientStateTest, FileModeIs0600WhateverTheUmask) {
  FsConfig config = MakeConfig(rng_);
  int n = 0;
  for (mode_t mask : {mode_t{0}, mode_t{022}, mode_t{0277}}) {
    mode_t old = ::umask(mask);
    std::string path = Path("mode" + std::to_string(n++) + ".db");
    auto store = CreateStore(path, config);
    ::umask(old);
    ASSERT_TRUE(store.ok()) << "umask " << mask << ": " << store.status().ToString();
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "umask " << mask;
    // SQLite's side files inherit the database's mode.
    if (::stat((path + "-wal").c_str(), &st) == 0) {
      EXPECT_EQ(st.st_mode & 07777, 0600u) << "wal, umask " << mask;
    }
  }
}

TEST_F(ClientStateTest, CreateRefusesExistingPath) {
  FsConfig config = MakeConfig(rng_);
  std::string other = Path("precious.txt");
  WriteAll(other, {'k', 'e', 'e', 'p'});
  auto r = CreateStore(other, config);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kAlreadyExists) << r.status().ToString();
  EXPECT_EQ(ReadAll(other), (std::vector<char>{'k', 'e', 'e', 'p'}));

  std::string path = MakeState("state.db", config);
  std::vector<char> before = ReadAll(path);
  auto again = CreateStore(path, config);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Status::Code::kAlreadyExists);
  EXPECT_EQ(ReadAll(path), before);
  EXPECT_TRUE(OpenStore(path).ok());
}

TEST_F(ClientStateTest, OpenMissingFileIsNotFound) {
  auto r = OpenStore(Path("nope.db"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_FALSE(fs::exists(Path("nope.db")));  // and not created
}

TEST_F(ClientStateTest, RefusesGarbageAndEmptyFiles) {
  std::vector<char> garbage(8192);
  for (auto& c : garbage) c = static_cast<char>(rng_());
  std::string path = Path("garbage.db");
  WriteAll(path, garbage);
  ExpectRefused(path, {"not an s3oram client state"});

  std::string empty = Path("empty.db");
  WriteAll(empty, {});
  ExpectRefused(empty, {"truncated"});

  // Right magic, garbage after it: the header's checksum fails.
  std::string magic = Path("magic.db");
  std::vector<char> fake = garbage;
  const char kMagic[] = "S3ORSTAT";
  std::copy(kMagic, kMagic + 8, fake.begin());
  WriteAll(magic, fake);
  ExpectRefused(magic, {"copy 0", "damaged"});
}

TEST_F(ClientStateTest, RefusesTruncatedFiles) {
  FsConfig config = MakeConfig(rng_);
  std::string good = MakeState("good.db", config);
  {
    // Give it some content so that it spans several pages.
    auto store = OpenStore(good);
    ASSERT_TRUE(store.ok());
    ClientStateStore::Batch b;
    for (std::uint64_t s = 0; s < 200; ++s) {
      b.AddPending({s, "evict", std::vector<std::uint8_t>(100, 7)});
    }
    ASSERT_TRUE((*store)->Commit(b).ok());
  }
  ASSERT_FALSE(fs::exists(good + "-wal"));  // fully checkpointed on close
  std::vector<char> full = ReadAll(good);
  ASSERT_GT(full.size(), 4 * 4096u);
  std::vector<std::size_t> lengths = {10, 99, 100, 4096, 4097, 8192, full.size() / 2,
                                      full.size() - 4096, full.size() - 1};
  for (std::size_t len = 1; len < full.size(); len += 997) lengths.push_back(len);
  for (std::size_t len : lengths) {
    std::string path = Path("trunc" + std::to_string(len) + ".db");
    WriteAll(path, std::vector<char>(full.begin(), full.begin() + static_cast<long>(len)));
    ExpectRefused(path, {path});
  }
}

// A plain SQLite file (an unencrypted state of an earlier version, or
// anything else) is named for what it is, with the command that upgrades a
// state, and left untouched.
TEST_F(ClientStateTest, RefusesPlainSqliteDatabaseNamingUpgradeState) {
  std::string path = Path("foreign.db");
  RawSql(path, "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT);"
               "INSERT INTO notes(body) VALUES ('hello');");
  std::vector<char> before = ReadAll(path);
  auto r = OpenStore(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("s3oram upgrade-state " + path), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(ReadAll(path), before);
}

// A sealed SQLite database that is not a client state (another program's
// tables under this key) is refused by its application id.
TEST_F(ClientStateTest, RefusesForeignDatabaseInsideASealedFile) {
  std::string path = MakeState("foreign.db", MakeConfig(rng_));
  RawSql(path, "PRAGMA application_id = 7");
  ExpectRefused(path, {"not an s3oram client state", "application_id"});
}

TEST_F(ClientStateTest, RefusesFutureAndUnknownSchemaVersions) {
  FsConfig config = MakeConfig(rng_);
  std::string future = MakeState("future.db", config);
  RawSql(future, "PRAGMA user_version = 4");
  ExpectRefused(future, {"schema version 4", "newer", "versions 2 and 3"});

  // Version 1 (before block encryption) is refused with the way out.
  std::string v1 = MakeState("v1.db", config);
  RawSql(v1, "PRAGMA user_version = 1");
  ExpectRefused(v1, {"schema version 1", "s3oram init"});

  std::string zero = MakeState("zero.db", config);
  RawSql(zero, "PRAGMA user_version = 0");
  ExpectRefused(zero, {"schema version 0"});
}

TEST_F(ClientStateTest, RefusesDamagedMeta) {
  FsConfig config = MakeConfig(rng_);
  std::string missing = MakeState("missing.db", config);
  RawSql(missing, "DELETE FROM meta WHERE key = 'height'");
  ExpectRefused(missing, {"'height'", "missing"});

  std::string range = MakeState("range.db", config);
  RawSql(range, "UPDATE meta SET value = 4294967296 WHERE key = 'bucket_size'");
  ExpectRefused(range, {"'bucket_size'", "out of range"});

  std::string fsid = MakeState("fsid.db", config);
  RawSql(fsid, "UPDATE meta SET value = x'0102' WHERE key = 'fs_id'");
  ExpectRefused(fsid, {"fs_id"});

  std::string notable = MakeState("notable.db", config);
  RawSql(notable, "DROP TABLE pending");
  ExpectRefused(notable, {"pending"});

  std::string counters = MakeState("counters.db", config);
  RawSql(counters, "DELETE FROM counters");
  ExpectRefused(counters, {"counters"});

  // The fs id of the database must be the header's (the key wrap is bound
  // to the header's).
  std::string other = MakeState("other.db", config);
  RawSql(other, "UPDATE meta SET value = zeroblob(16) WHERE key = 'fs_id'");
  ExpectRefused(other, {"another filesystem"});
}

// A passphrase change replaces the wrapped key durably, and the old record
// is not left readable in the file or its WAL.
TEST_F(ClientStateTest, ReplaceKeyWrapLeavesNoOldCopy) {
  FsConfig config = MakeConfig(rng_);
  std::string path = MakeState("wrap.db", config);
  const KeyWrap old_wrap = config.key_wrap;
  auto wrap = WrapMasterKey(NewMasterKey(), Secret::CopyOf(std::string_view("new")), config.fs_id,
                            MinimalKdfParams());
  ASSERT_TRUE(wrap.ok());
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->ReplaceKeyWrap(*wrap).ok());
    EXPECT_EQ((*store)->config().key_wrap, *wrap);
  }
  auto store = OpenStore(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->config().key_wrap, *wrap);
  (*store).reset();  // closed: what is on disk now is what counts
  for (const std::string& file : {path, path + "-wal"}) {
    if (!fs::exists(file)) continue;
    std::vector<char> bytes = ReadAll(file);
    auto found = std::search(bytes.begin(), bytes.end(), old_wrap.sealed.begin(),
                             old_wrap.sealed.end());
    EXPECT_EQ(found, bytes.end()) << "the old wrapped key is still in " << file;
  }
}

TEST_F(ClientStateTest, LoadPositionMapRejectsBadRowsNamingThem) {
  FsConfig config = MakeConfig(rng_);
  const TreeGeometry geo = config.params.geometry();
  const std::string leaf = std::to_string(geo.first_leaf());
  struct Case {
    const char* name;
    std::string sql;
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{
           {"leaf", "INSERT INTO positions VALUES (5, 3, 0, 0, 0)", "id=5"},
           {"level", "INSERT INTO positions VALUES (6, " + leaf + ", 5, 0, 0)", "id=6"},
           {"slot", "INSERT INTO positions VALUES (7, " + leaf + ", 0, 8, 0)", "id=7"},
           {"id", "INSERT INTO positions VALUES (32, " + leaf + ", 0, 0, 0)", "id=32"},
           {"negative", "INSERT INTO positions VALUES (8, -1, 0, 0, 0)", "id=8"},
           {"text", "INSERT INTO positions VALUES (9, 'x', 0, 0, 0)", "id=9"},
           {"dup", "INSERT INTO positions VALUES (1, " + leaf + ", 0, 0, 0), (2, " + leaf +
                       ", 0, 0, 0)",
            "id=2"}}) {
    std::string path = MakeState(std::string(c.name) + ".db", config);
    RawSql(path, c.sql);
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto map = (*store)->LoadPositionMap();
    ASSERT_FALSE(map.ok()) << c.name;
    EXPECT_EQ(map.status().code(), Status::Code::kCorruption) << c.name;
    EXPECT_NE(map.status().message().find(c.needle), std::string::npos)
        << c.name << ": " << map.status().message();
  }
}

TEST_F(ClientStateTest, PendingLogAddAndRemove) {
  FsConfig config = MakeConfig(rng_);
  std::string path = MakeState("state.db", config);
  std::vector<std::uint8_t> big(100000);
  for (auto& b : big) b = static_cast<std::uint8_t>(rng_());
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok());
    auto none = (*store)->LoadPending();
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->empty());
    ClientStateStore::Batch b;
    b.AddPending({3, "evict", big});
    b.AddPending({1, "write_root", {}});  // empty payload round-trips as empty
    b.AddPending({~std::uint64_t{0}, "write_root", {0, 0, 0}});
    ASSERT_TRUE((*store)->Commit(b, /*durable=*/true).ok());
  }
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok());
    auto pending = (*store)->LoadPending();
    ASSERT_TRUE(pending.ok()) << pending.status().ToString();
    ASSERT_EQ(pending->size(), 3u);
    // Ordered by seq as stored (seq = 2^64-1 is stored as -1 and sorts first).
    std::map<std::uint64_t, PendingOp> by_seq;
    for (auto& op : *pending) by_seq[op.seq] = op;
    EXPECT_EQ(by_seq.at(1).kind, "write_root");
    EXPECT_TRUE(by_seq.at(1).payload.empty());
    EXPECT_EQ(by_seq.at(3).payload, big);
    EXPECT_EQ(by_seq.at(~std::uint64_t{0}).payload, (std::vector<std::uint8_t>{0, 0, 0}));

    // Retire seq 3 and reuse it in the same batch; remove seq 1; removing a
    // seq that is not pending is harmless.
    ClientStateStore::Batch b;
    b.RemovePending(3);
    b.RemovePending(1);
    b.RemovePending(999);
    b.AddPending({3, "evict", {9}});
    b.SetCounters({0, 1, 3, 0});
    ASSERT_TRUE((*store)->Commit(b).ok());
  }
  auto store = OpenStore(path);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->counters(), (Counters{0, 1, 3, 0}));
  auto pending = (*store)->LoadPending();
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->size(), 2u);
  std::map<std::uint64_t, PendingOp> by_seq;
  for (auto& op : *pending) by_seq[op.seq] = op;
  EXPECT_EQ(by_seq.count(1), 0u);
  EXPECT_EQ(by_seq.at(3).payload, (std::vector<std::uint8_t>{9}));
}

TEST_F(ClientStateTest, LargeBatchOfPositionsCommits) {
  OramParams p = SmallParams();
  p.height = 16;
  p.evict_rate = 4;
  p.capacity_blocks = 4u << 15;  // 131072
  FsConfig config = MakeConfig(rng_, p);
  std::string path = MakeState("big.db", config);
  const TreeGeometry geo = p.geometry();
  constexpr std::uint64_t kBlocks = 100000;
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok());
    ClientStateStore::Batch b;
    for (BlockId id = 0; id < kBlocks; ++id) {
      // Distinct leaf slots: ids spread over the leaves, then over slots.
      b.PutPosition(id, {{geo.first_leaf() + id % geo.num_leaves(), p.height,
                          static_cast<std::uint32_t>(id / geo.num_leaves())},
                         id * 3});
    }
    b.SetCounters({1, 2, 3, 4});
    ASSERT_TRUE((*store)->Commit(b, /*durable=*/true).ok());
  }
  auto store = OpenStore(path);
  ASSERT_TRUE(store.ok());
  auto map = (*store)->LoadPositionMap();
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->live_blocks(), kBlocks);
  const PositionEntry* e = map->Find(kBlocks - 1);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->version, (kBlocks - 1) * 3);
  EXPECT_EQ(e->pos.leaf, geo.first_leaf() + (kBlocks - 1) % geo.num_leaves());
}

TEST_F(ClientStateTest, StateFileIsSealedAndInWalMode) {
  std::string path = MakeState("wal.db", MakeConfig(rng_));
  std::vector<char> bytes = ReadAll(path);
  ASSERT_GT(bytes.size(), kSealedHeaderBytes);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "S3ORSTAT");
  const std::string text(bytes.begin(), bytes.end());
  EXPECT_EQ(text.find("SQLite format 3"), std::string::npos);
  EXPECT_EQ(text.find("laptop.key"), std::string::npos) << "a meta value in clear";
  auto u = UnlockedState::UnlockWithMaster(path, Secret::CopyOf(TestMaster().bytes()));
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  auto db = (*u)->OpenDatabase();
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(*db, "PRAGMA journal_mode", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close_v2(*db);
}


// A master-key rotation: the switch records it in a copy sealed under the
// new key (the old key opens the file no more), the store loads it with the
// previous key, advances it, and ends it; the header's schema marker keeps a
// build without rotations out meanwhile.
TEST_F(ClientStateTest, ARekeyIsRecordedAdvancedAndEnded) {
  FsConfig config = MakeConfig(rng_);
  const std::string path = MakeState("rekey.db", config);
  {
    auto plain = OpenStore(path);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    EXPECT_FALSE((*plain)->rekey());
    EXPECT_TRUE((*plain)->rekey_old_master().empty());
    // Before any rekey the share MAC is the master key's, nothing stored.
    EXPECT_TRUE((*plain)->share_mac_secrets().Equals(DeriveShareMacSecrets(TestMaster())));
    EXPECT_FALSE((*plain)->rekey_old_share_mac());
    ClientStateStore::Batch b;
    b.SetRekeyProgress(RekeyProgress{});
    EXPECT_EQ((*plain)->Commit(b).code(), Status::Code::kInvalidArgument);
  }
  const Secret next = NewMasterKey();
  auto wrap = WrapMasterKey(next, Secret::CopyOf(std::string_view("new")), config.fs_id,
                            MinimalKdfParams());
  ASSERT_TRUE(wrap.ok());
  std::uint64_t generation = 0;
  {
    auto u = UnlockedState::UnlockWithMaster(path, Secret::CopyOf(TestMaster().bytes()));
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    generation = (*u)->header().generation;
    auto header = SwitchMasterKey(**u, *wrap, next, nullptr);
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    EXPECT_EQ(header->generation, generation + 1);
    EXPECT_EQ(header->wrap, *wrap);
  }
  EXPECT_FALSE(fs::exists(path + ".rekeying"));
  EXPECT_FALSE(OpenStore(path).ok()) << "the previous master key still opens the state";
  auto open_new = [&] {
    auto u = UnlockedState::UnlockWithMaster(path, Secret::CopyOf(next.bytes()));
    EXPECT_TRUE(u.ok()) << u.status().ToString();
    return ClientStateStore::Open(std::shared_ptr<UnlockedState>(std::move(*u)));
  };
  const RekeyProgress purge{RekeyProgress::Phase::kPurge, 64, 99};
  ShareMacSecrets rotated_mac;
  {
    auto store = open_new();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    FsConfig rewrapped = config;
    rewrapped.key_wrap = *wrap;
    ExpectSameConfig((*store)->config(), rewrapped);
    ASSERT_TRUE((*store)->rekey());
    EXPECT_EQ(*(*store)->rekey(), RekeyProgress{});
    EXPECT_TRUE((*store)->rekey_old_master().Equals(TestMaster()));
    // The share MAC: half 1 replaced, half 0 (the old master key's) kept,
    // and the pair before kept for the rotation.
    const ShareMacSecrets before = DeriveShareMacSecrets(TestMaster());
    ASSERT_TRUE((*store)->rekey_old_share_mac());
    EXPECT_TRUE((*store)->rekey_old_share_mac()->Equals(before));
    const ShareMacSecrets& now = (*store)->share_mac_secrets();
    EXPECT_EQ(now.last_replaced, 1u);
    EXPECT_EQ(SharedHalf(now, before), std::optional<std::size_t>(0));
    EXPECT_FALSE(now.half[1].Equals(before.half[1]));
    rotated_mac = now.Copy();
    ClientStateStore::Batch b;
    b.SetRekeyProgress(purge);
    ASSERT_TRUE((*store)->Commit(b).ok());
    EXPECT_EQ(*(*store)->rekey(), purge);
  }
  {
    auto store = open_new();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->rekey());
    EXPECT_EQ(*(*store)->rekey(), purge);
    ClientStateStore::Batch b;
    b.EndRekey();
    EXPECT_FALSE(b.empty());
    ASSERT_TRUE((*store)->Commit(b, /*durable=*/true).ok());
    EXPECT_FALSE((*store)->rekey());
    EXPECT_TRUE((*store)->rekey_old_master().empty());
    EXPECT_FALSE((*store)->rekey_old_share_mac());
  }
  {
    auto store = open_new();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_FALSE((*store)->rekey());
    EXPECT_FALSE((*store)->rekey_old_share_mac());
    EXPECT_TRUE((*store)->share_mac_secrets().Equals(rotated_mac)) << "not stored for good";
  }
  // The next rotation replaces the other half: nothing of the first key's
  // share MAC is left after it.
  const Secret third = NewMasterKey();
  auto third_wrap = WrapMasterKey(third, Secret::CopyOf(std::string_view("third")), config.fs_id,
                                  MinimalKdfParams());
  ASSERT_TRUE(third_wrap.ok());
  {
    auto u = UnlockedState::UnlockWithMaster(path, Secret::CopyOf(next.bytes()));
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    ASSERT_TRUE(SwitchMasterKey(**u, *third_wrap, third, nullptr).ok());
  }
  auto u = UnlockedState::UnlockWithMaster(path, Secret::CopyOf(third.bytes()));
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  auto store = ClientStateStore::Open(std::shared_ptr<UnlockedState>(std::move(*u)));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->rekey_old_share_mac());
  EXPECT_TRUE((*store)->rekey_old_share_mac()->Equals(rotated_mac));
  EXPECT_EQ((*store)->share_mac_secrets().last_replaced, 0u);
  EXPECT_EQ(SharedHalf((*store)->share_mac_secrets(), rotated_mac), std::optional<std::size_t>(1));
  EXPECT_EQ(SharedHalf((*store)->share_mac_secrets(), DeriveShareMacSecrets(TestMaster())),
            std::nullopt);
}

// Version 3 holds the share MAC secrets and version 2 does not; anything
// else is refused rather than read with the wrong key.
TEST_F(ClientStateTest, RefusesShareMacRowsThatDisagreeWithTheSchemaVersion) {
  FsConfig config = MakeConfig(rng_);
  std::string v3 = MakeState("v3-without.db", config);
  RawSql(v3, "PRAGMA user_version = 3; UPDATE meta SET value = 3 WHERE key = 'schema_version'");
  ExpectRefused(v3, {"schema version 3", "lacks the share MAC secrets"});

  std::string v2 = MakeState("v2-with.db", config);
  RawSql(v2,
         "INSERT INTO meta(key, value) VALUES ('share_mac_half0', zeroblob(32)), "
         "('share_mac_half1', zeroblob(32)), ('share_mac_last_replaced', 0)");
  ExpectRefused(v2, {"schema version 2", "only version 3"});

  std::string partial = MakeState("partial.db", config);
  RawSql(partial,
         "INSERT INTO meta(key, value) VALUES ('share_mac_half0', zeroblob(32)); "
         "PRAGMA user_version = 3; UPDATE meta SET value = 3 WHERE key = 'schema_version'");
  ExpectRefused(partial, {"some of the rows", "not all"});

  std::string short_key = MakeState("short.db", config);
  RawSql(short_key,
         "INSERT INTO meta(key, value) VALUES ('share_mac_half0', zeroblob(31)), "
         "('share_mac_half1', zeroblob(32)), ('share_mac_last_replaced', 0); "
         "PRAGMA user_version = 3; UPDATE meta SET value = 3 WHERE key = 'schema_version'");
  ExpectRefused(short_key, {"share_mac_half0", "32-byte"});

  std::string meta_disagrees = MakeState("meta.db", config);
  RawSql(meta_disagrees, "PRAGMA user_version = 3");
  ExpectRefused(meta_disagrees, {"meta schema_version 2", "header's 3"});
}

// The rows and the header's marker must agree; a damaged record is refused.
TEST_F(ClientStateTest, RefusesARekeyRecordThatDoesNotHoldTogether) {
  FsConfig config = MakeConfig(rng_);
  std::string rows = MakeState("rows.db", config);
  RawSql(rows, "INSERT INTO meta(key, value) VALUES ('rekey_phase', 1)");
  ExpectRefused(rows, {"rekey rows", "no rekey"});

  std::string marker = MakeState("marker.db", config);
  RawSql(marker, "PRAGMA user_version = 1002");
  ExpectRefused(marker, {"rekey under way", "missing or malformed"});

  std::string phase = MakeState("phase.db", config);
  RawSql(phase,
         "INSERT INTO meta(key, value) VALUES ('rekey_old_master', zeroblob(32)), "
         "('rekey_phase', 7), ('rekey_next_block', 0), ('rekey_purge_until', 0); "
         "PRAGMA user_version = 1002");
  ExpectRefused(phase, {"rekey_phase 7"});

  std::string key = MakeState("key.db", config);
  RawSql(key,
         "INSERT INTO meta(key, value) VALUES ('rekey_old_master', zeroblob(31)), "
         "('rekey_phase', 1), ('rekey_next_block', 0), ('rekey_purge_until', 0); "
         "PRAGMA user_version = 1002");
  ExpectRefused(key, {"missing or malformed"});
}

}  // namespace
}  // namespace s3oram
