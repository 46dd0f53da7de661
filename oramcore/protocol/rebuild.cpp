// The client side of `s3oram rebuild` (see rebuild.h for the protocol). It
// uses the state store and a ServerSet directly, not OramClient, because an
// OramClient cannot open while one server is empty; OramClient::Open is used
// only afterwards, for the verification.
#include "oramcore/protocol/rebuild.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "oramcore/base/random.h"
#include "oramcore/crypto/block_seal.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/crypto/share_mac_secrets.h"
#include "oramcore/math/shamir.h"
#include "oramcore/math/share_mac.h"
#include "oramcore/protocol/client_session.h"
#include "oramcore/protocol/consistency.h"
#include "oramcore/protocol/counter_agreement.h"
#include "oramcore/protocol/lease_holder.h"
#include "oramcore/protocol/scrub.h"
#include "oramcore/protocol/server_addresses.h"
#include "oramcore/protocol/state_backup.h"
#include "oramcore/state/client_state.h"
#include "oramcore/tree/eviction_footprint.h"
#include "oramcore/wire/message_limits.h"
#include "oramcore/wire/transport.h"

namespace s3oram {

namespace {

constexpr const char* kEvictKind = "evict";  // as in client.cpp's pending log

std::string Name(std::size_t i, const ServerSet& servers) {
  return "server " + std::to_string(i) + " (" + servers.endpoint(i) + ")";
}

// The session of one rebuild run: the connections, the header fields and the
// seq counter every request draws from.
struct Session {
  const RebuildOptions& options;
  const FsConfig& config;
  ServerSet* servers = nullptr;
  std::uint64_t epoch = 0;
  std::uint64_t seq = 0;
  // Inside an open client (CatchUpRun): its headers, its seqs.
  std::function<wire::Header()> next_header;

  wire::Header Next() {
    if (next_header) return next_header();
    wire::Header h;
    h.fs_id = config.fs_id;
    h.epoch = epoch;
    h.seq = ++seq;
    return h;
  }

  // One request to one server; the reply (or that server's error).
  Result<wire::Message> Ask(std::size_t server, const wire::Body& body,
                            wire::MessageType expected, const TransportOptions& t) {
    wire::Header h = Next();
    auto r = servers->ExchangeWith({server}, {wire::Encode(h, body)}, h, expected, t);
    if (!r.ok()) return r.status();
    return std::move(r.value()[0]);
  }

  Result<wire::StatusReply> StatusOf(std::size_t server) {
    S3ORAM_ASSIGN_OR_RETURN(wire::Message m, Ask(server, wire::StatusRequest{},
                                                 wire::MessageType::kStatusReply,
                                                 options.client.requests));
    return std::get<wire::StatusReply>(std::move(m.body));
  }
};

// Takes the lease on every survivor as this run's epoch; refused (naming the
// holder) if a mount or another tool holds it.
Status AcquireSurvivorLeases(Session& s, const std::vector<std::size_t>& survivors,
                             const BlockSealer& sealer, const std::string& state_path) {
  const std::string sealed =
      SealHolder(sealer, s.epoch, CurrentLeaseHolder(state_path, "s3oram rebuild"));
  std::vector<std::size_t> granted;
  for (std::size_t j : survivors) {
    auto m = s.Ask(j, wire::LeaseAcquireRequest{false, sealed}, wire::MessageType::kLeaseReply,
                   s.options.client.requests);
    Status failure = m.status();
    if (m.ok()) {
      const auto& r = std::get<wire::LeaseReply>(m->body);
      if (r.granted) {
        granted.push_back(j);
        continue;
      }
      const auto holder = OpenHolder(sealer, r.holder_epoch, r.holder);
      failure = Status::LeaseHeld(
          "the filesystem is in use by " +
          (holder ? DescribeHolder(*holder) : "epoch " + std::to_string(r.holder_epoch)) +
          ": unmount it (or stop that tool) before rebuilding");
    }
    for (std::size_t g : granted) {
      (void)s.Ask(g, wire::LeaseReleaseRequest{}, wire::MessageType::kLeaseReply,
                  s.options.client.requests);
    }
    return failure.WithContext(Name(j, *s.servers));
  }
  return Status::Ok();
}

// Survivors must agree on applied_evictions before their shares can be
// combined: a survivor that only prepared (sealed) the eviction another one
// already committed is sent EVICT_COMMIT. COMMIT is only ever sent after every
// PREPARE succeeded, so that sealed shadow is the same eviction's result.
Status ReconcileSurvivors(Session& s, const std::vector<std::size_t>& survivors,
                          std::vector<wire::StatusReply>& status, RebuildReport& report) {
  std::uint64_t max_ae = 0;
  for (std::size_t j : survivors) max_ae = std::max(max_ae, status[j].applied_evictions);
  for (std::size_t j : survivors) {
    const wire::StatusReply& r = status[j];
    if (r.applied_evictions == max_ae) continue;
    if (r.applied_evictions + 1 == max_ae && r.prepared_eviction == max_ae) {
      spdlog::info("{} has eviction {} prepared but not committed; committing it first",
                   Name(j, *s.servers), max_ae - 1);
      S3ORAM_RETURN_IF_ERROR(s.Ask(j, wire::EvictCommitRequest{max_ae - 1},
                                   wire::MessageType::kEvictCommitReply, s.options.client.requests)
                                 .status()
                                 .WithContext("committing eviction " + std::to_string(max_ae - 1) +
                                              " on " + Name(j, *s.servers)));
      ++report.evictions_committed;
      S3ORAM_ASSIGN_OR_RETURN(status[j], s.StatusOf(j));
      if (status[j].applied_evictions == max_ae) continue;
    }
    return Status::FailedPrecondition(
        "the surviving servers disagree: " + Name(j, *s.servers) + " has applied " +
        std::to_string(status[j].applied_evictions) + " evictions, another " +
        std::to_string(max_ae) + ", and the missing one is not prepared there; their shares "
        "cannot be combined, so server " + std::to_string(s.options.target) +
        " cannot be rebuilt from them");
  }
  return Status::Ok();
}

// For a forced rebuild of a server whose share file verifies: the slots whose
// shares disagree across the servers, and for each the server the share MAC
// names as holding the odd share (OddShareOut). Replacing any other server
// would fold the error into a consistent wrong sharing. Returns the named
// servers' counts, one entry per party. `previous`: the key before, while a
// rotation is under way (a slot may be tagged under either).
Result<std::vector<std::size_t>> OddServersOfInconsistentSlots(
    Session& s, const OramParams& p, const share_mac::ShareMacKey& key,
    const share_mac::ShareMacKey* previous) {
  const std::size_t n = s.config.servers.size();
  std::vector<field::Elem> xs;
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < n; ++i) {
    xs.push_back(shamir::PartyX(i));
    all.push_back(i);
  }
  S3ORAM_ASSIGN_OR_RETURN(auto parity_rows, shamir::ParityChecks(xs, p.threshold));
  S3ORAM_ASSIGN_OR_RETURN(
      ConsistencyFindings found,
      ScrubAndCompare(
          p, parity_rows, all,
          [&](std::uint64_t first, std::uint32_t count,
              const wire::ParitySeed& seed) -> Result<std::vector<wire::ParityReply>> {
            std::vector<wire::ParityReply> out;
            for (std::size_t i = 0; i < n; ++i) {
              S3ORAM_ASSIGN_OR_RETURN(wire::Message m,
                                      s.Ask(i, wire::ParityRequest{first, count, seed},
                                            wire::MessageType::kParityReply,
                                            s.options.client.requests));
              out.push_back(std::get<wire::ParityReply>(std::move(m.body)));
            }
            return out;
          },
          {}));
  std::vector<std::size_t> named(n, 0);
  for (const DamagedSlot& d : found.inconsistent.listed) {
    std::vector<std::vector<field::Elem>> shares;
    for (std::size_t i = 0; i < n; ++i) {
      S3ORAM_ASSIGN_OR_RETURN(wire::Message m, s.Ask(i, wire::SlotShareRequest{d.bucket, d.slot},
                                                     wire::MessageType::kSlotShareReply,
                                                     s.options.client.requests));
      shares.push_back(std::get<wire::SlotShareReply>(std::move(m.body)).share);
    }
    std::optional<std::size_t> odd = OddShareOut(shares, key);
    if (!odd && previous != nullptr) odd = OddShareOut(shares, *previous);
    if (odd) ++named[*odd];
  }
  return named;
}

// One run of RebuildServer: what its phases learn and hand on.
struct RebuildRun {
  RebuildRun(const std::string& path, const RebuildOptions& opts)
      : state_path(path), options(opts) {}
  const std::string& state_path;
  const RebuildOptions& options;
  std::unique_ptr<ClientStateStore> store;
  std::unique_ptr<BlockSealer> sealer;  // seals this run's lease description
  std::unique_ptr<ServerSet> servers;   // the run's own connections (not inside a client)
  std::optional<Session> s;
  std::size_t K = 0;  // the server rebuilt
  wire::StoreShape shape;
  bool k_live = false;  // K serves this filesystem: replacing it destroys a share
  // K is caught up in place (a catch-up cut off, or one under way): it may
  // be caught up again from the state it names (it refuses if it is not).
  bool k_in_catch_up = false;
  // The state's exclusion of K (its shares are stale: it is rebuilt to take
  // part again), if any.
  std::optional<Exclusion> k_excluded;
  std::vector<wire::StatusReply> status;
  std::vector<std::size_t> survivors;
  std::vector<std::uint64_t> epoch_of;  // max(store epoch, highest lease epoch)
  RebuildReport report;

