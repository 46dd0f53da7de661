#include "fused/file_data.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>

namespace s3oram::fs {
namespace {

// Readahead bookkeeping bounds: a few readers' worth of queued blocks, and
// the read positions of many more files than are read at once.
constexpr std::size_t kMaxQueuedPrefetches = 32;
constexpr std::size_t kMaxTrackedReaders = 1024;

}  // namespace

FileData::FileData(MetadataStore& meta, BlockCache& cache, BlockEngine& engine, InodeLocks& locks,
                   std::chrono::milliseconds writeback_delay, std::uint32_t readahead_blocks)
    : meta_(meta),
      cache_(cache),
      engine_(engine),
      block_(engine.block_bytes()),
      locks_(locks),
      writeback_delay_(writeback_delay),
      readahead_(readahead_blocks),
      prefetch_batch_(std::max<std::size_t>(1, engine.max_batch())) {}

FileData::~FileData() { StopBackground(); }

void FileData::StartBackground() {
  if (writeback_delay_.count() > 0 && !flusher_.joinable()) {
    flusher_stop_ = false;
    flusher_ = std::thread([this] { FlusherLoop(); });
  }
  if (readahead_ > 0 && !prefetcher_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(prefetch_mu_);
      prefetch_running_ = true;
    }
    prefetcher_ = std::thread([this] { PrefetcherLoop(); });
  }
}

void FileData::StopBackground() {
  {
    std::lock_guard<std::mutex> lock(flusher_mu_);
    flusher_stop_ = true;
  }
  flusher_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  {
    std::lock_guard<std::mutex> lock(prefetch_mu_);
    prefetch_running_ = false;
    prefetch_queue_.clear();
  }
  prefetch_cv_.notify_all();
  if (prefetcher_.joinable()) prefetcher_.join();
}

void FileData::NoteRead(Ino ino, std::uint64_t offset, std::uint64_t end, std::uint64_t size) {
  if (readahead_ == 0 || end <= offset) return;
  std::lock_guard<std::mutex> lock(prefetch_mu_);
  if (!prefetch_running_) return;
  // "Within a block of the previous end" rather than "exactly at it": the
  // kernel splits a large read into requests that FUSE threads may serve
  // out of order.
  auto it = read_streams_.find(ino);
  const bool fresh = it == read_streams_.end();
  if (fresh) {
    if (read_streams_.size() >= kMaxTrackedReaders) read_streams_.clear();
    it = read_streams_.emplace(ino, ReadStream{}).first;
  }
  ReadStream& stream = it->second;
  const bool sequential =
      offset == 0 || (!fresh && offset + block_ >= stream.end && offset <= stream.end + block_);
  // A jump (farther from the stream's end than the blocks on the way, which
  // requests served out of order stay within), or a reader starting again
  // at the beginning, starts a new stream: one block ahead, so a reader that
  // stops early (a file(1) of a large file) costs at most one access it did
  // not need; each block read in sequence then doubles the window (as the
  // kernel's readahead ramps up), so a long sequential read soon has
  // `readahead_` blocks on the way and their accesses pipelined. A request
  // a little behind or ahead (another FUSE thread's, another reader's)
  // neither resets nor moves the stream.
  const std::uint64_t reach = (static_cast<std::uint64_t>(stream.window) + 1) * block_;
  const bool jump = !fresh && (offset > stream.end + reach || offset + reach < stream.end);
  if (fresh || jump || offset == 0) {
    stream.end = end;
    stream.window = 1;
    stream.queued_at.reset();
  } else {
    stream.end = std::max(stream.end, end);
  }
  if (!sequential) return;
  const std::uint64_t last = (end - 1) / block_;
  if (end - last * block_ < block_ / 2) return;
  if (stream.queued_at && *stream.queued_at >= last) return;  // done for this block
  stream.queued_at = last;
  const std::uint32_t window = std::min(stream.window, readahead_);
  stream.window = std::min<std::uint32_t>(readahead_, 2 * window);
  for (std::uint64_t idx = last + 1; idx <= last + window; ++idx) {
    if (idx * block_ >= size) break;  // past the end of the file
    const PageKey key{ino, idx};
    if (std::find(prefetch_queue_.begin(), prefetch_queue_.end(), key) != prefetch_queue_.end()) {
      continue;
    }
    if (prefetch_queue_.size() >= kMaxQueuedPrefetches) prefetch_queue_.pop_front();  // stale
    prefetch_queue_.push_back(key);
  }
  prefetch_cv_.notify_one();
}

