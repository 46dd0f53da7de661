// MetadataStore::CheckInvariants (metadata_store.h): the consistency check
// of every fs_ table that the tests run after each operation sequence.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "fused/metadata_store_internal.h"

namespace s3oram::fs {

namespace {

// One run of the check, inside Run()'s read transaction. The first problem
// found ends it (Bad throws EUCLEAN through Run()); the tables are read in a
// fixed order, each step relying on what the earlier ones collected.
class InvariantCheck {
 public:
  InvariantCheck(MetadataStore::Impl& m, std::string* problem) : m_(m), problem_(problem) {}

  void Run() {
    ReadInodes();
    CheckEntries();
    CheckLinkCounts();
    CheckSymlinks();
    CheckOrphanRows();
    // Blocks.
    next_ = m_.MetaGet("next_unused");
    if (next_ > m_.capacity_) Bad("next_unused beyond capacity");
    CheckBlockMappings();
    CheckSharedBlocks();
    CheckFreeBlocks();
  }

 private:
  struct Node {
    std::uint32_t mode;
    std::uint32_t nlink;
    std::uint64_t size;
  };

  [[noreturn]] void Bad(const std::string& p) {
    *problem_ = p;
    Fail(EUCLEAN);
  }

  void ReadInodes() {
    {
      Q q = m_.S("SELECT ino, mode, nlink, size FROM fs_inodes");
      while (q.Next()) {
        inodes_[q.UCol(0)] = Node{static_cast<std::uint32_t>(q.Col(1)),
                                  static_cast<std::uint32_t>(q.Col(2)), q.UCol(3)};
      }
    }
    auto root = inodes_.find(kRootIno);
    if (root == inodes_.end() || !IsDir(root->second.mode)) Bad("root inode missing or not a dir");
  }

  // Every entry names an existing inode from an existing directory; counts
  // the links, children and subdirectories the link counts are checked
  // against.
  void CheckEntries() {
    Q q = m_.S("SELECT parent, name, ino FROM fs_dirents");
    while (q.Next()) {
      Ino parent = q.UCol(0), ino = q.UCol(2);
      std::string name = q.Str(1);
      auto p = inodes_.find(parent);
      auto c = inodes_.find(ino);
      if (p == inodes_.end() || !IsDir(p->second.mode)) {
        Bad("entry '" + name + "' in missing or non-directory " + std::to_string(parent));
      }
      if (c == inodes_.end())
        Bad("entry '" + name + "' points to missing inode " + std::to_string(ino));
      if (name.empty() || name.size() > kMaxNameBytes || name == "." || name == ".." ||
          name.find('/') != std::string::npos) {
        Bad("invalid entry name in directory " + std::to_string(parent));
      }
      if (ino == kRootIno) Bad("an entry points to the root");
      links_[ino]++;
      children_[parent]++;
      if (IsDir(c->second.mode)) {
        subdirs_[parent]++;
        parent_of_[ino] = parent;
      }
    }
  }

  void CheckLinkCounts() {
    for (const auto& [ino, n] : inodes_) {
      if (IsDir(n.mode)) {
        if (ino == kRootIno) {
          if (n.nlink != 2 + subdirs_[ino]) Bad("root nlink " + std::to_string(n.nlink));
          continue;
        }
        if (n.nlink == 0) {
          if (links_[ino] != 0 || children_[ino] != 0) {
            Bad("removed directory " + std::to_string(ino) + " still linked or not empty");
          }
          continue;
        }
        if (links_[ino] != 1)
          Bad("directory " + std::to_string(ino) + " has " + std::to_string(links_[ino]) +
              " entries");
        if (n.nlink != 2 + subdirs_[ino]) {
          Bad("directory " + std::to_string(ino) + " nlink " + std::to_string(n.nlink) +
              " != 2 + " + std::to_string(subdirs_[ino]) + " subdirectories");
        }
        // Reachable from the root without a cycle.
        Ino cur = ino;
        std::size_t steps = 0;
        while (cur != kRootIno) {
          if (++steps > inodes_.size()) Bad("directory cycle at " + std::to_string(ino));
          cur = parent_of_[cur];
        }
      } else if (n.nlink != links_[ino]) {
        Bad("inode " + std::to_string(ino) + " nlink " + std::to_string(n.nlink) +
            " != " + std::to_string(links_[ino]) + " entries");
      }
    }
  }

  // Symlink targets exactly for symlinks.
  void CheckSymlinks() {
    std::uint64_t symlinks = 0;
    for (const auto& [ino, n] : inodes_) symlinks += (n.mode & S_IFMT) == S_IFLNK ? 1 : 0;
    Q q = m_.S("SELECT ino FROM fs_symlinks");
    std::uint64_t rows = 0;
    while (q.Next()) {
      auto it = inodes_.find(q.UCol(0));
      if (it == inodes_.end() || (it->second.mode & S_IFMT) != S_IFLNK) {
        Bad("symlink target for non-symlink " + std::to_string(q.UCol(0)));
      }
      ++rows;
    }
    if (rows != symlinks) Bad("symlink without target");
  }

  // Rows that belong to something that no longer exists.
  void CheckOrphanRows() {
    {
      Q q = m_.S("SELECT count(*) FROM fs_xattrs WHERE ino NOT IN (SELECT ino FROM fs_inodes)");
      q.Next();
      if (q.Col(0) != 0) Bad("xattrs of missing inodes");
    }
    {
      Q q = m_.S(
          "SELECT count(*) FROM fs_lost l WHERE NOT EXISTS (SELECT 1 FROM fs_blocks b "
          "WHERE b.ino = l.ino AND b.idx = l.idx)");
      q.Next();
      if (q.Col(0) != 0) Bad("a block marked lost is not mapped");
    }
  }

