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
#include "oramcore/protocol/state_backup_internal.h"
#include "oramcore/wire/transport.h"

namespace s3oram {
namespace backup_internal {

using field::Elem;

static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == 32);
static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == 24);

constexpr std::array<std::uint8_t, 8> kMagic = {'S', '3', 'O', 'R', 'B', 'A', 'K', '1'};
constexpr std::uint32_t kFormat = 1;
constexpr std::array<std::uint8_t, 16> kAdLabel = {'s', '3', 'o', 'r', 'a', 'm', ' ', 'b',
                                                   'a', 'c', 'k', 'u', 'p', ' ', 'v', '1'};
constexpr std::size_t kTagBytes = crypto_aead_xchacha20poly1305_ietf_ABYTES;
constexpr std::size_t kLengthPrefix = 8;
constexpr std::size_t kChunkBytes = kChunkElems / field::kPackElems * field::kPackBytes;
// The largest padded plaintext whose blob fits the servers' cap.
constexpr std::uint64_t kMaxBlobBytes = field::BytesForElems(wire::kMaxBackupElems);

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

// Step 3 of the restore for one generation (see the file comment), in two
// passes over the choices of t + 1 of the servers holding a share.
class GenerationDecoder {
 public:
  GenerationDecoder(std::uint64_t generation, const wire::FsId& fs_id,
                    const std::map<std::size_t, std::vector<Elem>>& shares, std::size_t t,
                    const std::vector<std::string>& endpoints)
      : generation_(generation), fs_id_(fs_id), shares_(shares), t_(t), endpoints_(endpoints) {
    for (const auto& [i, v] : shares) holders_.push_back(i);
    n_ = shares.begin()->second.size();
  }

  Result<Decoded> Decode(const Secret& passphrase) {
    S3ORAM_ASSIGN_OR_RETURN(std::vector<Candidate> candidates, Candidates());
    // Pass 2: unwrap (once per distinct key wrap: Argon2id is slow), rebuild
    // the whole blob and authenticate it.
    for (const Candidate& cand : candidates) {
      const std::optional<Secret>* master = Unwrap(cand, passphrase);
      if (master == nullptr || !*master) continue;
      S3ORAM_ASSIGN_OR_RETURN(std::optional<Decoded> d, Open(cand, DeriveBackupKey(**master)));
      if (d) return std::move(*d);
    }
    if (all_consistent_ && wrong_passphrase_seen_) {
      return Status::PermissionDenied(
          "wrong passphrase: it does not unwrap the master key in "
          "backup generation " +
          std::to_string(generation_) + " (whose shares are consistent across the servers)");
    }
    return Status::Integrity("backup generation " + std::to_string(generation_) +
                             " failed reconstruction or "
                             "authentication with every choice of " +
                             std::to_string(t_ + 1) + " of the servers " +
                             SetName(holders_, endpoints_) +
                             (all_consistent_ ? "" : " (their shares disagree)") +
                             ": a server holds tampered or damaged data" +
                             (wrong_passphrase_seen_ ? ", or the passphrase is wrong" : "") +
                             "; last problem: " + last_problem_);
  }

 private:
  struct Candidate {
    std::vector<std::size_t> choice;
    std::vector<Elem> lambda;
    std::vector<std::size_t> mismatched;
    Header header;
  };

  std::string From(const std::vector<std::size_t>& choice) const {
    return "shares of servers " + SetName(choice, endpoints_);
  }

