// MetadataStore: names and inodes (metadata_store.h): lookups, creation,
// links, unlink, rmdir, rename, readdir, attributes, truncate, orphans.
#include <algorithm>
#include <set>

#include "fused/metadata_store_internal.h"

namespace s3oram::fs {

// --- names and inodes -------------------------------------------------------

int MetadataStore::Lookup(Ino parent, std::string_view name, Attr* out) {
  return Run(false, [&](Impl& m) {
    if (name.size() > kMaxNameBytes) Fail(ENAMETOOLONG);
    m.Dir(parent);
    Ino ino = 0;
    if (name == ".") {
      ino = parent;
    } else if (name == "..") {
      ino = parent == kRootIno ? kRootIno : m.ParentOf(parent).value_or(kRootIno);
    } else {
      if (name.empty() || name.find('/') != std::string_view::npos) Fail(EINVAL);
      auto e = m.Entry(parent, name);
      if (!e) Fail(ENOENT);
      ino = *e;
    }
    Attr a = m.FullAttr(ino);
    if (out) *out = a;
  });
}

int MetadataStore::GetAttr(Ino ino, Attr* out) {
  return Run(false, [&](Impl& m) {
    Attr a = m.FullAttr(ino);
    if (out) *out = a;
  });
}

int MetadataStore::Create(Ino parent, std::string_view name, std::uint32_t mode, std::uint32_t uid,
                          std::uint32_t gid, std::uint64_t rdev, Attr* out) {
  return Run(true, [&](Impl& m) {
    std::uint32_t type = mode & S_IFMT;
    if (type == 0) type = S_IFREG;
    if (type == S_IFDIR || type == S_IFLNK) Fail(EINVAL, "Create of a directory or symlink");
    if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK && type != S_IFCHR &&
        type != S_IFBLK) {
      Fail(EINVAL, "unknown file type");
    }
    m.PrepareNewEntry(parent, name);
    const std::int64_t now = NowNs();
    Ino ino = m.NewInode(type | (mode & 07777), uid, gid, 1, 0, rdev, now);
    m.InsertEntry(parent, name, ino);
    m.TouchDir(parent, now);
    Attr a = m.FullAttr(ino);
    if (out) *out = a;
  });
}

int MetadataStore::Mkdir(Ino parent, std::string_view name, std::uint32_t mode, std::uint32_t uid,
                         std::uint32_t gid, Attr* out) {
  return Run(true, [&](Impl& m) {
    m.PrepareNewEntry(parent, name);
    const std::int64_t now = NowNs();
    Ino ino = m.NewInode(S_IFDIR | (mode & 07777), uid, gid, 2, 0, 0, now);
    m.InsertEntry(parent, name, ino);
    m.AddNlink(parent, 1);
    m.TouchDir(parent, now);
    Attr a = m.FullAttr(ino);
    if (out) *out = a;
  });
}

int MetadataStore::Symlink(Ino parent, std::string_view name, std::string_view target,
                           std::uint32_t uid, std::uint32_t gid, Attr* out) {
  return Run(true, [&](Impl& m) {
    if (target.empty()) Fail(ENOENT, "empty symlink target");
    if (target.size() > kMaxSymlinkBytes) Fail(ENAMETOOLONG, "symlink target too long");
    m.PrepareNewEntry(parent, name);
    const std::int64_t now = NowNs();
    Ino ino = m.NewInode(S_IFLNK | 0777, uid, gid, 1, target.size(), 0, now);
    m.S("INSERT INTO fs_symlinks(ino, target) VALUES (?, ?)").U(ino).B(target).Run();
    m.InsertEntry(parent, name, ino);
    m.TouchDir(parent, now);
    Attr a = m.FullAttr(ino);
    if (out) *out = a;
  });
}

int MetadataStore::ReadLink(Ino ino, std::string* target) {
  return Run(false, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if ((a.mode & S_IFMT) != S_IFLNK) Fail(EINVAL, "not a symlink");
    Q q = m.S("SELECT target FROM fs_symlinks WHERE ino = ?");
    q.U(ino);
    if (!q.Next()) Fail(EIO, "symlink without target");
    if (target) *target = q.Str(0);
  });
}

int MetadataStore::Link(Ino ino, Ino new_parent, std::string_view new_name, Attr* out) {
  return Run(true, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if (IsDir(a.mode)) Fail(EPERM, "hard link to a directory");
    if (a.nlink == 0) Fail(ENOENT, "inode was unlinked");
    m.PrepareNewEntry(new_parent, new_name);
    const std::int64_t now = NowNs();
    m.InsertEntry(new_parent, new_name, ino);
    m.AddNlink(ino, 1);
    m.TouchCtime(ino, now);
    m.TouchDir(new_parent, now);
    Attr r = m.FullAttr(ino);
    if (out) *out = r;
  });
}

