// MetadataStore: the block map (metadata_store.h): mapping, extents and
// shared-block slots for writes, write-back reports, statfs.
#include <algorithm>
#include <map>

#include "fused/metadata_store_internal.h"

namespace s3oram::fs {

// --- blocks -----------------------------------------------------------------

int MetadataStore::GetBlock(Ino ino, std::uint64_t idx, std::optional<BlockId>* out) {
  return Run(false, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if (IsDir(a.mode)) Fail(EISDIR);
    Q q = m.S("SELECT block_id FROM fs_blocks WHERE ino = ? AND idx = ?");
    q.U(ino).U(idx);
    std::optional<BlockId> r;
    if (q.Next()) r = q.UCol(0);
    if (out) *out = r;
  });
}

int MetadataStore::MapBlock(Ino ino, std::uint64_t idx, std::uint64_t min_size, BlockId* out) {
  return Run(true, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if (IsDir(a.mode)) Fail(EISDIR);
    if ((a.mode & S_IFMT) != S_IFREG) Fail(EINVAL, "blocks of a non-regular file");
    if (idx >= static_cast<std::uint64_t>(INT64_MAX) / m.block_bytes_ ||
        min_size > static_cast<std::uint64_t>(INT64_MAX)) {
      Fail(EFBIG, "offset too large");
    }
    std::optional<BlockId> id;
    {
      Q q = m.S("SELECT block_id FROM fs_blocks WHERE ino = ? AND idx = ?");
      q.U(ino).U(idx);
      if (q.Next()) id = q.UCol(0);
    }
    if (!id) {
      if (m.BlocksFor(std::max(a.size, min_size)) <= idx) {
        Fail(EINVAL, "block lies beyond the file size and min_size");
      }
      id = m.AllocateBlock();
      m.S("INSERT INTO fs_blocks(ino, idx, block_id) VALUES (?, ?, ?)").U(ino).U(idx).U(*id).Run();
    }
    if (min_size > a.size) {
      const std::int64_t now = NowNs();
      m.S("UPDATE fs_inodes SET size = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?")
          .U(min_size)
          .I(now)
          .I(now)
          .U(ino)
          .Run();
    }
    if (out) *out = *id;
  });
}

int MetadataStore::GetBlocks(Ino ino, std::uint64_t first_idx, std::uint64_t count,
                             std::vector<BlockMapping>* out, Attr* attr) {
  return Run(false, [&](Impl& m) {
    Attr a = m.FullAttr(ino);
    if (IsDir(a.mode)) Fail(EISDIR);
    std::vector<BlockMapping> r;
    if (count > 0) {
      const std::uint64_t last = first_idx + std::min(count - 1, UINT64_MAX - first_idx);
      Q q = m.S(
          "SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots, "
          "EXISTS(SELECT 1 FROM fs_lost l WHERE l.ino = b.ino AND l.idx = b.idx) "
          "FROM fs_blocks b WHERE ino = ? AND idx >= ? AND idx <= ? ORDER BY idx");
      q.U(ino).I(m.ClampIdx(first_idx)).I(m.ClampIdx(last));
      while (q.Next()) {
        r.push_back(Impl::RowMapping(q));
        r.back().lost = q.Col(8) != 0;
      }
    }
    if (out) *out = std::move(r);
    if (attr) *attr = a;
  });
}

