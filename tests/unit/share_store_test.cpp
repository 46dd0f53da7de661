// ShareStore: sparse creation, slot writes, header redundancy, the shadow
// protocol and crash recovery (simulated by destroying the store without
// committing, and by rewinding the header region on disk).

#include "serverd/share_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "oramcore/math/slot_digest.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"

namespace s3oram::serverd {
namespace {

using field::Elem;

using testing::TempDir;

ServerMeta MakeMeta(std::uint32_t h, std::uint32_t z, std::uint32_t m) {
  ServerMeta meta;
  for (std::size_t i = 0; i < meta.fs_id.size(); ++i) meta.fs_id[i] = static_cast<std::uint8_t>(i * 7 + 1);
  meta.server_index = 2;
  meta.shape = {h, z, m};
  return meta;
}

std::vector<Elem> RandomElems(std::mt19937_64& rng, std::size_t n) {
  std::uniform_int_distribution<Elem> d(0, field::kPrime - 1);
  std::vector<Elem> v(n);
  for (Elem& e : v) e = d(rng);
  return v;
}

std::vector<Elem> ReadBucket(const ShareStore& s, std::uint64_t b) {
  const Elem* p = s.tree().Bucket(b);
  return std::vector<Elem>(p, p + s.tree().bucket_elems());
}

bool AllZero(const Elem* p, std::uint64_t n) {
  return std::all_of(p, p + n, [](Elem e) { return e == 0; });
}

void ExpectMetaEq(const ServerMeta& a, const ServerMeta& b) {
  EXPECT_EQ(a.fs_id, b.fs_id);
  EXPECT_EQ(a.server_index, b.server_index);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.applied_seq, b.applied_seq);
  EXPECT_EQ(a.applied_evictions, b.applied_evictions);
}

std::vector<std::uint8_t> ReadRange(const std::string& path, std::uint64_t off, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path;
  EXPECT_EQ(::pread(fd, out.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
  ::close(fd);
  return out;
}

void WriteRange(const std::string& path, std::uint64_t off, const std::vector<std::uint8_t>& d) {
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, d.data(), d.size(), static_cast<off_t>(off)),
            static_cast<ssize_t>(d.size()));
  ::close(fd);
}

void FlipBytes(const std::string& path, std::uint64_t off, std::size_t n) {
  std::vector<std::uint8_t> d = ReadRange(path, off, n);
  for (auto& b : d) b ^= 0x5a;
  WriteRange(path, off, d);
}

std::unique_ptr<ShareStore> MustCreate(const std::string& dir, const ServerMeta& meta) {
  auto r = ShareStore::Create(dir, meta, false);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

std::unique_ptr<ShareStore> MustOpen(const std::string& dir) {
  auto r = ShareStore::Open(dir);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Writes a whole shadow for `eviction` and seals it; returns the contents.
std::vector<std::vector<Elem>> SealRandomShadow(ShareStore& s, std::uint64_t eviction,
                                                const std::vector<std::uint64_t>& buckets,
                                                std::mt19937_64& rng, std::uint32_t attempt = 0) {
  std::vector<std::vector<Elem>> data;
  EXPECT_TRUE(s.shadow().BeginShadow(eviction, attempt, buckets).ok());
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    data.push_back(RandomElems(rng, s.tree().bucket_elems()));
    EXPECT_TRUE(s.shadow().PutShadowBucket(i, data.back()).ok());
  }
  Status st = s.shadow().SealShadow();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return data;
}

const std::vector<std::uint64_t> kPath = {1, 3, 6, 13};  // root to a leaf of H=3

TEST(ShareStore, CreateIsSparseAndReadsZero) {
  TempDir tmp;
  // A data directory that does not exist yet, two levels deep.
  const std::string dir = tmp.path() + "/a/data";
  const ServerMeta meta = MakeMeta(16, 64, 1096);
  auto store = MustCreate(dir, meta);
  ASSERT_NE(store, nullptr);

  const std::uint64_t buckets = (1ull << 17) - 1;
  EXPECT_EQ(store->tree().num_buckets(), buckets);
  EXPECT_EQ(store->tree().bucket_elems(), 64u * 1096u);
  // Header, buckets (~36.8 GB logical), then 8 bytes of digest per slot at the
  // next 4 KiB boundary; then, each from a 4 KiB boundary, 2H = 32 spare
  // places, their digests, and two copies of the bucket map (4 bytes a
  // bucket after a 32-byte header, a 4-byte checksum).
  auto page_up = [](std::uint64_t x) { return (x + 4095) / 4096 * 4096; };
  const std::uint64_t bucket_bytes = 64 * 1096 * 4;
  const std::uint64_t data_end = 4096 + buckets * bucket_bytes;
  const std::uint64_t digests_end = page_up(data_end) + buckets * 64 * 8;
  const std::uint64_t spare_end = page_up(digests_end) + 32 * bucket_bytes;
  const std::uint64_t spare_digests_end = page_up(spare_end) + 32 * 64 * 8;
  const std::uint64_t map_copy = page_up(32 + 4 * buckets + 4);
  EXPECT_EQ(store->inspection().file_bytes(), page_up(spare_digests_end) + 2 * map_copy);
  struct stat st{};
  ASSERT_EQ(::stat((dir + "/shares.bin").c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), store->inspection().file_bytes());
  EXPECT_LT(store->inspection().allocated_bytes(), 1u << 20) << "creating the store wrote data";

  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((tmp.path() + "/a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  for (std::uint64_t b : {std::uint64_t{1}, std::uint64_t{2}, buckets / 2, buckets}) {
    EXPECT_TRUE(AllZero(store->tree().Bucket(b), store->tree().bucket_elems())) << "bucket " << b;
  }
  EXPECT_EQ(store->meta().applied_seq, 0u);
  EXPECT_EQ(store->shadow().SealedEviction(), 0u);

  // One slot at the far end allocates about one slot, not the file.
  std::vector<Elem> slot(store->tree().slot_elems(), 12345);
  ASSERT_TRUE(store->tree().WriteSlot(buckets, 63, slot, 1, 1).ok());
  EXPECT_LT(store->inspection().allocated_bytes(), 1u << 20);
  const Elem* last = store->tree().Bucket(buckets);
  EXPECT_TRUE(AllZero(last, 63 * store->tree().slot_elems()));
  EXPECT_TRUE(std::equal(slot.begin(), slot.end(), last + 63 * store->tree().slot_elems()));
}

TEST(ShareStore, WriteSlotReadsBackThroughMapping) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
  ASSERT_NE(store, nullptr);
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::vector<Elem>> model;
  for (int i = 0; i < 40; ++i) {
    const std::uint64_t b = 1 + rng() % store->tree().num_buckets();
    const auto slot = static_cast<std::uint32_t>(rng() % 4);
    auto data = RandomElems(rng, store->tree().slot_elems());
    ASSERT_TRUE(store->tree().WriteSlot(b, slot, data, 100 + i, 7).ok());
    model[{b, slot}] = data;
  }
  for (std::uint64_t b = 1; b <= store->tree().num_buckets(); ++b) {
    for (std::uint32_t slot = 0; slot < 4; ++slot) {
      const Elem* p = store->tree().Bucket(b) + slot * store->tree().slot_elems();
      auto it = model.find({b, slot});
      if (it == model.end()) {
        EXPECT_TRUE(AllZero(p, store->tree().slot_elems()));
      } else {
        EXPECT_TRUE(std::equal(it->second.begin(), it->second.end(), p)) << b << "/" << slot;
      }
    }
  }
  EXPECT_EQ(store->meta().applied_seq, 139u);
  EXPECT_EQ(store->meta().epoch, 7u);
  // seq and epoch only move forward.
  ASSERT_TRUE(store->tree().WriteSlot(1, 0, model.begin()->second, 5, 3).ok());
  EXPECT_EQ(store->meta().applied_seq, 139u);
  EXPECT_EQ(store->meta().epoch, 7u);
}

TEST(ShareStore, WriteSlotRejectsBadArguments) {
  TempDir tmp;
  auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
  ASSERT_NE(store, nullptr);
  std::vector<Elem> ok(8, 1);
  std::vector<Elem> short_data(7, 1);
  EXPECT_EQ(store->tree().WriteSlot(0, 0, ok, 1, 1).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store->tree().WriteSlot(16, 0, ok, 1, 1).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store->tree().WriteSlot(1, 4, ok, 1, 1).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store->tree().WriteSlot(1, 0, short_data, 1, 1).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store->meta().applied_seq, 0u);
  EXPECT_TRUE(store->tree().WriteSlot(15, 3, ok, 1, 1).ok());
}

// Benchmarks' age fill: whole buckets with digests on a tree never used, so
// that no bucket stays a hole; refused once a root write was applied, with
// the tree unchanged.
TEST(ShareStore, FillUnusedBucketsWritesEveryBucketUntilTheTreeIsUsed) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
  ASSERT_NE(store, nullptr);
  const std::uint64_t n = store->tree().num_buckets(), be = store->tree().bucket_elems();
  const auto data = RandomElems(rng, n * be);
  EXPECT_EQ(store->age_fill().FillUnusedBuckets(0, std::span(data).first(be)).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(store->age_fill().FillUnusedBuckets(n, std::span(data).first(2 * be)).code(),
            Status::Code::kInvalidArgument);
  ASSERT_TRUE(store->age_fill().FillUnusedBuckets(1, std::span(data).first(be)).ok());
  ASSERT_TRUE(store->age_fill().FillUnusedBuckets(2, std::span(data).subspan(be)).ok());
  auto holes = store->tree().Holes(1, n);
  ASSERT_TRUE(holes.ok()) << holes.status().ToString();
  for (std::uint64_t b = 0; b < n; ++b) {
    EXPECT_FALSE((*holes)[b]) << "bucket " << b + 1;
    EXPECT_TRUE(std::equal(data.begin() + static_cast<std::ptrdiff_t>(b * be),
                           data.begin() + static_cast<std::ptrdiff_t>((b + 1) * be),
                           store->tree().Bucket(b + 1)))
        << "bucket " << b + 1;
  }
  auto flags = store->scrub().Scrub(1, n);
  ASSERT_TRUE(flags.ok()) << flags.status().ToString();
  EXPECT_EQ(std::count(flags->begin(), flags->end(), 1), 0) << "a filled slot fails its digest";

  std::vector<Elem> slot(store->tree().slot_elems(), 7);
  ASSERT_TRUE(store->tree().WriteSlot(1, 0, slot, 1, 1).ok());
  const Status refused = store->age_fill().FillUnusedBuckets(2, std::span(data).first(be));
  EXPECT_EQ(refused.code(), Status::Code::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find("has been used"), std::string::npos) << refused.ToString();
  EXPECT_TRUE(std::equal(data.begin() + static_cast<std::ptrdiff_t>(be),
                         data.begin() + static_cast<std::ptrdiff_t>(2 * be),
                         store->tree().Bucket(2)));

  // An eviction under way (its root snapshot taken) counts as use too.
  TempDir tmp2;
  auto fresh = MustCreate(tmp2.path(), MakeMeta(3, 4, 8));
  ASSERT_NE(fresh, nullptr);
  EXPECT_TRUE(fresh->age_fill().CheckUnused().ok());
  ASSERT_TRUE(fresh->shadow().SnapshotRoot(0).ok());
  EXPECT_EQ(fresh->age_fill().CheckUnused().code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(fresh->age_fill().FillUnusedBuckets(2, std::span(data).first(be)).code(),
            Status::Code::kFailedPrecondition);
}

TEST(ShareStore, ReopenPersistsMetaAndData) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  const ServerMeta meta = MakeMeta(4, 3, 5);
  std::vector<std::vector<Elem>> before;
  {
    auto store = MustCreate(tmp.path(), meta);
    ASSERT_NE(store, nullptr);
    for (std::uint64_t b = 1; b <= store->tree().num_buckets(); b += 3) {
      ASSERT_TRUE(store->tree()
                      .WriteSlot(b, static_cast<std::uint32_t>(b % 3),
                                 RandomElems(rng, store->tree().slot_elems()), b, 4)
                      .ok());
    }
    ServerMeta m = store->meta();
    m.epoch = 99;
    ASSERT_TRUE(store->tree().UpdateMeta(m).ok());
    for (std::uint64_t b = 1; b <= store->tree().num_buckets(); ++b)
      before.push_back(ReadBucket(*store, b));
  }
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  ServerMeta expect = meta;
  expect.epoch = 99;
  expect.applied_seq = 31;
  ExpectMetaEq(store->meta(), expect);
  for (std::uint64_t b = 1; b <= store->tree().num_buckets(); ++b) {
    EXPECT_EQ(ReadBucket(*store, b), before[b - 1]) << "bucket " << b;
  }
}

// The root snapshot an eviction reads: durable across a reopen, unchanged by
// later root writes, kept for a retried PREPARE of the same eviction, ignored
// for another one, and checked against its digests (a changed byte in
// root.bin is Damaged, never an input).
TEST(ShareStore, RootSnapshotKeepsTheEvictionsInputAcrossRootWritesAndRestarts) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  const ServerMeta meta = MakeMeta(3, 4, 5);
  std::vector<Elem> root_before;
  {
    auto store = MustCreate(tmp.path(), meta);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->shadow().RootSnapshotEviction(), 0u);
    EXPECT_FALSE(store->shadow().SnapshotRoot(1).ok());  // not the next eviction
    for (std::uint32_t q = 0; q < 4; ++q) {
      ASSERT_TRUE(store->tree()
                      .WriteSlot(1, q, RandomElems(rng, store->tree().slot_elems()), q + 1, 1)
                      .ok());
    }
    root_before = ReadBucket(*store, 1);
    ASSERT_TRUE(store->shadow().SnapshotRoot(0).ok());
    EXPECT_EQ(store->shadow().RootSnapshotEviction(), 1u);
    // The next round overwrites the live root.
    ASSERT_TRUE(
        store->tree().WriteSlot(1, 0, RandomElems(rng, store->tree().slot_elems()), 9, 1).ok());
    ASSERT_NE(ReadBucket(*store, 1), root_before);
    // A second snapshot of the same eviction keeps the first.
    ASSERT_TRUE(store->shadow().SnapshotRoot(0).ok());
    std::vector<Elem> got(store->tree().bucket_elems());
    ASSERT_TRUE(store->shadow().ReadRootSnapshot(0, got).ok());
    EXPECT_EQ(got, root_before);
  }
  {
    auto store = MustOpen(tmp.path());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->shadow().RootSnapshotEviction(), 1u);
    std::vector<Elem> got(store->tree().bucket_elems());
    ASSERT_TRUE(store->shadow().ReadRootSnapshot(0, got).ok());
    EXPECT_EQ(got, root_before);
    EXPECT_EQ(store->shadow().RootSnapshotDigests().size(), 4u);
    EXPECT_FALSE(store->shadow().ReadRootSnapshot(1, got).ok());
  }
  // Damage on disk: element 2 of slot 1 of the snapshot.
  FlipBytes(tmp.path() + "/root.bin", 4096 + (5 + 2) * sizeof(Elem), 1);
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  std::vector<Elem> got(store->tree().bucket_elems());
  const Status st = store->shadow().ReadRootSnapshot(0, got);
  EXPECT_EQ(st.code(), Status::Code::kDamaged) << st.ToString();
  EXPECT_NE(st.message().find("root snapshot"), std::string::npos) << st.message();
}

