#include "oramcore/protocol/client.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <optional>
#include <string>

#include "oramcore/base/fault_point.h"
#include "oramcore/base/random.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/crypto/subkeys.h"
#include "oramcore/math/field.h"
#include "oramcore/math/random_elems.h"
#include "oramcore/math/shamir.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/protocol/catch_up.h"
#include "oramcore/protocol/consistency.h"
#include "oramcore/protocol/counter_agreement.h"
#include "oramcore/protocol/lease_holder.h"
#include "oramcore/protocol/server_addresses.h"
#include "oramcore/wire/transport.h"

namespace s3oram {

using field::Elem;

namespace {

// Every stale-state refusal names the way out (RefreshState).
std::string StaleStateFix(const std::string& state_path) {
  return "Another device has used this filesystem since; fetch the newest state backup from "
         "the servers with `s3oram refresh-state -s " +
         state_path + "`, or mount with -o refresh_state";
}

}  // namespace

OramClient::~OramClient() {
  if (!access_) return;  // Open failed before the client was whole: nothing held yet
  // As Close(): a failed flush stays logged for the next Open.
  if (!roots_->empty() && session_->lease_held() && !session_->fenced()) {
    if (Status st = roots_->Flush(); !st.ok()) {
      spdlog::warn("the last accesses' root writes stay pending in the state: {}", st.ToString());
    }
  }
  if (roots_->lagging() && session_->lease_held() && !session_->fenced()) {
    if (Status st = roots_->SettleLagging(/*wait=*/true); !st.ok()) {
      spdlog::warn("root writes a server lags on stay logged in the state: {}", st.ToString());
    }
  }
  if (Status st = SettleEviction(); !st.ok()) {
    spdlog::warn("eviction {} stays under way in the state (the next Open finishes it): {}",
                 session_->counters().ne, st.ToString());
  }
  if (session_->lease_held() && !session_->fenced()) session_->ReleaseLease();
}

Status OramClient::Initialize(const std::string& state_path, const FsConfig& config_in,
                              const Secret& passphrase, const KdfParams& kdf,
                              bool overwrite_servers, const ServerConnector& connect) {
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
  S3ORAM_ASSIGN_OR_RETURN(auto servers, ConnectServers(connect, AddressesOf(config)));
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

Result<std::unique_ptr<OramClient>> OramClient::OpenImpl(const std::string& state_path,
                                                         const Secret& passphrase, bool read_only,
                                                         ClientOptions options) {
  random::EnsureInitialized();
  std::unique_ptr<OramClient> client(new OramClient());
  const bool allow_stale = read_only && options.allow_stale;
  const bool allow_unreachable = read_only && options.allow_unreachable;
  S3ORAM_ASSIGN_OR_RETURN(client->session_,
                          ClientSession::Open(state_path, passphrase, read_only, options));
  S3ORAM_RETURN_IF_ERROR(client->LoadState());
  client->AskServersAtOpen();
  if (!read_only) S3ORAM_RETURN_IF_ERROR(client->ExcludeSilentAtOpen());
  const OpeningViews& views = client->opened_with_;
  const std::vector<ServerReport>& reports = views.reports;
  S3ORAM_RETURN_IF_ERROR(client->CheckServersHoldThisState(reports, allow_unreachable));
  S3ORAM_RETURN_IF_ERROR(client->RefuseIfRolledBack(reports, state_path, allow_stale));
  // The sequence t + 1 servers (or this state) agree on, raised to a lone
  // server's only within kMaxCounterLead (oramcore/protocol/counter_agreement.h);
  // a writable open refuses an outlier (StartEpoch).
  std::vector<std::uint64_t> applied_seqs;
  for (const auto& r : reports) applied_seqs.push_back(r.reply.applied_seq);
  const AdoptedCounter seq =
      AdoptCounter(applied_seqs, client->session_->counters().seq, client->params().threshold);
  client->session_->counters().seq = seq.value;
  S3ORAM_RETURN_IF_ERROR(client->JudgeStateFreshness(views, state_path, allow_stale));
  if (client->session_->read_only()) return client;

  S3ORAM_RETURN_IF_ERROR(client->StartEpoch(reports, seq, applied_seqs));
  if (Status lease = client->session_->AcquireLease(client->opened_epoch_); !lease.ok()) {
    // Nothing was changed under the new epoch: a state that equalled its
    // last backup still does (its mark follows the epoch), so a refused
    // mount does not later read as unsaved work.
    (void)client->KeepBackupMark();
    return lease;
  }
  S3ORAM_RETURN_IF_ERROR(client->roots_->ResendLogged());
  S3ORAM_RETURN_IF_ERROR(client->roots_->RepairLoggedLagging());
  if (const auto& note = client->session_->store().problem_note(); note && note->damaged) {
    client->session_->StopWrites(Status::Damaged(note->text), /*recorded=*/true);
  }
  if (Status finished = client->evictor_->FinishPending(); !finished.ok()) {
    client->session_->NoteProblem(finished);
    return finished;
  }
  return client;
}

Status OramClient::LoadState() {
  const FsConfig& config = session_->config();
  S3ORAM_ASSIGN_OR_RETURN(PositionMap pm, session_->store().LoadPositionMap());
  pm_ = std::make_unique<PositionMap>(std::move(pm));
  if (!session_->read_only()) {
    // Two rounds of root writes (background eviction, RootCopies).
    S3ORAM_ASSIGN_OR_RETURN(
        root_copies_, RootCopies::Open(session_->state_path() + ".roots",
                                       2 * std::size_t{config.params.evict_rate},
                                       static_cast<std::size_t>(config.params.elems_per_slot())));
  }
  std::vector<Elem> xs;
  for (std::size_t i = 0; i < config.params.parties; ++i) xs.push_back(shamir::PartyX(i));
  S3ORAM_ASSIGN_OR_RETURN(lambda_, shamir::LagrangeAtZero(xs));
  roots_ = std::make_unique<RootWriteQueue>(*session_, *pm_, stats_);
  evictor_ = std::make_unique<Evictor>(*session_, *pm_, stats_, *roots_);
  S3ORAM_ASSIGN_OR_RETURN(
      decoder_, shamir::RobustDecoder::Make(config.params.parties, 2 * config.params.threshold));
  access_ = std::make_unique<AccessPath>(*session_, *pm_, stats_, *decoder_, *roots_, *evictor_,
                                         root_copies_.get());
  return Status::Ok();
}

void OramClient::AskServersAtOpen() {
  opened_with_ = session_->AskViews(session_->options().requests.deadline);
}

Status OramClient::ExcludeSilentAtOpen() {
  std::optional<std::size_t> silent;
  for (std::size_t i : session_->participants()) {
    const Status& st = opened_with_.reports[i].status;
    if (st.ok() || !IsSilence(st)) continue;
    if (silent) return Status::Ok();  // two silent: the open fails naming the first
    silent = i;
  }
  if (!silent || !session_->CanExclude(*silent)) return Status::Ok();
  return session_->Exclude(*silent, "it did not answer when this client opened (" +
                                        opened_with_.reports[*silent].status.message() + ")");
}

OramClient::Snapshot OramClient::TakeSnapshot() const {
  Snapshot s;
  s.state_path = session_->state_path();
  s.params = params();
  s.counters = counters();
  s.live_blocks = pm_->live_blocks();
  s.eviction_mac_check = eviction_mac_check();
  s.freshness = freshness_;
  s.problem_note = problem_note();
  s.rekey = rekey();
  s.backup_mark = backup_mark();
  s.writes_stopped = writes_stopped();
  s.fenced = fenced();
  s.down = ServersDown();
  s.wrong_answers = stats_.wrong_answers;
  s.exclusions = session_->store().exclusions();
  s.lagged_answers = stats_.lagged_answers;
  return s;
}

std::vector<std::optional<ServerDown>> OramClient::ServersDown() const {
  const ServerSet& set = session_->servers();
  std::vector<std::optional<ServerDown>> down(set.size());
  for (std::size_t i = 0; i < down.size(); ++i) down[i] = set.Down(i);
  return down;
}

Status OramClient::CheckServersHoldThisState(const std::vector<ServerReport>& reports,
                                             bool allow_unreachable) {
  const OramParams& p = params();
  // Every server must serve this filesystem with this shape.
  std::vector<std::size_t> behind;
  std::size_t reachable = 0;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    // An excluded server is behind by design (and may be down): it is
    // brought back by a rebuild, which checks it then.
    if (session_->excluded(i)) continue;
    if (!r.status.ok() && allow_unreachable) continue;
    if (!r.status.ok()) return r.status;
    ++reachable;
    const std::string who = "server " + std::to_string(i) + " (" + r.endpoint + ")";
    if (!r.reply.initialized) {
      // A server being rebuilt, or one that lost its disk, says so in its
      // STATUS; name the command that fixes each case (oramcore/protocol/rebuild.h).
      if (r.reply.rebuilding) {
        return Status::FailedPrecondition(who + " is being rebuilt; finish it with s3oram rebuild "
                                          "--server " + std::to_string(i));
      }
      return Status::FailedPrecondition(who + " holds no filesystem; run s3oram init, or s3oram "
                                        "rebuild --server " + std::to_string(i) +
                                        " if it lost its data");
    }
    if (r.reply.server_index != i || !(r.reply.shape == ShapeOf(p))) {
      return Status::FailedPrecondition(who +
                                        " serves a different share (index or shape mismatch)");
    }
    if (r.reply.applied_evictions < session_->counters().ne) behind.push_back(i);
  }
  if (behind.empty()) return Status::Ok();
  // Servers behind the state's eviction count lost data (or were put back
  // to an old copy): every one of them is named, not only the first.
  std::string who;
  for (std::size_t i : behind) {
    who += std::string(who.empty() ? "" : ", ") + "server " + std::to_string(i) + " (" +
           reports[i].endpoint + ") has applied only " +
           std::to_string(reports[i].reply.applied_evictions);
  }
  const bool all = behind.size() == reachable;
  const bool rebuildable = reachable - behind.size() >= p.threshold + 1;
  std::string fix;
  if (all) {
    fix =
        ": every server is behind this state, so the servers were put back together (an "
        "old copy of their data directories) or this state belongs to a newer copy of them. "
        "Put their newest data back; otherwise restore a backup the servers are not behind "
        "(s3oram restore --generation N) and accept losing what was written since";
  } else if (!rebuildable) {
    fix = ": fewer than t + 1 = " + std::to_string(p.threshold + 1) +
          " servers hold the tree this state knows, so they cannot be rebuilt from the others. "
          "Put their newest data back; otherwise restore a backup they are not behind "
          "(s3oram restore --generation N) and accept losing what was written since";
  } else {
    fix = std::string(": ") + (behind.size() > 1 ? "those servers" : "the server") +
          " lost data; repair with s3oram rebuild --server " + std::to_string(behind.front()) +
          (behind.size() > 1 ? ", then the next one" : "");
  }
  return Status::FailedPrecondition(who + " evictions but the client state records " +
                                    std::to_string(session_->counters().ne) + fix);
}

Status OramClient::RefuseIfRolledBack(const std::vector<ServerReport>& reports,
                                      const std::string& state_path, bool allow_stale) const {
  // Rolled back: every request's seq is at most one beyond what the state
  // held durably when it was sent (NextMutationHeader), so t + 1 servers
  // that applied more than that under this state's own epoch prove the state
  // lost commits it had made: an older copy of the file or its log cut at an
  // earlier commit (both still authenticate), or a disk that lost synced
  // writes. Servers at a later epoch were written by another client (the
  // freshness check judges that); one server alone cannot make a state look
  // rolled back.
  const OramParams& p = params();
  std::vector<std::uint64_t> applied;
  for (const auto& r : reports) {
    applied.push_back(r.reply.epoch == session_->counters().epoch ? r.reply.applied_seq : 0);
  }
  const std::uint64_t agreed = AgreedAtLeast(applied, p.threshold + 1);
  const std::uint64_t held = session_->counters().seq;
  if (agreed <= held + 1) return Status::Ok();
  const std::string why = std::to_string(p.threshold + 1) + " servers have applied request " +
                          std::to_string(agreed) + " but the client state " + state_path +
                          " records only " + std::to_string(held) +
                          ": the state was rolled back (an older copy of it, or its log "
                          "cut short, was put in place, or the disk lost writes it had synced)";
  if (allow_stale) {
    spdlog::warn("{}; opened read-only as asked", why);
    return Status::Ok();
  }
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

Status OramClient::JudgeStateFreshness(const OpeningViews& opening, const std::string& state_path,
                                       bool allow_stale) {
  const std::vector<ServerReport>& reports = opening.reports;
  // Freshness, agreed by t + 1 servers (oramcore/protocol/freshness.h): a
  // state another client has moved past (a copy of this state, a restored
  // backup, a forced takeover, another device, also one that only renamed
  // or created files and uploaded its state) must not be written with, nor
  // published as the newest backup.
  // Servers left out (allow_unreachable: their STATUS failed) are judged
  // by the others: t + 1 of those that answered.
  std::vector<ServerFreshness> views;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    if (!reports[i].status.ok() || session_->excluded(i)) continue;
    ServerFreshness& view = views.emplace_back();
    view.store_epoch = reports[i].reply.epoch;
    view.applied_evictions = reports[i].reply.applied_evictions;
    names.push_back("server " + std::to_string(i) + " (" + reports[i].endpoint + ")");
    const auto& backups = opening.backups[i];
    if (!backups.ok()) return backups.status();
    for (const auto& b : backups.value()) view.generations.push_back(b.generation);
  }
  S3ORAM_ASSIGN_OR_RETURN(const std::vector<PendingOp> pending, session_->store().LoadPending());
  bool evicting = false;
  for (const auto& op : pending) evicting |= op.kind == kPendingEvictKind;
  freshness_ = JudgeFreshness(session_->counters(), session_->store().backup_mark(), views, names,
                              params().threshold, evicting);
  const FreshnessVerdict& f = freshness_;
  for (const auto& w : f.warnings) spdlog::warn("{}", w);
  if (!f.inconsistent.empty() && !allow_stale) {
    return Status::FailedPrecondition(f.inconsistent + " (`s3oram scrub -s " + state_path +
                                      "` checks the shares)");
  }
  if (f.stale && !allow_stale) {
    return Status::StaleState(f.why +
                              ": the state is stale, and writing with it would "
                              "destroy that client's data. " +
                              StaleStateFix(state_path));
  }
  return Status::Ok();
}

Status OramClient::StartEpoch(const std::vector<ServerReport>& reports, const AdoptedCounter& seq,
                              const std::vector<std::uint64_t>& applied_seqs) {
  // A new epoch for this client incarnation, durable before any request
  // uses it; then the lease under that epoch. Every server must accept it,
  // so it goes above the epoch t + 1 servers (or this state: a copy of it
  // may have run elsewhere) agree on, and above a lone server's within
  // kMaxCounterLead (a lease that reached only it before its client
  // stopped). A server further above is named and refused, never followed:
  // one forged lease record must not push every server to the last epoch.
  const std::uint64_t opened_epoch = session_->counters().epoch;
  auto name = [&](std::size_t i) {
    return "server " + std::to_string(i) + " (" + reports[i].endpoint + ")";
  };
  S3ORAM_RETURN_IF_ERROR(
      CounterOutlierError(seq, applied_seqs, params().threshold, "applied request sequence", name));
  std::vector<std::uint64_t> epochs;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& lease = opened_with_.leases[i];  // asked with the STATUS
    if (session_->excluded(i)) {
      // Its word counts if it gave one (a higher epoch it saw is one this
      // client must pass), but it is not needed.
      epochs.push_back(lease.ok() ? std::max(reports[i].reply.epoch, lease->highest_epoch) : 0);
      continue;
    }
    if (!lease.ok()) return lease.status();
    epochs.push_back(std::max(reports[i].reply.epoch, lease->highest_epoch));
  }
  S3ORAM_ASSIGN_OR_RETURN(
      session_->counters().epoch,
      NextAgreedCounter(epochs, opened_epoch, params().threshold, "epoch", name));
  ClientStateStore::Batch batch;
  batch.SetCounters(session_->counters());
  S3ORAM_RETURN_IF_ERROR(session_->store().Commit(batch, /*durable=*/true));
  opened_epoch_ = opened_epoch;
  return Status::Ok();
}