  // Each block id is mapped whole once, or shared by fragments that do not
  // overlap.
  void CheckExtent(const Extent& e, const std::string& who) {
    const BlockLayout& lay = m_.layout_;
    if (e.id >= next_) Bad(who + ": block id " + std::to_string(e.id) + " beyond next_unused");
    if (e.whole()) {
      if (!whole_.insert(e.id).second) Bad("block id " + std::to_string(e.id) + " mapped twice");
      return;
    }
    if (e.slots >= lay.slots_per_block() || e.slot >= lay.slots_per_block() ||
        e.slot + e.slots > lay.slots_per_block()) {
      Bad(who + ": fragment slots " + std::to_string(e.slot) + "+" + std::to_string(e.slots) +
          " do not fit a block of " + std::to_string(lay.slots_per_block()));
    }
    const std::uint64_t mask = BlockLayout::Mask(e.slot, e.slots);
    std::uint64_t& u = fragments_[e.id];
    if (u & mask) Bad("fragments overlap in block " + std::to_string(e.id));
    u |= mask;
  }

  void CheckBlockMappings() {
    const BlockLayout& lay = m_.layout_;
    Q q = m_.S(
        "SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots, ino "
        "FROM fs_blocks");
    while (q.Next()) {
      const BlockMapping bm = MetadataStore::Impl::RowMapping(q);
      const Ino ino = q.UCol(8);
      const std::int64_t valid = q.Col(2);
      const std::string who = "inode " + std::to_string(ino) + " block " + std::to_string(bm.idx);
      auto it = inodes_.find(ino);
      if (it == inodes_.end()) Bad("block " + std::to_string(bm.id) + " of missing inode");
      if ((it->second.mode & S_IFMT) != S_IFREG) Bad("block of a non-regular file");
      if (bm.idx >= m_.BlocksFor(it->second.size)) {
        Bad("inode " + std::to_string(ino) + " maps block index " + std::to_string(bm.idx) +
            " beyond its size " + std::to_string(it->second.size));
      }
      const std::uint64_t in_size =
          it->second.size - std::min(it->second.size, bm.idx * m_.block_bytes_);
      if (valid < 0 || static_cast<std::uint64_t>(valid) >
                           std::min<std::uint64_t>(lay.Bytes(bm.at()), in_size)) {
        Bad(who + " has valid length " + std::to_string(valid) +
            " beyond the file size or its extent");
      }
      CheckExtent(bm.at(), who);
      if (bm.next) CheckExtent(*bm.next, who + " (relocation target)");
    }
  }

  // fs_shared has exactly one row per block holding fragments, and its slot
  // map and counts match them.
  void CheckSharedBlocks() {
    const BlockLayout& lay = m_.layout_;
    std::uint64_t shared_rows = 0;
    {
      Q q = m_.S("SELECT block_id, used, nused, longest FROM fs_shared");
      while (q.Next()) {
        const BlockId id = q.UCol(0);
        const std::uint64_t used = q.UCol(1);
        ++shared_rows;
        auto f = fragments_.find(id);
        if (f == fragments_.end()) {
          Bad("shared block " + std::to_string(id) + " holds no fragment");
        } else if (f->second != used) {
          Bad("shared block " + std::to_string(id) + " slot map disagrees with its fragments");
        }
        if (q.Col(2) != std::popcount(used) ||
            q.Col(3) != static_cast<std::int64_t>(lay.LongestFree(used))) {
          Bad("shared block " + std::to_string(id) + " counts disagree with its slot map");
        }
        if (whole_.count(id)) Bad("block id " + std::to_string(id) + " both shared and whole");
      }
    }
    if (shared_rows != fragments_.size()) Bad("a block holds fragments but is not shared");
  }

  // Every allocated block id is whole, shared or free, and only one of them.
  void CheckFreeBlocks() {
    std::uint64_t free_count = 0;
    {
      Q q = m_.S("SELECT block_id FROM fs_free_blocks");
      while (q.Next()) {
        BlockId id = q.UCol(0);
        if (id >= next_) Bad("free block id " + std::to_string(id) + " beyond next_unused");
        if (whole_.count(id) || fragments_.count(id)) {
          Bad("block id " + std::to_string(id) + " both free and mapped");
        }
        ++free_count;
      }
    }
    if (whole_.size() + fragments_.size() + free_count != next_) {
      Bad("block accounting: " + std::to_string(whole_.size()) + " whole + " +
          std::to_string(fragments_.size()) + " shared + " + std::to_string(free_count) +
          " free != " + std::to_string(next_) + " allocated");
    }
  }

  MetadataStore::Impl& m_;
  std::string* problem_;
  std::map<Ino, Node> inodes_;
  std::map<Ino, std::uint64_t> links_, subdirs_, children_;
  std::map<Ino, Ino> parent_of_;
  std::uint64_t next_ = 0;
  std::set<BlockId> whole_;                     // blocks mapped whole
  std::map<BlockId, std::uint64_t> fragments_;  // shared block -> union of its fragments
};

}  // namespace

Status MetadataStore::CheckInvariants() {
  std::string problem;
  int err = Run(false, [&](Impl& m) { InvariantCheck(m, &problem).Run(); });
  if (err == 0) return Status::Ok();
  if (err == EUCLEAN) return Status::Corruption("filesystem metadata: " + problem);
  return Status::IoError("checking filesystem metadata: " + last_error());
}

}  // namespace s3oram::fs
