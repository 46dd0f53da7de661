#include "fused/filesystem.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace s3oram::fs {
namespace {

Filesystem& Fs(fuse_req_t req) { return *static_cast<Filesystem*>(fuse_req_userdata(req)); }

std::int64_t ToNs(const timespec& ts) {
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
timespec FromNs(std::int64_t ns) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  if (ts.tv_nsec < 0) {
    ts.tv_nsec += 1000000000;
    ts.tv_sec -= 1;
  }
  return ts;
}
std::int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return ToNs(ts);
}

// Only the user.* namespace is stored; the kernel's own lookups of other
// names (security.capability on every write) find nothing.
constexpr std::string_view kUserPrefix = "user.";
bool UserXattr(const char* name) { return std::string_view(name).starts_with(kUserPrefix); }

void OpInit(void* userdata, fuse_conn_info* conn) {
  (void)userdata;
  // No writeback cache, locks or splice: the kernel passes every write
  // through (our own cache coalesces them) and handles locks locally.
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_WRITEBACK_CACHE);
  // The kernel clears setuid/setgid on write, truncate and chown itself (as a
  // mode change in setattr); we do not promise to.
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_HANDLE_KILLPRIV);
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  conn->time_gran = 1;
  spdlog::info("FUSE connection: protocol {}.{}, max_write {}, max_readahead {}", conn->proto_major,
               conn->proto_minor, conn->max_write, conn->max_readahead);
}

void OpDestroy(void* userdata) { static_cast<Filesystem*>(userdata)->Destroy(); }

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Fs(req).Lookup(req, parent, name);
}

void OpForget(fuse_req_t req, fuse_ino_t ino, std::uint64_t nlookup) {
  Fs(req).Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, std::size_t count, fuse_forget_data* forgets) {
  for (std::size_t i = 0; i < count; ++i) Fs(req).Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Filesystem& fs = Fs(req);
  Attr a;
  if (int e = fs.meta().GetAttr(ino, &a); e != 0) return fs.ReplyErr(req, e, "getattr");
  struct stat st;
  fs.FillStat(a, &st);
  fuse_reply_attr(req, &st, fs.timeout());
}