std::vector<ServerStats> OramClient::QueryServerStats(std::chrono::milliseconds timeout) {
  std::vector<ServerStats> out(session_->servers().size());
  TransportOptions opts{std::min(timeout, session_->options().requests.resend_after), timeout};
  for (std::size_t i = 0; i < session_->servers().size(); ++i) {
    out[i].endpoint = session_->servers().endpoint(i);
    wire::Header h = session_->NextHeader();
    auto frame = wire::Encode(h, wire::StatsRequest{});
    auto r =
        session_->servers().ExchangeWith({i}, {frame}, h, wire::MessageType::kStatsReply, opts);
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
  if (server >= session_->servers().size()) {
    return Status::InvalidArgument("scrub: no server " + std::to_string(server));
  }
  TransportOptions opts{std::min(timeout, session_->options().requests.resend_after), timeout};
  wire::Header h = session_->NextHeader();
  auto frame = wire::Encode(h, wire::ScrubRequest{first, count});
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies,
      session_->servers().ExchangeWith({server}, {frame}, h, wire::MessageType::kScrubReply, opts));
  return std::get<wire::ScrubReply>(replies[0].body);
}

Result<std::vector<std::uint8_t>> OramClient::Access(AccessOp op, BlockId id,
                                                     std::span<const std::uint8_t> data) {
  const BatchItem item{op, id, data, nullptr};
  return std::move(AccessMany(std::span<const BatchItem>(&item, 1))[0]);
}