  const OramParams& params() const { return store->config().params; }
  std::string Name(std::size_t i) const { return ::s3oram::Name(i, *s->servers); }
};

// ---- 1. Who is there, and in what state.
Status SurveyServers(RebuildRun& r) {
  Session& s = *r.s;
  const FsConfig& config = r.store->config();
  const std::size_t parties = config.servers.size();
  r.status.assign(parties, wire::StatusReply{});
  r.epoch_of.assign(parties, 0);
  for (std::size_t i = 0; i < parties; ++i) {
    wire::Header h = s.Next();
    auto reply =
        s.servers->ExchangeWith({i}, {wire::Encode(h, wire::StatusRequest{})}, h,
                                wire::MessageType::kStatusReply, r.options.client.requests);
    if (!reply.ok()) {
      if (i == r.K) {
        return reply.status().WithContext(
            r.Name(r.K) +
            " to be rebuilt is unreachable: start its s3oram-serverd (with an "
            "empty data directory) first");
      }
      spdlog::warn("{} is unreachable: {}", r.Name(i), reply.status().ToString());
      continue;
    }
    const wire::Message& m = reply.value()[0];
    r.status[i] = std::get<wire::StatusReply>(m.body);
    const wire::StatusReply& st = r.status[i];
    const bool ours = m.header.fs_id == config.fs_id;
    if (i == r.K) {
      if (st.initialized && ours && st.shape == r.shape) {
        r.k_live = true;
        continue;  // decided by ChooseSources
      }
      r.k_in_catch_up = st.rebuilding && ours && st.shape == r.shape;
      if (st.initialized && !r.options.force) {
        return Status::FailedPrecondition(
            r.Name(r.K) + " still holds a live store of " +
            (ours ? std::string("this filesystem") : std::string("another filesystem")) + " (" +
            std::to_string(st.applied_evictions) +
            " evictions applied); rebuild only a server that lost its data, or pass --force to "
            "replace that store");
      }
      continue;
    }
    if (std::any_of(r.store->exclusions().begin(), r.store->exclusions().end(),
                    [&](const Exclusion& e) { return e.server == i; })) {
      spdlog::warn("{} cannot contribute: it is excluded, its shares are stale", r.Name(i));
      continue;
    }
    if (!st.initialized || !ours || !(st.shape == r.shape)) {
      spdlog::warn("{} cannot contribute: {}", r.Name(i),
                   st.rebuilding            ? "it is being rebuilt itself"
                   : !st.initialized        ? "it holds no filesystem"
                   : !(st.shape == r.shape) ? "its store has another shape"
                                            : "it serves another filesystem");
      continue;
    }
    r.survivors.push_back(i);
    // The new epoch must also be above every epoch a survivor granted its lease to.
    S3ORAM_ASSIGN_OR_RETURN(wire::Message lm,
                            s.Ask(i, wire::LeaseQueryRequest{}, wire::MessageType::kLeaseReply,
                                  r.options.client.requests));
    r.epoch_of[i] = std::max(st.epoch, std::get<wire::LeaseReply>(lm.body).highest_epoch);
  }
  return Status::Ok();
}

// A forced rebuild of a K whose share file verifies is refused when the
// share MAC names another server as holding the odd share of the slots
// that disagree: replacing K would make the wrong values permanent.
Status RefuseIfTheMacNamesAnother(RebuildRun& r) {
  const OramParams& p = r.params();
  const auto data_elems = static_cast<std::size_t>(p.data_elems_per_slot());
  const auto key = MakeShareMacKey(r.store->share_mac_secrets(), data_elems);
  std::unique_ptr<share_mac::ShareMacKey> previous;
  if (r.store->rekey_old_share_mac()) {
    previous = MakeShareMacKey(*r.store->rekey_old_share_mac(), data_elems);
  }
  S3ORAM_ASSIGN_OR_RETURN(auto named, OddServersOfInconsistentSlots(*r.s, p, *key, previous.get()));
  for (std::size_t j = 0; j < named.size(); ++j) {
    if (j == r.K || named[j] == 0) continue;
    return Status::FailedPrecondition(
        "refusing to rebuild " + r.Name(r.K) + ": the servers' shares disagree in " +
        std::to_string(named[j]) + " slots and the share MAC names " + r.Name(j) +
        " as holding the odd share (the other two agree on authentic values); rebuilding " +
        "server " + std::to_string(r.K) +
        " would make the wrong values permanent. Rebuild "
        "that server instead: s3oram rebuild --server " +
        std::to_string(j) + " --force");
  }
  if (named[r.K] > 0) {
    spdlog::info("{} holds the odd share of {} inconsistent slots; replacing its share",
                 r.Name(r.K), named[r.K]);
  }
  return Status::Ok();
}

// A live K is replaced only if it is the damaged one (or by --force), and
// never from a damaged survivor: each would turn one bad disk into a
// consistent wrong sharing on a second server. Every server scrubs its
// whole share file first (one extra read of it). For a K that lost its
// data this is skipped: the survivors check every bucket they contribute.
Status ChooseSources(RebuildRun& r) {
  if (!r.k_live) return Status::Ok();
  // An excluded K is stale by design (the others went on without it): it is
  // replaced as one that lost its data is, and the survivors check every
  // bucket they contribute.
  if (r.k_excluded) {
    spdlog::info("{} was excluded ({}); replacing its share from the others", r.Name(r.K),
                 r.k_excluded->reason);
    return Status::Ok();
  }
  const OramParams& p = r.params();
  auto scrub = [&](std::size_t i) {
    return ScrubWholeStore(
        p,
        [&](std::uint64_t first, std::uint32_t count) -> Result<wire::ScrubReply> {
          S3ORAM_ASSIGN_OR_RETURN(
              wire::Message m, r.s->Ask(i, wire::ScrubRequest{first, count},
                                        wire::MessageType::kScrubReply, r.options.client.requests));
          return std::get<wire::ScrubReply>(m.body);
        },
        {});
  };
  S3ORAM_ASSIGN_OR_RETURN(ScrubFindings k_findings, scrub(r.K));
  std::vector<std::size_t> clean;
  for (std::size_t j : r.survivors) {
    S3ORAM_ASSIGN_OR_RETURN(ScrubFindings f, scrub(j));
    if (f.damaged == 0) {
      clean.push_back(j);
      continue;
    }
    spdlog::error("{} has {} damaged slots ({}); it cannot be a rebuild's source", r.Name(j),
                  f.damaged, DescribeDamage(f));
    if (k_findings.damaged == 0) {
      return Status::FailedPrecondition(
          "refusing to rebuild " + r.Name(r.K) + ": its share file verifies, but " + r.Name(j) +
          " has " + std::to_string(f.damaged) + " damaged slots (" + DescribeDamage(f) +
          "); rebuild that server instead: s3oram rebuild --server " + std::to_string(j));
    }
  }
  if (k_findings.damaged == 0 && r.options.force && p.mac_elems > 0) {
    S3ORAM_RETURN_IF_ERROR(RefuseIfTheMacNamesAnother(r));
  }
  if (k_findings.damaged == 0 && !r.options.force) {
    return Status::FailedPrecondition(
        r.Name(r.K) + " still holds a live store of this filesystem (" +
        std::to_string(r.status[r.K].applied_evictions) +
        " evictions applied) and every slot of it verifies; rebuild only a server that lost "
        "or damaged its data, or pass --force to replace that store");
  }
  if (k_findings.damaged > 0) {
    spdlog::info("{} has {} damaged slots ({}); replacing its share from the others", r.Name(r.K),
                 k_findings.damaged, DescribeDamage(k_findings));
  }
  r.survivors = clean;
  return Status::Ok();
}

// Enough survivors, and they fit this state file (as OramClient::Open
// checks): the same number of evictions, or one more while that eviction
// is pending. Checked on the most advanced survivor, before anything changes.
Status CheckSurvivorsFitTheState(RebuildRun& r) {
  const OramParams& p = r.params();
  if (r.survivors.size() < p.threshold + 1) {
    return Status::Unavailable(
        "only " + std::to_string(r.survivors.size()) +
        " surviving servers serve this filesystem; rebuilding server " + std::to_string(r.K) +
        " needs t + 1 = " + std::to_string(p.threshold + 1) + " of them reachable");
  }
  std::uint64_t applied_evictions = 0;
  for (std::size_t j : r.survivors) {
    applied_evictions = std::max(applied_evictions, r.status[j].applied_evictions);
  }
  const std::uint64_t ne = r.store->counters().ne;
  S3ORAM_ASSIGN_OR_RETURN(auto pending, r.store->LoadPending());
  bool evicting = false;
  for (const auto& op : pending) evicting |= op.kind == kEvictKind;
  if (applied_evictions < ne) {
    return Status::FailedPrecondition(
        "the surviving servers have applied " + std::to_string(applied_evictions) +
        " evictions but this client state knows " + std::to_string(ne) +
        ": the state file is newer than the servers");
  }
  if (applied_evictions > ne + (evicting ? 1 : 0)) {
    return Status::FailedPrecondition(
        "the surviving servers have applied " + std::to_string(applied_evictions) +
        " evictions but this client state knows " + std::to_string(ne) +
        ": the state file is older than the servers");
  }
  return Status::Ok();
}

// ---- 2. A new epoch, durable before any request uses it: any other client
// of this filesystem is fenced off from here on (a write during the rebuild
// would leave K's copy stale).
// Both agreed by t + 1 survivors (or this state), a lone one believed only
// within kMaxCounterLead (oramcore/protocol/counter_agreement.h): a
// survivor with a forged counter is named, never followed. K's own
// counters do not count: it is replaced.
Status AdoptNewEpoch(RebuildRun& r) {
  Session& s = *r.s;
  const OramParams& p = r.params();
  std::vector<std::uint64_t> epochs, seqs;
  for (std::size_t j : r.survivors) {
    epochs.push_back(r.epoch_of[j]);
    seqs.push_back(r.status[j].applied_seq);
  }
  auto name = [&](std::size_t x) { return r.Name(r.survivors[x]); };
  const AdoptedCounter seq = AdoptCounter(seqs, s.seq, p.threshold);
  S3ORAM_RETURN_IF_ERROR(
      CounterOutlierError(seq, seqs, p.threshold, "applied request sequence", name));
  S3ORAM_ASSIGN_OR_RETURN(s.epoch, NextAgreedCounter(epochs, s.epoch, p.threshold, "epoch", name));
  s.seq = seq.value;
  Counters c = r.store->counters();
  c.epoch = s.epoch;
  c.seq = s.seq;
  ClientStateStore::Batch batch;
  batch.SetCounters(c);
  // A rebuild changes neither the filesystem's metadata nor any block's
  // position: a state that equalled its last backup still does.
  if (const auto& mark = r.store->backup_mark(); mark && mark->epoch == r.store->counters().epoch) {
    batch.SetBackupMark(BackupMark{mark->generation, s.epoch});
  }
  return r.store->Commit(batch, /*durable=*/true);
}

// ---- 3. The data path: what every range of it shares.
struct DataPath {
  std::uint64_t applied_evictions = 0;
  std::uint64_t applied_seq = 0;
  std::vector<std::uint32_t> participants;
  std::uint64_t bucket_elems = 0;
  std::uint64_t bucket_bytes = 0;
  std::uint64_t buckets = 0;    // in the tree
  std::uint64_t per_range = 1;  // buckets per REBUILD_READ, at most
  // The data path moves megabytes per request: a resend after the usual 2 s
  // would only make a loaded server do the same range twice (harmless, see
  // the idempotency table, but wasteful).
  TransportOptions bulk;

