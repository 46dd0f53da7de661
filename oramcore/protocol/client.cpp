#include "oramcore/protocol/client.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <thread>

#include "oramcore/base/fault_point.h"
#include "oramcore/base/random.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/crypto/subkeys.h"
#include "oramcore/math/field.h"
#include "oramcore/math/random_elems.h"
#include "oramcore/math/shamir.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/protocol/client_internal.h"
#include "oramcore/protocol/consistency.h"
#include "oramcore/protocol/counter_agreement.h"
#include "oramcore/protocol/lease_holder.h"
#include "oramcore/wire/message_limits.h"

namespace s3oram {

using field::Elem;
using namespace client_internal;

namespace {

// Every stale-state refusal names the way out (RefreshState).
std::string StaleStateFix(const std::string& state_path) {
  return "Another device has used this filesystem since; fetch the newest state backup from "
         "the servers with `s3oram refresh-state -s " +
         state_path + "`, or mount with -o refresh_state";
}

// Opens a degree-t sharing of m elements (one pointer per party) into out,
// after checking every element's shares against the code's parity checks.
// False, out unspecified, if some element's shares do not lie on one
// polynomial of degree t.
bool OpenChecked(std::span<const Elem* const> shares,
                 const std::vector<std::vector<Elem>>& parity_rows,
                 const std::vector<Elem>& lambda, std::size_t m, Elem* out) {
  for (const auto& row : parity_rows) {
    for (std::size_t c = 0; c < m; ++c) {
      Elem acc = 0;
      for (std::size_t i = 0; i < shares.size(); ++i) {
        acc = field::Add(acc, field::Mul(row[i], shares[i][c]));
      }
      if (acc != 0) return false;
    }
  }
  shamir::Recover(shares, lambda, m, out);
  return true;
}

wire::StoreShape ShapeOf(const OramParams& p) {
  return wire::StoreShape{p.height, p.bucket_size, static_cast<std::uint32_t>(p.elems_per_slot())};
}

}  // namespace

OramClient::~OramClient() {
  // As Close(): a failed flush stays logged for the next Open.
  if (!pending_roots_.empty() && lease_held_ && !fenced_) {
    if (Status st = FlushPendingRoots(); !st.ok()) {
      spdlog::warn("the last accesses' root writes stay pending in the state: {}", st.ToString());
    }
  }
  if (Status st = SettleEviction(); !st.ok()) {
    spdlog::warn("eviction {} stays under way in the state (the next Open finishes it): {}",
                 counters_.ne, st.ToString());
  }
  if (lease_held_ && !fenced_) ReleaseLease();
  if (state_lock_fd_ >= 0) ::close(state_lock_fd_);
}

const FsConfig& OramClient::config() const { return store_->config(); }
const Counters& OramClient::counters() const { return counters_; }
const TransportStats& OramClient::transport_stats() const { return servers_->stats(); }
const std::string& OramClient::state_path() const { return store_->path(); }

std::string OramClient::ServerSetName() const {
  std::string out = "{";
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    out += (i ? ", " : "") + std::to_string(i) + "=" + servers_->endpoint(i);
  }
  return out + "}";
}

Result<wire::Header> OramClient::NextMutationHeader() {
  // The rollback rule (OpenImpl): no server may apply a request more than
  // one seq beyond what the state holds on disk. Every access commits
  // durably, so this commits only where several requests go between two
  // commits (an eviction's checks before its COMMIT, a retry after a
  // failure).
  if (!read_only_ && counters_.seq > store_->durable_seq()) {
    Counters c = store_->counters();
    c.seq = counters_.seq;
    ClientStateStore::Batch b;
    b.SetCounters(c);
    S3ORAM_RETURN_IF_ERROR(store_->Commit(b, /*durable=*/true));
  }
  return NextHeader();
}

wire::Header OramClient::NextHeader() {
  wire::Header h;
  h.fs_id = config().fs_id;
  h.epoch = counters_.epoch;
  h.seq = ++counters_.seq;
  return h;
}

Status OramClient::Initialize(const std::string& state_path, const FsConfig& config_in,
                              const Secret& passphrase, const KdfParams& kdf,
                              bool overwrite_servers) {
  FsConfig config = config_in;
  S3ORAM_RETURN_IF_ERROR(ValidateKdfParams(kdf));
  S3ORAM_RETURN_IF_ERROR(ValidateParams(config.params, config.allow_unsafe));
  if (config.servers.size() != config.params.parties) {  // checked again at Open
    return Status::InvalidArgument("need exactly " + std::to_string(config.params.parties) +
                                   " server endpoints, got " +
                                   std::to_string(config.servers.size()));
  }
  struct stat st;
  if (::stat(state_path.c_str(), &st) == 0) {
    return Status::AlreadyExists("client state " + state_path + " already exists");
  }
  bool zero_id = std::all_of(config.fs_id.begin(), config.fs_id.end(),
                             [](std::uint8_t b) { return b == 0; });
  if (zero_id) random::Bytes(config.fs_id);
  Secret master = NewMasterKey();
  S3ORAM_ASSIGN_OR_RETURN(config.key_wrap, WrapMasterKey(master, passphrase, config.fs_id, kdf));

  if (config.server_keys.size() != config.servers.size()) {
    return Status::InvalidArgument("need one CURVE public key per server (" +
                                   std::to_string(config.servers.size()) + " servers, " +
                                   std::to_string(config.server_keys.size()) + " keys)");
  }
  S3ORAM_ASSIGN_OR_RETURN(CurveKeypair client_key, LoadCurveKeypair(config.client_key_file));
  S3ORAM_ASSIGN_OR_RETURN(
      auto servers,
      ServerSet::Connect(config.servers, config.server_keys, client_key,
                         wire::LimitsFor(ShapeOf(config.params), config.params.parties).reply_bytes));
  wire::Header header;
  header.fs_id = config.fs_id;
  header.epoch = 1;
  header.seq = 1;
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::size_t i = 0; i < config.servers.size(); ++i) {
    wire::InitRequest req;
    req.server_index = static_cast<std::uint32_t>(i);
    req.shape = ShapeOf(config.params);
    req.overwrite = overwrite_servers;
    frames.push_back(wire::Encode(header, req));
  }
  ClientOptions defaults;
  auto replies =
      servers->Exchange(frames, header, wire::MessageType::kInitReply, defaults.requests);
  if (!replies.ok()) return replies.status().WithContext("initialising servers");

  S3ORAM_ASSIGN_OR_RETURN(auto store,
                          ClientStateStore::Create(state_path, config, std::move(master)));
  ClientStateStore::Batch batch;
  Counters c;
  c.epoch = 1;
  c.seq = 1;
  batch.SetCounters(c);
  return store->Commit(batch, /*durable=*/true);
}

Result<std::unique_ptr<OramClient>> OramClient::Open(const std::string& state_path,
                                                     const Secret& passphrase,
                                                     ClientOptions options) {
  return OpenImpl(state_path, passphrase, /*read_only=*/false, options);
}

Result<std::unique_ptr<OramClient>> OramClient::OpenReadOnly(const std::string& state_path,
                                                             const Secret& passphrase,
                                                             ClientOptions options) {
  return OpenImpl(state_path, passphrase, /*read_only=*/true, options);
}

const std::shared_ptr<UnlockedState>& OramClient::unlocked_state() const {
  return store_->unlocked();
}

