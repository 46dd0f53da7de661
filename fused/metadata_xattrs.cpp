// MetadataStore: extended attributes (metadata_store.h).
#include "fused/metadata_store_internal.h"

namespace s3oram::fs {

// --- xattrs -----------------------------------------------------------------

namespace {
void CheckXattrName(std::string_view name) {
  if (name.empty()) Fail(EINVAL, "empty xattr name");
  if (name.size() > kMaxXattrNameBytes) Fail(ERANGE, "xattr name too long");
}
}  // namespace

int MetadataStore::SetXattr(Ino ino, std::string_view name, std::string_view value, int flags) {
  return Run(true, [&](Impl& m) {
    CheckXattrName(name);
    if ((flags & ~(kXattrCreate | kXattrReplace)) != 0 || flags == (kXattrCreate | kXattrReplace)) {
      Fail(EINVAL, "bad xattr flags");
    }
    if (value.size() > kMaxXattrValueBytes) Fail(E2BIG, "xattr value too large");
    m.Inode(ino);
    bool exists = false;
    {
      Q q = m.S("SELECT 1 FROM fs_xattrs WHERE ino = ? AND name = ?");
      q.U(ino).B(name);
      exists = q.Next();
    }
    if ((flags & kXattrCreate) && exists) Fail(EEXIST);
    if ((flags & kXattrReplace) && !exists) Fail(ENODATA);
    m.S("INSERT OR REPLACE INTO fs_xattrs(ino, name, value) VALUES (?, ?, ?)")
        .U(ino)
        .B(name)
        .B(value)
        .Run();
    m.TouchCtime(ino, NowNs());
  });
}

int MetadataStore::GetXattr(Ino ino, std::string_view name, std::string* value) {
  return Run(false, [&](Impl& m) {
    CheckXattrName(name);
    m.Inode(ino);
    Q q = m.S("SELECT value FROM fs_xattrs WHERE ino = ? AND name = ?");
    q.U(ino).B(name);
    if (!q.Next()) Fail(ENODATA);
    if (value) *value = q.Str(0);
  });
}

int MetadataStore::ListXattr(Ino ino, std::vector<std::string>* names) {
  return Run(false, [&](Impl& m) {
    m.Inode(ino);
    std::vector<std::string> list;
    Q q = m.S("SELECT name FROM fs_xattrs WHERE ino = ? ORDER BY name");
    q.U(ino);
    while (q.Next()) list.push_back(q.Str(0));
    if (names) *names = std::move(list);
  });
}

int MetadataStore::RemoveXattr(Ino ino, std::string_view name) {
  return Run(true, [&](Impl& m) {
    CheckXattrName(name);
    m.Inode(ino);
    m.S("DELETE FROM fs_xattrs WHERE ino = ? AND name = ?").U(ino).B(name).Run();
    if (sqlite3_changes(m.db_) == 0) Fail(ENODATA);
    m.TouchCtime(ino, NowNs());
  });
}

}  // namespace s3oram::fs
