// MetadataStore::CheckInvariants (metadata_store.h): the consistency check
// of every fs_ table that the tests run after each operation sequence.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "fused/metadata_store_internal.h"

namespace s3oram::fs {

Status MetadataStore::CheckInvariants() {
  std::string problem;
  int err = Run(false, [&](Impl& m) {
    auto bad = [&](const std::string& p) {
      problem = p;
      Fail(EUCLEAN);
    };
    struct Node {
      std::uint32_t mode;
      std::uint32_t nlink;
      std::uint64_t size;
    };
    std::map<Ino, Node> inodes;
    {
      Q q = m.S("SELECT ino, mode, nlink, size FROM fs_inodes");
      while (q.Next()) {
        inodes[q.UCol(0)] = Node{static_cast<std::uint32_t>(q.Col(1)),
                                 static_cast<std::uint32_t>(q.Col(2)), q.UCol(3)};
      }
    }
    auto root = inodes.find(kRootIno);
    if (root == inodes.end() || !IsDir(root->second.mode)) bad("root inode missing or not a dir");
    std::map<Ino, std::uint64_t> links, subdirs, children;
    std::map<Ino, Ino> parent_of;
    {
      Q q = m.S("SELECT parent, name, ino FROM fs_dirents");
      while (q.Next()) {
        Ino parent = q.UCol(0), ino = q.UCol(2);
        std::string name = q.Str(1);
        auto p = inodes.find(parent);
        auto c = inodes.find(ino);
        if (p == inodes.end() || !IsDir(p->second.mode)) {
          bad("entry '" + name + "' in missing or non-directory " + std::to_string(parent));
        }
        if (c == inodes.end())
          bad("entry '" + name + "' points to missing inode " + std::to_string(ino));
        if (name.empty() || name.size() > kMaxNameBytes || name == "." || name == ".." ||
            name.find('/') != std::string::npos) {
          bad("invalid entry name in directory " + std::to_string(parent));
        }
        if (ino == kRootIno) bad("an entry points to the root");
        links[ino]++;
        children[parent]++;
        if (IsDir(c->second.mode)) {
          subdirs[parent]++;
          parent_of[ino] = parent;
        }
      }
    }
    for (const auto& [ino, n] : inodes) {
      if (IsDir(n.mode)) {
        if (ino == kRootIno) {
          if (n.nlink != 2 + subdirs[ino]) bad("root nlink " + std::to_string(n.nlink));
          continue;
        }
        if (n.nlink == 0) {
          if (links[ino] != 0 || children[ino] != 0) {
            bad("removed directory " + std::to_string(ino) + " still linked or not empty");
          }
          continue;
        }
        if (links[ino] != 1)
          bad("directory " + std::to_string(ino) + " has " + std::to_string(links[ino]) +
              " entries");
        if (n.nlink != 2 + subdirs[ino]) {
          bad("directory " + std::to_string(ino) + " nlink " + std::to_string(n.nlink) +
              " != 2 + " + std::to_string(subdirs[ino]) + " subdirectories");
        }
        // Reachable from the root without a cycle.
        Ino cur = ino;
        std::size_t steps = 0;
        while (cur != kRootIno) {
          if (++steps > inodes.size()) bad("directory cycle at " + std::to_string(ino));
          cur = parent_of[cur];
        }
      } else if (n.nlink != links[ino]) {
        bad("inode " + std::to_string(ino) + " nlink " + std::to_string(n.nlink) +
            " != " + std::to_string(links[ino]) + " entries");
      }
    }
    // Symlink targets exactly for symlinks.
    {
      std::uint64_t symlinks = 0;
      for (const auto& [ino, n] : inodes) symlinks += (n.mode & S_IFMT) == S_IFLNK ? 1 : 0;
      Q q = m.S("SELECT ino FROM fs_symlinks");
      std::uint64_t rows = 0;
      while (q.Next()) {
        auto it = inodes.find(q.UCol(0));
        if (it == inodes.end() || (it->second.mode & S_IFMT) != S_IFLNK) {
          bad("symlink target for non-symlink " + std::to_string(q.UCol(0)));
        }
        ++rows;
      }
      if (rows != symlinks) bad("symlink without target");
    }
    {
      Q q = m.S("SELECT count(*) FROM fs_xattrs WHERE ino NOT IN (SELECT ino FROM fs_inodes)");
      q.Next();
      if (q.Col(0) != 0) bad("xattrs of missing inodes");
    }
    {
      Q q = m.S("SELECT count(*) FROM fs_lost l WHERE NOT EXISTS (SELECT 1 FROM fs_blocks b "
                "WHERE b.ino = l.ino AND b.idx = l.idx)");
      q.Next();
      if (q.Col(0) != 0) bad("a block marked lost is not mapped");
    }
    // Blocks.
    const std::uint64_t next = m.MetaGet("next_unused");
    if (next > m.capacity_) bad("next_unused beyond capacity");
    const BlockLayout& lay = m.layout_;
    std::set<BlockId> whole;                     // blocks mapped whole
    std::map<BlockId, std::uint64_t> fragments;  // shared block -> union of its fragments
    auto check_extent = [&](const Extent& e, const std::string& who) {
      if (e.id >= next) bad(who + ": block id " + std::to_string(e.id) + " beyond next_unused");
      if (e.whole()) {
        if (!whole.insert(e.id).second) bad("block id " + std::to_string(e.id) + " mapped twice");
        return;
      }
      if (e.slots >= lay.slots_per_block() || e.slot >= lay.slots_per_block() ||
          e.slot + e.slots > lay.slots_per_block()) {
        bad(who + ": fragment slots " + std::to_string(e.slot) + "+" + std::to_string(e.slots) +
            " do not fit a block of " + std::to_string(lay.slots_per_block()));
      }
      const std::uint64_t mask = BlockLayout::Mask(e.slot, e.slots);
      std::uint64_t& u = fragments[e.id];
      if (u & mask) bad("fragments overlap in block " + std::to_string(e.id));
      u |= mask;
    };
    {
      Q q =
          m.S("SELECT idx, block_id, valid, slot, slots, next_id, next_slot, next_slots, ino "
              "FROM fs_blocks");
      while (q.Next()) {
        const BlockMapping bm = Impl::RowMapping(q);
        const Ino ino = q.UCol(8);
        const std::int64_t valid = q.Col(2);
        const std::string who = "inode " + std::to_string(ino) + " block " + std::to_string(bm.idx);
        auto it = inodes.find(ino);
        if (it == inodes.end()) bad("block " + std::to_string(bm.id) + " of missing inode");
        if ((it->second.mode & S_IFMT) != S_IFREG) bad("block of a non-regular file");
        if (bm.idx >= m.BlocksFor(it->second.size)) {
          bad("inode " + std::to_string(ino) + " maps block index " + std::to_string(bm.idx) +
              " beyond its size " + std::to_string(it->second.size));
        }
        const std::uint64_t in_size =
            it->second.size - std::min(it->second.size, bm.idx * m.block_bytes_);
        if (valid < 0 || static_cast<std::uint64_t>(valid) >
                             std::min<std::uint64_t>(lay.Bytes(bm.at()), in_size)) {
          bad(who + " has valid length " + std::to_string(valid) +
              " beyond the file size or its extent");
        }
        check_extent(bm.at(), who);
        if (bm.next) check_extent(*bm.next, who + " (relocation target)");
      }
    }
    std::uint64_t shared_rows = 0;
    {
      Q q = m.S("SELECT block_id, used, nused, longest FROM fs_shared");
      while (q.Next()) {
        const BlockId id = q.UCol(0);
        const std::uint64_t used = q.UCol(1);
        ++shared_rows;
        auto f = fragments.find(id);
        if (f == fragments.end()) {
          bad("shared block " + std::to_string(id) + " holds no fragment");
        } else if (f->second != used) {
          bad("shared block " + std::to_string(id) + " slot map disagrees with its fragments");
        }
        if (q.Col(2) != std::popcount(used) ||
            q.Col(3) != static_cast<std::int64_t>(lay.LongestFree(used))) {
          bad("shared block " + std::to_string(id) + " counts disagree with its slot map");
        }
        if (whole.count(id)) bad("block id " + std::to_string(id) + " both shared and whole");
      }
    }
    if (shared_rows != fragments.size()) bad("a block holds fragments but is not shared");
    std::uint64_t free_count = 0;
    {
      Q q = m.S("SELECT block_id FROM fs_free_blocks");
      while (q.Next()) {
        BlockId id = q.UCol(0);
        if (id >= next) bad("free block id " + std::to_string(id) + " beyond next_unused");
        if (whole.count(id) || fragments.count(id)) {
          bad("block id " + std::to_string(id) + " both free and mapped");
        }
        ++free_count;
      }
    }
    if (whole.size() + fragments.size() + free_count != next) {
      bad("block accounting: " + std::to_string(whole.size()) + " whole + " +
          std::to_string(fragments.size()) + " shared + " + std::to_string(free_count) +
          " free != " + std::to_string(next) + " allocated");
    }
  });
  if (err == 0) return Status::Ok();
  if (err == EUCLEAN) return Status::Corruption("filesystem metadata: " + problem);
  return Status::IoError("checking filesystem metadata: " + last_error());
}

}  // namespace s3oram::fs