Result<std::unique_ptr<OramClient>> OramClient::OpenImpl(const std::string& state_path,
                                                         const Secret& passphrase, bool read_only,
                                                         ClientOptions options) {
  random::EnsureInitialized();
  std::unique_ptr<OramClient> client(new OramClient());
  client->options_ = options;
  client->read_only_ = read_only;
  const bool allow_stale = read_only && options.allow_stale;
  if (!read_only) {
    // One writer per state file on this machine, whatever the servers say:
    // two processes sharing one SQLite state would corrupt each other. The
    // lock dies with the process (a crash leaves nothing to clean up).
    client->state_lock_fd_ = ::open(state_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (client->state_lock_fd_ >= 0 && ::flock(client->state_lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      return Status::LeaseHeld("the client state " + state_path +
                               " is in use by another process on this machine (a mounted "
                               "s3oramfs, fsck, rebuild...): unmount or stop it first");
    }
  }
  // Before anything changes (the epoch): a wrong passphrase leaves no trace.
  S3ORAM_ASSIGN_OR_RETURN(std::unique_ptr<UnlockedState> unlocked,
                          UnlockedState::Unlock(state_path, passphrase));
  if (!read_only && !unlocked->current_format()) {
    // A state of format 1 authenticates its pages but not its log's frame
    // headers, under a key shared by every copy: rewrite it once.
    S3ORAM_RETURN_IF_ERROR(unlocked->Rebind(&client->state_lock_fd_)
                               .WithContext("converting " + state_path + " to state format " +
                                            std::to_string(kStateFormat)));
    spdlog::info("{}: converted to state format {} (every log frame authenticated, a key of "
                 "its own)",
                 state_path, kStateFormat);
  }
  std::shared_ptr<UnlockedState> shared(std::move(unlocked));
  client->sealer_ = std::make_unique<BlockSealer>(shared->master(), shared->header().fs_id);
  client->backup_key_ = DeriveBackupKey(shared->master());  // for BackupState
  S3ORAM_ASSIGN_OR_RETURN(client->store_, ClientStateStore::Open(std::move(shared)));
  const FsConfig& config = client->store_->config();
  S3ORAM_RETURN_IF_ERROR(ValidateParams(config.params, config.allow_unsafe)
                             .WithContext("parameters in " + state_path));
  const auto data_elems = static_cast<std::size_t>(config.params.data_elems_per_slot());
  if (config.params.mac_elems > 0) {
    client->mac_ = MakeShareMacKey(client->store_->share_mac_secrets(), data_elems);
  }
  if (client->store_->rekey()) {
    // A rotation under way: blocks not re-sealed yet are under the previous key.
    client->sealer_->AcceptPrevious(client->store_->rekey_old_master());
    if (client->mac_) {
      const ShareMacSecrets& previous = *client->store_->rekey_old_share_mac();
      client->previous_mac_ = MakeShareMacKey(previous, data_elems);
      client->rotation_shared_half_ = SharedHalf(previous, client->store_->share_mac_secrets());
    }
  }
  S3ORAM_ASSIGN_OR_RETURN(PositionMap pm, client->store_->LoadPositionMap());
  client->pm_ = std::make_unique<PositionMap>(std::move(pm));
  client->counters_ = client->store_->counters();
  client->pacer_ = EvictionPacer(std::chrono::milliseconds(client->store_->eviction_estimate_ms()));
  if (config.servers.size() != config.params.parties) {
    return Status::Corruption("state lists " + std::to_string(config.servers.size()) +
                              " servers for " + std::to_string(config.params.parties) + " parties");
  }
  if (!read_only) {
    // Two rounds of root writes (background eviction, RootCopies).
    S3ORAM_ASSIGN_OR_RETURN(
        client->root_copies_,
        RootCopies::Open(state_path + ".roots", 2 * std::size_t{config.params.evict_rate},
                         static_cast<std::size_t>(config.params.elems_per_slot())));
  }
  S3ORAM_ASSIGN_OR_RETURN(CurveKeypair client_key, LoadCurveKeypair(config.client_key_file));
  S3ORAM_ASSIGN_OR_RETURN(
      client->servers_,
      ServerSet::Connect(config.servers, config.server_keys, client_key,
                         wire::LimitsFor(ShapeOf(config.params), config.params.parties).reply_bytes));

  std::vector<Elem> xs;
  for (std::size_t i = 0; i < config.params.parties; ++i) xs.push_back(shamir::PartyX(i));
  S3ORAM_ASSIGN_OR_RETURN(client->lambda_, shamir::LagrangeAtZero(xs));
  S3ORAM_ASSIGN_OR_RETURN(client->parity_rows_, shamir::ParityChecks(xs, config.params.threshold));

  // Every server must serve this filesystem with this shape.
  auto reports = client->QueryServers(options.requests.deadline);
  std::vector<std::size_t> behind;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    if (!r.status.ok()) return r.status;
    if (!r.reply.initialized) {
      // A server being rebuilt, or one that lost its disk, says so in its
      // STATUS; name the command that fixes each case (oramcore/protocol/rebuild.h).
      const std::string who = "server " + std::to_string(i) + " (" + r.endpoint + ")";
      if (r.reply.rebuilding) {
        return Status::FailedPrecondition(who + " is being rebuilt; finish it with s3oram rebuild "
                                          "--server " + std::to_string(i));
      }
      return Status::FailedPrecondition(who + " holds no filesystem; run s3oram init, or s3oram "
                                        "rebuild --server " + std::to_string(i) +
                                        " if it lost its data");
    }
    if (r.reply.server_index != i || !(r.reply.shape == ShapeOf(config.params))) {
      return Status::FailedPrecondition("server " + std::to_string(i) + " (" + r.endpoint +
                                        ") serves a different share (index or shape mismatch)");
    }
    if (r.reply.applied_evictions < client->counters_.ne) behind.push_back(i);
  }
  // Servers behind the state's eviction count lost data (or were put back
  // to an old copy): every one of them is named, not only the first.
  if (!behind.empty()) {
    std::string who;
    for (std::size_t i : behind) {
      who += std::string(who.empty() ? "" : ", ") + "server " + std::to_string(i) + " (" +
             reports[i].endpoint + ") has applied only " +
             std::to_string(reports[i].reply.applied_evictions);
    }
    const bool all = behind.size() == reports.size();
    const bool rebuildable = reports.size() - behind.size() >= config.params.threshold + 1;
    std::string fix;
    if (all) {
      fix =
          ": every server is behind this state, so the servers were put back together (an "
          "old copy of their data directories) or this state belongs to a newer copy of them. "
          "Put their newest data back; otherwise restore a backup the servers are not behind "
          "(s3oram restore --generation N) and accept losing what was written since";
    } else if (!rebuildable) {
      fix = ": fewer than t + 1 = " + std::to_string(config.params.threshold + 1) +
            " servers hold the tree this state knows, so they cannot be rebuilt from the others. "
            "Put their newest data back; otherwise restore a backup they are not behind "
            "(s3oram restore --generation N) and accept losing what was written since";
    } else {
      fix = std::string(": ") + (behind.size() > 1 ? "those servers" : "the server") +
            " lost data; repair with s3oram rebuild --server " + std::to_string(behind.front()) +
            (behind.size() > 1 ? ", then the next one" : "");
    }
    return Status::FailedPrecondition(who + " evictions but the client state records " +
                                      std::to_string(client->counters_.ne) + fix);
  }
  // Rolled back: every request's seq is at most one beyond what the state
  // held durably when it was sent (NextMutationHeader), so t + 1 servers
  // that applied more than that under this state's own epoch prove the state
  // lost commits it had made: an older copy of the file or its log cut at an
  // earlier commit (both still authenticate), or a disk that lost synced
  // writes. Servers at a later epoch were written by another client (the
  // freshness check below judges that); one server alone cannot make a
  // state look rolled back.
  {
    std::vector<std::uint64_t> applied;
    for (const auto& r : reports) {
      applied.push_back(r.reply.epoch == client->counters_.epoch ? r.reply.applied_seq : 0);
    }
    const std::uint64_t agreed = AgreedAtLeast(applied, config.params.threshold + 1);
    const std::uint64_t held = client->counters_.seq;
    if (agreed > held + 1) {
      const std::string why =
          std::to_string(config.params.threshold + 1) + " servers have applied request " +
          std::to_string(agreed) + " but the client state " + state_path + " records only " +
          std::to_string(held) + ": the state was rolled back (an older copy of it, or its log "
          "cut short, was put in place, or the disk lost writes it had synced)";
      if (!allow_stale) {
        return Status::StaleState(
            why +
            ". Writing with it would destroy what was written since. Put the newer copy "
            "back if there is one; otherwise move this one aside and restore the newest "
            "backup with `s3oram restore -s " +
            state_path +
            " --force`: what was written after that backup is lost, and so are blocks "
            "of older files that evictions have moved since (the restore names every "
            "file part it loses)");
      }
      spdlog::warn("{}; opened read-only as asked", why);
    }
  }
  // The sequence t + 1 servers (or this state) agree on, raised to a lone
  // server's only within kMaxCounterLead (oramcore/protocol/counter_agreement.h);
  // a writable open refuses an outlier below, with the epoch.
  std::vector<std::uint64_t> applied_seqs;
  for (const auto& r : reports) applied_seqs.push_back(r.reply.applied_seq);
  const AdoptedCounter seq =
      AdoptCounter(applied_seqs, client->counters_.seq, config.params.threshold);
  client->counters_.seq = seq.value;
  // Freshness, agreed by t + 1 servers (oramcore/protocol/freshness.h): a
  // state another client has moved past (a copy of this state, a restored
  // backup, a forced takeover, another device, also one that only renamed
  // or created files and uploaded its state) must not be written with, nor
  // published as the newest backup.
  {
    std::vector<ServerFreshness> views(reports.size());
    std::vector<std::string> names;
    for (std::size_t i = 0; i < reports.size(); ++i) {
      views[i].store_epoch = reports[i].reply.epoch;
      views[i].applied_evictions = reports[i].reply.applied_evictions;
      names.push_back("server " + std::to_string(i) + " (" + reports[i].endpoint + ")");
      S3ORAM_ASSIGN_OR_RETURN(auto backups, client->QueryBackupList(i));
      for (const auto& b : backups) views[i].generations.push_back(b.generation);
    }
    S3ORAM_ASSIGN_OR_RETURN(const std::vector<PendingOp> pending, client->store_->LoadPending());
    bool evicting = false;
    for (const auto& op : pending) evicting |= op.kind == kEvictKind;
    client->freshness_ = JudgeFreshness(client->counters_, client->store_->backup_mark(), views,
                                        names, config.params.threshold, evicting);
    const FreshnessVerdict& f = client->freshness_;
    for (const auto& w : f.warnings) spdlog::warn("{}", w);
    if (!f.inconsistent.empty() && !allow_stale) {
      return Status::FailedPrecondition(f.inconsistent + " (`s3oram scrub -s " + state_path +
                                        "` checks the shares)");
    }
    if (f.stale && !allow_stale) {
      return Status::StaleState(f.why + ": the state is stale, and writing with it would "
                                "destroy that client's data. " + StaleStateFix(state_path));
    }
  }
  if (client->read_only_) return client;

  // A new epoch for this client incarnation, durable before any request
  // uses it; then the lease under that epoch. Every server must accept it,
  // so it goes above the epoch t + 1 servers (or this state: a copy of it
  // may have run elsewhere) agree on, and above a lone server's within
  // kMaxCounterLead (a lease that reached only it before its client
  // stopped). A server further above is named and refused, never followed:
  // one forged lease record must not push every server to the last epoch.
  const std::uint64_t opened_epoch = client->counters_.epoch;
  auto name = [&](std::size_t i) {
    return "server " + std::to_string(i) + " (" + reports[i].endpoint + ")";
  };
  S3ORAM_RETURN_IF_ERROR(CounterOutlierError(seq, applied_seqs, config.params.threshold,
                                             "applied request sequence", name));
  std::vector<std::uint64_t> epochs;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    S3ORAM_ASSIGN_OR_RETURN(wire::LeaseReply lease, client->QueryLease(i));
    epochs.push_back(std::max(reports[i].reply.epoch, lease.highest_epoch));
  }
  S3ORAM_ASSIGN_OR_RETURN(
      client->counters_.epoch,
      NextAgreedCounter(epochs, opened_epoch, config.params.threshold, "epoch", name));
  {
    ClientStateStore::Batch batch;
    batch.SetCounters(client->counters_);
    S3ORAM_RETURN_IF_ERROR(client->store_->Commit(batch, /*durable=*/true));
  }
  client->opened_epoch_ = opened_epoch;
  if (Status lease = client->AcquireLease(state_path); !lease.ok()) {
    // Nothing was changed under the new epoch: a state that equalled its
    // last backup still does (its mark follows the epoch), so a refused
    // mount does not later read as unsaved work.
    (void)client->KeepBackupMark();
    return lease;
  }
  // Root writes accesses logged but had not sent (or not seen acknowledged
  // by every server) when this state was last used, for slots nr, nr + 1,
  // ...: send them now, in order. They rewrite those slots completely, which
  // is also the repair every Open needs.
  {
    S3ORAM_ASSIGN_OR_RETURN(auto pending, client->store_->LoadPending());
    std::vector<PendingOp> roots;
    for (auto& op : pending) {
      if (op.kind != kRootKind) continue;
      if (op.seq < kPendingRootKey || op.seq - kPendingRootKey >= config.params.evict_rate) {
        return Status::Corruption("pending root write under an unexpected key " +
                                  std::to_string(op.seq));
      }
      roots.push_back(std::move(op));
    }
    // Each under the key of its slot (kPendingRootKey + slot), so key order
    // is slot order; DecodeRootPayload checks that they follow nr in turn.
    std::sort(roots.begin(), roots.end(),
              [](const PendingOp& a, const PendingOp& b) { return a.seq < b.seq; });
    for (const auto& op : roots) {
      S3ORAM_ASSIGN_OR_RETURN(
          PendingRoot root,
          client->DecodeRootPayload(op.payload, client->counters_.nr + client->pending_roots_.size()));
      root.key = op.seq;
      client->pending_roots_.push_back(std::move(root));
    }
    S3ORAM_RETURN_IF_ERROR(client->FlushPendingRoots());
  }
  if (const auto& note = client->store_->problem_note(); note && note->damaged) {
    client->StopWrites(Status::Damaged(note->text), /*recorded=*/true);
  }
  if (Status finished = client->FinishPendingEviction(); !finished.ok()) {
    client->NoteProblem(finished);
    return finished;
  }
  return client;
}

