// Client-state backup and restore (format: state_backup.h).
//
// Backup:
//  1. client.Sync(), so every access the client committed is in the file;
//  2. a consistent snapshot: the state's clear header, then SQLite's backup
//     API into an empty 0600 file made by mkstemp next to the state, sealed
//     under the same state key (one read transaction, so it sees every
//     committed transaction and nothing half-done, whoever else has the file
//     open; no page is ever written in clear), its counters read from the
//     copy itself (the header repeats them for restore to compare with the
//     servers), the bytes read into guarded memory (Secret), the file removed
//     whatever happens;
//  3. pad, encrypt, build the header; BACKUP_LIST on every server chooses the
//     generation (one above the newest any server has);
//  4. the blob is packed and Shamir-shared chunk by chunk (4 Mi elements per
//     server per frame: packing maps 15-byte groups to 4-element groups, so a
//     chunk boundary on a multiple of 4 elements packs exactly as the whole)
//     and sent with BACKUP_PUT; the last chunk makes it durable on each server.
//
// Restore:
//  1. STATUS on every server: they must agree on the filesystem id, which is
//     how a fresh machine learns it; BACKUP_LIST on every server;
//  2. candidate generations: the requested one, or every generation that at
//     least t+1 servers hold completely, newest first;
//  3. for a candidate, fetch each holder's share (a server that fails is left
//     out with a warning) and decode robustly: for each choice of t+1 shares,
//     reconstruct, check the packing and the header, unwrap the master key
//     (once per distinct key wrap: Argon2id is slow), decrypt. The first choice
//     that authenticates wins; every other server's share is then checked
//     against the same polynomial and a mismatch is reported by name. So with
//     l = 3, t = 1 one damaged share is survived and named. If nothing
//     authenticates: all shares consistent and the unwrap failed means a wrong
//     passphrase (PermissionDenied, stop); otherwise Integrity naming the
//     servers, and the previous generation is tried;
//  4. the backup's counters against every server's STATUS: servers behind the
//     backup lost data (refused); servers ahead (more evictions or a higher
//     applied seq) mean the backup is older than the data, refused without
//     --force (see OlderMessage for what is lost);
//  5. the snapshot goes to a mkstemp file beside the target (0600), is opened
//     as a state, gets this machine's endpoints, server keys and client key
//     file, and counters that the servers will accept (epoch and seq at least
//     theirs; with --force the eviction counter of the servers, no pending
//     eviction); it must then open (OramClient::OpenReadOnly, which checks
//     every server); only then is it fsynced and linked to the target name
//     (link fails if the target appeared meanwhile: never overwritten), the
//     temporary name removed and the directory fsynced.
//
// Temporary files (PATH.snapshot-XXXXXX, PATH.restore-XXXXXX) are flock'ed
// by their writer while it lives. A backup, restore or refresh killed
// mid-way leaves its sealed copy; the next one beside the same state removes
// every such file whose lock it can take (RemoveAbandonedTemps).
#include "oramcore/protocol/state_backup.h"

#include <fcntl.h>
#include <sodium.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "oramcore/base/durable_file.h"
#include "oramcore/base/fault_point.h"
#include "oramcore/base/random.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/subkeys.h"
#include "oramcore/math/field.h"
#include "oramcore/math/shamir.h"
#include "oramcore/protocol/counter_agreement.h"
#include "oramcore/protocol/fresh_shares.h"
#include "oramcore/wire/transport.h"

namespace s3oram {
namespace {

using field::Elem;

static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == 32);
static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == 24);

constexpr std::array<std::uint8_t, 8> kMagic = {'S', '3', 'O', 'R', 'B', 'A', 'K', '1'};
constexpr std::uint32_t kFormat = 1;
constexpr std::array<std::uint8_t, 16> kAdLabel = {'s', '3', 'o', 'r', 'a', 'm', ' ', 'b',
                                                   'a', 'c', 'k', 'u', 'p', ' ', 'v', '1'};
constexpr std::size_t kTagBytes = crypto_aead_xchacha20poly1305_ietf_ABYTES;
constexpr std::size_t kLengthPrefix = 8;
// A chunk is a whole number of packing groups (see the file comment).
constexpr std::size_t kChunkElems = wire::kMaxBackupChunkElems;
static_assert(kChunkElems % field::kPackElems == 0);
constexpr std::size_t kChunkBytes = kChunkElems / field::kPackElems * field::kPackBytes;
// The largest padded plaintext whose blob fits the servers' cap.
constexpr std::uint64_t kMaxBlobBytes = field::BytesForElems(wire::kMaxBackupElems);

struct Header {
  wire::FsId fs_id{};
  std::uint64_t generation = 0;
  std::uint64_t created = 0;
  Counters counters;
  KeyWrap wrap;
  std::uint64_t padded = 0;
  std::array<std::uint8_t, 24> nonce{};
};

class ByteWriter {
 public:
  explicit ByteWriter(std::span<std::uint8_t> out) : out_(out) {}
  void Bytes(std::span<const std::uint8_t> b) {
    std::copy(b.begin(), b.end(), out_.begin() + static_cast<std::ptrdiff_t>(pos_));
    pos_ += b.size();
  }
  void U32(std::uint32_t v) { Le(v, 4); }
  void U64(std::uint64_t v) { Le(v, 8); }
  std::size_t pos() const { return pos_; }

 private:
  void Le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_[pos_++] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  std::span<std::uint8_t> out_;
  std::size_t pos_ = 0;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::uint8_t> in) : in_(in) {}
  void Bytes(std::span<std::uint8_t> b) {
    std::copy_n(in_.begin() + static_cast<std::ptrdiff_t>(pos_), b.size(), b.begin());
    pos_ += b.size();
  }
  std::uint32_t U32() { return static_cast<std::uint32_t>(Le(4)); }
  std::uint64_t U64() { return Le(8); }

 private:
  std::uint64_t Le(int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t{in_[pos_++]} << (8 * i);
    return v;
  }
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
};

void EncodeHeader(const Header& h, std::span<std::uint8_t> out) {
  ByteWriter w(out);
  w.Bytes(kMagic);
  w.U32(kFormat);
  w.U32(static_cast<std::uint32_t>(kBackupHeaderBytes));
  w.Bytes(h.fs_id);
  w.U64(h.generation);
  w.U64(h.created);
  w.U64(h.counters.nr);
  w.U64(h.counters.ne);
  w.U64(h.counters.seq);
  w.U64(h.counters.epoch);
  w.U64(h.wrap.kdf.ops);
  w.U64(h.wrap.kdf.mem_bytes);
  w.Bytes(h.wrap.salt);
  w.Bytes(h.wrap.nonce);
  w.Bytes(h.wrap.sealed);
  w.U64(h.padded);
  w.Bytes(h.nonce);
  if (w.pos() != kBackupHeaderBytes) std::abort();  // layout bug in this file
}

