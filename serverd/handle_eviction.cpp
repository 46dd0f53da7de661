// The eviction on the server: EVICT_PREPARE (the SMP rounds into the shadow,
// run by RunPrepare beside the accesses), EVICT_RESULT, EVICT_COMMIT, and the
// checks the client runs before a commit (EVICT_CHECK, MAC_OPEN).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "oramcore/base/fault_point.h"
#include "oramcore/math/field.h"
#include "oramcore/math/kernels.h"
#include "oramcore/math/shamir.h"
#include "oramcore/math/slot_digest.h"
#include "oramcore/tree/geometry.h"
#include "serverd/lie.h"
#include "serverd/request_handler_internal.h"
#include "serverd/smp_frames.h"

namespace s3oram::serverd {

namespace {

// Milliseconds since t0, for the PREPARE's phase timings.
double ElapsedMs(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

std::uint32_t RequestHandler::Impl::AllParties() const {
  return static_cast<std::uint32_t>((std::uint64_t{1} << parties) - 1);
}

Result<std::uint32_t> RequestHandler::Impl::ParticipantsOf(
    const wire::EvictPrepareRequest& req) const {
  const std::uint32_t all = AllParties();
  if (req.participants == 0) return all;
  const std::string which = "evict: participants " + std::to_string(req.participants);
  if ((req.participants & ~all) != 0) {
    return Status::InvalidArgument(which + " name a server beyond the " +
                                   std::to_string(parties) + " of this filesystem");
  }
  if (((req.participants >> config.index) & 1u) == 0) {
    return Status::InvalidArgument(which + " leave out this server (" +
                                   std::to_string(config.index) + ")");
  }
  if (static_cast<std::size_t>(std::popcount(req.participants)) < 2 * threshold + 1) {
    return Status::InvalidArgument(which + " are fewer than the 2t + 1 = " +
                                   std::to_string(2 * threshold + 1) +
                                   " an eviction's degree reduction needs");
  }
  return req.participants;
}

Result<wire::Body> RequestHandler::Impl::HandlePrepare(const wire::Header& h,
                                                       const wire::EvictPrepareRequest& req) {
  const ServerMeta& meta = store->meta();
  spdlog::debug("prepare seq {} eviction {} attempt {} (applied {})", h.seq, req.eviction,
                req.attempt, meta.applied_evictions);
  const wire::Body started{wire::EvictStartedReply{req.eviction, req.attempt}};
  if (req.eviction < meta.applied_evictions) return started;  // already committed here
  if (req.eviction > meta.applied_evictions) {
    return Status::FailedPrecondition("cannot prepare eviction " + std::to_string(req.eviction) +
                                      ": this server has applied " +
                                      std::to_string(meta.applied_evictions));
  }
  const auto same = std::make_pair(req.eviction, req.attempt);
  if ((job && std::make_pair(job->req.eviction, job->req.attempt) == same) ||
      (outcome && std::make_pair(outcome->eviction, outcome->attempt) == same &&
       outcome->status.ok()) ||
      (sealed && *sealed == same && store->shadow().SealedEviction() == req.eviction + 1)) {
    return started;
  }
  const auto shape = meta.shape;
  const TreeGeometry geo{shape.height, shape.bucket_size};
  const std::size_t Z = shape.bucket_size, H = shape.height;
  const std::size_t step = 2 * Z * Z;
  if (req.leaf != geo.EvictionLeaf(req.eviction)) {
    return Status::InvalidArgument("evict: leaf " + std::to_string(req.leaf) +
                                   " is not the path of eviction " + std::to_string(req.eviction));
  }
  if (req.matrices.size() != (H + 1) * step) {
    return Status::InvalidArgument("evict: " + std::to_string(req.matrices.size()) +
                                   " matrix entries, expected " + std::to_string((H + 1) * step));
  }
  // Shadow buckets: u_1..u_H, then s_1..s_H.
  PrepareJob j;
  j.header = h;
  j.shape = shape;
  S3ORAM_ASSIGN_OR_RETURN(j.participants, ParticipantsOf(req));
  if (j.participants == AllParties()) {
    j.lambda = lambda;
  } else {
    std::vector<Elem> xs;
    std::vector<std::size_t> who;
    for (std::size_t p = 0; p < parties; ++p) {
      if ((j.participants >> p) & 1u) {
        xs.push_back(shamir::PartyX(p));
        who.push_back(p);
      }
    }
    S3ORAM_ASSIGN_OR_RETURN(auto weights, shamir::LagrangeAtZero(xs));
    j.lambda.assign(parties, 0);
    for (std::size_t k = 0; k < who.size(); ++k) j.lambda[who[k]] = weights[k];
  }
  for (std::uint32_t k = 1; k <= H; ++k) j.list.push_back(geo.BucketOnPath(req.leaf, k));
  for (std::uint32_t k = 1; k <= H; ++k) j.list.push_back(TreeGeometry::Sibling(j.list[k - 1]));
  sealed.reset();
  outcome.reset();
  // The root as the eviction reads it, kept until it commits: root writes
  // that follow change only the live root. A retried attempt (after a
  // restart too) reads the same snapshot.
  S3ORAM_RETURN_IF_ERROR(store->shadow().SnapshotRoot(req.eviction));
  FaultPoint("server.evict_prepare.after_snapshot");
  S3ORAM_RETURN_IF_ERROR(store->shadow().BeginShadow(req.eviction, req.attempt, j.list));
  j.req.eviction = req.eviction;
  j.req.attempt = req.attempt;
  j.req.leaf = req.leaf;
  j.req.matrices = req.matrices;
  j.req.participants = j.participants;
  {
    const std::lock_guard lock(aside_mu);
    progress = PrepareProgress{true,
                               req.eviction,
                               req.attempt,
                               1,
                               static_cast<std::uint32_t>(H),
                               wire::EvictPhase::kReading,
                               Clock::now()};
  }
  job = std::move(j);
  computing.store(true);
  return started;
}

void RequestHandler::Impl::RunPrepare() {
  if (!job) return;
  // Runs on a thread of its own (Server: one per PREPARE), beside the
  // serving thread that answers the next round's accesses.
  LowerThisThreadsPriority(config.eviction_nice);
  PrepareJob j = std::move(*job);
  job.reset();
  Status st = ComputePrepare(j);
  if (st.ok()) {
    sealed = std::make_pair(j.req.eviction, j.req.attempt);
  } else {
    spdlog::warn("eviction {} attempt {} failed: {}", j.req.eviction, j.req.attempt, st.ToString());
  }
  outcome = PrepareOutcome{j.req.eviction, j.req.attempt, std::move(st)};
  computing.store(false);
}

Result<wire::Body> RequestHandler::Impl::HandleResult(const wire::EvictResultRequest& req) {
  const wire::Body done{wire::EvictPrepareReply{req.eviction}};
  if (req.eviction < store->meta().applied_evictions) return done;  // committed here
  const auto same = std::make_pair(req.eviction, req.attempt);
  if (job && std::make_pair(job->req.eviction, job->req.attempt) == same) RunPrepare();
  if (outcome && std::make_pair(outcome->eviction, outcome->attempt) == same) {
    if (!outcome->status.ok()) return outcome->status;
    return done;
  }
  if (sealed && *sealed == same && store->shadow().SealedEviction() == req.eviction + 1)
    return done;
  return Status::FailedPrecondition(
      "eviction " + std::to_string(req.eviction) + " attempt " + std::to_string(req.attempt) +
      " is neither under way nor prepared on this server (restarted, or superseded): prepare "
      "it again");
}

// SMP round k of the PREPARE: this server's product (lambda_me applied)
// re-shared with degree t straight into its peers' frames, its own part
// kept; the peers' shares awaited, each checked to be as long as the
// product (an exchange may hand over anything a peer sent); their sum in
// `combined`, a degree-t share of the round's output.
Status RequestHandler::Impl::ReshareRound(const PrepareJob& j, std::uint32_t k,
                                          std::vector<Elem>& product, SmpFrames& smp,
                                          std::vector<Elem>& combined, PrepareTimes& times) {
  const wire::Header& h = j.header;
  const wire::EvictPrepareRequest& req = j.req;
  const std::uint32_t round = k - 1;
  const std::uint32_t me = config.index;
  SetProgress(k, wire::EvictPhase::kSmp);
  auto t0 = Clock::now();
  // SMP: re-share lambda_me * product with degree t straight into the
  // peers' frames; keep our own part.
  if (Lies("smp-consistent") && !product.empty()) product[0] = field::Add(product[0], 1);
  // The attempt's other participants, in ascending order.
  std::vector<std::uint32_t> from;
  for (std::uint32_t p : peer_indices) {
    if ((j.participants >> p) & 1u) from.push_back(p);
  }
  const SmpRound smp_round{req.eviction, req.attempt, round, j.participants & ~(1u << me)};
  const wire::SmpShares fields{req.eviction, req.attempt, round, me, {}};
  SplitIntoFrames(h, fields, product, j.lambda[me], threshold, parties, me, j.participants, smp);
  if (Lies("smp-inconsistent") && !from.empty() && !product.empty()) {
    // The first share to one peer, off by one: unpack its first 8, repack.
    std::vector<std::uint8_t>& frame = smp.frames[from[0]];
    const std::size_t k8 = std::min<std::size_t>(8, product.size());
    Elem first[8] = {};
    std::uint8_t* at = frame.data() + smp.shares_offset;
    std::string ignored;
    if (wire::UnpackElems({at, wire::PackedElemBytes(k8)}, {first, k8}, &ignored)) {
      first[0] = field::Add(first[0], 1);
      (void)wire::PackElems({first, k8}, at);
    }
  }
  const std::vector<Elem>& mine = smp.own;
  // With a delay on one server: its peers wait for its first round's
  // shares (FsEvictionCrashTest kills the client then).
  if (k == 1) FaultPoint("server.evict_prepare.first_send");
  S3ORAM_RETURN_IF_ERROR(peers->Send(smp.frames));
  // Mid-PREPARE: this server's round shares are out, its peers wait for
  // the next round that never comes.
  FaultPoint("server.evict_prepare.mid_rounds");
  times.smp += ElapsedMs(t0);
  SetProgress(k, wire::EvictPhase::kPeerWait);
  t0 = Clock::now();
  S3ORAM_ASSIGN_OR_RETURN(auto from_peers, peers->Await(smp_round));
  times.wait += ElapsedMs(t0);
  SetProgress(k, wire::EvictPhase::kShadow);
  t0 = Clock::now();
  // SmpCombine reads product.size() elements from every vector: check each
  // peer's length first (an exchange may hand over anything a peer sent).
  if (from_peers.size() != from.size()) {
    return Status::Protocol("SMP round " + std::to_string(round) + ": shares from " +
                            std::to_string(from_peers.size()) + " peers, expected " +
                            std::to_string(from.size()));
  }
  std::vector<const Elem*> received{mine.data()};
  for (std::size_t i = 0; i < from_peers.size(); ++i) {
    if (from_peers[i].size() != product.size()) {
      return Status::Protocol("peer " + std::to_string(from[i]) + " sent " +
                              std::to_string(from_peers[i].size()) + " SMP shares for round " +
                              std::to_string(round) + ", expected " +
                              std::to_string(product.size()));
    }
    received.push_back(from_peers[i].data());
  }
  combined.resize(product.size());
  shamir::SmpCombine(received, product.size(), combined.data());
  if (Lies("shadow") && !combined.empty()) combined[0] = field::Add(combined[0], 1);
  peers->Release(smp_round);
  times.smp += ElapsedMs(t0);
  return Status::Ok();
}

Status RequestHandler::Impl::ComputePrepare(PrepareJob& j) {
  // The exchange's round buffers are freed when this PREPARE ends, however
  // it ends.
  struct TrimPeers {
    PeerExchange* peers;
    ~TrimPeers() { peers->Trim(); }
  } trim_peers{peers};
  struct EndProgress {
    Impl* impl;
    ~EndProgress() {
      const std::lock_guard lock(impl->aside_mu);
      impl->progress.active = false;
    }
  } end_progress{this};
  // This thread writes the shadow and reads the tree, beside the serving
  // thread's accesses (store_shadow.h says which calls may).
  EvictionShadow& shadow = store->shadow();
  const LiveTree& tree = store->tree();
  const wire::EvictPrepareRequest& req = j.req;
  const std::vector<std::uint64_t>& list = j.list;
  const std::size_t Z = j.shape.bucket_size, m = j.shape.elems_per_slot, H = j.shape.height;
  const std::size_t step = 2 * Z * Z;
  const std::size_t bucket = Z * m;
  source_buffer.resize(bucket);
  target_buffer.resize(bucket);
  sibling_buffer.resize(bucket);
  // The root as it was when the PREPARE began (checked against its digests);
  // later sources are the previous step's output.
  S3ORAM_RETURN_IF_ERROR(shadow.ReadRootSnapshot(req.eviction, source_buffer));
  const Elem* source = source_buffer.data();
  std::vector<Elem> prev;  // u_{k-1} after step k-1
  // Every other bucket the eviction reads is checked against its digests
  // first too: a damaged slot must not be mixed into the new buckets (where
  // no digest could catch it any more).
  std::vector<Elem> product, combined;
  SmpFrames smp;  // this round's frames and own share, reused by the next

  PrepareTimes times;
  const auto t_start = Clock::now();
  for (std::uint32_t k = 1; k <= H; ++k) {
    SetProgress(k, wire::EvictPhase::kReading);
    // With a delay (name~ms): a first round that lasts, for the client's
    // pacing by progress (BackgroundEvictionTest).
    if (k == 1) FaultPoint("server.evict_prepare.first_round");
    auto t0 = Clock::now();
    // The source's digests are known: the root's stored ones (verified
    // above), or those of the previous step's output (put from `prev`).
    if (k < H) {
      // The sibling s_k is overwritten without being read (the eviction
      // that last passed through it emptied it). Its stored slots are
      // checked first all the same: damage there stops this eviction
      // (fail-stop) instead of vanishing under the copy, where neither
      // scrub nor the rebuild of this server would find it any more.
      S3ORAM_ASSIGN_OR_RETURN(const Elem* old_sibling,
                              tree.BucketForRead(list[H + k - 1], sibling_buffer));
      S3ORAM_RETURN_IF_ERROR(tree.VerifyBuckets(list[H + k - 1], {old_sibling, bucket}));
      S3ORAM_RETURN_IF_ERROR(shadow.PutShadowBucket(
          H + k - 1, {source, bucket},
          k == 1 ? shadow.RootSnapshotDigests() : shadow.ShadowBucketDigests(k - 2)));
    }
    times.shadow += ElapsedMs(t0);
    SetProgress(k, wire::EvictPhase::kKernels);
    // With a delay: an eviction that stays in its kernels while its client
    // is killed (FsEvictionCrashTest).
    if (k == 1) FaultPoint("server.evict_prepare.first_kernels");
    t0 = Clock::now();
    const bool leaf_round = (k == H);
    product.resize(leaf_round ? 2 * bucket : bucket);
    std::span<const Elem> mk(req.matrices.data() + (k - 1) * step, step);
    S3ORAM_ASSIGN_OR_RETURN(const Elem* target, tree.BucketForRead(list[k - 1], target_buffer));
    S3ORAM_RETURN_IF_ERROR(tree.VerifyBuckets(list[k - 1], {target, bucket}));
    ParallelColumns(*evict_pool, m, [&](kernels::ColumnRange r) {
      kernels::EvictProduct(source, target, Z, m, mk, product.data(), r);
    });
    if (leaf_round) {
      std::span<const Elem> ms(req.matrices.data() + H * step, step);
      S3ORAM_ASSIGN_OR_RETURN(const Elem* sib, tree.BucketForRead(list[2 * H - 1], sibling_buffer));
      S3ORAM_RETURN_IF_ERROR(tree.VerifyBuckets(list[2 * H - 1], {sib, bucket}));
      ParallelColumns(*evict_pool, m, [&](kernels::ColumnRange r) {
        kernels::EvictProduct(source, sib, Z, m, ms, product.data() + bucket, r);
      });
    }
    times.kernel += ElapsedMs(t0);
    S3ORAM_RETURN_IF_ERROR(ReshareRound(j, k, product, smp, combined, times));
    t0 = Clock::now();
    S3ORAM_RETURN_IF_ERROR(shadow.PutShadowBucket(k - 1, {combined.data(), bucket}));
    if (leaf_round) {
      S3ORAM_RETURN_IF_ERROR(shadow.PutShadowBucket(2 * H - 1, {combined.data() + bucket, bucket}));
    }
    times.shadow += ElapsedMs(t0);
    // u_k is the first bucket of `combined`; taking its buffer instead of a
    // copy (the next round's `combined` reuses prev's).
    prev.swap(combined);
    source = prev.data();
  }
  SetProgress(static_cast<std::uint32_t>(H), wire::EvictPhase::kSeal);
  auto t_seal = Clock::now();
  FaultPoint("server.evict_prepare.before_seal");
  S3ORAM_RETURN_IF_ERROR(shadow.SealShadow());
  FaultPoint("server.evict_prepare.after_seal");
  const double seal_ms = ElapsedMs(t_seal);
  const std::lock_guard lock(aside_mu);
  ++stats.prepares;
  stats.prepare_kernel_us += static_cast<std::uint64_t>(times.kernel * 1000);
  stats.prepare_smp_us += static_cast<std::uint64_t>(times.smp * 1000);
  stats.prepare_peer_wait_us += static_cast<std::uint64_t>(times.wait * 1000);
  stats.prepare_shadow_us += static_cast<std::uint64_t>(times.shadow * 1000);
  stats.prepare_seal_us += static_cast<std::uint64_t>(seal_ms * 1000);
  spdlog::debug(
      "eviction {} attempt {} prepared in {:.1f} ms: kernels {:.1f}, smp {:.1f}, "
      "peer wait {:.1f}, shadow {:.1f}, seal {:.1f}",
      req.eviction, req.attempt, ElapsedMs(t_start), times.kernel, times.smp, times.wait,
      times.shadow, seal_ms);
  return Status::Ok();
}

Result<wire::Body> RequestHandler::Impl::HandleCommit(const wire::Header& h,
                                                      const wire::EvictCommitRequest& req) {
  const auto t0 = Clock::now();
  FaultPoint("server.evict_commit.before");
  S3ORAM_RETURN_IF_ERROR(store->shadow().Commit(req.eviction, h.seq, h.epoch));
  const auto took = Clock::now() - t0;
  {
    const std::lock_guard lock(aside_mu);  // STATS is answered on another thread
    ++stats.commits;
    stats.commit_us += Micros(took);
  }
  spdlog::debug("commit seq {}: eviction {} applied in {:.1f} ms", h.seq, req.eviction,
                std::chrono::duration<double, std::milli>(took).count());
  sealed.reset();
  return wire::Body{wire::EvictCommitReply{store->meta().applied_evictions}};
}

Result<wire::Body> RequestHandler::Impl::HandleEvictCheck(const wire::EvictCheckRequest& req) {
  const digest::DigestKey key(req.seed, static_cast<std::size_t>(store->shadow().slot_elems()));
  std::vector<Elem> combination;
  S3ORAM_ASSIGN_OR_RETURN(
      auto digests, store->shadow().ShadowDigests(req.eviction, req.attempt, key, req.seed,
                                                  wire::kEvictCheckCombinations, &combination));
  return wire::Body{wire::EvictCheckReply{req.eviction, Flatten(digests), std::move(combination)}};
}

Result<wire::Body> RequestHandler::Impl::HandleMacOpen(const wire::MacOpenRequest& req) {
  const LiveTree& tree = store->tree();
  const EvictionShadow& shadow = store->shadow();
  const ServerMeta& meta = store->meta();
  const TreeGeometry geo{meta.shape.height, meta.shape.bucket_size};
  const LeafId leaf = geo.EvictionLeaf(req.eviction);
  std::vector<BucketId> buckets;
  for (std::uint32_t k = 0; k <= geo.height; ++k) buckets.push_back(geo.BucketOnPath(leaf, k));
  buckets.push_back(TreeGeometry::Sibling(leaf));
  const std::size_t Z = geo.bucket_size, m = static_cast<std::size_t>(tree.slot_elems());
  const std::size_t rows = wire::kEvictCheckCombinations;
  const std::vector<Elem> weights = digest::CombinationWeights(req.seed, rows, buckets.size() * Z);
  wire::MacOpenReply reply{req.eviction, std::vector<Elem>(rows * m, 0)};
  std::vector<Elem> bucket(tree.bucket_elems());
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    // The eviction read the root as snapshotted at its PREPARE (the live
    // one has the next round's writes by now).
    if (buckets[i] == 1 && shadow.RootSnapshotEviction() == req.eviction + 1) {
      S3ORAM_RETURN_IF_ERROR(shadow.ReadRootSnapshot(req.eviction, bucket));
    } else {
      S3ORAM_RETURN_IF_ERROR(tree.ReadBucket(buckets[i], bucket));
      S3ORAM_RETURN_IF_ERROR(tree.VerifyBuckets(buckets[i], bucket));
    }
    for (std::size_t r = 0; r < rows; ++r) {
      digest::AddCombination(
          bucket, m, std::span<const Elem>(weights).subspan(r * buckets.size() * Z + i * Z, Z),
          std::span<Elem>(reply.combination).subspan(r * m, m));
    }
  }
  return wire::Body{std::move(reply)};
}

}  // namespace s3oram::serverd