TEST(ShareStore, UpdateMetaCannotChangeShape) {
  TempDir tmp;
  auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
  ASSERT_NE(store, nullptr);
  ServerMeta m = store->meta();
  m.shape.bucket_size = 5;
  EXPECT_EQ(store->tree().UpdateMeta(m).code(), Status::Code::kInvalidArgument);
}

TEST(ShareStore, CreateRefusesExistingUnlessOverwrite) {
  TempDir tmp;
  ServerMeta meta = MakeMeta(3, 4, 8);
  {
    auto store = MustCreate(tmp.path(), meta);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->tree().WriteSlot(1, 0, std::vector<Elem>(8, 9), 3, 1).ok());
  }
  auto again = ShareStore::Create(tmp.path(), meta, false);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Status::Code::kAlreadyExists);

  meta.fs_id[0] ^= 0xff;
  meta.shape = {2, 2, 2};
  auto fresh = ShareStore::Create(tmp.path(), meta, true);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  ExpectMetaEq((*fresh)->meta(), meta);
  EXPECT_TRUE(AllZero((*fresh)->tree().Bucket(1), (*fresh)->tree().bucket_elems()));
  fresh = Status::NotFound("closed");  // release the store
  auto reopened = MustOpen(tmp.path());
  ASSERT_NE(reopened, nullptr);
  ExpectMetaEq(reopened->meta(), meta);
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/shares.bin.tmp"));
}

TEST(ShareStore, OverwriteDiscardsSealedShadow) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  const ServerMeta meta = MakeMeta(3, 2, 4);
  {
    auto store = MustCreate(tmp.path(), meta);
    ASSERT_NE(store, nullptr);
    SealRandomShadow(*store, 0, kPath, rng);
  }
  // Same fs id and eviction 0: only removing the shadow keeps it from applying.
  auto fresh = ShareStore::Create(tmp.path(), meta, true);
  ASSERT_TRUE(fresh.ok());
  fresh = Status::NotFound("closed");
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->shadow().SealedEviction(), 0u);
  EXPECT_EQ(store->shadow().Commit(0, 1, 1).code(), Status::Code::kFailedPrecondition);
}