void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "setattr")) return;
  Attr out;
  if (to_set & FUSE_SET_ATTR_SIZE) {
    if (attr->st_size < 0) return fs.ReplyErr(req, EINVAL, "truncate");
    if (int e = fs.data().Truncate(ino, static_cast<std::uint64_t>(attr->st_size), &out); e != 0) {
      return fs.ReplyErr(req, e, "truncate");
    }
  }
  SetAttrIn in;
  const std::int64_t now = NowNs();
  if (to_set & FUSE_SET_ATTR_MODE) {
    in.mask |= kSetMode;
    in.mode = attr->st_mode & 07777;
  }
  if (to_set & FUSE_SET_ATTR_UID) {
    in.mask |= kSetUid;
    in.uid = attr->st_uid;
  }
  if (to_set & FUSE_SET_ATTR_GID) {
    in.mask |= kSetGid;
    in.gid = attr->st_gid;
  }
  if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
    in.mask |= kSetAtime;
    in.atime_ns = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? now : ToNs(attr->st_atim);
  }
  if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
    in.mask |= kSetMtime;
    in.mtime_ns = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : ToNs(attr->st_mtim);
  }
  if (to_set & FUSE_SET_ATTR_CTIME) {
    in.mask |= kSetCtime;
    in.ctime_ns = ToNs(attr->st_ctim);
  }
  int e = in.mask != 0 ? fs.meta().SetAttr(ino, in, &out) : fs.meta().GetAttr(ino, &out);
  if (e != 0) return fs.ReplyErr(req, e, "setattr");
  struct stat st;
  fs.FillStat(out, &st);
  fuse_reply_attr(req, &st, fs.timeout());
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  Filesystem& fs = Fs(req);
  std::string target;
  if (int e = fs.meta().ReadLink(ino, &target); e != 0) return fs.ReplyErr(req, e, "readlink");
  fuse_reply_readlink(req, target.c_str());
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "mknod")) return;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (S_ISDIR(mode) || S_ISLNK(mode)) return fs.ReplyErr(req, EINVAL, "mknod");
  Attr a;
  if (int e = fs.meta().Create(parent, name, mode, ctx->uid, ctx->gid, rdev, &a); e != 0) {
    return fs.ReplyErr(req, e, "mknod");
  }
  fs.ReplyEntry(req, a);
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "mkdir")) return;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Attr a;
  if (int e = fs.meta().Mkdir(parent, name, mode & 07777, ctx->uid, ctx->gid, &a); e != 0) {
    return fs.ReplyErr(req, e, "mkdir");
  }
  fs.ReplyEntry(req, a);
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "unlink")) return;
  Attr victim;
  if (int e = fs.meta().Lookup(parent, name, &victim); e != 0) return fs.ReplyErr(req, e, "unlink");
  bool orphaned = false;
  if (int e = fs.meta().Unlink(parent, name, &orphaned); e != 0) {
    return fs.ReplyErr(req, e, "unlink");
  }
  if (orphaned) fs.Orphaned(victim.ino);
  fuse_reply_err(req, 0);
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "rmdir")) return;
  Ino removed = 0;
  if (int e = fs.meta().Rmdir(parent, name, &removed); e != 0) return fs.ReplyErr(req, e, "rmdir");
  if (removed != 0) fs.Orphaned(removed);
  fuse_reply_err(req, 0);
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "symlink")) return;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Attr a;
  if (int e = fs.meta().Symlink(parent, name, link, ctx->uid, ctx->gid, &a); e != 0) {
    return fs.ReplyErr(req, e, "symlink");
  }
  fs.ReplyEntry(req, a);
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "rename")) return;
  if (flags & ~(kRenameNoReplace | kRenameExchange)) return fs.ReplyErr(req, EINVAL, "rename");
  Ino orphaned = 0;
  if (int e = fs.meta().Rename(parent, name, newparent, newname, flags, &orphaned); e != 0) {
    return fs.ReplyErr(req, e, "rename");
  }
  if (orphaned != 0) fs.Orphaned(orphaned);
  fuse_reply_err(req, 0);
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "link")) return;
  Attr a;
  if (int e = fs.meta().Link(ino, newparent, newname, &a); e != 0) {
    return fs.ReplyErr(req, e, "link");
  }
  fs.ReplyEntry(req, a);
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Filesystem& fs = Fs(req);
  Attr a;
  if (int e = fs.meta().GetAttr(ino, &a); e != 0) return fs.ReplyErr(req, e, "open");
  if (S_ISDIR(a.mode)) return fs.ReplyErr(req, EISDIR, "open");
  if (((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) &&
      fs.RefuseWhileStopped(req, "open for writing")) {
    return;
  }
  // libfuse asks for atomic O_TRUNC: the kernel passes the flag here instead
  // of sending a separate setattr.
  if ((fi->flags & O_TRUNC) && S_ISREG(a.mode) && (fi->flags & O_ACCMODE) != O_RDONLY) {
    if (int e = fs.data().Truncate(ino, 0, &a); e != 0) return fs.ReplyErr(req, e, "open");
  }
  // This mount is the only writer, so the kernel's page cache stays valid
  // across opens.
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "create")) return;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (!S_ISREG(mode) && (mode & S_IFMT) != 0) return fs.ReplyErr(req, EINVAL, "create");
  Attr a;
  if (int e = fs.meta().Create(parent, name, S_IFREG | (mode & 07777), ctx->uid, ctx->gid, 0, &a);
      e != 0) {
    return fs.ReplyErr(req, e, "create");
  }
  fi->keep_cache = 1;
  fs.ReplyCreate(req, a, fi);
}

void OpRead(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, fuse_file_info*) {
  Filesystem& fs = Fs(req);
  if (off < 0) return fs.ReplyErr(req, EINVAL, "read");
  // Debug lines name inodes, offsets and sizes only: never names or bytes.
  spdlog::debug("read ino {} off {} size {}", ino, off, size);
  std::vector<std::uint8_t> buf;
  if (int e = fs.data().Read(ino, static_cast<std::uint64_t>(off), size, &buf); e != 0) {
    return fs.ReplyErr(req, e, "read");
  }
  fuse_reply_buf(req, reinterpret_cast<const char*>(buf.data()), buf.size());
}

void OpWrite(fuse_req_t req, fuse_ino_t ino, const char* buf, std::size_t size, off_t off,
             fuse_file_info*) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "write")) return;
  if (off < 0) return fs.ReplyErr(req, EINVAL, "write");
  spdlog::debug("write ino {} off {} size {}", ino, off, size);
  std::span<const std::uint8_t> data(reinterpret_cast<const std::uint8_t*>(buf), size);
  if (int e = fs.data().Write(ino, static_cast<std::uint64_t>(off), data); e != 0) {
    return fs.ReplyErr(req, e, "write");
  }
  fuse_reply_write(req, size);
}

void OpFlush(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Filesystem& fs = Fs(req);
  spdlog::debug("flush ino {}", ino);
  fs.ReplyErr(req, fs.data().Flush(ino), "flush");
}

