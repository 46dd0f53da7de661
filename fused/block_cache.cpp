#include "fused/block_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <set>

namespace s3oram::fs {

BlockCache::BlockCache(BlockEngine& engine, InodeLocks& locks, std::size_t capacity_pages,
                       WrittenHook on_written)
    : engine_(engine),
      locks_(locks),
      block_(engine.block_bytes()),
      layout_(engine.block_bytes()),
      capacity_(std::max<std::size_t>(capacity_pages, 1)),
      on_written_(std::move(on_written)) {}

BlockCache::~BlockCache() = default;

BlockCache::Page* BlockCache::FindReady(std::unique_lock<std::mutex>& lock, PageKey key) {
  for (;;) {
    auto it = pages_.find(key);
    if (it == pages_.end()) return nullptr;
    if (!it->second->loading) return it->second.get();
    cv_.wait(lock);
  }
}

std::vector<std::uint8_t> BlockCache::Extract(const Extent& e, std::size_t valid,
                                              std::span<const std::uint8_t> oram_block) const {
  // Bytes at or past `valid` may be a previous owner's data or a truncated
  // tail, and bytes outside the extent belong to other files: they read as
  // zeros.
  std::vector<std::uint8_t> page(block_, 0);
  const std::size_t keep = std::min<std::size_t>(valid, layout_.Bytes(e));
  std::memcpy(page.data(), oram_block.data() + layout_.Offset(e), keep);
  return page;
}

BlockCache::Page* BlockCache::Insert(std::unique_lock<std::mutex>& lock, PageKey key,
                                     const BlockMapping& m, bool load) {
  auto page = std::make_unique<Page>();
  Refresh(page.get(), m);
  page->data.assign(block_, 0);
  lru_.push_back(key);
  page->lru = std::prev(lru_.end());
  Page* p = page.get();
  pages_.emplace(key, std::move(page));
  if (!load) return p;

  p->loading = true;
  ++stats_.loads;
  lock.unlock();
  auto r = engine_.Read(m.id);
  lock.lock();
  p->loading = false;
  cv_.notify_all();
  if (!r.ok() || r->size() != block_) {
    ++stats_.failures;
    lru_.erase(p->lru);
    pages_.erase(key);
    return nullptr;
  }
  p->data = Extract(m.at(), m.valid, *r);
  return p;
}

void BlockCache::Refresh(Page* p, const BlockMapping& m) {
  p->at = m.at();
  p->next = m.next;
}

void BlockCache::MarkDirty(Page* p) {
  if (!p->dirty) p->dirty_since = Clock::now();
  p->dirty = true;
}

void BlockCache::Touch(Page* p) { lru_.splice(lru_.end(), lru_, p->lru); }

void BlockCache::AddWritten(Ranges& written, std::size_t from, std::size_t to) {
  if (from >= to) return;
  // Merge with every range it overlaps or touches; the list stays sorted,
  // disjoint and non-adjacent.
  auto it = std::lower_bound(written.begin(), written.end(), from,
                             [](const auto& r, std::size_t f) { return r.second < f; });
  auto last = it;
  while (last != written.end() && last->first <= to) {
    from = std::min(from, last->first);
    to = std::max(to, last->second);
    ++last;
  }
  it = written.erase(it, last);
  written.insert(it, {from, to});
}

bool BlockCache::Covers(const Ranges& written, std::size_t from, std::size_t to) {
  if (from >= to) return true;
  auto it = std::lower_bound(written.begin(), written.end(), from,
                             [](const auto& r, std::size_t f) { return r.second <= f; });
  return it != written.end() && it->first <= from && to <= it->second;
}

void BlockCache::Overlay(std::size_t base_valid, const Ranges& written,
                         const std::vector<std::uint8_t>& data, std::span<std::uint8_t> block) {
  // Bytes at or past the valid length may be a previous owner's data or a
  // truncated tail: they read as zeros, as a load would make them.
  if (base_valid < block.size()) {
    std::fill(block.begin() + static_cast<std::ptrdiff_t>(base_valid), block.end(),
              std::uint8_t{0});
  }
  // Ranges are of the file block; `block` may be a fragment's shorter span
  // (ZeroTail marks up to the block's end).
  for (const auto& [from, to] : written) {
    const std::size_t end = std::min(to, block.size());
    if (from < end) std::memcpy(block.data() + from, data.data() + from, end - from);
  }
}

void BlockCache::Apply(const Job& j, std::span<std::uint8_t> oram_block) const {
  auto ext = oram_block.subspan(layout_.Offset(j.target), layout_.Bytes(j.target));
  if (j.partial) {
    Overlay(j.base_valid, j.written, j.copy, ext);
  } else {
    std::memcpy(ext.data(), j.copy.data(), ext.size());
  }
}

int BlockCache::Complete(std::unique_lock<std::mutex>& lock, Page* p) {
  // The caller holds the inode's lock: nobody else changes, writes back or
  // drops this page meanwhile (`loading` makes lookups by others wait).
  p->loading = true;
  ++stats_.loads;
  const Extent at = p->at;
  lock.unlock();
  auto r = engine_.Read(at.id);
  lock.lock();
  p->loading = false;
  cv_.notify_all();
  if (!r.ok() || r->size() != block_) {
    ++stats_.failures;
    return EIO;
  }
  std::vector<std::uint8_t> full = Extract(at, p->base_valid, *r);
  Overlay(p->base_valid, p->written, p->data, full);
  p->data = std::move(full);
  p->partial = false;
  p->written.clear();
  return 0;
}

int BlockCache::Read(PageKey key, const BlockMapping& m, std::size_t offset,
                     std::span<std::uint8_t> dst) {
  if (offset > block_ || dst.size() > block_ - offset) return EINVAL;
  std::unique_lock<std::mutex> lock(mu_);
  Page* p = FindReady(lock, key);
  if (p) {
    ++stats_.hits;
    Refresh(p, m);
    if (p->partial && !Covers(p->written, offset, offset + dst.size())) {
      if (int e = Complete(lock, p); e != 0) return e;
    }
  } else if (m.lost) {
    // The servers hold older bytes than the file had (MarkLost): an error,
    // never those bytes.
    spdlog::error("block {} of inode {} lost its last write at an earlier unmount (it never "
                  "reached the servers): reads of it fail until it is written again; s3oram "
                  "fsck lists such blocks",
                  key.idx, key.ino);
    return EIO;
  } else if (m.valid == 0) {
    std::fill(dst.begin(), dst.end(), std::uint8_t{0});
    return 0;
  } else {
    p = Insert(lock, key, m, /*load=*/true);
    if (!p) return EIO;
  }
  std::memcpy(dst.data(), p->data.data() + offset, dst.size());
  Touch(p);
  return 0;
}

int BlockCache::Prefetch(PageKey key, const BlockMapping& m) {
  if (m.valid == 0 || m.lost) return 0;  // zeros, or an error: nothing to fetch
  std::unique_lock<std::mutex> lock(mu_);
  if (pages_.count(key) != 0) return 0;
  ++stats_.prefetches;
  return Insert(lock, key, m, /*load=*/true) != nullptr ? 0 : EIO;
}

int BlockCache::PrefetchMany(const std::vector<std::pair<PageKey, BlockMapping>>& pages) {
  std::unique_lock<std::mutex> lock(mu_);
  // Pages to load: not cached, holding data, and each ORAM block once.
  std::vector<std::pair<PageKey, BlockMapping>> todo;
  std::set<std::uint64_t> ids;
  for (const auto& [key, m] : pages) {
    if (m.valid == 0 || m.lost || pages_.count(key) != 0 || !ids.insert(m.id).second) continue;
    todo.emplace_back(key, m);
  }
  if (todo.empty()) return 0;
  std::vector<Page*> loading;
  std::vector<BlockEngine::Op> ops;
  for (const auto& [key, m] : todo) {
    auto page = std::make_unique<Page>();
    Refresh(page.get(), m);
    page->data.assign(block_, 0);
    lru_.push_back(key);
    page->lru = std::prev(lru_.end());
    page->loading = true;
    loading.push_back(page.get());
    pages_.emplace(key, std::move(page));
    ops.push_back(BlockEngine::Op{BlockEngine::Op::Kind::kRead, m.id, {}, nullptr});
    ++stats_.loads;
    ++stats_.prefetches;
  }
  lock.unlock();
  auto results = engine_.Batch(ops);
  lock.lock();
  int err = 0;
  for (std::size_t i = 0; i < todo.size(); ++i) {
    Page* p = loading[i];
    p->loading = false;
    const auto& r = results[i];
    if (!r.ok() || r->size() != block_) {
      ++stats_.failures;
      lru_.erase(p->lru);
      pages_.erase(todo[i].first);
      err = EIO;
      continue;
    }
    p->data = Extract(todo[i].second.at(), todo[i].second.valid, *r);
  }
  cv_.notify_all();
  return err;
}

bool BlockCache::Cached(PageKey key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pages_.count(key) != 0;
}

int BlockCache::Write(PageKey key, const BlockMapping& m, std::size_t offset,
                      std::span<const std::uint8_t> src) {
  if (offset > block_ || src.size() > block_ - offset) return EINVAL;
  if (offset + src.size() > layout_.Bytes(m.target())) return EINVAL;
  std::unique_lock<std::mutex> lock(mu_);
  Page* p = FindReady(lock, key);
  if (p) {
    ++stats_.hits;
    Refresh(p, m);
  } else {
    if (m.lost) {
      // The servers hold older bytes than the file had (MarkLost). A write
      // that leaves any of the block's bytes to them would bring those older
      // bytes (or zeros) back without an error at the next read, and its
      // write-back would clear the mark: only a write of the whole block
      // replaces a lost block.
      const std::size_t whole = std::max(layout_.Bytes(m.at()), layout_.Bytes(m.target()));
      if (!(offset == 0 && src.size() >= whole)) {
        spdlog::error(
            "block {} of inode {} lost its last write at an earlier unmount: a write "
            "of part of it is refused (write the whole block, truncate the file, or "
            "run s3oram fsck -y --zero-damaged)",
            key.idx, key.ino);
        return EIO;
      }
    }
    p = Insert(lock, key, m, /*load=*/false);
    // Everything the ORAM holds for the block is its first `valid` bytes: a
    // write covering them needs nothing from there.
    const std::size_t valid = std::min<std::size_t>(m.valid, layout_.Bytes(m.at()));
    if (valid > 0 && !(offset == 0 && src.size() >= valid)) {
      p->partial = true;
      p->base_valid = valid;
    }
  }
  std::memcpy(p->data.data() + offset, src.data(), src.size());
  if (p->partial) {
    AddWritten(p->written, offset, offset + src.size());
    if (Covers(p->written, 0, p->base_valid)) {  // written over all it had: an ordinary page
      p->partial = false;
      p->written.clear();
    }
  }
  MarkDirty(p);
  Touch(p);
  return 0;
}

void BlockCache::ZeroTail(PageKey key, std::size_t from) {
  std::unique_lock<std::mutex> lock(mu_);
  Page* p = FindReady(lock, key);
  if (!p || from >= block_) return;
  // Not marked dirty: the metadata's valid length already hides the ORAM
  // copy's tail, and a later write-back of this page carries the zeros. A
  // partial page (always dirty) owns the zeros, so its write-back lays them
  // over the ORAM copy's tail.
  std::fill(p->data.begin() + static_cast<std::ptrdiff_t>(from), p->data.end(), std::uint8_t{0});
  if (p->partial) AddWritten(p->written, from, block_);
}

void BlockCache::Discard(Ino ino, std::uint64_t first_idx) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    bool waited = false;
    auto it = pages_.lower_bound(PageKey{ino, first_idx});
    while (it != pages_.end() && it->first.ino == ino) {
      Page* p = it->second.get();
      if (p->writing || p->loading) {
        cv_.wait(lock);
        waited = true;
        break;
      }
      lru_.erase(p->lru);
      it = pages_.erase(it);
    }
    if (!waited) return;
  }
}