  // Every range is read under a nonce of its own (FreshNonce), so its masks
  // are new: a bucket sent again after an eviction changed it (a catch-up's
  // later pass) must not carry the mask it carried before, or K could
  // subtract the two terms of each participant and, with its own shares,
  // learn the difference of the two values. Read again densely (same
  // values), a range keeps its nonce.
  static wire::RebuildNonce FreshNonce() {
    wire::RebuildNonce nonce{};
    random::Bytes(nonce);
    return nonce;
  }
  wire::RebuildReadRequest Read(std::size_t target, const wire::RebuildNonce& nonce,
                                std::uint64_t first, std::uint32_t count, bool dense) const {
    wire::RebuildReadRequest req;
    req.target = static_cast<std::uint32_t>(target);
    req.participants = participants;
    req.nonce = nonce;
    req.first_bucket = first;
    req.count = count;
    req.dense = dense;
    return req;
  }
  // To K: sum the participants' terms of a range read under `nonce`.
  wire::RebuildWriteRequest Write(const wire::RebuildNonce& nonce, std::uint64_t first,
                                  std::vector<std::uint8_t> holes) const {
    wire::RebuildWriteRequest req;
    req.first_bucket = first;
    req.holes = std::move(holes);
    req.participants = participants;
    req.nonce = nonce;
    return req;
  }
};

// REBUILD_BEGIN on K at the data path's counters. A catch-up's BEGIN sent
// again at newer counters moves its goal (the buckets written so far stay).
Status BeginOnTarget(RebuildRun& r, const DataPath& d, bool catch_up) {
  return r.s
      ->Ask(r.K,
            wire::RebuildBeginRequest{static_cast<std::uint32_t>(r.K), r.shape, d.applied_seq,
                                      d.applied_evictions, r.options.force || r.k_live, catch_up},
            wire::MessageType::kRebuildBeginReply, r.options.client.requests)
      .status()
      .WithContext("starting the " + std::string(catch_up ? "catch-up" : "rebuild") + " on " +
                   r.Name(r.K));
}

// The root snapshot of an eviction under way ("bucket 0", root.bin): the
// target's share is rebuilt as a bucket's is, so that the eviction,
// prepared again, reads the same root on every server (the live root may
// hold later root writes by then). Carried over only if every participant
// holds it: one that does not never started that eviction, which then
// reads the live root when it is prepared again, everywhere alike.
Status RebuildRootSnapshot(RebuildRun& r, const DataPath& d) {
  Session& s = *r.s;
  const wire::RebuildNonce nonce = DataPath::FreshNonce();
  for (std::size_t j : r.report.participants) {
    auto m = s.Ask(j, d.Read(r.K, nonce, 0, 1, /*dense=*/true),
                   wire::MessageType::kRebuildReadReply, d.bulk);
    if (!m.ok() && m.status().code() == Status::Code::kFailedPrecondition) return Status::Ok();
    if (!m.ok()) return m.status().WithContext("reading the root snapshot");
    const auto& reply = std::get<wire::RebuildReadReply>(m->body);
    if (reply.first_bucket != 0 || reply.holes != std::vector<std::uint8_t>{0}) {
      return Status::Protocol(r.Name(j) +
                              " answered a rebuild read of the root snapshot with a malformed "
                              "reply");
    }
  }
  const wire::Header h = s.Next();
  const auto frame = wire::Encode(h, d.Write(nonce, 0, {0}));
  S3ORAM_RETURN_IF_ERROR(
      s.servers->ExchangeWith({r.K}, {frame}, h, wire::MessageType::kRebuildWriteReply, d.bulk)
          .status()
          .WithContext("writing the root snapshot on " + r.Name(r.K)));
  r.report.bytes_relayed += d.bucket_bytes * r.report.participants.size();
  r.report.root_snapshot = true;
  spdlog::info("rebuilt the root snapshot of eviction {} on {}", d.applied_evictions, r.Name(r.K));
  return Status::Ok();
}

// Buckets first .. first + count - 1: the participants send their masked
// terms to K, which sums them when the client asks it to.
Status RebuildRange(RebuildRun& r, const DataPath& d, std::uint64_t first, std::uint32_t count) {
  Session& s = *r.s;
  const wire::RebuildNonce nonce = DataPath::FreshNonce();
  std::vector<wire::RebuildReadReply> replies;
  // Without `dense` survivors omit buckets that are file holes. Every server
  // writes the same buckets (eviction paths and root slots are public), so
  // the hole maps agree unless a filesystem reports holes differently; then
  // the range is asked for again in full (the terms sent then replace the
  // first ones on K).
  for (bool dense : {false, true}) {
    replies.clear();
    // One request to every participant at once: a range costs one round
    // trip to the survivors, not one per survivor.
    const wire::Header h = s.Next();
    const std::vector<std::uint8_t> frame =
        wire::Encode(h, d.Read(r.K, nonce, first, count, dense));
    S3ORAM_ASSIGN_OR_RETURN(
        std::vector<wire::Message> answers,
        s.servers->ExchangeWith(
            r.report.participants,
            std::vector<std::vector<std::uint8_t>>(r.report.participants.size(), frame), h,
            wire::MessageType::kRebuildReadReply, d.bulk));
    for (std::size_t a = 0; a < answers.size(); ++a) {
      const std::size_t j = r.report.participants[a];
      wire::Message& m = answers[a];
      if (r.options.observe) r.options.observe(j, m);
      auto& reply = std::get<wire::RebuildReadReply>(m.body);
      if (reply.first_bucket != first || reply.holes.size() != count) {
        return Status::Protocol(r.Name(j) + " answered a rebuild read of buckets " +
                                std::to_string(first) + "+" + std::to_string(count) +
                                " with a malformed reply");
      }
      replies.push_back(std::move(reply));
    }
    bool agree = true;
    for (const auto& reply : replies) agree &= reply.holes == replies.front().holes;
    if (agree) break;
    if (dense) return Status::Protocol("survivors sent different hole maps for a dense read");
    spdlog::debug("hole maps differ for buckets {}+{}; reading them in full", first, count);
  }
  wire::RebuildWriteRequest w = d.Write(nonce, first, replies.front().holes);
  std::uint64_t written = 0;
  for (std::uint8_t f : w.holes) written += f ? 0 : 1;
  r.report.buckets_written += written;
  r.report.bytes_relayed += written * d.bucket_bytes * r.report.participants.size();
  const wire::Header h = s.Next();
  if (r.options.observe) r.options.observe(r.K, wire::Message{h, w});
  const auto frame = wire::Encode(h, w);
  S3ORAM_ASSIGN_OR_RETURN(
      auto reply,
      s.servers->ExchangeWith({r.K}, {frame}, h, wire::MessageType::kRebuildWriteReply, d.bulk));
  const auto& wr = std::get<wire::RebuildWriteReply>(reply[0].body);
  if (wr.next_bucket != first + count) {
    return Status::Protocol(r.Name(r.K) + " reports bucket " + std::to_string(wr.next_bucket) +
                            " as next, expected " + std::to_string(first + count));
  }
  return Status::Ok();
}

// The next range to send from `first` (marked[first] is set): a run of
// marked buckets, taking in gaps of up to kGap unmarked ones (sent again
// they get the sharing K holds, or a newer one of the same values: a range
// saves two round trips), at most `per_range` buckets, within the tree.
std::uint64_t RunOfMarked(const std::vector<bool>& marked, std::uint64_t first,
                          std::uint64_t per_range, std::uint64_t buckets) {
  constexpr std::uint64_t kGap = 8;
  const std::uint64_t count = std::min<std::uint64_t>(per_range, buckets - first + 1);
  std::uint64_t run = 1;
  for (std::uint64_t next = 1; next < count; ++next) {
    if (marked[first + next]) {
      run = next + 1;
    } else if (next - run >= kGap) {
      break;
    }
  }
  return run;
}

// ---- 3. The data path: REBUILD_BEGIN on K (a catch-up if `missed` is not
// empty and K accepts it), the sizes of the ranges. A catch-up refused by K
// falls back to a full rebuild only if `may_rebuild_in_full` (then `missed`
// is cleared).
Status BeginTransfer(RebuildRun& r, const OramParams& p, bool may_rebuild_in_full, DataPath& d,
                     std::vector<bool>& missed) {
  const RebuildOptions& options = r.options;
  d.applied_evictions = r.status[r.survivors.front()].applied_evictions;
  for (std::size_t j : r.survivors)
    d.applied_seq = std::max(d.applied_seq, r.status[j].applied_seq);
  for (std::size_t i = 0; i < p.threshold + 1; ++i) r.report.participants.push_back(r.survivors[i]);
  for (std::size_t j : r.report.participants)
    d.participants.push_back(static_cast<std::uint32_t>(j));
  d.buckets = (std::uint64_t{1} << (p.height + 1)) - 1;
  if (!missed.empty()) {
    // K may refuse (its store damaged, rebuilt meanwhile, left marked by an
    // interrupted catch-up): then it is rebuilt in full.
    if (Status st = BeginOnTarget(r, d, /*catch_up=*/true); !st.ok()) {
      if (!may_rebuild_in_full || (st.code() != Status::Code::kFailedPrecondition &&
                                   st.code() != Status::Code::kInvalidArgument)) {
        return st;
      }
      spdlog::warn("{}; rebuilding it in full instead", st.ToString());
      missed.clear();
    }
  }
  if (missed.empty()) S3ORAM_RETURN_IF_ERROR(BeginOnTarget(r, d, /*catch_up=*/false));
  r.report.caught_up = !missed.empty();
  std::string from;
  for (std::size_t j : r.report.participants) from += (from.empty() ? "" : ",") + std::to_string(j);
  spdlog::info("{} server {} from servers {} (evictions {}, seq {})",
               r.report.caught_up ? "catching up" : "rebuilding", r.K, from, d.applied_evictions,
               d.applied_seq);

  d.bucket_elems = std::uint64_t{r.shape.bucket_size} * r.shape.elems_per_slot;
  d.bucket_bytes = d.bucket_elems * sizeof(field::Elem);
  // At most what the servers' frame limits allow (wire/message_limits.h).
  d.per_range = wire::RebuildRangeBuckets(r.shape, options.range_bytes);
  d.per_range = std::min<std::uint64_t>(d.per_range, wire::kMaxElems / d.bucket_elems);
  r.report.buckets = d.buckets;
  d.bulk = TransportOptions{std::max<std::chrono::milliseconds>(
                                options.client.requests.resend_after, std::chrono::seconds(30)),
                            std::max<std::chrono::milliseconds>(options.client.requests.deadline,
                                                                std::chrono::seconds(300))};
  if (r.report.caught_up) {
    r.report.buckets_missed =
        static_cast<std::uint64_t>(std::count(missed.begin(), missed.end(), true));
  }
  return Status::Ok();
}

// REBUILD_FINISH on K, at the counters of K's last BEGIN.
Status FinishTransfer(RebuildRun& r, const DataPath& d) {
  Session& s = *r.s;
  // FINISH syncs the whole share file: give it the eviction budget.
  S3ORAM_RETURN_IF_ERROR(s.Ask(r.K, wire::RebuildFinishRequest{d.applied_seq, d.applied_evictions},
                               wire::MessageType::kRebuildFinishReply, r.options.client.evictions)
                             .status()
                             .WithContext("finishing the rebuild on " + r.Name(r.K)));
  spdlog::info("server {} {}: {} of {} buckets sent ({} missed), {} written", r.K,
               r.report.caught_up ? "caught up" : "rebuilt", r.report.buckets_sent, d.buckets,
               r.report.caught_up ? r.report.buckets_missed : d.buckets, r.report.buckets_written);
  return Status::Ok();
}

// ---- 3. The data path: BEGIN, the root snapshot, every range (a
// catch-up's: the runs of missed buckets only), FINISH.
Status TransferShares(RebuildRun& r, const OramParams& p, bool may_rebuild_in_full) {
  const RebuildOptions& options = r.options;
  DataPath d;
  // An excluded K that kept its store misses only what the others rewrote
  // since: from the lower of its exclusion's count and its own (it may
  // have lagged before, or claim more than it applied).
  std::vector<bool> missed;
  const std::uint64_t ne = r.status[r.survivors.front()].applied_evictions;
  if (r.k_excluded && r.k_excluded->suspect && r.k_live && !options.full) {
    spdlog::info(
        "{} was excluded for what it answered: none of its buckets is kept, it is "
        "rebuilt in full",
        r.Name(r.K));
  }
  if (r.k_excluded && !r.k_excluded->suspect && (r.k_live || r.k_in_catch_up) && !options.full) {
    const std::uint64_t from =
        std::min(r.k_excluded->since_eviction, r.status[r.K].applied_evictions);
    missed = BucketsRewrittenBy(p.geometry(), from, ne);
    const auto n = static_cast<std::uint64_t>(std::count(missed.begin(), missed.end(), true));
    if (2 * n > p.geometry().num_buckets()) {
      spdlog::info("{} missed {} evictions, which rewrote {} of {} buckets: rebuilding it in full",
                   r.Name(r.K), ne - from, n, p.geometry().num_buckets());
      missed.clear();
    } else {
      r.report.caught_up_from = from;
    }
  }
  S3ORAM_RETURN_IF_ERROR(BeginTransfer(r, p, may_rebuild_in_full, d, missed));
  const std::uint64_t to_send = r.report.caught_up ? r.report.buckets_missed : d.buckets;
  const std::uint64_t total_bytes = to_send * d.bucket_bytes;
  if (options.progress) options.progress("rebuild", 0, total_bytes);

  S3ORAM_RETURN_IF_ERROR(RebuildRootSnapshot(r, d));
  std::uint64_t sent_of_total = 0;
  for (std::uint64_t first = 1; first <= d.buckets;) {
    // A catch-up sends the runs of missed buckets only.
    if (r.report.caught_up && !missed[first]) {
      ++first;
      continue;
    }
    const std::uint64_t count = r.report.caught_up
                                    ? RunOfMarked(missed, first, d.per_range, d.buckets)
                                    : std::min<std::uint64_t>(d.per_range, d.buckets - first + 1);
    S3ORAM_RETURN_IF_ERROR(RebuildRange(r, d, first, static_cast<std::uint32_t>(count)));
    // Progress counts what is to send (missed buckets for a catch-up, not
    // the kept ones a range bridges), so it ends at its total.
    for (std::uint64_t b = first; b < first + count; ++b) {
      sent_of_total += !r.report.caught_up || missed[b] ? 1 : 0;
    }
    first += count;
    r.report.buckets_sent += count;
    if (options.progress) options.progress("rebuild", sent_of_total * d.bucket_bytes, total_bytes);
  }
  return FinishTransfer(r, d);
}

// ---- 3. The data path, then the seq used recorded and K readmitted.
Status CopyShares(RebuildRun& r) {
  S3ORAM_RETURN_IF_ERROR(TransferShares(r, r.params(), /*may_rebuild_in_full=*/true));
  Session& s = *r.s;
  if (r.report.caught_up) {
    // A caught-up K holds this run's lease (serverd: BeginCatchUp): give it
    // this run's description, as the survivors have, so that a crash before
    // the release leaves a lease the next mount of this state can take over.
    S3ORAM_RETURN_IF_ERROR(AcquireSurvivorLeases(s, {r.K}, *r.sealer, r.state_path)
                               .WithContext("the lease on the caught-up " + r.Name(r.K)));
  }
  // Record the seq used: the next client continues above it.
  Counters c = r.store->counters();
  c.seq = std::max(c.seq, s.seq);
  ClientStateStore::Batch batch;
  batch.SetCounters(c);
  // A problem a mount recorded (s3oram status) is taken as repaired; if
  // it was another server's, the next access meets and records it again.
  if (r.store->problem_note()) batch.SetProblemNote(std::nullopt);
  // An excluded K holds current shares again: it takes part from here on.
  if (r.k_excluded) batch.Readmit(static_cast<std::uint32_t>(r.K));
  return r.store->Commit(batch, /*durable=*/true);
}

// ---- 4. Verification through the ORAM: every live block must authenticate.
Status VerifyThroughOram(RebuildRun& r, const Secret& passphrase) {
  const RebuildOptions& options = r.options;
  S3ORAM_ASSIGN_OR_RETURN(auto client, OramClient::Open(r.state_path, passphrase, options.client));
  std::vector<BlockId> live;
  const PositionMap& pm = client->position_map();
  for (BlockId id = 0; id < pm.capacity(); ++id) {
    if (pm.Find(id) != nullptr) live.push_back(id);
  }
  if (options.progress) options.progress("verify", 0, live.size());
  for (BlockId id : live) {
    auto read = client->Read(id);
    if (!read.ok()) {
      return read.status().WithContext("verifying block " + std::to_string(id) +
                                       " after rebuilding server " + std::to_string(r.K));
    }
    ++r.report.blocks_verified;
    if (options.progress) options.progress("verify", r.report.blocks_verified, live.size());
  }
  S3ORAM_RETURN_IF_ERROR(client->Sync());
  // The reads moved every block: upload the state, so that another device
  // refreshing after this rebuild finds a backup as new as the servers.
  if (auto b = BackupState(*client); b.ok() && client->RecordBackup(b->generation, b->epoch).ok()) {
    r.report.backup_generation = b->generation;
  } else {
    spdlog::warn(
        "rebuild: backing up the client state after the verification failed ({}); run "
        "`s3oram backup-state -s {}`",
        b.ok() ? "recording it in the state" : b.status().ToString(), r.state_path);
  }
  return Status::Ok();
}

}  // namespace

