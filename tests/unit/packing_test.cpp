// The shared-block layout (fused/block_layout.h) from the arithmetic up:
// BlockLayout against naive bit-by-bit references; MetadataStore packing
// small files into shared blocks, growing fragments in place or by
// relocation, freeing and reusing slots, migrating a schema-2 state; the
// BlockCache writing fragments of one block back in one access without
// touching the other slots; and FileData against a model with simulated
// crashes, where fsynced data must survive and no file may ever show
// another file's bytes. (Through FUSE and the real ORAM: fs_packing_test.)
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fused/block_cache.h"
#include "fused/block_layout.h"
#include "fused/file_data.h"
#include "fused/metadata_store.h"
#include "tests/support/bare_state.h"
#include "tests/support/memory_block_engine.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"

namespace s3oram::fs {
namespace {

using Bytes = std::vector<std::uint8_t>;

// --- BlockLayout ----------------------------------------------------------------

TEST(BlockLayoutTest, SlotGeometry) {
  EXPECT_EQ(BlockLayout::SlotsPerBlock(4096), 1u);
  EXPECT_EQ(BlockLayout::SlotsPerBlock(1024), 1u);
  EXPECT_EQ(BlockLayout::SlotsPerBlock(8192), 2u);
  EXPECT_EQ(BlockLayout::SlotsPerBlock(65536), 16u);
  EXPECT_EQ(BlockLayout::SlotsPerBlock(262144), 64u);
  EXPECT_EQ(BlockLayout::SlotsPerBlock(786432), 64u);  // 12 KiB slots
  EXPECT_EQ(BlockLayout(786432).slot_bytes(), 12288u);
  EXPECT_EQ(BlockLayout::SlotsPerBlock(10000), 2u);  // 2 slots of 5000
  EXPECT_EQ(BlockLayout::SlotsPerBlock(12289), 1u);  // 3 does not divide it
  const BlockLayout l(65536);
  EXPECT_EQ(l.SlotsFor(0), 1u);
  EXPECT_EQ(l.SlotsFor(1), 1u);
  EXPECT_EQ(l.SlotsFor(4096), 1u);
  EXPECT_EQ(l.SlotsFor(4097), 2u);
  EXPECT_EQ(l.SlotsFor(15 * 4096), 15u);
  EXPECT_EQ(l.SlotsFor(15 * 4096 + 1), 0u);  // all 16: a whole block
  EXPECT_EQ(l.SlotsFor(65536), 0u);
  EXPECT_TRUE(l.Holds(0, 65536));
  EXPECT_TRUE(l.Holds(2, 8192));
  EXPECT_FALSE(l.Holds(2, 8193));
  EXPECT_EQ(l.Bytes(Extent{7, 3, 2}), 8192u);
  EXPECT_EQ(l.Offset(Extent{7, 3, 2}), 3u * 4096);
  EXPECT_EQ(l.Bytes(Extent{7, 0, 0}), 65536u);
  EXPECT_EQ(BlockLayout(4096).SlotsFor(100), 0u);  // no sharing at 4 KiB
}

TEST(BlockLayoutTest, FirstFitAndLongestRunMatchNaiveScans) {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  for (std::uint32_t spb : {2u, 16u, 64u}) {
    const BlockLayout l(spb * 4096);
    ASSERT_EQ(l.slots_per_block(), spb);
    for (int round = 0; round < 2000; ++round) {
      std::uint64_t used = g() & g();  // about a quarter of the bits set
      if (spb < 64) used &= (std::uint64_t{1} << spb) - 1;
      std::vector<bool> bit(spb);
      for (std::uint32_t i = 0; i < spb; ++i) bit[i] = (used >> i) & 1;
      std::uint32_t longest = 0, run = 0;
      for (std::uint32_t i = 0; i < spb; ++i) {
        run = bit[i] ? 0 : run + 1;
        longest = std::max(longest, run);
      }
      ASSERT_EQ(l.LongestFree(used), longest) << used;
      const std::uint32_t want = 1 + static_cast<std::uint32_t>(g() % spb);
      int naive = -1;
      for (std::uint32_t s = 0; s + want <= spb && naive < 0; ++s) {
        bool free = true;
        for (std::uint32_t i = s; i < s + want; ++i) free = free && !bit[i];
        if (free) naive = static_cast<int>(s);
      }
      ASSERT_EQ(l.FirstFit(used, want), naive) << used << " " << want;
      if (naive >= 0) {
        const std::uint64_t m = BlockLayout::Mask(static_cast<std::uint32_t>(naive), want);
        ASSERT_EQ(std::popcount(m), static_cast<int>(want));
        ASSERT_EQ(m & used, 0u);
      }
    }
  }
  EXPECT_EQ(BlockLayout::Mask(0, 64), ~std::uint64_t{0});
}

// --- MetadataStore ----------------------------------------------------------------

constexpr std::uint32_t kB = 16384;  // four 4 KiB slots
constexpr std::uint32_t kSlot = 4096;
constexpr std::uint64_t kCapacity = 64;

class PackingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = dir_.Sub("state.db");
    s3oram::testing::CreateBareStateFile(state_);
    auto r = MetadataStore::Open(s3oram::testing::TestState(state_), kCapacity, kB);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    store_ = std::move(r).value();
  }
  Ino File(const std::string& name) {
    Attr a;
    EXPECT_EQ(store_->Create(kRootIno, name, S_IFREG | 0644, 0, 0, 0, &a), 0);
    return a.ino;
  }
  std::vector<BlockMapping> Write(Ino ino, std::uint64_t off, std::uint64_t len) {
    std::vector<BlockMapping> maps;
    Attr before;
    EXPECT_EQ(store_->PrepareWrite(ino, off, len, &maps, &before), 0);
    return maps;
  }
  BlockMapping Only(Ino ino) {
    std::vector<BlockMapping> maps;
    Attr a;
    EXPECT_EQ(store_->GetBlocks(ino, 0, 1, &maps, &a), 0);
    EXPECT_EQ(maps.size(), 1u);
    return maps.empty() ? BlockMapping{} : maps[0];
  }
  void ExpectInvariants() {
    Status s = store_->CheckInvariants();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  std::uint64_t FreeBlocks() {
    FsStats st;
    EXPECT_EQ(store_->StatFs(&st), 0);
    return st.free_blocks;
  }

  s3oram::testing::TempDir dir_;
  std::string state_;
  std::unique_ptr<MetadataStore> store_;
};

TEST_F(PackingStoreTest, SmallFilesShareABlockAndFreeingTheLastFragmentFreesIt) {
  const std::uint64_t free0 = FreeBlocks();
  std::vector<Ino> files;
  for (int i = 0; i < 4; ++i) {
    files.push_back(File("f" + std::to_string(i)));
    auto maps = Write(files.back(), 0, 100 + i);
    ASSERT_EQ(maps.size(), 1u);
    EXPECT_EQ(maps[0].slots, 1u);
    EXPECT_EQ(maps[0].slot, static_cast<std::uint32_t>(i));
    EXPECT_EQ(maps[0].id, Only(files[0]).id) << "all four share the first block";
  }
  Attr a;
  ASSERT_EQ(store_->GetAttr(files[0], &a), 0);
  EXPECT_EQ(a.mapped_bytes, kSlot);
  EXPECT_EQ(FreeBlocks(), free0 - 1);
  // A fifth small file needs a second shared block.
  const Ino fifth = File("f4");
  EXPECT_NE(Write(fifth, 0, 10)[0].id, Only(files[0]).id);
  ExpectInvariants();
  // Freeing slot 1 leaves a hole the next small file takes.
  ASSERT_EQ(store_->Truncate(files[1], 0, nullptr, &a), 0);
  const Ino sixth = File("f5");
  auto m6 = Write(sixth, 0, 50);
  EXPECT_EQ(m6[0].id, Only(files[0]).id);
  EXPECT_EQ(m6[0].slot, 1u);
  // Freeing every fragment of a block frees the block.
  std::vector<BlockId> freed;
  for (Ino f : {files[0], sixth, files[2], files[3]}) {
    ASSERT_EQ(store_->Truncate(f, 0, &freed, &a), 0);
  }
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(FreeBlocks(), free0 - 1);  // the fifth file's block remains
  ExpectInvariants();
}

TEST_F(PackingStoreTest, AFragmentThatHoldsNoDataGrowsInPlace) {
  const Ino f = File("f");
  auto m = Write(f, 0, 10);
  ASSERT_EQ(m[0].slots, 1u);
  // Not written back yet (valid 0): a larger write just replaces the extent.
  m = Write(f, 10, 2 * kSlot);
  EXPECT_EQ(m[0].slots, 3u);
  EXPECT_FALSE(m[0].next.has_value());
  EXPECT_EQ(m[0].valid, 0u);
  // Filling the block makes it whole.
  m = Write(f, 0, kB);
  EXPECT_TRUE(m[0].at().whole());
  EXPECT_FALSE(m[0].next.has_value());
  ExpectInvariants();
}

TEST_F(PackingStoreTest, AFragmentThatHoldsDataIsRelocatedAndSwitchedOnlyByItsWriteBack) {
  const Ino f = File("f");
  const Ino g = File("g");
  auto m = Write(f, 0, 100);
  Write(g, 0, 100);  // a neighbour, so f's block stays shared
  ASSERT_EQ(store_->MarkWritten({{f, 0, m[0].at()}}), 0);
  const Extent old = Only(f).at();
  ASSERT_EQ(Only(f).valid, 100u);
  m = Write(f, 100, 3 * kSlot);  // needs 4 slots: a whole block
  ASSERT_TRUE(m[0].next.has_value());
  EXPECT_TRUE(m[0].next->whole());
  EXPECT_EQ(m[0].at(), old) << "the data stay mapped where they are";
  EXPECT_EQ(m[0].valid, 100u);
  ExpectInvariants();
  // A report for the old extent (a write-back that started before) keeps
  // the relocation pending.
  ASSERT_EQ(store_->MarkWritten({{f, 0, old}}), 0);
  EXPECT_TRUE(Only(f).next.has_value());
  // The write-back to the new extent switches and frees the old slots.
  ASSERT_EQ(store_->MarkWritten({{f, 0, *m[0].next}}), 0);
  const BlockMapping now = Only(f);
  EXPECT_EQ(now.at(), *m[0].next);
  EXPECT_FALSE(now.next.has_value());
  EXPECT_EQ(now.valid, 100u + 3 * kSlot);
  ExpectInvariants();
  // The old slot is free again: the next small file takes it.
  const Ino h = File("h");
  EXPECT_EQ(Write(h, 0, 1)[0].at(), old);
  ExpectInvariants();
}

TEST_F(PackingStoreTest, GrowingARelocationTargetAgainReplacesTheTargetOnly) {
  const Ino f = File("f");
  auto m = Write(f, 0, 100);
  ASSERT_EQ(store_->MarkWritten({{f, 0, m[0].at()}}), 0);
  m = Write(f, 0, kSlot + 1);
  ASSERT_TRUE(m[0].next.has_value());
  EXPECT_EQ(m[0].next->slots, 2u);
  m = Write(f, 0, 2 * kSlot + 1);
  ASSERT_TRUE(m[0].next.has_value());
  EXPECT_EQ(m[0].next->slots, 3u);
  EXPECT_EQ(m[0].slots, 1u);
  ExpectInvariants();
  // Truncating the file away frees the extent and the target.
  Attr a;
  ASSERT_EQ(store_->Truncate(f, 0, nullptr, &a), 0);
  EXPECT_EQ(FreeBlocks(), kCapacity);
  ExpectInvariants();
}

TEST_F(PackingStoreTest, SparseBlocksAndTailsAreFragmentsAndTruncateKeepsThemConsistent) {
  const Ino f = File("f");
  // Three full blocks, then a tail of 5000 bytes: whole, whole, whole, 2 slots.
  auto m = Write(f, 0, 3 * kB + 5000);
  ASSERT_EQ(m.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(m[i].at().whole()) << i;
  EXPECT_EQ(m[3].slots, 2u);
  // A hole, then a small write far out: a fragment for that block only.
  m = Write(f, 10 * kB + 100, 10);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].slots, 1u);
  std::vector<WrittenExtent> w;
  std::vector<BlockMapping> all;
  Attr a;
  ASSERT_EQ(store_->GetBlocks(f, 0, 100, &all, &a), 0);
  ASSERT_EQ(all.size(), 5u);
  for (const auto& bm : all) w.push_back({f, bm.idx, bm.at()});
  ASSERT_EQ(store_->MarkWritten(w), 0);
  ASSERT_EQ(store_->GetBlocks(f, 0, 100, &all, &a), 0);
  EXPECT_EQ(all[3].valid, 2u * kSlot);  // the part below the size, within the extent
  EXPECT_EQ(all[4].valid, 110u);
  // Truncate into the tail block: later blocks go, the tail's valid drops.
  ASSERT_EQ(store_->Truncate(f, 3 * kB + 10, nullptr, &a), 0);
  ASSERT_EQ(store_->GetBlocks(f, 0, 100, &all, &a), 0);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[3].valid, 10u);
  EXPECT_EQ(a.mapped_bytes, 3u * kB + 2 * kSlot);
  ExpectInvariants();
}