Result<std::vector<std::uint8_t>> OramClient::Update(BlockId id, const BlockModifier& modify) {
  const BatchItem item{AccessOp::kWrite, id, {}, &modify};
  return std::move(AccessMany(std::span<const BatchItem>(&item, 1))[0]);
}

Status OramClient::Sync() {
  if (session_->read_only()) return Status::Ok();
  // A server found lying or damaged by the last accesses is left out
  // durably before the root writes go.
  S3ORAM_RETURN_IF_ERROR(session_->ExcludeSuspects().status());
  if (!roots_->empty()) return roots_->Flush();
  ClientStateStore::Batch batch;
  batch.SetCounters(session_->counters());
  return session_->store().Commit(batch, /*durable=*/true);
}

Status OramClient::SyncKeepingLatestRootWrite() {
  if (session_->read_only()) return Status::Ok();
  ClientStateStore::Batch batch;
  batch.SetCounters(session_->counters());
  return session_->store().Commit(batch, /*durable=*/true);
}

Status OramClient::RecordBackup(std::uint64_t generation, std::uint64_t snapshot_epoch) {
  if (snapshot_epoch != session_->counters().epoch) {
    return Status::FailedPrecondition("the backup was taken under epoch " +
                                      std::to_string(snapshot_epoch) + ", not this client's " +
                                      std::to_string(session_->counters().epoch));
  }
  ClientStateStore::Batch batch;
  batch.SetBackupMark(BackupMark{generation, snapshot_epoch});
  return session_->store().Commit(batch, /*durable=*/true);
}

