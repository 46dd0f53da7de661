// Rebuilding a lost server (docs/ARCHITECTURE.md, "Rebuilding a lost server"):
// REBUILD_BEGIN/WRITE/FINISH on the target, REBUILD_READ (masked) on the survivors.
#include <spdlog/spdlog.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "oramcore/base/fault_point.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/math/field.h"
#include "oramcore/math/shamir.h"
#include "oramcore/math/slot_digest.h"
#include "serverd/backup_store.h"
#include "serverd/lease_file.h"
#include "serverd/rebuild_masks.h"
#include "serverd/request_handler_internal.h"

namespace s3oram::serverd {

namespace {

// A CURVE public key (Z85 text, as in the configuration) as 32 bytes.
Result<rebuild::PublicKey> DecodePublicKey(const std::string& z85, const std::string& what) {
  S3ORAM_RETURN_IF_ERROR(CheckZ85Key(z85, what));
  rebuild::PublicKey out{};
  if (zmq_z85_decode(out.data(), z85.c_str()) == nullptr) {
    return Status::InvalidArgument(what + " is not valid Z85");
  }
  return out;
}

}  // namespace

Result<wire::Body> RequestHandler::Impl::HandleRebuildBegin(const wire::Header& h,
                                                            const wire::RebuildBeginRequest& req) {
  if (req.server_index != config.index) {
    return Status::InvalidArgument("rebuild: this is server " + std::to_string(config.index) +
                                   ", not server " + std::to_string(req.server_index));
  }
  S3ORAM_RETURN_IF_ERROR(ValidateShape(req.shape));
  if (req.catch_up) return BeginCatchUp(h, req);
  if (store && !store->rebuilding()) {
    const ServerMeta& m = store->meta();
    if (!req.force) {
      return Status::AlreadyExists(
          "rebuild: server " + std::to_string(config.index) + " holds a live store of " +
          (m.fs_id == h.fs_id ? std::string("this filesystem") : "filesystem " + HexId(m.fs_id)) +
          " (" + std::to_string(m.applied_evictions) +
          " evictions applied); refusing to replace it without force (s3oram rebuild --force)");
    }
    // Forced, the store is replaced even if it reports a newer epoch than
    // the rebuild's: that epoch is this server's word alone. The rebuild's
    // client holds the lease of t + 1 other servers under an epoch above
    // what they agree on (oramcore/protocol/counter_agreement.h), so it is
    // not a client they fenced off; and a lease record or store header
    // forged to the last epoch must stay repairable by this rebuild.
    if (m.fs_id == h.fs_id && h.epoch < std::max(max_epoch, m.epoch)) {
      spdlog::warn("forced rebuild under epoch {} replaces a store that reports epoch {}", h.epoch,
                   std::max(max_epoch, m.epoch));
    }
  }
  store.reset();  // releases the directory lock before the new store takes it
  rebuild_target.reset();
  mask_session.reset();
  sealed.reset();
  // An outcome (or a pending job) belongs to the store it was computed on:
  // a rebuilt store must not answer EVICT_RESULT with the old one's damage.
  outcome.reset();
  job.reset();
  peers->Reset();
  ServerMeta meta;
  meta.fs_id = h.fs_id;
  meta.server_index = config.index;
  meta.shape = req.shape;
  meta.epoch = h.epoch;
  meta.applied_seq = req.applied_seq;
  meta.applied_evictions = req.applied_evictions;
  S3ORAM_ASSIGN_OR_RETURN(store, ShareStore::CreateForRebuild(config.data_dir, meta, config.sync));
  // The rebuilt store starts without a holder (a replaced store's lease is
  // void) and without backups (the next clean unmount writes one; restores
  // meanwhile use the other servers' shares).
  S3ORAM_RETURN_IF_ERROR(SaveLease(config.data_dir, LeaseRecord{}, config.sync));
  lease = LeaseRecord{};
  backups.reset();
  S3ORAM_ASSIGN_OR_RETURN(backups, BackupStore::Open(config.data_dir, config.sync));
  S3ORAM_RETURN_IF_ERROR(backups->RemoveAll());
  rebuild_target = RebuildTarget{h.epoch, req.applied_seq, req.applied_evictions, 1};
  max_epoch = h.epoch;
  spdlog::info("rebuilding filesystem {} (H={} Z={} m={}, {} buckets) from the other servers",
               HexId(h.fs_id), req.shape.height, req.shape.bucket_size, req.shape.elems_per_slot,
               store->rebuild().num_buckets());
  return wire::Body{wire::RebuildBeginReply{}};
}

Result<wire::Body> RequestHandler::Impl::BeginCatchUp(const wire::Header& h,
                                                      const wire::RebuildBeginRequest& req) {
  const std::string me = "server " + std::to_string(config.index);
  // A BEGIN sent again (a lost reply, a replaced connection) finds its own
  // catch-up under way: the same answer, nothing done twice. Sent again at
  // newer counters by the same client (its epoch), it moves the catch-up's
  // goal: a mount copies while its accesses go on, then sends what changed
  // meanwhile, and FINISH must name the counters of that last pass.
  if (store && store->rebuilding() && rebuild_target && rebuild_target->catch_up &&
      rebuild_target->epoch == h.epoch && store->meta().fs_id == h.fs_id) {
    RebuildTarget& rt = *rebuild_target;
    if (req.applied_seq < rt.applied_seq || req.applied_evictions < rt.applied_evictions) {
      return Status::InvalidArgument("catch-up: BEGIN again at " +
                                     std::to_string(req.applied_evictions) + " evictions and seq " +
                                     std::to_string(req.applied_seq) + ", behind the " +
                                     std::to_string(rt.applied_evictions) + " and " +
                                     std::to_string(rt.applied_seq) + " it began with");
    }
    if (req.applied_seq != rt.applied_seq || req.applied_evictions != rt.applied_evictions) {
      spdlog::info("catch-up of filesystem {} goes on to {} evictions applied", HexId(h.fs_id),
                   req.applied_evictions);
      rt.applied_seq = req.applied_seq;
      rt.applied_evictions = req.applied_evictions;
    }
    return wire::Body{wire::RebuildBeginReply{}};
  }
  // A catch-up cut off (the server restarted with its mark, or its client
  // went away mid-copy and one under a newer epoch comes): begun again from
  // the state its header names, sending again whatever the cut one wrote.
  // The epoch check below fences off the client it replaces.
  const bool resumed = store && store->catching_up() && store->meta().fs_id == h.fs_id &&
                       store->meta().shape == req.shape;
  if (!store || (store->rebuilding() && !resumed) || store->meta().fs_id != h.fs_id ||
      !(store->meta().shape == req.shape)) {
    return Status::FailedPrecondition("catch-up: " + me + " holds no live store of filesystem " +
                                      HexId(h.fs_id) +
                                      " with this shape to catch up; it must be rebuilt in full");
  }
  const ServerMeta& m = store->meta();
  if (m.applied_evictions > req.applied_evictions) {
    return Status::InvalidArgument("catch-up: " + me + " has applied " +
                                   std::to_string(m.applied_evictions) +
                                   " evictions, more than the " +
                                   std::to_string(req.applied_evictions) + " it is to catch up to");
  }
  if (h.epoch < max_epoch) {
    return Status::FailedPrecondition("fenced: catch-up under epoch " + std::to_string(h.epoch) +
                                      ", but " + me + " has seen epoch " +
                                      std::to_string(max_epoch));
  }
  // The eviction state belongs to the store as it was: a catch-up makes it
  // the others' (a pending PREPARE's result would be of the old shares).
  mask_session.reset();
  sealed.reset();
  outcome.reset();
  job.reset();
  peers->Reset();
  const std::uint64_t from = m.applied_evictions;
  if (resumed) {
    spdlog::info(
        "catch-up of filesystem {} begins again from {} evictions applied (the one "
        "before was cut off)",
        HexId(h.fs_id), m.applied_evictions);
  }
  // Set first: from BeginCatchUp on the store is rebuilding, and a store
  // that is rebuilding has its target (a later step failing leaves both).
  rebuild_target =
      RebuildTarget{h.epoch, req.applied_seq, req.applied_evictions, 1, /*catch_up=*/true};
  max_epoch = h.epoch;
  if (Status st = store->rebuild().BeginCatchUp(); !st.ok()) {
    if (!store->rebuilding()) rebuild_target.reset();
    return st;
  }
  // The client catching this server up holds the lease on the others under
  // this epoch (a mount, or `s3oram rebuild`): it holds it here too, its
  // description to come with its next ACQUIRE (same epoch: granted). Any
  // lease the excluded server kept is void. No backups either (stale; the
  // next clean unmount writes one).
  LeaseRecord held;
  held.holder_epoch = h.epoch;
  held.highest_epoch = h.epoch;
  held.acquired_unix_ms =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  S3ORAM_RETURN_IF_ERROR(SaveLease(config.data_dir, held, config.sync));
  lease = held;
  lease_last_seen = Clock::now();
  backups.reset();
  S3ORAM_ASSIGN_OR_RETURN(backups, BackupStore::Open(config.data_dir, config.sync));
  S3ORAM_RETURN_IF_ERROR(backups->RemoveAll());
  spdlog::info("catching up filesystem {} from {} to {} evictions applied", HexId(h.fs_id), from,
               req.applied_evictions);
  return wire::Body{wire::RebuildBeginReply{}};
}

Status RequestHandler::Impl::CheckRebuildTarget(const wire::Header& h) const {
  if (!store || !store->rebuilding() || !rebuild_target) {
    return Status::FailedPrecondition("rebuild: server " + std::to_string(config.index) +
                                      " is not being rebuilt (send REBUILD_BEGIN first)");
  }
  if (h.fs_id != store->meta().fs_id) {
    return Status::FailedPrecondition("rebuild: request for filesystem " + HexId(h.fs_id) +
                                      " but this server is rebuilding " +
                                      HexId(store->meta().fs_id));
  }
  if (h.epoch < rebuild_target->epoch) {
    return Status::FailedPrecondition("fenced: request epoch " + std::to_string(h.epoch) +
                                      " is older than the rebuild's epoch " +
                                      std::to_string(rebuild_target->epoch));
  }
  return Status::Ok();
}

Status RequestHandler::Impl::CheckRange(std::uint64_t first, std::uint64_t count,
                                        const char* what) const {
  const std::uint64_t n = store->tree().num_buckets();
  if (first < 1 || count < 1 || first > n || count > n - first + 1) {
    return Status::InvalidArgument(std::string(what) + ": bucket range " + std::to_string(first) +
                                   " + " + std::to_string(count) + " is outside 1.." +
                                   std::to_string(n));
  }
  if (count * store->tree().bucket_elems() > wire::kMaxElems) {
    return Status::InvalidArgument(std::string(what) + ": " + std::to_string(count) +
                                   " buckets exceed one message's element limit");
  }
  return Status::Ok();
}

Status RequestHandler::Impl::PrepareMasks(const wire::RebuildReadRequest& req) {
  if (mask_session && mask_session->target == req.target &&
      mask_session->participants == req.participants && mask_session->nonce == req.nonce) {
    return Status::Ok();
  }
  mask_session.reset();
  MaskSession ms;
  ms.target = req.target;
  ms.participants = req.participants;
  ms.nonce = req.nonce;
  std::vector<Elem> xs;
  std::size_t mine = 0;
  for (std::size_t i = 0; i < req.participants.size(); ++i) {
    xs.push_back(shamir::PartyX(req.participants[i]));
    if (req.participants[i] == config.index) mine = i;
  }
  S3ORAM_ASSIGN_OR_RETURN(auto lag, shamir::LagrangeAt(xs, shamir::PartyX(req.target)));
  ms.lambda = lag[mine];
  S3ORAM_ASSIGN_OR_RETURN(CurveKeypair keys, LoadCurveKeypair(config.secret_key_file));
  S3ORAM_ASSIGN_OR_RETURN(Secret own_secret, DecodeSecretKey(keys));
  S3ORAM_ASSIGN_OR_RETURN(rebuild::PublicKey own_public,
                          DecodePublicKey(keys.public_key, "this server's public key"));
  rebuild::SessionNonce nonce{};
  std::copy(req.nonce.begin(), req.nonce.end(), nonce.begin());
  for (std::uint32_t j : req.participants) {
    if (j == config.index) continue;
    const PeerConfig* peer = nullptr;
    for (const auto& p : config.peers) {
      if (p.index == j) peer = &p;
    }
    if (peer == nullptr) {
      return Status::InvalidArgument("rebuild: participant " + std::to_string(j) +
                                     " is not a configured peer of server " +
                                     std::to_string(config.index));
    }
    S3ORAM_ASSIGN_OR_RETURN(
        rebuild::PublicKey peer_public,
        DecodePublicKey(peer->public_key, "public key of peer " + std::to_string(j)));
    S3ORAM_ASSIGN_OR_RETURN(Secret seed, rebuild::PairSeed(own_secret, own_public, peer_public,
                                                           nonce, req.target, req.participants));
    ms.pairs.push_back(rebuild::PairMask{std::move(seed), config.index < j});
  }
  mask_session = std::move(ms);
  return Status::Ok();
}

Result<wire::Body> RequestHandler::Impl::HandleRebuildRead(const wire::Header& h,
                                                           const wire::RebuildReadRequest& req) {
  if (req.target >= parties) {
    return Status::InvalidArgument("rebuild: target server " + std::to_string(req.target) +
                                   " out of range for " + std::to_string(parties) + " parties");
  }
  if (req.participants.size() != threshold + 1) {
    return Status::InvalidArgument(
        "rebuild: " + std::to_string(req.participants.size()) +
        " participants, expected t + 1 = " + std::to_string(threshold + 1));
  }
  bool me_in = false;
  for (std::size_t i = 0; i < req.participants.size(); ++i) {
    const std::uint32_t p = req.participants[i];
    if (p >= parties) {
      return Status::InvalidArgument("rebuild: participant " + std::to_string(p) + " out of range");
    }
    if (i > 0 && p <= req.participants[i - 1]) {
      return Status::InvalidArgument("rebuild: participants must be distinct and ascending");
    }
    if (p == req.target) {
      return Status::InvalidArgument(
          "rebuild: the target server " + std::to_string(req.target) +
          " is among the participants; a lost server cannot contribute to its own rebuild");
    }
    me_in |= p == config.index;
  }
  if (!me_in) {
    return Status::InvalidArgument("rebuild: this server (" + std::to_string(config.index) +
                                   ") is not among the participants");
  }
  if (req.first_bucket == 0) return RebuildReadRootSnapshot(h, req);
  S3ORAM_RETURN_IF_ERROR(CheckRange(req.first_bucket, req.count, "rebuild read"));
  S3ORAM_RETURN_IF_ERROR(PrepareMasks(req));
  const MaskSession& ms = *mask_session;
  const LiveTree& tree = store->tree();

  std::vector<bool> holes(req.count, false);
  if (!req.dense) {
    S3ORAM_ASSIGN_OR_RETURN(holes, tree.Holes(req.first_bucket, req.count));
  }
  std::vector<std::uint8_t> hole_flags(req.count);
  std::size_t written = 0;
  for (std::size_t i = 0; i < req.count; ++i) {
    hole_flags[i] = holes[i] ? 1 : 0;
    written += holes[i] ? 0 : 1;
    if (holes[i]) {
      const auto d = tree.Digests(req.first_bucket + i);
      for (std::size_t s = 0; s < d.size(); ++s) {
        if (d[s] != digest::SlotDigest{}) {
          return tree.DamagedSlot(req.first_bucket + i, s,
                                  "it reads as never written, but was written");
        }
      }
    }
  }
  const std::size_t be = tree.bucket_elems();
  std::vector<Elem> terms(written * be);
  // One pread per run of consecutive written buckets, straight into the reply.
  std::size_t out = 0;
  for (std::size_t i = 0; i < req.count;) {
    if (holes[i]) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < req.count && !holes[j]) ++j;
    std::span<Elem> run(terms.data() + out * be, (j - i) * be);
    S3ORAM_RETURN_IF_ERROR(tree.ReadBuckets(req.first_bucket + i, j - i, run));
    // A damaged source slot would be rebuilt into the target as a
    // consistent wrong sharing, beyond any later check: refuse instead.
    S3ORAM_RETURN_IF_ERROR(tree.VerifyBuckets(req.first_bucket + i, run));
    out += j - i;
    i = j;
  }
  // c = L_me(x_K) * s + sum of this server's pair masks, bucket by bucket (the
  // PRG is keyed per bucket number, so every participant lines up).
  out = 0;
  for (std::size_t i = 0; i < req.count; ++i) {
    if (holes[i]) continue;
    std::span<Elem> c(terms.data() + out * be, be);
    for (Elem& e : c) e = field::Mul(ms.lambda, e);
    rebuild::ApplyMasks(ms.pairs, req.first_bucket + i, c, mask_scratch);
    ++out;
  }
  spdlog::debug("rebuild read for server {}: buckets {}..{} ({} written)", req.target,
                req.first_bucket, req.first_bucket + req.count - 1, written);
  return SendTermsToTarget(h, req, std::move(hole_flags), std::move(terms));
}