TEST_F(PackingStoreTest, FullDiskFailsTheWholeWriteAndChangesNothing) {
  // Fill all but one block with whole blocks, then ask for two.
  const Ino big = File("big");
  Write(big, 0, (kCapacity - 1) * kB);
  const Ino f = File("f");
  std::vector<BlockMapping> maps;
  Attr before;
  EXPECT_EQ(store_->PrepareWrite(f, 0, kB + 1, &maps, &before), ENOSPC);
  Attr a;
  ASSERT_EQ(store_->GetAttr(f, &a), 0);
  EXPECT_EQ(a.size, 0u);
  // Small files still fit in the last block, four of them.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(store_->PrepareWrite(File("s" + std::to_string(i)), 0, 10, &maps, &before), 0);
  }
  EXPECT_EQ(store_->PrepareWrite(File("s4"), 0, 10, &maps, &before), ENOSPC);
  ExpectInvariants();
}

TEST_F(PackingStoreTest, SchemaTwoStateIsMigratedToWholeExtents) {
  store_.reset();
  // Rewrite the state as schema 2 had it: fs_blocks with a unique block_id,
  // no fs_shared, no slots_per_block.
  sqlite3* db = nullptr;
  db = s3oram::testing::OpenTestStateDb(state_);
  ASSERT_NE(db, nullptr);
  const char* sql = R"sql(
    DROP TABLE fs_blocks; DROP TABLE fs_shared;
    CREATE TABLE fs_blocks(ino INTEGER NOT NULL, idx INTEGER NOT NULL,
      block_id INTEGER NOT NULL UNIQUE, valid INTEGER NOT NULL DEFAULT 0,
      PRIMARY KEY(ino, idx)) WITHOUT ROWID;
    INSERT INTO fs_inodes(ino, mode, uid, gid, nlink, size, rdev, atime_ns, mtime_ns, ctime_ns)
      VALUES (2, 33188, 0, 0, 1, 20000, 0, 0, 0, 0);
    INSERT INTO fs_dirents(parent, name, ino) VALUES (1, CAST('old' AS BLOB), 2);
    INSERT INTO fs_blocks VALUES (2, 0, 0, 16384), (2, 1, 1, 3616);
    UPDATE fs_meta SET value = 2 WHERE key = 'schema_version';
    UPDATE fs_meta SET value = 2 WHERE key = 'next_unused';
    DELETE FROM fs_meta WHERE key = 'slots_per_block';
  )sql";
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_close(db);

  auto r = MetadataStore::Open(s3oram::testing::TestState(state_), kCapacity, kB);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  store_ = std::move(r).value();
  std::vector<BlockMapping> maps;
  Attr a;
  ASSERT_EQ(store_->GetBlocks(2, 0, 10, &maps, &a), 0);
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_TRUE(maps[0].at().whole());
  EXPECT_TRUE(maps[1].at().whole());
  EXPECT_EQ(maps[1].valid, 3616u);
  ExpectInvariants();
  // New small files pack from here on.
  const Ino f = File("new");
  EXPECT_EQ(Write(f, 0, 10)[0].slots, 1u);
  ExpectInvariants();
}