Status OramClient::KeepBackupMark() {
  const auto& mark = session_->store().backup_mark();
  if (!mark || mark->epoch != opened_epoch_ || mark->epoch == session_->counters().epoch)
    return Status::Ok();
  ClientStateStore::Batch batch;
  batch.SetBackupMark(BackupMark{mark->generation, session_->counters().epoch});
  return session_->store().Commit(batch, /*durable=*/true);
}

Result<std::optional<std::size_t>> OramClient::OddServerOf(std::uint64_t bucket,
                                                            std::uint32_t slot,
                                                            std::chrono::milliseconds timeout) {
  const BlockCodec& codec = session_->codec();
  if (!codec.has_share_mac()) return std::optional<std::size_t>();
  TransportOptions opts{std::min(timeout, session_->options().requests.resend_after), timeout};
  wire::Header h = session_->NextHeader();
  const auto frame = wire::Encode(h, wire::SlotShareRequest{bucket, slot});
  const std::vector<std::size_t>& servers = session_->participants();
  std::vector<std::vector<std::uint8_t>> frames(servers.size(), frame);
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies, session_->servers().ExchangeWith(servers, frames, h,
                                                     wire::MessageType::kSlotShareReply, opts));
  std::vector<std::vector<Elem>> shares;
  for (auto& r : replies) {
    auto& reply = std::get<wire::SlotShareReply>(r.body);
    if (reply.bucket != bucket || reply.slot != slot) {
      return Status::Protocol("a server answered SLOT_SHARE for another slot");
    }
    shares.push_back(std::move(reply.share));
  }
  std::optional<std::size_t> odd = OddShareOut(shares, *codec.mac(), servers);
  if (!odd && codec.previous_mac() != nullptr) {
    odd = OddShareOut(shares, *codec.previous_mac(), servers);
  }
  if (odd) odd = servers[*odd];  // a participant's index among all servers
  return odd;
}