Result<wire::Body> RequestHandler::Impl::SendTermsToTarget(const wire::Header& h,
                                                           const wire::RebuildReadRequest& req,
                                                           std::vector<std::uint8_t> holes,
                                                           std::vector<Elem> terms) {
  wire::RebuildReadReply reply;
  reply.first_bucket = req.first_bucket;
  reply.holes = holes;
  wire::RebuildTerms m;
  m.target = req.target;
  m.nonce = req.nonce;
  m.first_bucket = req.first_bucket;
  m.from_index = config.index;
  m.holes = std::move(holes);
  m.terms = std::move(terms);
  wire::Header out = h;
  out.fs_id = store->meta().fs_id;
  const std::vector<std::uint8_t> frame = wire::Encode(out, m);
  m = {};
  S3ORAM_RETURN_IF_ERROR(peers->SendTerms(req.target, frame));
  return wire::Body{std::move(reply)};
}

Result<wire::Body> RequestHandler::Impl::RebuildReadRootSnapshot(
    const wire::Header& h, const wire::RebuildReadRequest& req) {
  const EvictionShadow& shadow = store->shadow();
  if (req.count != 1) {
    return Status::InvalidArgument("rebuild read: the root snapshot (bucket 0) is read alone");
  }
  const std::uint64_t eviction = store->meta().applied_evictions;
  if (shadow.RootSnapshotEviction() != eviction + 1) {
    return Status::FailedPrecondition("rebuild read: no root snapshot of eviction " +
                                      std::to_string(eviction) + " here");
  }
  S3ORAM_RETURN_IF_ERROR(PrepareMasks(req));
  const MaskSession& ms = *mask_session;
  std::vector<Elem> terms(shadow.bucket_elems());
  // Checked against its digests: damage must not be rebuilt into the target.
  S3ORAM_RETURN_IF_ERROR(shadow.ReadRootSnapshot(eviction, terms));
  for (Elem& e : terms) e = field::Mul(ms.lambda, e);
  rebuild::ApplyMasks(ms.pairs, 0, terms, mask_scratch);
  spdlog::debug("rebuild read for server {}: the root snapshot of eviction {}", req.target,
                eviction);
  return SendTermsToTarget(h, req, {0}, std::move(terms));
}