TEST_F(PackingStoreTest, RandomOperationsKeepTheInvariants) {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  std::vector<Ino> files;
  for (int i = 0; i < 12; ++i) files.push_back(File("r" + std::to_string(i)));
  for (int op = 0; op < 600; ++op) {
    const Ino f = files[g() % files.size()];
    switch (g() % 5) {
      case 0:
      case 1: {
        const std::uint64_t off = g() % (3 * kB);
        const std::uint64_t len = 1 + g() % (g() % 2 ? 300 : kB);
        std::vector<BlockMapping> maps;
        Attr before;
        const int e = store_->PrepareWrite(f, off, len, &maps, &before);
        ASSERT_TRUE(e == 0 || e == ENOSPC) << e;
        break;
      }
      case 2: {  // a write-back of every block of the file, to its target
        std::vector<BlockMapping> maps;
        Attr a;
        ASSERT_EQ(store_->GetBlocks(f, 0, 100, &maps, &a), 0);
        std::vector<WrittenExtent> w;
        for (const auto& bm : maps) w.push_back({f, bm.idx, bm.target()});
        ASSERT_EQ(store_->MarkWritten(w), 0);
        break;
      }
      case 3: {
        Attr a;
        ASSERT_EQ(store_->Truncate(f, g() % (2 * kB), nullptr, &a), 0);
        break;
      }
      case 4: {  // a write-back that raced a relocation: reported for the old extent
        std::vector<BlockMapping> maps;
        Attr a;
        ASSERT_EQ(store_->GetBlocks(f, 0, 100, &maps, &a), 0);
        std::vector<WrittenExtent> w;
        for (const auto& bm : maps) w.push_back({f, bm.idx, bm.at()});
        ASSERT_EQ(store_->MarkWritten(w), 0);
        break;
      }
    }
    Status s = store_->CheckInvariants();
    ASSERT_TRUE(s.ok()) << "op " << op << ": " << s.ToString();
  }
}

