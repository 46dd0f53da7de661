// BlockCache: a bounded write-back cache of plaintext file blocks.
//
// A page is one block of one file, keyed by (inode, block index), holding
// the ORAM block id it is stored in. Reads of cached pages need no ORAM
// access; writes only change the page and mark it dirty, so many small
// writes to a block cost one ORAM write when the page is written back (by
// FlushInode/FlushAll, or by Shrink when the cache is over capacity).
//
// A write to part of a block that holds data (valid > 0) and is not cached
// does not load it: the page is *partial*, holding only the byte ranges
// written since. Its write-back is one read-modify-write access
// (BlockEngine::Update) that lays those ranges over the ORAM's copy, whose
// bytes at or past the valid length the page was created with are zeroed
// first; the page is then complete. A read of bytes a partial page does not
// hold completes it with one load the same way. So a partial block write
// costs one access, not a load and a write.
//
// Invariants the callers (FileData) keep and rely on:
//  * A page's bytes past its file's size are zero. Pages are loaded with
//    every byte at or past BlockMapping::valid zeroed (valid never exceeds
//    the part of the block below the size), truncation zeroes the tail of
//    the new last page (ZeroTail) and discards pages past it (Discard).
//  * Pages of one inode are loaded, changed, written back or dropped only by
//    a thread holding that inode's lock (InodeLocks): callers of Read,
//    Write, ZeroTail, Discard and FlushInode hold it; Shrink try-locks the
//    inode of each victim and skips it if busy. FlushAll takes no inode
//    locks and is for unmount, when no other request runs.
//  * A page is never discarded while its write-back is in flight (Discard
//    waits), so a freed ORAM block id is never written after it was freed.
// After every successful write-back the `on_written` hook gets the block ids
// (FileData marks them valid in the metadata). Thread-safe; one mutex guards
// all pages, and no ORAM access happens with it held.
#pragma once

#include <compare>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "fused/block_engine.h"
#include "fused/inode_locks.h"
#include "fused/metadata_store.h"

namespace s3oram::fs {

struct PageKey {
  Ino ino = 0;
  std::uint64_t idx = 0;
  auto operator<=>(const PageKey&) const = default;
};

class BlockCache {
 public:
  using WrittenHook = std::function<int(const std::vector<BlockId>&)>;

  BlockCache(BlockEngine& engine, InodeLocks& locks, std::size_t capacity_pages,
             WrittenHook on_written);
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Copies bytes [offset, offset + dst.size()) of the page into dst, loading
  // it from block m.id first if it is not cached (no ORAM access when
  // m.valid is 0: the page would be all zeros, and is then not cached).
  // Returns 0 or EIO.
  [[nodiscard]] int Read(PageKey key, const BlockMapping& m, std::size_t offset,
                         std::span<std::uint8_t> dst);
  // Stores src at `offset` in the page and marks it dirty. An uncached page
  // is never loaded: it is all zeros if the write covers the whole block or
  // m.valid is 0, partial otherwise (see above).
  [[nodiscard]] int Write(PageKey key, const BlockMapping& m, std::size_t offset,
                          std::span<const std::uint8_t> src);
  // Zeroes bytes [from, block) of the page if it is cached (truncation).
  void ZeroTail(PageKey key, std::size_t from);
  // Drops pages of `ino` with index >= first_idx, dirty ones included, after
  // any write-back of them in flight has finished.
  void Discard(Ino ino, std::uint64_t first_idx);

  // Writes back every dirty page of `ino` / of every inode. On failure the
  // pages stay dirty (a later flush retries) and EIO is returned.
  [[nodiscard]] int FlushInode(Ino ino);
  [[nodiscard]] int FlushAll();
  // Writes back and drops least recently used pages until at most the
  // capacity remains (pages in I/O or of a locked inode are skipped). EIO if
  // a write-back failed. The caller must hold no inode lock.
  [[nodiscard]] int Shrink();

  bool HasDirty(Ino ino) const;

  struct Stats {
    std::uint64_t hits = 0;
    std::uint64_t loads = 0;       // ORAM reads
    std::uint64_t writebacks = 0;  // ORAM writes and updates
    std::uint64_t updates = 0;     // of them: write-backs of partial pages (one Update each)
    std::uint64_t failures = 0;
    std::size_t pages = 0;
    std::size_t dirty = 0;
  };
  Stats stats() const;
  std::size_t capacity_pages() const { return capacity_; }

 private:
  struct Page {
    BlockId block = 0;
    std::vector<std::uint8_t> data;
    bool loading = false;  // data not valid yet; wait
    bool writing = false;  // a write-back of a copy is in flight
    bool dirty = false;
    // Partial page: only the bytes in `written` (sorted, disjoint, non-adjacent
    // [from, to) ranges) are the page's; the others are the ORAM copy's first
    // `base_valid` bytes, zeros after. A partial page is always dirty.
    bool partial = false;
    std::size_t base_valid = 0;
    std::vector<std::pair<std::size_t, std::size_t>> written;  // Ranges
    std::list<PageKey>::iterator lru;
  };
  using PageMap = std::map<PageKey, std::unique_ptr<Page>>;

  // Returns the cached page (waiting out a load), or nullptr.
  Page* FindReady(std::unique_lock<std::mutex>& lock, PageKey key);
  // Inserts a page for `key`, loading it from the engine when `load`. The
  // lock is released during the load. nullptr (EIO) if the load failed.
  Page* Insert(std::unique_lock<std::mutex>& lock, PageKey key, const BlockMapping& m, bool load);
  void Touch(Page* p);
  using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;
  // Marks [from, to) of a partial page as the page's own bytes.
  static void AddWritten(Ranges& written, std::size_t from, std::size_t to);
  static bool Covers(const Ranges& written, std::size_t from, std::size_t to);
  // `block` (the ORAM copy) as a partial page's write-back or completion
  // makes it: zeroed at and past base_valid, then the written ranges of
  // `data` laid over.
  static void Overlay(std::size_t base_valid, const Ranges& written,
                      const std::vector<std::uint8_t>& data, std::span<std::uint8_t> block);
  // Loads the ORAM copy of a partial page and overlays it (the lock is
  // released during the load). 0 or EIO (the page stays partial).
  int Complete(std::unique_lock<std::mutex>& lock, Page* p);
  // Writes back one page if dirty (waiting for a write-back in flight first).
  // The lock is released during the ORAM write. Returns 0 or EIO.
  int WriteBack(std::unique_lock<std::mutex>& lock, PageKey key, Page* p,
                std::vector<BlockId>* written_ids);
  int ReportWritten(const std::vector<BlockId>& ids);

  BlockEngine& engine_;
  InodeLocks& locks_;
  const std::size_t block_;
  const std::size_t capacity_;
  WrittenHook on_written_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  PageMap pages_;
  std::list<PageKey> lru_;  // front = least recently used
  Stats stats_;
};

}  // namespace s3oram::fs