void OpRelease(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Filesystem& fs = Fs(req);
  fs.ReplyErr(req, fs.data().Flush(ino), "release");
}

void OpFsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  Filesystem& fs = Fs(req);
  spdlog::debug("fsync ino {}", ino);
  fs.ReplyErr(req, fs.data().Fsync(ino), "fsync");
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Filesystem& fs = Fs(req);
  Attr a;
  if (int e = fs.meta().GetAttr(ino, &a); e != 0) return fs.ReplyErr(req, e, "opendir");
  if (!S_ISDIR(a.mode)) return fs.ReplyErr(req, ENOTDIR, "opendir");
  fuse_reply_open(req, fi);
}

// Offsets: 0 = start, 1 = after ".", 2 = after "..", cookie + 2 = after the
// entry with that cookie. Cookies are never reused, so a listing resumed at
// any offset neither repeats nor skips entries that existed throughout.
void OpReaddir(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, fuse_file_info*) {
  Filesystem& fs = Fs(req);
  if (off < 0) return fs.ReplyErr(req, EINVAL, "readdir");
  std::vector<char> buf(size);
  std::size_t used = 0;
  auto add = [&](const char* name, Ino entry_ino, std::uint32_t type, off_t next) {
    struct stat st {};
    st.st_ino = entry_ino;
    st.st_mode = type;
    std::size_t need = fuse_add_direntry(req, nullptr, 0, name, nullptr, 0);
    if (used + need > size) return false;
    fuse_add_direntry(req, buf.data() + used, size - used, name, &st, next);
    used += need;
    return true;
  };
  Attr dir;
  if (int e = fs.meta().GetAttr(ino, &dir); e != 0) return fs.ReplyErr(req, e, "readdir");
  if (!S_ISDIR(dir.mode)) return fs.ReplyErr(req, ENOTDIR, "readdir");
  if (off == 0 && !add(".", ino, S_IFDIR, 1)) return fuse_reply_buf(req, buf.data(), used), void();
  // The kernel answers ".." from its dentry cache; d_ino only has to be non-zero.
  if (off <= 1 && !add("..", ino, S_IFDIR, 2)) {
    fuse_reply_buf(req, buf.data(), used);
    return;
  }
  std::uint64_t after = off <= 2 ? 0 : static_cast<std::uint64_t>(off) - 2;
  bool full = false;
  while (!full) {
    std::vector<DirEntry> entries;
    if (int e = fs.meta().ReadDir(ino, after, 128, &entries); e != 0) {
      return fs.ReplyErr(req, e, "readdir");
    }
    if (entries.empty()) break;
    for (const DirEntry& d : entries) {
      if (!add(d.name.c_str(), d.ino, d.type, static_cast<off_t>(d.cookie + 2))) {
        full = true;
        break;
      }
      after = d.cookie;
    }
  }
  fuse_reply_buf(req, buf.data(), used);
}

void OpReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

void OpFsyncdir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
  Filesystem& fs = Fs(req);
  // The directory's entries are committed already; its files' data may
  // wait in the cache (writeback_delay). `sync DIR` is how a user makes a
  // tree just copied in durable (syncfs(2) does not reach FUSE daemons), so
  // this writes everything back.
  fs.ReplyErr(req, fs.data().FlushAllAndSync(), "fsyncdir");
}

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  Filesystem& fs = Fs(req);
  FsStats s;
  if (int e = fs.meta().StatFs(&s); e != 0) return fs.ReplyErr(req, e, "statfs");
  struct statvfs st {};
  st.f_bsize = s.block_bytes;
  st.f_frsize = s.block_bytes;
  st.f_blocks = s.total_blocks;
  st.f_bfree = s.free_blocks;
  st.f_bavail = s.free_blocks;
  // Inodes live in SQLite on the laptop and cost no ORAM space.
  st.f_files = UINT32_MAX;
  st.f_ffree = UINT32_MAX - std::min<std::uint64_t>(s.inodes, UINT32_MAX);
  st.f_favail = st.f_ffree;
  st.f_namemax = kMaxNameBytes;
  fuse_reply_statfs(req, &st);
}

void OpSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                std::size_t size, int flags) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "setxattr")) return;
  if (!UserXattr(name)) return fs.ReplyErr(req, EOPNOTSUPP, "setxattr");
  int e = fs.meta().SetXattr(ino, name, std::string_view(value, size), flags);
  fs.ReplyErr(req, e, "setxattr");
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, std::size_t size) {
  Filesystem& fs = Fs(req);
  if (!UserXattr(name)) return fs.ReplyErr(req, ENODATA, "getxattr");
  std::string value;
  if (int e = fs.meta().GetXattr(ino, name, &value); e != 0) {
    return fs.ReplyErr(req, e, "getxattr");
  }
  if (size == 0) return fuse_reply_xattr(req, value.size()), void();
  if (size < value.size()) return fs.ReplyErr(req, ERANGE, "getxattr");
  fuse_reply_buf(req, value.data(), value.size());
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, std::size_t size) {
  Filesystem& fs = Fs(req);
  std::vector<std::string> names;
  if (int e = fs.meta().ListXattr(ino, &names); e != 0) return fs.ReplyErr(req, e, "listxattr");
  std::string list;
  for (const std::string& n : names) {
    list += n;
    list.push_back('\0');
  }
  if (size == 0) return fuse_reply_xattr(req, list.size()), void();
  if (size < list.size()) return fs.ReplyErr(req, ERANGE, "listxattr");
  fuse_reply_buf(req, list.data(), list.size());
}

void OpRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "removexattr")) return;
  if (!UserXattr(name)) return fs.ReplyErr(req, ENODATA, "removexattr");
  fs.ReplyErr(req, fs.meta().RemoveXattr(ino, name), "removexattr");
}

void OpFallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                 fuse_file_info*) {
  Filesystem& fs = Fs(req);
  if (fs.RefuseWhileStopped(req, "fallocate")) return;
  if (mode != 0) return fs.ReplyErr(req, EOPNOTSUPP, "fallocate");
  if (offset < 0 || length <= 0) return fs.ReplyErr(req, EINVAL, "fallocate");
  fs.ReplyErr(req,
              fs.data().Allocate(ino, static_cast<std::uint64_t>(offset),
                                 static_cast<std::uint64_t>(length)),
              "fallocate");
}

fuse_lowlevel_ops MakeOperations() {
  fuse_lowlevel_ops ops{};
  ops.init = OpInit;
  ops.destroy = OpDestroy;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetattr;
  ops.setattr = OpSetattr;
  ops.readlink = OpReadlink;
  ops.mknod = OpMknod;
  ops.mkdir = OpMkdir;
  ops.unlink = OpUnlink;
  ops.rmdir = OpRmdir;
  ops.symlink = OpSymlink;
  ops.rename = OpRename;
  ops.link = OpLink;
  ops.open = OpOpen;
  ops.create = OpCreate;
  ops.read = OpRead;
  ops.write = OpWrite;
  ops.flush = OpFlush;
  ops.release = OpRelease;
  ops.fsync = OpFsync;
  ops.opendir = OpOpendir;
  ops.readdir = OpReaddir;
  ops.releasedir = OpReleasedir;
  ops.fsyncdir = OpFsyncdir;
  ops.statfs = OpStatfs;
  ops.setxattr = OpSetxattr;
  ops.getxattr = OpGetxattr;
  ops.listxattr = OpListxattr;
  ops.removexattr = OpRemovexattr;
  ops.fallocate = OpFallocate;
  return ops;
}

}  // namespace

Filesystem::Filesystem(MetadataStore& meta, FileData& data, double timeout_seconds)
    : meta_(meta), data_(data), timeout_(timeout_seconds) {}

const fuse_lowlevel_ops& Filesystem::Operations() {
  static const fuse_lowlevel_ops ops = MakeOperations();
  return ops;
}

void Filesystem::ReplyErr(fuse_req_t req, int err, const char* op) {
  if (err != EIO) return (void)fuse_reply_err(req, err);
  // The store's message if its last transaction failed; otherwise the cause
  // (a server, a block, a timeout) was logged where it happened.
  std::string why = meta_.last_error();
  if (why.empty()) why = "see the error logged before this line";
  spdlog::error("{}: I/O error: {}", op, why);
  fuse_reply_err(req, err);
}

bool Filesystem::RefuseWhileStopped(fuse_req_t req, const char* op) {
  if (!data_.WritesStopped()) return false;
  if (!stopped_logged_.exchange(true)) {
    spdlog::error("{}: refused with EROFS: the filesystem is read-only since a server reported "
                  "damaged storage (logged above; s3oram status names it); repair that server "
                  "(s3oram rebuild --server N), then mount again. Later refusals are not logged",
                  op);
  }
  fuse_reply_err(req, EROFS);
  return true;
}

void Filesystem::FillStat(const Attr& a, struct stat* st) const {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = a.ino;
  st->st_mode = a.mode;
  st->st_nlink = a.nlink;
  st->st_uid = a.uid;
  st->st_gid = a.gid;
  st->st_rdev = a.rdev;
  st->st_size = static_cast<off_t>(a.size);
  st->st_blksize = static_cast<blksize_t>(meta_.block_bytes());
  st->st_blocks = static_cast<blkcnt_t>((a.mapped_bytes + 511) / 512);
  st->st_atim = FromNs(a.atime_ns);
  st->st_mtim = FromNs(a.mtime_ns);
  st->st_ctim = FromNs(a.ctime_ns);
}