// The header of a reconstructed blob, or why it is not one. Nothing here is
// trusted yet (the AEAD checks it later); this only keeps sizes sane.
Result<Header> DecodeHeader(std::span<const std::uint8_t> blob) {
  if (blob.size() < kBackupHeaderBytes) return Status::Integrity("blob shorter than its header");
  ByteReader r(blob.first(kBackupHeaderBytes));
  std::array<std::uint8_t, 8> magic{};
  r.Bytes(magic);
  if (magic != kMagic) return Status::Integrity("not a backup blob (bad magic)");
  const std::uint32_t format = r.U32();
  const std::uint32_t size = r.U32();
  if (format != kFormat || size != kBackupHeaderBytes) {
    return Status::Integrity("backup format " + std::to_string(format) +
                             " is not the one this build reads (" + std::to_string(kFormat) + ")");
  }
  Header h;
  r.Bytes(h.fs_id);
  h.generation = r.U64();
  h.created = r.U64();
  h.counters.nr = r.U64();
  h.counters.ne = r.U64();
  h.counters.seq = r.U64();
  h.counters.epoch = r.U64();
  h.wrap.kdf.ops = r.U64();
  h.wrap.kdf.mem_bytes = r.U64();
  r.Bytes(h.wrap.salt);
  r.Bytes(h.wrap.nonce);
  r.Bytes(h.wrap.sealed);
  h.padded = r.U64();
  r.Bytes(h.nonce);
  if (h.padded < kBackupMinPaddedBytes || !std::has_single_bit(h.padded) ||
      h.padded > kMaxBlobBytes) {
    return Status::Integrity("backup header has an impossible padded size " +
                             std::to_string(h.padded));
  }
  return h;
}

std::uint64_t BlobBytes(std::uint64_t padded) { return kBackupHeaderBytes + padded + kTagBytes; }

using Ad = std::array<std::uint8_t, 16 + 16 + 8 + kBackupHeaderBytes>;

Ad MakeAd(const Header& h, std::span<const std::uint8_t> header_bytes) {
  Ad ad{};
  ByteWriter w(ad);
  w.Bytes(kAdLabel);
  w.Bytes(h.fs_id);
  w.U64(h.generation);
  w.Bytes(header_bytes.first(kBackupHeaderBytes));
  return ad;
}

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

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
constexpr const char* kTempTags[] = {"snapshot", "restore"};

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

// Removes the temporary files beside `state_path` (TempBeside) whose
// writer is gone: the ones whose lock can be taken at once. A writer
// between mkstemp and its flock could lose its file here; it then fails
// cleanly when it reopens it by name.
void RemoveAbandonedTemps(const std::string& state_path) {
  const std::string base = state_path.substr(state_path.find_last_of('/') + 1);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(ParentDir(state_path), ec)) {
    const std::string name = e.path().filename().string();
    bool ours = false;
    for (const char* tag : kTempTags) {
      const std::string prefix = base + "." + tag + "-";
      ours = ours || (name.rfind(prefix, 0) == 0 && name.size() == prefix.size() + 6);
    }
    if (!ours) continue;
    const std::string path = e.path().string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      spdlog::info("removing {}, left by an interrupted backup, restore or refresh", path);
      FileRemover remove(path);
    }
    ::close(fd);
  }
}

Result<Secret> ReadWhole(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::IoError(Errno("cannot open", path));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::IoError(Errno("cannot stat", path));
  }
  Secret out(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return Status::IoError(Errno("cannot read", path));
    }
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return out;
}

Status WriteWholeAndSync(const std::string& path, std::span<const std::uint8_t> bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::IoError(Errno("cannot open", path));
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return Status::IoError(Errno("cannot write", path));
    }
    done += static_cast<std::size_t>(n);
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::IoError(Errno("cannot sync", path));
  return Status::Ok();
}

// The snapshot, and the fields the header repeats, read from the copy
// itself: a passwd or an access committed by another process between this
// client's open and the snapshot is then in both, never in one only.
struct StateSnapshot {
  Secret bytes;
  Counters counters;
  KeyWrap wrap;
  std::uint64_t key_epoch = 0;  // the header's generation: passphrase changes so far
};

// Reads the counters row (client_state.cpp's schema) of the sealed database
// `db` into `snap`.
Status ReadCounters(sqlite3* db, StateSnapshot& snap) {
  // u64 are stored as their two's-complement bit pattern.
  auto u64 = [](sqlite3_stmt* st, int col) {
    return std::bit_cast<std::uint64_t>(sqlite3_column_int64(st, col));
  };
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db, "SELECT nr, ne, seq, epoch FROM counters WHERE id = 0", -1, &st,
                              nullptr);
  bool found = false;
  if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    snap.counters = Counters{u64(st, 0), u64(st, 1), u64(st, 2), u64(st, 3)};
    found = true;
  }
  const std::string err = rc == SQLITE_OK ? "" : sqlite3_errmsg(db);
  sqlite3_finalize(st);
  if (!err.empty()) return Status::IoError("reading the snapshot of the client state: " + err);
  if (!found) return Status::Corruption("the snapshot of the client state lacks its counters");
  return Status::Ok();
}

// A consistent copy of the sealed state file of `state`, in guarded memory:
// its header as it is now (a passwd by another process is in the copy, or
// not at all) and a copy of the database made by SQLite's backup API inside
// one read transaction, sealed page by page into a new file beside the state
// (never in clear on disk). Its counters are read from the copy itself.
Result<StateSnapshot> Snapshot(UnlockedState& state) {
  const std::string& state_path = state.path();
  S3ORAM_ASSIGN_OR_RETURN(std::vector<StateHeader> headers, ReadStateHeader(state_path));
  StateSnapshot snap;
  snap.wrap = headers.front().wrap;
  snap.key_epoch = headers.front().generation;
  RemoveAbandonedTemps(state_path);
  S3ORAM_ASSIGN_OR_RETURN(std::unique_ptr<TempBeside> temp,
                          TempBeside::Create(state_path, "snapshot"));
  const std::string& tmp = temp->path();
  S3ORAM_RETURN_IF_ERROR(WriteSealedCopy(state, headers.front(), tmp)
                             .WithContext("making the snapshot of " + state_path));
  {
    auto copy = OpenSealedDatabase(tmp, state.vfs(), /*create=*/false);
    if (!copy.ok()) return copy.status().WithContext("reading the snapshot of " + state_path);
    const Status counters = ReadCounters(*copy, snap);
    sqlite3_close_v2(*copy);
    S3ORAM_RETURN_IF_ERROR(counters);
  }
  S3ORAM_ASSIGN_OR_RETURN(snap.bytes, ReadWhole(tmp));
  return snap;
}

TransportOptions BulkOptions(std::chrono::milliseconds deadline) {
  // A 4 MiB frame is not resent every two seconds on a slow link.
  return TransportOptions{std::min(deadline, std::chrono::milliseconds(20000)), deadline};
}

std::string ServerName(std::size_t i, const std::string& endpoint) {
  return "server " + std::to_string(i) + " (" + endpoint + ")";
}

// Lagrange weights of the points xs for evaluating at x.
std::vector<Elem> LagrangeAt(std::span<const Elem> xs, Elem x) {
  std::vector<Elem> w(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    Elem num = 1, den = 1;
    for (std::size_t k = 0; k < xs.size(); ++k) {
      if (k == i) continue;
      num = field::Mul(num, field::Sub(x, xs[k]));
      den = field::Mul(den, field::Sub(xs[i], xs[k]));
    }
    w[i] = field::Mul(num, field::Inv(den));
  }
  return w;
}

// All subsets of `items` of size k, in lexicographic order.
void Subsets(const std::vector<std::size_t>& items, std::size_t k, std::size_t from,
             std::vector<std::size_t>& cur, std::vector<std::vector<std::size_t>>& out) {
  if (cur.size() == k) {
    out.push_back(cur);
    return;
  }
  for (std::size_t i = from; i < items.size(); ++i) {
    cur.push_back(items[i]);
    Subsets(items, k, i + 1, cur, out);
    cur.pop_back();
  }
}