// --- BlockCache -------------------------------------------------------------------

struct CacheFixture {
  s3oram::testing::MemoryBlockEngine engine{kB};
  InodeLocks locks;
  std::vector<WrittenExtent> marked;
  BlockCache cache{engine, locks, 16, [this](const std::vector<WrittenExtent>& w) {
                     marked.insert(marked.end(), w.begin(), w.end());
                     return 0;
                   }};
};

BlockMapping Frag(std::uint64_t idx, BlockId id, std::uint32_t slot, std::uint32_t slots,
                  std::uint32_t valid) {
  BlockMapping m;
  m.idx = idx;
  m.id = id;
  m.slot = slot;
  m.slots = slots;
  m.valid = valid;
  return m;
}

TEST(PackingCacheTest, FragmentsOfOneBlockGoBackInOneAccessAndLeaveOtherSlotsAlone) {
  CacheFixture f;
  // Slot 3 of block 5 belongs to a file this cache never touches.
  Bytes other(kB, 0);
  std::fill(other.begin() + 3 * kSlot, other.end(), std::uint8_t{0x33});
  f.engine.blocks[5] = other;
  const Bytes a(100, 0xA1), b(kSlot, 0xB2), c(10, 0xC3);
  ASSERT_EQ(f.cache.Write({10, 0}, Frag(0, 5, 0, 1, 0), 0, a), 0);
  ASSERT_EQ(f.cache.Write({11, 0}, Frag(0, 5, 1, 1, 0), 0, b), 0);
  ASSERT_EQ(f.cache.Write({12, 0}, Frag(0, 5, 2, 1, 0), 5, c), 0);
  // Written past the extent: refused (PrepareWrite would have grown it).
  EXPECT_EQ(f.cache.Write({12, 0}, Frag(0, 5, 2, 1, 0), kSlot - 1, c), EINVAL);
  {
    std::lock_guard<std::mutex> l(f.locks.For(10));
    ASSERT_EQ(f.cache.FlushInode(10), 0);
  }
  EXPECT_EQ(f.engine.updates, 1) << "one access for the three files";
  EXPECT_EQ(f.engine.writes, 0);
  EXPECT_EQ(f.cache.stats().coalesced, 2u);
  ASSERT_EQ(f.marked.size(), 3u);
  const Bytes& blk = f.engine.blocks[5];
  EXPECT_TRUE(std::equal(a.begin(), a.end(), blk.begin()));
  EXPECT_TRUE(std::all_of(blk.begin() + 100, blk.begin() + kSlot, [](auto x) { return x == 0; }));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), blk.begin() + kSlot));
  EXPECT_TRUE(std::all_of(blk.begin() + 2 * kSlot, blk.begin() + 2 * kSlot + 5,
                          [](auto x) { return x == 0; }));
  EXPECT_TRUE(std::equal(c.begin(), c.end(), blk.begin() + 2 * kSlot + 5));
  EXPECT_TRUE(std::all_of(blk.begin() + 3 * kSlot, blk.end(), [](auto x) { return x == 0x33; }));
  EXPECT_EQ(f.cache.stats().dirty, 0u);
}