TEST(ShareStore, OpenMissingIsNotFound) {
  TempDir tmp;
  auto r = ShareStore::Open(tmp.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  auto r2 = ShareStore::Open(tmp.path() + "/nonexistent");
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), Status::Code::kNotFound);
}

TEST(ShareStore, SecondStoreOnSameDirIsRefused) {
  TempDir tmp;
  auto store = MustCreate(tmp.path(), MakeMeta(2, 2, 2));
  ASSERT_NE(store, nullptr);
  auto r = ShareStore::Open(tmp.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition) << r.status().ToString();
  auto c = ShareStore::Create(tmp.path(), MakeMeta(2, 2, 2), true);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kFailedPrecondition);
  store.reset();
  EXPECT_NE(MustOpen(tmp.path()), nullptr);
}

TEST(ShareStore, RejectsImpossibleShapes) {
  TempDir tmp;
  for (wire::StoreShape shape : {wire::StoreShape{41, 4, 8}, wire::StoreShape{3, 0, 8},
                                 wire::StoreShape{3, 4, 0},
                                 wire::StoreShape{40, 0xffffffffu, 0xffffffffu},
                                 wire::StoreShape{40, 1u << 16, 1u << 16}}) {
    ServerMeta meta = MakeMeta(0, 0, 0);
    meta.shape = shape;
    auto r = ShareStore::Create(tmp.path(), meta, true);
    ASSERT_FALSE(r.ok()) << shape.height << " " << shape.bucket_size;
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status().ToString();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/shares.bin"));
}

// Updates alternate between the copies at 0 and 512, so after two updates the
// copies hold the last two states. Damaging either one must leave a store that
// opens at one of those two states, and each state is reachable.
TEST(ShareStore, OneTornHeaderCopyFallsBackToTheOther) {
  std::vector<std::uint64_t> seen;
  for (std::uint64_t damaged : {0u, 512u}) {
    TempDir tmp;
    {
      auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
      ASSERT_NE(store, nullptr);
      ASSERT_TRUE(store->tree().WriteSlot(1, 0, std::vector<Elem>(8, 1), 5, 1).ok());
      ASSERT_TRUE(store->tree().WriteSlot(1, 1, std::vector<Elem>(8, 2), 7, 1).ok());
    }
    FlipBytes(tmp.path() + "/shares.bin", damaged + 30, 40);
    auto store = MustOpen(tmp.path());
    ASSERT_NE(store, nullptr);
    seen.push_back(store->meta().applied_seq);
    // The store keeps working and the next update lands in the damaged copy's
    // place or the other; either way a reopen sees it.
    ASSERT_TRUE(store->tree().WriteSlot(2, 0, std::vector<Elem>(8, 3), 9, 1).ok());
    ASSERT_TRUE(store->tree().WriteSlot(2, 1, std::vector<Elem>(8, 4), 11, 1).ok());
    store.reset();
    store = MustOpen(tmp.path());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->meta().applied_seq, 11u);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{5, 7}));
}

TEST(ShareStore, BothHeaderCopiesDamagedIsCorruption) {
  TempDir tmp;
  {
    auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
    ASSERT_NE(store, nullptr);
  }
  FlipBytes(tmp.path() + "/shares.bin", 60, 4);
  FlipBytes(tmp.path() + "/shares.bin", 512, 4);  // the magic
  auto r = ShareStore::Open(tmp.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_NE(r.status().message().find("no valid header copy"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("magic"), std::string::npos) << r.status().message();
}

TEST(ShareStore, WrongFileSizeIsCorruption) {
  for (long delta : {-4L, 4096L}) {
    TempDir tmp;
    std::uint64_t size = 0;
    {
      auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
      ASSERT_NE(store, nullptr);
      size = store->inspection().file_bytes();
    }
    ASSERT_EQ(::truncate((tmp.path() + "/shares.bin").c_str(),
                         static_cast<off_t>(static_cast<long>(size) + delta)),
              0);
    auto r = ShareStore::Open(tmp.path());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
    EXPECT_NE(r.status().message().find("needs " + std::to_string(size)), std::string::npos)
        << r.status().message();
  }
  TempDir tmp;
  {
    auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
    ASSERT_NE(store, nullptr);
  }
  ASSERT_EQ(::truncate((tmp.path() + "/shares.bin").c_str(), 100), 0);
  auto r = ShareStore::Open(tmp.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
}

TEST(ShareStore, ShadowCommitMovesData) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
  ASSERT_NE(store, nullptr);
  // Some live data the eviction reads; it must survive until the commit.
  auto root_slot = RandomElems(rng, store->tree().slot_elems());
  ASSERT_TRUE(store->tree().WriteSlot(1, 2, root_slot, 4, 1).ok());
  std::vector<std::vector<Elem>> old;
  for (std::uint64_t b = 1; b <= store->tree().num_buckets(); ++b)
    old.push_back(ReadBucket(*store, b));

  auto shadow = SealRandomShadow(*store, 0, kPath, rng, 3);
  EXPECT_EQ(store->shadow().SealedEviction(), 1u);
  for (std::uint64_t b = 1; b <= store->tree().num_buckets(); ++b) {
    EXPECT_EQ(ReadBucket(*store, b), old[b - 1]) << "bucket " << b << " changed before commit";
  }
  ASSERT_TRUE(store->shadow().Commit(0, 10, 2).ok());
  EXPECT_EQ(store->meta().applied_evictions, 1u);
  EXPECT_EQ(store->meta().applied_seq, 10u);
  EXPECT_EQ(store->meta().epoch, 2u);
  EXPECT_EQ(store->shadow().SealedEviction(), 0u);
  for (std::uint64_t b = 1; b <= store->tree().num_buckets(); ++b) {
    auto it = std::find(kPath.begin(), kPath.end(), b);
    const auto& want = it == kPath.end() ? old[b - 1] : shadow[it - kPath.begin()];
    EXPECT_EQ(ReadBucket(*store, b), want) << "bucket " << b;
  }
  // Idempotent: a repeated commit (lost reply) changes nothing.
  ASSERT_TRUE(store->shadow().Commit(0, 99, 99).ok());
  EXPECT_EQ(store->meta().applied_seq, 10u);
  EXPECT_EQ(store->meta().applied_evictions, 1u);

  store.reset();
  store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->meta().applied_evictions, 1u);
  EXPECT_EQ(store->shadow().SealedEviction(), 0u) << "a committed shadow must be obsolete";
  EXPECT_TRUE(store->shadow().Commit(0, 1, 1).ok());
  EXPECT_EQ(ReadBucket(*store, 13), shadow[3]);
}

TEST(ShareStore, ShadowPreconditionsAndArguments) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  auto store = MustCreate(tmp.path(), MakeMeta(3, 2, 4));
  ASSERT_NE(store, nullptr);
  const auto bucket = RandomElems(rng, store->tree().bucket_elems());
  using C = Status::Code;
  EXPECT_EQ(store->shadow().PutShadowBucket(0, bucket).code(), C::kFailedPrecondition);
  EXPECT_EQ(store->shadow().SealShadow().code(), C::kFailedPrecondition);
  EXPECT_EQ(store->shadow().Commit(0, 1, 1).code(), C::kFailedPrecondition);
  EXPECT_EQ(store->shadow().Commit(5, 1, 1).code(), C::kFailedPrecondition);

  const std::vector<std::uint64_t> empty;
  const std::vector<std::uint64_t> dup = {1, 2, 1};
  const std::vector<std::uint64_t> zero = {0, 2};
  const std::vector<std::uint64_t> big = {1, 16};
  EXPECT_EQ(store->shadow().BeginShadow(1, 0, kPath).code(), C::kFailedPrecondition);
  EXPECT_EQ(store->shadow().BeginShadow(0, 0, empty).code(), C::kInvalidArgument);
  EXPECT_EQ(store->shadow().BeginShadow(0, 0, dup).code(), C::kInvalidArgument);
  EXPECT_EQ(store->shadow().BeginShadow(0, 0, zero).code(), C::kInvalidArgument);
  EXPECT_EQ(store->shadow().BeginShadow(0, 0, big).code(), C::kInvalidArgument);

  ASSERT_TRUE(store->shadow().BeginShadow(0, 0, kPath).ok());
  EXPECT_EQ(store->shadow().PutShadowBucket(4, bucket).code(), C::kInvalidArgument);
  EXPECT_EQ(store->shadow().PutShadowBucket(0, std::span(bucket).first(bucket.size() - 1)).code(),
            C::kInvalidArgument);
  for (std::size_t i = 0; i < 3; ++i) ASSERT_TRUE(store->shadow().PutShadowBucket(i, bucket).ok());
  // Not sealed yet: nothing to commit.
  EXPECT_EQ(store->shadow().Commit(0, 1, 1).code(), C::kFailedPrecondition);
  EXPECT_EQ(store->shadow().SealedEviction(), 0u);
  // Bucket index 3 was never written.
  Status s = store->shadow().SealShadow();
  EXPECT_EQ(s.code(), C::kFailedPrecondition);
  EXPECT_NE(s.message().find("bucket index 3"), std::string::npos) << s.message();
  ASSERT_TRUE(store->shadow().PutShadowBucket(3, bucket).ok());
  ASSERT_TRUE(store->shadow().SealShadow().ok());
  EXPECT_TRUE(store->shadow().SealShadow().ok());  // sealing twice is harmless
  EXPECT_EQ(store->shadow().Commit(1, 1, 1).code(), C::kFailedPrecondition);
  ASSERT_TRUE(store->shadow().Commit(0, 1, 1).ok());
  // The next eviction must be 1; 0 is done.
  EXPECT_EQ(store->shadow().BeginShadow(0, 0, kPath).code(), C::kFailedPrecondition);
  EXPECT_TRUE(store->shadow().BeginShadow(1, 0, kPath).ok());
}

