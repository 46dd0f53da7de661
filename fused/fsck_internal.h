// What the files implementing fsck share (fsck_snapshot.cpp, fsck_oram.cpp,
// fsck_metadata.cpp, fsck_repair.cpp, fsck_blocks.cpp): naming inodes and
// blocks in reports, and the small rules every phase applies. Nothing outside
// those files includes it.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fused/fsck.h"

namespace s3oram::fs::fsck_detail {

inline constexpr int kBusyTimeoutMs = 5000;
// A ghost inode number for a /lost+found that the repairs will create (real
// numbers come from AUTOINCREMENT and never reach this).
inline constexpr Ino kNewLostFound = ~Ino{0};
// Problems of one kind that can be numerous (leaked ids) are reported one by
// one up to this many, then summarised.
inline constexpr std::size_t kListLimit = 20;

inline bool IsDir(std::uint32_t mode) { return (mode & S_IFMT) == S_IFDIR; }
inline bool IsReg(std::uint32_t mode) { return (mode & S_IFMT) == S_IFREG; }
inline bool IsLnk(std::uint32_t mode) { return (mode & S_IFMT) == S_IFLNK; }

inline std::string TypeName(std::uint32_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "file";
    case S_IFDIR:
      return "directory";
    case S_IFLNK:
      return "symlink";
    case S_IFIFO:
      return "fifo";
    case S_IFSOCK:
      return "socket";
    case S_IFCHR:
      return "character device";
    case S_IFBLK:
      return "block device";
    default:
      return "inode of unknown type";
  }
}

// Names inodes by a path through their first entry (by cookie), computed once
// from the snapshot as loaded.
class PathNamer {
 public:
  explicit PathNamer(const FsckSnapshot& snap) {
    for (const auto& d : snap.dirents) parent_.try_emplace(d.ino, d.parent, d.name);
  }
  std::string Path(Ino ino) const {
    if (ino == kRootIno) return "/";
    // Names from the inode up to the root, joined in reverse: no string is
    // ever prepended to (GCC 12 at -O3 misreads `"x" + std::string&&` as an
    // overlapping copy, -Wrestrict).
    std::vector<const std::string*> names;
    std::unordered_set<Ino> seen;
    Ino cur = ino;
    while (cur != kRootIno) {
      auto it = parent_.find(cur);
      if (it == parent_.end() || !seen.insert(cur).second) {
        std::string unreachable("#");
        unreachable.append(std::to_string(ino)).append(" (unreachable)");
        return unreachable;
      }
      names.push_back(&it->second.second);
      cur = it->second.first;
    }
    std::string path;
    for (auto name = names.rbegin(); name != names.rend(); ++name) path.append("/").append(**name);
    return path;
  }
  // "inode 12 (/a/b)".
  std::string Describe(Ino ino) const {
    return "inode " + std::to_string(ino) + " (" + Path(ino) + ")";
  }

 private:
  std::unordered_map<Ino, std::pair<Ino, std::string>> parent_;
};

// Where each block id is mapped, for naming damaged blocks.
inline std::string BlockOwner(const FsckSnapshot& snap, const PathNamer& names,
                              const FsckSnapshot::Block& b) {
  const std::uint64_t bb = snap.params.block_bytes;
  std::string where = "ORAM block " + std::to_string(b.id);
  if (b.slots != 0) {
    where += " slots " + std::to_string(b.slot) + ".." + std::to_string(b.slot + b.slots - 1);
  }
  return names.Describe(b.ino) + " block " + std::to_string(b.idx) + " (bytes " +
         std::to_string(b.idx * bb) + ".." + std::to_string(b.idx * bb + bb - 1) + ", " + where +
         ")";
}

inline std::uint64_t BlocksFor(std::uint64_t size, std::uint64_t block_bytes) {
  return size / block_bytes + (size % block_bytes != 0 ? 1 : 0);
}

inline std::string IdList(const std::vector<BlockId>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size() && i < kListLimit; ++i) {
    out += (i ? ", " : "") + std::to_string(ids[i]);
  }
  if (ids.size() > kListLimit)
    out += ", ... (" + std::to_string(ids.size() - kListLimit) + " more)";
  return out;
}

}  // namespace s3oram::fs::fsck_detail