TEST(PackingCacheTest, ABusyNeighbourIsLeftForItsOwnTurn) {
  CacheFixture f;
  const Bytes a(10, 1), b(10, 2);
  // Inodes 1 and 2 use different stripes.
  ASSERT_NE(f.locks.StripeOf(1), f.locks.StripeOf(2));
  ASSERT_EQ(f.cache.Write({1, 0}, Frag(0, 4, 0, 1, 0), 0, a), 0);
  ASSERT_EQ(f.cache.Write({2, 0}, Frag(0, 4, 1, 1, 0), 0, b), 0);
  std::lock_guard<std::mutex> busy(f.locks.For(2));  // "its owner is using the file"
  {
    std::lock_guard<std::mutex> l(f.locks.For(1));
    ASSERT_EQ(f.cache.FlushInode(1), 0);
  }
  EXPECT_EQ(f.engine.updates, 1);
  EXPECT_TRUE(f.cache.HasDirty(2));
  EXPECT_FALSE(f.cache.HasDirty(1));
}

TEST(PackingCacheTest, LoadedFragmentsShowOnlyTheirOwnValidBytes) {
  CacheFixture f;
  Bytes blk(kB, 0x77);
  f.engine.blocks[6] = blk;
  Bytes out(kSlot * 2, 0xFF);
  // Slots 1..2 of block 6, 5000 bytes valid: the rest reads as zeros.
  ASSERT_EQ(f.cache.Read({3, 0}, Frag(0, 6, 1, 2, 5000), 0, out), 0);
  EXPECT_TRUE(std::all_of(out.begin(), out.begin() + 5000, [](auto x) { return x == 0x77; }));
  EXPECT_TRUE(std::all_of(out.begin() + 5000, out.end(), [](auto x) { return x == 0; }));
  Bytes past(kSlot, 0xFF);
  ASSERT_EQ(f.cache.Read({3, 0}, Frag(0, 6, 1, 2, 5000), 2 * kSlot, past), 0);
  EXPECT_TRUE(std::all_of(past.begin(), past.end(), [](auto x) { return x == 0; }));
}