std::string SetName(const std::vector<std::size_t>& idx, const std::vector<std::string>& eps) {
  std::string out = "{";
  for (std::size_t j = 0; j < idx.size(); ++j) {
    out += (j ? ", " : "") + std::to_string(idx[j]) + "=" + eps[idx[j]];
  }
  return out + "}";
}

std::string TimeText(std::uint64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  char buf[64];
  if (::gmtime_r(&t, &tm) == nullptr ||
      std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0) {
    return std::to_string(unix_seconds);
  }
  return buf;
}

struct Decoded {
  Header header;
  Secret snapshot;
  std::vector<std::size_t> used;
  std::vector<std::string> warnings;
};

// Step 3 of the restore for one generation (see the file comment).
Result<Decoded> DecodeGeneration(std::uint64_t generation, const wire::FsId& fs_id,
                                 const std::map<std::size_t, std::vector<Elem>>& shares,
                                 std::size_t t, const Secret& passphrase,
                                 const std::vector<std::string>& endpoints) {
  std::vector<std::size_t> holders;
  for (const auto& [i, v] : shares) holders.push_back(i);
  const std::size_t n = shares.begin()->second.size();
  std::vector<std::vector<std::size_t>> choices;
  std::vector<std::size_t> cur;
  Subsets(holders, t + 1, 0, cur, choices);

  // Pass 1, cheap: for each choice of t+1 shares, which other shares lie on
  // its polynomial, and the header it reconstructs (from the first groups
  // only). A damaged share makes some choices reconstruct a garbage header,
  // possibly with absurd Argon2id costs; pass 2 therefore tries the choices
  // in order of increasing KDF cost, so a lying server can at most make the
  // client try cheaper (hence quickly failing) unwraps before the real one.
  struct Candidate {
    std::vector<std::size_t> choice;
    std::vector<Elem> lambda;
    std::vector<std::size_t> mismatched;
    Header header;
  };
  std::vector<Candidate> candidates;
  bool all_consistent = true;
  bool wrong_passphrase_seen = false;
  std::string last_problem;
  const std::size_t header_elems = std::min(n, field::ElemsForBytes(kBackupHeaderBytes));
  for (std::size_t c = 0; c < choices.size(); ++c) {
    Candidate cand;
    cand.choice = choices[c];
    std::vector<Elem> xs;
    std::vector<const Elem*> ptrs;
    for (std::size_t i : cand.choice) {
      xs.push_back(shamir::PartyX(i));
      ptrs.push_back(shares.at(i).data());
    }
    S3ORAM_ASSIGN_OR_RETURN(cand.lambda, shamir::LagrangeAtZero(xs));
    for (std::size_t j : holders) {
      if (std::find(cand.choice.begin(), cand.choice.end(), j) != cand.choice.end()) continue;
      const std::vector<Elem> w = LagrangeAt(xs, shamir::PartyX(j));
      const std::vector<Elem>& actual = shares.at(j);
      for (std::size_t e = 0; e < n; ++e) {
        Elem predicted = 0;
        for (std::size_t k = 0; k < ptrs.size(); ++k) {
          predicted = field::Add(predicted, field::Mul(w[k], ptrs[k][e]));
        }
        if (predicted != actual[e]) {
          cand.mismatched.push_back(j);
          break;
        }
      }
    }
    if (c == 0 && !cand.mismatched.empty()) all_consistent = false;
    std::vector<Elem> head(header_elems);
    shamir::Recover(ptrs, cand.lambda, header_elems, head.data());
    std::vector<std::uint8_t> head_bytes(field::BytesForElems(header_elems));
    const std::string from = "shares of servers " + SetName(cand.choice, endpoints);
    if (!field::Unpack(head, head_bytes)) {
      last_problem = from + " do not reconstruct a valid packing";
      continue;
    }
    auto header = DecodeHeader(head_bytes);
    if (!header.ok()) {
      last_problem = from + ": " + header.status().message();
      continue;
    }
    if (field::ElemsForBytes(BlobBytes(header->padded)) != n ||
        header->generation != generation || header->fs_id != fs_id) {
      last_problem = from + ": the header does not match the stored generation (size, number "
                            "or filesystem id)";
      continue;
    }
    cand.header = *header;
    candidates.push_back(std::move(cand));
  }
  auto cost = [](const Candidate& c) {
    const KdfParams& k = c.header.wrap.kdf;
    return static_cast<double>(k.ops) * static_cast<double>(k.mem_bytes);
  };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&cost](const Candidate& a, const Candidate& b) { return cost(a) < cost(b); });

  // Pass 2: unwrap (once per distinct key wrap: Argon2id is slow), rebuild
  // the whole blob and authenticate it.
  std::vector<std::pair<KeyWrap, std::optional<Secret>>> unwrapped;
  for (const Candidate& cand : candidates) {
    const Header& h = cand.header;
    const std::string from = "shares of servers " + SetName(cand.choice, endpoints);
    auto known = std::find_if(unwrapped.begin(), unwrapped.end(),
                              [&h](const auto& u) { return u.first == h.wrap; });
    if (known == unwrapped.end()) {
      auto key = UnwrapMasterKey(h.wrap, passphrase, fs_id);
      if (key.ok()) {
        unwrapped.emplace_back(h.wrap, std::move(key).value());
      } else {
        // PermissionDenied: wrong passphrase, or a damaged wrap. Anything
        // else (KDF parameters out of range, Argon2id out of memory) comes
        // from a garbage header: this choice's problem, not the restore's.
        if (key.status().code() == Status::Code::kPermissionDenied) {
          wrong_passphrase_seen = true;
        }
        last_problem = from + ": " + key.status().message();
        unwrapped.emplace_back(h.wrap, std::nullopt);
        continue;
      }
      known = unwrapped.end() - 1;
    }
    if (!known->second) continue;
    Secret key = DeriveBackupKey(*known->second);

    std::vector<const Elem*> ptrs;
    for (std::size_t i : cand.choice) ptrs.push_back(shares.at(i).data());
    std::vector<Elem> elems(n);
    shamir::Recover(ptrs, cand.lambda, n, elems.data());
    std::vector<std::uint8_t> blob(field::BytesForElems(n));
    if (!field::Unpack(elems, blob)) {
      last_problem = from + " do not reconstruct a valid packing";
      continue;
    }
    // Bytes past the blob inside the last packing group must be zero.
    if (!std::all_of(blob.begin() + static_cast<std::ptrdiff_t>(BlobBytes(h.padded)), blob.end(),
                     [](std::uint8_t b) { return b == 0; })) {
      last_problem = from + ": non-zero bytes after the blob";
      continue;
    }
    const auto header_bytes = std::span<const std::uint8_t>(blob).first(kBackupHeaderBytes);
    const Ad ad = MakeAd(h, header_bytes);
    Secret padded(static_cast<std::size_t>(h.padded));
    unsigned long long len = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            padded.data(), &len, nullptr, blob.data() + kBackupHeaderBytes, h.padded + kTagBytes,
            ad.data(), ad.size(), h.nonce.data(), key.data()) != 0 ||
        len != h.padded) {
      last_problem = from + " fail authentication";
      continue;
    }
    std::uint64_t size = 0;
    for (std::size_t i = 0; i < kLengthPrefix; ++i) {
      size |= std::uint64_t{padded.data()[i]} << (8 * i);
    }
    if (size == 0 || size > h.padded - kLengthPrefix) {
      // Authenticated, so written by a client with the key: a bug, not tampering.
      return Status::Corruption("backup generation " + std::to_string(generation) +
                                " authenticates but declares an impossible state size");
    }
    Decoded d;
    d.header = h;
    d.snapshot = Secret::CopyOf(padded.bytes().subspan(kLengthPrefix, size));
    d.used = cand.choice;
    for (std::size_t j : cand.mismatched) {
      d.warnings.push_back(ServerName(j, endpoints[j]) + " holds a damaged or altered share of "
                           "backup generation " + std::to_string(generation) +
                           "; restored from the servers " + SetName(cand.choice, endpoints) +
                           " (rewrite its share with s3oram backup-state)");
    }
    return d;
  }
  if (all_consistent && wrong_passphrase_seen) {
    return Status::PermissionDenied("wrong passphrase: it does not unwrap the master key in backup "
                                    "generation " + std::to_string(generation) +
                                    " (whose shares are consistent across the servers)");
  }
  return Status::Integrity(
      "backup generation " + std::to_string(generation) + " failed reconstruction or "
      "authentication with every choice of " + std::to_string(t + 1) + " of the servers " +
      SetName(holders, endpoints) + (all_consistent ? "" : " (their shares disagree)") +
      ": a server holds tampered or damaged data" +
      (wrong_passphrase_seen ? ", or the passphrase is wrong" : "") + "; last problem: " +
      last_problem);
}

