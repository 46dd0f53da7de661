// ClientSession: what every operation of one open client shares, underneath
// the access path and the eviction (client.h) and beside them the state
// backup, restore and rekey (state_backup.h, rekey.h):
//   * the client state (client_state.h) and its counters as this process
//     has moved them (seq runs ahead of the state between commits);
//   * the servers (a ServerSet) and the header of every request sent to
//     them: this client's epoch and the next seq, with the rollback rule
//     (NextMutationHeader);
//   * the keys: the block codec (block_codec.h) and the backup key;
//   * the single-writer lease (client.h, class comment): acquired at Open,
//     renewed, released; a client told another holds it is fenced;
//   * the problems only a server's repair ends (the state's problem note),
//     and the stop of writes a damaged server causes.
// Guarantees: no request leaves without a header from here, so seqs never
// repeat within an epoch; one writer per state file on this machine (a lock
// held for the session's life); key material is zeroed when it ends.
// Not thread-safe (the client serialises).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/math/field.h"
#include "oramcore/protocol/block_codec.h"
#include "oramcore/protocol/fresh_shares.h"
#include "oramcore/state/client_state.h"
#include "oramcore/wire/server_set.h"
#include "oramcore/wire/wire.h"

namespace s3oram {

struct ClientOptions {
  TransportOptions requests{std::chrono::milliseconds(2000), std::chrono::milliseconds(30000)};
  TransportOptions evictions{std::chrono::milliseconds(60000), std::chrono::milliseconds(600000)};
  // Take the lease over even if another client holds it (that client is then
  // fenced off). For a holder that is gone for good; never the default.
  bool force_lease = false;
  // What this client is doing, shown to anyone refused the lease
  // ("mounted on /mnt/x", "fsck", ...).
  std::string lease_purpose;
  // OpenReadOnly only: open a state another client has moved past (it would
  // be refused with kStaleState), to show it (s3oram status). Such a client
  // must not be used for anything that trusts the state's counters.
  bool allow_stale = false;
  // OpenReadOnly only, to show what can be seen (s3oram status): servers
  // that do not answer are left out of the open's checks instead of
  // failing it (OramClient::opened_with() holds their failures).
  bool allow_unreachable = false;
  // How the client reaches its servers: empty for the network (every real
  // use); tests pass an in-process cluster's (tests/support/in_process_cluster.h).
  ServerConnector connect;
  // Told (besides the log) what a long wait on busy servers is for ("server
  // 0 is finishing eviction 26 ..."), e.g. the terminal of a mount that is
  // starting. Called on the thread that waits.
  std::function<void(const std::string&)> on_wait;
};

struct ServerReport {
  std::string endpoint;
  Status status;            // reachability
  wire::StatusReply reply;  // valid if status.ok()
  // From the request to the answer (a first request includes connecting).
  std::chrono::microseconds answered_in{0};
};

// What every server says of itself to an open or to `s3oram status`: its
// STATUS, the state backups it holds and its lease, asked of all at once,
// each on its own (ClientSession::AskViews, StatusProbe). A server that did
// not answer carries its failure in all three.
struct ServerViews {
  std::vector<ServerReport> reports;
  std::vector<Result<std::vector<wire::BackupInfo>>> backups;
  std::vector<Result<wire::LeaseReply>> leases;
};

class ClientSession {
 public:
  // Takes the state file's lock (writers), unlocks the state with
  // `passphrase` (PermissionDenied for a wrong one; nothing changes before),
  // converts a state of an older format once (writers), derives the keys and
  // connects to the servers the state names. Nothing is sent yet.
  static Result<std::unique_ptr<ClientSession>> Open(const std::string& state_path,
                                                     const Secret& passphrase, bool read_only,
                                                     ClientOptions options);
  ~ClientSession();
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  const ClientOptions& options() const { return options_; }
  bool read_only() const { return read_only_; }
  ClientStateStore& store() { return *store_; }
  const ClientStateStore& store() const { return *store_; }
  const FsConfig& config() const { return store_->config(); }
  const OramParams& params() const { return config().params; }
  const std::string& state_path() const { return store_->path(); }
  // The unlocked state file (its VFS opens further connections to it).
  const std::shared_ptr<UnlockedState>& unlocked_state() const { return store_->unlocked(); }
  // The counters as this process moved them: the state's, with seq (and,
  // after StartEpoch, epoch) ahead until the next commit records them.
  Counters& counters() { return counters_; }
  const Counters& counters() const { return counters_; }
  const BlockCodec& codec() const { return *codec_; }
  // Derived from the master key (DeriveBackupKey).
  const Secret& backup_key() const { return backup_key_; }