std::vector<ServerReport> OramClient::QueryServers(std::chrono::milliseconds timeout) {
  std::vector<ServerReport> out(servers_->size());
  TransportOptions opts{std::min(timeout, options_.requests.resend_after), timeout};
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    out[i].endpoint = servers_->endpoint(i);
    wire::Header h = NextHeader();
    auto frame = wire::Encode(h, wire::StatusRequest{});
    auto r = servers_->ExchangeWith({i}, {frame}, h, wire::MessageType::kStatusReply, opts);
    if (!r.ok()) {
      out[i].status = r.status();
      continue;
    }
    const wire::Message& m = r.value()[0];
    if (m.header.fs_id != config().fs_id) {
      if (const auto* sr = std::get_if<wire::StatusReply>(&m.body); sr && sr->initialized) {
        out[i].status = Status::FailedPrecondition("server " + std::to_string(i) + " (" +
                                                   out[i].endpoint +
                                                   ") serves another filesystem");
        continue;
      }
    }
    out[i].reply = std::get<wire::StatusReply>(m.body);
  }
  return out;
}

std::vector<ServerStats> OramClient::QueryServerStats(std::chrono::milliseconds timeout) {
  std::vector<ServerStats> out(servers_->size());
  TransportOptions opts{std::min(timeout, options_.requests.resend_after), timeout};
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    out[i].endpoint = servers_->endpoint(i);
    wire::Header h = NextHeader();
    auto frame = wire::Encode(h, wire::StatsRequest{});
    auto r = servers_->ExchangeWith({i}, {frame}, h, wire::MessageType::kStatsReply, opts);
    if (!r.ok()) {
      out[i].status = r.status();
      continue;
    }
    out[i].reply = std::get<wire::StatsReply>(r.value()[0].body);
  }
  return out;
}

Result<wire::ScrubReply> OramClient::ScrubServer(std::size_t server, std::uint64_t first,
                                                 std::uint32_t count,
                                                 std::chrono::milliseconds timeout) {
  if (server >= servers_->size()) {
    return Status::InvalidArgument("scrub: no server " + std::to_string(server));
  }
  TransportOptions opts{std::min(timeout, options_.requests.resend_after), timeout};
  wire::Header h = NextHeader();
  auto frame = wire::Encode(h, wire::ScrubRequest{first, count});
  S3ORAM_ASSIGN_OR_RETURN(auto replies, servers_->ExchangeWith({server}, {frame}, h,
                                                               wire::MessageType::kScrubReply, opts));
  return std::get<wire::ScrubReply>(replies[0].body);
}

Result<std::vector<wire::Message>> OramClient::ExchangeShared(
    std::span<const Elem> secret,
    const std::function<wire::Body(std::vector<Elem>&&)>& make_request,
    wire::MessageType expected_reply, const TransportOptions& options, std::uint64_t& compute_ns,
    std::uint64_t& wait_ns) {
  const OramParams& p = params();
  S3ORAM_ASSIGN_OR_RETURN(const wire::Header h, NextMutationHeader());
  std::vector<std::vector<std::uint8_t>> frames;
  {
    TimeInto timer(compute_ns);
    std::vector<std::vector<Elem>> shares(p.parties);
    ShareVector(secret, p.threshold, shares);
    for (auto& share : shares) {
      frames.push_back(wire::Encode(h, make_request(std::move(share))));
      share = {};  // frames hold the bytes now; keep peak memory at one copy
    }
  }
  TimeInto timer(wait_ns);
  return servers_->Exchange(frames, h, expected_reply, options);
}

Status OramClient::WriteRoot(std::uint32_t slot, std::span<const Elem> elems) {
  return ExchangeShared(
             elems,
             [slot](std::vector<Elem>&& share) {
               return wire::Body{wire::WriteRootRequest{slot, std::move(share)}};
             },
             wire::MessageType::kWriteRootReply, options_.requests,
             stats_.timings.client_compute_ns, stats_.timings.root_write_wait_ns)
      .status();
}

Status OramClient::Sync() {
  if (read_only_) return Status::Ok();
  if (!pending_roots_.empty()) return FlushPendingRoots();
  ClientStateStore::Batch batch;
  batch.SetCounters(counters_);
  return store_->Commit(batch, /*durable=*/true);
}

Status OramClient::SyncKeepingLatestRootWrite() {
  if (read_only_) return Status::Ok();
  ClientStateStore::Batch batch;
  batch.SetCounters(counters_);
  return store_->Commit(batch, /*durable=*/true);
}

std::optional<std::vector<Elem>> OramClient::RootCopyOf(BlockId id,
                                                        const PositionEntry& at) const {
  if (!root_copies_ || !inflight_) return std::nullopt;
  const OramParams& p = params();
  auto copy = root_copies_->Get(
      RootCopies::Index(inflight_->record.eviction, at.pos.slot, p.evict_rate));
  if (!copy) return std::nullopt;
  std::vector<std::uint8_t> sealed(p.sealed_bytes()), plain(p.block_bytes);
  const auto data_part =
      std::span<const Elem>(*copy).first(static_cast<std::size_t>(p.data_elems_per_slot()));
  if (!field::Unpack(data_part, sealed) || (mac_ && !SlotMacValid(*copy)) ||
      !sealer_->Open(id, at.version, sealed, plain)) {
    return std::nullopt;
  }
  return copy;
}

Status OramClient::RunEviction() {
  if (inflight_) S3ORAM_RETURN_IF_ERROR(FinishInFlightEviction());
  S3ORAM_ASSIGN_OR_RETURN(auto pending, store_->LoadPending());
  for (const auto& op : pending) {
    if (op.kind == kEvictKind) S3ORAM_RETURN_IF_ERROR(FinishPendingEviction());
  }
  if (counters_.nr < params().evict_rate) return Status::Ok();
  if (writes_stopped_) return *writes_stopped_;
  return StartEviction();
}