struct CatchUpRun::Impl {
  Impl(ClientSession& session_in, std::size_t target, Progress progress_in, std::size_t range_bytes)
      : session(session_in),
        state_path(session_in.state_path()),
        options(OptionsFor(session_in, target, range_bytes)),
        r(state_path, options),
        progress(std::move(progress_in)) {}

  static RebuildOptions OptionsFor(const ClientSession& session, std::size_t target,
                                   std::size_t range_bytes) {
    RebuildOptions o;
    o.target = target;
    o.range_bytes = range_bytes;
    o.client = session.options();
    o.verify = false;
    return o;
  }

  ClientSession& session;
  const std::string state_path;
  const RebuildOptions options;
  RebuildRun r;  // refers to state_path and options, declared before it
  Progress progress;
  DataPath d;
  // fresh[b]: K holds bucket b as the participants hold it at `as_of`
  // evictions. The root is never fresh: root writes change it between
  // evictions, and the last pass sends it.
  std::vector<bool> fresh;
  std::uint64_t as_of = 0;
  std::uint64_t cursor = 2;  // where the copy goes on
  std::uint64_t sent_bytes = 0;
  std::uint64_t total_bytes = 0;

  // Buckets the last pass would send now.
  std::uint64_t Stale() const {
    return static_cast<std::uint64_t>(std::count(fresh.begin() + 1, fresh.end(), false));
  }

