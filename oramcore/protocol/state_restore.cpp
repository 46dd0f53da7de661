// The restore side of the state backup (state_backup.h: RestoreState,
// RefreshState): which generation, fetched from which servers, checked
// against every server, written under a binding nonce of this device's own,
// and published without ever overwriting a state. The format of a
// generation and the upload are in state_backup.cpp.
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
#include "oramcore/protocol/state_backup.h"
#include "oramcore/protocol/state_backup_internal.h"
#include "oramcore/wire/transport.h"

namespace s3oram {

using namespace backup_internal;

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
                                       " could be read from only " + std::to_string(shares.size()) +
                                       " server(s)" + unreadable);
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
  // The servers share with degree kPrivacyThreshold (RequestHandler).
  r.t = kPrivacyThreshold;
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
                                   const BackupProgressFn& progress, bool discard_local_changes) {
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