Status OramClient::StartEviction() {
  const TreeGeometry geo = params().geometry();
  TimeInto planning(stats_.timings.eviction_client_ns);
  S3ORAM_ASSIGN_OR_RETURN(EvictionPlan plan, PlanEviction(geo, counters_.ne, *pm_));
  EvictionRecord record;
  record.eviction = counters_.ne;
  record.attempt = 1;
  for (const auto& [id, pos] : plan.moves) record.before.emplace(id, pm_->Find(id)->pos);
  // One durable transaction: the plan, the blocks at their new positions and
  // the new round (nr = 0). A crash after it finishes this eviction at Open
  // from the plan, before any access.
  ClientStateStore::Batch intent;
  for (const auto& [id, pos] : plan.moves) {
    intent.PutPosition(id, PositionEntry{pos, pm_->Find(id)->version});
  }
  Counters next = counters_;
  next.nr = 0;
  intent.SetCounters(next);
  record.plan = plan;
  intent.AddPending(PendingOp{record.eviction, kEvictKind, EncodeEvictionRecord(record)});
  planning.Stop();
  {
    TimeInto timer(stats_.timings.eviction_state_commit_ns);
    S3ORAM_RETURN_IF_ERROR(store_->Commit(intent, /*durable=*/true));
  }
  FaultPoint("client.evict.after_intent");
  S3ORAM_RETURN_IF_ERROR(ApplyEviction(plan, *pm_));
  counters_ = next;
  inflight_ = InFlight{std::move(record), false, false, {}};
  if (stats_.evictions == 0) {
    spdlog::info("eviction {} started (every {} accesses); the servers compute it while the "
                 "next {} accesses go on (s3oram status shows its progress)",
                 counters_.ne, params().evict_rate, params().evict_rate);
  }
  return EnsureEvictionStarted();
}

Status OramClient::EnsureEvictionStarted() {
  if (!inflight_ || inflight_->started) return Status::Ok();
  if (eviction_refused_ && std::chrono::steady_clock::now() < eviction_retry_at_) {
    return *eviction_refused_;
  }
  EvictionRecord& record = inflight_->record;
  // A PREPARE that failed before every server started it is sent again
  // under a new attempt (fresh shares), logged first; so is one that failed
  // in an earlier call.
  // Up to kMaxAttempts, all within one eviction timeout (a server that does
  // not answer fails the access after that time, not after a multiple of it).
  constexpr std::uint32_t kMaxAttempts = 4;
  const auto began = std::chrono::steady_clock::now();
  Status last;
  for (std::uint32_t tries = 0; tries < kMaxAttempts; ++tries) {
    if (tries > 0 && std::chrono::steady_clock::now() - began >= options_.evictions.deadline) {
      break;
    }
    if (inflight_->sent) {
      ++record.attempt;
      ++stats_.eviction_retries;
      S3ORAM_RETURN_IF_ERROR(LogEvictionRecord(record));
    }
    inflight_->sent = true;
    last = SendPrepare(*record.plan, record.attempt, EvictionBudgetLeft(began));
    if (last.ok()) {
      inflight_->started = true;
      inflight_->started_at = std::chrono::steady_clock::now();
      FaultPoint("client.evict.after_started");
      return Status::Ok();
    }
    spdlog::warn("eviction {} attempt {} did not start: {}", record.eviction, record.attempt,
                 last.ToString());
    if (last.code() == Status::Code::kDamaged) break;
  }
  if (last.code() == Status::Code::kDamaged) {
    eviction_refused_ = last.WithContext("eviction " + std::to_string(record.eviction) +
                                         " cannot run until the damaged server is repaired");
    eviction_retry_at_ = std::chrono::steady_clock::now() + kDamagedEvictionRetry;
    return *eviction_refused_;
  }
  return last.WithContext("starting eviction " + std::to_string(record.eviction));
}

TransportOptions OramClient::EvictionBudgetLeft(std::chrono::steady_clock::time_point started) const {
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  TransportOptions budget = options_.evictions;
  budget.deadline = spent < options_.evictions.deadline ? options_.evictions.deadline - spent
                                                        : std::chrono::milliseconds(1);
  // Resent after silence only past half the eviction's time: the servers
  // answer EVICT_RESULT after exchanging shares with each other, minutes
  // on a slow link or a busy machine. A connection that was replaced (a
  // restarted server) still gets the request again at once.
  budget.resend_after = std::max(budget.resend_after, budget.deadline / 2);
  budget.resend_after = std::min(budget.resend_after, budget.deadline);
  return budget;
}

Status OramClient::LogEvictionRecord(const EvictionRecord& record) {
  ClientStateStore::Batch b;
  b.RemovePending(record.eviction);
  b.AddPending(PendingOp{record.eviction, kEvictKind, EncodeEvictionRecord(record)});
  return store_->Commit(b, /*durable=*/true);
}

void OramClient::AskEvictionProgress(std::chrono::steady_clock::duration elapsed) {
  // Polls only an eviction that has run a while, at fixed access counts: a
  // shorter one costs at most that much wait at the round's end, and fast
  // setups (small blocks, tests) send no STATUS at all.
  static constexpr auto kProgressAfter = std::chrono::seconds(1);
  static constexpr std::uint64_t kPollsPerRound = 16;
  const std::uint64_t every = std::max<std::uint64_t>(1, params().evict_rate / kPollsPerRound);
  // Once per `every` root slots (a pipelined batch takes several at once).
  const std::uint64_t bucket = (counters_.nr + pending_roots_.size()) / every;
  if (elapsed < kProgressAfter || bucket == progress_polled_bucket_ ||
      progress_polled_bucket_ == kProgressDone) {
    return;
  }
  progress_polled_bucket_ = bucket;
  // A server's word is bounded by the client's own clock (it cannot have
  // computed longer than the client has waited) and by the eviction
  // timeout, so a wrong or lying reply paces no round beyond that.
  const auto own = std::chrono::duration_cast<std::chrono::milliseconds>(elapsed);
  const auto cap = std::chrono::duration_cast<EvictionPacer::Duration>(options_.evictions.deadline);
  EvictionPacer::Bounds slowest;
  bool unbounded = false;  // a server in round 1: no upper bound yet
  bool computing = false;  // some server still computes this eviction
  for (const auto& r : QueryServers(options_.requests.resend_after)) {
    if (!r.status.ok()) {
      computing = true;  // says nothing: it may still be computing
      continue;
    }
    if (!r.reply.evicting || r.reply.evicting_eviction != inflight_->record.eviction ||
        r.reply.evicting_rounds != params().height) {
      continue;
    }
    computing = true;
    const auto server_elapsed = std::min<std::uint64_t>(
        r.reply.evicting_elapsed_ms, static_cast<std::uint64_t>(std::max<std::int64_t>(0, own.count())));
    const EvictionPacer::Bounds b = EvictionPacer::FromProgress(
        std::chrono::milliseconds(server_elapsed), r.reply.evicting_round,
        r.reply.evicting_rounds);
    // The slowest server sets the pace.
    slowest.lower = std::min(cap, std::max(slowest.lower, b.lower));
    slowest.upper = std::min(cap, std::max(slowest.upper, b.upper));
    unbounded = unbounded || (b.lower > EvictionPacer::Duration::zero() &&
                              b.upper == EvictionPacer::Duration::zero());
  }
  if (unbounded) slowest.upper = EvictionPacer::Duration::zero();
  pacer_.Provisional(slowest);
  // Every server that answered has finished its part (all of them accepted
  // the PREPARE before pacing began): no more polls this round; the result
  // is collected at the round's end.
  if (!computing) progress_polled_bucket_ = kProgressDone;
}

void OramClient::PaceBehindEviction(std::uint64_t done) {
  if (!inflight_ || !inflight_->started) return;
  const auto elapsed = std::chrono::steady_clock::now() - inflight_->started_at;
  AskEvictionProgress(elapsed);
  // The servers said the eviction is computed: the round's end will not
  // wait for it, so the rest of the round goes unpaced.
  if (progress_polled_bucket_ == kProgressDone) return;
  const auto delay = pacer_.Step(elapsed, done, params().evict_rate);
  if (delay <= EvictionPacer::Duration::zero()) return;
  if (!pace_logged_) {
    if (pacer_.estimate() <= EvictionPacer::Duration::zero()) {
      spdlog::info("accesses are paced to eviction {}, the first this state sees: the servers' "
                   "progress suggests {:.1f} s, and a round of {} accesses is made to last about "
                   "that long, so that none waits for all of it at the end",
                   inflight_->record.eviction,
                   std::chrono::duration<double>(pacer_.provisional()).count(),
                   params().evict_rate);
    } else if (pacer_.provisional() > pacer_.estimate()) {
      spdlog::info("accesses are paced to eviction {}: the servers' progress suggests {:.1f} s, "
                   "longer than the last ({:.1f} s), and a round of {} accesses is made to last "
                   "about that long, so that none waits for all of it at the end",
                   inflight_->record.eviction,
                   std::chrono::duration<double>(pacer_.provisional()).count(),
                   std::chrono::duration<double>(pacer_.estimate()).count(), params().evict_rate);
    } else {
      spdlog::info("accesses are paced to eviction {} (the last took {:.1f} s): a round of {} "
                   "accesses lasts at least that long, so that none waits for all of it at the "
                   "end",
                   inflight_->record.eviction,
                   std::chrono::duration<double>(pacer_.estimate()).count(), params().evict_rate);
    }
    pace_logged_ = true;
  }
  TimeInto whole(stats_.timings.eviction_ns);
  TimeInto timer(stats_.timings.eviction_pace_ns);
  std::this_thread::sleep_for(delay);
}