  // Pass 1, cheap: for each choice of t+1 shares, which other shares lie on
  // its polynomial, and the header it reconstructs (from the first groups
  // only). A damaged share makes some choices reconstruct a garbage header,
  // possibly with absurd Argon2id costs; pass 2 therefore tries the choices
  // in order of increasing KDF cost, so a lying server can at most make the
  // client try cheaper (hence quickly failing) unwraps before the real one.
  Result<std::vector<Candidate>> Candidates() {
    std::vector<std::vector<std::size_t>> choices;
    std::vector<std::size_t> cur;
    Subsets(holders_, t_ + 1, 0, cur, choices);
    std::vector<Candidate> candidates;
    for (std::size_t c = 0; c < choices.size(); ++c) {
      Candidate cand;
      cand.choice = choices[c];
      std::vector<Elem> xs;
      for (std::size_t i : cand.choice) xs.push_back(shamir::PartyX(i));
      S3ORAM_ASSIGN_OR_RETURN(cand.lambda, shamir::LagrangeAtZero(xs));
      cand.mismatched = OffThePolynomial(cand.choice, xs);
      if (c == 0 && !cand.mismatched.empty()) all_consistent_ = false;
      if (std::optional<Header> header = HeaderOf(cand)) {
        cand.header = *header;
        candidates.push_back(std::move(cand));
      }
    }
    auto cost = [](const Candidate& c) {
      const KdfParams& k = c.header.wrap.kdf;
      return static_cast<double>(k.ops) * static_cast<double>(k.mem_bytes);
    };
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&cost](const Candidate& a, const Candidate& b) { return cost(a) < cost(b); });
    return candidates;
  }

  // The holders outside `choice` whose shares do not lie on the polynomial
  // the shares of `choice` (at `xs`) define.
  std::vector<std::size_t> OffThePolynomial(const std::vector<std::size_t>& choice,
                                            const std::vector<Elem>& xs) const {
    std::vector<std::size_t> mismatched;
    for (std::size_t j : holders_) {
      if (std::find(choice.begin(), choice.end(), j) != choice.end()) continue;
      const std::vector<Elem> w = LagrangeAt(xs, shamir::PartyX(j));
      const std::vector<Elem>& actual = shares_.at(j);
      for (std::size_t e = 0; e < n_; ++e) {
        Elem predicted = 0;
        for (std::size_t k = 0; k < choice.size(); ++k) {
          predicted = field::Add(predicted, field::Mul(w[k], shares_.at(choice[k])[e]));
        }
        if (predicted != actual[e]) {
          mismatched.push_back(j);
          break;
        }
      }
    }
    return mismatched;
  }

  // The header `cand`'s shares reconstruct, if it decodes and matches this
  // generation (else nullopt, the problem noted).
  std::optional<Header> HeaderOf(const Candidate& cand) {
    const std::size_t header_elems = std::min(n_, field::ElemsForBytes(kBackupHeaderBytes));
    std::vector<Elem> head(header_elems);
    shamir::Recover(Pointers(cand.choice), cand.lambda, header_elems, head.data());
    std::vector<std::uint8_t> head_bytes(field::BytesForElems(header_elems));
    if (!field::Unpack(head, head_bytes)) {
      last_problem_ = From(cand.choice) + " do not reconstruct a valid packing";
      return std::nullopt;
    }
    auto header = DecodeHeader(head_bytes);
    if (!header.ok()) {
      last_problem_ = From(cand.choice) + ": " + header.status().message();
      return std::nullopt;
    }
    if (field::ElemsForBytes(BlobBytes(header->padded)) != n_ ||
        header->generation != generation_ || header->fs_id != fs_id_) {
      last_problem_ = From(cand.choice) +
                      ": the header does not match the stored generation "
                      "(size, number or filesystem id)";
      return std::nullopt;
    }
    return *header;
  }

  std::vector<const Elem*> Pointers(const std::vector<std::size_t>& choice) const {
    std::vector<const Elem*> ptrs;
    for (std::size_t i : choice) ptrs.push_back(shares_.at(i).data());
    return ptrs;
  }

  // The master key `cand`'s key wrap gives under `passphrase`, unwrapped once
  // per distinct wrap (nullopt inside: it did not unwrap).
  const std::optional<Secret>* Unwrap(const Candidate& cand, const Secret& passphrase) {
    const Header& h = cand.header;
    auto known = std::find_if(unwrapped_.begin(), unwrapped_.end(),
                              [&h](const auto& u) { return u.first == h.wrap; });
    if (known != unwrapped_.end()) return &known->second;
    auto key = UnwrapMasterKey(h.wrap, passphrase, fs_id_);
    if (key.ok()) {
      unwrapped_.emplace_back(h.wrap, std::move(key).value());
    } else {
      // PermissionDenied: wrong passphrase, or a damaged wrap. Anything
      // else (KDF parameters out of range, Argon2id out of memory) comes
      // from a garbage header: this choice's problem, not the restore's.
      if (key.status().code() == Status::Code::kPermissionDenied) wrong_passphrase_seen_ = true;
      last_problem_ = From(cand.choice) + ": " + key.status().message();
      unwrapped_.emplace_back(h.wrap, std::nullopt);
    }
    return &unwrapped_.back().second;
  }

  // The whole blob `cand`'s shares reconstruct, authenticated under
  // `backup_key`: the snapshot, or nullopt (the problem noted).
  Result<std::optional<Decoded>> Open(const Candidate& cand, const Secret& backup_key) {
    const Header& h = cand.header;
    std::vector<Elem> elems(n_);
    shamir::Recover(Pointers(cand.choice), cand.lambda, n_, elems.data());
    std::vector<std::uint8_t> blob(field::BytesForElems(n_));
    if (!field::Unpack(elems, blob)) {
      last_problem_ = From(cand.choice) + " do not reconstruct a valid packing";
      return std::optional<Decoded>();
    }
    // Bytes past the blob inside the last packing group must be zero.
    if (!std::all_of(blob.begin() + static_cast<std::ptrdiff_t>(BlobBytes(h.padded)), blob.end(),
                     [](std::uint8_t b) { return b == 0; })) {
      last_problem_ = From(cand.choice) + ": non-zero bytes after the blob";
      return std::optional<Decoded>();
    }
    const auto header_bytes = std::span<const std::uint8_t>(blob).first(kBackupHeaderBytes);
    const Ad ad = MakeAd(h, header_bytes);
    Secret padded(static_cast<std::size_t>(h.padded));
    unsigned long long len = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            padded.data(), &len, nullptr, blob.data() + kBackupHeaderBytes, h.padded + kTagBytes,
            ad.data(), ad.size(), h.nonce.data(), backup_key.data()) != 0 ||
        len != h.padded) {
      last_problem_ = From(cand.choice) + " fail authentication";
      return std::optional<Decoded>();
    }
    std::uint64_t size = 0;
    for (std::size_t i = 0; i < kLengthPrefix; ++i) {
      size |= std::uint64_t{padded.data()[i]} << (8 * i);
    }
    if (size == 0 || size > h.padded - kLengthPrefix) {
      // Authenticated, so written by a client with the key: a bug, not tampering.
      return Status::Corruption("backup generation " + std::to_string(generation_) +
                                " authenticates but declares an impossible state size");
    }
    Decoded d;
    d.header = h;
    d.snapshot = Secret::CopyOf(padded.bytes().subspan(kLengthPrefix, size));
    d.used = cand.choice;
    for (std::size_t j : cand.mismatched) {
      d.warnings.push_back(ServerName(j, endpoints_[j]) +
                           " holds a damaged or altered share of "
                           "backup generation " +
                           std::to_string(generation_) + "; restored from the servers " +
                           SetName(cand.choice, endpoints_) +
                           " (rewrite its share with s3oram backup-state)");
    }
    return std::optional<Decoded>(std::move(d));
  }

  const std::uint64_t generation_;
  const wire::FsId& fs_id_;
  const std::map<std::size_t, std::vector<Elem>>& shares_;
  const std::size_t t_;
  const std::vector<std::string>& endpoints_;
  std::vector<std::size_t> holders_;
  std::size_t n_ = 0;  // elements of each share
  bool all_consistent_ = true;
  bool wrong_passphrase_seen_ = false;
  std::string last_problem_;
  std::vector<std::pair<KeyWrap, std::optional<Secret>>> unwrapped_;
};

