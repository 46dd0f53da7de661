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
// zeros); after 3 the write is there. Flush/Fsync write back before they
// return, so fsynced data survive a crash, and Fsync also makes everything
// committed durable against power loss.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

#include "fused/block_cache.h"
#include "fused/block_engine.h"
#include "fused/inode_locks.h"
#include "fused/metadata_store.h"

namespace s3oram::fs {

class FileData {
 public:
  FileData(MetadataStore& meta, BlockCache& cache, BlockEngine& engine, InodeLocks& locks);

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
  // Writes the file's dirty blocks through the ORAM (close, release).
  [[nodiscard]] int Flush(Ino ino);
  // Flush, then make every committed change durable (fsync, fdatasync).
  [[nodiscard]] int Fsync(Ino ino);
  // Frees an unlinked inode the kernel has forgotten: drops its cached
  // blocks, then its metadata. No-op if it still has links, or if
  // `still_forgotten` (asked under the inode lock) says the kernel has
  // looked it up again meanwhile.
  [[nodiscard]] int ForgetIfOrphan(Ino ino, const std::function<bool()>& still_forgotten);
  // Writes back everything and syncs (unmount).
  [[nodiscard]] int FlushAllAndSync();

 private:
  std::mutex& LockFor(Ino ino) { return locks_.For(ino); }
  int SyncAll();
  int ReadLocked(Ino ino, std::uint64_t offset, std::size_t size, std::vector<std::uint8_t>* out);
  void TrimCache();

  MetadataStore& meta_;
  BlockCache& cache_;
  BlockEngine& engine_;
  const std::uint64_t block_;
  InodeLocks& locks_;
};

}  // namespace s3oram::fs