int MetadataStore::Unlink(Ino parent, std::string_view name, bool* orphaned) {
  return Run(true, [&](Impl& m) {
    if (name.size() > kMaxNameBytes) Fail(ENAMETOOLONG);
    m.Dir(parent);
    if (name == "." || name == "..") Fail(EISDIR);
    auto e = m.Entry(parent, name);
    if (!e) Fail(ENOENT);
    Attr a = m.Inode(*e);
    if (IsDir(a.mode)) Fail(EISDIR, "unlink of a directory");
    const std::int64_t now = NowNs();
    m.DeleteEntry(parent, name);
    m.AddNlink(*e, -1);
    m.TouchCtime(*e, now);
    m.TouchDir(parent, now);
    if (orphaned) *orphaned = a.nlink == 1;
  });
}

int MetadataStore::Rmdir(Ino parent, std::string_view name, Ino* removed_ino) {
  return Run(true, [&](Impl& m) {
    if (name.size() > kMaxNameBytes) Fail(ENAMETOOLONG);
    m.Dir(parent);
    if (name == ".") Fail(EINVAL);
    if (name == "..") Fail(ENOTEMPTY);
    auto e = m.Entry(parent, name);
    if (!e) Fail(ENOENT);
    Attr a = m.Inode(*e);
    if (!IsDir(a.mode)) Fail(ENOTDIR, "rmdir of a non-directory");
    if (!m.DirEmpty(*e)) Fail(ENOTEMPTY);
    const std::int64_t now = NowNs();
    m.DeleteEntry(parent, name);
    m.S("UPDATE fs_inodes SET nlink = 0, ctime_ns = ? WHERE ino = ?").I(now).U(*e).Run();
    m.AddNlink(parent, -1);
    m.TouchDir(parent, now);
    if (removed_ino) *removed_ino = *e;
  });
}

int MetadataStore::Rename(Ino parent, std::string_view name, Ino new_parent,
                          std::string_view new_name, unsigned flags, Ino* orphaned_ino) {
  return Run(true, [&](Impl& m) {
    if (orphaned_ino) *orphaned_ino = 0;
    if ((flags & ~(kRenameNoReplace | kRenameExchange)) != 0 ||
        flags == (kRenameNoReplace | kRenameExchange)) {
      Fail(EINVAL, "bad rename flags");
    }
    if (name.size() > kMaxNameBytes || new_name.size() > kMaxNameBytes) Fail(ENAMETOOLONG);
    m.Dir(parent);
    m.Dir(new_parent);
    CheckName(name);
    CheckName(new_name);
    auto src = m.Entry(parent, name);
    if (!src) Fail(ENOENT, "rename source missing");
    Attr sa = m.Inode(*src);
    auto dst = m.Entry(new_parent, new_name);
    const bool same_entry = parent == new_parent && name == new_name;
    const std::int64_t now = NowNs();

    if (flags & kRenameExchange) {
      if (!dst) Fail(ENOENT, "exchange target missing");
      if (same_entry) return;
      Attr da = m.Inode(*dst);
      if (IsDir(sa.mode) && m.InSubtree(new_parent, *src)) Fail(EINVAL, "into own subtree");
      if (IsDir(da.mode) && m.InSubtree(parent, *dst)) Fail(EINVAL, "into own subtree");
      m.S("UPDATE fs_dirents SET ino = ? WHERE parent = ? AND name = ?")
          .U(*dst)
          .U(parent)
          .B(name)
          .Run();
      m.S("UPDATE fs_dirents SET ino = ? WHERE parent = ? AND name = ?")
          .U(*src)
          .U(new_parent)
          .B(new_name)
          .Run();
      if (parent != new_parent) {
        const int delta = (IsDir(sa.mode) ? 1 : 0) - (IsDir(da.mode) ? 1 : 0);
        if (delta != 0) {
          m.AddNlink(new_parent, delta);
          m.AddNlink(parent, -delta);
        }
      }
      m.TouchCtime(*src, now);
      m.TouchCtime(*dst, now);
      m.TouchDir(parent, now);
      m.TouchDir(new_parent, now);
      return;
    }

    if (dst) {
      if (flags & kRenameNoReplace) Fail(EEXIST, "rename target exists");
      if (*dst == *src) return;  // two links to one inode: POSIX says do nothing
    }
    if (IsDir(sa.mode) && m.InSubtree(new_parent, *src)) Fail(EINVAL, "into own subtree");
    if (dst) {
      Attr da = m.Inode(*dst);
      if (IsDir(sa.mode) && !IsDir(da.mode)) Fail(ENOTDIR, "replacing a non-directory by a dir");
      if (!IsDir(sa.mode) && IsDir(da.mode)) Fail(EISDIR, "replacing a directory by a non-dir");
      if (IsDir(da.mode)) {
        if (!m.DirEmpty(*dst)) Fail(ENOTEMPTY);
        m.S("UPDATE fs_inodes SET nlink = 0, ctime_ns = ? WHERE ino = ?").I(now).U(*dst).Run();
        m.AddNlink(new_parent, -1);
      } else {
        m.AddNlink(*dst, -1);
        m.TouchCtime(*dst, now);
      }
      m.DeleteEntry(new_parent, new_name);
      if (orphaned_ino && (IsDir(da.mode) || da.nlink == 1)) *orphaned_ino = *dst;
    }
    m.S("UPDATE fs_dirents SET parent = ?, name = ? WHERE parent = ? AND name = ?")
        .U(new_parent)
        .B(new_name)
        .U(parent)
        .B(name)
        .Run();
    if (IsDir(sa.mode) && parent != new_parent) {
      m.AddNlink(parent, -1);
      m.AddNlink(new_parent, 1);
    }
    m.TouchCtime(*src, now);
    m.TouchDir(parent, now);
    if (new_parent != parent) m.TouchDir(new_parent, now);
  });
}