  void Report() {
    total_bytes = std::max(total_bytes, sent_bytes + Stale() * d.bucket_bytes);
    if (progress) progress(sent_bytes, total_bytes);
  }

  // The participants' STATUS, all at once: they must have applied what this
  // client committed (none lags on a commit), so that a range read now is
  // one sharing. Their counters go to r.status.
  Status ParticipantsAgree() {
    for (std::size_t j : r.report.participants) {
      if (session.excluded(j)) {
        return Status::FailedPrecondition(r.Name(j) + " was excluded while it helped catch up " +
                                          r.Name(r.K) + "; the catch-up starts again later");
      }
    }
    Session& s = *r.s;
    const wire::Header h = s.Next();
    const auto frame = wire::Encode(h, wire::StatusRequest{});
    S3ORAM_ASSIGN_OR_RETURN(
        std::vector<wire::Message> answers,
        s.servers->ExchangeWith(
            r.report.participants,
            std::vector<std::vector<std::uint8_t>>(r.report.participants.size(), frame), h,
            wire::MessageType::kStatusReply, options.client.requests));
    for (std::size_t a = 0; a < answers.size(); ++a) {
      const std::size_t j = r.report.participants[a];
      r.status[j] = std::get<wire::StatusReply>(std::move(answers[a].body));
      if (r.status[j].applied_evictions != session.counters().ne) {
        return Status::Unavailable(
            r.Name(j) + " has applied " + std::to_string(r.status[j].applied_evictions) +
            " evictions, this client " + std::to_string(session.counters().ne) +
            ": an eviction's commit is under way");
      }
    }
    return Status::Ok();
  }