TEST(PackingCacheTest, APartialPageBeingRelocatedIsLoadedThenWrittenWhole) {
  CacheFixture f;
  // File 7's block 0: 3000 bytes in slot 2 of block 8.
  Bytes blk(kB, 0x55);
  f.engine.blocks[8] = blk;
  BlockMapping m = Frag(0, 8, 2, 1, 3000);
  const Bytes w(10, 0x99);
  ASSERT_EQ(f.cache.Write({7, 0}, m, 100, w), 0);  // partial: no load
  EXPECT_EQ(f.engine.reads, 0);
  // Then a write that needs two slots: PrepareWrite would relocate to whole block 9.
  m.next = Extent{9, 0, 0};
  const Bytes w2(kSlot, 0x44);
  ASSERT_EQ(f.cache.Write({7, 0}, m, kSlot, w2), 0);
  {
    std::lock_guard<std::mutex> l(f.locks.For(7));
    ASSERT_EQ(f.cache.FlushInode(7), 0);
  }
  EXPECT_EQ(f.engine.reads, 1) << "the old copy was loaded once";
  ASSERT_EQ(f.marked.size(), 1u);
  EXPECT_EQ(f.marked[0].extent, (Extent{9, 0, 0}));
  const Bytes& nb = f.engine.blocks[9];
  EXPECT_TRUE(std::all_of(nb.begin(), nb.begin() + 100, [](auto x) { return x == 0x55; }));
  EXPECT_TRUE(std::equal(w.begin(), w.end(), nb.begin() + 100));
  EXPECT_TRUE(std::all_of(nb.begin() + 110, nb.begin() + 3000, [](auto x) { return x == 0x55; }));
  EXPECT_TRUE(std::all_of(nb.begin() + 3000, nb.begin() + kSlot, [](auto x) { return x == 0; }));
  EXPECT_TRUE(std::equal(w2.begin(), w2.end(), nb.begin() + kSlot));
  EXPECT_TRUE(std::all_of(nb.begin() + 2 * kSlot, nb.end(), [](auto x) { return x == 0; }));
  // The old block was not written.
  EXPECT_EQ(f.engine.blocks[8], blk);
}

// --- FileData against a model, with crashes -------------------------------------------

constexpr std::uint64_t kFdCapacity = 96;

struct Daemon {
  Daemon(const std::string& state, s3oram::testing::MemoryBlockEngine& engine,
         std::size_t cache_pages) {
    auto r = MetadataStore::Open(s3oram::testing::TestState(state), kFdCapacity, kB);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    meta = std::move(r).value();
    cache = std::make_unique<BlockCache>(
        engine, locks, cache_pages,
        [this](const std::vector<WrittenExtent>& w) { return meta->MarkWritten(w); });
    data =
        std::make_unique<FileData>(*meta, *cache, engine, locks, std::chrono::milliseconds(60000));
  }
  std::unique_ptr<MetadataStore> meta;
  InodeLocks locks;
  std::unique_ptr<BlockCache> cache;
  std::unique_ptr<FileData> data;
};