int MetadataStore::PrepareWrite(Ino ino, std::uint64_t offset, std::uint64_t length,
                                std::vector<BlockMapping>* out, Attr* old_attr) {
  return Run(true, [&](Impl& m) {
    Attr a = m.FullAttr(ino);
    if (IsDir(a.mode)) Fail(EISDIR);
    if ((a.mode & S_IFMT) != S_IFREG) Fail(EINVAL, "blocks of a non-regular file");
    constexpr std::uint64_t kMax = static_cast<std::uint64_t>(INT64_MAX);
    if (offset > kMax || length > kMax - offset) Fail(EFBIG, "offset too large");
    const std::uint64_t end = offset + length;
    std::vector<BlockMapping> r;
    if (length > 0) {
      const std::uint64_t first = offset / m.block_bytes_;
      const std::uint64_t last = (end - 1) / m.block_bytes_;
      std::map<std::uint64_t, BlockMapping> mapped;
      {
        Q q =
            m.S("SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots "
                "FROM fs_blocks WHERE ino = ? AND idx >= ? AND idx <= ? ORDER BY idx");
        q.U(ino).U(first).U(last);
        while (q.Next()) {
          BlockMapping bm = Impl::RowMapping(q);
          mapped[bm.idx] = bm;
        }
      }
      const BlockLayout& lay = m.layout_;
      for (std::uint64_t idx = first; idx <= last; ++idx) {
        // The file's bytes in this block after the write start at its
        // offset 0 (extents hold a block's leading bytes) and end here.
        const auto need = static_cast<std::uint32_t>(
            std::min<std::uint64_t>(m.block_bytes_, end - idx * m.block_bytes_));
        auto it = mapped.find(idx);
        if (it == mapped.end()) {
          const Extent e = m.AllocateExtent(lay.SlotsFor(need));
          m.S("INSERT INTO fs_blocks(ino, idx, block_id, slot, slots, valid) "
              "VALUES (?, ?, ?, ?, ?, 0)")
              .U(ino)
              .U(idx)
              .U(e.id)
              .I(e.slot)
              .I(e.slots)
              .Run();
          r.push_back(BlockMapping{idx, e.id, 0, e.slot, e.slots, std::nullopt});
          continue;
        }
        BlockMapping bm = it->second;
        if (lay.Holds(bm.target().slots, need)) {
          r.push_back(bm);
          continue;
        }
        // Too small. What it must hold from now on: the write, and whatever
        // the daemon may already have cached for the old target.
        const std::uint32_t want =
            lay.SlotsFor(std::max<std::uint32_t>(need, lay.Bytes(bm.target())));
        if (bm.valid == 0) {
          // Nothing of the file's is in the ORAM yet: replace in place.
          m.FreeExtent(bm.at(), nullptr);
          if (bm.next) m.FreeExtent(*bm.next, nullptr);
          const Extent e = m.AllocateExtent(want);
          m.S("UPDATE fs_blocks SET block_id = ?, slot = ?, slots = ?, next_id = NULL, "
              "next_slot = NULL, next_slots = NULL WHERE ino = ? AND idx = ?")
              .U(e.id)
              .I(e.slot)
              .I(e.slots)
              .U(ino)
              .U(idx)
              .Run();
          r.push_back(BlockMapping{idx, e.id, 0, e.slot, e.slots, std::nullopt});
          continue;
        }
        // The old extent keeps the data until a write-back lands in the new.
        if (bm.next) m.FreeExtent(*bm.next, nullptr);
        bm.next = m.AllocateExtent(want);
        m.SetNext(ino, idx, bm.next);
        r.push_back(bm);
      }
    }
    const std::int64_t now = NowNs();
    m.S("UPDATE fs_inodes SET size = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?")
        .U(std::max(a.size, end))
        .I(now)
        .I(now)
        .U(ino)
        .Run();
    if (out) *out = std::move(r);
    if (old_attr) *old_attr = a;
  });
}

