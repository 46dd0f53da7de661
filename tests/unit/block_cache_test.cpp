// BlockCache over an in-memory BlockEngine: hits and loads, valid-length
// zeroing, write coalescing, capacity, discard, flush errors, and
// concurrent writers against a model. (End-to-end, the cache runs over the
// real ORAM in the fs_* integration tests.)
#include "fused/block_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "tests/support/memory_block_engine.h"
#include "tests/support/test_seed.h"

namespace s3oram::fs {
namespace {

constexpr std::uint32_t kB = 64;

std::vector<std::uint8_t> Bytes(std::size_t n, std::uint8_t v) {
  return std::vector<std::uint8_t>(n, v);
}

struct Fixture {
  s3oram::testing::MemoryBlockEngine engine{kB};
  InodeLocks locks;
  std::vector<BlockId> marked;
  std::mutex marked_mu;
  BlockCache cache{engine, locks, 4, [this](const std::vector<WrittenExtent>& w) {
                     std::lock_guard<std::mutex> l(marked_mu);
                     for (const WrittenExtent& e : w) marked.push_back(e.extent.id);
                     return 0;
                   }};
};

// A whole-block mapping of file block `idx` to ORAM block `id`.
BlockMapping Map(std::uint64_t idx, BlockId id, std::uint32_t valid) {
  BlockMapping m;
  m.idx = idx;
  m.id = id;
  m.valid = valid;
  return m;
}

TEST(BlockCacheTest, ValidZeroNeedsNoAccessAndHidesOldData) {
  Fixture f;
  std::vector<std::uint8_t> out(kB, 0x11);
  ASSERT_EQ(f.cache.Read({1, 0}, Map(0, 7, 0), 0, out), 0);
  EXPECT_EQ(out, Bytes(kB, 0));
  EXPECT_EQ(f.engine.reads, 0);
  // A partial write to a fresh block does not load it: the rest is zeros.
  auto src = Bytes(8, 0xAB);
  ASSERT_EQ(f.cache.Write({1, 0}, Map(0, 7, 0), 4, src), 0);
  EXPECT_EQ(f.engine.reads, 0);
  ASSERT_EQ(f.cache.Read({1, 0}, Map(0, 7, 0), 0, out), 0);
  for (std::size_t i = 0; i < kB; ++i) EXPECT_EQ(out[i], (i >= 4 && i < 12) ? 0xAB : 0) << i;
}

TEST(BlockCacheTest, LoadZeroesPastValidAndCoalescesWrites) {
  Fixture f;
  f.engine.blocks[3] = Bytes(kB, 0x55);
  std::vector<std::uint8_t> out(kB);
  ASSERT_EQ(f.cache.Read({2, 0}, Map(0, 3, 10), 0, out), 0);
  EXPECT_EQ(f.engine.reads, 1);
  for (std::size_t i = 0; i < kB; ++i) EXPECT_EQ(out[i], i < 10 ? 0x55 : 0) << i;
  // Cached: no second load; many small writes, one write-back.
  ASSERT_EQ(f.cache.Read({2, 0}, Map(0, 3, 10), 0, out), 0);
  EXPECT_EQ(f.engine.reads, 1);
  for (std::uint8_t i = 0; i < 16; ++i) {
    std::uint8_t b = i;
    ASSERT_EQ(f.cache.Write({2, 0}, Map(0, 3, 10), i, std::span(&b, 1)), 0);
  }
  EXPECT_TRUE(f.cache.HasDirty(2));
  ASSERT_EQ(f.cache.FlushInode(2), 0);
  EXPECT_EQ(f.engine.writes, 1);
  EXPECT_FALSE(f.cache.HasDirty(2));
  EXPECT_EQ(f.marked, std::vector<BlockId>{3});
  for (std::size_t i = 0; i < kB; ++i) EXPECT_EQ(f.engine.blocks[3][i], i < 16 ? i : 0) << i;
  ASSERT_EQ(f.cache.FlushInode(2), 0);  // nothing dirty: nothing written
  EXPECT_EQ(f.engine.writes, 1);
}

TEST(BlockCacheTest, PartialWriteOfAWrittenBlockIsOneUpdateAndNoLoad) {
  Fixture f;
  f.engine.blocks[3] = Bytes(kB, 0x55);  // valid 40: bytes 40.. are stale (another owner's)
  auto src = Bytes(8, 0xAB);
  ASSERT_EQ(f.cache.Write({2, 0}, Map(0, 3, 40), 10, src), 0);
  ASSERT_EQ(f.cache.Write({2, 0}, Map(0, 3, 40), 50, src), 0);  // past valid
  EXPECT_EQ(f.engine.reads, 0);
  // Reads of bytes the page holds need no access.
  std::vector<std::uint8_t> out(8);
  ASSERT_EQ(f.cache.Read({2, 0}, Map(0, 3, 40), 50, out), 0);
  EXPECT_EQ(out, src);
  EXPECT_EQ(f.engine.reads, 0);
  ASSERT_EQ(f.cache.FlushInode(2), 0);
  EXPECT_EQ(f.engine.reads, 0);
  EXPECT_EQ(f.engine.writes, 0);
  EXPECT_EQ(f.engine.updates, 1);
  EXPECT_EQ(f.cache.stats().updates, 1u);
  EXPECT_EQ(f.marked, std::vector<BlockId>{3});
  for (std::size_t i = 0; i < kB; ++i) {
    const std::uint8_t want =
        (i >= 10 && i < 18) || (i >= 50 && i < 58) ? 0xAB : (i < 40 ? 0x55 : 0);
    EXPECT_EQ(f.engine.blocks[3][i], want) << i;
  }
  // The page is complete now: every byte reads without an access.
  out.assign(kB, 0);
  ASSERT_EQ(f.cache.Read({2, 0}, Map(0, 3, 58), 0, out), 0);
  EXPECT_EQ(out, f.engine.blocks[3]);
  EXPECT_EQ(f.engine.reads, 0);
}

TEST(BlockCacheTest, ReadOfBytesAPartialPageLacksLoadsOnceAndKeepsTheWrites) {
  Fixture f;
  f.engine.blocks[4] = Bytes(kB, 0x55);
  auto src = Bytes(4, 0x0C);
  ASSERT_EQ(f.cache.Write({2, 1}, Map(1, 4, 32), 30, src), 0);
  std::vector<std::uint8_t> out(kB);
  ASSERT_EQ(f.cache.Read({2, 1}, Map(1, 4, 32), 0, out), 0);
  EXPECT_EQ(f.engine.reads, 1);
  for (std::size_t i = 0; i < kB; ++i) {
    EXPECT_EQ(out[i], (i >= 30 && i < 34) ? 0x0C : (i < 32 ? 0x55 : 0)) << i;
  }
  // Complete but still dirty: its write-back is an ordinary write.
  ASSERT_EQ(f.cache.FlushInode(2), 0);
  EXPECT_EQ(f.engine.writes, 1);
  EXPECT_EQ(f.engine.updates, 0);
  EXPECT_EQ(f.engine.blocks[4], out);
}

TEST(BlockCacheTest, PartialPageZeroTailAndFailedUpdate) {
  Fixture f;
  f.engine.blocks[6] = Bytes(kB, 0x55);
  auto src = Bytes(4, 0x0D);
  ASSERT_EQ(f.cache.Write({3, 0}, Map(0, 6, kB), 2, src), 0);
  f.cache.ZeroTail({3, 0}, 20);  // truncated to 20 bytes within this block
  f.engine.fail = true;
  EXPECT_EQ(f.cache.FlushInode(3), EIO);
  EXPECT_TRUE(f.cache.HasDirty(3));
  EXPECT_EQ(f.engine.blocks[6], Bytes(kB, 0x55));  // nothing stored
  f.engine.fail = false;
  ASSERT_EQ(f.cache.FlushInode(3), 0);
  for (std::size_t i = 0; i < kB; ++i) {
    EXPECT_EQ(f.engine.blocks[6][i], (i >= 2 && i < 6) ? 0x0D : (i < 20 ? 0x55 : 0)) << i;
  }
}

TEST(BlockCacheTest, PartialWritesCoveringTheBlockMakeAnOrdinaryPage) {
  Fixture f;
  f.engine.blocks[8] = Bytes(kB, 0x55);
  auto half = Bytes(kB / 2, 0x01);
  ASSERT_EQ(f.cache.Write({5, 0}, Map(0, 8, kB), kB / 2, half), 0);
  ASSERT_EQ(f.cache.Write({5, 0}, Map(0, 8, kB), 0, half), 0);
  ASSERT_EQ(f.cache.FlushInode(5), 0);
  EXPECT_EQ(f.engine.writes, 1);
  EXPECT_EQ(f.engine.updates, 0);
  EXPECT_EQ(f.engine.blocks[8], Bytes(kB, 0x01));
}

TEST(BlockCacheTest, WholeBlockWriteSkipsLoad) {
  Fixture f;
  f.engine.blocks[9] = Bytes(kB, 0x55);
  auto src = Bytes(kB, 0x77);
  ASSERT_EQ(f.cache.Write({1, 5}, Map(5, 9, kB), 0, src), 0);
  EXPECT_EQ(f.engine.reads, 0);
}

// A lost block (its last write never reached the servers) must not come back
// as the servers' older bytes or as zeros: reads fail, a write of part of it
// fails before anything is cached (its write-back would fill the rest from
// the servers and clear the mark), and a whole-block write replaces it.
TEST(BlockCacheTest, LostBlockRefusesReadsAndPartialWritesButTakesAWholeWrite) {
  for (std::uint32_t valid : {0u, kB / 2, kB}) {
    SCOPED_TRACE(valid);
    Fixture f;
    f.engine.blocks[12] = Bytes(kB, 0x55);
    BlockMapping m = Map(0, 12, valid);
    m.lost = true;
    std::vector<std::uint8_t> out(kB);
    EXPECT_EQ(f.cache.Read({4, 0}, m, 0, out), EIO);
    auto tail = Bytes(8, 0x0E);
    EXPECT_EQ(f.cache.Write({4, 0}, m, kB - 8, tail), EIO);
    auto head = Bytes(kB - 1, 0x0E);
    EXPECT_EQ(f.cache.Write({4, 0}, m, 0, head), EIO);
    EXPECT_FALSE(f.cache.Cached({4, 0}));
    EXPECT_FALSE(f.cache.HasDirty(4));
    EXPECT_EQ(f.engine.reads, 0);
    auto whole = Bytes(kB, 0x0F);
    ASSERT_EQ(f.cache.Write({4, 0}, m, 0, whole), 0);
    ASSERT_EQ(f.cache.Read({4, 0}, m, 0, out), 0);
    EXPECT_EQ(out, whole);
    ASSERT_EQ(f.cache.FlushInode(4), 0);
    EXPECT_EQ(f.engine.blocks[12], whole);
    EXPECT_EQ(f.engine.reads, 0);
  }
}

TEST(BlockCacheTest, ShrinkWritesBackLeastRecentlyUsedAndKeepsCapacity) {
  Fixture f;
  for (std::uint64_t i = 0; i < 10; ++i) {
    auto src = Bytes(kB, static_cast<std::uint8_t>(i + 1));
    ASSERT_EQ(f.cache.Write({1, i}, Map(i, 100 + i, 0), 0, src), 0);
    ASSERT_EQ(f.cache.Shrink(), 0);
    EXPECT_LE(f.cache.stats().pages, 4u);
  }
  EXPECT_EQ(f.engine.writes, 6);  // blocks 0..5 were pushed out
  for (std::uint64_t i = 0; i < 6; ++i) EXPECT_EQ(f.engine.blocks[100 + i], Bytes(kB, i + 1));
  ASSERT_EQ(f.cache.FlushAll(), 0);
  EXPECT_EQ(f.engine.writes, 10);
  // A page pushed out is read back through the engine.
  std::vector<std::uint8_t> out(kB);
  ASSERT_EQ(f.cache.Read({1, 0}, Map(0, 100, kB), 0, out), 0);
  EXPECT_EQ(out, Bytes(kB, 1));
}

TEST(BlockCacheTest, DiscardDropsDirtyPagesAndZeroTailClearsTail) {
  Fixture f;
  auto src = Bytes(kB, 0x42);
  ASSERT_EQ(f.cache.Write({4, 0}, Map(0, 1, 0), 0, src), 0);
  ASSERT_EQ(f.cache.Write({4, 1}, Map(1, 2, 0), 0, src), 0);
  f.cache.Discard(4, 1);
  f.cache.ZeroTail({4, 0}, 5);
  ASSERT_EQ(f.cache.FlushAll(), 0);
  EXPECT_EQ(f.engine.writes, 1);  // block 2 was discarded unwritten
  for (std::size_t i = 0; i < kB; ++i) EXPECT_EQ(f.engine.blocks[1][i], i < 5 ? 0x42 : 0) << i;
  EXPECT_EQ(f.engine.blocks.count(2), 0u);
}

TEST(BlockCacheTest, FailedWriteBackStaysDirtyAndFailedLoadCachesNothing) {
  Fixture f;
  auto src = Bytes(kB, 0x10);
  ASSERT_EQ(f.cache.Write({1, 0}, Map(0, 1, 0), 0, src), 0);
  f.engine.fail = true;
  EXPECT_EQ(f.cache.FlushInode(1), EIO);
  EXPECT_TRUE(f.cache.HasDirty(1));
  EXPECT_TRUE(f.marked.empty());
  std::vector<std::uint8_t> out(kB);
  EXPECT_EQ(f.cache.Read({2, 0}, Map(0, 5, kB), 0, out), EIO);
  EXPECT_EQ(f.cache.stats().pages, 1u);
  f.engine.fail = false;
  ASSERT_EQ(f.cache.FlushInode(1), 0);
  EXPECT_EQ(f.engine.blocks[1], src);
  EXPECT_EQ(f.marked, std::vector<BlockId>{1});
}

// Writers on disjoint inodes with a tiny cache, so write-backs of one
// writer's pages happen on other threads; the engine must end up with
// exactly the model's bytes.
TEST(BlockCacheTest, ConcurrentWritersAgainstModel) {
  const std::uint64_t seed = s3oram::testing::TestSeed();
  Fixture f;
  constexpr int kThreads = 4;
  constexpr std::uint64_t kBlocksPerInode = 6;
  std::vector<std::map<std::uint64_t, std::vector<std::uint8_t>>> model(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 g(seed + static_cast<std::uint64_t>(t));
      for (int op = 0; op < 400; ++op) {
        std::uint64_t idx = g() % kBlocksPerInode;
        BlockMapping m = Map(idx, static_cast<BlockId>(t * 100 + idx), 0);
        std::size_t off = g() % kB;
        std::size_t len = 1 + g() % (kB - off);
        auto& blk = model[t][idx];
        if (blk.empty()) blk.assign(kB, 0);
        std::vector<std::uint8_t> src(len);
        for (auto& b : src) b = static_cast<std::uint8_t>(g());
        std::copy(src.begin(), src.end(), blk.begin() + static_cast<std::ptrdiff_t>(off));
        const Ino ino = static_cast<Ino>(t + 1);
        {
          // As FileData does: the mapping is read and used under the inode lock.
          std::lock_guard<std::mutex> owner(f.locks.For(ino));
          {
            // valid is kB once the block was written back (what MarkWritten records).
            std::lock_guard<std::mutex> l(f.engine.mu);
            if (f.engine.blocks.count(m.id)) m.valid = kB;
          }
          if (f.cache.Write({ino, idx}, m, off, src) != 0) ++errors;
          if (g() % 50 == 0 && f.cache.FlushInode(ino) != 0) ++errors;
        }
        if (f.cache.Shrink() != 0) ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  ASSERT_EQ(f.cache.FlushAll(), 0);
  for (int t = 0; t < kThreads; ++t) {
    for (const auto& [idx, bytes] : model[t]) {
      EXPECT_EQ(f.engine.blocks[static_cast<std::uint64_t>(t * 100) + idx], bytes)
          << "inode " << t + 1 << " block " << idx;
    }
  }
}

}  // namespace
}  // namespace s3oram::fs