Bytes Pattern(std::size_t n, std::uint64_t seed) {
  Bytes b(n);
  std::mt19937_64 rng(seed);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng() | 1);  // never 0: zeros stand out
  return b;
}

// Random writes, appends, truncates, fsyncs and crashes over a dozen small
// and medium files. After every crash each file is either exactly as last
// fsynced or, for blocks written since, holds bytes it was given at some
// point or zeros: never another file's bytes (every file's pattern is
// distinct) and never the engine's stale 0xEE.
TEST(PackingFileDataTest, RandomWorkloadWithCrashesAgainstAModel) {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  s3oram::testing::TempDir dir;
  const std::string state = dir.Sub("state.db");
  s3oram::testing::CreateBareStateFile(state);
  s3oram::testing::MemoryBlockEngine engine{kB, kFdCapacity};
  auto d = std::make_unique<Daemon>(state, engine, 6);
  constexpr int kFiles = 12;
  std::vector<Ino> ino(kFiles);
  std::vector<Bytes> now(kFiles), synced(kFiles);
  // Bytes changed since the file's last fsync: after a crash they may hold
  // any value the file was given, or zero; the others are as fsynced.
  std::vector<std::vector<bool>> touched(kFiles);
  auto touch = [&](int i, std::uint64_t from, std::uint64_t to) {
    if (touched[i].size() < to) touched[i].resize(to, false);
    for (std::uint64_t b = from; b < to; ++b) touched[i][b] = true;
  };
  for (int i = 0; i < kFiles; ++i) {
    Attr a;
    ASSERT_EQ(d->meta->Create(kRootIno, "f" + std::to_string(i), S_IFREG | 0644, 0, 0, 0, &a), 0);
    ino[i] = a.ino;
    ASSERT_EQ(d->data->Fsync(ino[i]), 0);
  }
  // File i's writes use byte values v with v % kFiles == i (12..227, so
  // never the engine's stale 0xEE), so a byte shows its owner.
  auto value = [&](int i, std::uint64_t salt) {
    return static_cast<std::uint8_t>(kFiles * (1 + salt % 18) + i);
  };
  auto owner_ok = [&](int i, std::uint8_t v) { return v == 0 || v % kFiles == i; };
  for (int op = 0; op < 700; ++op) {
    const int i = static_cast<int>(g() % kFiles);
    const int kind = static_cast<int>(g() % 20);
    if (kind < 9) {  // write: mostly small, at or near the end
      const std::uint64_t off = g() % 2 ? now[i].size() : g() % (now[i].size() + 1 + kB);
      const std::size_t len = 1 + g() % (g() % 4 == 0 ? 2 * kB : 3000);
      if (off + len > 5 * kB) continue;
      Bytes src(len, value(i, g()));
      const int e = d->data->Write(ino[i], off, src);
      if (e == ENOSPC) continue;
      ASSERT_EQ(e, 0);
      if (now[i].size() < off + len) now[i].resize(off + len, 0);
      std::copy(src.begin(), src.end(), now[i].begin() + static_cast<std::ptrdiff_t>(off));
      touch(i, off, off + len);
    } else if (kind < 11) {
      const std::uint64_t size = g() % (now[i].size() + kSlot + 1);
      Attr a;
      ASSERT_EQ(d->data->Truncate(ino[i], size, &a), 0);
      touch(i, std::min<std::uint64_t>(size, now[i].size()),
            std::max<std::uint64_t>(size, now[i].size()) + 1);
      now[i].resize(size, 0);
    } else if (kind < 15) {
      ASSERT_EQ(d->data->Fsync(ino[i]), 0);
      synced[i] = now[i];
      touched[i].assign(touched[i].size(), false);
    } else if (kind < 17) {
      Bytes out;
      ASSERT_EQ(d->data->Read(ino[i], 0, now[i].size() + 10, &out), 0);
      ASSERT_EQ(out, now[i]) << "file " << i << " op " << op;
    } else if (kind < 18) {
      ASSERT_EQ(d->data->FlushAllAndSync(), 0);
      synced = now;
      for (auto& t : touched) t.assign(t.size(), false);
    } else if (kind < 19) {
      // Crash: the cache's dirty pages vanish. Then check every file.
      d.reset();
      d = std::make_unique<Daemon>(state, engine, 6);
      Status s = d->meta->CheckInvariants();
      ASSERT_TRUE(s.ok()) << "op " << op << ": " << s.ToString();
      for (int k = 0; k < kFiles; ++k) {
        Attr a;
        ASSERT_EQ(d->meta->GetAttr(ino[k], &a), 0);
        Bytes out;
        ASSERT_EQ(d->data->Read(ino[k], 0, a.size + 10, &out), 0);
        ASSERT_EQ(out.size(), a.size);
        for (std::size_t b = 0; b < out.size(); ++b) {
          ASSERT_TRUE(owner_ok(k, out[b]))
              << "file " << k << " byte " << b << " is " << int(out[b]) << " after op " << op;
        }
        // Every fsynced byte not changed since is there.
        for (std::size_t b = 0; b < synced[k].size(); ++b) {
          if (b < touched[k].size() && touched[k][b]) continue;
          ASSERT_LT(b, out.size()) << "file " << k << " lost fsynced bytes, op " << op;
          ASSERT_EQ(out[b], synced[k][b]) << "file " << k << " byte " << b << " op " << op;
        }
        now[k] = out;
        synced[k] = out;
        touched[k].assign(touched[k].size(), false);
      }
    } else {
      ASSERT_EQ(d->data->Flush(ino[i]), 0);  // close: with a delay, writes nothing
    }
  }
  ASSERT_EQ(d->data->FlushAllAndSync(), 0);
  Status s = d->meta->CheckInvariants();
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int k = 0; k < kFiles; ++k) {
    Bytes out;
    ASSERT_EQ(d->data->Read(ino[k], 0, now[k].size() + 10, &out), 0);
    ASSERT_EQ(out, now[k]) << k;
  }
  // Packing happened: fewer blocks in use than files with data.
  EXPECT_GT(engine.updates, 0);
}