std::string OlderMessage(const Header& h, std::size_t server, const std::string& endpoint,
                         const wire::StatusReply& r) {
  return "backup generation " + std::to_string(h.generation) + " (taken " + TimeText(h.created) +
         ", " + std::to_string(h.counters.ne) + " evictions, seq " +
         std::to_string(h.counters.seq) +
         ") is older than the servers: " + ServerName(server, endpoint) + " has applied " +
         std::to_string(r.applied_evictions) + " evictions, seq " + std::to_string(r.applied_seq) +
         ". Blocks written or read after the backup was taken have moved to positions it does "
         "not know, so they cannot be located (reading them fails authentication), and files "
         "changed after it keep their old contents or are missing; blocks an eviction moved "
         "since are lost too. Restore a newer backup if one exists, or pass --force to accept "
         "that loss (with --dry-run, a forced restore lists every file part it would lose and "
         "writes nothing)";
}

}  // namespace

bool IsOlderThanServersRefusal(const Status& st) {
  return st.code() == Status::Code::kFailedPrecondition &&
         st.message().find(") is older than the servers: ") != std::string::npos &&
         st.message().find("pass --force to accept that loss") != std::string::npos;
}

std::vector<Result<std::vector<wire::BackupInfo>>> ListBackups(OramClient& client,
                                                               std::chrono::milliseconds timeout,
                                                               const std::vector<bool>& skip) {
  ServerSet& servers = client.server_set();
  std::vector<Result<std::vector<wire::BackupInfo>>> out;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    if (i < skip.size() && skip[i]) {
      out.emplace_back(Status::Unavailable("not asked while it prepares an eviction"));
      continue;
    }
    wire::Header h = client.NextRequestHeader();
    auto r = servers.ExchangeWith({i}, {wire::Encode(h, wire::BackupListRequest{})}, h,
                                  wire::MessageType::kBackupListReply,
                                  TransportOptions{timeout, timeout});
    if (!r.ok()) {
      out.emplace_back(r.status());
      continue;
    }
    out.emplace_back(std::get<wire::BackupListReply>(r.value()[0].body).backups);
  }
  return out;
}

Result<BackupResult> BackupState(OramClient& client, const BackupProgressFn& progress) {
  if (client.backup_key().empty()) {
    return Status::FailedPrecondition("a state backup needs a client opened with the passphrase");
  }
  // A backup records no eviction under way: a device that restores it must
  // not find the servers one eviction ahead of it.
  S3ORAM_RETURN_IF_ERROR(client.SettleEviction().WithContext("before the state backup"));
  return BackupStateWithKey(client, client.backup_key(), progress);
}