Result<Decoded> DecodeGeneration(std::uint64_t generation, const wire::FsId& fs_id,
                                 const std::map<std::size_t, std::vector<Elem>>& shares,
                                 std::size_t t, const Secret& passphrase,
                                 const std::vector<std::string>& endpoints) {
  return GenerationDecoder(generation, fs_id, shares, t, endpoints).Decode(passphrase);
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

}  // namespace backup_internal

using namespace backup_internal;

bool IsOlderThanServersRefusal(const Status& st) {
  return st.code() == Status::Code::kFailedPrecondition &&
         st.message().find(") is older than the servers: ") != std::string::npos &&
         st.message().find("pass --force to accept that loss") != std::string::npos;
}

std::vector<Result<std::vector<wire::BackupInfo>>> ListBackups(ClientSession& session,
                                                               std::chrono::milliseconds timeout) {
  auto answers = session.AskEveryServer(
      {{wire::BackupListRequest{}, wire::MessageType::kBackupListReply}}, timeout);
  std::vector<Result<std::vector<wire::BackupInfo>>> out;
  for (auto& answer : answers[0]) {
    if (!answer.reply.ok()) {
      out.emplace_back(answer.reply.status());
      continue;
    }
    out.emplace_back(std::get<wire::BackupListReply>(answer.reply.value().body).backups);
  }
  return out;
}

