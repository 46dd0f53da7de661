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

namespace {

// One run of phase 2. The checks run in order over a working model of the
// tree (live entries by cookie, inodes by number) that each repair changes
// as the repair would, so a later check sees the repaired tree: an entry
// deleted for a missing parent no longer counts as a link, an inode linked
// into /lost+found is reachable.
class MetadataCheck {
 public:
  MetadataCheck(const FsckSnapshot& snap, const FsckOptions& options,
                const std::set<BlockId>& positions_deleted_by_phase1)
      : snap_(snap),
        options_(options),
        deleted_by_phase1_(positions_deleted_by_phase1),
        names_(snap),
        bb_(snap.params.block_bytes),
        cap_(snap.params.capacity_blocks),
        layout_(static_cast<std::uint32_t>(snap.params.block_bytes)) {}

  FsckPhaseResult Run() {
    if (!snap_.has_fs) {
      r_.notes.push_back("no filesystem metadata (never mounted): only the ORAM state was checked");
      return r_;
    }
    if (!CheckShapeAndRoot()) return r_;
    CheckEntries();
    KeepOneEntryPerDirectory();
    Index();
    ReachFrom(kRootIno);
    LinkUnreachable();
    CheckLinkCounts();
    CheckSymlinksAndXattrs();
    if (!CollectPositions()) return r_;
    CheckFileBlocks();
    CheckSharedBlocks();
    CheckAllocator();
    return r_;
  }

 private:
  void Problem(std::string m, bool repairable) {
    r_.problems.push_back({2, std::move(m), repairable});
  }
  void DeleteEntry(std::uint64_t cookie) {
    live_.erase(cookie);
    r_.repairs.push_back({FsckRepair::Kind::kDeleteEntry, cookie});
  }

  // The recorded shape against the ORAM's, and a root directory; false if
  // nothing more can be checked.
  bool CheckShapeAndRoot() {
    if (snap_.fs_capacity_blocks != cap_ || snap_.fs_block_bytes != bb_) {
      Problem("fs_meta records capacity " + std::to_string(snap_.fs_capacity_blocks) +
                  " blocks of " + std::to_string(snap_.fs_block_bytes) + " bytes, the ORAM has " +
                  std::to_string(cap_) + " of " + std::to_string(bb_),
              false);
    }
    auto root = snap_.inodes.find(kRootIno);
    if (root == snap_.inodes.end() || !IsDir(root->second.mode)) {
      Problem("the root directory (inode 1) is missing or not a directory", false);
      return false;
    }
    root_ = &root->second;
    for (const auto& d : snap_.dirents) live_[d.cookie] = d;
    inodes_ = snap_.inodes;
    return true;
  }

  // Entries: existing directory parent, existing target, valid name.
  void CheckEntries() {
    for (const auto& d : snap_.dirents) {
      const std::string where = "entry '" + d.name + "' (cookie " + std::to_string(d.cookie) + ")";
      auto p = inodes_.find(d.parent);
      auto c = inodes_.find(d.ino);
      if (p == inodes_.end() || !IsDir(p->second.mode)) {
        Problem(where + " lies in " + (p == inodes_.end() ? "missing inode " : "non-directory ") +
                    std::to_string(d.parent),
                true);
        DeleteEntry(d.cookie);
      } else if (c == inodes_.end()) {
        Problem("dangling " + where + " in " + names_.Describe(d.parent) +
                    " points to missing inode " + std::to_string(d.ino),
                true);
        DeleteEntry(d.cookie);
      } else if (d.ino == kRootIno) {
        Problem(where + " in " + names_.Describe(d.parent) + " points to the root directory", true);
        DeleteEntry(d.cookie);
      } else if (d.name.empty() || d.name.size() > kMaxNameBytes || d.name == "." ||
                 d.name == ".." || d.name.find('/') != std::string::npos ||
                 d.name.find('\0') != std::string::npos) {
        Problem("invalid name in entry (cookie " + std::to_string(d.cookie) + ") of " +
                    names_.Describe(d.parent) + " for inode " + std::to_string(d.ino),
                true);
        DeleteEntry(d.cookie);
      }
    }
  }