Result<BackupResult> BackupStateWithKey(OramClient& client, const Secret& backup_key,
                                        const BackupProgressFn& progress) {
  random::EnsureInitialized();
  if (backup_key.size() != crypto_aead_xchacha20poly1305_ietf_KEYBYTES) {
    return Status::InvalidArgument("a backup key has 32 bytes");
  }
  const FsConfig& config = client.config();
  const OramParams& params = client.params();
  // 1. Every committed access of this client reaches the file (a no-op for
  //    a read-only client, which has none).
  S3ORAM_RETURN_IF_ERROR(client.Sync().WithContext("syncing the client state before the backup"));

  // 2. Snapshot, with the counters and key wrap it holds.
  S3ORAM_ASSIGN_OR_RETURN(StateSnapshot snap, Snapshot(*client.unlocked_state()));
  Secret snapshot = std::move(snap.bytes);
  const Counters counters = snap.counters;
  const std::uint64_t state_bytes = snapshot.size();
  const std::uint64_t padded_bytes =
      std::max(kBackupMinPaddedBytes,
               std::bit_ceil(std::uint64_t{snapshot.size()} + kLengthPrefix));
  if (padded_bytes > kMaxBlobBytes - kBackupHeaderBytes - kTagBytes) {
    return Status::InvalidArgument("the client state (" + std::to_string(snapshot.size()) +
                                   " bytes) is too large for a backup");
  }

  // 3. The generation: one above the newest generation t + 1 servers (or
  //    this state's backup mark) agree on, and above a lone server's newest
  //    within kMaxCounterLead (an upload that completed only there); every
  //    server must accept it. A server listing a generation further above is
  //    named and refused, never followed: one forged backup header must not
  //    push every server to the last generation
  //    (oramcore/protocol/counter_agreement.h).
  std::vector<std::uint64_t> newest;
  auto lists = ListBackups(client, std::chrono::milliseconds(30000));
  for (std::size_t i = 0; i < lists.size(); ++i) {
    if (!lists[i].ok()) {
      return lists[i].status().WithContext("listing the backups of " +
                                           ServerName(i, client.server_set().endpoint(i)));
    }
    std::uint64_t n = 0;
    for (const auto& b : lists[i].value()) n = std::max(n, b.generation);
    newest.push_back(n);
  }
  const auto& mark = client.backup_mark();
  S3ORAM_ASSIGN_OR_RETURN(const std::uint64_t generation,
                          NextAgreedCounter(newest, mark ? mark->generation : 0, params.threshold,
                                            "backup generation", [&](std::size_t i) {
                                              return ServerName(i, client.server_set().endpoint(i));
                                            }));

  Header h;
  h.fs_id = config.fs_id;
  h.generation = generation;
  h.created = static_cast<std::uint64_t>(std::time(nullptr));
  h.counters = counters;
  h.wrap = snap.wrap;
  h.padded = padded_bytes;
  random::Bytes(h.nonce);

  std::vector<std::uint8_t> blob(BlobBytes(padded_bytes));
  EncodeHeader(h, std::span(blob).first(kBackupHeaderBytes));
  {
    Secret plain(static_cast<std::size_t>(padded_bytes));  // zero-filled: the padding
    for (std::size_t i = 0; i < kLengthPrefix; ++i) {
      plain.data()[i] = static_cast<std::uint8_t>(std::uint64_t{snapshot.size()} >> (8 * i));
    }
    std::copy(snapshot.bytes().begin(), snapshot.bytes().end(), plain.data() + kLengthPrefix);
    snapshot = Secret();  // zeroed now; `plain` holds it until encrypted
    const Ad ad = MakeAd(h, std::span<const std::uint8_t>(blob).first(kBackupHeaderBytes));
    unsigned long long clen = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(blob.data() + kBackupHeaderBytes, &clen,
                                               plain.data(), plain.size(), ad.data(), ad.size(),
                                               nullptr, h.nonce.data(),
                                               backup_key.data());
    if (clen != padded_bytes + kTagBytes) std::abort();
  }

  // 4. Share and upload, chunk by chunk.
  const std::uint64_t total = field::ElemsForBytes(blob.size());
  ServerSet& servers = client.server_set();
  const std::size_t parties = servers.size();
  const std::uint64_t total_bytes = total * parties * sizeof(Elem);
  const TransportOptions opts = BulkOptions(std::chrono::milliseconds(120000));
  std::vector<Elem> packed;
  std::vector<std::vector<Elem>> shares(parties);
  for (std::uint64_t offset = 0, byte_off = 0; offset < total;
       offset += kChunkElems, byte_off += kChunkBytes) {
    const std::size_t bytes = static_cast<std::size_t>(
        std::min<std::uint64_t>(kChunkBytes, blob.size() - byte_off));
    packed.assign(field::ElemsForBytes(bytes), 0);
    field::Pack(std::span<const std::uint8_t>(blob).subspan(byte_off, bytes), packed);
    ShareVector(packed, params.threshold, shares);
    const bool last = offset + packed.size() == total;
    wire::Header hdr = client.NextRequestHeader();
    std::vector<std::vector<std::uint8_t>> frames;
    for (std::size_t i = 0; i < parties; ++i) {
      frames.push_back(wire::Encode(
          hdr, wire::BackupPutRequest{generation, offset, total, last, std::move(shares[i]),
                                      snap.key_epoch}));
      shares[i] = {};
    }
    auto replies = servers.Exchange(frames, hdr, wire::MessageType::kBackupPutReply, opts);
    if (!replies.ok()) {
      return replies.status().WithContext("uploading backup generation " +
                                          std::to_string(generation) +
                                          " (the previous generations are untouched)");
    }
    for (std::size_t i = 0; i < parties; ++i) {
      const auto& rep = std::get<wire::BackupPutReply>(replies.value()[i].body);
      if (rep.generation != generation || rep.received != offset + packed.size()) {
        return Status::Protocol(ServerName(i, servers.endpoint(i)) +
                                " acknowledged a different part of the backup upload");
      }
    }
    if (progress) progress((offset + packed.size()) * parties * sizeof(Elem), total_bytes);
  }
  spdlog::debug("client state backed up as generation {} ({} bytes padded to {})", generation,
                state_bytes, padded_bytes);
  BackupResult result;
  result.generation = generation;
  result.padded_bytes = padded_bytes;
  result.share_elems = total;
  result.state_bytes = state_bytes;
  result.epoch = counters.epoch;
  result.key_epoch = snap.key_epoch;
  return result;
}

namespace {

// One run of RestoreState: what its steps learn and hand on.
struct RestoreRun {
  RestoreRun(const RestoreOptions& opts, const Secret& pass) : o(opts), passphrase(pass) {}
  const RestoreOptions& o;
  const Secret& passphrase;
  std::size_t parties = 0;
  std::size_t t = 0;
  std::unique_ptr<ServerSet> servers;
  TransportOptions small;
  TransportOptions bulk;
  wire::Header h;  // fs_id learned from STATUS; no epoch (reads are not fenced)
  std::vector<wire::StatusReply> status;
  std::optional<wire::FsId> fs_id;
  // Generation -> the servers holding it, with the size of their share.
  std::map<std::uint64_t, std::vector<std::pair<std::size_t, std::uint64_t>>> holders;
  std::uint64_t newest_agreed = 0;
  std::optional<Decoded> decoded;
  // What the restored state takes from the servers (AdoptServerCounters).
  std::uint64_t max_epoch = 0;
  std::uint64_t max_seq = 0;
  std::uint64_t max_evictions = 0;
  bool older = false;  // the servers are past the backup (a forced salvage)
  RestoreReport report;

  wire::Header Next() {
    ++h.seq;
    return h;
  }
  std::string Name(std::size_t i) const { return ServerName(i, o.servers[i]); }
};

// 1. Who serves what: every server's STATUS (one filesystem, index order)
// and the backups each holds.
Status AskEveryServer(RestoreRun& r) {
  r.status.assign(r.parties, wire::StatusReply{});
  for (std::size_t i = 0; i < r.parties; ++i) {
    wire::Header q = r.Next();
    auto reply = r.servers->ExchangeWith({i}, {wire::Encode(q, wire::StatusRequest{})}, q,
                                         wire::MessageType::kStatusReply, r.small);
    if (!reply.ok()) {
      return reply.status().WithContext("restore compares the backup with every server, and " +
                                        r.Name(i) + " did not answer");
    }
    r.status[i] = std::get<wire::StatusReply>(reply.value()[0].body);
    if (!r.status[i].initialized) {
      return Status::FailedPrecondition(r.Name(i) + " holds no filesystem");
    }
    if (r.status[i].server_index != i) {
      return Status::FailedPrecondition(r.Name(i) + " is server " +
                                        std::to_string(r.status[i].server_index) +
                                        ": give the servers in index order");
    }
    if (r.fs_id && *r.fs_id != reply.value()[0].header.fs_id) {
      return Status::FailedPrecondition(r.Name(i) + " serves another filesystem than server 0");
    }
    r.fs_id = reply.value()[0].header.fs_id;
  }
  r.h.fs_id = *r.fs_id;
  if (r.o.replace && r.o.replace->fs_id != *r.fs_id) {
    return Status::FailedPrecondition("the servers of " + r.o.state_path +
                                      " serve another filesystem than the state: nothing was "
                                      "written");
  }
  for (std::size_t i = 0; i < r.parties; ++i) {
    wire::Header q = r.Next();
    auto reply = r.servers->ExchangeWith({i}, {wire::Encode(q, wire::BackupListRequest{})}, q,
                                         wire::MessageType::kBackupListReply, r.small);
    if (!reply.ok()) {
      r.report.warnings.push_back("cannot list the backups of " + r.Name(i) + ": " +
                                  reply.status().ToString());
      continue;
    }
    for (const auto& b : std::get<wire::BackupListReply>(reply.value()[0].body).backups) {
      r.holders[b.generation].emplace_back(i, b.elems);
    }
  }
  return Status::Ok();
}

// Freshness as OramClient::Open judges it (freshness.h), agreed by t + 1.
// A state being replaced must be stale, and everything in it in a backup.
Status JudgeTheStateReplaced(RestoreRun& r) {
  std::vector<ServerFreshness> views(r.parties);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < r.parties; ++i) {
    views[i].store_epoch = r.status[i].epoch;
    views[i].applied_evictions = r.status[i].applied_evictions;
    names.push_back(r.Name(i));
  }
  for (const auto& [g, who] : r.holders) {
    for (const auto& [i, elems] : who) views[i].generations.push_back(g);
  }
  r.newest_agreed = NewestAgreedGeneration(views, r.t + 1);
  if (!r.o.replace) return Status::Ok();
  // Only a state the servers have moved past may be thrown away, and only
  // if everything in it is in a backup: metadata changes (a rename, a
  // chmod) live only in the state until its next backup.
  const RestoreOptions& o = r.o;
  const Counters& mine = o.replace->counters;
  const FreshnessVerdict f = JudgeFreshness(mine, o.replace->mark, views, names, r.t);
  if (!f.stale) {
    return Status::FailedPrecondition(
        o.state_path +
        " is not stale: no other client has used the filesystem since it was "
        "last used (epoch " +
        std::to_string(mine.epoch) + "), so there is nothing newer to fetch; nothing was written");
  }
  const bool clean = o.replace->mark && o.replace->mark->epoch == mine.epoch;
  if (clean || o.discard_local_changes) return Status::Ok();
  return Status::FailedPrecondition(
      o.state_path + " holds changes that are in no backup: its last session (epoch " +
      std::to_string(mine.epoch) +
      ") ended without uploading the state (it was killed, "
      "or its upload failed)" +
      (o.replace->mark
           ? ", and its last upload was generation " + std::to_string(o.replace->mark->generation)
           : std::string()) +
      "; meanwhile " + f.why +
      ". The two devices' changes have diverged and cannot be "
      "merged. To take the newest backup anyway, run `s3oram refresh-state "
      "--discard-local-changes -s " +
      o.state_path +
      "`: the old state is kept beside it "
      "as " +
      o.state_path + ".discarded-<unix time>; nothing was written");
}