Status OramClient::FinishInFlightEviction() {
  if (!inflight_) return Status::Ok();
  const auto started = std::chrono::steady_clock::now();
  const std::uint64_t prepare_wait_before = stats_.timings.eviction_prepare_wait_ns;
  EvictionRecord& record = inflight_->record;
  const EvictionPlan plan = *record.plan;
  // An attempt that went out but did not start everywhere may still run on
  // some servers with the shares it carried: it is never sent again with
  // other shares, the next attempt is.
  if (!inflight_->started && inflight_->sent) ++record.attempt;
  const bool was_started = inflight_->started;
  const auto elapsed = started - inflight_->started_at;
  S3ORAM_RETURN_IF_ERROR(PrepareAndCommit(plan, record, /*collect_first=*/inflight_->started));
  const bool first_attempt = record.attempt == 1;
  inflight_.reset();
  // An access that waited for the servers says so once, at info level: the
  // eviction took longer than a round of accesses.
  const auto waited = std::chrono::nanoseconds(stats_.timings.eviction_prepare_wait_ns -
                                               prepare_wait_before);
  // The pace of the next round, kept for the next mount too (not durable:
  // a lost estimate only costs one unpaced round).
  if (was_started && first_attempt && !read_only_) {
    pacer_.Learn(elapsed, waited);
    ClientStateStore::Batch b;
    b.SetEvictionEstimate(static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(pacer_.estimate()).count()));
    S3ORAM_RETURN_IF_ERROR(store_->Commit(b));
  }
  pacer_.ForgetProvisional();  // also when nothing was learned
  progress_polled_bucket_ = kNoBucket;
  if (waited >= kSlowEviction) {
    spdlog::info("accesses waited {:.1f} s for eviction {} to be computed (the servers took "
                 "longer than a round of {} accesses); committed after {:.1f} s in all",
                 std::chrono::duration<double>(waited).count(), plan.eviction,
                 params().evict_rate,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  return Status::Ok();
}

Status OramClient::FinishPendingEviction() {
  S3ORAM_ASSIGN_OR_RETURN(auto pending, store_->LoadPending());
  const PendingOp* op = nullptr;
  for (const auto& p : pending) {
    if (p.kind == kEvictKind) op = &p;
  }
  if (!op) {
    // A due eviction that is not under way yet waits for the repair while
    // writes are stopped; Open succeeds all the same (reads need no more).
    if (counters_.nr >= params().evict_rate && !writes_stopped_) return RunEviction();
    return Status::Ok();
  }
  S3ORAM_ASSIGN_OR_RETURN(
      EvictionRecord record,
      DecodeEvictionRecord(op->payload, params().geometry(), params().capacity_blocks));
  if (record.eviction != counters_.ne) {
    return Status::Corruption("pending eviction " + std::to_string(record.eviction) +
                              " does not match the eviction counter " +
                              std::to_string(counters_.ne));
  }
  ++stats_.eviction_retries;
  if (record.plan) {
    // Background: the map holds the new positions already; the servers may
    // have finished this very attempt (a clean unmount leaves it running).
    const EvictionPlan plan = *record.plan;
    S3ORAM_RETURN_IF_ERROR(PrepareAndCommit(plan, record, /*collect_first=*/true));
  } else {
    // Logged by a client that ran evictions to the end while accesses
    // waited: the plan follows from the positions, which it then updates.
    S3ORAM_ASSIGN_OR_RETURN(EvictionPlan plan,
                            PlanEviction(params().geometry(), counters_.ne, *pm_));
    ++record.attempt;
    S3ORAM_RETURN_IF_ERROR(PrepareAndCommit(plan, record, /*collect_first=*/false));
  }
  // The round the access counter is in may be full already (the eviction
  // was started at its end and the client stopped there): the next starts.
  if (counters_.nr >= params().evict_rate && !writes_stopped_) return RunEviction();
  return Status::Ok();
}

Status OramClient::SendPrepare(const EvictionPlan& plan, std::uint32_t attempt,
                               const TransportOptions& budget) {
  const OramParams& p = params();
  const std::size_t step_elems = 2 * std::size_t{p.bucket_size} * p.bucket_size;
  std::vector<Elem> dense(plan.steps.size() * step_elems);
  {
    const TimeInto expanding(stats_.timings.eviction_client_ns);
    for (std::size_t s = 0; s < plan.steps.size(); ++s) {
      ExpandStepMatrix(plan.steps[s], p.bucket_size,
                       std::span<Elem>(dense).subspan(s * step_elems, step_elems));
    }
  }
  // Fresh shares for every attempt: a retry must not reuse randomness.
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies,
      ExchangeShared(
          dense,
          [&plan, attempt](std::vector<Elem>&& share) {
            return wire::Body{
                wire::EvictPrepareRequest{plan.eviction, attempt, plan.leaf, std::move(share)}};
          },
          wire::MessageType::kEvictStartedReply, budget, stats_.timings.eviction_client_ns,
          stats_.timings.eviction_prepare_wait_ns));
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const auto& r = std::get<wire::EvictStartedReply>(replies[i].body);
    if (r.eviction != plan.eviction || r.attempt != attempt) {
      return Status::Protocol("server " + std::to_string(i) + " started eviction " +
                              std::to_string(r.eviction) + " attempt " + std::to_string(r.attempt) +
                              " instead of " + std::to_string(plan.eviction) + " attempt " +
                              std::to_string(attempt));
    }
  }
  return Status::Ok();
}

Status OramClient::AwaitPrepared(std::uint64_t eviction, std::uint32_t attempt,
                                 const TransportOptions& budget) {
  const wire::Header h = NextHeader();
  const auto frame = wire::Encode(h, wire::EvictResultRequest{eviction, attempt});
  std::vector<std::vector<std::uint8_t>> frames(servers_->size(), frame);
  TimeInto timer(stats_.timings.eviction_prepare_wait_ns);
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies, servers_->Exchange(frames, h, wire::MessageType::kEvictPrepareReply, budget));
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (std::get<wire::EvictPrepareReply>(replies[i].body).eviction != eviction) {
      return Status::Protocol("server " + std::to_string(i) + " answered for another eviction");
    }
  }
  return Status::Ok();
}