void Filesystem::AddLookup(Ino ino) {
  std::lock_guard<std::mutex> lock(lookups_mu_);
  ++lookups_[ino];
}

fuse_entry_param Filesystem::Entry(const Attr& a) {
  fuse_entry_param e{};
  e.ino = a.ino;
  e.generation = 1;
  FillStat(a, &e.attr);
  e.attr_timeout = timeout_;
  e.entry_timeout = timeout_;
  AddLookup(a.ino);  // counted before the reply, undone if it fails
  return e;
}

void Filesystem::ReplyEntry(fuse_req_t req, const Attr& a) {
  fuse_entry_param e = Entry(a);
  if (fuse_reply_entry(req, &e) != 0) Forget(a.ino, 1);  // the request was interrupted
}

void Filesystem::ReplyCreate(fuse_req_t req, const Attr& a, fuse_file_info* fi) {
  fuse_entry_param e = Entry(a);
  if (fuse_reply_create(req, &e, fi) != 0) Forget(a.ino, 1);
}

void Filesystem::Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Attr a;
  int e = meta_.Lookup(parent, name, &a);
  if (e == ENOENT) {
    // A negative entry the kernel may cache; creating the name invalidates it.
    fuse_entry_param neg{};
    neg.ino = 0;
    neg.entry_timeout = timeout_;
    fuse_reply_entry(req, &neg);
    return;
  }
  if (e != 0) return ReplyErr(req, e, "lookup");
  ReplyEntry(req, a);
}

void Filesystem::Forget(fuse_ino_t ino, std::uint64_t nlookup) {
  {
    std::lock_guard<std::mutex> lock(lookups_mu_);
    auto it = lookups_.find(ino);
    if (it == lookups_.end()) return;
    it->second -= std::min(it->second, nlookup);
    if (it->second != 0) return;
    lookups_.erase(it);
  }
  if (ino == kRootIno) return;
  if (int e = data_.ForgetIfOrphan(ino, [this, ino] { return Unknown(ino); }); e != 0) {
    spdlog::error("freeing unlinked inode {} failed (errno {}); it is freed at the next mount", ino,
                  e);
  }
}

bool Filesystem::Unknown(Ino ino) {
  std::lock_guard<std::mutex> lock(lookups_mu_);
  return lookups_.count(ino) == 0;
}

void Filesystem::Orphaned(Ino ino) {
  {
    std::lock_guard<std::mutex> lock(lookups_mu_);
    if (lookups_.count(ino) != 0) return;  // Forget frees it
  }
  if (int e = data_.ForgetIfOrphan(ino, [this, ino] { return Unknown(ino); }); e != 0) {
    spdlog::error("freeing unlinked inode {} failed (errno {}); it is freed at the next mount", ino,
                  e);
  }
}

void Filesystem::Destroy() {
  if (destroyed_) return;
  destroyed_ = true;
  data_.StopBackground();  // no write-back or readahead races the final flush
  int e = data_.FlushAllAndSync();
  // The last chance for what is cached: a server that is down fails the
  // write-back at once (wire/liveness_monitor.h), so the unmount tries again
  // while it fails with EIO, for as long as a request's default timeout, in
  // case the server returns (a restart takes seconds).
  const auto give_up = std::chrono::steady_clock::now() + kUnmountWriteBackWait;
  if (e == EIO) {
    spdlog::warn("unmount: writing back cached blocks failed (EIO); trying again for up to {} s",
                 std::chrono::duration_cast<std::chrono::seconds>(kUnmountWriteBackWait).count());
  }
  while (e == EIO && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    e = data_.FlushAllAndSync();
  }
  if (e != 0) {
    // What is still dirty never reached the servers: those blocks are
    // marked so that reads of them fail (here, later and on other devices
    // through the state backup) instead of returning older bytes or zeros.
    std::size_t marked = 0;
    const int me = data_.MarkDirtyLost(&marked);
    spdlog::error("unmount: writing back cached blocks failed (errno {}); unsynced data are "
                  "lost: {} blocks {}; reads of them fail with EIO until they are written "
                  "again (s3oram fsck lists them)",
                  e, marked, me == 0 ? "marked lost" : "could NOT be marked lost");
  } else {
    spdlog::info("unmount: all data written back and synced");
  }
}

}  // namespace s3oram::fs