// 2. Candidates, newest first: the generations t + 1 servers hold.
Result<std::vector<std::uint64_t>> Candidates(RestoreRun& r) {
  std::vector<std::uint64_t> candidates;
  for (auto it = r.holders.rbegin(); it != r.holders.rend(); ++it) {
    if (r.o.generation != 0 && it->first != r.o.generation) continue;
    if (it->second.size() >= r.t + 1) {
      candidates.push_back(it->first);
    } else {
      r.report.warnings.push_back("backup generation " + std::to_string(it->first) +
                                  " is held by only " + std::to_string(it->second.size()) +
                                  " server(s), fewer than the " + std::to_string(r.t + 1) +
                                  " needed");
    }
  }
  if (!candidates.empty()) return candidates;
  std::vector<std::size_t> all(r.parties);
  for (std::size_t i = 0; i < r.parties; ++i) all[i] = i;
  return Status::NotFound(
      (r.o.generation ? "backup generation " + std::to_string(r.o.generation) + " is not held"
                      : std::string("no backup is held")) +
      " completely by at least " + std::to_string(r.t + 1) + " of the servers " +
      SetName(all, r.o.servers));
}

// Server i's share of generation g, in chunks (progress counted into done_bytes).
Result<std::vector<Elem>> FetchShare(RestoreRun& r, std::uint64_t g, std::size_t i,
                                     std::uint64_t elems, std::uint64_t& done_bytes,
                                     std::uint64_t total_bytes, const BackupProgressFn& progress) {
  std::vector<Elem> share;
  share.reserve(elems);
  while (share.size() < elems) {
    const auto count =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(kChunkElems, elems - share.size()));
    wire::Header q = r.Next();
    S3ORAM_ASSIGN_OR_RETURN(
        auto reply, r.servers->ExchangeWith(
                        {i}, {wire::Encode(q, wire::BackupGetRequest{g, share.size(), count})}, q,
                        wire::MessageType::kBackupGetReply, r.bulk));
    auto& rep = std::get<wire::BackupGetReply>(reply[0].body);
    if (rep.generation != g || rep.total != elems || rep.shares.size() != count) {
      return Status::Protocol("answered a different part of the backup");
    }
    share.insert(share.end(), rep.shares.begin(), rep.shares.end());
    done_bytes += std::uint64_t{count} * sizeof(Elem);
    if (progress) progress(done_bytes, total_bytes);
  }
  return share;
}

// 3. Fetch and decode, falling back to older generations.
Status FetchNewestDecodable(RestoreRun& r, const std::vector<std::uint64_t>& candidates,
                            const BackupProgressFn& progress) {
  Status last_error;
  for (std::uint64_t g : candidates) {
    std::map<std::size_t, std::vector<Elem>> shares;
    std::uint64_t size = 0;
    for (const auto& [i, elems] : r.holders[g]) size = std::max(size, elems);
    const std::uint64_t total_bytes = size * r.holders[g].size() * sizeof(Elem);
    std::uint64_t done_bytes = 0;
    std::string unreadable;  // why each server's share could not be read
    for (const auto& [i, elems] : r.holders[g]) {
      auto share = FetchShare(r, g, i, elems, done_bytes, total_bytes, progress);
      if (!share.ok()) {
        r.report.warnings.push_back("cannot read backup generation " + std::to_string(g) +
                                    " from " + r.Name(i) + ": " + share.status().ToString());
        unreadable += "; " + r.Name(i) + ": " + share.status().ToString();
        continue;
      }
      if (!shares.empty() && shares.begin()->second.size() != share->size()) {
        r.report.warnings.push_back(r.Name(i) + " holds backup generation " + std::to_string(g) +
                                    " with a different size; left out");
        continue;
      }
      shares.emplace(i, std::move(share).value());
    }
    if (shares.size() < r.t + 1) {
      last_error = Status::Unavailable("backup generation " + std::to_string(g) +
                                       " could be read from only " +
                                       std::to_string(shares.size()) + " server(s)" + unreadable);
      r.report.warnings.push_back(last_error.message());
      continue;
    }
    auto d = DecodeGeneration(g, *r.fs_id, shares, r.t, r.passphrase, r.o.servers);
    if (d.ok()) {
      r.decoded = std::move(d).value();
      return Status::Ok();
    }
    if (d.status().code() == Status::Code::kPermissionDenied) return d.status();
    last_error = d.status();
    r.report.warnings.push_back(d.status().ToString());
    if (r.o.generation == 0) spdlog::warn("{}; trying an older generation", d.status().ToString());
  }
  return last_error;
}