TEST(ShareStore, CrashAfterSealThenCommitOnReopen) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  std::vector<std::vector<Elem>> shadow;
  {
    auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
    ASSERT_NE(store, nullptr);
    shadow = SealRandomShadow(*store, 0, kPath, rng);
    // "Crash": the store goes away without committing.
  }
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->shadow().SealedEviction(), 1u);
  EXPECT_TRUE(AllZero(store->tree().Bucket(1), store->tree().bucket_elems()));
  ASSERT_TRUE(store->shadow().Commit(0, 3, 1).ok());
  for (std::size_t i = 0; i < kPath.size(); ++i) EXPECT_EQ(ReadBucket(*store, kPath[i]), shadow[i]);
  EXPECT_EQ(store->meta().applied_evictions, 1u);
}

// Commit writes the bucket map, then the header. Cut off between the two,
// the header still records the previous eviction and its map copy is
// intact: the old tree is whole, and the sealed shadow commits again.
TEST(ShareStore, CrashAfterTheMapBeforeTheHeaderRecommits) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  const std::string shares = tmp.path() + "/shares.bin";
  std::vector<std::vector<Elem>> shadow;
  std::vector<std::uint8_t> header_before;
  std::vector<Elem> old13;
  {
    auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->tree().WriteSlot(13, 1, RandomElems(rng, 8), 2, 1).ok());
    old13 = ReadBucket(*store, 13);
    shadow = SealRandomShadow(*store, 0, kPath, rng);
    const std::vector<StoreInspection::FileRange> shadow_at = store->inspection().ShadowInFile();
    header_before = ReadRange(shares, 0, 4096);
    ASSERT_TRUE(store->shadow().Commit(0, 3, 1).ok());
    // Nothing was copied: each bucket now lies where its shadow was written.
    for (std::size_t i = 0; i < kPath.size(); ++i) {
      EXPECT_EQ(store->inspection().BucketInFile(kPath[i]).data, shadow_at[i].data)
          << "bucket " << kPath[i];
      EXPECT_EQ(store->inspection().BucketInFile(kPath[i]).digests, shadow_at[i].digests);
    }
  }
  WriteRange(shares, 0, header_before);  // the header write never happened

  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->meta().applied_evictions, 0u);
  EXPECT_EQ(store->shadow().SealedEviction(), 1u);
  EXPECT_EQ(ReadBucket(*store, 13), old13) << "the old tree must be whole";
  Status st = store->tree().VerifyBuckets(13, old13);
  EXPECT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(store->shadow().Commit(0, 3, 1).ok());
  for (std::size_t i = 0; i < kPath.size(); ++i) EXPECT_EQ(ReadBucket(*store, kPath[i]), shadow[i]);
  EXPECT_EQ(store->meta().applied_evictions, 1u);
  EXPECT_EQ(store->meta().applied_seq, 3u);
  store.reset();
  store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  for (std::size_t i = 0; i < kPath.size(); ++i) EXPECT_EQ(ReadBucket(*store, kPath[i]), shadow[i]);
}

// A damaged bucket map copy is named as damage of this server, not read as
// some other layout.
TEST(ShareStore, DamagedBucketMapIsDamage) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  {
    auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
    ASSERT_NE(store, nullptr);
    SealRandomShadow(*store, 0, kPath, rng);
    ASSERT_TRUE(store->shadow().Commit(0, 3, 1).ok());
  }
  struct stat st{};
  ASSERT_EQ(::stat((tmp.path() + "/shares.bin").c_str(), &st), 0);
  // Two map copies of one 4 KiB page each (15 buckets) end the file; the map
  // of one applied eviction is copy 1, the last, its entries from byte 32 on.
  FlipBytes(tmp.path() + "/shares.bin", static_cast<std::uint64_t>(st.st_size) - 4096 + 40, 2);
  auto r = ShareStore::Open(tmp.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kDamaged) << r.status().ToString();
  EXPECT_NE(r.status().message().find("bucket map"), std::string::npos) << r.status().ToString();
}

TEST(ShareStore, UnsealedShadowIsIgnoredAfterReopen) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  {
    auto store = MustCreate(tmp.path(), MakeMeta(3, 2, 4));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->shadow().BeginShadow(0, 0, kPath).ok());
    for (std::size_t i = 0; i < kPath.size(); ++i) {
      ASSERT_TRUE(
          store->shadow().PutShadowBucket(i, RandomElems(rng, store->tree().bucket_elems())).ok());
    }
  }
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->shadow().SealedEviction(), 0u);
  EXPECT_EQ(store->shadow().Commit(0, 1, 1).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(
      store->shadow().PutShadowBucket(0, RandomElems(rng, store->tree().bucket_elems())).code(),
      Status::Code::kFailedPrecondition);
  auto shadow = SealRandomShadow(*store, 0, kPath, rng);
  ASSERT_TRUE(store->shadow().Commit(0, 1, 1).ok());
  EXPECT_EQ(ReadBucket(*store, kPath[0]), shadow[0]);
}

// A retried prepare (new attempt) replaces a sealed shadow; a crash after the
// new Begin must not resurrect the old sealed one.
TEST(ShareStore, NewAttemptInvalidatesOldSealedShadow) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  {
    auto store = MustCreate(tmp.path(), MakeMeta(3, 2, 4));
    ASSERT_NE(store, nullptr);
    SealRandomShadow(*store, 0, kPath, rng, 1);
    const std::vector<std::uint64_t> other = {1, 2, 5, 10, 11};
    ASSERT_TRUE(store->shadow().BeginShadow(0, 2, other).ok());
    EXPECT_EQ(store->shadow().SealedEviction(), 0u);
    ASSERT_TRUE(
        store->shadow().PutShadowBucket(0, RandomElems(rng, store->tree().bucket_elems())).ok());
  }
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->shadow().SealedEviction(), 0u);
  auto shadow = SealRandomShadow(*store, 0, kPath, rng, 3);
  ASSERT_TRUE(store->shadow().Commit(0, 1, 1).ok());
  for (std::size_t i = 0; i < kPath.size(); ++i) EXPECT_EQ(ReadBucket(*store, kPath[i]), shadow[i]);
}

TEST(ShareStore, TornShadowHeaderMeansNoShadow) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  {
    auto store = MustCreate(tmp.path(), MakeMeta(3, 2, 4));
    ASSERT_NE(store, nullptr);
    SealRandomShadow(*store, 0, kPath, rng);
  }
  FlipBytes(tmp.path() + "/shadow.bin", 80, 2);  // inside the bucket list
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->shadow().SealedEviction(), 0u);
  EXPECT_EQ(store->shadow().Commit(0, 1, 1).code(), Status::Code::kFailedPrecondition);
}

// Random slot writes, evictions and crashes against an in-memory model.
TEST(ShareStore, RandomOperationsMatchModelAcrossReopens) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  const ServerMeta meta = MakeMeta(4, 3, 6);
  auto store = MustCreate(tmp.path(), meta);
  ASSERT_NE(store, nullptr);
  const std::uint64_t nb = store->tree().num_buckets();
  const std::uint64_t be = store->tree().bucket_elems();
  std::vector<std::vector<Elem>> model(nb + 1, std::vector<Elem>(be, 0));
  std::uint64_t seq = 0;
  std::uint64_t evictions = 0;
  for (int step = 0; step < 300; ++step) {
    const unsigned op = static_cast<unsigned>(rng() % 10);
    if (op < 5) {
      const std::uint64_t b = 1 + rng() % nb;
      const auto slot = static_cast<std::uint32_t>(rng() % 3);
      auto data = RandomElems(rng, 6);
      ASSERT_TRUE(store->tree().WriteSlot(b, slot, data, ++seq, 1).ok());
      std::copy(data.begin(), data.end(), model[b].begin() + slot * 6);
    } else if (op < 9) {
      // A root-to-leaf path, sometimes with the sibling leaf.
      const std::uint64_t leaf = 16 + rng() % 16;
      std::vector<std::uint64_t> path;
      for (std::uint64_t b = leaf; b >= 1; b /= 2) path.push_back(b);
      if (rng() % 2) path.push_back(leaf ^ 1);
      std::shuffle(path.begin(), path.end(), rng);
      auto shadow = SealRandomShadow(*store, evictions, path, rng);
      const unsigned crash = static_cast<unsigned>(rng() % 3);
      if (crash == 0) {  // crash before commit
        store.reset();
        store = MustOpen(tmp.path());
        ASSERT_NE(store, nullptr);
        ASSERT_EQ(store->shadow().SealedEviction(), evictions + 1);
      }
      ASSERT_TRUE(store->shadow().Commit(evictions, ++seq, 1).ok());
      for (std::size_t i = 0; i < path.size(); ++i) model[path[i]] = shadow[i];
      ++evictions;
    } else {
      store.reset();
      store = MustOpen(tmp.path());
      ASSERT_NE(store, nullptr);
    }
    ASSERT_EQ(store->meta().applied_evictions, evictions);
    ASSERT_EQ(store->meta().applied_seq, seq);
  }
  for (std::uint64_t b = 1; b <= nb; ++b) EXPECT_EQ(ReadBucket(*store, b), model[b]) << b;
}