std::vector<std::vector<Elem>> OramClient::parity_rows() const {
  std::vector<Elem> xs;
  for (std::size_t i : session_->participants()) xs.push_back(shamir::PartyX(i));
  auto rows = shamir::ParityChecks(xs, params().threshold);
  return rows.ok() ? std::move(rows).value() : std::vector<std::vector<Elem>>{};
}

Result<std::vector<wire::ParityReply>> OramClient::ParityAll(std::uint64_t first,
                                                             std::uint32_t count,
                                                             const wire::ParitySeed& seed,
                                                             std::chrono::milliseconds timeout) {
  TransportOptions opts{std::min(timeout, session_->options().requests.resend_after), timeout};
  wire::Header h = session_->NextHeader();
  const auto frame = wire::Encode(h, wire::ParityRequest{first, count, seed});
  const std::vector<std::size_t>& servers = session_->participants();
  std::vector<std::vector<std::uint8_t>> frames(servers.size(), frame);
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies,
      session_->servers().ExchangeWith(servers, frames, h, wire::MessageType::kParityReply, opts));
  std::vector<wire::ParityReply> out;
  for (auto& m : replies) out.push_back(std::move(std::get<wire::ParityReply>(m.body)));
  return out;
}

Status OramClient::AgeFill(const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  if (session_->counters().ne != 0 || session_->counters().nr != 0 ||
      evictor_->in_flight() != nullptr || !roots_->empty()) {
    return Status::FailedPrecondition(
        "age fill: this filesystem has been used (" + std::to_string(session_->counters().ne) +
        " evictions, " + std::to_string(session_->counters().nr) +
        " accesses since the last); filling would overwrite its blocks, so it is only for a "
        "new filesystem (benchmarks)");
  }
  // Every server unused before any writes: one that refused half-way would
  // leave the others' buckets filled and its own not, inconsistent sharings
  // that every read through them would refuse.
  const auto reports = session_->QueryServers(session_->options().requests.deadline);
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    if (!r.status.ok()) return r.status;
    if (r.reply.applied_seq != 0 || r.reply.applied_evictions != 0 ||
        r.reply.prepared_eviction != 0 || r.reply.evicting) {
      return Status::FailedPrecondition(
          "age fill: server " + std::to_string(i) + " (" + session_->servers().endpoint(i) +
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
    wire::Header h = session_->NextHeader();
    const auto frame = wire::Encode(h, wire::AgeFillRequest{b, 1, seed});
    std::vector<std::vector<std::uint8_t>> frames(session_->servers().size(), frame);
    S3ORAM_ASSIGN_OR_RETURN(
        auto replies, session_->servers().Exchange(frames, h, wire::MessageType::kAgeFillReply,
                                                   session_->options().evictions));
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

Result<std::unique_ptr<CatchUpRun>> OramClient::StartCatchUp(std::size_t server,
                                                             CatchUpRun::Progress progress,
                                                             std::size_t range_bytes) {
  if (session_->read_only()) {
    return Status::FailedPrecondition("a read-only client catches no server up");
  }
  if (!session_->excluded(server)) {
    return Status::InvalidArgument("server " + std::to_string(server) + " is not excluded");
  }
  if (session_->fenced() || !session_->lease_held()) {
    return Status::LeaseHeld("this client does not hold the lease: it catches no server up");
  }
  // Still the holder on every participant (a client fenced meanwhile must
  // not touch the returning server, which may not know the newer epoch).
  S3ORAM_RETURN_IF_ERROR(session_->RenewLease().WithContext("before a catch-up"));
  catch_up_started_ = std::chrono::steady_clock::now();
  return CatchUpRun::Start(*session_, server, std::move(progress), range_bytes);
}

Result<bool> OramClient::CatchUpStep(CatchUpRun& run) {
  if (session_->fenced()) return Status::LeaseHeld("fenced off: the catch-up stops");
  return run.CopyNext();
}

Result<RebuildReport> OramClient::FinishCatchUp(CatchUpRun& run) {
  using Ms = std::chrono::milliseconds;
  const std::size_t server = run.target();
  const auto started = std::chrono::steady_clock::now();
  // The participants must agree on the tree the last pass copies from: no
  // eviction under way, every root write on every participant.
  S3ORAM_RETURN_IF_ERROR(evictor_->Settle().WithContext("settling the eviction before a catch-up"));
  S3ORAM_RETURN_IF_ERROR(Sync().WithContext("sending the root writes before a catch-up"));
  // A root write some participant still lags on would give the returning
  // server a root slot interpolated from old and new shares.
  S3ORAM_RETURN_IF_ERROR(
      roots_->SettleLagging(/*wait=*/true).WithContext("settling lagging root writes first"));
  if (roots_->lagging()) {
    return Status::Unavailable("a root write is still lagging on a server; catching up later");
  }
  S3ORAM_RETURN_IF_ERROR(session_->RenewLease().WithContext("before a catch-up's last pass"));
  const auto settled = std::chrono::steady_clock::now();
  S3ORAM_ASSIGN_OR_RETURN(RebuildReport report, run.Finish());
  S3ORAM_RETURN_IF_ERROR(session_->Readmit(server));
  const auto done = std::chrono::steady_clock::now();
  spdlog::info(
      "server {} ({}) caught up in {} ms, of which the last pass held the accesses {} ms ({} ms "
      "settling the eviction and root writes, {} buckets): it had applied {} of {} evictions; it "
      "missed {} of {} buckets (the root and what the evictions since rewrote), {} were sent, it "
      "kept the rest; it takes part again",
      server, session_->servers().endpoint(server),
      std::chrono::duration_cast<Ms>(done - catch_up_started_).count(),
      std::chrono::duration_cast<Ms>(done - started).count(),
      std::chrono::duration_cast<Ms>(settled - started).count(), report.last_pass_buckets,
      report.caught_up_from, session_->counters().ne, report.buckets_missed, report.buckets,
      report.buckets_sent);
  return report;
}

Result<RebuildReport> OramClient::CatchUpExcluded(std::size_t server,
                                                  CatchUpRun::Progress progress) {
  S3ORAM_ASSIGN_OR_RETURN(std::unique_ptr<CatchUpRun> run,
                          StartCatchUp(server, std::move(progress)));
  // Bounded: with no access between the steps nothing turns stale again,
  // and the copy sends at most CatchUpRun::kMaxPasses times what the
  // server missed in any case.
  while (true) {
    S3ORAM_ASSIGN_OR_RETURN(const bool done, CatchUpStep(*run));
    if (done) break;
  }
  return FinishCatchUp(*run);
}

Status OramClient::Close() {
  // The last access's root write goes before the lease: a failure leaves it
  // logged in the state, and the next Open sends it. So does the eviction
  // in flight (the next Open finishes it if this fails).
  Status flushed = Status::Ok();
  // A server found lying or damaged since the last chunk is left out
  // durably, so the next Open does not ask it.
  if (session_->lease_held() && !session_->fenced()) {
    flushed = session_->ExcludeSuspects().status();
  }
  if (flushed.ok() && !roots_->empty() && session_->lease_held() && !session_->fenced()) {
    flushed = roots_->Flush();
  }
  // Writes a server lags on: acknowledged, or written again on every server
  // (else they stay logged, and the next Open rewrites them).
  if (roots_->lagging() && session_->lease_held() && !session_->fenced()) {
    if (Status st = roots_->SettleLagging(/*wait=*/true); !st.ok() && flushed.ok()) flushed = st;
  }
  if (Status settled = SettleEviction(); !settled.ok()) {
    spdlog::warn("closing with eviction {} under way: {}", session_->counters().ne,
                 settled.ToString());
    if (flushed.ok()) flushed = settled;
  }
  if (session_->lease_held() && !session_->fenced()) session_->ReleaseLease();
  session_->ForgetLease();
  return flushed;
}

}  // namespace s3oram