Status RequestHandler::Impl::SumTerms(const wire::RebuildWriteRequest& req, std::uint64_t written) {
  if (req.participants.size() != threshold + 1) {
    return Status::InvalidArgument(
        "rebuild write: " + std::to_string(req.participants.size()) +
        " participants, expected t + 1 = " + std::to_string(threshold + 1));
  }
  for (std::size_t i = 0; i < req.participants.size(); ++i) {
    const std::uint32_t p = req.participants[i];
    if (p >= parties || p == config.index || (i > 0 && p <= req.participants[i - 1])) {
      return Status::InvalidArgument(
          "rebuild write: participants must be distinct, ascending peers of server " +
          std::to_string(config.index));
    }
  }
  const std::size_t n = written * store->rebuild().bucket_elems();
  TermsWanted wanted{req.nonce, req.first_bucket, req.holes, req.participants};
  S3ORAM_ASSIGN_OR_RETURN(std::vector<std::vector<Elem>> terms, peers->AwaitTerms(wanted));
  if (terms.size() != req.participants.size()) {
    return Status::Protocol("rebuild write: terms of " + std::to_string(terms.size()) + " of " +
                            std::to_string(req.participants.size()) + " participants");
  }
  std::vector<const Elem*> parts;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    if (terms[i].size() != n) {
      return Status::Protocol("rebuild write: server " + std::to_string(req.participants[i]) +
                              " sent " + std::to_string(terms[i].size()) +
                              " elements of terms, expected " + std::to_string(n));
    }
    parts.push_back(terms[i].data());
  }
  // The masks cancel in this sum: it is K's share. Holes stay holes (zero).
  rebuild_sum.resize(n);
  shamir::SmpCombine(parts, n, rebuild_sum.data());
  return Status::Ok();
}