TEST(ShareStore, SyncOffStillWorks) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  {
    auto r = ShareStore::Create(tmp.path(), MakeMeta(3, 2, 4), false, /*sync=*/false);
    ASSERT_TRUE(r.ok());
    auto& store = *r;
    ASSERT_TRUE(store->tree().WriteSlot(3, 1, RandomElems(rng, 4), 1, 1).ok());
    SealRandomShadow(*store, 0, kPath, rng);
    ASSERT_TRUE(store->shadow().Commit(0, 2, 1).ok());
  }
  auto r = ShareStore::Open(tmp.path(), /*sync=*/false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->meta().applied_evictions, 1u);
  EXPECT_EQ((*r)->meta().applied_seq, 2u);
}

// A full filesystem: every failure is an IoError naming the file and the
// cause, the header never claims the failed write, and the store works again
// once space is freed. Needs a small tmpfs (root in most test environments).
TEST(ShareStore, NoSpaceLeavesConsistentState) {
  TempDir tmp;
  const std::string mnt = tmp.path() + "/tmpfs";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0700), 0);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs to fill up (" << std::strerror(errno)
                 << "); skipping the ENOSPC case";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  auto rng = testing::SeededRng();
  const std::string dir = mnt + "/data";
  const std::string filler = mnt + "/filler";
  {
    // 8 slots of 4 KiB per bucket, 127 buckets: 4 MiB logical on a 1 MiB fs.
    auto store = MustCreate(dir, MakeMeta(6, 8, 1024));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->tree().WriteSlot(1, 0, RandomElems(rng, 1024), 1, 1).ok());

    // Fill the filesystem.
    {
      std::ofstream f(filler, std::ios::binary);
      std::vector<char> chunk(4096, 'x');
      while (f.write(chunk.data(), static_cast<std::streamsize>(chunk.size())) && f.flush()) {
      }
    }
    // Slot writes into holes need new pages.
    Status s;
    std::uint64_t last_ok = 1;
    for (std::uint64_t b = 2; b <= store->tree().num_buckets(); ++b) {
      s = store->tree().WriteSlot(b, 0, RandomElems(rng, 1024), b, 1);
      if (!s.ok()) break;
      last_ok = b;
    }
    ASSERT_FALSE(s.ok()) << "the filesystem never filled up";
    EXPECT_EQ(s.code(), Status::Code::kNoSpace);
    EXPECT_NE(s.message().find(dir + "/shares.bin"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("No space"), std::string::npos) << s.message();
    EXPECT_EQ(store->meta().applied_seq, last_ok);

    // An eviction cannot even reserve its shadow.
    const std::vector<std::uint64_t> path = {1, 2, 4, 8, 16, 32, 64};
    Status b = store->shadow().BeginShadow(0, 0, path);
    Status put =
        b.ok() ? store->shadow().PutShadowBucket(0, RandomElems(rng, store->tree().bucket_elems()))
               : b;
    EXPECT_EQ(put.code(), Status::Code::kNoSpace) << put.ToString();
    EXPECT_EQ(store->shadow().SealedEviction(), 0u);
    EXPECT_EQ(store->meta().applied_seq, last_ok);
  }
  {
    auto store = MustOpen(dir);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->shadow().SealedEviction(), 0u);
    EXPECT_EQ(store->meta().applied_evictions, 0u);
    ASSERT_EQ(::unlink(filler.c_str()), 0);
    // Space is back: an eviction and more writes succeed.
    const std::vector<std::uint64_t> path = {1, 2, 4, 8, 16, 32, 64};
    auto shadow = SealRandomShadow(*store, 0, path, rng);
    // Fill up again so that the commit itself hits ENOSPC copying into holes.
    {
      std::ofstream f(filler, std::ios::binary);
      std::vector<char> chunk(4096, 'x');
      while (f.write(chunk.data(), static_cast<std::streamsize>(chunk.size())) && f.flush()) {
      }
    }
    // The copy fills holes in shares.bin, and not one page is free.
    Status c = store->shadow().Commit(0, 500, 1);
    EXPECT_EQ(c.code(), Status::Code::kNoSpace) << c.ToString();
    EXPECT_NE(c.message().find("No space"), std::string::npos) << c.message();
    EXPECT_EQ(store->meta().applied_evictions, 0u);
    EXPECT_EQ(store->shadow().SealedEviction(), 1u) << "a failed commit must keep its shadow";
    ASSERT_EQ(::unlink(filler.c_str()), 0);
    ASSERT_TRUE(store->shadow().Commit(0, 500, 1).ok());
    EXPECT_EQ(store->meta().applied_evictions, 1u);
    for (std::size_t i = 0; i < path.size(); ++i) EXPECT_EQ(ReadBucket(*store, path[i]), shadow[i]);
  }
}

}  // namespace
}  // namespace s3oram::serverd

namespace s3oram::serverd {
namespace {

// Rebuild mode: the old store is gone at once, the new file is not live (no
// shares.bin, live mutations refused) until FinishRebuild, bulk writes land
// where ReadBuckets finds them, and the counters of FinishRebuild persist.
TEST(ShareStore, RebuildModeIsLiveOnlyAfterFinish) {
  TempDir dir;
  auto rng = testing::SeededRng();
  const ServerMeta meta = MakeMeta(3, 4, 1024);  // 16 KiB buckets: several pages each
  {
    auto live = ShareStore::Create(dir.path(), meta, false, true);
    ASSERT_TRUE(live.ok()) << live.status().ToString();
  }
  ServerMeta target = meta;
  target.applied_evictions = 5;
  target.applied_seq = 77;
  target.epoch = 9;
  auto s = ShareStore::CreateForRebuild(dir.path(), meta, true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->rebuilding());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/shares.bin"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/shares.bin.rebuild"));
  const std::uint64_t be = (*s)->rebuild().bucket_elems();
  std::vector<Elem> slot(meta.shape.elems_per_slot, 1);
  EXPECT_EQ((*s)->tree().WriteSlot(1, 0, slot, 1, 1).code(), Status::Code::kFailedPrecondition);
  const std::uint64_t list[] = {2};
  EXPECT_EQ((*s)->shadow().BeginShadow(0, 1, list).code(), Status::Code::kFailedPrecondition);
  const std::vector<Elem> data = RandomElems(rng, 2 * be);
  ASSERT_TRUE((*s)->rebuild().WriteBuckets(4, data).ok());
  EXPECT_FALSE((*s)->rebuild().WriteBuckets(15, data).ok());  // runs past the last bucket
  EXPECT_FALSE((*s)->rebuild().WriteBuckets(4, std::span<const Elem>(data).first(be - 1)).ok());
  ServerMeta other = target;
  other.shape.height = 4;
  EXPECT_FALSE((*s)->rebuild().FinishRebuild(other).ok());
  ASSERT_TRUE((*s)->rebuild().FinishRebuild(target).ok());
  EXPECT_FALSE((*s)->rebuilding());
  EXPECT_FALSE((*s)->rebuild().WriteBuckets(4, data).ok());  // live now
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/shares.bin"));
  s->reset();

  auto reopened = ShareStore::Open(dir.path(), true);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  ExpectMetaEq((*reopened)->meta(), target);
  std::vector<Elem> back(2 * be);
  ASSERT_TRUE((*reopened)->tree().ReadBuckets(4, 2, back).ok());
  EXPECT_EQ(back, data);
  std::vector<Elem> zero(be);
  ASSERT_TRUE((*reopened)->tree().ReadBuckets(3, 1, zero).ok());
  EXPECT_TRUE(AllZero(zero.data(), be));
  EXPECT_FALSE((*reopened)->tree().ReadBuckets(15, 2, back).ok());
}