Status OramClient::PrepareAndCommit(const EvictionPlan& plan, EvictionRecord& record,
                                    bool collect_first) {
  // A server refused this eviction for damaged storage a moment ago: it will
  // again until it is repaired, and every attempt costs the other servers'
  // SMP timeout. Accesses that need the eviction fail at once meanwhile (the
  // tree is unchanged; nothing is lost), then it is tried again.
  if (eviction_refused_ && std::chrono::steady_clock::now() < eviction_retry_at_) {
    return *eviction_refused_;
  }
  const OramParams& p = params();

  // If any server already committed this eviction, every server prepared it
  // (COMMIT is sent only after all PREPAREs succeeded): just commit everywhere.
  bool committed_somewhere = false;
  if (collect_first || record.attempt > 1) {
    for (const auto& r : QueryServers(options_.requests.deadline)) {
      if (!r.status.ok()) return r.status.WithContext("finishing eviction");
      if (r.reply.applied_evictions > plan.eviction) committed_somewhere = true;
    }
  }

  if (!committed_somewhere) {
    // Up to kMaxAttempts PREPAREs (a peer's transient failure makes the
    // servers refuse an attempt quickly), all within one eviction timeout:
    // a server that does not answer fails the eviction after that time, not
    // after a multiple of it.
    constexpr std::uint32_t kMaxAttempts = 4;
    const auto started = std::chrono::steady_clock::now();
    auto budget_left = [&]() { return EvictionBudgetLeft(started); };
    Status last;
    if (collect_first) {
      // The servers may have it done already (in flight, or left running).
      last = AwaitPrepared(plan.eviction, record.attempt, budget_left());
      if (last.ok()) last = CheckPreparedEviction(plan.eviction, record.attempt);
      if (!last.ok()) {
        spdlog::warn("eviction {} attempt {} failed: {}", plan.eviction, record.attempt,
                     last.ToString());
      }
    }
    if (!collect_first || (!last.ok() && last.code() != Status::Code::kDamaged)) {
      for (std::uint32_t tries = 0; tries < kMaxAttempts; ++tries) {
        // Checked before the first try too when the servers were asked for
        // a result first: if that used the whole time, a new attempt now
        // would only make them drop the one nearly done.
        if ((tries > 0 || collect_first) &&
            std::chrono::steady_clock::now() - started >= options_.evictions.deadline) {
          break;
        }
        if (collect_first || tries > 0) {
          ++record.attempt;
          ++stats_.eviction_retries;
        }
        S3ORAM_RETURN_IF_ERROR(LogEvictionRecord(record));
        last = SendPrepare(plan, record.attempt, budget_left());
        if (last.ok()) last = AwaitPrepared(plan.eviction, record.attempt, budget_left());
        // Verified before anything commits: the prepared buckets must be
        // consistent sharings on every server. A failure (a fault in a
        // server's memory or computation, or wrong shares dealt in the
        // exchange) leaves every server's live tree as it was; a new attempt
        // recomputes the eviction with fresh randomness.
        if (last.ok()) last = CheckPreparedEviction(plan.eviction, record.attempt);
        if (last.ok()) break;
        spdlog::warn("eviction {} attempt {} failed: {}", plan.eviction, record.attempt,
                     last.ToString());
        // A server whose stored shares failed their digests refuses every
        // attempt the same way until it is repaired: stop here, with the tree
        // as it was (no server committed anything).
        if (last.code() == Status::Code::kDamaged) break;
      }
    }
    if (last.code() == Status::Code::kDamaged || last.code() == Status::Code::kIntegrity) {
      eviction_refused_ = last.WithContext(
          "eviction " + std::to_string(plan.eviction) +
          (last.code() == Status::Code::kDamaged
               ? " cannot run until the damaged server is repaired"
               : " was refused: its result was inconsistent on every attempt; run s3oram scrub"));
      eviction_retry_at_ = std::chrono::steady_clock::now() + kDamagedEvictionRetry;
      spdlog::error("{}", eviction_refused_->message());
      return *eviction_refused_;
    }
    if (!last.ok()) return last.WithContext("eviction " + std::to_string(plan.eviction));
    eviction_refused_.reset();
  }

  FaultPoint("client.evict.after_prepare");
  S3ORAM_ASSIGN_OR_RETURN(const wire::Header h, NextMutationHeader());
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::size_t i = 0; i < p.parties; ++i) {
    frames.push_back(wire::Encode(h, wire::EvictCommitRequest{plan.eviction}));
  }
  {
    TimeInto timer(stats_.timings.eviction_commit_wait_ns);
    S3ORAM_RETURN_IF_ERROR(servers_
                               ->Exchange(frames, h, wire::MessageType::kEvictCommitReply,
                                          options_.requests)
                               .status()
                               .WithContext("committing eviction " +
                                            std::to_string(plan.eviction)));
  }

  FaultPoint("client.evict.after_commit");
  // Every server has made the eviction live: record it (and, for a record
  // without a plan, the new positions, with the next round).
  Counters next = counters_;
  next.ne = plan.eviction + 1;
  ClientStateStore::Batch batch;
  const bool moves_applied = record.plan.has_value();
  if (!moves_applied) {
    next.nr = 0;
    for (const auto& [id, pos] : plan.moves) {
      const PositionEntry* e = pm_->Find(id);
      if (!e) {
        return Status::Corruption("eviction moved block " + std::to_string(id) +
                                  " that is not mapped");
      }
      batch.PutPosition(id, PositionEntry{pos, e->version});
    }
  }
  batch.SetCounters(next);
  batch.RemovePending(plan.eviction);
  // A recorded refusal of this eviction is over: it committed.
  const auto& note = store_->problem_note();
  const bool refusal_resolved =
      note && !note->damaged &&
      note->text.rfind("eviction " + std::to_string(plan.eviction) + " ", 0) == 0;
  if (refusal_resolved) batch.SetProblemNote(std::nullopt);
  // Durable: the servers have moved the blocks; positions must not roll back.
  {
    TimeInto timer(stats_.timings.eviction_state_commit_ns);
    S3ORAM_RETURN_IF_ERROR(store_->Commit(batch, /*durable=*/true));
  }
  if (refusal_resolved) {
    noted_problem_.clear();
    spdlog::info("eviction {} committed: the problem recorded when it was refused is resolved",
                 plan.eviction);
  }
  counters_ = next;
  if (!moves_applied) S3ORAM_RETURN_IF_ERROR(ApplyEviction(plan, *pm_));
  ++stats_.evictions;
  spdlog::debug("eviction {} along leaf {} committed: {} blocks moved", plan.eviction, plan.leaf,
                plan.moves.size());
  return Status::Ok();
}

// ---- the single-writer lease ------------------------------------------------

Status OramClient::SendLease(std::size_t server, const wire::Body& body, wire::LeaseReply* reply) {
  wire::Header h = NextHeader();
  auto frame = wire::Encode(h, body);
  S3ORAM_ASSIGN_OR_RETURN(auto replies, servers_->ExchangeWith({server}, {frame}, h,
                                                               wire::MessageType::kLeaseReply,
                                                               options_.requests));
  if (reply) *reply = std::get<wire::LeaseReply>(replies[0].body);
  return Status::Ok();
}

namespace {

std::string Ago(std::uint64_t ms) {
  const std::uint64_t s = ms / 1000;
  if (s < 120) return std::to_string(s) + " s";
  if (s < 7200) return std::to_string(s / 60) + " min";
  return std::to_string(s / 3600) + " h";
}

}  // namespace

Status OramClient::AcquireLease(const std::string& state_path) {
  const LeaseHolder me = CurrentLeaseHolder(state_path, options_.lease_purpose);
  const std::string sealed = SealHolder(*sealer_, counters_.epoch, me);
  const bool force = options_.force_lease;
  std::vector<std::size_t> granted;
  std::vector<std::pair<std::size_t, wire::LeaseReply>> refusals;
  auto give_back = [&] {
    // A failed open leaves nothing held.
    for (std::size_t i : granted) (void)SendLease(i, wire::LeaseReleaseRequest{}, nullptr);
  };
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    wire::LeaseReply r;
    if (Status failure = SendLease(i, wire::LeaseAcquireRequest{force, sealed}, &r); !failure.ok()) {
      give_back();
      return failure.WithContext("acquiring the filesystem's lease");
    }
    if (r.granted) {
      granted.push_back(i);
    } else {
      refusals.emplace_back(i, std::move(r));
    }
  }
  // A crashed process of this very state file may have left the lease held
  // on some servers (all, or only those it could not release it on: a
  // server that was down at its unmount). Its epoch is the one this state
  // had when it was opened (that process made it durable here before
  // acquiring). Only such records are taken over without --force, each on
  // the server that holds it: a refusal naming anyone else, or an older
  // record a server replays, stands, so no server's word displaces a live
  // client.
  std::optional<LeaseHolder> first_other;
  std::size_t first_other_server = 0;
  const wire::LeaseReply* first_other_reply = nullptr;
  std::vector<std::size_t> dead_twin;
  for (const auto& [i, r] : refusals) {
    const auto holder = OpenHolder(*sealer_, r.holder_epoch, r.holder);
    if (!force && holder && r.holder_epoch == opened_epoch_ &&
        HolderIsDeadLocalTwin(*holder, state_path)) {
      dead_twin.push_back(i);
      continue;
    }
    if (first_other_reply == nullptr) {
      first_other = holder;
      first_other_server = i;
      first_other_reply = &r;
    }
  }
  if (first_other_reply == nullptr && !dead_twin.empty()) {
    const auto& r = refusals.front().second;
    spdlog::warn("taking over the lease of a crashed client of this state file on this machine "
                 "({} of {} servers held it): {}",
                 dead_twin.size(), servers_->size(),
                 DescribeHolder(*OpenHolder(*sealer_, r.holder_epoch, r.holder)));
    for (std::size_t i : dead_twin) {
      wire::LeaseReply r2;
      Status st = SendLease(i, wire::LeaseAcquireRequest{true, sealed}, &r2);
      if (st.ok() && !r2.granted) st = Status::LeaseHeld("server " + std::to_string(i) +
                                                         " refused the takeover");
      if (!st.ok()) {
        give_back();
        return st.WithContext("taking over the lease of a crashed client");
      }
      granted.push_back(i);
    }
    refusals.clear();
  }
  if (refusals.empty()) {
    lease_held_ = true;
    lease_sealed_ = sealed;
    if (force) spdlog::warn("took the filesystem's lease over as epoch {}", counters_.epoch);
    spdlog::info("lease acquired on all servers as epoch {}", counters_.epoch);
    return Status::Ok();
  }
  give_back();
  const wire::LeaseReply& refusal = *first_other_reply;
  const std::string who =
      first_other ? DescribeHolder(*first_other)
                  : "a client with epoch " + std::to_string(refusal.holder_epoch) +
                        " whose description does not authenticate with this key";
  return Status::LeaseHeld(
      "the filesystem is in use by " + who + " (server " + std::to_string(first_other_server) +
      ": lease held for " + Ago(refusal.held_ms) + ", holder last active " + Ago(refusal.idle_ms) +
      " ago). Only one client may write it. If that client is gone for good, take the lease "
      "over with --force: it is then fenced off and can change nothing");
}

Result<std::vector<wire::BackupInfo>> OramClient::QueryBackupList(std::size_t server) {
  TransportOptions opts{std::min(options_.requests.deadline, options_.requests.resend_after),
                        options_.requests.deadline};
  wire::Header h = NextHeader();
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies, servers_->ExchangeWith({server}, {wire::Encode(h, wire::BackupListRequest{})},
                                           h, wire::MessageType::kBackupListReply, opts));
  return std::get<wire::BackupListReply>(replies[0].body).backups;
}

Status OramClient::RecordBackup(std::uint64_t generation, std::uint64_t snapshot_epoch) {
  if (snapshot_epoch != counters_.epoch) {
    return Status::FailedPrecondition("the backup was taken under epoch " +
                                      std::to_string(snapshot_epoch) + ", not this client's " +
                                      std::to_string(counters_.epoch));
  }
  ClientStateStore::Batch batch;
  batch.SetBackupMark(BackupMark{generation, snapshot_epoch});
  return store_->Commit(batch, /*durable=*/true);
}