void FileData::PrefetcherLoop() {
  std::unique_lock<std::mutex> lock(prefetch_mu_);
  for (;;) {
    prefetch_cv_.wait(lock, [this] { return !prefetch_running_ || !prefetch_queue_.empty(); });
    if (!prefetch_running_) return;
    // The queued blocks of the first queued file, up to the engine's batch,
    // go together (their loads pipelined).
    const Ino ino = prefetch_queue_.front().ino;
    std::vector<std::uint64_t> idxs;
    for (auto it = prefetch_queue_.begin();
         it != prefetch_queue_.end() && idxs.size() < prefetch_batch_;) {
      if (it->ino != ino) {
        ++it;
        continue;
      }
      idxs.push_back(it->idx);  // PrefetchMany skips pages cached meanwhile
      it = prefetch_queue_.erase(it);
    }
    lock.unlock();
    if (!idxs.empty()) {
      PrefetchBlocks(ino, idxs);
      TrimCache();
    }
    lock.lock();
  }
}

void FileData::PrefetchBlocks(Ino ino, const std::vector<std::uint64_t>& idxs) {
  // The mappings are read fresh under the inode lock, so a file truncated,
  // rewritten or freed since the read that queued these is seen as it is now.
  std::lock_guard<std::mutex> lock(LockFor(ino));
  std::vector<std::pair<PageKey, BlockMapping>> pages;
  for (const std::uint64_t idx : idxs) {
    std::vector<BlockMapping> maps;
    Attr attr;
    if (meta_.GetBlocks(ino, idx, 1, &maps, &attr) != 0 || maps.empty()) continue;
    pages.emplace_back(PageKey{ino, idx}, maps.front());
  }
  if (int e = cache_.PrefetchMany(pages); e != 0) {
    // Not the reader's error: its own read loads the block again and
    // reports a failure there.
    spdlog::debug("readahead of {} blocks of inode {} failed in part (errno {})", pages.size(),
                  ino, e);
  }
  for (const auto& [key, m] : pages) {
    if (cache_.Cached(key)) {
      spdlog::debug("readahead: block {} of inode {} is in the cache", key.idx, key.ino);
    }
  }
}

void FileData::FlusherLoop() {
  // Looks a few times per delay, so a block waits between d and about 1.25 d.
  const auto tick = std::clamp<std::chrono::milliseconds>(writeback_delay_ / 4,
                                                          std::chrono::milliseconds(50),
                                                          std::chrono::milliseconds(1000));
  bool failing = false;
  std::unique_lock<std::mutex> lock(flusher_mu_);
  while (!flusher_cv_.wait_for(lock, tick, [this] { return flusher_stop_; })) {
    lock.unlock();
    const int e = cache_.FlushExpired(writeback_delay_);
    lock.lock();
    if (e != 0 && !failing) {
      spdlog::warn("background write-back failed (errno {}); the blocks stay dirty and are "
                   "retried",
                   e);
    } else if (e == 0 && failing) {
      spdlog::info("background write-back works again");
    }
    failing = e != 0;
  }
}

int FileData::Read(Ino ino, std::uint64_t offset, std::size_t size,
                   std::vector<std::uint8_t>* out) {
  int err = ReadLocked(ino, offset, size, out);
  TrimCache();  // loads add clean pages
  return err;
}

void FileData::TrimCache() {
  // Failures here concern other files' blocks (they stay dirty and surface
  // at their flush or fsync), never the request being answered.
  if (int e = cache_.Shrink(); e != 0) {
    spdlog::warn("cache write-back failed (errno {}); the blocks stay dirty and are retried", e);
  }
}

int FileData::ReadLocked(Ino ino, std::uint64_t offset, std::size_t size,
                         std::vector<std::uint8_t>* out) {
  out->clear();
  std::lock_guard<std::mutex> lock(LockFor(ino));
  Attr attr;
  std::vector<BlockMapping> maps;
  if (size == 0) return 0;
  const std::uint64_t first = offset / block_;
  const std::uint64_t last_wanted = (offset + size - 1) / block_;
  if (int e = meta_.GetBlocks(ino, first, last_wanted - first + 1, &maps, &attr); e != 0) {
    return e;
  }
  if (offset >= attr.size) return 0;
  const std::uint64_t end = std::min<std::uint64_t>(attr.size, offset + size);
  out->assign(end - offset, 0);  // holes and unmapped blocks read as zeros
  for (const BlockMapping& m : maps) {
    const std::uint64_t block_start = m.idx * block_;
    const std::uint64_t from = std::max(offset, block_start);
    const std::uint64_t to = std::min(end, block_start + block_);
    if (from >= to) continue;
    std::span<std::uint8_t> dst(out->data() + (from - offset), to - from);
    if (int e = cache_.Read(PageKey{ino, m.idx}, m, from - block_start, dst); e != 0) {
      out->clear();
      return e;
    }
  }
  NoteRead(ino, offset, end, attr.size);
  return 0;
}