// A catch-up cut off (the server killed after some buckets were rewritten in
// place): the store opens still marked, as a catch-up's target, with the
// header of its old state; it refuses every live use (no root write, no
// shadow); BeginCatchUp begins it again, and FinishRebuild makes it live at
// the new counters with the buckets written before and after the cut.
TEST(ShareStore, ACatchUpCutOffOpensMarkedRefusesLiveUseAndIsBegunAgain) {
  TempDir dir;
  auto rng = testing::SeededRng();
  ServerMeta meta = MakeMeta(3, 4, 1024);
  meta.applied_evictions = 4;
  meta.applied_seq = 40;
  std::vector<Elem> old_bucket, first_cut, second;
  std::uint64_t be = 0;
  {
    auto live = ShareStore::Create(dir.path(), meta, false, true);
    ASSERT_TRUE(live.ok()) << live.status().ToString();
    be = (*live)->tree().bucket_elems();
    old_bucket = RandomElems(rng, be);
    ASSERT_TRUE((*live)->rebuild().WriteBuckets(6, old_bucket).code() ==
                Status::Code::kFailedPrecondition);  // live: not a rebuild's target
    for (std::uint32_t slot = 0; slot < 4; ++slot) {
      const std::span<const Elem> part(old_bucket.data() + slot * (be / 4), be / 4);
      ASSERT_TRUE((*live)->tree().WriteSlot(6, slot, part, 41 + slot, 1).ok());
    }
    ASSERT_TRUE((*live)->rebuild().BeginCatchUp().ok());
    EXPECT_TRUE((*live)->rebuilding());
    EXPECT_TRUE((*live)->catching_up());
    first_cut = RandomElems(rng, be);
    ASSERT_TRUE((*live)->rebuild().WriteBuckets(2, first_cut).ok());
    // Killed here: no FinishRebuild.
  }
  ASSERT_TRUE(std::filesystem::exists(dir.path() + "/shares.bin.catchup"));
  auto s = ShareStore::Open(dir.path(), true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->rebuilding());
  EXPECT_TRUE((*s)->catching_up());
  EXPECT_EQ((*s)->meta().applied_evictions, 4u) << "the header names the state of before";
  std::vector<Elem> slot(meta.shape.elems_per_slot, 1);
  EXPECT_EQ((*s)->tree().WriteSlot(1, 0, slot, 99, 1).code(), Status::Code::kFailedPrecondition);
  const std::uint64_t list[] = {2};
  EXPECT_EQ((*s)->shadow().BeginShadow(4, 1, list).code(), Status::Code::kFailedPrecondition);
  // Begun again: the cut range is sent again, and more.
  ASSERT_TRUE((*s)->rebuild().BeginCatchUp().ok());
  second = RandomElems(rng, 2 * be);
  ASSERT_TRUE((*s)->rebuild().WriteBuckets(2, second).ok());
  ServerMeta target = meta;
  target.applied_evictions = 7;
  target.applied_seq = 90;
  target.epoch = 3;
  ASSERT_TRUE((*s)->rebuild().FinishRebuild(target).ok());
  EXPECT_FALSE((*s)->rebuilding());
  EXPECT_FALSE((*s)->catching_up());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/shares.bin.catchup"));
  s->reset();

  auto reopened = ShareStore::Open(dir.path(), true);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_FALSE((*reopened)->rebuilding());
  ExpectMetaEq((*reopened)->meta(), target);
  std::vector<Elem> back(2 * be);
  ASSERT_TRUE((*reopened)->tree().ReadBuckets(2, 2, back).ok());
  EXPECT_EQ(back, second);
  std::vector<Elem> kept(be);
  ASSERT_TRUE((*reopened)->tree().ReadBuckets(6, 1, kept).ok());
  EXPECT_EQ(kept, old_bucket) << "a bucket the catch-up did not send keeps its share";
}

// Holes: written buckets are never reported as holes; where the filesystem
// reports holes at all, the never-written buckets away from written data are.
TEST(ShareStore, HolesReportNeverWrittenBuckets) {
  TempDir dir;
  // 256 KiB buckets: far larger than any filesystem's allocation unit, so a
  // bucket two away from written data is a hole even at coarse granularity.
  const ServerMeta meta = MakeMeta(3, 4, 16384);
  auto s = ShareStore::Create(dir.path(), meta, false, true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<Elem> slot(meta.shape.elems_per_slot, 3);
  ASSERT_TRUE((*s)->tree().WriteSlot(5, 1, slot, 1, 1).ok());
  ASSERT_TRUE((*s)->tree().WriteSlot(9, 0, slot, 2, 1).ok());
  auto holes = (*s)->tree().Holes(1, 15);
  ASSERT_TRUE(holes.ok()) << holes.status().ToString();
  ASSERT_EQ(holes->size(), 15u);
  EXPECT_FALSE((*holes)[4]);
  EXPECT_FALSE((*holes)[8]);
  if (std::find(holes->begin(), holes->end(), true) == holes->end()) {
    GTEST_SKIP() << "this filesystem does not report holes (SEEK_DATA)";
  }
  for (std::size_t i : {1u, 2u, 6u, 10u, 11u, 12u, 13u, 14u}) {
    EXPECT_TRUE((*holes)[i]) << "bucket " << i + 1;
  }
  auto part = (*s)->tree().Holes(9, 2);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(*part, (std::vector<bool>{false, true}));
  EXPECT_FALSE((*s)->tree().Holes(0, 1).ok());
  EXPECT_FALSE((*s)->tree().Holes(15, 2).ok());
}

// ---- Fail-stop storage: slot digests.

// Where slot (b, s) of a store lies in shares.bin, and its digest.
struct SlotPlace {
  std::uint64_t data;
  std::uint64_t digest;
};
SlotPlace PlaceOf(const ShareStore& store, std::uint64_t b, std::uint64_t slot) {
  const StoreInspection::FileRange r = store.inspection().BucketInFile(b);
  return {r.data + slot * store.tree().slot_elems() * 4, r.digests + slot * 8};
}
// The same in the layout of formats 1 and 2 (every bucket in its own place).
SlotPlace Format2PlaceOf(const ServerMeta& meta, std::uint64_t b, std::uint64_t slot) {
  const std::uint64_t z = meta.shape.bucket_size, m = meta.shape.elems_per_slot;
  const std::uint64_t buckets = (std::uint64_t{1} << (meta.shape.height + 1)) - 1;
  const std::uint64_t data_end = 4096 + buckets * z * m * 4;
  const std::uint64_t digests = (data_end + 4095) / 4096 * 4096;
  return {4096 + ((b - 1) * z + slot) * m * 4, digests + ((b - 1) * z + slot) * 8};
}

std::vector<Elem> AllBuckets(const ShareStore& s) {
  std::vector<Elem> all(s.tree().num_buckets() * s.tree().bucket_elems());
  EXPECT_TRUE(s.tree().ReadBuckets(1, s.tree().num_buckets(), all).ok());
  return all;
}

// A store with every bucket written (random shares filled in, then, if
// `evict`, a committed eviction of buckets 2 and 3, which moves them to spare
// places, and root slots).
std::unique_ptr<ShareStore> FilledStore(const std::string& dir, const ServerMeta& meta,
                                        std::mt19937_64& rng, bool evict = true) {
  auto store = MustCreate(dir, meta);
  if (!store) return nullptr;
  EXPECT_TRUE(store->age_fill()
                  .FillUnusedBuckets(1, RandomElems(rng, store->tree().num_buckets() *
                                                             store->tree().bucket_elems()))
                  .ok());
  if (evict) {
    SealRandomShadow(*store, 0, {2, 3}, rng);
    EXPECT_TRUE(store->shadow().Commit(0, 1, 1).ok());
  }
  for (std::uint32_t slot = 0; slot < meta.shape.bucket_size; ++slot) {
    EXPECT_TRUE(store->tree()
                    .WriteSlot(1, slot, RandomElems(rng, store->tree().slot_elems()), 2 + slot, 1)
                    .ok());
  }
  return store;
}

TEST(ShareStoreDigests, EveryWrittenSlotVerifies) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  const ServerMeta meta = MakeMeta(3, 4, 8);
  auto store = FilledStore(tmp.path(), meta, rng);
  ASSERT_NE(store, nullptr);
  const auto all = AllBuckets(*store);
  Status st = store->tree().VerifyBuckets(1, all);
  EXPECT_TRUE(st.ok()) << st.ToString();
  store.reset();
  store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  st = store->tree().VerifyBuckets(1, AllBuckets(*store));
  EXPECT_TRUE(st.ok()) << "after reopening (the key comes back from the header): " << st.ToString();
}

