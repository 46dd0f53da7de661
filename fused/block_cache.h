// BlockCache: a bounded write-back cache of plaintext file blocks.
//
// A page is one block of one file, keyed by (inode, block index), holding
// the extent it is stored in (block_layout.h) and its relocation target, if
// any (BlockMapping::next). Reads of cached pages need no ORAM access;
// writes only change the page and mark it dirty, so many small writes to a
// block cost one ORAM write when the page is written back (by FlushInode,
// FlushAll or FlushExpired, or by Shrink when the cache is over capacity).
//
// A page whose extent is a fragment of a shared block is written back with
// one read-modify-write access (BlockEngine::Update) that changes only its
// slots, so the other files' fragments in that block are kept whatever
// order their write-backs come in. Dirty pages of other files whose
// fragments sit in the same block go along in that same access when their
// inode locks can be taken without waiting (coalescing: a directory of
// small files is written back in a few accesses, not one per file). A page
// being relocated is written whole to its target (loaded first if
// partial); the on_written hook then switches the mapping.
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
// After every successful write-back the `on_written` hook gets the extents
// written (FileData marks them valid in the metadata, switching relocated
// blocks). Thread-safe; one mutex guards
// all pages, and no ORAM access happens with it held.
#pragma once

#include <chrono>
#include <compare>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
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
  using WrittenHook = std::function<int(const std::vector<WrittenExtent>&)>;
  using Clock = std::chrono::steady_clock;

  BlockCache(BlockEngine& engine, InodeLocks& locks, std::size_t capacity_pages,
             WrittenHook on_written);
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Copies bytes [offset, offset + dst.size()) of the page into dst, loading
  // it from extent m.at() first if it is not cached (no ORAM access when
  // m.valid is 0: the page would be all zeros, and is then not cached).
  // Read and Write take `m` fresh from the metadata under the inode lock
  // and update the page's extents from it.
  // Returns 0 or EIO.
  [[nodiscard]] int Read(PageKey key, const BlockMapping& m, std::size_t offset,
                         std::span<std::uint8_t> dst);
  // Loads the page from extent m.at() unless it is cached or m.valid is 0
  // (readahead: a later Read finds it). The caller holds the inode's lock.
  // Returns 0 or EIO.
  [[nodiscard]] int Prefetch(PageKey key, const BlockMapping& m);
  // Prefetch of several pages (of inodes whose locks the caller holds),
  // their loads as one engine batch (pipelined). 0 or EIO (some load failed;
  // the others are cached).
  [[nodiscard]] int PrefetchMany(const std::vector<std::pair<PageKey, BlockMapping>>& pages);
  bool Cached(PageKey key) const;
  // Stores src at `offset` in the page and marks it dirty. An uncached page
  // is never loaded: it is all zeros if the write covers the block's first
  // m.valid bytes, partial otherwise (see above). The bytes written must lie
  // within m.target() (PrepareWrite sees to that).
  [[nodiscard]] int Write(PageKey key, const BlockMapping& m, std::size_t offset,
                          std::span<const std::uint8_t> src);
  // Zeroes bytes [from, block) of the page if it is cached (truncation).
  void ZeroTail(PageKey key, std::size_t from);
  // Drops pages of `ino` with index >= first_idx, dirty ones included, after
  // any write-back of them in flight has finished.
  void Discard(Ino ino, std::uint64_t first_idx);

  // Writes back every dirty page of `ino` (the caller holds its lock) / of
  // every inode (taking each one's lock in turn; the caller holds none). On
  // failure the pages stay dirty (a later flush retries) and EIO (ENOSPC
  // for a full server) is returned.
  [[nodiscard]] int FlushInode(Ino ino);
  [[nodiscard]] int FlushAll();
  // Writes back the pages dirty for at least `age`, skipping files whose
  // lock is busy (the background flusher; the caller holds no inode lock).
  [[nodiscard]] int FlushExpired(Clock::duration age);
  // Writes back and drops least recently used pages until at most the
  // capacity remains (pages in I/O or of a locked inode are skipped). EIO if
  // a write-back failed. The caller must hold no inode lock.
  [[nodiscard]] int Shrink();

  bool HasDirty(Ino ino) const;
  // Every dirty page's key, in order (what an unmount that gave up on the
  // write-back marks lost).
  std::vector<PageKey> DirtyKeys() const;

  struct Stats {
    std::uint64_t hits = 0;
    std::uint64_t loads = 0;       // ORAM reads
    std::uint64_t prefetches = 0;  // of them: readahead (Prefetch)
    std::uint64_t writebacks = 0;  // ORAM writes and updates
    std::uint64_t updates = 0;     // of them: read-modify-write accesses (Update)
    std::uint64_t coalesced = 0;   // pages that went along in another page's access
    std::uint64_t failures = 0;
    std::size_t pages = 0;
    std::size_t dirty = 0;
  };
  Stats stats() const;
  std::size_t capacity_pages() const { return capacity_; }

 private:
  struct Page {
    Extent at;                  // where the ORAM copy is (loads, completion)
    std::optional<Extent> next; // relocation target: write-backs go there
    std::vector<std::uint8_t> data;
    bool loading = false;  // data not valid yet; wait
    bool writing = false;  // a write-back of a copy is in flight
    bool dirty = false;
    Clock::time_point dirty_since{};
    // Partial page: only the bytes in `written` (sorted, disjoint, non-adjacent
    // [from, to) ranges) are the page's; the others are the ORAM copy's first
    // `base_valid` bytes, zeros after. A partial page is always dirty.
    bool partial = false;
    std::size_t base_valid = 0;
    std::vector<std::pair<std::size_t, std::size_t>> written;  // Ranges
    std::list<PageKey>::iterator lru;
    Extent target() const { return next ? *next : at; }
  };
  using PageMap = std::map<PageKey, std::unique_ptr<Page>>;
  using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;

  // One page's part of a write-back access, copied under the lock.
  struct Job {
    PageKey key;
    Page* page = nullptr;
    Extent target;
    bool partial = false;
    std::size_t base_valid = 0;
    Ranges written;
    std::vector<std::uint8_t> copy;
  };

  // Returns the cached page (waiting out a load), or nullptr.
  Page* FindReady(std::unique_lock<std::mutex>& lock, PageKey key);
  // Inserts a page for `key`, loading it from the engine when `load`. The
  // lock is released during the load. nullptr (EIO) if the load failed.
  Page* Insert(std::unique_lock<std::mutex>& lock, PageKey key, const BlockMapping& m, bool load);
  void Touch(Page* p);
  static void Refresh(Page* p, const BlockMapping& m);
  void MarkDirty(Page* p);
  // Marks [from, to) of a partial page as the page's own bytes.
  static void AddWritten(Ranges& written, std::size_t from, std::size_t to);
  static bool Covers(const Ranges& written, std::size_t from, std::size_t to);
  // `block` (the ORAM copy of an extent's bytes) as a partial page's
  // write-back or completion makes it: zeroed at and past base_valid, then
  // the written ranges of `data` laid over.
  static void Overlay(std::size_t base_valid, const Ranges& written,
                      const std::vector<std::uint8_t>& data, std::span<std::uint8_t> block);
  // The extent's bytes out of its ORAM block, as a block_-sized page with
  // zeros at and past `valid`.
  std::vector<std::uint8_t> Extract(const Extent& e, std::size_t valid,
                                    std::span<const std::uint8_t> oram_block) const;
  // Applies a job to the ORAM copy of its target's block.
  void Apply(const Job& j, std::span<std::uint8_t> oram_block) const;
  // Loads the ORAM copy of a partial page and overlays it (the lock is
  // released during the load). 0 or EIO (the page stays partial).
  int Complete(std::unique_lock<std::mutex>& lock, Page* p);
  // Writes back one page if dirty (waiting for a write-back in flight
  // first), together with the dirty pages of other files whose fragments
  // share its block (see above). The caller holds the lock of `key.ino`'s
  // stripe. The lock is released during the ORAM access. 0, EIO or ENOSPC.
  int WriteBack(std::unique_lock<std::mutex>& lock, PageKey key);
  // The pages one write-back access writes: a page and its companions,
  // marked `writing`, with the locks of the companions' (and, for
  // WriteBackLocking, the page's) inodes held until it is done.
  struct WriteGroup {
    std::vector<Job> jobs;
    bool update = false;  // a read-modify-write (fragments, a partial page)
    std::vector<std::unique_lock<std::mutex>> held;
  };
  // WriteBack's first half, under mu_: waits out a write-back of the page
  // in flight, completes a partial page being relocated, and takes the page
  // with its companions; `out` stays empty if there is nothing to write.
  // `held` (optional): the inode stripes this thread holds; companions in
  // them go along without a try-lock, and stripes locked for companions are
  // added to it.
  int TakeWriteBack(std::unique_lock<std::mutex>& lock, PageKey key,
                    std::optional<WriteGroup>& out, std::set<std::size_t>* held = nullptr);
  // The second half: the groups' accesses as one engine batch (mu_ released
  // meanwhile), then each group's pages marked clean (or dirty again on
  // failure). Empties `groups`; the first error.
  int RunWriteBacks(std::unique_lock<std::mutex>& lock, std::vector<WriteGroup>& groups);
  bool Writing(PageKey key) const;  // under mu_
  // Writes back each key's page, taking its inode lock first: blocking
  // (releasing mu_ meanwhile) or, with `try_only`, skipping busy ones.
  int WriteBackLocking(std::unique_lock<std::mutex>& lock, const std::vector<PageKey>& keys,
                       bool try_only);

  BlockEngine& engine_;
  InodeLocks& locks_;
  const std::size_t block_;
  const BlockLayout layout_;
  const std::size_t capacity_;
  WrittenHook on_written_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  PageMap pages_;
  std::list<PageKey> lru_;  // front = least recently used
  Stats stats_;
};

}  // namespace s3oram::fs