int BlockCache::TakeWriteBack(std::unique_lock<std::mutex>& lock, PageKey key,
                              std::optional<WriteGroup>& out, std::set<std::size_t>* held) {
  out.reset();
  // Wait out a write-back in flight (its copy may predate our change), then
  // take the page if it is still dirty. Pages are looked up again after
  // every wait: they may have been discarded meanwhile.
  Page* p = nullptr;
  for (;;) {
    auto it = pages_.find(key);
    if (it == pages_.end()) return 0;
    p = it->second.get();
    if (p->loading) return 0;  // a page being loaded is clean
    if (!p->writing) break;
    cv_.wait(lock);
  }
  if (!p->dirty) return 0;
  // A relocation writes the whole block to the new extent: a partial page
  // needs the old copy first.
  if (p->next && p->partial) {
    if (int e = Complete(lock, p); e != 0) return e;
    // The lock was released: the page may have been written back meanwhile
    // (only by this thread: we hold its inode lock), so look again.
    if (!p->dirty) return 0;
  }

  WriteGroup g;
  auto take = [&](PageKey k, Page* pg) {
    Job j;
    j.key = k;
    j.page = pg;
    j.target = pg->target();
    j.partial = pg->partial;
    j.base_valid = pg->base_valid;
    j.written = pg->written;
    j.copy = pg->data;
    pg->writing = true;
    pg->dirty = false;
    g.jobs.push_back(std::move(j));
  };
  take(key, p);

  // Companions: other dirty pages whose fragments share the block, of files
  // whose locks we hold or can take without waiting.
  const Extent target = g.jobs.front().target;
  if (!target.whole()) {
    // Stripes this thread holds already (the page's, and the caller's for
    // groups not sent yet): their pages may go along without a try-lock.
    std::set<std::size_t> stripes{locks_.StripeOf(key.ino)};
    if (held != nullptr) stripes.insert(held->begin(), held->end());
    std::set<std::size_t> busy;
    for (auto& [k, pg] : pages_) {
      if (k == key || !pg->dirty || pg->writing || pg->loading) continue;
      const Extent t = pg->target();
      if (t.whole() || t.id != target.id) continue;
      if (pg->next && pg->partial) continue;  // needs a load first; on its own turn
      const std::size_t stripe = locks_.StripeOf(k.ino);
      if (busy.count(stripe)) continue;
      if (!stripes.count(stripe)) {
        std::unique_lock<std::mutex> l(locks_.Stripe(stripe), std::try_to_lock);
        if (!l.owns_lock()) {
          busy.insert(stripe);
          continue;
        }
        g.held.push_back(std::move(l));
        stripes.insert(stripe);
        if (held != nullptr) held->insert(stripe);
      }
      take(k, pg.get());
    }
  }
  g.update = !target.whole() || g.jobs.front().partial;
  out = std::move(g);
  return 0;
}