int MetadataStore::MarkWritten(const std::vector<WrittenExtent>& written) {
  if (written.empty()) return 0;
  return Run(true, [&](Impl& m) {
    // valid = the part of the block below the file's current size, within
    // the extent. The daemon's cached copy is zero past the size, so
    // whatever it wrote back past the size at the time of its copy is zeros
    // as well.
    for (const WrittenExtent& w : written) {
      auto bm = m.FindMapping(w.ino, w.idx);
      if (!bm) continue;
      auto attr = m.FindInode(w.ino);
      if (!attr) continue;
      const std::uint64_t start = w.idx * m.block_bytes_;
      const std::uint64_t in_size = attr->size > start ? attr->size - start : 0;
      const auto valid =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(m.layout_.Bytes(w.extent), in_size));
      if (w.extent == bm->at() || (bm->next && w.extent == *bm->next)) {
        // The block holds what the daemon wrote now: no longer lost.
        m.S("DELETE FROM fs_lost WHERE ino = ? AND idx = ?").U(w.ino).U(w.idx).Run();
      }
      if (w.extent == bm->at()) {
        m.S("UPDATE fs_blocks SET valid = ? WHERE ino = ? AND idx = ?")
            .I(valid)
            .U(w.ino)
            .U(w.idx)
            .Run();
      } else if (bm->next && w.extent == *bm->next) {
        // The relocation landed: the new extent holds the whole block.
        m.FreeExtent(bm->at(), nullptr);
        m.S("UPDATE fs_blocks SET block_id = ?, slot = ?, slots = ?, valid = ?, next_id = NULL, "
            "next_slot = NULL, next_slots = NULL WHERE ino = ? AND idx = ?")
            .U(w.extent.id)
            .I(w.extent.slot)
            .I(w.extent.slots)
            .I(valid)
            .U(w.ino)
            .U(w.idx)
            .Run();
      }
    }
  });
}

int MetadataStore::StatFs(FsStats* out) {
  return Run(false, [&](Impl& m) {
    FsStats s;
    s.total_blocks = capacity_;
    s.block_bytes = block_bytes_;
    {
      // Free space in slots: blocks never used or on the free list, plus
      // the free slots of shared blocks.
      const std::uint64_t spb = layout_.slots_per_block();
      const std::uint64_t next = m.MetaGet("next_unused");
      std::uint64_t free_listed = 0, shared = 0, shared_used = 0;
      {
        Q q = m.S("SELECT count(*) FROM fs_free_blocks");
        q.Next();
        free_listed = q.UCol(0);
      }
      {
        Q q = m.S("SELECT count(*), coalesce(sum(nused), 0) FROM fs_shared");
        q.Next();
        shared = q.UCol(0);
        shared_used = q.UCol(1);
      }
      const std::uint64_t untouched = capacity_ - std::min(capacity_, next);
      const std::uint64_t free_slots =
          (untouched + free_listed) * spb + (shared * spb - std::min(shared * spb, shared_used));
      s.free_blocks = std::min(capacity_, free_slots / spb);
    }
    {
      Q q = m.S("SELECT count(*) FROM fs_inodes");
      q.Next();
      s.inodes = q.UCol(0);
    }
    if (out) *out = s;
  });
}

int MetadataStore::MarkLost(const std::vector<std::pair<Ino, std::uint64_t>>& blocks,
                            std::size_t* marked) {
  std::size_t n = 0;
  const int e = Run(true, [&](Impl& m) {
    for (const auto& [ino, idx] : blocks) {
      if (!m.FindMapping(ino, idx)) continue;
      // An unlinked file nobody can open again (freed at the next mount).
      if (auto a = m.FindInode(ino); !a || a->nlink == 0) continue;
      m.S("INSERT OR IGNORE INTO fs_lost(ino, idx) VALUES (?, ?)").U(ino).U(idx).Run();
      ++n;
    }
  });
  if (marked) *marked = e == 0 ? n : 0;
  return e;
}

int MetadataStore::LostBlocks(std::vector<std::pair<Ino, std::uint64_t>>* out) {
  return Run(false, [&](Impl& m) {
    out->clear();
    Q q = m.S("SELECT ino, idx FROM fs_lost ORDER BY ino, idx");
    while (q.Next()) out->emplace_back(q.UCol(0), q.UCol(1));
  });
}

}  // namespace s3oram::fs