  // Evictions committed since `as_of` made what they rewrote stale on K.
  void CatchUpWithEvictions(std::uint64_t ne) {
    if (ne == as_of) return;
    const auto rewritten = BucketsRewrittenBy(session.config().params.geometry(), as_of, ne);
    for (std::size_t b = 1; b < fresh.size(); ++b) {
      if (rewritten[b]) fresh[b] = false;
    }
    as_of = ne;
  }

  // Sends buckets first .. first + count - 1 as the participants hold them
  // now (every one of them: fresh ones the range bridges too).
  Status Send(std::uint64_t first, std::uint64_t count) {
    S3ORAM_RETURN_IF_ERROR(RebuildRange(r, d, first, static_cast<std::uint32_t>(count)));
    for (std::uint64_t b = first; b < first + count; ++b) {
      if (!fresh[b]) sent_bytes += d.bucket_bytes;
      fresh[b] = true;
    }
    r.report.buckets_sent += count;
    Report();
    return Status::Ok();
  }
};

CatchUpRun::CatchUpRun(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CatchUpRun::~CatchUpRun() = default;
std::size_t CatchUpRun::target() const { return impl_->r.K; }

Result<std::unique_ptr<CatchUpRun>> CatchUpRun::Start(ClientSession& session, std::size_t target,
                                                      Progress progress, std::size_t range_bytes) {
  const FsConfig& config = session.config();
  const OramParams& p = config.params;
  std::optional<Exclusion> excluded;
  for (const Exclusion& e : session.store().exclusions()) {
    if (e.server == target) excluded = e;
  }
  if (!excluded) {
    return Status::InvalidArgument("server " + std::to_string(target) + " is not excluded");
  }
  if (excluded->suspect) {
    return Status::FailedPrecondition(
        "server " + std::to_string(target) + " was excluded for what it answered (" +
        excluded->reason +
        "): none of its buckets is trusted, so it is not caught up; rebuild it in full: "
        "unmount, then s3oram rebuild -s " +
        session.state_path() + " --server " + std::to_string(target));
  }
  auto impl = std::make_unique<Impl>(session, target, std::move(progress), range_bytes);
  RebuildRun& r = impl->r;
  r.K = target;
  r.shape = ShapeOf(p);
  r.k_excluded = excluded;
  r.s.emplace(Session{impl->options, config, &session.servers(), session.counters().epoch,
                      session.counters().seq, [&session] { return session.NextHeader(); }});
  Session& s = *r.s;
  r.status.assign(config.servers.size(), wire::StatusReply{});
  // A short wait: this runs under the client's lock.
  TransportOptions quick = impl->options.client.requests;
  quick.deadline = std::min<std::chrono::milliseconds>(quick.deadline, std::chrono::seconds(2));
  quick.resend_after = std::min(quick.resend_after, quick.deadline);
  {
    wire::Header h = s.Next();
    auto reply = s.servers->ExchangeWith({target}, {wire::Encode(h, wire::StatusRequest{})}, h,
                                         wire::MessageType::kStatusReply, quick);
    if (!reply.ok()) return Status::Unavailable(r.Name(target) + " is still unreachable");
    const wire::Message& m = reply.value()[0];
    r.status[target] = std::get<wire::StatusReply>(m.body);
    const wire::StatusReply& st = r.status[target];
    // Rebuilding: caught up in place (a catch-up of it cut off), begun
    // again from the state it names; rebuilt in full, it refuses the BEGIN.
    if ((!st.initialized && !st.rebuilding) || m.header.fs_id != config.fs_id ||
        !(st.shape == r.shape)) {
      return Status::FailedPrecondition(
          r.Name(target) +
          " is back but holds no store of this filesystem to catch up (it lost its data); "
          "rebuild it in full: unmount, then s3oram rebuild -s " +
          session.state_path() + " --server " + std::to_string(target));
    }
  }
  r.k_live = true;
  for (std::size_t j : session.participants()) {
    S3ORAM_ASSIGN_OR_RETURN(r.status[j], s.StatusOf(j));
    if (r.status[j].applied_evictions != session.counters().ne) {
      return Status::Unavailable(
          r.Name(j) + " has applied " + std::to_string(r.status[j].applied_evictions) +
          " evictions, this client " + std::to_string(session.counters().ne) +
          ": an eviction's commit is under way");
    }
    r.survivors.push_back(j);
  }
  if (r.survivors.size() < p.threshold + 1) {
    return Status::Unavailable("too few servers take part to catch server " +
                               std::to_string(target) + " up");
  }
  const std::uint64_t ne = session.counters().ne;
  const std::uint64_t from = std::min(excluded->since_eviction, r.status[target].applied_evictions);
  std::vector<bool> missed = BucketsRewrittenBy(p.geometry(), from, ne);
  const auto n = static_cast<std::uint64_t>(std::count(missed.begin(), missed.end(), true));
  if (2 * n > p.geometry().num_buckets()) {
    return Status::FailedPrecondition(
        r.Name(target) + " missed " + std::to_string(ne - from) + " evictions, which rewrote " +
        std::to_string(n) + " of " + std::to_string(p.geometry().num_buckets()) +
        " buckets: too much to catch up while mounted; rebuild it: unmount, then s3oram rebuild "
        "-s " +
        session.state_path() + " --server " + std::to_string(target));
  }
  r.report.caught_up_from = from;
  S3ORAM_RETURN_IF_ERROR(BeginTransfer(r, p, /*may_rebuild_in_full=*/false, impl->d, missed));
  if (!r.report.caught_up) {
    return Status::Protocol("catch-up of server " + std::to_string(target) + " fell back");
  }
  impl->as_of = ne;
  impl->fresh.assign(missed.size(), true);
  for (std::size_t b = 1; b < missed.size(); ++b) impl->fresh[b] = !missed[b];
  impl->fresh[1] = false;
  impl->Report();
  return std::unique_ptr<CatchUpRun>(new CatchUpRun(std::move(impl)));
}

Result<bool> CatchUpRun::CopyNext() {
  Impl& m = *impl_;
  const std::uint64_t ne = m.session.counters().ne;
  m.CatchUpWithEvictions(ne);
  // What the copy leaves to the last pass: the root, and the buckets the
  // eviction under way and the one after it rewrite (known in advance:
  // evictions go round the leaves in a fixed order), which would be stale
  // again before that pass. Everything else stale is copied now, so the
  // last pass is about two evictions' worth, whatever the accesses did.
  const auto soon =
      BucketsRewrittenBy(m.session.config().params.geometry(), ne, ne + kEvictionsAhead);
  std::vector<bool> wanted(m.fresh.size(), false);
  bool any = false;
  for (std::size_t b = 2; b < wanted.size(); ++b) {
    wanted[b] = !m.fresh[b] && !soon[b];
    any |= wanted[b];
  }
  // Past kMaxPasses times what the server missed, the accesses make
  // buckets stale about as fast as single ranges send them: each step then
  // sends ranges for up to kBurst (no eviction commits meanwhile, so the
  // copy gains on them). Past twice that, the last pass takes the rest.
  const std::uint64_t pass =
      std::max<std::uint64_t>(m.r.report.buckets_missed, 1) * m.d.bucket_bytes;
  if (!any || m.sent_bytes >= 2 * kMaxPasses * pass) return true;
  const bool behind = m.sent_bytes >= kMaxPasses * pass;
  const auto until =
      std::chrono::steady_clock::now() + (behind ? kBurst : std::chrono::milliseconds(0));
  S3ORAM_RETURN_IF_ERROR(m.ParticipantsAgree());
  do {
    // From the cursor on, round to the start once.
    std::uint64_t first = m.cursor;
    while (first <= m.d.buckets && !wanted[first]) ++first;
    if (first > m.d.buckets) {
      first = 2;
      while (first <= m.d.buckets && !wanted[first]) ++first;
      if (first > m.d.buckets) break;
    }
    const std::uint64_t count = RunOfMarked(wanted, first, m.d.per_range, m.d.buckets);
    S3ORAM_RETURN_IF_ERROR(m.Send(first, count));
    for (std::uint64_t b = first; b < first + count; ++b) wanted[b] = false;
    m.cursor = first + count;
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

Result<RebuildReport> CatchUpRun::Finish() {
  Impl& m = *impl_;
  RebuildRun& r = m.r;
  S3ORAM_RETURN_IF_ERROR(m.ParticipantsAgree());
  m.CatchUpWithEvictions(m.session.counters().ne);
  m.fresh[1] = false;
  // K's goal moves to the counters the participants hold now.
  const std::uint64_t before = r.report.buckets_sent;
  m.d.applied_evictions = m.session.counters().ne;
  for (std::size_t j : r.report.participants)
    m.d.applied_seq = std::max(m.d.applied_seq, r.status[j].applied_seq);
  S3ORAM_RETURN_IF_ERROR(BeginOnTarget(r, m.d, /*catch_up=*/true));
  S3ORAM_RETURN_IF_ERROR(RebuildRootSnapshot(r, m.d));
  std::vector<bool> stale(m.fresh.size());
  for (std::size_t b = 1; b < stale.size(); ++b) stale[b] = !m.fresh[b];
  for (std::uint64_t first = 1; first <= m.d.buckets;) {
    if (!stale[first]) {
      ++first;
      continue;
    }
    const std::uint64_t count = RunOfMarked(stale, first, m.d.per_range, m.d.buckets);
    S3ORAM_RETURN_IF_ERROR(m.Send(first, count));
    first += count;
  }
  r.report.last_pass_buckets = r.report.buckets_sent - before;
  S3ORAM_RETURN_IF_ERROR(FinishTransfer(r, m.d));
  return r.report;
}

Result<RebuildReport> RebuildServer(const std::string& state_path, const Secret& passphrase,
                                    const RebuildOptions& options) {
  random::EnsureInitialized();
  RebuildRun r(state_path, options);
  // The passphrase first (it opens the sealed state): a wrong one changes
  // nothing anywhere.
  S3ORAM_ASSIGN_OR_RETURN(std::unique_ptr<UnlockedState> unlocked,
                          UnlockedState::Unlock(state_path, passphrase));
  r.sealer = std::make_unique<BlockSealer>(unlocked->master(), unlocked->header().fs_id);
  S3ORAM_ASSIGN_OR_RETURN(
      r.store, ClientStateStore::Open(std::shared_ptr<UnlockedState>(std::move(unlocked))));
  const FsConfig& config = r.store->config();
  const OramParams& p = config.params;
  const std::size_t parties = config.servers.size();
  r.K = options.target;
  if (parties != p.parties) {
    return Status::Corruption("state lists " + std::to_string(parties) + " servers for " +
                              std::to_string(p.parties) + " parties");
  }
  if (r.K >= parties) {
    return Status::InvalidArgument("server " + std::to_string(r.K) +
                                   " does not exist: this "
                                   "filesystem has servers 0.." +
                                   std::to_string(parties - 1));
  }
  r.shape = ShapeOf(p);
  for (const Exclusion& e : r.store->exclusions()) {
    if (e.server == r.K) r.k_excluded = e;
  }
  S3ORAM_ASSIGN_OR_RETURN(r.servers, ConnectServers(options.client.connect, AddressesOf(config)));
  r.s.emplace(Session{
      options, config, r.servers.get(), r.store->counters().epoch, r.store->counters().seq, {}});

  S3ORAM_RETURN_IF_ERROR(SurveyServers(r));
  S3ORAM_RETURN_IF_ERROR(ChooseSources(r));
  S3ORAM_RETURN_IF_ERROR(CheckSurvivorsFitTheState(r));
  S3ORAM_RETURN_IF_ERROR(AdoptNewEpoch(r));

  // The survivors' lease, so no mount changes the tree while it is copied;
  // released however the copy ends.
  S3ORAM_RETURN_IF_ERROR(AcquireSurvivorLeases(*r.s, r.survivors, *r.sealer, state_path));
  struct ReleaseOnExit {
    RebuildRun& r;
    ~ReleaseOnExit() {
      std::vector<std::size_t> holders = r.survivors;
      if (r.report.caught_up) holders.push_back(r.K);
      for (std::size_t j : holders) {
        (void)r.s->Ask(j, wire::LeaseReleaseRequest{}, wire::MessageType::kLeaseReply,
                       r.options.client.requests);
      }
    }
  };
  {
    const ReleaseOnExit release{r};
    S3ORAM_RETURN_IF_ERROR(ReconcileSurvivors(*r.s, r.survivors, r.status, r.report));
    S3ORAM_RETURN_IF_ERROR(CopyShares(r));
  }
  r.s.reset();
  r.servers.reset();
  r.store.reset();
  if (options.verify) S3ORAM_RETURN_IF_ERROR(VerifyThroughOram(r, passphrase));
  return std::move(r.report);
}

}  // namespace s3oram