int BlockCache::RunWriteBacks(std::unique_lock<std::mutex>& lock,
                              std::vector<WriteGroup>& groups) {
  if (groups.empty()) return 0;
  // One access per group: an update lays the pages' bytes over the ORAM
  // copy of the block; the accesses of several groups go as one batch
  // (pipelined by the engine).
  std::vector<BlockEngine::Modifier> modifiers(groups.size());
  std::vector<BlockEngine::Op> ops(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const WriteGroup& wg = groups[g];
    ops[g].id = wg.jobs.front().target.id;
    if (wg.update) {
      modifiers[g] = [this, &wg](std::span<std::uint8_t> b) {
        for (const Job& j : wg.jobs) Apply(j, b);
      };
      ops[g].kind = BlockEngine::Op::Kind::kUpdate;
      ops[g].modify = &modifiers[g];
    } else {
      ops[g].kind = BlockEngine::Op::Kind::kWrite;
      ops[g].data = wg.jobs.front().copy;
    }
  }
  lock.unlock();
  auto results = engine_.Batch(ops);
  std::vector<int> errs(groups.size(), 0);
  std::vector<std::vector<std::uint8_t>> stored(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto& r = results[g];
    if (groups[g].update && r.ok() && r->size() != block_) {
      r = Status::Corruption("update returned a short block");
    }
    errs[g] = WriteErrno(r.status());
    if (r.ok() && groups[g].update) stored[g] = std::move(r).value();
    // The hook runs before `writing` clears: until then nobody can discard
    // the pages, so their extents cannot be freed and reused by another file
    // before the metadata says what the ORAM holds for them.
    if (errs[g] == 0 && on_written_) {
      std::vector<WrittenExtent> done;
      done.reserve(groups[g].jobs.size());
      for (const Job& j : groups[g].jobs) done.push_back({j.key.ino, j.key.idx, j.target});
      errs[g] = on_written_(done);
    }
  }
  lock.lock();
  int first_error = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const int err = errs[g];
    ++stats_.writebacks;
    if (groups[g].update) ++stats_.updates;
    stats_.coalesced += groups[g].jobs.size() - 1;
    for (const Job& j : groups[g].jobs) {
      Page* pg = j.page;
      pg->writing = false;
      if (err != 0) {
        MarkDirty(pg);
        continue;
      }
      if (j.partial && pg->partial) {
        // The page is complete now: the stored extent with whatever was
        // written into the page meanwhile laid over it again.
        std::vector<std::uint8_t> full = Extract(j.target, layout_.Bytes(j.target), stored[g]);
        Overlay(pg->base_valid, pg->written, pg->data, full);
        pg->data = std::move(full);
        pg->partial = false;
        pg->written.clear();
      }
      if (pg->next && *pg->next == j.target) {  // relocated: the hook switched the mapping
        pg->at = j.target;
        pg->next.reset();
      }
    }
    if (err != 0) {
      ++stats_.failures;
      if (first_error == 0) first_error = err;
    }
  }
  groups.clear();  // releases the companions' locks
  cv_.notify_all();
  return first_error;
}

