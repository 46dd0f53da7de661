// Fsck phase 2 (fsck.h, CheckMetadata): the filesystem's tables
// (metadata_schema.h) on their own and against the position map.
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "fused/fsck.h"
#include "fused/fsck_internal.h"
#include "oramcore/state/client_state.h"
#include "oramcore/state/sql.h"

namespace s3oram::fs {

using namespace fsck_detail;
using sql::FromSql;
using sql::ToSql;

// --- phase 2: the filesystem metadata ---------------------------------------------

FsckPhaseResult CheckMetadata(const FsckSnapshot& snap, const FsckOptions& options,
                              const std::set<BlockId>& positions_deleted_by_phase1) {
  FsckPhaseResult r;
  if (!snap.has_fs) {
    r.notes.push_back("no filesystem metadata (never mounted): only the ORAM state was checked");
    return r;
  }
  const PathNamer names(snap);
  const std::uint64_t bb = snap.params.block_bytes;
  const std::uint64_t cap = snap.params.capacity_blocks;
  auto problem = [&](std::string m, bool repairable) {
    r.problems.push_back({2, std::move(m), repairable});
  };

  if (snap.fs_capacity_blocks != cap || snap.fs_block_bytes != bb) {
    problem("fs_meta records capacity " + std::to_string(snap.fs_capacity_blocks) + " blocks of " +
                std::to_string(snap.fs_block_bytes) + " bytes, the ORAM has " +
                std::to_string(cap) + " of " + std::to_string(bb),
            false);
  }
  auto root = snap.inodes.find(kRootIno);
  if (root == snap.inodes.end() || !IsDir(root->second.mode)) {
    problem("the root directory (inode 1) is missing or not a directory", false);
    return r;
  }

  // Working model of the tree: live entries by cookie, inodes by number.
  std::map<std::uint64_t, FsckSnapshot::Dirent> live;
  for (const auto& d : snap.dirents) live[d.cookie] = d;
  std::map<Ino, FsckSnapshot::Inode> inodes = snap.inodes;
  auto delete_entry = [&](std::uint64_t cookie) {
    live.erase(cookie);
    r.repairs.push_back({FsckRepair::Kind::kDeleteEntry, cookie});
  };

  // Entries: existing directory parent, existing target, valid name.
  for (const auto& d : snap.dirents) {
    const std::string where = "entry '" + d.name + "' (cookie " + std::to_string(d.cookie) + ")";
    auto p = inodes.find(d.parent);
    auto c = inodes.find(d.ino);
    if (p == inodes.end() || !IsDir(p->second.mode)) {
      problem(where + " lies in " + (p == inodes.end() ? "missing inode " : "non-directory ") +
                  std::to_string(d.parent),
              true);
      delete_entry(d.cookie);
    } else if (c == inodes.end()) {
      problem("dangling " + where + " in " + names.Describe(d.parent) +
                  " points to missing inode " + std::to_string(d.ino),
              true);
      delete_entry(d.cookie);
    } else if (d.ino == kRootIno) {
      problem(where + " in " + names.Describe(d.parent) + " points to the root directory", true);
      delete_entry(d.cookie);
    } else if (d.name.empty() || d.name.size() > kMaxNameBytes || d.name == "." || d.name == ".." ||
               d.name.find('/') != std::string::npos || d.name.find('\0') != std::string::npos) {
      problem("invalid name in entry (cookie " + std::to_string(d.cookie) + ") of " +
                  names.Describe(d.parent) + " for inode " + std::to_string(d.ino),
              true);
      delete_entry(d.cookie);
    }
  }
  // A directory has exactly one entry: keep the oldest.
  {
    std::map<Ino, int> dir_entries;
    for (auto it = live.begin(); it != live.end();) {
      const auto& d = it->second;
      if (IsDir(inodes[d.ino].mode) && ++dir_entries[d.ino] > 1) {
        problem("directory " + names.Describe(d.ino) + " has a second entry '" + d.name + "' in " +
                    names.Describe(d.parent),
                true);
        r.repairs.push_back({FsckRepair::Kind::kDeleteEntry, it->first});
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Reachability from the root.
  std::map<Ino, std::vector<std::uint64_t>> children;    // parent -> cookies
  std::map<Ino, std::vector<std::uint64_t>> entries_of;  // ino -> cookies
  auto index = [&] {
    children.clear();
    entries_of.clear();
    for (const auto& [cookie, d] : live) {
      children[d.parent].push_back(cookie);
      entries_of[d.ino].push_back(cookie);
    }
  };
  index();
  std::set<Ino> reached;
  auto reach_from = [&](Ino start) {
    std::deque<Ino> todo{start};
    reached.insert(start);
    while (!todo.empty()) {
      const Ino cur = todo.front();
      todo.pop_front();
      for (std::uint64_t cookie : children[cur]) {
        const Ino child = live[cookie].ino;
        if (reached.insert(child).second) todo.push_back(child);
      }
    }
  };
  reach_from(kRootIno);

  // /lost+found: an existing directory entry in the root, or one to create.
  std::optional<Ino> lost_found;
  bool lost_found_blocked = false;
  auto get_lost_found = [&]() -> std::optional<Ino> {
    if (lost_found || lost_found_blocked) return lost_found;
    for (std::uint64_t cookie : children[kRootIno]) {
      const auto& d = live[cookie];
      if (d.name != kLostFoundName) continue;
      if (IsDir(inodes[d.ino].mode)) {
        lost_found = d.ino;
      } else {
        lost_found_blocked = true;
      }
      return lost_found;
    }
    lost_found = kNewLostFound;
    inodes[kNewLostFound] =
        FsckSnapshot::Inode{S_IFDIR | 0700, 2, 0, root->second.uid, root->second.gid};
    const std::uint64_t cookie =
        ~std::uint64_t{0} - 1;  // a model-only cookie, after every real one
    live[cookie] = FsckSnapshot::Dirent{cookie, kRootIno, kLostFoundName, kNewLostFound};
    children[kRootIno].push_back(cookie);
    entries_of[kNewLostFound].push_back(cookie);
    reached.insert(kNewLostFound);
    return lost_found;
  };

  std::uint64_t pending_orphans = 0;
  for (const auto& [ino, node] : snap.inodes) {
    if (reached.count(ino)) continue;
    const bool has_entries = !entries_of[ino].empty();
    const bool has_children = !children[ino].empty();
    if (node.nlink == 0 && !has_entries && !has_children) {
      ++pending_orphans;  // unlinked while open, then a crash: the next mount frees it
      continue;
    }
    // Walk up to the top of the unreachable part: an inode without entries,
    // or the point where the parents loop (a directory cycle, cut there).
    Ino top = ino;
    bool cycle = false;
    std::set<Ino> seen;
    while (!entries_of[top].empty()) {
      if (!seen.insert(top).second) {
        cycle = true;
        break;
      }
      top = live[entries_of[top].front()].parent;
    }
    std::string message = TypeName(node.mode) + " inode " + std::to_string(ino) + " (nlink " +
                          std::to_string(node.nlink) + ", size " + std::to_string(node.size) +
                          ") is not reachable from the root";
    if (top != ino)
      message += " (it hangs below unreachable directory inode " + std::to_string(top) + ")";
    if (cycle) message += "; directory inode " + std::to_string(top) + " is part of a cycle";
    auto lf = get_lost_found();
    if (!lf) {
      problem(message + "; /lost+found exists but is not a directory, so it stays unlinked", false);
      continue;
    }
    if (cycle) {
      for (std::uint64_t cookie : entries_of[top]) delete_entry(cookie);
      index();
    }
    // "#<ino>", or "#<ino>.<n>" if a file of that name is already there.
    std::string name = "#" + std::to_string(top);
    auto taken = [&](const std::string& n) {
      return std::any_of(children[*lf].begin(), children[*lf].end(),
                         [&](std::uint64_t k) { return live[k].name == n; });
    };
    for (int n = 1; taken(name); ++n) name = "#" + std::to_string(top) + "." + std::to_string(n);
    problem(message + ": linked into /lost+found as " + name, true);
    const std::uint64_t cookie = ~std::uint64_t{0} - 2 - top;  // model-only
    live[cookie] = FsckSnapshot::Dirent{cookie, *lf, name, top};
    children[*lf].push_back(cookie);
    entries_of[top].push_back(cookie);
    r.repairs.push_back({FsckRepair::Kind::kLinkLostFound, top, 0, 0, name});
    reach_from(top);
  }
  if (pending_orphans > 0) {
    r.notes.push_back(std::to_string(pending_orphans) +
                      " unlinked inode(s) with nlink 0 await removal (left by a crash; the next "
                      "mount frees them)");
  }

  // Link counts as the stored entries imply them (entries to existing
  // inodes in existing directories): a count that differs from it is an
  // error; one that only differs from the repaired tree's is a consequence
  // of another repair (an entry removed, /lost+found added) and is fixed
  // without a report of its own.
  std::map<Ino, std::int64_t> stored_entries, stored_subdirs;
  for (const auto& d : snap.dirents) {
    auto p = snap.inodes.find(d.parent);
    auto c = snap.inodes.find(d.ino);
    if (p == snap.inodes.end() || !IsDir(p->second.mode) || c == snap.inodes.end()) continue;
    ++stored_entries[d.ino];
    if (IsDir(c->second.mode)) ++stored_subdirs[d.parent];
  }
  // Link counts against the (repaired) entries.
  for (auto& [ino, node] : inodes) {
    const std::uint64_t entries = entries_of[ino].size();
    std::int64_t want;
    if (IsDir(node.mode)) {
      if (ino != kRootIno && entries == 0 && node.nlink == 0 && children[ino].empty()) continue;
      std::uint64_t subdirs = 0;
      for (std::uint64_t cookie : children[ino])
        subdirs += IsDir(inodes[live[cookie].ino].mode) ? 1 : 0;
      want = static_cast<std::int64_t>(2 + subdirs);
    } else {
      want = static_cast<std::int64_t>(entries);
    }
    if (ino == kNewLostFound) {
      node.nlink = want;
      continue;
    }
    const std::int64_t implied = IsDir(node.mode) ? 2 + stored_subdirs[ino] : stored_entries[ino];
    if (node.nlink != want && node.nlink == implied) {
      r.repairs.push_back({FsckRepair::Kind::kSetNlink, ino, static_cast<std::uint64_t>(want)});
    } else if (node.nlink != want) {
      problem(TypeName(node.mode) + " " + names.Describe(ino) + " has nlink " +
                  std::to_string(node.nlink) + ", expected " + std::to_string(want) +
                  (IsDir(node.mode) ? " (2 + subdirectories)" : " (its directory entries)"),
              true);
      r.repairs.push_back({FsckRepair::Kind::kSetNlink, ino, static_cast<std::uint64_t>(want)});
    }
  }
  if (lost_found == kNewLostFound) {
    const auto& lf = inodes[kNewLostFound];
    r.repairs.insert(r.repairs.begin(), {FsckRepair::Kind::kCreateLostFound, lf.uid, lf.gid,
                                         static_cast<std::uint64_t>(lf.nlink)});
  }

  // Symlink targets exactly for symlinks; xattrs only of existing inodes.
  {
    std::set<Ino> rows(snap.symlink_rows.begin(), snap.symlink_rows.end());
    for (Ino ino : snap.symlink_rows) {
      auto it = snap.inodes.find(ino);
      if (it == snap.inodes.end() || !IsLnk(it->second.mode)) {
        problem("symlink target stored for " +
                    std::string(it == snap.inodes.end() ? "missing " : "non-symlink ") + "inode " +
                    std::to_string(ino),
                true);
        r.repairs.push_back({FsckRepair::Kind::kDeleteSymlinkRow, ino});
      }
    }
    for (const auto& [ino, node] : snap.inodes) {
      if (IsLnk(node.mode) && rows.count(ino) == 0) {
        problem("symlink " + names.Describe(ino) + " has no target", false);
      }
    }
  }
  if (snap.xattr_rows_of_missing_inodes > 0) {
    problem(
        std::to_string(snap.xattr_rows_of_missing_inodes) + " xattr(s) belong to missing inodes",
        true);
    r.repairs.push_back({FsckRepair::Kind::kDeleteStrayXattrs});
  }

  // Blocks: the map of every file against sizes, the allocator and the ORAM.
  if (!snap.next_unused) {
    problem("fs_meta has no next_unused: block allocation state is lost", false);
    return r;
  }
  std::uint64_t next = *snap.next_unused;
  if (next > cap) {
    problem("next_unused " + std::to_string(next) + " exceeds the capacity " + std::to_string(cap),
            false);
  }
  std::set<BlockId> positioned;
  for (const auto& row : snap.positions) {
    if (positions_deleted_by_phase1.count(row.id) == 0) positioned.insert(row.id);
  }
  // A block whose access logged its root write but had not sent it when the
  // client stopped (a kill): the next open sends it, which gives the block
  // its position (oramcore/state/client_state.h, kPendingRootKind: slot u32,
  // block id u64, mapped u8, ...). Its data are not lost.
  for (const auto& op : snap.pending) {
    if (op.kind != kPendingRootKind || op.payload.size() < 13 || op.payload[12] == 0) continue;
    BlockId id = 0;
    for (int i = 0; i < 8; ++i)
      id |= BlockId{op.payload[4 + static_cast<std::size_t>(i)]} << (8 * i);
    positioned.insert(id);
  }
  // A state that still has schema 2 is migrated by the daemon at its next
  // mount; its layout is whole blocks. Schema 3 records the slot count.
  const BlockLayout layout(static_cast<std::uint32_t>(bb));
  if (snap.fs_schema_version >= 3 &&
      snap.slots_per_block.value_or(-1) != static_cast<std::int64_t>(layout.slots_per_block())) {
    problem("fs_meta slots_per_block is " +
                (snap.slots_per_block ? std::to_string(*snap.slots_per_block) : "missing") +
                ", not " + std::to_string(layout.slots_per_block()) + " for " + std::to_string(bb) +
                "-byte blocks",
            false);
    return r;
  }
  std::set<BlockId> used;                      // whole or shared
  std::set<BlockId> whole;                     // mapped whole
  std::map<BlockId, std::uint64_t> fragments;  // shared block -> union of its fragments
  std::set<BlockId> unmapped;  // by the repairs above: freed without a report of their own
  std::uint64_t highest_used_plus_one = 0;
  // Claims an extent's space; the reason it cannot, or "".
  auto claim = [&](const Extent& e) -> std::string {
    if (e.id >= cap) return "is out of range (capacity " + std::to_string(cap) + ")";
    if (e.whole()) {
      if (whole.count(e.id) || fragments.count(e.id)) {
        return "uses ORAM block " + std::to_string(e.id) + ", which another extent uses";
      }
      whole.insert(e.id);
    } else {
      if (e.slots >= layout.slots_per_block() || e.slot + e.slots > layout.slots_per_block()) {
        return "has fragment slots " + std::to_string(e.slot) + "+" + std::to_string(e.slots) +
               " outside a block of " + std::to_string(layout.slots_per_block());
      }
      const std::uint64_t mask = BlockLayout::Mask(e.slot, e.slots);
      if (whole.count(e.id) || (fragments.count(e.id) && (fragments[e.id] & mask) != 0)) {
        return "overlaps another extent in ORAM block " + std::to_string(e.id);
      }
      fragments[e.id] |= mask;
    }
    used.insert(e.id);
    highest_used_plus_one = std::max(highest_used_plus_one, e.id + 1);
    return "";
  };
  for (const auto& b : snap.blocks) {
    const std::string who = BlockOwner(snap, names, b);
    auto it = snap.inodes.find(b.ino);
    auto unmap = [&](const std::string& why) {
      problem(who + " " + why + ": unmapped", true);
      r.repairs.push_back({FsckRepair::Kind::kUnmapBlock, b.ino, b.idx, b.id});
      unmapped.insert(b.id);
      if (b.next) unmapped.insert(b.next->id);
    };
    if (it == snap.inodes.end()) {
      unmap("belongs to a missing inode");
      continue;
    }
    if (!IsReg(it->second.mode)) {
      unmap("belongs to a " + TypeName(it->second.mode));
      continue;
    }
    if (b.idx >= BlocksFor(it->second.size, bb)) {
      unmap("lies beyond the file size " + std::to_string(it->second.size));
      continue;
    }
    if (std::string why = claim(b.at()); !why.empty()) {
      unmap(why);
      continue;
    }
    if (b.next) {
      // A relocation the daemon had not finished: legal, and harmless to
      // drop if it is damaged (the data are still in the extent).
      if (std::string why = claim(*b.next); !why.empty()) {
        problem(who + " relocation target " + why + ": dropped", true);
        r.repairs.push_back({FsckRepair::Kind::kClearNext, b.ino, b.idx});
        unmapped.insert(b.next->id);
      }
    }
    const std::uint64_t in_size = std::min<std::uint64_t>(
        layout.Bytes(b.at()), std::min<std::uint64_t>(bb, it->second.size - b.idx * bb));
    std::int64_t valid = b.valid;
    if (valid < 0 || static_cast<std::uint64_t>(valid) > in_size) {
      const std::int64_t fixed =
          std::clamp<std::int64_t>(valid, 0, static_cast<std::int64_t>(in_size));
      problem(who + " has valid length " + std::to_string(valid) +
                  " beyond the file size or its extent: set to " + std::to_string(fixed),
              true);
      r.repairs.push_back(
          {FsckRepair::Kind::kSetValid, b.ino, b.idx, static_cast<std::uint64_t>(fixed)});
      valid = fixed;
    }
    if (valid > 0 && positioned.count(b.id) == 0) {
      // valid > 0 only after a successful write-back, which committed the
      // position first: the position row was lost.
      std::string m = who + " holds " + std::to_string(valid) +
                      " bytes of file data but the block has no position in the ORAM: its data "
                      "are lost";
      if (options.zero_damaged) {
        problem(m + "; it will read as zeros", true);
        r.repairs.push_back({FsckRepair::Kind::kSetValid, b.ino, b.idx, 0});
      } else {
        problem(m + " (--zero-damaged makes it read as zeros)", false);
      }
    }
  }
  // Shared blocks: their slot maps must be the union of their fragments.
  {
    bool rewrite = false;
    std::map<BlockId, const FsckSnapshot::Shared*> rows;
    for (const auto& sh : snap.shared) rows[sh.id] = &sh;
    for (const auto& [id, mask] : fragments) {
      auto it = rows.find(id);
      if (it == rows.end()) {
        problem("ORAM block " + std::to_string(id) +
                    " holds fragments but is not recorded as shared: recorded",
                true);
        rewrite = true;
      } else if (it->second->used != mask || it->second->nused != std::popcount(mask) ||
                 it->second->longest != static_cast<std::int64_t>(layout.LongestFree(mask))) {
        problem("shared ORAM block " + std::to_string(id) +
                    " has a slot map that disagrees with its fragments: recomputed",
                true);
        rewrite = true;
      }
    }
    for (const auto& sh : snap.shared) {
      if (!fragments.count(sh.id)) {
        problem("ORAM block " + std::to_string(sh.id) +
                    " is recorded as shared but holds no fragment: dropped from the shared list",
                true);
        rewrite = true;
      }
    }
    if (snap.fs_schema_version >= 3 && (rewrite || !unmapped.empty())) {
      r.repairs.push_back({FsckRepair::Kind::kRewriteShared});
    }
  }
  if (highest_used_plus_one > next && next <= cap) {
    problem("blocks up to " + std::to_string(highest_used_plus_one - 1) +
                " are mapped but next_unused is " + std::to_string(next) + ": raised",
            true);
    next = highest_used_plus_one;
    r.repairs.push_back({FsckRepair::Kind::kSetNextUnused, next});
  }
  std::set<BlockId> free_ids;
  for (BlockId id : snap.free_blocks) {
    if (id >= next) {
      problem("free-list block " + std::to_string(id) + " was never allocated (next_unused " +
                  std::to_string(next) + "): removed from the free list",
              true);
      r.repairs.push_back({FsckRepair::Kind::kRemoveFree, id});
    } else if (used.count(id)) {
      problem("block " + std::to_string(id) +
                  " is both mapped by a file and on the free list: "
                  "removed from the free list",
              true);
      r.repairs.push_back({FsckRepair::Kind::kRemoveFree, id});
    } else {
      free_ids.insert(id);
    }
  }
  std::vector<BlockId> leaked;
  for (BlockId id = 0; id < std::min(next, cap); ++id) {
    if (!used.count(id) && !free_ids.count(id)) {
      if (!unmapped.count(id)) leaked.push_back(id);
      r.repairs.push_back({FsckRepair::Kind::kAddFree, id});
    }
  }
  if (!leaked.empty()) {
    problem(std::to_string(leaked.size()) +
                " allocated block(s) are neither mapped by a file nor free (leaked): " +
                IdList(leaked) + ": returned to the free list",
            true);
  }
  std::vector<BlockId> stray;
  for (BlockId id : positioned) {
    if (id >= next && !used.count(id)) {
      stray.push_back(id);
      r.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
    }
  }
  if (!stray.empty()) {
    problem(std::to_string(stray.size()) +
                " ORAM block(s) have a position but were never allocated to a file (leaked): " +
                IdList(stray) + ": positions freed",
            true);
  }
  return r;
}

}  // namespace s3oram::fs