// A few bytes changed on disk in one slot, or in its digest: the read names
// this server, the bucket and the slot; every other bucket still verifies.
TEST(ShareStoreDigests, DamageOnDiskIsNamedByBucketAndSlot) {
  auto rng = testing::SeededRng();
  const ServerMeta meta = MakeMeta(3, 4, 8);
  for (bool in_digest : {false, true}) {
    TempDir tmp;
    std::uniform_int_distribution<std::uint64_t> bucket_of(1, 15), slot_of(0, 3);
    const std::uint64_t b = bucket_of(rng), slot = slot_of(rng);
    SlotPlace at{};
    {
      auto store = FilledStore(tmp.path(), meta, rng);
      ASSERT_NE(store, nullptr);
      at = PlaceOf(*store, b, slot);
    }
    FlipBytes(tmp.path() + "/shares.bin", in_digest ? at.digest + 2 : at.data + 9, 3);
    auto store = MustOpen(tmp.path());
    ASSERT_NE(store, nullptr);
    for (std::uint64_t k = 1; k <= store->tree().num_buckets(); ++k) {
      Status st = store->tree().VerifyBuckets(k, ReadBucket(*store, k));
      if (k != b) {
        EXPECT_TRUE(st.ok()) << "bucket " << k << ": " << st.ToString();
        continue;
      }
      EXPECT_EQ(st.code(), Status::Code::kDamaged) << st.ToString();
      const std::string& msg = st.message();
      EXPECT_NE(msg.find("server 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("bucket " + std::to_string(b) + " slot " + std::to_string(slot)),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("s3oram rebuild --server 2"), std::string::npos) << msg;
    }
  }
}

// Scrub reports every damaged slot (not only the first), and a hole bucket
// whose digests say it was written.
TEST(ShareStoreDigests, ScrubListsEveryDamagedSlot) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  const ServerMeta meta = MakeMeta(3, 4, 8);
  {
    auto store = FilledStore(tmp.path(), meta, rng);
    ASSERT_NE(store, nullptr);
    auto clean = store->scrub().Scrub(1, store->tree().num_buckets());
    ASSERT_TRUE(clean.ok()) << clean.status().ToString();
    EXPECT_EQ(*clean, std::vector<std::uint8_t>(15 * 4, 0));
    // Bucket 3 lies in a spare place since the eviction of FilledStore.
    FlipBytes(tmp.path() + "/shares.bin", PlaceOf(*store, 5, 0).data, 1);
    FlipBytes(tmp.path() + "/shares.bin", PlaceOf(*store, 3, 3).data + 20, 2);
    FlipBytes(tmp.path() + "/shares.bin", PlaceOf(*store, 12, 2).digest, 1);
  }
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  auto flags = store->scrub().Scrub(1, store->tree().num_buckets());
  ASSERT_TRUE(flags.ok()) << flags.status().ToString();
  std::vector<std::uint8_t> want(15 * 4, 0);
  want[(5 - 1) * 4 + 0] = want[(3 - 1) * 4 + 3] = want[(12 - 1) * 4 + 2] = 1;
  EXPECT_EQ(*flags, want);
  auto part = store->scrub().Scrub(12, 2);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(*part, (std::vector<std::uint8_t>{0, 0, 1, 0, 0, 0, 0, 0}));
  EXPECT_FALSE(store->scrub().Scrub(0, 1).ok());
  EXPECT_FALSE(store->scrub().Scrub(15, 2).ok());
}

TEST(ShareStoreDigests, NonFieldElementsAreNeverStored) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  auto store = MustCreate(tmp.path(), MakeMeta(3, 4, 8));
  ASSERT_NE(store, nullptr);
  auto slot = RandomElems(rng, store->tree().slot_elems());
  slot[3] = field::kPrime;
  EXPECT_EQ(store->tree().WriteSlot(1, 0, slot, 1, 1).code(), Status::Code::kInvalidArgument);
  const std::uint64_t list[] = {2, 3};
  ASSERT_TRUE(store->shadow().BeginShadow(0, 0, list).ok());
  auto bucket = RandomElems(rng, store->tree().bucket_elems());
  bucket[9] = 0xffffffffu;
  EXPECT_EQ(store->shadow().PutShadowBucket(0, bucket).code(), Status::Code::kCorruption);
  EXPECT_EQ(store->shadow().SealShadow().code(), Status::Code::kFailedPrecondition)
      << "the refused bucket counts as never written";
}

// The shadow is checked before any of it is copied: damage between SEAL and
// COMMIT fails the commit and leaves the previous tree whole and verified.
TEST(ShareStoreDigests, DamagedShadowFailsCommitAndKeepsTheTree) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  const ServerMeta meta = MakeMeta(3, 4, 8);
  {
    auto store = FilledStore(tmp.path(), meta, rng);
    ASSERT_NE(store, nullptr);
  }
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  const auto before = AllBuckets(*store);
  SealRandomShadow(*store, 1, kPath, rng);
  // The last shadow bucket (index 3, bucket 13), slot 1, where it lies.
  const std::vector<StoreInspection::FileRange> shadow_at = store->inspection().ShadowInFile();
  ASSERT_EQ(shadow_at.size(), kPath.size());
  store.reset();
  const std::uint64_t slot_bytes = meta.shape.elems_per_slot * 4;
  FlipBytes(tmp.path() + "/shares.bin", shadow_at[3].data + slot_bytes + 5, 2);
  store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->shadow().SealedEviction(), 2u);
  Status st = store->shadow().Commit(1, 50, 3);
  EXPECT_EQ(st.code(), Status::Code::kDamaged) << st.ToString();
  EXPECT_NE(st.message().find("bucket 13 slot 1"), std::string::npos) << st.message();
  EXPECT_EQ(store->meta().applied_evictions, 1u);
  EXPECT_EQ(AllBuckets(*store), before) << "the failed commit changed the live tree";
  st = store->tree().VerifyBuckets(1, before);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST(ShareStoreDigests, RebuiltBucketsCarryDigests) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  const ServerMeta meta = MakeMeta(3, 4, 8);
  auto s = ShareStore::CreateForRebuild(tmp.path(), meta, true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const auto data = RandomElems(rng, 3 * (*s)->rebuild().bucket_elems());
  ASSERT_TRUE((*s)->rebuild().WriteBuckets(5, data).ok());
  ASSERT_TRUE((*s)->rebuild().FinishRebuild(meta).ok());
  s->reset();
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  Status st = store->tree().VerifyBuckets(1, AllBuckets(*store));
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// ---- Format 1 (no digests) is upgraded in place by Open.

std::uint32_t Crc32cForTest(const std::uint8_t* p, std::size_t n) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

// Rewrites the store in dir as format 1 would have left it: 84-byte header
// records without a seed, no digest region.
void MakeFormat1(const std::string& dir, const ServerMeta& meta, std::uint64_t generation) {
  const std::string path = dir + "/shares.bin";
  const std::uint64_t buckets = (std::uint64_t{1} << (meta.shape.height + 1)) - 1;
  const std::uint64_t v1_size =
      4096 + buckets * meta.shape.bucket_size * meta.shape.elems_per_slot * 4;
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(v1_size)), 0);
  for (std::uint64_t copy = 0; copy < 2; ++copy) {
    std::vector<std::uint8_t> rec(512, 0);
    auto u32 = [&](std::size_t at, std::uint32_t v) { std::memcpy(&rec[at], &v, 4); };
    auto u64 = [&](std::size_t at, std::uint64_t v) { std::memcpy(&rec[at], &v, 8); };
    std::memcpy(rec.data(), "S3ORMETA", 8);
    u32(8, 1);
    u32(12, 84);
    u64(16, generation + copy);
    std::memcpy(&rec[24], meta.fs_id.data(), 16);
    u32(40, meta.server_index);
    u32(44, meta.shape.height);
    u32(48, meta.shape.bucket_size);
    u32(52, meta.shape.elems_per_slot);
    u64(56, meta.epoch);
    u64(64, meta.applied_seq);
    u64(72, meta.applied_evictions);
    u32(80, Crc32cForTest(rec.data(), 80));
    WriteRange(path, ((generation + copy) % 2) * 512, rec);
  }
}