int FileData::Write(Ino ino, std::uint64_t offset, std::span<const std::uint8_t> data) {
  if (data.empty()) return 0;
  {
    std::lock_guard<std::mutex> lock(LockFor(ino));
    std::vector<BlockMapping> maps;
    Attr before;
    if (int e = meta_.PrepareWrite(ino, offset, data.size(), &maps, &before); e != 0) return e;
    const std::uint64_t end = offset + data.size();
    for (const BlockMapping& m : maps) {
      const std::uint64_t block_start = m.idx * block_;
      const std::uint64_t from = std::max(offset, block_start);
      const std::uint64_t to = std::min(end, block_start + block_);
      auto src = data.subspan(from - offset, to - from);
      if (int e = cache_.Write(PageKey{ino, m.idx}, m, from - block_start, src); e != 0) return e;
    }
  }
  TrimCache();
  return 0;
}

int FileData::Truncate(Ino ino, std::uint64_t size, Attr* out) {
  std::lock_guard<std::mutex> lock(LockFor(ino));
  Attr before;
  if (int e = meta_.GetAttr(ino, &before); e != 0) return e;
  if (size < before.size) {
    // Under the inode lock no write-back of this file's pages can start
    // (the shrinker try-locks), so dropping the pages past the new end right
    // after the commit frees their blocks is safe; dropping them first would
    // lose written data if the commit failed.
    if (int e = meta_.Truncate(ino, size, nullptr, out); e != 0) return e;
    cache_.Discard(ino, (size + block_ - 1) / block_);
    if (size % block_ != 0) cache_.ZeroTail(PageKey{ino, size / block_}, size % block_);
    return 0;
  }
  // Growing needs no data: bytes past the old size are zero in the cache and
  // past `valid` in the ORAM.
  return meta_.Truncate(ino, size, nullptr, out);
}

int FileData::Allocate(Ino ino, std::uint64_t offset, std::uint64_t length) {
  if (length == 0) return EINVAL;
  std::lock_guard<std::mutex> lock(LockFor(ino));
  std::vector<BlockMapping> maps;
  Attr before;
  return meta_.PrepareWrite(ino, offset, length, &maps, &before);
}

int FileData::Flush(Ino ino) {
  if (writeback_delay_.count() > 0) return 0;  // the flusher's (see file_data.h)
  return WriteBackInode(ino);
}

int FileData::WriteBackInode(Ino ino) {
  std::lock_guard<std::mutex> lock(LockFor(ino));
  return cache_.FlushInode(ino);
}

int FileData::SyncAll() {
  if (Status s = engine_.Sync(); !s.ok()) return WriteErrno(s);
  if (int e = meta_.Sync(); e != 0) {
    spdlog::error("syncing the metadata failed: {}", meta_.last_error());
    return e;
  }
  return 0;
}

int FileData::Fsync(Ino ino) {
  if (int e = WriteBackInode(ino); e != 0) return e;
  return SyncAll();
}

int FileData::ForgetIfOrphan(Ino ino, const std::function<bool()>& still_forgotten) {
  std::lock_guard<std::mutex> lock(LockFor(ino));
  Attr a;
  int e = meta_.GetAttr(ino, &a);
  if (e == ENOENT) return 0;
  if (e != 0) return e;
  if (a.nlink != 0) return 0;
  if (still_forgotten && !still_forgotten()) return 0;  // looked up (and opened) again
  cache_.Discard(ino, 0);
  return meta_.ForgetOrphan(ino, nullptr);
}

int FileData::FlushAllAndSync() {
  int err = cache_.FlushAll();
  if (int e = SyncAll(); e != 0 && err == 0) err = e;
  return err;
}

int FileData::MarkDirtyLost(std::size_t* marked) {
  std::vector<std::pair<Ino, std::uint64_t>> blocks;
  for (const PageKey& k : cache_.DirtyKeys()) blocks.emplace_back(k.ino, k.idx);
  return meta_.MarkLost(blocks, marked);
}

}  // namespace s3oram::fs