int BlockCache::WriteBack(std::unique_lock<std::mutex>& lock, PageKey key) {
  std::optional<WriteGroup> g;
  if (int e = TakeWriteBack(lock, key, g); e != 0) return e;
  if (!g) return 0;
  std::vector<WriteGroup> groups;
  groups.push_back(std::move(*g));
  return RunWriteBacks(lock, groups);
}

bool BlockCache::Writing(PageKey key) const {
  const auto it = pages_.find(key);
  return it != pages_.end() && it->second->writing;
}

int BlockCache::WriteBackLocking(std::unique_lock<std::mutex>& lock,
                                 const std::vector<PageKey>& keys, bool try_only) {
  int err = 0;
  std::vector<WriteGroup> groups;
  std::set<std::size_t> held_stripes;  // inode locks the groups not sent yet hold
  const std::size_t batch = std::max<std::size_t>(1, engine_.max_batch());
  auto run = [&] {
    if (int e = RunWriteBacks(lock, groups); e != 0 && err == 0) err = e;
    held_stripes.clear();
  };
  for (const PageKey& k : keys) {
    auto it = pages_.find(k);
    if (it == pages_.end() || !(it->second->dirty || it->second->writing)) continue;
    // A page of a group not sent yet (a companion) is written by it; any
    // other write-back in flight is waited out.
    if (it->second->writing) run();
    const std::size_t stripe = locks_.StripeOf(k.ino);
    std::unique_lock<std::mutex> owner;
    if (!held_stripes.count(stripe)) {
      owner = std::unique_lock<std::mutex>(locks_.Stripe(stripe), std::try_to_lock);
      if (!owner.owns_lock()) {
        if (try_only) continue;
        // Never wait for an inode lock while holding the cache's, nor while
        // holding other inodes' locks for groups not sent yet: their owners
        // may be waiting for ours.
        run();
        lock.unlock();
        owner.lock();
        lock.lock();
      }
    }
    if (owner.owns_lock()) held_stripes.insert(stripe);
    std::optional<WriteGroup> g;
    const int e = TakeWriteBack(lock, k, g, &held_stripes);
    if (e != 0 && err == 0) err = e;
    if (!g) {
      if (owner.owns_lock()) held_stripes.erase(stripe);  // released below
      continue;
    }
    if (owner.owns_lock()) g->held.push_back(std::move(owner));
    groups.push_back(std::move(*g));
    if (groups.size() >= batch) run();
  }
  run();
  return err;
}