  ServerSet& servers() { return *servers_; }
  const ServerSet& servers() const { return *servers_; }
  // "{0=tcp://..., 1=...}", for messages that name the whole set.
  std::string ServerSetName() const;
  // The header of the next request: this epoch, the next seq.
  wire::Header NextHeader();
  // The header of a request that may raise the servers' applied_seq (a
  // retrieval carrying a root write, an eviction's PREPARE or COMMIT): the
  // state's seq is made durable first if requests went since the last
  // durable commit, so that no server applies a seq more than one beyond
  // what the state holds (the rollback rule: OramClient::RefuseIfRolledBack).
  Result<wire::Header> NextMutationHeader();
  // `count` such headers for mutations sent together (none more than one
  // beyond the durable seq when the first goes).
  Result<std::vector<wire::Header>> NextMutationHeaders(std::size_t count);

  // A request that needs no tree computation (STATUS, LEASE_QUERY,
  // BACKUP_LIST): servers answer it beside an eviction's PREPARE.
  struct ControlRequest {
    wire::Body body;
    wire::MessageType expected_reply;
  };
  // Sends every request to every server at once, in order, each server on
  // its own (ServerSet::Wait::kEach): result[r][i] is server i's answer to
  // requests[r], its reply of the expected type or why there is none (its
  // silence past `timeout`, its ErrorReply as a Status naming it). A server
  // that is down neither holds up nor fails the others' answers: the call
  // takes as long as the slowest server, not the sum of all.
  std::vector<ServerSet::Answers> AskEveryServer(const std::vector<ControlRequest>& requests,
                                                 std::chrono::milliseconds timeout);
  // AskEveryServer over any set of this filesystem's servers, each request
  // under a header from `next_header` (StatusProbe asks on connections of
  // its own); `resend_after` caps the wait before a request goes again.
  static std::vector<ServerSet::Answers> AskEveryServerOf(
      ServerSet& servers, const std::function<wire::Header()>& next_header,
      const std::vector<ControlRequest>& requests, std::chrono::milliseconds timeout,
      std::chrono::milliseconds resend_after);
  // STATUS, BACKUP_LIST and LEASE_QUERY of every server in one round.
  ServerViews AskViews(std::chrono::milliseconds timeout);
  // The three quick reads AskViews sends, and the views of their answers
  // (`answers` as AskEveryServerOf returns them for these requests).
  static std::vector<ControlRequest> ViewRequests();
  static ServerViews ViewsOf(const ServerSet& servers, const FsId& fs_id,
                             std::vector<ServerSet::Answers> answers);
  // STATUS of every server, all asked at once (an unreachable one carries
  // an error status; one that serves another filesystem,
  // FailedPrecondition).
  std::vector<ServerReport> QueryServers(std::chrono::milliseconds timeout);
  // The report of server i's STATUS answer (QueryServers' rule).
  ServerReport ReportOf(std::size_t server, ServerSet::Answer answer) const;
  static ServerReport ReportOf(const ServerSet& servers, const FsId& fs_id, std::size_t server,
                               ServerSet::Answer answer);
  // How ExchangeShared's shares go out (fresh_shares.h).
  enum class Seeding : std::uint8_t {
    kNone,    // every server gets its shares in full
    kSeeded,  // the seeded participant (seeded_party()) gets the seed of its shares,
              // sent with the others
    // The same, but its request goes only once every other server answered:
    // for a request that starts work between the servers (EVICT_PREPARE), so
    // that the server sent a few bytes does not start it while the others
    // still receive megabytes over the client's uplink.
    kSeededLast,
  };
  // Shares `secret` afresh among the servers (degree t, the OS CSPRNG;
  // ShareVectorSeeded unless kNone) and sends each participant i the request
  // make_request(its shares, its seed), all under one mutation header;
  // returns the replies, in the order of participants(). `compute_ns` and `wait_ns`
  // accumulate the time spent sharing and encoding, and waiting. Under
  // kSeededLast a seeded server known to be down fails the call before
  // anything is sent, and one that fails after the others answered leaves
  // them started (as any server failing a request under Wait::kEvery may).
  Result<std::vector<wire::Message>> ExchangeShared(
      std::span<const field::Elem> secret,
      const std::function<wire::Body(std::vector<field::Elem>&&, const wire::ShareSeed&)>&
          make_request,
      wire::MessageType expected_reply, const TransportOptions& options, std::uint64_t& compute_ns,
      std::uint64_t& wait_ns, Seeding seeding = Seeding::kSeeded);