// Fsynced data survive a crash exactly: write, fsync, write more (not
// synced, may relocate), crash, and the fsynced bytes are all there.
TEST(PackingFileDataTest, FsyncedBytesSurviveACrashDuringRelocation) {
  s3oram::testing::TempDir dir;
  const std::string state = dir.Sub("state.db");
  s3oram::testing::CreateBareStateFile(state);
  s3oram::testing::MemoryBlockEngine engine{kB, kFdCapacity};
  auto d = std::make_unique<Daemon>(state, engine, 6);
  Attr a;
  ASSERT_EQ(d->meta->Create(kRootIno, "f", S_IFREG | 0644, 0, 0, 0, &a), 0);
  const Ino f = a.ino;
  ASSERT_EQ(d->meta->Create(kRootIno, "g", S_IFREG | 0644, 0, 0, 0, &a), 0);
  const Ino gi = a.ino;
  const Bytes first = Pattern(3000, 1);
  ASSERT_EQ(d->data->Write(f, 0, first), 0);
  ASSERT_EQ(d->data->Write(gi, 0, Pattern(200, 2)), 0);
  ASSERT_EQ(d->data->FlushAllAndSync(), 0);
  // Grow f to two slots (a relocation), write back g only, crash.
  ASSERT_EQ(d->data->Write(f, 3000, Pattern(5000, 3)), 0);
  ASSERT_EQ(d->data->Write(gi, 200, Pattern(100, 4)), 0);
  ASSERT_EQ(d->data->Fsync(gi), 0);
  d.reset();
  d = std::make_unique<Daemon>(state, engine, 6);
  Bytes out;
  ASSERT_EQ(d->data->Read(f, 0, 100000, &out), 0);
  ASSERT_EQ(out.size(), 8000u);  // the size was committed with the write
  EXPECT_TRUE(std::equal(first.begin(), first.end(), out.begin())) << "fsynced bytes lost";
  // The unsynced tail is either not there (zeros) or all there: g's fsync
  // may have taken f's relocated page along when their slots share a block.
  const Bytes tail = Pattern(5000, 3);
  const bool zeros = std::all_of(out.begin() + 3000, out.end(), [](auto x) { return x == 0; });
  const bool written = std::equal(tail.begin(), tail.end(), out.begin() + 3000);
  EXPECT_TRUE(zeros || written);
  Status s = d->meta->CheckInvariants();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace s3oram::fs