Status OramClient::KeepBackupMark() {
  const auto& mark = store_->backup_mark();
  if (!mark || mark->epoch != opened_epoch_ || mark->epoch == counters_.epoch) return Status::Ok();
  ClientStateStore::Batch batch;
  batch.SetBackupMark(BackupMark{mark->generation, counters_.epoch});
  return store_->Commit(batch, /*durable=*/true);
}

Result<std::optional<std::size_t>> OramClient::OddServerOf(std::uint64_t bucket,
                                                            std::uint32_t slot,
                                                            std::chrono::milliseconds timeout) {
  if (!mac_) return std::optional<std::size_t>();
  TransportOptions opts{std::min(timeout, options_.requests.resend_after), timeout};
  wire::Header h = NextHeader();
  const auto frame = wire::Encode(h, wire::SlotShareRequest{bucket, slot});
  std::vector<std::vector<std::uint8_t>> frames(servers_->size(), frame);
  S3ORAM_ASSIGN_OR_RETURN(auto replies,
                          servers_->Exchange(frames, h, wire::MessageType::kSlotShareReply, opts));
  std::vector<std::vector<Elem>> shares;
  for (auto& r : replies) {
    auto& reply = std::get<wire::SlotShareReply>(r.body);
    if (reply.bucket != bucket || reply.slot != slot) {
      return Status::Protocol("a server answered SLOT_SHARE for another slot");
    }
    shares.push_back(std::move(reply.share));
  }
  std::optional<std::size_t> odd = OddShareOut(shares, *mac_);
  if (!odd && previous_mac_) odd = OddShareOut(shares, *previous_mac_);
  return odd;
}

bool OramClient::SlotMacValid(std::span<const Elem> slot) const {
  return mac_->Verify(slot) || (previous_mac_ && previous_mac_->Verify(slot));
}

OramClient::EvictionMacCheck OramClient::eviction_mac_check() const {
  if (!mac_) return EvictionMacCheck::kNone;
  if (!previous_mac_) return EvictionMacCheck::kWhole;
  return rotation_shared_half_ ? EvictionMacCheck::kOneHalf : EvictionMacCheck::kNone;
}

bool OramClient::CombinationMacValid(std::span<const Elem> opened) const {
  if (!previous_mac_) return mac_->Verify(opened);
  // Both keys give the shared half the same rows, so one VerifyHalf covers
  // slots tagged under either.
  return rotation_shared_half_ && mac_->VerifyHalf(opened, *rotation_shared_half_);
}

Status OramClient::RecordRekeyProgress(const RekeyProgress& progress) {
  ClientStateStore::Batch batch;
  batch.SetRekeyProgress(progress);
  return store_->Commit(batch);
}

Status OramClient::EndRekey() {
  ClientStateStore::Batch batch;
  batch.EndRekey();
  FaultPoint("rekey.finalize.before_commit");
  S3ORAM_RETURN_IF_ERROR(store_->Commit(batch, /*durable=*/true));
  FaultPoint("rekey.finalize.after_commit");
  sealer_->ForgetPrevious();
  previous_mac_.reset();
  rotation_shared_half_.reset();
  return Status::Ok();
}

Result<std::vector<wire::ParityReply>> OramClient::ParityAll(std::uint64_t first,
                                                             std::uint32_t count,
                                                             const wire::ParitySeed& seed,
                                                             std::chrono::milliseconds timeout) {
  TransportOptions opts{std::min(timeout, options_.requests.resend_after), timeout};
  wire::Header h = NextHeader();
  const auto frame = wire::Encode(h, wire::ParityRequest{first, count, seed});
  std::vector<std::vector<std::uint8_t>> frames(servers_->size(), frame);
  S3ORAM_ASSIGN_OR_RETURN(auto replies,
                          servers_->Exchange(frames, h, wire::MessageType::kParityReply, opts));
  std::vector<wire::ParityReply> out;
  for (auto& m : replies) out.push_back(std::move(std::get<wire::ParityReply>(m.body)));
  return out;
}

Status OramClient::AgeFill(const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  if (counters_.ne != 0 || counters_.nr != 0 || inflight_ || !pending_roots_.empty()) {
    return Status::FailedPrecondition(
        "age fill: this filesystem has been used (" + std::to_string(counters_.ne) +
        " evictions, " + std::to_string(counters_.nr) +
        " accesses since the last); filling would overwrite its blocks, so it is only for a "
        "new filesystem (benchmarks)");
  }
  // Every server unused before any writes: one that refused half-way would
  // leave the others' buckets filled and its own not, inconsistent sharings
  // that every read through them would refuse.
  const auto reports = QueryServers(options_.requests.deadline);
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    if (!r.status.ok()) return r.status;
    if (r.reply.applied_seq != 0 || r.reply.applied_evictions != 0 ||
        r.reply.prepared_eviction != 0 || r.reply.evicting) {
      return Status::FailedPrecondition(
          "age fill: server " + std::to_string(i) + " (" + servers_->endpoint(i) +
          ") has applied " + std::to_string(r.reply.applied_seq) + " accesses and " +
          std::to_string(r.reply.applied_evictions) +
          " evictions; filling would overwrite its blocks, so it is only for a new filesystem");
    }
  }
  wire::ParitySeed seed;
  random::Bytes(seed);
  const std::uint64_t buckets = params().geometry().num_buckets();
  for (std::uint64_t b = 1; b <= buckets; ++b) {
    // One bucket per request: a bucket can be hundreds of MB at large Z and
    // B, and progress is per bucket.
    wire::Header h = NextHeader();
    const auto frame = wire::Encode(h, wire::AgeFillRequest{b, 1, seed});
    std::vector<std::vector<std::uint8_t>> frames(servers_->size(), frame);
    S3ORAM_ASSIGN_OR_RETURN(
        auto replies,
        servers_->Exchange(frames, h, wire::MessageType::kAgeFillReply, options_.evictions));
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (std::get<wire::AgeFillReply>(replies[i].body).first_bucket != b) {
        return Status::Protocol("server " + std::to_string(i) + " filled another bucket than " +
                                std::to_string(b));
      }
    }
    if (progress) progress(b, buckets);
  }
  return Status::Ok();
}

Status OramClient::CheckPreparedEviction(std::uint64_t eviction, std::uint32_t attempt) {
  if (parity_rows_.empty()) return Status::Ok();  // no redundancy to check with
  const TimeInto timer(stats_.timings.eviction_check_ns);
  wire::ParitySeed seed;
  random::Bytes(seed);
  wire::Header h = NextHeader();
  const auto frame = wire::Encode(h, wire::EvictCheckRequest{eviction, attempt, seed});
  std::vector<std::vector<std::uint8_t>> frames(servers_->size(), frame);
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies,
      servers_->Exchange(frames, h, wire::MessageType::kEvictCheckReply, options_.requests));
  const std::size_t m = params().elems_per_slot();
  const std::size_t combined_elems = wire::kEvictCheckCombinations * m;
  std::vector<std::vector<Elem>> digests;
  std::vector<std::vector<Elem>> combinations;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    auto& r = std::get<wire::EvictCheckReply>(replies[i].body);
    if (r.eviction != eviction) {
      return Status::Protocol("server " + std::to_string(i) + " checked eviction " +
                              std::to_string(r.eviction) + " instead of " +
                              std::to_string(eviction));
    }
    if (r.combination.size() != combined_elems) {
      return Status::Protocol("server " + std::to_string(i) + " sent " +
                              std::to_string(r.combination.size()) +
                              " combination elements for eviction " + std::to_string(eviction) +
                              ", expected " + std::to_string(combined_elems));
    }
    digests.push_back(std::move(r.digests));
    combinations.push_back(std::move(r.combination));
  }
  const auto bad = InconsistentSlots(parity_rows_, digests);
  if (bad.empty()) return CheckEvictionMac(eviction, attempt, combinations);
  const std::size_t Z = params().bucket_size;
  const std::string where = "bucket index " + std::to_string(bad[0] / Z) + " slot " +
                            std::to_string(bad[0] % Z);
  spdlog::error("eviction {} attempt {}: {} prepared slots are not consistent sharings across "
                "the servers (first: {} of the eviction's bucket list); not committed",
                eviction, attempt, bad.size(), where);
  return Status::Integrity("eviction " + std::to_string(eviction) + " attempt " +
                           std::to_string(attempt) + ": " + std::to_string(bad.size()) +
                           " prepared slots are inconsistent across the servers " + ServerSetName() +
                           " (first: " + where +
                           "); a server computed or dealt wrong shares; nothing was committed");
}