  // A directory has exactly one entry: keep the oldest.
  void KeepOneEntryPerDirectory() {
    std::map<Ino, int> dir_entries;
    for (auto it = live_.begin(); it != live_.end();) {
      const auto& d = it->second;
      if (IsDir(inodes_[d.ino].mode) && ++dir_entries[d.ino] > 1) {
        Problem("directory " + names_.Describe(d.ino) + " has a second entry '" + d.name + "' in " +
                    names_.Describe(d.parent),
                true);
        r_.repairs.push_back({FsckRepair::Kind::kDeleteEntry, it->first});
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // The entries by parent and by target, from the live ones.
  void Index() {
    children_.clear();
    entries_of_.clear();
    for (const auto& [cookie, d] : live_) {
      children_[d.parent].push_back(cookie);
      entries_of_[d.ino].push_back(cookie);
    }
  }

  void ReachFrom(Ino start) {
    std::deque<Ino> todo{start};
    reached_.insert(start);
    while (!todo.empty()) {
      const Ino cur = todo.front();
      todo.pop_front();
      for (std::uint64_t cookie : children_[cur]) {
        const Ino child = live_[cookie].ino;
        if (reached_.insert(child).second) todo.push_back(child);
      }
    }
  }

  // /lost+found: an existing directory entry in the root, or one to create;
  // nullopt if a non-directory holds the name.
  std::optional<Ino> GetLostFound() {
    if (lost_found_ || lost_found_blocked_) return lost_found_;
    for (std::uint64_t cookie : children_[kRootIno]) {
      const auto& d = live_[cookie];
      if (d.name != kLostFoundName) continue;
      if (IsDir(inodes_[d.ino].mode)) {
        lost_found_ = d.ino;
      } else {
        lost_found_blocked_ = true;
      }
      return lost_found_;
    }
    lost_found_ = kNewLostFound;
    inodes_[kNewLostFound] = FsckSnapshot::Inode{S_IFDIR | 0700, 2, 0, root_->uid, root_->gid};
    const std::uint64_t cookie =
        ~std::uint64_t{0} - 1;  // a model-only cookie, after every real one
    live_[cookie] = FsckSnapshot::Dirent{cookie, kRootIno, kLostFoundName, kNewLostFound};
    children_[kRootIno].push_back(cookie);
    entries_of_[kNewLostFound].push_back(cookie);
    reached_.insert(kNewLostFound);
    return lost_found_;
  }

  // Every inode the root does not reach is linked into /lost+found (the top
  // of its unreachable part, a directory cycle cut there), except those
  // unlinked while open, which the next mount frees.
  void LinkUnreachable() {
    std::uint64_t pending_orphans = 0;
    for (const auto& [ino, node] : snap_.inodes) {
      if (reached_.count(ino)) continue;
      if (node.nlink == 0 && entries_of_[ino].empty() && children_[ino].empty()) {
        ++pending_orphans;  // unlinked while open, then a crash: the next mount frees it
        continue;
      }
      LinkOne(ino, node);
    }
    if (pending_orphans > 0) {
      r_.notes.push_back(std::to_string(pending_orphans) +
                         " unlinked inode(s) with nlink 0 await removal (left by a crash; the "
                         "next mount frees them)");
    }
  }

  void LinkOne(Ino ino, const FsckSnapshot::Inode& node) {
    // Walk up to the top of the unreachable part: an inode without entries,
    // or the point where the parents loop (a directory cycle, cut there).
    Ino top = ino;
    bool cycle = false;
    std::set<Ino> seen;
    while (!entries_of_[top].empty()) {
      if (!seen.insert(top).second) {
        cycle = true;
        break;
      }
      top = live_[entries_of_[top].front()].parent;
    }
    std::string message = TypeName(node.mode) + " inode " + std::to_string(ino) + " (nlink " +
                          std::to_string(node.nlink) + ", size " + std::to_string(node.size) +
                          ") is not reachable from the root";
    if (top != ino)
      message += " (it hangs below unreachable directory inode " + std::to_string(top) + ")";
    if (cycle) message += "; directory inode " + std::to_string(top) + " is part of a cycle";
    auto lf = GetLostFound();
    if (!lf) {
      Problem(message + "; /lost+found exists but is not a directory, so it stays unlinked", false);
      return;
    }
    if (cycle) {
      for (std::uint64_t cookie : entries_of_[top]) DeleteEntry(cookie);
      Index();
    }
    // "#<ino>", or "#<ino>.<n>" if a file of that name is already there.
    std::string name = "#" + std::to_string(top);
    auto taken = [&](const std::string& n) {
      return std::any_of(children_[*lf].begin(), children_[*lf].end(),
                         [&](std::uint64_t k) { return live_[k].name == n; });
    };
    for (int n = 1; taken(name); ++n) name = "#" + std::to_string(top) + "." + std::to_string(n);
    Problem(message + ": linked into /lost+found as " + name, true);
    const std::uint64_t cookie = ~std::uint64_t{0} - 2 - top;  // model-only
    live_[cookie] = FsckSnapshot::Dirent{cookie, *lf, name, top};
    children_[*lf].push_back(cookie);
    entries_of_[top].push_back(cookie);
    r_.repairs.push_back({FsckRepair::Kind::kLinkLostFound, top, 0, 0, name});
    ReachFrom(top);
  }

  // Link counts against the (repaired) entries. A count that differs from
  // what the stored entries imply (entries to existing inodes in existing
  // directories) is an error; one that only differs from the repaired
  // tree's is a consequence of another repair (an entry removed,
  // /lost+found added) and is fixed without a report of its own.
  void CheckLinkCounts() {
    std::map<Ino, std::int64_t> stored_entries, stored_subdirs;
    for (const auto& d : snap_.dirents) {
      auto p = snap_.inodes.find(d.parent);
      auto c = snap_.inodes.find(d.ino);
      if (p == snap_.inodes.end() || !IsDir(p->second.mode) || c == snap_.inodes.end()) continue;
      ++stored_entries[d.ino];
      if (IsDir(c->second.mode)) ++stored_subdirs[d.parent];
    }
    for (auto& [ino, node] : inodes_) {
      const std::uint64_t entries = entries_of_[ino].size();
      std::int64_t want;
      if (IsDir(node.mode)) {
        if (ino != kRootIno && entries == 0 && node.nlink == 0 && children_[ino].empty()) continue;
        std::uint64_t subdirs = 0;
        for (std::uint64_t cookie : children_[ino])
          subdirs += IsDir(inodes_[live_[cookie].ino].mode) ? 1 : 0;
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
        r_.repairs.push_back({FsckRepair::Kind::kSetNlink, ino, static_cast<std::uint64_t>(want)});
      } else if (node.nlink != want) {
        Problem(TypeName(node.mode) + " " + names_.Describe(ino) + " has nlink " +
                    std::to_string(node.nlink) + ", expected " + std::to_string(want) +
                    (IsDir(node.mode) ? " (2 + subdirectories)" : " (its directory entries)"),
                true);
        r_.repairs.push_back({FsckRepair::Kind::kSetNlink, ino, static_cast<std::uint64_t>(want)});
      }
    }
    if (lost_found_ == kNewLostFound) {
      const auto& lf = inodes_[kNewLostFound];
      r_.repairs.insert(r_.repairs.begin(), {FsckRepair::Kind::kCreateLostFound, lf.uid, lf.gid,
                                             static_cast<std::uint64_t>(lf.nlink)});
    }
  }

  // Symlink targets exactly for symlinks; xattrs only of existing inodes.
  void CheckSymlinksAndXattrs() {
    std::set<Ino> rows(snap_.symlink_rows.begin(), snap_.symlink_rows.end());
    for (Ino ino : snap_.symlink_rows) {
      auto it = snap_.inodes.find(ino);
      if (it == snap_.inodes.end() || !IsLnk(it->second.mode)) {
        Problem("symlink target stored for " +
                    std::string(it == snap_.inodes.end() ? "missing " : "non-symlink ") + "inode " +
                    std::to_string(ino),
                true);
        r_.repairs.push_back({FsckRepair::Kind::kDeleteSymlinkRow, ino});
      }
    }
    for (const auto& [ino, node] : snap_.inodes) {
      if (IsLnk(node.mode) && rows.count(ino) == 0) {
        Problem("symlink " + names_.Describe(ino) + " has no target", false);
      }
    }
    if (snap_.xattr_rows_of_missing_inodes > 0) {
      Problem(
          std::to_string(snap_.xattr_rows_of_missing_inodes) + " xattr(s) belong to missing inodes",
          true);
      r_.repairs.push_back({FsckRepair::Kind::kDeleteStrayXattrs});
    }
  }

  // The allocator's state and the blocks the ORAM holds a position for;
  // false if the block map cannot be checked.
  bool CollectPositions() {
    if (!snap_.next_unused) {
      Problem("fs_meta has no next_unused: block allocation state is lost", false);
      return false;
    }
    next_ = *snap_.next_unused;
    if (next_ > cap_) {
      Problem(
          "next_unused " + std::to_string(next_) + " exceeds the capacity " + std::to_string(cap_),
          false);
    }
    for (const auto& row : snap_.positions) {
      if (deleted_by_phase1_.count(row.id) == 0) positioned_.insert(row.id);
    }
    // A block whose access logged its root write but had not sent it when
    // the client stopped (a kill): the next open sends it, which gives the
    // block its position (oramcore/state/client_state.h, kPendingRootKind:
    // slot u32, block id u64, mapped u8, ...). Its data are not lost.
    for (const auto& op : snap_.pending) {
      if (op.kind != kPendingRootKind || op.payload.size() < 13 || op.payload[12] == 0) continue;
      BlockId id = 0;
      for (int i = 0; i < 8; ++i)
        id |= BlockId{op.payload[4 + static_cast<std::size_t>(i)]} << (8 * i);
      positioned_.insert(id);
    }
    // A state that still has schema 2 is migrated by the daemon at its next
    // mount; its layout is whole blocks. Schema 3 records the slot count.
    if (snap_.fs_schema_version >= 3 && snap_.slots_per_block.value_or(-1) !=
                                            static_cast<std::int64_t>(layout_.slots_per_block())) {
      Problem("fs_meta slots_per_block is " +
                  (snap_.slots_per_block ? std::to_string(*snap_.slots_per_block) : "missing") +
                  ", not " + std::to_string(layout_.slots_per_block()) + " for " +
                  std::to_string(bb_) + "-byte blocks",
              false);
      return false;
    }
    return true;
  }

  // Claims an extent's space; the reason it cannot, or "".
  std::string Claim(const Extent& e) {
    if (e.id >= cap_) return "is out of range (capacity " + std::to_string(cap_) + ")";
    if (e.whole()) {
      if (whole_.count(e.id) || fragments_.count(e.id)) {
        return "uses ORAM block " + std::to_string(e.id) + ", which another extent uses";
      }
      whole_.insert(e.id);
    } else {
      if (e.slots >= layout_.slots_per_block() || e.slot + e.slots > layout_.slots_per_block()) {
        return "has fragment slots " + std::to_string(e.slot) + "+" + std::to_string(e.slots) +
               " outside a block of " + std::to_string(layout_.slots_per_block());
      }
      const std::uint64_t mask = BlockLayout::Mask(e.slot, e.slots);
      if (whole_.count(e.id) || (fragments_.count(e.id) && (fragments_[e.id] & mask) != 0)) {
        return "overlaps another extent in ORAM block " + std::to_string(e.id);
      }
      fragments_[e.id] |= mask;
    }
    used_.insert(e.id);
    highest_used_plus_one_ = std::max(highest_used_plus_one_, e.id + 1);
    return "";
  }

  // The map of every file against sizes, the other extents and the ORAM.
  void CheckFileBlocks() {
    for (const auto& b : snap_.blocks) {
      const std::string who = BlockOwner(snap_, names_, b);
      auto it = snap_.inodes.find(b.ino);
      auto unmap = [&](const std::string& why) {
        Problem(who + " " + why + ": unmapped", true);
        r_.repairs.push_back({FsckRepair::Kind::kUnmapBlock, b.ino, b.idx, b.id});
        unmapped_.insert(b.id);
        if (b.next) unmapped_.insert(b.next->id);
      };
      if (it == snap_.inodes.end()) {
        unmap("belongs to a missing inode");
        continue;
      }
      if (!IsReg(it->second.mode)) {
        unmap("belongs to a " + TypeName(it->second.mode));
        continue;
      }
      if (b.idx >= BlocksFor(it->second.size, bb_)) {
        unmap("lies beyond the file size " + std::to_string(it->second.size));
        continue;
      }
      if (std::string why = Claim(b.at()); !why.empty()) {
        unmap(why);
        continue;
      }
      if (b.next) {
        // A relocation the daemon had not finished: legal, and harmless to
        // drop if it is damaged (the data are still in the extent).
        if (std::string why = Claim(*b.next); !why.empty()) {
          Problem(who + " relocation target " + why + ": dropped", true);
          r_.repairs.push_back({FsckRepair::Kind::kClearNext, b.ino, b.idx});
          unmapped_.insert(b.next->id);
        }
      }
      CheckValidLength(b, who, it->second.size);
    }
  }

  void CheckValidLength(const FsckSnapshot::Block& b, const std::string& who,
                        std::uint64_t file_size) {
    const std::uint64_t in_size = std::min<std::uint64_t>(
        layout_.Bytes(b.at()), std::min<std::uint64_t>(bb_, file_size - b.idx * bb_));
    std::int64_t valid = b.valid;
    if (valid < 0 || static_cast<std::uint64_t>(valid) > in_size) {
      const std::int64_t fixed =
          std::clamp<std::int64_t>(valid, 0, static_cast<std::int64_t>(in_size));
      Problem(who + " has valid length " + std::to_string(valid) +
                  " beyond the file size or its extent: set to " + std::to_string(fixed),
              true);
      r_.repairs.push_back(
          {FsckRepair::Kind::kSetValid, b.ino, b.idx, static_cast<std::uint64_t>(fixed)});
      valid = fixed;
    }
    if (valid > 0 && positioned_.count(b.id) == 0) {
      // valid > 0 only after a successful write-back, which committed the
      // position first: the position row was lost.
      std::string m = who + " holds " + std::to_string(valid) +
                      " bytes of file data but the block has no position in the ORAM: its data "
                      "are lost";
      if (options_.zero_damaged) {
        Problem(m + "; it will read as zeros", true);
        r_.repairs.push_back({FsckRepair::Kind::kSetValid, b.ino, b.idx, 0});
      } else {
        Problem(m + " (--zero-damaged makes it read as zeros)", false);
      }
    }
  }

  // Shared blocks: their slot maps must be the union of their fragments.
  void CheckSharedBlocks() {
    bool rewrite = false;
    std::map<BlockId, const FsckSnapshot::Shared*> rows;
    for (const auto& sh : snap_.shared) rows[sh.id] = &sh;
    for (const auto& [id, mask] : fragments_) {
      auto it = rows.find(id);
      if (it == rows.end()) {
        Problem("ORAM block " + std::to_string(id) +
                    " holds fragments but is not recorded as shared: recorded",
                true);
        rewrite = true;
      } else if (it->second->used != mask || it->second->nused != std::popcount(mask) ||
                 it->second->longest != static_cast<std::int64_t>(layout_.LongestFree(mask))) {
        Problem("shared ORAM block " + std::to_string(id) +
                    " has a slot map that disagrees with its fragments: recomputed",
                true);
        rewrite = true;
      }
    }
    for (const auto& sh : snap_.shared) {
      if (!fragments_.count(sh.id)) {
        Problem("ORAM block " + std::to_string(sh.id) +
                    " is recorded as shared but holds no fragment: dropped from the shared list",
                true);
        rewrite = true;
      }
    }
    if (snap_.fs_schema_version >= 3 && (rewrite || !unmapped_.empty())) {
      r_.repairs.push_back({FsckRepair::Kind::kRewriteShared});
    }
  }

  // next_unused, the free list, leaked blocks and stray positions against
  // the blocks the files map.
  void CheckAllocator() {
    if (highest_used_plus_one_ > next_ && next_ <= cap_) {
      Problem("blocks up to " + std::to_string(highest_used_plus_one_ - 1) +
                  " are mapped but next_unused is " + std::to_string(next_) + ": raised",
              true);
      next_ = highest_used_plus_one_;
      r_.repairs.push_back({FsckRepair::Kind::kSetNextUnused, next_});
    }
    std::set<BlockId> free_ids;
    for (BlockId id : snap_.free_blocks) {
      if (id >= next_) {
        Problem("free-list block " + std::to_string(id) + " was never allocated (next_unused " +
                    std::to_string(next_) + "): removed from the free list",
                true);
        r_.repairs.push_back({FsckRepair::Kind::kRemoveFree, id});
      } else if (used_.count(id)) {
        Problem("block " + std::to_string(id) +
                    " is both mapped by a file and on the free list: "
                    "removed from the free list",
                true);
        r_.repairs.push_back({FsckRepair::Kind::kRemoveFree, id});
      } else {
        free_ids.insert(id);
      }
    }
    std::vector<BlockId> leaked;
    for (BlockId id = 0; id < std::min(next_, cap_); ++id) {
      if (!used_.count(id) && !free_ids.count(id)) {
        if (!unmapped_.count(id)) leaked.push_back(id);
        r_.repairs.push_back({FsckRepair::Kind::kAddFree, id});
      }
    }
    if (!leaked.empty()) {
      Problem(std::to_string(leaked.size()) +
                  " allocated block(s) are neither mapped by a file nor free (leaked): " +
                  IdList(leaked) + ": returned to the free list",
              true);
    }
    std::vector<BlockId> stray;
    for (BlockId id : positioned_) {
      if (id >= next_ && !used_.count(id)) {
        stray.push_back(id);
        r_.repairs.push_back({FsckRepair::Kind::kDeletePosition, id});
      }
    }
    if (!stray.empty()) {
      Problem(std::to_string(stray.size()) +
                  " ORAM block(s) have a position but were never allocated to a file (leaked): " +
                  IdList(stray) + ": positions freed",
              true);
    }
  }

  const FsckSnapshot& snap_;
  const FsckOptions& options_;
  const std::set<BlockId>& deleted_by_phase1_;
  const PathNamer names_;
  const std::uint64_t bb_;
  const std::uint64_t cap_;
  const BlockLayout layout_;
  FsckPhaseResult r_;
  const FsckSnapshot::Inode* root_ = nullptr;

  // The working model of the tree.
  std::map<std::uint64_t, FsckSnapshot::Dirent> live_;  // entries by cookie
  std::map<Ino, FsckSnapshot::Inode> inodes_;
  std::map<Ino, std::vector<std::uint64_t>> children_;    // parent -> cookies
  std::map<Ino, std::vector<std::uint64_t>> entries_of_;  // ino -> cookies
  std::set<Ino> reached_;
  std::optional<Ino> lost_found_;
  bool lost_found_blocked_ = false;

  // The blocks.
  std::uint64_t next_ = 0;                      // next_unused, raised if files map blocks above it
  std::set<BlockId> positioned_;                // with a position in the ORAM (or one on the way)
  std::set<BlockId> used_;                      // whole or shared
  std::set<BlockId> whole_;                     // mapped whole
  std::map<BlockId, std::uint64_t> fragments_;  // shared block -> union of its fragments
  std::set<BlockId> unmapped_;  // by the repairs above: freed without a report of their own
  std::uint64_t highest_used_plus_one_ = 0;
};

}  // namespace

FsckPhaseResult CheckMetadata(const FsckSnapshot& snap, const FsckOptions& options,
                              const std::set<BlockId>& positions_deleted_by_phase1) {
  return MetadataCheck(snap, options, positions_deleted_by_phase1).Run();
}

}  // namespace s3oram::fs