// 4. The backup against every server: the counters the restored state takes
// (agreed by t + 1, never one lying server's), and refused if a server lost
// data or, unless forced, is past the backup.
Status CheckAgainstServers(RestoreRun& r) {
  const Header& hd = r.decoded->header;
  const std::size_t t = r.t;
  // The epoch t + 1 servers agree on (one server alone cannot push the
  // restored state's epoch anywhere: the first Open goes above every
  // server's anyway).
  std::vector<std::uint64_t> epochs, seqs, evictions;
  for (const auto& s : r.status) {
    epochs.push_back(s.epoch);
    seqs.push_back(s.applied_seq);
    evictions.push_back(s.applied_evictions);
  }
  r.max_epoch = std::max(hd.counters.epoch, AgreedAtLeast(epochs, t + 1));
  // The sequence and eviction count: agreed by t + 1 servers
  // (oramcore/protocol/counter_agreement.h); a forged eviction count would
  // make the salvage below forget every block.
  auto name = [&](std::size_t i) { return r.Name(i); };
  const AdoptedCounter seq = AdoptCounter(seqs, hd.counters.seq, t);
  S3ORAM_RETURN_IF_ERROR(CounterOutlierError(seq, seqs, t, "applied request sequence", name)
                             .WithContext("restore refused, nothing was written"));
  const AdoptedCounter ne = AdoptCounter(evictions, hd.counters.ne, t);
  // A lone server a whole eviction or more ahead cannot match the others' tree.
  for (std::size_t i = 0; i < evictions.size(); ++i) {
    if (evictions[i] > ne.agreed + 1) {
      return Status::FailedPrecondition(
          name(i) + " reports " + std::to_string(evictions[i]) + " applied evictions, but " +
          std::to_string(t + 1) + " servers agree only on " + std::to_string(ne.agreed) +
          ": its share store cannot match the others' (damaged, replaced or lying); repair it "
          "with s3oram rebuild --server " +
          std::to_string(i) + " --force; nothing was written");
    }
  }
  r.max_seq = seq.value;
  r.max_evictions = ne.value;
  for (std::size_t i = 0; i < r.parties; ++i) {
    const wire::StatusReply& s = r.status[i];
    if (s.applied_evictions < hd.counters.ne) {
      return Status::FailedPrecondition(
          r.Name(i) + " has applied " + std::to_string(s.applied_evictions) +
          " evictions but backup generation " + std::to_string(hd.generation) + " records " +
          std::to_string(hd.counters.ne) + ": that server lost data; nothing was written");
    }
    if (s.applied_evictions > hd.counters.ne || s.applied_seq > hd.counters.seq) {
      const std::string why = OlderMessage(hd, i, r.o.servers[i], s);
      if (!r.o.force) return Status::FailedPrecondition(why + "; nothing was written");
      if (!r.older) r.report.warnings.push_back("forced: " + why);
      r.older = true;
    }
  }
  return Status::Ok();
}

// Salvage of a forced restore of a backup the servers are past: the
// servers' tree is what it is; take its eviction count so the client plans
// the next eviction the servers expect. Root slots and any pending eviction
// of the backup are stale. Every bucket an eviction the backup does not know
// has rewritten (the path to its leaf, root included, and the leaf's
// sibling) may hold other blocks now: the backup's positions there are
// wrong, and keeping them would make the planner's view of the tree false
// (the next eviction refused) or later accesses overwrite live blocks.
// Those blocks are forgotten; their loss is reported block by block
// (RestoreReport::lost_blocks), never read back as zeros.
Status ForgetWhatUnknownEvictionsMoved(RestoreRun& r, ClientStateStore& store, Counters& c,
                                       ClientStateStore::Batch& batch) {
  c.nr = 0;
  S3ORAM_ASSIGN_OR_RETURN(auto pending, store.LoadPending());
  for (const auto& p : pending) batch.RemovePending(p.seq);
  S3ORAM_ASSIGN_OR_RETURN(PositionMap pm, store.LoadPositionMap());
  const TreeGeometry geo = store.config().params.geometry();
  std::set<BucketId> touched;
  const std::uint64_t unknown = r.max_evictions - c.ne;
  for (std::uint64_t k = 0; k < std::min(unknown, geo.num_leaves()); ++k) {
    const LeafId leaf = geo.EvictionLeaf(c.ne + k);
    for (std::uint32_t level = 0; level <= geo.height; ++level) {
      touched.insert(geo.BucketOnPath(leaf, level));
    }
    touched.insert(TreeGeometry::Sibling(leaf));
  }
  for (BucketId b : touched) {
    for (BlockId id : pm.BucketSlots(b)) {
      if (id == kNoBlock) continue;
      batch.ErasePosition(id);
      r.report.lost_blocks.push_back(id);
    }
  }
  std::sort(r.report.lost_blocks.begin(), r.report.lost_blocks.end());
  c.ne = r.max_evictions;
  r.report.warnings.push_back(
      "forced: " + std::to_string(r.report.lost_blocks.size()) +
      " blocks in the buckets rewritten by the " + std::to_string(unknown) +
      " evictions the backup does not know are lost; the eviction counter is set to the "
      "servers' (" +
      std::to_string(r.max_evictions) + ")");
  return Status::Ok();
}

// 5a. The restored state written to `tmp` under a binding nonce of its own,
// adapted to this machine and to the servers' counters.
Status WriteRestoredState(RestoreRun& r, const std::string& tmp) {
  const RestoreOptions& o = r.o;
  const Header& hd = r.decoded->header;
  const std::string which = "backup generation " + std::to_string(hd.generation);
  Secret master;
  {
    // The copy as received carries the binding nonce of the device that
    // uploaded it (and of every other device that restores it): this
    // device's state gets one of its own, so no page or log of another copy
    // ever authenticates in it.
    S3ORAM_ASSIGN_OR_RETURN(std::unique_ptr<TempBeside> received,
                            TempBeside::Create(o.state_path, "restore"));
    S3ORAM_RETURN_IF_ERROR(WriteWholeAndSync(received->path(), r.decoded->snapshot.bytes()));
    r.decoded->snapshot = Secret();
    auto as_received = UnlockedState::Unlock(received->path(), r.passphrase);
    if (!as_received.ok()) {
      return as_received.status().WithContext(which + " authenticates but its state does not open");
    }
    S3ORAM_RETURN_IF_ERROR(
        WriteSealedCopy(**as_received, (*as_received)->header(), tmp).WithContext(which));
    master = Secret::CopyOf((*as_received)->master().bytes());
  }
  auto unlocked = UnlockedState::UnlockWithMaster(tmp, std::move(master));
  if (!unlocked.ok()) {
    return unlocked.status().WithContext(which + " authenticates but its state does not open");
  }
  auto store = ClientStateStore::Open(std::shared_ptr<UnlockedState>(std::move(*unlocked)));
  if (!store.ok()) {
    return store.status().WithContext(which + " authenticates but is not a usable state");
  }
  if ((*store)->config().fs_id != *r.fs_id) {
    return Status::Corruption("the restored state belongs to another filesystem");
  }
  S3ORAM_RETURN_IF_ERROR(
      (*store)->ReplaceMachineConfig(o.servers, o.server_keys, o.client_key_file));
  // The servers have seen epoch max_epoch; the first Open goes one above.
  Counters c = (*store)->counters();
  c.epoch = std::max(c.epoch, r.max_epoch);
  c.seq = std::max(c.seq, r.max_seq);
  ClientStateStore::Batch batch;
  if (r.older && r.max_evictions > c.ne) {
    S3ORAM_RETURN_IF_ERROR(ForgetWhatUnknownEvictionsMoved(r, **store, c, batch));
  }
  batch.SetCounters(c);
  // The restored state equals this generation. A generation chosen older
  // than the newest (--generation) deliberately supersedes the newer ones:
  // marked with the newest, it is not stale by generation.
  batch.SetBackupMark(BackupMark{std::max(hd.generation, r.newest_agreed), c.epoch});
  return (*store)->Commit(batch, /*durable=*/true);
}