Status OramClient::CheckEvictionMac(std::uint64_t eviction, std::uint32_t attempt,
                                    const std::vector<std::vector<Elem>>& combinations) {
  // A filesystem made before share MACs, or a rotation begun by a build
  // before their halves: consistency is all that is checked.
  if (eviction_mac_check() == EvictionMacCheck::kNone) return Status::Ok();
  const std::size_t m = params().elems_per_slot();
  const std::size_t n = combinations.size();
  // Each combination is a degree-t sharing like any slot: its shares must
  // satisfy the parity checks (the per-slot digests already passed, so a
  // failure here means a server answered about other shares than it holds),
  // then the opened value must carry a valid tag.
  auto refused = [&](const std::string& what) {
    spdlog::error("eviction {} attempt {}: {}; not committed", eviction, attempt, what);
    return Status::Integrity("eviction " + std::to_string(eviction) + " attempt " +
                             std::to_string(attempt) + ": " + what + " (servers " +
                             ServerSetName() + "); nothing was committed");
  };
  std::vector<Elem> opened(m);
  std::vector<const Elem*> ptrs(n);
  for (std::size_t r = 0; r < wire::kEvictCheckCombinations; ++r) {
    for (std::size_t i = 0; i < n; ++i) ptrs[i] = combinations[i].data() + r * m;
    if (!OpenChecked(ptrs, parity_rows_, lambda_, m, opened.data())) {
      return refused("the servers' shares of a check combination are inconsistent across "
                     "the servers (a server answered the check about other shares than "
                     "it holds)");
    }
    if (CombinationMacValid(opened)) continue;
    // The output does not authenticate. Either a server dealt wrong shares
    // in this eviction, or a value that was already wrong at rest (all
    // servers agreeing on it: a server rebuilt from a damaged peer) was
    // moved. Only the first is refused: refusing the second would stop every
    // eviction through that bucket for good, and the value is lost either way.
    S3ORAM_ASSIGN_OR_RETURN(const bool inputs_authentic, EvictionInputsAuthentic(eviction));
    if (inputs_authentic) {
      return refused("the prepared buckets are consistent across the servers but do not "
                     "authenticate (share MAC) while the buckets they were computed from do: "
                     "a server dealt a consistent sharing of wrong values during the eviction");
    }
    const Status at_rest = Status::Integrity(
        "the buckets eviction " + std::to_string(eviction) +
        " reads already hold a value that is consistent across the servers but does not "
        "authenticate (share MAC): a block stored there is lost (e.g. a server was rebuilt "
        "from a damaged peer). The eviction goes ahead checked for consistency only; "
        "s3oram fsck -y --zero-damaged finds and frees the lost block");
    spdlog::error("{}", at_rest.message());
    NoteProblem(at_rest);
    return Status::Ok();
  }
  return Status::Ok();
}

Result<bool> OramClient::EvictionInputsAuthentic(std::uint64_t eviction) {
  const std::size_t m = params().elems_per_slot();
  const std::size_t rows = wire::kEvictCheckCombinations;
  wire::ParitySeed seed;
  random::Bytes(seed);
  wire::Header h = NextHeader();
  const auto frame = wire::Encode(h, wire::MacOpenRequest{eviction, seed});
  std::vector<std::vector<std::uint8_t>> frames(servers_->size(), frame);
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies, servers_->Exchange(frames, h, wire::MessageType::kMacOpenReply,
                                       options_.evictions));
  std::vector<const Elem*> ptrs;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const auto& r = std::get<wire::MacOpenReply>(replies[i].body);
    if (r.eviction != eviction || r.combination.size() != rows * m) {
      return Status::Protocol("server " + std::to_string(i) +
                              " answered MAC_OPEN for another eviction or with " +
                              std::to_string(r.combination.size()) + " elements, expected " +
                              std::to_string(rows * m));
    }
    ptrs.push_back(r.combination.data());
  }
  std::vector<Elem> opened(m);
  std::vector<const Elem*> row_ptrs(ptrs.size());
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t i = 0; i < ptrs.size(); ++i) row_ptrs[i] = ptrs[i] + r * m;
    if (!OpenChecked(row_ptrs, parity_rows_, lambda_, m, opened.data())) {
      return Status::Integrity("eviction " + std::to_string(eviction) +
                               ": the buckets it reads are inconsistent across the servers " +
                               ServerSetName() +
                               " (a combination of them is not one sharing): a server's stored "
                               "shares changed; s3oram scrub names the server");
    }
    if (!CombinationMacValid(opened)) return false;
  }
  return true;
}

Result<wire::LeaseReply> OramClient::QueryLease(std::size_t server) {
  wire::LeaseReply r;
  S3ORAM_RETURN_IF_ERROR(SendLease(server, wire::LeaseQueryRequest{}, &r));
  return r;
}

Status OramClient::RenewLease() {
  if (fenced_) return Status::LeaseHeld("this client was fenced off");
  if (!lease_held_) return Status::FailedPrecondition("this client holds no lease");
  // Same epoch and (re-sealed) description: servers just note the contact.
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    wire::LeaseReply r;
    S3ORAM_RETURN_IF_ERROR(
        SendLease(i, wire::LeaseAcquireRequest{false, lease_sealed_}, &r).WithContext("renewing the lease"));
    if (!r.granted) {
      return NoteFencing(Status::LeaseHeld("server " + std::to_string(i) +
                                           " says another client (epoch " +
                                           std::to_string(r.holder_epoch) +
                                           ") took the lease over"));
    }
  }
  return Status::Ok();
}

void OramClient::ReleaseLease() {
  const auto saved = options_.requests;
  options_.requests.deadline = std::min(options_.requests.deadline, std::chrono::milliseconds(3000));
  options_.requests.resend_after = std::min(options_.requests.resend_after, options_.requests.deadline);
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    if (Status st = SendLease(i, wire::LeaseReleaseRequest{}, nullptr); !st.ok()) {
      spdlog::warn("releasing the lease on server {}: {}", i, st.ToString());
    }
  }
  options_.requests = saved;
  lease_held_ = false;
}

Status OramClient::SettleEviction() {
  if (!inflight_ || read_only_ || !lease_held_ || fenced_) return Status::Ok();
  TimeInto timer(stats_.timings.eviction_ns);
  return FinishInFlightEviction();
}

Status OramClient::Close() {
  // The last access's root write goes before the lease: a failure leaves it
  // logged in the state, and the next Open sends it. So does the eviction
  // in flight (the next Open finishes it if this fails).
  Status flushed = Status::Ok();
  if (!pending_roots_.empty() && lease_held_ && !fenced_) flushed = FlushPendingRoots();
  if (Status settled = SettleEviction(); !settled.ok()) {
    spdlog::warn("closing with eviction {} under way: {}", counters_.ne, settled.ToString());
    if (flushed.ok()) flushed = settled;
  }
  if (lease_held_ && !fenced_) ReleaseLease();
  lease_held_ = false;
  return flushed;
}

// Bytes of a problem's text kept in the state.
constexpr std::size_t kProblemNoteMax = 2000;

void OramClient::NoteProblem(const Status& st) {
  const bool damaged = st.code() == Status::Code::kDamaged;
  const bool inconsistent =
      st.code() == Status::Code::kIntegrity &&
      (st.message().find("inconsistent across the servers") != std::string::npos ||
       st.message().find("authenticate (share MAC)") != std::string::npos);
  if (!damaged && !inconsistent) return;
  // One write per new problem, not per access.
  // The stop's own refusal repeats a problem already recorded.
  if (writes_stopped_ && st.message() == writes_stopped_->message()) return;
  if (damaged) StopWrites(st, /*recorded=*/false);
  if (noted_problem_ == st.message().substr(0, kProblemNoteMax)) return;
  if (Status c = RecordProblemNote(st.message(), damaged); !c.ok()) {
    spdlog::warn("recording the problem in the client state: {}", c.ToString());
  }
}

void OramClient::StopWrites(const Status& st, bool recorded) {
  if (writes_stopped_ || read_only_) return;
  writes_stopped_ = Status::Damaged(
      "writes are stopped until the damaged server is repaired (s3oram rebuild --server N "
      "for the server named here, or a clean s3oram scrub), then the filesystem is opened "
      "again: " +
      st.message());
  spdlog::error("{}: this client makes no more evictions or writes (reads go on while the root "
                "has room) until that server is repaired: {}",
                recorded ? "the state records damaged storage on a server"
                         : "a server reported damaged storage",
                st.message());
}

Status OramClient::RecordProblemNote(const std::string& text, bool damaged) {
  const std::string kept = text.substr(0, kProblemNoteMax);
  ClientStateStore::Batch b;
  b.SetProblemNote(ProblemNote{kept, static_cast<std::uint64_t>(std::time(nullptr)), damaged});
  S3ORAM_RETURN_IF_ERROR(store_->Commit(b));
  noted_problem_ = kept;
  return Status::Ok();
}

Result<std::optional<std::uint64_t>> OramClient::PendingEviction() const {
  S3ORAM_ASSIGN_OR_RETURN(const std::vector<PendingOp> pending, store_->LoadPending());
  for (const PendingOp& op : pending) {
    if (op.kind == kPendingEvictKind) return std::optional<std::uint64_t>(op.seq);
  }
  return std::optional<std::uint64_t>();
}

Status OramClient::ClearProblemNote() {
  if (!store_->problem_note()) return Status::Ok();
  ClientStateStore::Batch b;
  b.SetProblemNote(std::nullopt);
  S3ORAM_RETURN_IF_ERROR(store_->Commit(b, /*durable=*/true));
  noted_problem_.clear();
  writes_stopped_.reset();
  return Status::Ok();
}

Status OramClient::NoteFencing(Status st) {
  NoteProblem(st);
  if (st.code() == Status::Code::kLeaseHeld && !fenced_) {
    fenced_ = true;
    spdlog::error("fenced off: {}. This client can no longer read or change the filesystem; "
                  "nothing it had not committed is applied",
                  st.message());
  }
  return st;
}

}  // namespace s3oram