Result<wire::Body> RequestHandler::Impl::RebuildWriteRootSnapshot(
    const wire::RebuildWriteRequest& req) {
  if (req.holes != std::vector<std::uint8_t>{0}) {
    return Status::InvalidArgument("rebuild write: the root snapshot is one bucket, not a hole");
  }
  const auto key = std::tie(req.nonce, req.first_bucket, req.holes);
  if (rebuild_target->last_written != key) {
    S3ORAM_RETURN_IF_ERROR(SumTerms(req, 1));
    S3ORAM_RETURN_IF_ERROR(
        store->rebuild().WriteRootSnapshot(rebuild_target->applied_evictions, rebuild_sum));
    rebuild_target->last_written = key;
  }
  return wire::Body{wire::RebuildWriteReply{rebuild_target->next_bucket}};
}

Result<wire::Body> RequestHandler::Impl::HandleRebuildWrite(const wire::Header& h,
                                                            const wire::RebuildWriteRequest& req) {
  S3ORAM_RETURN_IF_ERROR(CheckRebuildTarget(h));
  const std::uint64_t count = req.holes.size();
  if (req.first_bucket == 0) return RebuildWriteRootSnapshot(req);
  StoreRebuild& rebuild = store->rebuild();
  S3ORAM_RETURN_IF_ERROR(CheckRange(req.first_bucket, count, "rebuild write"));
  const bool catch_up = rebuild_target->catch_up;
  if (!catch_up && req.first_bucket > rebuild_target->next_bucket) {
    return Status::InvalidArgument("rebuild write: range starts at bucket " +
                                   std::to_string(req.first_bucket) + " but buckets from " +
                                   std::to_string(rebuild_target->next_bucket) +
                                   " on are not written yet");
  }
  // Sent again after it was summed (the reply was lost): the buckets are
  // written, the terms used up.
  if (rebuild_target->last_written &&
      *rebuild_target->last_written == std::tie(req.nonce, req.first_bucket, req.holes)) {
    return wire::Body{
        wire::RebuildWriteReply{catch_up ? req.first_bucket + count : rebuild_target->next_bucket}};
  }
  std::uint64_t written = 0;
  for (std::uint8_t f : req.holes) written += f ? 0 : 1;
  const std::size_t be = rebuild.bucket_elems();
  S3ORAM_RETURN_IF_ERROR(SumTerms(req, written));
  // A bucket whose share sums to all zeros is not written either: the fresh
  // file already reads as zeros there. This keeps the file as sparse as the
  // lost one where a survivor reports a never-written bucket as data because
  // it shares a filesystem block with a written neighbour (buckets are not
  // block-aligned). A written bucket's share is uniformly random, so being
  // all zeros is a non-event; either way the bytes on disk are the same.
  // A catch-up writes every bucket of the range, holes as zeros: the
  // bucket it replaces in place holds older shares.
  std::vector<bool> skip(count, !catch_up);
  std::vector<std::size_t> offset(count, 0);  // of bucket i in rebuild_sum
  if (catch_up) {
    std::vector<Elem> dense(count * be, 0);
    for (std::size_t i = 0, at = 0; i < count; ++i) {
      offset[i] = i;
      if (req.holes[i]) continue;
      std::copy_n(rebuild_sum.data() + at * be, be, dense.data() + i * be);
      ++at;
    }
    rebuild_sum = std::move(dense);
  }
  for (std::size_t i = 0, at = 0; i < count && !catch_up; ++i) {
    if (req.holes[i]) continue;
    offset[i] = at;
    const Elem* b = rebuild_sum.data() + at * be;
    skip[i] = std::all_of(b, b + be, [](Elem e) { return e == 0; });
    ++at;
  }
  for (std::size_t i = 0; i < count;) {
    if (skip[i]) {
      ++i;
      continue;
    }
    // Buckets i..j-1 are written and none is a hole, so they are
    // consecutive in rebuild_sum too: one pwrite.
    std::size_t j = i;
    while (j < count && !skip[j]) ++j;
    S3ORAM_RETURN_IF_ERROR(rebuild.WriteBuckets(
        req.first_bucket + i, {rebuild_sum.data() + offset[i] * be, (j - i) * be}));
    i = j;
  }
  rebuild_target->last_written = std::make_tuple(req.nonce, req.first_bucket, req.holes);
  if (catch_up) {
    FaultPoint("server.catch_up.after_write");
    // Any order: the reply names the bucket after this range.
    return wire::Body{wire::RebuildWriteReply{req.first_bucket + count}};
  }
  rebuild_target->next_bucket = std::max(rebuild_target->next_bucket, req.first_bucket + count);
  return wire::Body{wire::RebuildWriteReply{rebuild_target->next_bucket}};
}

