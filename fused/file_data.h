// FileData: the bytes of regular files, as blocks in the BlockCache over the
// BlockEngine, mapped by the MetadataStore.
//
// Each call holds the file's inode lock (InodeLocks), so calls on one file
// are serialised while different files proceed in parallel; ORAM accesses
// themselves queue in the engine. Every call returns 0 or a POSIX
// errno.
//
// Write ordering (what a crash can leave):
//  1. PrepareWrite commits the block mapping and the new size (fresh blocks
//     with valid 0, so they read as zeros, never as a previous owner's data);
//  2. the data sit in dirty cache pages;
//  3. write-back stores a page in the ORAM, then MarkWritten raises the
//     block's valid length.
// A crash after 1 or 2 loses the write (the range reads as its old bytes or
// zeros); after 3 the write is there. A block that must grow out of its
// extent while the extent holds data is relocated (BlockMapping::next): the
// old extent stays mapped until the write-back to the new one, so a crash
// leaves the old bytes, never zeros. Fsync (and FlushAllAndSync) write back
// before they return, so fsynced data survive a crash, and also make
// everything committed durable against power loss.
//
// When data reach the ORAM otherwise: with a write-back delay of 0, Flush
// (close) writes the file's dirty blocks back; with a delay d > 0, close
// writes nothing, and the background flusher (StartBackground) writes back
// every block dirty for d seconds, so a crash loses at most the last d
// seconds of writes not fsynced (as ext4 with its default commit
// interval). The delay is what lets many small files that share an ORAM
// block be written back in one access.
//
// Readahead: a read is sequential when it starts within one block of where
// the file's previous read ended (or at offset 0). A sequential read that
// reaches the second half of its last block queues the next
// `readahead_blocks` mapped blocks of the file for the background
// prefetcher, which loads each (under the inode lock, as any load) unless
// it is cached by then. So a reader that consumes a block while the next
// one is fetched finds it in the cache. Readahead costs ORAM accesses only
// for blocks that hold data below the file size; a reader that stops early
// has paid for at most `readahead_blocks` blocks it did not read. The
// servers see the same kind of access either way.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "fused/block_cache.h"
#include "fused/block_engine.h"
#include "fused/inode_locks.h"
#include "fused/metadata_store.h"

namespace s3oram::fs {

class FileData {
 public:
  FileData(MetadataStore& meta, BlockCache& cache, BlockEngine& engine, InodeLocks& locks,
           std::chrono::milliseconds writeback_delay = std::chrono::milliseconds(0),
           std::uint32_t readahead_blocks = 0);
  ~FileData();
  FileData(const FileData&) = delete;
  FileData& operator=(const FileData&) = delete;

  // Starts / stops the background threads: the flusher (none with a delay
  // of 0) and the prefetcher (none with no readahead). StopBackground is
  // idempotent and waits for a write-back or prefetch in progress; reads
  // queue no readahead while the threads are stopped.
  void StartBackground();
  void StopBackground();

  // Up to `size` bytes from `offset` (fewer at end of file; holes are zeros).
  [[nodiscard]] int Read(Ino ino, std::uint64_t offset, std::size_t size,
                         std::vector<std::uint8_t>* out);
  // Writes all of `data` at `offset` (ENOSPC/EFBIG change nothing). Read and
  // Write trim the cache to its capacity afterwards (outside the inode lock).
  [[nodiscard]] int Write(Ino ino, std::uint64_t offset, std::span<const std::uint8_t> data);
  // Sets the size; *out gets the new attributes.
  [[nodiscard]] int Truncate(Ino ino, std::uint64_t size, Attr* out);
  // fallocate mode 0: maps every hole of [offset, offset + length) (reading
  // as zeros) and raises the size to offset + length if smaller.
  [[nodiscard]] int Allocate(Ino ino, std::uint64_t offset, std::uint64_t length);
  // close/release: with a write-back delay of 0, writes the file's dirty
  // blocks through the ORAM; otherwise leaves them to the flusher.
  [[nodiscard]] int Flush(Ino ino);
  // Flush, then make every committed change durable (fsync, fdatasync).
  [[nodiscard]] int Fsync(Ino ino);
  // Frees an unlinked inode the kernel has forgotten: drops its cached
  // blocks, then its metadata. No-op if it still has links, or if
  // `still_forgotten` (asked under the inode lock) says the kernel has
  // looked it up again meanwhile.
  [[nodiscard]] int ForgetIfOrphan(Ino ino, const std::function<bool()>& still_forgotten);
  // Writes back everything and syncs (unmount, fsync of a directory).
  [[nodiscard]] int FlushAllAndSync();
  // Marks every block still dirty as lost (MetadataStore::MarkLost): for an
  // unmount whose final write-back failed. Returns how many were marked.
  [[nodiscard]] int MarkDirtyLost(std::size_t* marked);
  // True once the engine takes no more writes (BlockEngine::WritesStopped).
  bool WritesStopped() const { return engine_.WritesStopped(); }

 private:
  std::mutex& LockFor(Ino ino) { return locks_.For(ino); }
  int SyncAll();
  int WriteBackInode(Ino ino);
  void FlusherLoop();
  void PrefetcherLoop();
  // Called by a read of [offset, end) of a file of `size` bytes (under the
  // inode lock): queues readahead if the read is sequential, once per block
  // read, as many blocks ahead as the stream's window (ReadStream).
  void NoteRead(Ino ino, std::uint64_t offset, std::uint64_t end, std::uint64_t size);
  // Loads blocks `idxs` of the file into the cache (readahead), together.
  void PrefetchBlocks(Ino ino, const std::vector<std::uint64_t>& idxs);
  int ReadLocked(Ino ino, std::uint64_t offset, std::size_t size, std::vector<std::uint8_t>* out);
  void TrimCache();

  MetadataStore& meta_;
  BlockCache& cache_;
  BlockEngine& engine_;
  const std::uint64_t block_;
  InodeLocks& locks_;
  const std::chrono::milliseconds writeback_delay_;
  std::mutex flusher_mu_;
  std::condition_variable flusher_cv_;
  bool flusher_stop_ = false;
  std::thread flusher_;

  const std::uint32_t readahead_;
  const std::size_t prefetch_batch_;  // blocks loaded together (BlockEngine::max_batch)
  std::mutex prefetch_mu_;  // guards the members below
  std::condition_variable prefetch_cv_;
  bool prefetch_running_ = false;
  std::deque<PageKey> prefetch_queue_;  // bounded: kMaxQueuedPrefetches
  // A recently read file's sequential stream: where its last read ended,
  // how many blocks ahead the next readahead fetches (1, doubling with each
  // block read in sequence, up to readahead_; back to 1 after a jump), and
  // the block whose reading last queued readahead.
  struct ReadStream {
    std::uint64_t end = 0;
    std::uint32_t window = 1;
    std::optional<std::uint64_t> queued_at;
  };
  // Bounded: cleared when it grows past kMaxTrackedReaders.
  std::unordered_map<Ino, ReadStream> read_streams_;
  std::thread prefetcher_;
};

}  // namespace s3oram::fs