  // --- Which servers take part (Exclusion, client_state.h). ------------------------
  // The servers every request that reads or changes the tree goes to: all
  // but the excluded ones, ascending. The lease is held on them only.
  const std::vector<std::size_t>& participants() const { return participants_; }
  // The participant whose shares go as their seed (fresh_shares.h): the
  // lowest one, server 0 unless it is excluded.
  std::size_t seeded_party() const {
    return participants_.empty() ? kSeededParty : participants_.front();
  }
  bool excluded(std::size_t server) const;
  // The participants as EVICT_PREPARE names them (bit i: server i; 0 when
  // every server takes part).
  std::uint32_t ParticipantMask() const;
  // Whether `server` could be left out now: it takes part, and the others
  // are still at least 2t + 1 (an eviction's degree reduction needs them).
  bool CanExclude(std::size_t server) const;
  // After a request some participant did not answer: if exactly one
  // participant is found down (ServerSet::Down) and CanExclude it, it is
  // excluded durably (the record says it was down and `what`, the log says
  // so once, with the fix) and true is returned: the caller goes on
  // without it. False for a read-only session.
  Result<bool> ExcludeDown(const std::string& what);
  // Excludes `server` durably (CanExclude must hold) for `why`; `suspect`
  // (Exclusion::suspect): for what it answered, so only a full rebuild
  // brings it back.
  Status Exclude(std::size_t server, const std::string& why, bool suspect = false);
  // A participant answered wrongly (`why`: a retrieval answer outvoted by
  // answers that verify) or reported damaged storage: noted, to be excluded
  // as suspect by the next ExcludeSuspects. True if it will be: it and every
  // suspect noted before it can be left out (CanExclude with those gone);
  // the caller then goes on without its answer. False: the others would be
  // too few, and its failure stands.
  bool NoteSuspect(std::size_t server, const std::string& why);
  // Excludes the suspects noted (NoteSuspect, and the damage reports the
  // server set took: ServerSet::TakeDamageReports) that can be left out,
  // durably, each logged once with its fix. True if any was. Called between
  // requests that read or change the tree (before a chunk of accesses, when
  // an eviction attempt failed, at Sync and Close), never inside one, so a
  // request's answers keep their servers. False for a read-only session.
  Result<bool> ExcludeSuspects();
  // Ends its exclusion (it was caught up: its shares are current again),
  // giving it this client's lease first if it holds one; LeaseHeld (and
  // still excluded) if the server says another client holds it.
  Status Readmit(std::size_t server);

  // --- The lease. -----------------------------------------------------------------
  // Acquires it on every server under the current epoch; on refusal releases
  // what it got and names the holder. A record left by a crashed process of
  // this very state file (epoch `opened_epoch`, the state's before this Open
  // raised it) is taken over without force_lease.
  Status AcquireLease(std::uint64_t opened_epoch);
  // Tells the servers this client is alive; kLeaseHeld (and fenced) if
  // another client took the lease over.
  Status RenewLease();
  // Releases it on every server (a short deadline; failures logged).
  void ReleaseLease();
  bool lease_held() const { return lease_held_; }
  // Whether a server said another client took the lease over: this client
  // then changes nothing more.
  bool fenced() const { return fenced_; }
  // Notes `st` (NoteProblem) and marks the session fenced if it is
  // kLeaseHeld; returns it.
  Status NoteFencing(Status st);
  // The lease is given up (Close): nothing more is sent under it.
  void ForgetLease() { lease_held_ = false; }

  // --- Problems (client.h: problem_note, writes_stopped). --------------------------
  // Records a damaged-storage or inconsistency error in the state (once per
  // distinct message) for `s3oram status`; damage also stops writes, unless
  // the server that reported it could be excluded (ExcludeSuspects). Called
  // between requests only.
  void NoteProblem(const Status& st);
  // Stops writes for damage `st` (met now, or `recorded` in the state's
  // problem note), logging once; nothing for a read-only session.
  void StopWrites(const Status& st, bool recorded);
  const std::optional<Status>& writes_stopped() const { return writes_stopped_; }
  Status RecordProblemNote(const std::string& text, bool damaged);
  Status ClearProblemNote();
  // A commit of the caller's removed the problem note (an eviction whose
  // refusal it recorded committed): a recurrence is noted again.
  void ProblemNoteCleared() { noted_problem_.clear(); }

  // --- A master-key rotation (rekey.h). --------------------------------------------
  // Records its progress (one commit, not durable).
  Status RecordRekeyProgress(const RekeyProgress& progress);
  // Ends it (durable): the previous master key leaves the state, and the
  // codec forgets the previous keys.
  Status EndRekey();

 private:
  ClientSession() = default;
  Status SendLease(std::size_t server, const wire::Body& body, wire::LeaseReply* reply);

  ClientOptions options_;
  bool read_only_ = false;
  int state_lock_fd_ = -1;  // flock'ed for the session's life (writers only)
  std::unique_ptr<ClientStateStore> store_;
  std::unique_ptr<BlockCodec> codec_;
  Secret backup_key_;
  std::unique_ptr<ServerSet> servers_;
  std::vector<std::size_t> participants_;  // from store_->exclusions()
  // Noted by NoteSuspect, excluded by ExcludeSuspects: server and why.
  std::vector<std::pair<std::size_t, std::string>> suspects_;
  void ComputeParticipants();
  Counters counters_;
  bool lease_held_ = false;
  bool fenced_ = false;
  std::string lease_sealed_;  // this client's sealed description, as acquired
  std::optional<Status> writes_stopped_;
  std::string noted_problem_;  // the ProblemNote text this session last wrote
};

}  // namespace s3oram