int MetadataStore::ReadDir(Ino dir, std::uint64_t after_cookie, std::size_t max,
                           std::vector<DirEntry>* out) {
  return Run(false, [&](Impl& m) {
    m.Dir(dir);
    std::vector<DirEntry> list;
    Q q =
        m.S("SELECT d.cookie, d.name, d.ino, i.mode FROM fs_dirents d "
            "JOIN fs_inodes i ON i.ino = d.ino "
            "WHERE d.parent = ? AND d.cookie > ? ORDER BY d.cookie LIMIT ?");
    q.U(dir).U(after_cookie).I(static_cast<std::int64_t>(std::min<std::size_t>(max, 1u << 30)));
    while (q.Next()) {
      list.push_back(
          DirEntry{q.UCol(0), q.Str(1), q.UCol(2), static_cast<std::uint32_t>(q.Col(3)) & S_IFMT});
    }
    if (out) *out = std::move(list);
  });
}

int MetadataStore::SetAttr(Ino ino, const SetAttrIn& in, Attr* out) {
  return Run(true, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if (in.mask & ~(kSetMode | kSetUid | kSetGid | kSetAtime | kSetMtime | kSetCtime)) {
      Fail(EINVAL, "unknown SetAttr bits");
    }
    if (in.mask & kSetMode) a.mode = (a.mode & S_IFMT) | (in.mode & 07777);
    if (in.mask & kSetUid) a.uid = in.uid;
    if (in.mask & kSetGid) a.gid = in.gid;
    if (in.mask & kSetAtime) a.atime_ns = in.atime_ns;
    if (in.mask & kSetMtime) a.mtime_ns = in.mtime_ns;
    a.ctime_ns = (in.mask & kSetCtime) ? in.ctime_ns : NowNs();
    m.S("UPDATE fs_inodes SET mode = ?, uid = ?, gid = ?, atime_ns = ?, mtime_ns = ?, "
        "ctime_ns = ? WHERE ino = ?")
        .I(a.mode)
        .I(a.uid)
        .I(a.gid)
        .I(a.atime_ns)
        .I(a.mtime_ns)
        .I(a.ctime_ns)
        .U(ino)
        .Run();
    Attr r = m.FullAttr(ino);
    if (out) *out = r;
  });
}

int MetadataStore::Truncate(Ino ino, std::uint64_t new_size, std::vector<BlockId>* freed,
                            Attr* out) {
  return Run(true, [&](Impl& m) {
    Attr a = m.Inode(ino);
    if (IsDir(a.mode)) Fail(EISDIR);
    if ((a.mode & S_IFMT) != S_IFREG) Fail(EINVAL, "truncate of a non-regular file");
    if (new_size > static_cast<std::uint64_t>(INT64_MAX)) Fail(EINVAL, "size too large");
    std::vector<BlockId> ids;
    m.FreeBlocksFrom(ino, m.BlocksFor(new_size), &ids);
    if (new_size % m.block_bytes_ != 0) {
      // The ORAM's copy of the new last block keeps its old tail; reading it
      // as zeros lets the file grow again without exposing those bytes.
      m.S("UPDATE fs_blocks SET valid = min(valid, ?) WHERE ino = ? AND idx = ?")
          .U(new_size % m.block_bytes_)
          .U(ino)
          .U(new_size / m.block_bytes_)
          .Run();
    }
    const std::int64_t now = NowNs();
    m.S("UPDATE fs_inodes SET size = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?")
        .U(new_size)
        .I(now)
        .I(now)
        .U(ino)
        .Run();
    Attr r = m.FullAttr(ino);
    if (freed) freed->insert(freed->end(), ids.begin(), ids.end());
    if (out) *out = r;
  });
}

int MetadataStore::ForgetOrphan(Ino ino, std::vector<BlockId>* freed) {
  std::vector<BlockId> ids;
  int err = Run(true, [&](Impl& m) {
    auto a = m.FindInode(ino);
    if (!a || a->nlink != 0 || ino == kRootIno) return;
    m.DestroyInode(ino, &ids);
  });
  if (err == 0 && freed) freed->insert(freed->end(), ids.begin(), ids.end());
  return err;
}

int MetadataStore::PurgeOrphans(std::uint64_t* count) {
  return Run(true, [&](Impl& m) {
    std::vector<Ino> orphans;
    {
      Q q = m.S("SELECT ino FROM fs_inodes WHERE nlink = 0 AND ino != 1");
      while (q.Next()) orphans.push_back(q.UCol(0));
    }
    for (Ino ino : orphans) m.DestroyInode(ino, nullptr);
    if (count) *count = orphans.size();
  });
}

}  // namespace s3oram::fs