TEST(ShareStoreDigests, Format1StoreIsUpgradedInPlace) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  ServerMeta meta = MakeMeta(3, 4, 8);
  std::vector<Elem> before;
  {
    auto store = FilledStore(tmp.path(), meta, rng, /*evict=*/false);
    ASSERT_NE(store, nullptr);
    meta = store->meta();
    before = AllBuckets(*store);
  }
  MakeFormat1(tmp.path(), meta, 40);
  // One slot holds a value no sharing produces (damage before the upgrade
  // that the upgrade can still see).
  const SlotPlace bad = Format2PlaceOf(meta, 6, 2);
  WriteRange(tmp.path() + "/shares.bin", bad.data + 4, {0xff, 0xff, 0xff, 0xff});

  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  ExpectMetaEq(store->meta(), meta);
  struct stat st{};
  ASSERT_EQ(::stat((tmp.path() + "/shares.bin").c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), store->inspection().file_bytes());
  for (std::uint64_t b = 1; b <= store->tree().num_buckets(); ++b) {
    Status v = store->tree().VerifyBuckets(b, ReadBucket(*store, b));
    if (b == 6) {
      EXPECT_EQ(v.code(), Status::Code::kDamaged) << v.ToString();
      EXPECT_NE(v.message().find("bucket 6 slot 2"), std::string::npos) << v.message();
    } else {
      EXPECT_TRUE(v.ok()) << "bucket " << b << ": " << v.ToString();
      EXPECT_EQ(
          ReadBucket(*store, b),
          std::vector<Elem>(
              before.begin() + static_cast<std::ptrdiff_t>((b - 1) * store->tree().bucket_elems()),
              before.begin() + static_cast<std::ptrdiff_t>(b * store->tree().bucket_elems())));
    }
  }
  // Upgraded for good: later writes, an eviction and a reopen keep format 3.
  ASSERT_TRUE(
      store->tree().WriteSlot(1, 0, RandomElems(rng, store->tree().slot_elems()), 900, 2).ok());
  const std::uint64_t e = store->meta().applied_evictions;
  const auto shadow = SealRandomShadow(*store, e, {2, 5}, rng);
  ASSERT_TRUE(store->shadow().Commit(e, 901, 2).ok());
  store.reset();
  store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->meta().applied_seq, 901u);
  EXPECT_EQ(store->meta().applied_evictions, e + 1);
  EXPECT_EQ(ReadBucket(*store, 2), shadow[0]);
  EXPECT_EQ(ReadBucket(*store, 5), shadow[1]);
  Status v = store->tree().VerifyBuckets(1, ReadBucket(*store, 1));
  EXPECT_TRUE(v.ok()) << v.ToString();
}

// An upgrade cut off after it grew the file (the header still says format 1)
// starts over at the next Open.
TEST(ShareStoreDigests, InterruptedUpgradeStartsOver) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  ServerMeta meta = MakeMeta(3, 4, 8);
  std::uint64_t full_size = 0;
  {
    auto store = FilledStore(tmp.path(), meta, rng, /*evict=*/false);
    ASSERT_NE(store, nullptr);
    meta = store->meta();
    full_size = store->inspection().file_bytes();
  }
  MakeFormat1(tmp.path(), meta, 7);
  ASSERT_EQ(::truncate((tmp.path() + "/shares.bin").c_str(), static_cast<off_t>(full_size)), 0);
  // Garbage where the digests go: the upgrade must rewrite them all.
  WriteRange(tmp.path() + "/shares.bin", Format2PlaceOf(meta, 3, 1).digest,
             std::vector<std::uint8_t>(8, 0x11));
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  Status v = store->tree().VerifyBuckets(1, AllBuckets(*store));
  EXPECT_TRUE(v.ok()) << v.ToString();
}

// Rewrites the store in dir as format 2 left it: the same header records
// with version 2, no spare places and no bucket map (every bucket in its own
// place) and, in shadow.bin, a sealed format-2 shadow of eviction
// `meta.applied_evictions` over `buckets` holding `data` (the buckets, then
// their digests, after a 4 KiB header): a server of format 2 stopped between
// SEAL and COMMIT.
void MakeFormat2WithSealedShadow(const std::string& dir, const ServerMeta& meta,
                                 const std::vector<std::uint64_t>& buckets,
                                 const std::vector<std::vector<Elem>>& data) {
  const std::string path = dir + "/shares.bin";
  std::vector<std::uint8_t> header = ReadRange(path, 0, 4096);
  digest::Seed seed{};
  for (std::size_t copy = 0; copy < 2; ++copy) {
    std::uint8_t* rec = header.data() + copy * 512;
    ASSERT_EQ(std::memcmp(rec, "S3ORMETA", 8), 0);
    const std::uint32_t version = 2;
    std::memcpy(rec + 8, &version, 4);
    const std::uint32_t crc = Crc32cForTest(rec, 112);
    std::memcpy(rec + 112, &crc, 4);
    std::memcpy(seed.data(), rec + 80, seed.size());
  }
  WriteRange(path, 0, header);
  const std::uint64_t z = meta.shape.bucket_size, m = meta.shape.elems_per_slot;
  const std::uint64_t n = (std::uint64_t{1} << (meta.shape.height + 1)) - 1;
  const std::uint64_t v2_size = (4096 + n * z * m * 4 + 4095) / 4096 * 4096 + n * z * 8;
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(v2_size)), 0);

  std::vector<std::uint8_t> sh(4096, 0);
  auto u32 = [&](std::size_t at, std::uint32_t v) { std::memcpy(&sh[at], &v, 4); };
  auto u64 = [&](std::size_t at, std::uint64_t v) { std::memcpy(&sh[at], &v, 8); };
  std::memcpy(sh.data(), "S3ORSHDW", 8);
  u32(8, 2);
  u32(12, 1);
  std::memcpy(&sh[16], meta.fs_id.data(), 16);
  u32(32, meta.shape.height);
  u32(36, meta.shape.bucket_size);
  u32(40, meta.shape.elems_per_slot);
  u32(44, 5);  // attempt
  u64(48, meta.applied_evictions);
  u64(56, buckets.size());
  u64(64, 4096);
  for (std::size_t i = 0; i < buckets.size(); ++i) u64(72 + 8 * i, buckets[i]);
  const std::size_t used = 72 + 8 * buckets.size();
  u32(used, Crc32cForTest(sh.data(), used));
  const digest::DigestKey key(seed, m);
  for (const auto& bucket : data) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(bucket.data());
    sh.insert(sh.end(), bytes, bytes + bucket.size() * 4);
  }
  for (const auto& bucket : data) {
    for (std::uint64_t q = 0; q < z; ++q) {
      digest::SlotDigest d{};
      ASSERT_TRUE(key.Digest({bucket.data() + q * m, m}, &d));
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(&d);
      sh.insert(sh.end(), bytes, bytes + sizeof d);
    }
  }
  std::ofstream(dir + "/shadow.bin", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(sh.data()), static_cast<std::streamsize>(sh.size()));
}

// A format-2 store is upgraded at Open: its buckets stay where they are, and
// a shadow it sealed before the upgrade moves into the spare places and
// commits (without a copy) to the same tree the old commit would have made.
TEST(ShareStoreDigests, Format2StoreWithASealedShadowIsUpgradedAndCommits) {
  TempDir tmp;
  auto rng = testing::SeededRng();
  ServerMeta meta = MakeMeta(3, 4, 8);
  std::vector<Elem> before;
  std::vector<std::vector<Elem>> shadow;
  {
    auto store = FilledStore(tmp.path(), meta, rng, /*evict=*/false);
    ASSERT_NE(store, nullptr);
    meta = store->meta();
    before = AllBuckets(*store);
    for (std::size_t i = 0; i < kPath.size(); ++i) {
      shadow.push_back(RandomElems(rng, store->tree().bucket_elems()));
    }
  }
  MakeFormat2WithSealedShadow(tmp.path(), meta, kPath, shadow);
  if (HasFatalFailure()) return;
  const std::string shadow_bin = tmp.path() + "/shadow.bin";
  const std::vector<std::uint8_t> old_shadow =
      ReadRange(shadow_bin, 0, static_cast<std::size_t>(std::filesystem::file_size(shadow_bin)));

  {
    // The upgrade, then the move, cut off before the shadow's header was
    // rewritten: the format-3 store moves the format-2 shadow again.
    auto first = MustOpen(tmp.path());
    ASSERT_NE(first, nullptr);
    ASSERT_EQ(first->shadow().SealedEviction(), meta.applied_evictions + 1);
  }
  WriteRange(shadow_bin, 0, old_shadow);
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  ExpectMetaEq(store->meta(), meta);
  struct stat st{};
  ASSERT_EQ(::stat((tmp.path() + "/shares.bin").c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), store->inspection().file_bytes());
  EXPECT_EQ(AllBuckets(*store), before);
  Status v = store->tree().VerifyBuckets(1, before);
  EXPECT_TRUE(v.ok()) << v.ToString();
  ASSERT_EQ(store->shadow().SealedEviction(), meta.applied_evictions + 1);
  ASSERT_TRUE(store->shadow().Commit(meta.applied_evictions, 77, 3).ok());
  for (std::size_t i = 0; i < kPath.size(); ++i) {
    EXPECT_EQ(ReadBucket(*store, kPath[i]), shadow[i]) << "bucket " << kPath[i];
  }
  v = store->tree().VerifyBuckets(1, AllBuckets(*store));
  EXPECT_TRUE(v.ok()) << v.ToString();
  const std::vector<Elem> after = AllBuckets(*store);
  store.reset();
  store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->meta().applied_evictions, meta.applied_evictions + 1);
  EXPECT_EQ(AllBuckets(*store), after);
}

}  // namespace
}  // namespace s3oram::serverd
