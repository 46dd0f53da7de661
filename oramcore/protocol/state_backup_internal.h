// What the state backup (state_backup.cpp: upload, and the format of a
// generation) and the restore (state_restore.cpp) share: the generation's
// header and its decoding, the temporary files made beside a state, and the
// messages that name servers. Internal to oramcore/protocol.
#pragma once

#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/math/field.h"
#include "oramcore/state/client_state.h"
#include "oramcore/wire/server_set.h"
#include "oramcore/wire/wire.h"

namespace s3oram::backup_internal {

using field::Elem;

// "WHAT PATH: strerror(errno)".
std::string Errno(const std::string& what, const std::string& path);

struct Header {
  wire::FsId fs_id{};
  std::uint64_t generation = 0;
  std::uint64_t created = 0;
  Counters counters;
  KeyWrap wrap;
  std::uint64_t padded = 0;
  std::array<std::uint8_t, 24> nonce{};
};

// Removes a set of files when it goes out of scope (temporary snapshots and
// restore files, with SQLite's side files).
class FileRemover {
 public:
  explicit FileRemover(std::string path) : path_(std::move(path)) {}
  ~FileRemover() {
    if (path_.empty()) return;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      (void)::unlink((path_ + suffix).c_str());
    }
  }
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

// The tags of the temporary files made beside a state (TempBeside).
inline constexpr const char* kTempTags[] = {"snapshot", "restore"};

// A new empty 0600 file beside `path` (mkstemp) named PATH.TAG-XXXXXX,
// flock'ed for as long as this object lives and then removed, with any
// SQLite -wal/-shm/-journal beside it (a published copy was renamed or
// linked away first). The lock tells a later run whether the file's writer
// is alive: a killed backup or restore leaves its sealed copy behind, and
// RemoveAbandonedTemps takes such copies away.
class TempBeside {
 public:
  static Result<std::unique_ptr<TempBeside>> Create(const std::string& path, const char* tag) {
    std::string templ = path + "." + tag + "-XXXXXX";
    const int fd = ::mkstemp(templ.data());
    if (fd < 0) return Status::IoError(Errno("cannot create a temporary file beside", path));
    std::unique_ptr<TempBeside> t(new TempBeside(std::move(templ), fd));
    // mkstemp makes it 0600 already; a default ACL could widen that.
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || ::fchmod(fd, 0600) != 0) {
      return Status::IoError(Errno("cannot lock or chmod", t->path()));
    }
    return t;
  }
  ~TempBeside() {
    // Removed while still locked, so no cleaner sees it unlocked first.
    { FileRemover remove(path_); }
    ::close(fd_);
  }
  TempBeside(const TempBeside&) = delete;
  TempBeside& operator=(const TempBeside&) = delete;
  const std::string& path() const { return path_; }

 private:
  TempBeside(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

struct Decoded {
  Header header;
  Secret snapshot;
  std::vector<std::size_t> used;
  std::vector<std::string> warnings;
};

// A chunk is a whole number of packing groups (see the file comment).
inline constexpr std::size_t kChunkElems = wire::kMaxBackupChunkElems;
static_assert(kChunkElems % field::kPackElems == 0);

// Removes the temporary files beside `state_path` (TempBeside) whose
// writer is gone: the ones whose lock can be taken at once.
void RemoveAbandonedTemps(const std::string& state_path);
// Writes `bytes` as the whole content of `path` and fsyncs it.
Status WriteWholeAndSync(const std::string& path, std::span<const std::uint8_t> bytes);
// The transport options of the requests that move megabytes.
TransportOptions BulkOptions(std::chrono::milliseconds deadline);
// "server i (endpoint)", and a set of them.
std::string ServerName(std::size_t i, const std::string& endpoint);
std::string SetName(const std::vector<std::size_t>& idx, const std::vector<std::string>& eps);
// Step 3 of the restore for one generation (see state_backup.cpp's file
// comment): the shares of t + 1 servers or more interpolated, every subset
// tried until one authenticates.
Result<Decoded> DecodeGeneration(std::uint64_t generation, const wire::FsId& fs_id,
                                 const std::map<std::size_t, std::vector<Elem>>& shares,
                                 std::size_t t, const Secret& passphrase,
                                 const std::vector<std::string>& endpoints);
// Why a restore of generation `h` is refused against server `server`'s
// STATUS `r` (the servers are past it), naming the way out.
std::string OlderMessage(const Header& h, std::size_t server, const std::string& endpoint,
                         const wire::StatusReply& r);

}  // namespace s3oram::backup_internal