int BlockCache::FlushInode(Ino ino) {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<PageKey> keys;
  for (auto it = pages_.lower_bound(PageKey{ino, 0}); it != pages_.end() && it->first.ino == ino;
       ++it) {
    if (it->second->dirty || it->second->writing) keys.push_back(it->first);
  }
  // Up to the engine's batch of pages go together. The first failure ends
  // the flush: the file's remaining dirty pages stay dirty for the next
  // flush, and an fsync against an unreachable server fails after one
  // timeout instead of one per dirty block.
  std::vector<WriteGroup> groups;
  const std::set<std::size_t> own{locks_.StripeOf(ino)};  // the caller holds it
  std::set<std::size_t> held = own;  // and the groups' companions' stripes
  auto run = [&] {
    const int e = RunWriteBacks(lock, groups);  // releases the companions' locks
    held = own;
    return e;
  };
  const std::size_t batch = std::max<std::size_t>(1, engine_.max_batch());
  for (const PageKey& k : keys) {
    // A page of a group not sent yet (a companion) is written by it.
    if (!groups.empty() && Writing(k)) {
      if (int e = run(); e != 0) return e;
    }
    std::optional<WriteGroup> g;
    if (int e = TakeWriteBack(lock, k, g, &held); e != 0) {
      const int sent = run();
      return sent != 0 ? sent : e;
    }
    if (!g) continue;
    groups.push_back(std::move(*g));
    if (groups.size() >= batch) {
      if (int e = run(); e != 0) return e;
    }
  }
  return run();
}

int BlockCache::FlushAll() {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<PageKey> keys;
  for (const auto& [k, p] : pages_) {
    if (p->dirty || p->writing) keys.push_back(k);
  }
  return WriteBackLocking(lock, keys, /*try_only=*/false);
}