Result<BackupResult> BackupState(OramClient& client, const BackupProgressFn& progress) {
  const Secret& backup_key = client.session().backup_key();
  if (backup_key.empty()) {
    return Status::FailedPrecondition("a state backup needs a client opened with the passphrase");
  }
  // A backup records no eviction under way: a device that restores it must
  // not find the servers one eviction ahead of it.
  S3ORAM_RETURN_IF_ERROR(client.SettleEviction().WithContext("before the state backup"));
  return BackupStateWithKey(client, backup_key, progress);
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
  auto lists = ListBackups(client.session(), std::chrono::milliseconds(30000));
  for (std::size_t i = 0; i < lists.size(); ++i) {
    if (client.session().excluded(i)) {
      // Its list, if it answered, still counts: a generation it holds must
      // not be reused.
      std::uint64_t n = 0;
      if (lists[i].ok()) {
        for (const auto& b : lists[i].value()) n = std::max(n, b.generation);
      }
      newest.push_back(n);
      continue;
    }
    if (!lists[i].ok()) {
      return lists[i].status().WithContext("listing the backups of " +
                                           ServerName(i, client.session().servers().endpoint(i)));
    }
    std::uint64_t n = 0;
    for (const auto& b : lists[i].value()) n = std::max(n, b.generation);
    newest.push_back(n);
  }
  const auto& mark = client.backup_mark();
  S3ORAM_ASSIGN_OR_RETURN(
      const std::uint64_t generation,
      NextAgreedCounter(
          newest, mark ? mark->generation : 0, params.threshold, "backup generation",
          [&](std::size_t i) { return ServerName(i, client.session().servers().endpoint(i)); }));

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
  // To the servers that take part: an excluded one keeps its older
  // generations (a restore takes the newest that t + 1 servers hold).
  ServerSet& servers = client.session().servers();
  const std::vector<std::size_t>& to = client.session().participants();
  const std::size_t parties = servers.size();
  const std::uint64_t total_bytes = total * to.size() * sizeof(Elem);
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
    wire::Header hdr = client.session().NextHeader();
    std::vector<std::vector<std::uint8_t>> frames;
    for (std::size_t i : to) {
      frames.push_back(
          wire::Encode(hdr, wire::BackupPutRequest{generation, offset, total, last,
                                                   std::move(shares[i]), snap.key_epoch}));
    }
    for (auto& s : shares) s = {};
    auto replies = servers.ExchangeWith(to, frames, hdr, wire::MessageType::kBackupPutReply, opts);
    if (!replies.ok()) {
      return replies.status().WithContext("uploading backup generation " +
                                          std::to_string(generation) +
                                          " (the previous generations are untouched)");
    }
    for (std::size_t k = 0; k < to.size(); ++k) {
      const auto& rep = std::get<wire::BackupPutReply>(replies.value()[k].body);
      if (rep.generation != generation || rep.received != offset + packed.size()) {
        return Status::Protocol(ServerName(to[k], servers.endpoint(to[k])) +
                                " acknowledged a different part of the backup upload");
      }
    }
    if (progress) progress((offset + packed.size()) * to.size() * sizeof(Elem), total_bytes);
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

}  // namespace s3oram