Result<wire::Body> RequestHandler::Impl::HandleRebuildFinish(
    const wire::Header& h, const wire::RebuildFinishRequest& req) {
  // A resent FINISH after success: the live store already says so.
  if (store && !store->rebuilding() && store->meta().fs_id == h.fs_id &&
      store->meta().applied_seq == req.applied_seq &&
      store->meta().applied_evictions == req.applied_evictions) {
    return wire::Body{wire::RebuildFinishReply{}};
  }
  S3ORAM_RETURN_IF_ERROR(CheckRebuildTarget(h));
  const RebuildTarget& rt = *rebuild_target;
  if (!rt.catch_up && rt.next_bucket != store->rebuild().num_buckets() + 1) {
    return Status::FailedPrecondition(
        "rebuild finish: only buckets 1.." + std::to_string(rt.next_bucket - 1) + " of " +
        std::to_string(store->rebuild().num_buckets()) + " were written");
  }
  if (req.applied_seq != rt.applied_seq || req.applied_evictions != rt.applied_evictions) {
    return Status::InvalidArgument("rebuild finish: counters differ from REBUILD_BEGIN's");
  }
  ServerMeta meta = store->meta();
  meta.epoch = std::max(rt.epoch, h.epoch);
  meta.applied_seq = rt.applied_seq;
  meta.applied_evictions = rt.applied_evictions;
  S3ORAM_RETURN_IF_ERROR(store->rebuild().FinishRebuild(meta));
  const bool caught_up = rt.catch_up;
  rebuild_target.reset();
  max_epoch = std::max(max_epoch, meta.epoch);
  spdlog::info("{} of filesystem {} finished: {} evictions applied, seq {}, {} allocated",
               caught_up ? "catch-up" : "rebuild", HexId(meta.fs_id), meta.applied_evictions,
               meta.applied_seq, store->inspection().allocated_bytes());
  return wire::Body{wire::RebuildFinishReply{}};
}

}  // namespace s3oram::serverd
