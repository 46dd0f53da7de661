#include "oramcore/protocol/client_session.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <optional>
#include <string>
#include <utility>

#include "oramcore/base/fault_point.h"
#include "oramcore/base/time_into.h"
#include "oramcore/crypto/subkeys.h"
#include "oramcore/protocol/fresh_shares.h"
#include "oramcore/protocol/lease_holder.h"
#include "oramcore/protocol/server_addresses.h"
#include "oramcore/wire/transport.h"

namespace s3oram {

using field::Elem;

Result<std::unique_ptr<ClientSession>> ClientSession::Open(const std::string& state_path,
                                                           const Secret& passphrase, bool read_only,
                                                           ClientOptions options) {
  std::unique_ptr<ClientSession> s(new ClientSession());
  s->options_ = std::move(options);
  s->read_only_ = read_only;
  if (!read_only) {
    // One writer per state file on this machine, whatever the servers say:
    // two processes sharing one SQLite state would corrupt each other. The
    // lock dies with the process (a crash leaves nothing to clean up).
    s->state_lock_fd_ = ::open(state_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (s->state_lock_fd_ >= 0 && ::flock(s->state_lock_fd_, LOCK_EX | LOCK_NB) != 0) {
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
    S3ORAM_RETURN_IF_ERROR(unlocked->Rebind(&s->state_lock_fd_)
                               .WithContext("converting " + state_path + " to state format " +
                                            std::to_string(kStateFormat)));
    spdlog::info(
        "{}: converted to state format {} (every log frame authenticated, a key of "
        "its own)",
        state_path, kStateFormat);
  }
  std::shared_ptr<UnlockedState> shared(std::move(unlocked));
  s->backup_key_ = DeriveBackupKey(shared->master());  // for BackupState
  S3ORAM_ASSIGN_OR_RETURN(s->store_, ClientStateStore::Open(shared));
  const ClientStateStore& store = *s->store_;
  const FsConfig& config = store.config();
  S3ORAM_RETURN_IF_ERROR(ValidateParams(config.params, config.allow_unsafe)
                             .WithContext("parameters in " + state_path));
  if (config.servers.size() != config.params.parties) {
    return Status::Corruption("state lists " + std::to_string(config.servers.size()) +
                              " servers for " + std::to_string(config.params.parties) + " parties");
  }
  const ShareMacSecrets* share_mac =
      config.params.mac_elems > 0 ? &store.share_mac_secrets() : nullptr;
  std::optional<BlockCodec::PreviousKeys> previous;
  if (store.rekey()) {
    // A rotation under way: blocks not re-sealed yet are under the previous key.
    previous = BlockCodec::PreviousKeys{
        &store.rekey_old_master(),
        store.rekey_old_share_mac() ? &*store.rekey_old_share_mac() : nullptr};
  }
  s->codec_ = std::make_unique<BlockCodec>(shared->master(), shared->header().fs_id, config.params,
                                           share_mac, previous);
  s->counters_ = store.counters();
  S3ORAM_ASSIGN_OR_RETURN(s->servers_, ConnectServers(s->options_.connect, AddressesOf(config)));
  s->ComputeParticipants();
  return s;
}

ClientSession::~ClientSession() {
  if (state_lock_fd_ >= 0) ::close(state_lock_fd_);
}

std::string ClientSession::ServerSetName() const {
  std::string out = "{";
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    out += (i ? ", " : "") + std::to_string(i) + "=" + servers_->endpoint(i);
  }
  return out + "}";
}

wire::Header ClientSession::NextHeader() {
  wire::Header h;
  h.fs_id = config().fs_id;
  h.epoch = counters_.epoch;
  h.seq = ++counters_.seq;
  return h;
}

Result<wire::Header> ClientSession::NextMutationHeader() {
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

Result<std::vector<wire::Header>> ClientSession::NextMutationHeaders(std::size_t count) {
  if (count <= 1) {
    S3ORAM_ASSIGN_OR_RETURN(wire::Header h, NextMutationHeader());
    return std::vector<wire::Header>{h};
  }
  // The rollback rule (OpenImpl): no server may apply a request more than one
  // seq beyond what the state holds on disk, so the seqs of requests that go
  // out together are made durable first.
  const std::uint64_t last = counters_.seq + count;
  if (last > store_->durable_seq() + 1) {
    Counters c = store_->counters();
    c.seq = last - 1;
    ClientStateStore::Batch b;
    b.SetCounters(c);
    S3ORAM_RETURN_IF_ERROR(store_->Commit(b, /*durable=*/true));
  }
  std::vector<wire::Header> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(NextHeader());
  return out;
}

Status ClientSession::SendLease(std::size_t server, const wire::Body& body,
                                wire::LeaseReply* reply) {
  wire::Header h = NextHeader();
  auto frame = wire::Encode(h, body);
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies, servers_->ExchangeWith({server}, {frame}, h, wire::MessageType::kLeaseReply,
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

Status ClientSession::AcquireLease(std::uint64_t opened_epoch) {
  const std::string& state_path = store_->path();
  const LeaseHolder me = CurrentLeaseHolder(state_path, options_.lease_purpose);
  const std::string sealed = SealHolder(codec_->sealer(), counters_.epoch, me);
  const bool force = options_.force_lease;
  std::vector<std::size_t> granted;
  std::vector<std::pair<std::size_t, wire::LeaseReply>> refusals;
  auto give_back = [&] {
    // A failed open leaves nothing held.
    for (std::size_t i : granted) (void)SendLease(i, wire::LeaseReleaseRequest{}, nullptr);
  };
  for (std::size_t i : participants_) {
    wire::LeaseReply r;
    if (Status failure = SendLease(i, wire::LeaseAcquireRequest{force, sealed}, &r);
        !failure.ok()) {
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
    const auto holder = OpenHolder(codec_->sealer(), r.holder_epoch, r.holder);
    if (!force && holder && r.holder_epoch == opened_epoch &&
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
    spdlog::warn(
        "taking over the lease of a crashed client of this state file on this machine "
        "({} of {} servers held it): {}",
        dead_twin.size(), participants_.size(),
        DescribeHolder(*OpenHolder(codec_->sealer(), r.holder_epoch, r.holder)));
    for (std::size_t i : dead_twin) {
      wire::LeaseReply r2;
      Status st = SendLease(i, wire::LeaseAcquireRequest{true, sealed}, &r2);
      if (st.ok() && !r2.granted)
        st = Status::LeaseHeld("server " + std::to_string(i) + " refused the takeover");
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
    if (participants_.size() == servers_->size()) {
      spdlog::info("lease acquired on all servers as epoch {}", counters_.epoch);
    } else {
      spdlog::info("lease acquired as epoch {} on the {} servers taking part", counters_.epoch,
                   participants_.size());
    }
    return Status::Ok();
  }
  give_back();
  const wire::LeaseReply& refusal = *first_other_reply;
  const std::string who = first_other
                              ? DescribeHolder(*first_other)
                              : "a client with epoch " + std::to_string(refusal.holder_epoch) +
                                    " whose description does not authenticate with this key";
  return Status::LeaseHeld(
      "the filesystem is in use by " + who + " (server " + std::to_string(first_other_server) +
      ": lease held for " + Ago(refusal.held_ms) + ", holder last active " + Ago(refusal.idle_ms) +
      " ago). Only one client may write it. If that client is gone for good, take the lease "
      "over with --force: it is then fenced off and can change nothing");
}

Status ClientSession::RenewLease() {
  if (fenced_) return Status::LeaseHeld("this client was fenced off");
  if (!lease_held_) return Status::FailedPrecondition("this client holds no lease");
  // Same epoch and (re-sealed) description: servers just note the contact.
  for (std::size_t i : participants_) {
    wire::LeaseReply r;
    S3ORAM_RETURN_IF_ERROR(SendLease(i, wire::LeaseAcquireRequest{false, lease_sealed_}, &r)
                               .WithContext("renewing the lease"));
    if (!r.granted) {
      return NoteFencing(
          Status::LeaseHeld("server " + std::to_string(i) + " says another client (epoch " +
                            std::to_string(r.holder_epoch) + ") took the lease over"));
    }
  }
  return Status::Ok();
}

void ClientSession::ReleaseLease() {
  const auto saved = options_.requests;
  options_.requests.deadline =
      std::min(options_.requests.deadline, std::chrono::milliseconds(3000));
  options_.requests.resend_after =
      std::min(options_.requests.resend_after, options_.requests.deadline);
  for (std::size_t i : participants_) {
    if (Status st = SendLease(i, wire::LeaseReleaseRequest{}, nullptr); !st.ok()) {
      spdlog::warn("releasing the lease on server {}: {}", i, st.ToString());
    }
  }
  options_.requests = saved;
  lease_held_ = false;
}

Status ClientSession::NoteFencing(Status st) {
  NoteProblem(st);
  if (st.code() == Status::Code::kLeaseHeld && !fenced_) {
    fenced_ = true;
    spdlog::error(
        "fenced off: {}. This client can no longer read or change the filesystem; "
        "nothing it had not committed is applied",
        st.message());
  }
  return st;
}

// Bytes of a problem's text kept in the state.
constexpr std::size_t kProblemNoteMax = 2000;

void ClientSession::NoteProblem(const Status& st) {
  const bool damaged = st.code() == Status::Code::kDamaged;
  const bool inconsistent =
      st.code() == Status::Code::kIntegrity &&
      (st.message().find("inconsistent across the servers") != std::string::npos ||
       st.message().find("authenticate (share MAC)") != std::string::npos);
  if (!damaged && !inconsistent) return;
  // With servers to spare, a server reporting damaged storage is left out
  // (ExcludeSuspects: NoteProblem is only called between requests) and the
  // writes go on without it.
  if (damaged) {
    auto excluded = ExcludeSuspects();
    if (!excluded.ok()) {
      spdlog::warn("excluding the server that reported damage: {}", excluded.status().ToString());
    } else if (*excluded) {
      return;
    }
  }
  // One write per new problem, not per access.
  // The stop's own refusal repeats a problem already recorded.
  if (writes_stopped_ && st.message() == writes_stopped_->message()) return;
  if (damaged) StopWrites(st, /*recorded=*/false);
  if (noted_problem_ == st.message().substr(0, kProblemNoteMax)) return;
  // A recorded damage stops the next mount's writes: a lesser problem
  // (an inconsistency, an outvoted answer) must not replace it.
  if (const auto& note = store_->problem_note(); !damaged && note && note->damaged) return;
  if (Status c = RecordProblemNote(st.message(), damaged); !c.ok()) {
    spdlog::warn("recording the problem in the client state: {}", c.ToString());
  }
}

void ClientSession::StopWrites(const Status& st, bool recorded) {
  if (writes_stopped_ || read_only_) return;
  writes_stopped_ = Status::Damaged(
      "writes are stopped until the damaged server is repaired (s3oram rebuild --server N "
      "for the server named here, or a clean s3oram scrub), then the filesystem is opened "
      "again: " +
      st.message());
  spdlog::error(
      "{}: this client makes no more evictions or writes (reads go on while the root "
      "has room) until that server is repaired: {}",
      recorded ? "the state records damaged storage on a server"
               : "a server reported damaged storage",
      st.message());
}

Status ClientSession::RecordProblemNote(const std::string& text, bool damaged) {
  const std::string kept = text.substr(0, kProblemNoteMax);
  ClientStateStore::Batch b;
  b.SetProblemNote(ProblemNote{kept, static_cast<std::uint64_t>(std::time(nullptr)), damaged});
  S3ORAM_RETURN_IF_ERROR(store_->Commit(b));
  noted_problem_ = kept;
  return Status::Ok();
}

Status ClientSession::ClearProblemNote() {
  if (!store_->problem_note()) return Status::Ok();
  ClientStateStore::Batch b;
  b.SetProblemNote(std::nullopt);
  S3ORAM_RETURN_IF_ERROR(store_->Commit(b, /*durable=*/true));
  noted_problem_.clear();
  writes_stopped_.reset();
  return Status::Ok();
}

Status ClientSession::RecordRekeyProgress(const RekeyProgress& progress) {
  ClientStateStore::Batch batch;
  batch.SetRekeyProgress(progress);
  return store_->Commit(batch);
}

Status ClientSession::EndRekey() {
  ClientStateStore::Batch batch;
  batch.EndRekey();
  FaultPoint("rekey.finalize.before_commit");
  S3ORAM_RETURN_IF_ERROR(store_->Commit(batch, /*durable=*/true));
  FaultPoint("rekey.finalize.after_commit");
  codec_->ForgetPrevious();
  return Status::Ok();
}

std::vector<ServerSet::Answers> ClientSession::AskEveryServer(
    const std::vector<ControlRequest>& requests, std::chrono::milliseconds timeout) {
  return AskEveryServerOf(
      *servers_, [this] { return NextHeader(); }, requests, timeout,
      options_.requests.resend_after);
}

std::vector<ServerSet::Answers> ClientSession::AskEveryServerOf(
    ServerSet& servers, const std::function<wire::Header()>& next_header,
    const std::vector<ControlRequest>& requests, std::chrono::milliseconds timeout,
    std::chrono::milliseconds resend_after) {
  const std::size_t n = servers.size();
  std::vector<std::size_t> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i] = i;
  std::vector<std::vector<std::vector<std::uint8_t>>> frames;
  std::vector<ServerSet::RequestView> views;
  frames.reserve(requests.size());
  views.reserve(requests.size());
  for (const ControlRequest& q : requests) {
    const wire::Header h = next_header();
    frames.emplace_back(n, wire::Encode(h, q.body));
    views.push_back({h, q.expected_reply, &frames.back()});
  }
  const TransportOptions opts{std::min(timeout, resend_after), timeout};
  std::vector<ServerSet::Answers> answers =
      servers.ExchangeAnswers(all, views, opts, ServerSet::Wait::kEach);
  for (ServerSet::Answers& per_server : answers) {
    for (std::size_t i = 0; i < per_server.size(); ++i) {
      per_server[i].reply = servers.ReplyOrError(i, std::move(per_server[i]));
    }
  }
  return answers;
}

std::vector<ClientSession::ControlRequest> ClientSession::ViewRequests() {
  return {{wire::StatusRequest{}, wire::MessageType::kStatusReply},
          {wire::BackupListRequest{}, wire::MessageType::kBackupListReply},
          {wire::LeaseQueryRequest{}, wire::MessageType::kLeaseReply}};
}

ServerViews ClientSession::ViewsOf(const ServerSet& servers, const FsId& fs_id,
                                   std::vector<ServerSet::Answers> answers) {
  ServerViews views;
  for (std::size_t i = 0; i < answers[0].size(); ++i) {
    views.reports.push_back(ReportOf(servers, fs_id, i, std::move(answers[0][i])));
    const auto& backups = answers[1][i].reply;
    if (backups.ok()) {
      views.backups.emplace_back(std::get<wire::BackupListReply>(backups.value().body).backups);
    } else {
      views.backups.emplace_back(backups.status());
    }
    const auto& lease = answers[2][i].reply;
    if (lease.ok()) {
      views.leases.emplace_back(std::get<wire::LeaseReply>(lease.value().body));
    } else {
      views.leases.emplace_back(lease.status());
    }
  }
  return views;
}

ServerViews ClientSession::AskViews(std::chrono::milliseconds timeout) {
  return ViewsOf(*servers_, config().fs_id, AskEveryServer(ViewRequests(), timeout));
}

ServerReport ClientSession::ReportOf(std::size_t server, ServerSet::Answer answer) const {
  return ReportOf(*servers_, config().fs_id, server, std::move(answer));
}

ServerReport ClientSession::ReportOf(const ServerSet& servers, const FsId& fs_id,
                                     std::size_t server, ServerSet::Answer answer) {
  ServerReport report;
  report.endpoint = servers.endpoint(server);
  report.answered_in = answer.after;
  if (!answer.reply.ok()) {
    report.status = answer.reply.status();
    return report;
  }
  const wire::Message& m = answer.reply.value();
  const auto& reply = std::get<wire::StatusReply>(m.body);
  if (m.header.fs_id != fs_id && reply.initialized) {
    report.status = Status::FailedPrecondition("server " + std::to_string(server) + " (" +
                                               report.endpoint + ") serves another filesystem");
    return report;
  }
  report.reply = reply;
  return report;
}

std::vector<ServerReport> ClientSession::QueryServers(std::chrono::milliseconds timeout) {
  auto answers =
      AskEveryServer({{wire::StatusRequest{}, wire::MessageType::kStatusReply}}, timeout);
  std::vector<ServerReport> out;
  out.reserve(servers_->size());
  for (std::size_t i = 0; i < answers[0].size(); ++i) {
    out.push_back(ReportOf(i, std::move(answers[0][i])));
  }
  return out;
}

Result<std::vector<wire::Message>> ClientSession::ExchangeShared(
    std::span<const Elem> secret,
    const std::function<wire::Body(std::vector<Elem>&&, const wire::ShareSeed&)>& make_request,
    wire::MessageType expected_reply, const TransportOptions& options, std::uint64_t& compute_ns,
    std::uint64_t& wait_ns, Seeding seeding) {
  const OramParams& p = params();
  // The seeded participant's request goes last under kSeededLast.
  const std::size_t seeded_party = this->seeded_party();
  const bool seeded_last = seeding == Seeding::kSeededLast;
  if (seeded_last) {
    if (auto down = servers_->Down(seeded_party)) {
      return DownStatus(seeded_party, servers_->endpoint(seeded_party), *down);
    }
  }
  S3ORAM_ASSIGN_OR_RETURN(const wire::Header h, NextMutationHeader());
  // frames[k]: participant participants_[k]'s request.
  std::vector<std::vector<std::uint8_t>> frames;
  {
    TimeInto timer(compute_ns);
    std::vector<std::vector<Elem>> shares(p.parties);
    wire::ShareSeed seed;
    if (seeding != Seeding::kNone) {
      ShareVectorSeeded(secret, p.threshold, shares, seed, seeded_party);
    } else {
      ShareVector(secret, p.threshold, shares);
    }
    for (std::size_t i : participants_) {
      frames.push_back(wire::Encode(
          h, make_request(std::move(shares[i]), i == seeded_party ? seed : wire::ShareSeed{})));
      shares[i] = {};  // frames hold the bytes now; keep peak memory at one copy
    }
  }
  TimeInto timer(wait_ns);
  if (!seeded_last)
    return servers_->ExchangeWith(participants_, frames, h, expected_reply, options);
  // Every other server first, then the seeded one, within one deadline.
  const auto began = std::chrono::steady_clock::now();
  std::vector<std::size_t> others;
  std::vector<std::vector<std::uint8_t>> other_frames;
  std::size_t seeded_at = 0;
  for (std::size_t k = 0; k < frames.size(); ++k) {
    if (participants_[k] == seeded_party) {
      seeded_at = k;
      continue;
    }
    others.push_back(participants_[k]);
    other_frames.push_back(std::move(frames[k]));
  }
  S3ORAM_ASSIGN_OR_RETURN(std::vector<wire::Message> first,
                          servers_->ExchangeWith(others, other_frames, h, expected_reply, options));
  other_frames.clear();
  TransportOptions rest = options;
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - began);
  rest.deadline = std::max(std::chrono::milliseconds(1), options.deadline - spent);
  rest.resend_after = std::min(rest.resend_after, rest.deadline);
  S3ORAM_ASSIGN_OR_RETURN(std::vector<wire::Message> last,
                          servers_->ExchangeWith({seeded_party}, {std::move(frames[seeded_at])}, h,
                                                 expected_reply, rest));
  std::vector<wire::Message> replies(frames.size());
  std::size_t next_other = 0;
  for (std::size_t k = 0; k < frames.size(); ++k) {
    replies[k] = k == seeded_at ? std::move(last[0]) : std::move(first[next_other++]);
  }
  return replies;
}

void ClientSession::ComputeParticipants() {
  participants_.clear();
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    if (!excluded(i)) participants_.push_back(i);
  }
}

bool ClientSession::excluded(std::size_t server) const {
  for (const Exclusion& e : store_->exclusions()) {
    if (e.server == server) return true;
  }
  return false;
}

std::uint32_t ClientSession::ParticipantMask() const {
  if (participants_.size() == servers_->size()) return 0;
  std::uint32_t mask = 0;
  for (std::size_t i : participants_) mask |= std::uint32_t{1} << i;
  return mask;
}

bool ClientSession::CanExclude(std::size_t server) const {
  return server < servers_->size() && !excluded(server) &&
         participants_.size() > 2 * std::size_t{params().threshold} + 1;
}

Result<bool> ClientSession::ExcludeDown(const std::string& what) {
  if (read_only_) return false;
  std::optional<std::size_t> down;
  std::optional<ServerDown> why;
  for (std::size_t i : participants_) {
    auto d = servers_->Down(i);
    if (!d) continue;
    if (down) return false;  // two down: nothing can go on without both
    down = i;
    why = std::move(d);
  }
  if (!down || !CanExclude(*down)) return false;
  S3ORAM_RETURN_IF_ERROR(Exclude(*down, "found down " + DescribeDown(*why) + "; " + what));
  return true;
}

bool ClientSession::NoteSuspect(std::size_t server, const std::string& why) {
  if (read_only_ || server >= servers_->size() || excluded(server)) return false;
  for (const auto& [noted, reason] : suspects_) {
    if (noted == server) return true;
  }
  if (participants_.size() - suspects_.size() <= 2 * std::size_t{params().threshold} + 1) {
    return false;
  }
  suspects_.emplace_back(server, why.substr(0, kProblemNoteMax));
  return true;
}

Result<bool> ClientSession::ExcludeSuspects() {
  for (ServerSet::DamageReport& d : servers_->TakeDamageReports()) {
    // A server that reported damage outside this session's participants
    // (a rebuild's source, an excluded one) is not this session's to judge.
    if (std::find(participants_.begin(), participants_.end(), d.server) == participants_.end()) {
      continue;
    }
    NoteSuspect(d.server, "it reported damaged storage: " + d.message);
  }
  if (read_only_ || suspects_.empty()) return false;
  bool any = false;
  for (auto& [server, why] : std::exchange(suspects_, {})) {
    if (!CanExclude(server)) continue;
    S3ORAM_RETURN_IF_ERROR(Exclude(server, why, /*suspect=*/true));
    any = true;
  }
  return any;
}

Status ClientSession::Exclude(std::size_t server, const std::string& why, bool suspect) {
  if (!CanExclude(server)) {
    return Status::FailedPrecondition("server " + std::to_string(server) +
                                      " cannot be left out: the others would be fewer than "
                                      "2t + 1");
  }
  Exclusion e;
  e.server = static_cast<std::uint32_t>(server);
  e.since_eviction = counters_.ne;
  e.unix_seconds = static_cast<std::uint64_t>(std::time(nullptr));
  e.reason = why.substr(0, kProblemNoteMax);
  e.suspect = suspect;
  ClientStateStore::Batch b;
  b.Exclude(e);
  S3ORAM_RETURN_IF_ERROR(store_->Commit(b, /*durable=*/true));
  ComputeParticipants();
  std::erase_if(suspects_, [server](const auto& s) { return s.first == server; });
  std::string rest;
  for (std::size_t i : participants_) rest += (rest.empty() ? "" : ", ") + std::to_string(i);
  if (suspect) {
    spdlog::error(
        "server {} ({}) is excluded from eviction {} on: {}. The filesystem goes on, writable, "
        "with servers {}; nothing of the excluded server is read or trusted again. Rebuild it "
        "in full from the others: `s3oram rebuild --server {}` (after unmounting), which takes "
        "it back",
        server, servers_->endpoint(server), counters_.ne, why, rest, server);
  } else {
    spdlog::warn(
        "server {} ({}) is excluded from eviction {} on: {}. The filesystem goes on with "
        "servers {}; the excluded server's shares fall behind and are not read. Once it is "
        "back, it is caught up (by this mount, or `s3oram rebuild --server {}`) and taken back",
        server, servers_->endpoint(server), counters_.ne, why, rest, server);
  }
  return Status::Ok();
}

Status ClientSession::Readmit(std::size_t server) {
  if (!excluded(server)) return Status::Ok();
  // A server caught up while this client holds the lease gets it first (the
  // catch-up made this epoch its holder; this fills in the description):
  // its mutations need it, and once readmitted it is asked like the others.
  if (lease_held_) {
    wire::LeaseReply r;
    S3ORAM_RETURN_IF_ERROR(
        SendLease(server, wire::LeaseAcquireRequest{false, lease_sealed_}, &r)
            .WithContext("giving the lease to server " + std::to_string(server)));
    if (!r.granted) {
      return Status::LeaseHeld("server " + std::to_string(server) + " says another client (epoch " +
                               std::to_string(r.holder_epoch) +
                               ") holds the lease; it stays excluded");
    }
  }
  ClientStateStore::Batch b;
  b.Readmit(static_cast<std::uint32_t>(server));
  S3ORAM_RETURN_IF_ERROR(store_->Commit(b, /*durable=*/true));
  ComputeParticipants();
  spdlog::info("server {} ({}) takes part again", server, servers_->endpoint(server));
  return Status::Ok();
}

}  // namespace s3oram