int BlockCache::FlushExpired(Clock::duration age) {
  std::unique_lock<std::mutex> lock(mu_);
  const Clock::time_point cutoff = Clock::now() - age;
  std::vector<PageKey> keys;
  for (const auto& [k, p] : pages_) {
    if (p->dirty && !p->writing && p->dirty_since <= cutoff) keys.push_back(k);
  }
  return WriteBackLocking(lock, keys, /*try_only=*/true);
}

int BlockCache::Shrink() {
  std::unique_lock<std::mutex> lock(mu_);
  const std::size_t batch = std::max<std::size_t>(1, engine_.max_batch());
  // Bounded: each round drops a page at least, or stops.
  std::size_t rounds = 2 * pages_.size() + 16;
  while (pages_.size() > capacity_ && rounds-- > 0) {
    // Victims: the least recently used pages not in I/O, as many as are over
    // the capacity up to the engine's batch; their write-backs go together.
    const std::size_t want = std::min(batch, pages_.size() - capacity_);
    std::vector<PageKey> candidates;
    for (const PageKey& key : lru_) {
      const Page* p = pages_.at(key).get();
      if (!p->loading && !p->writing) candidates.push_back(key);
    }
    if (candidates.empty()) return 0;  // the rest is in I/O or in use
    // The owners' locks keep their mappings true while we write back and
    // drop (see inode_locks.h); a page whose owner is busy is being used.
    std::vector<std::unique_lock<std::mutex>> owners;
    std::set<std::size_t> owner_stripes;
    std::set<std::size_t> held_stripes;  // the owners' and the groups' companions'
    std::vector<WriteGroup> groups;
    std::vector<PageKey> victims;
    auto run = [&] {
      const int e = RunWriteBacks(lock, groups);  // releases the companions' locks
      held_stripes = owner_stripes;
      return e;
    };
    for (const PageKey& key : candidates) {
      if (victims.size() >= want) break;
      const std::size_t stripe = locks_.StripeOf(key.ino);
      if (!held_stripes.count(stripe)) {
        std::unique_lock<std::mutex> owner(locks_.Stripe(stripe), std::try_to_lock);
        if (!owner.owns_lock()) continue;
        owners.push_back(std::move(owner));
        owner_stripes.insert(stripe);
        held_stripes.insert(stripe);
      } else if (!owner_stripes.count(stripe)) {
        // Held for a companion of a group not sent yet: send it first, then
        // take the page's own lock.
        if (int e = run(); e != 0) return e;
        std::unique_lock<std::mutex> owner(locks_.Stripe(stripe), std::try_to_lock);
        if (!owner.owns_lock()) continue;
        owners.push_back(std::move(owner));
        owner_stripes.insert(stripe);
        held_stripes.insert(stripe);
      }
      // A companion of a group not sent yet is written by it.
      if (!groups.empty() && Writing(key)) {
        if (int e = run(); e != 0) return e;
      }
      std::optional<WriteGroup> g;
      if (int e = TakeWriteBack(lock, key, g, &held_stripes); e != 0) {
        const int sent = RunWriteBacks(lock, groups);
        return sent != 0 ? sent : e;
      }
      if (g) groups.push_back(std::move(*g));
      victims.push_back(key);
    }
    if (victims.empty()) return 0;
    if (int e = run(); e != 0) return e;
    std::size_t dropped = 0;
    for (const PageKey& key : victims) {
      auto it = pages_.find(key);
      if (it != pages_.end() && !it->second->dirty && !it->second->writing &&
          !it->second->loading) {
        lru_.erase(it->second->lru);
        pages_.erase(it);
        ++dropped;
      }
    }
    if (dropped == 0) return 0;
  }
  return 0;
}

bool BlockCache::HasDirty(Ino ino) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pages_.lower_bound(PageKey{ino, 0}); it != pages_.end() && it->first.ino == ino;
       ++it) {
    if (it->second->dirty || it->second->writing) return true;
  }
  return false;
}

std::vector<PageKey> BlockCache::DirtyKeys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PageKey> out;
  for (const auto& [key, page] : pages_) {
    if (page->dirty || page->writing) out.push_back(key);
  }
  return out;
}

BlockCache::Stats BlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.pages = pages_.size();
  s.dirty = static_cast<std::size_t>(
      std::count_if(pages_.begin(), pages_.end(), [](const auto& kv) { return kv.second->dirty; }));
  return s;
}

}  // namespace s3oram::fs