// 5b. `tmp` made the state: renamed over the stale state it replaces, or
// linked as a new one (never over a file that appeared meanwhile).
Status PublishRestoredState(RestoreRun& r, const std::string& tmp) {
  const RestoreOptions& o = r.o;
  struct stat wal {};
  if (::stat((tmp + "-wal").c_str(), &wal) == 0 && wal.st_size > 0) {
    return Status::IoError("SQLite left a write-ahead log beside " + tmp +
                           "; the restored state was not published");
  }
  S3ORAM_RETURN_IF_ERROR(SyncFile(tmp));
  if (o.replace) {
    // The stale state's log was folded in and removed (RefreshState); one
    // appearing now would be replayed into the new file.
    for (const char* suffix : {"-wal", "-journal"}) {
      struct stat st {};
      if (::lstat((o.state_path + suffix).c_str(), &st) == 0 && st.st_size > 0) {
        return Status::FailedPrecondition(o.state_path + suffix +
                                          " appeared during the refresh; nothing was replaced");
      }
    }
    if (o.discard_local_changes) {
      // The replaced state, kept: it holds the changes no backup has.
      r.report.discarded_copy =
          o.state_path + ".discarded-" + std::to_string(static_cast<long long>(std::time(nullptr)));
      if (::link(o.state_path.c_str(), r.report.discarded_copy.c_str()) != 0) {
        return Status::IoError(Errno("cannot keep the old state as", r.report.discarded_copy) +
                               "; nothing was replaced");
      }
    }
    FaultPoint("refresh.before_rename");
    if (::rename(tmp.c_str(), o.state_path.c_str()) != 0) {
      return Status::IoError(Errno("cannot replace", o.state_path));
    }
    FaultPoint("refresh.after_rename");
    return SyncDirectory(ParentDir(o.state_path));
  }
  if (::link(tmp.c_str(), o.state_path.c_str()) != 0) {
    if (errno == EEXIST) {
      return Status::AlreadyExists(o.state_path +
                                   " appeared during the restore; not overwriting it");
    }
    return Status::IoError(Errno("cannot create", o.state_path));
  }
  return SyncDirectory(ParentDir(o.state_path));
}

}  // namespace

Result<RestoreReport> RestoreState(const RestoreOptions& o, const Secret& passphrase,
                                   const BackupProgressFn& progress) {
  random::EnsureInitialized();
  RestoreRun r(o, passphrase);
  r.parties = o.servers.size();
  if (r.parties < 3 || o.server_keys.size() != r.parties) {
    return Status::InvalidArgument(
        "give every server of the filesystem (at least 3) with one "
        "public key each (got " +
        std::to_string(r.parties) + " servers, " + std::to_string(o.server_keys.size()) + " keys)");
  }
  // The servers share with degree (l-1)/2 (RequestHandler); a backup shared
  // with a smaller degree is still interpolated exactly from t+1 points.
  r.t = (r.parties - 1) / 2;
  // Refused before anything else: never overwrite a state (or adopt a stale
  // WAL that SQLite would replay into the restored file).
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    struct stat st {};
    if (o.replace && *suffix == '\0') continue;  // the stale state, replaced at the end
    if (::lstat((o.state_path + suffix).c_str(), &st) == 0) {
      return Status::AlreadyExists(o.state_path + suffix +
                                   " already exists; restore refuses to overwrite a state");
    }
  }
  ServerAddresses addresses;
  addresses.endpoints = o.servers;
  addresses.server_keys = o.server_keys;
  addresses.client_key_file = o.client_key_file;
  S3ORAM_ASSIGN_OR_RETURN(r.servers, ConnectOverNetwork(addresses));
  r.small = TransportOptions{std::min(o.timeout, std::chrono::milliseconds(2000)), o.timeout};
  r.bulk = BulkOptions(std::max(o.timeout, std::chrono::milliseconds(30000)));

  S3ORAM_RETURN_IF_ERROR(AskEveryServer(r));
  S3ORAM_RETURN_IF_ERROR(JudgeTheStateReplaced(r));
  S3ORAM_ASSIGN_OR_RETURN(const std::vector<std::uint64_t> candidates, Candidates(r));
  S3ORAM_RETURN_IF_ERROR(FetchNewestDecodable(r, candidates, progress));
  for (auto& w : r.decoded->warnings) r.report.warnings.push_back(std::move(w));
  const Header& hd = r.decoded->header;
  r.report.generation = hd.generation;
  r.report.created_unix = hd.created;
  r.report.counters = hd.counters;
  r.report.state_bytes = r.decoded->snapshot.size();
  r.report.servers_used = r.decoded->used;
  S3ORAM_RETURN_IF_ERROR(CheckAgainstServers(r));

  // 5. Write, adapt, check, publish.
  RemoveAbandonedTemps(o.state_path);
  S3ORAM_ASSIGN_OR_RETURN(std::unique_ptr<TempBeside> temp,
                          TempBeside::Create(o.state_path, "restore"));
  const std::string& tmp = temp->path();
  S3ORAM_RETURN_IF_ERROR(WriteRestoredState(r, tmp));
  {
    ClientOptions copts;
    copts.requests = r.small;
    auto check = OramClient::OpenReadOnly(tmp, passphrase, copts);
    if (!check.ok()) {
      return check.status().WithContext(
          "the restored state does not open against the servers; "
          "nothing was written");
    }
  }
  if (o.preview) S3ORAM_RETURN_IF_ERROR(o.preview(tmp, r.report));
  if (o.dry_run) return std::move(r.report);  // `temp` removes the restored copy
  S3ORAM_RETURN_IF_ERROR(PublishRestoredState(r, tmp));
  return std::move(r.report);  // a new state: `temp` unlinks the temporary name
}

Result<RestoreReport> RefreshState(const std::string& state_path, const Secret& passphrase,
                                   std::chrono::milliseconds timeout,
                                   const BackupProgressFn& progress,
                                   bool discard_local_changes) {
  // Held until the new file is in place, as OramClient::Open holds it: a
  // mount or fsck of this state waits for the refresh, not the other way.
  const int lock_fd = ::open(state_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock_fd < 0) return Status::IoError(Errno("cannot open", state_path));
  struct LockCloser {
    int fd;
    ~LockCloser() { ::close(fd); }
  } lock_closer{lock_fd};
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    return Status::LeaseHeld("the client state " + state_path +
                             " is in use by another process on this machine (a mounted "
                             "s3oramfs, fsck, rebuild...): unmount or stop it first");
  }
  RestoreOptions o;
  o.state_path = state_path;
  o.timeout = timeout;
  {
    // The passphrase is checked here first; closing the last connection
    // folds the log into the file and removes it.
    S3ORAM_ASSIGN_OR_RETURN(std::unique_ptr<UnlockedState> unlocked,
                            UnlockedState::Unlock(state_path, passphrase));
    S3ORAM_ASSIGN_OR_RETURN(
        auto store, ClientStateStore::Open(std::shared_ptr<UnlockedState>(std::move(unlocked))));
    const FsConfig& config = store->config();
    o.servers = config.servers;
    o.server_keys = config.server_keys;
    o.client_key_file = config.client_key_file;
    o.replace = RestoreOptions::Replace{config.fs_id, store->counters(), store->backup_mark()};
    o.discard_local_changes = discard_local_changes;
  }
  struct stat wal {};
  if (::stat((state_path + "-wal").c_str(), &wal) == 0 && wal.st_size > 0) {
    return Status::FailedPrecondition(state_path +
                                      "-wal is still there after closing the state "
                                      "(another process has it open?); nothing was replaced");
  }
  return RestoreState(o, passphrase, progress);
}

}  // namespace s3oram
