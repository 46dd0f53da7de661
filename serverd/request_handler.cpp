// RequestHandler: the per-request logic of s3oram-serverd (see request_handler.h).
// Moved out of Server unchanged except that SMP rounds go through PeerExchange
// and the handler itself checks the length of every peer's shares.
#include "serverd/request_handler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <functional>
#include <latch>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "oramcore/field.h"
#include "oramcore/geometry.h"
#include "oramcore/kernels.h"
#include "oramcore/random.h"
#include "oramcore/shamir.h"
#include "oramcore/wire.h"
#include "serverd/backup_store.h"

namespace s3oram::serverd {

using field::Elem;
using Clock = std::chrono::steady_clock;

namespace {

std::string HexId(const wire::FsId& id) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (auto b : id) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

}  // namespace

struct RequestHandler::Impl {
  ServerConfig config;
  PeerExchange* peers = nullptr;
  std::size_t parties = 0;
  std::size_t threshold = 0;
  std::vector<std::uint32_t> peer_indices;  // ascending, the order PeerExchange::Await uses
  std::vector<Elem> lambda;                 // Lagrange weights at 0 over all parties
  std::unique_ptr<ShareStore> store;
  // The client-state backups beside the share file; open whenever store is.
  std::unique_ptr<BackupStore> backups;
  std::unique_ptr<boost::asio::thread_pool> pool;
  std::size_t threads = 1;
  // (eviction, attempt) whose shadow this process sealed; lets a duplicate
  // PREPARE (client resend) be answered without a new SMP run.
  std::optional<std::pair<std::uint64_t, std::uint32_t>> sealed;
  std::uint64_t max_epoch = 0;  // highest client epoch accepted by this process
  // Reused buffers for bucket reads (a path; an eviction's inputs).
  std::vector<Elem> path_buffer, source_buffer, target_buffer, sibling_buffer;

  ~Impl() {
    if (pool) pool->join();
  }

  // Runs fn over [0, m) split in column ranges across the pool.
  void ParallelColumns(std::size_t m, const std::function<void(kernels::ColumnRange)>& fn) {
    const std::size_t parts = std::min<std::size_t>(threads, (m + 63) / 64);
    if (parts <= 1) {
      fn({0, m});
      return;
    }
    std::size_t chunk = (m + parts - 1) / parts;
    chunk = (chunk + 15) / 16 * 16;  // whole SIMD groups per thread
    std::size_t tasks = (m + chunk - 1) / chunk;
    std::latch done(static_cast<std::ptrdiff_t>(tasks));
    for (std::size_t t = 0; t < tasks; ++t) {
      kernels::ColumnRange r{t * chunk, std::min(m, (t + 1) * chunk)};
      boost::asio::post(*pool, [&fn, r, &done] {
        fn(r);
        done.count_down();
      });
    }
    done.wait();
  }

  Status CheckRequest(const wire::Header& h, bool needs_store) {
    if (!needs_store) return Status::Ok();
    if (!store) return Status::FailedPrecondition("server holds no filesystem; run s3oram init");
    if (h.fs_id != store->meta().fs_id) {
      return Status::FailedPrecondition("request for filesystem " + HexId(h.fs_id) +
                                        " but this server holds " + HexId(store->meta().fs_id));
    }
    // Fencing: once a request of epoch e is accepted, nothing older is. A
    // client starts a new epoch at every open, so requests a dead client left
    // queued here cannot land after its successor's writes. Mutations persist
    // the epoch; max_epoch also covers the read-only requests in between.
    max_epoch = std::max(max_epoch, store->meta().epoch);
    if (h.epoch < max_epoch) {
      return Status::FailedPrecondition("fenced: request epoch " + std::to_string(h.epoch) +
                                        " is older than epoch " + std::to_string(max_epoch));
    }
    max_epoch = h.epoch;
    return Status::Ok();
  }

  wire::StatusReply MakeStatus() const {
    wire::StatusReply r;
    r.server_index = config.index;
    if (store) {
      const ServerMeta& m = store->meta();
      r.initialized = true;
      r.shape = m.shape;
      r.epoch = m.epoch;
      r.applied_seq = m.applied_seq;
      r.applied_evictions = m.applied_evictions;
      r.prepared_eviction = store->SealedEviction();
      r.share_file_bytes = store->file_bytes();
      r.allocated_bytes = store->allocated_bytes();
      r.peer_bytes_sent = peers->bytes_sent();
    }
    return r;
  }

  Result<wire::Body> HandleInit(const wire::Header& h, const wire::InitRequest& req) {
    if (req.server_index != config.index) {
      return Status::InvalidArgument("this is server " + std::to_string(config.index) +
                                     ", not server " + std::to_string(req.server_index));
    }
    const auto& s = req.shape;
    if (s.height < 1 || s.height > 40 || s.bucket_size < 1 || s.bucket_size > (1u << 16) ||
        s.elems_per_slot < 1 || s.elems_per_slot > (1u << 24)) {
      return Status::InvalidArgument("store shape out of range");
    }
    // A shape whose requests cannot fit the wire's vector limit is one no
    // client can use (ValidateParams refuses it on the client side), and
    // serving it would size buffers from it: up to (H+1) Z m elements per
    // RETRIEVE, 2^40 for Z = 2^16, m = 2^24. The limits are the client's:
    // the eviction matrices (H+1) 2 Z^2, the leaf SMP round 2 Z m, the
    // select vector (H+1) Z (u64 arithmetic: every factor is below 2^25).
    const std::uint64_t levels = std::uint64_t{s.height} + 1, Z = s.bucket_size;
    if (levels * 2 * Z * Z > wire::kMaxElems || 2 * Z * s.elems_per_slot > wire::kMaxElems ||
        levels * Z > wire::kMaxElems) {
      return Status::InvalidArgument(
          "store shape H=" + std::to_string(s.height) + " Z=" + std::to_string(s.bucket_size) +
          " m=" + std::to_string(s.elems_per_slot) +
          " needs messages beyond the wire limit of " + std::to_string(wire::kMaxElems) +
          " elements");
    }
    if (store) {
      const ServerMeta& m = store->meta();
      if (m.fs_id == h.fs_id && m.shape == s && m.server_index == req.server_index) {
        return wire::Body{wire::InitReply{}};  // same request again: already done
      }
      if (!req.overwrite) {
        return Status::AlreadyExists("server " + std::to_string(config.index) +
                                     " already holds filesystem " + HexId(m.fs_id) +
                                     "; initialise with overwrite to replace it");
      }
      store.reset();
    }
    ServerMeta meta;
    meta.fs_id = h.fs_id;
    meta.server_index = req.server_index;
    meta.shape = s;
    meta.epoch = h.epoch;
    max_epoch = h.epoch;
    backups.reset();
    S3ORAM_ASSIGN_OR_RETURN(store, ShareStore::Create(config.data_dir, meta, req.overwrite, config.sync));
    // Backups of whatever filesystem this server held before are useless
    // (and could never be told apart from the new one's by the server).
    S3ORAM_ASSIGN_OR_RETURN(backups, BackupStore::Open(config.data_dir, config.sync));
    S3ORAM_RETURN_IF_ERROR(backups->RemoveAll());
    sealed.reset();
    peers->Reset();
    spdlog::info("initialised filesystem {} (H={} Z={} m={}, {} bytes logical)", HexId(h.fs_id),
                 s.height, s.bucket_size, s.elems_per_slot, store->file_bytes());
    return wire::Body{wire::InitReply{}};
  }

  Result<wire::Body> HandleRetrieve(const wire::RetrieveRequest& req) {
    const auto& shape = store->meta().shape;
    TreeGeometry geo{shape.height, shape.bucket_size};
    if (!geo.is_leaf(req.leaf)) return Status::InvalidArgument("retrieve: leaf out of range");
    if (req.select.size() != geo.path_slots()) {
      return Status::InvalidArgument("retrieve: select vector has " +
                                     std::to_string(req.select.size()) + " entries, expected " +
                                     std::to_string(geo.path_slots()));
    }
    const auto t0 = Clock::now();
    const std::size_t bucket = store->bucket_elems();
    path_buffer.resize(bucket * geo.levels());
    std::vector<const Elem*> buckets;
    for (std::uint32_t l = 0; l <= geo.height; ++l) {
      std::span<Elem> scratch(path_buffer.data() + l * bucket, bucket);
      S3ORAM_ASSIGN_OR_RETURN(const Elem* view,
                              store->BucketForRead(geo.BucketOnPath(req.leaf, l), scratch));
      buckets.push_back(view);
    }
    const std::size_t m = shape.elems_per_slot;
    wire::RetrieveReply reply;
    reply.answer.resize(m);
    ParallelColumns(m, [&](kernels::ColumnRange r) {
      kernels::PathInnerProduct(buckets, shape.bucket_size, m, req.select, reply.answer.data(), r);
    });
    spdlog::trace("retrieve leaf {}: {:.2f} ms", req.leaf,
                  std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    return wire::Body{std::move(reply)};
  }

  Result<wire::Body> HandleWriteRoot(const wire::Header& h, const wire::WriteRootRequest& req) {
    const auto& shape = store->meta().shape;
    if (req.slot >= shape.bucket_size) return Status::InvalidArgument("write_root: slot out of range");
    if (req.share.size() != shape.elems_per_slot) {
      return Status::InvalidArgument("write_root: share has " + std::to_string(req.share.size()) +
                                     " elements, expected " +
                                     std::to_string(shape.elems_per_slot));
    }
    S3ORAM_RETURN_IF_ERROR(store->WriteSlot(1, req.slot, req.share, h.seq, h.epoch));
    spdlog::debug("write_root seq {} slot {}", h.seq, req.slot);
    return wire::Body{wire::WriteRootReply{}};
  }

  Result<wire::Body> HandlePrepare(const wire::Header& h, const wire::EvictPrepareRequest& req) {
    const ServerMeta& meta = store->meta();
    spdlog::debug("prepare seq {} eviction {} attempt {} (applied {})", h.seq, req.eviction,
                  req.attempt, meta.applied_evictions);
    if (req.eviction < meta.applied_evictions) {
      return wire::Body{wire::EvictPrepareReply{req.eviction}};  // already committed here
    }
    if (req.eviction > meta.applied_evictions) {
      return Status::FailedPrecondition("cannot prepare eviction " + std::to_string(req.eviction) +
                                        ": this server has applied " +
                                        std::to_string(meta.applied_evictions));
    }
    if (sealed && *sealed == std::make_pair(req.eviction, req.attempt) &&
        store->SealedEviction() == req.eviction + 1) {
      return wire::Body{wire::EvictPrepareReply{req.eviction}};  // duplicate of a finished request
    }
    const auto shape = meta.shape;
    const TreeGeometry geo{shape.height, shape.bucket_size};
    const std::size_t Z = shape.bucket_size, m = shape.elems_per_slot, H = shape.height;
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
    std::vector<std::uint64_t> list;
    for (std::uint32_t k = 1; k <= H; ++k) list.push_back(geo.BucketOnPath(req.leaf, k));
    for (std::uint32_t k = 1; k <= H; ++k) list.push_back(TreeGeometry::Sibling(list[k - 1]));
    sealed.reset();
    S3ORAM_RETURN_IF_ERROR(store->BeginShadow(req.eviction, req.attempt, list));

    std::vector<Elem> prev;                // u_{k-1} after step k-1
    const std::size_t bucket = Z * m;
    source_buffer.resize(bucket);
    target_buffer.resize(bucket);
    sibling_buffer.resize(bucket);
    // The root is not changed by an eviction; later sources are the previous step's output.
    S3ORAM_ASSIGN_OR_RETURN(const Elem* source, store->BucketForRead(1, source_buffer));
    std::vector<Elem> product, coeffs, combined;
    std::vector<std::vector<Elem>> outs(parties);
    const std::uint32_t me = config.index;
    // Phase timings for the debug log: kernels, SMP split/combine, waiting for
    // peers, shadow writes.
    double t_kernel = 0, t_smp = 0, t_wait = 0, t_shadow = 0;
    auto since = [](Clock::time_point t0) {
      return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    const auto t_start = Clock::now();
    for (std::uint32_t k = 1; k <= H; ++k) {
      const std::uint32_t round = k - 1;
      auto t0 = Clock::now();
      if (k < H) S3ORAM_RETURN_IF_ERROR(store->PutShadowBucket(H + k - 1, {source, bucket}));
      t_shadow += since(t0);
      t0 = Clock::now();
      const bool leaf_round = (k == H);
      product.resize(leaf_round ? 2 * bucket : bucket);
      std::span<const Elem> mk(req.matrices.data() + (k - 1) * step, step);
      S3ORAM_ASSIGN_OR_RETURN(const Elem* target, store->BucketForRead(list[k - 1], target_buffer));
      ParallelColumns(m, [&](kernels::ColumnRange r) {
        kernels::EvictProduct(source, target, Z, m, mk, product.data(), r);
      });
      if (leaf_round) {
        std::span<const Elem> ms(req.matrices.data() + H * step, step);
        S3ORAM_ASSIGN_OR_RETURN(const Elem* sib, store->BucketForRead(list[2 * H - 1], sibling_buffer));
        ParallelColumns(m, [&](kernels::ColumnRange r) {
          kernels::EvictProduct(source, sib, Z, m, ms, product.data() + bucket, r);
        });
      }
      t_kernel += since(t0);
      t0 = Clock::now();
      // SMP: re-share lambda_me * product with degree t; keep our own part.
      coeffs.resize(product.size() * threshold);
      random::Elems(coeffs);
      std::vector<Elem*> ptrs;
      for (auto& o : outs) {
        o.resize(product.size());
        ptrs.push_back(o.data());
      }
      shamir::SmpSplit(product, lambda[me], threshold, coeffs, ptrs);
      std::vector<Elem> mine = std::move(outs[me]);
      const SmpRound smp_round{req.eviction, req.attempt, round};
      S3ORAM_RETURN_IF_ERROR(peers->Send(h, smp_round, outs));
      t_smp += since(t0);
      t0 = Clock::now();
      S3ORAM_ASSIGN_OR_RETURN(auto from_peers, peers->Await(smp_round));
      t_wait += since(t0);
      t0 = Clock::now();
      // SmpCombine reads product.size() elements from every vector: check each
      // peer's length first (an exchange may hand over anything a peer sent).
      if (from_peers.size() != peer_indices.size()) {
        return Status::Protocol("SMP round " + std::to_string(round) + ": shares from " +
                                std::to_string(from_peers.size()) + " peers, expected " +
                                std::to_string(peer_indices.size()));
      }
      std::vector<const Elem*> received{mine.data()};
      for (std::size_t i = 0; i < from_peers.size(); ++i) {
        if (from_peers[i].size() != product.size()) {
          return Status::Protocol("peer " + std::to_string(peer_indices[i]) + " sent " +
                                  std::to_string(from_peers[i].size()) +
                                  " SMP shares for round " + std::to_string(round) +
                                  ", expected " + std::to_string(product.size()));
        }
        received.push_back(from_peers[i].data());
      }
      combined.resize(product.size());
      shamir::SmpCombine(received, product.size(), combined.data());
      peers->Release(smp_round);
      t_smp += since(t0);
      t0 = Clock::now();
      S3ORAM_RETURN_IF_ERROR(store->PutShadowBucket(k - 1, {combined.data(), bucket}));
      if (leaf_round) {
        S3ORAM_RETURN_IF_ERROR(store->PutShadowBucket(2 * H - 1, {combined.data() + bucket, bucket}));
      }
      t_shadow += since(t0);
      prev.assign(combined.begin(), combined.begin() + static_cast<std::ptrdiff_t>(bucket));
      source = prev.data();
    }
    auto t_seal = Clock::now();
    S3ORAM_RETURN_IF_ERROR(store->SealShadow());
    spdlog::debug("eviction {} attempt {} prepared in {:.1f} ms: kernels {:.1f}, smp {:.1f}, "
                  "peer wait {:.1f}, shadow {:.1f}, seal {:.1f}",
                  req.eviction, req.attempt, since(t_start), t_kernel, t_smp, t_wait, t_shadow,
                  since(t_seal));
    sealed = std::make_pair(req.eviction, req.attempt);
    return wire::Body{wire::EvictPrepareReply{req.eviction}};
  }

  Result<wire::Body> HandleCommit(const wire::Header& h, const wire::EvictCommitRequest& req) {
    const auto t0 = Clock::now();
    S3ORAM_RETURN_IF_ERROR(store->Commit(req.eviction, h.seq, h.epoch));
    spdlog::debug("commit seq {}: eviction {} applied in {:.1f} ms", h.seq, req.eviction,
                  std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    sealed.reset();
    return wire::Body{wire::EvictCommitReply{store->meta().applied_evictions}};
  }

  // Backup reads check the filesystem id but not the epoch: they change
  // nothing, and a client restoring on a fresh machine has no epoch yet.
  Status CheckBackupRead(const wire::Header& h) const {
    if (!store || !backups) {
      return Status::FailedPrecondition("server holds no filesystem; run s3oram init");
    }
    if (h.fs_id != store->meta().fs_id) {
      return Status::FailedPrecondition("backup request for filesystem " + HexId(h.fs_id) +
                                        " but this server holds " + HexId(store->meta().fs_id));
    }
    return Status::Ok();
  }

  Result<wire::Body> HandleBackupPut(const wire::BackupPutRequest& req) {
    S3ORAM_ASSIGN_OR_RETURN(std::uint64_t received,
                            backups->Put(req.generation, req.offset, req.total, req.last,
                                         req.shares));
    return wire::Body{wire::BackupPutReply{req.generation, received}};
  }

  Result<wire::Body> HandleBackupGet(const wire::BackupGetRequest& req) {
    wire::BackupGetReply reply;
    reply.generation = req.generation;
    S3ORAM_ASSIGN_OR_RETURN(reply.shares,
                            backups->Get(req.generation, req.offset, req.count, &reply.total));
    return wire::Body{std::move(reply)};
  }

  Result<wire::Body> Dispatch(const wire::Message& msg) {
    const wire::Header& h = msg.header;
    return std::visit(
        [&](const auto& body) -> Result<wire::Body> {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, wire::StatusRequest>) {
            // STATUS is never refused, but a newer epoch seen here already
            // fences the older client: a successor's recovery begins with
            // STATUS, and a dead client's queued COMMIT must not run after it.
            if (store && h.fs_id == store->meta().fs_id) max_epoch = std::max(max_epoch, h.epoch);
            return wire::Body{MakeStatus()};
          } else if constexpr (std::is_same_v<T, wire::InitRequest>) {
            return HandleInit(h, body);
          } else if constexpr (std::is_same_v<T, wire::RetrieveRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
            return HandleRetrieve(body);
          } else if constexpr (std::is_same_v<T, wire::WriteRootRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
            return HandleWriteRoot(h, body);
          } else if constexpr (std::is_same_v<T, wire::EvictPrepareRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
            return HandlePrepare(h, body);
          } else if constexpr (std::is_same_v<T, wire::EvictCommitRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
            return HandleCommit(h, body);
          } else if constexpr (std::is_same_v<T, wire::BackupPutRequest>) {
            // A mutation: fenced by the epoch like the others, so a client
            // that was superseded cannot replace the backup of its successor.
            S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
            if (!backups) return Status::FailedPrecondition("server holds no filesystem");
            return HandleBackupPut(body);
          } else if constexpr (std::is_same_v<T, wire::BackupListRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckBackupRead(h));
            return wire::Body{wire::BackupListReply{backups->List()}};
          } else if constexpr (std::is_same_v<T, wire::BackupGetRequest>) {
            S3ORAM_RETURN_IF_ERROR(CheckBackupRead(h));
            return HandleBackupGet(body);
          } else {
            return Status::Protocol(std::string("a server does not accept ") +
                                    wire::MessageTypeName(wire::TypeOf(wire::Body{body})));
          }
        },
        msg.body);
  }

  // Handles one client frame and returns the reply frame.
  std::vector<std::uint8_t> Handle(std::span<const std::uint8_t> frame) {
    auto decoded = wire::Decode(frame);
    wire::Header reply_header;
    if (!decoded.ok()) {
      // Echo the seq from its fixed offset when the frame is long enough, so
      // the client sees this error instead of a timeout.
      constexpr std::size_t kSeqOffset = 4 + 2 + 2 + 16 + 8;
      if (frame.size() >= wire::kHeaderBytes) {
        for (int b = 0; b < 8; ++b) reply_header.seq |= std::uint64_t{frame[kSeqOffset + b]} << (8 * b);
      }
      spdlog::warn("rejecting malformed request: {}", decoded.status().ToString());
      return wire::Encode(reply_header, wire::ErrorFromStatus(decoded.status()));
    }
    reply_header = decoded->header;
    if (store) reply_header.fs_id = store->meta().fs_id;
    auto result = Dispatch(*decoded);
    if (!result.ok()) {
      spdlog::warn("{} (seq {}) failed: {}", wire::MessageTypeName(decoded->header.type),
                   decoded->header.seq, result.status().ToString());
      return wire::Encode(reply_header, wire::ErrorFromStatus(result.status()));
    }
    if (store) reply_header.fs_id = store->meta().fs_id;
    return wire::Encode(reply_header, result.value());
  }
};

Result<std::unique_ptr<RequestHandler>> RequestHandler::Create(const ServerConfig& config,
                                                               PeerExchange& peers) {
  random::EnsureInitialized();
  auto s = std::make_unique<Impl>();
  s->config = config;
  s->peers = &peers;
  s->parties = s->config.peers.size() + 1;
  s->threshold = (s->parties - 1) / 2;
  if (s->threshold < 1) return Status::InvalidArgument("a server needs at least two peers");
  std::vector<Elem> xs;
  for (std::size_t i = 0; i < s->parties; ++i) xs.push_back(shamir::PartyX(i));
  S3ORAM_ASSIGN_OR_RETURN(s->lambda, shamir::LagrangeAtZero(xs));
  if (s->config.index >= s->parties) {
    return Status::InvalidArgument("server index " + std::to_string(s->config.index) +
                                   " out of range for " + std::to_string(s->parties) + " parties");
  }
  for (const auto& p : s->config.peers) {
    if (p.index >= s->parties) {
      return Status::InvalidArgument("peer index " + std::to_string(p.index) + " out of range");
    }
    s->peer_indices.push_back(p.index);
  }
  // The SMP rounds address parties by index: each must be one distinct peer.
  // (ParseServerConfig guarantees this for configs read from a file.)
  std::sort(s->peer_indices.begin(), s->peer_indices.end());
  if (std::adjacent_find(s->peer_indices.begin(), s->peer_indices.end()) !=
          s->peer_indices.end() ||
      std::binary_search(s->peer_indices.begin(), s->peer_indices.end(), s->config.index)) {
    return Status::InvalidArgument("peer indices must be distinct and differ from server index " +
                                   std::to_string(s->config.index));
  }
  s->threads =
      s->config.threads ? s->config.threads : std::max(1u, std::thread::hardware_concurrency());
  s->pool = std::make_unique<boost::asio::thread_pool>(s->threads);

  auto opened = ShareStore::Open(s->config.data_dir, s->config.sync);
  if (opened.ok()) {
    s->store = std::move(opened).value();
    S3ORAM_ASSIGN_OR_RETURN(s->backups, BackupStore::Open(s->config.data_dir, s->config.sync));
    const ServerMeta& m = s->store->meta();
    if (m.server_index != s->config.index) {
      return Status::FailedPrecondition("data dir " + s->config.data_dir +
                                        " holds the share of server " +
                                        std::to_string(m.server_index) + ", but this is server " +
                                        std::to_string(s->config.index));
    }
    spdlog::info("opened filesystem {} (H={} Z={} m={}): {} evictions applied, seq {}",
                 HexId(m.fs_id), m.shape.height, m.shape.bucket_size, m.shape.elems_per_slot,
                 m.applied_evictions, m.applied_seq);
  } else if (opened.status().code() != Status::Code::kNotFound) {
    return opened.status().WithContext("opening " + s->config.data_dir);
  } else {
    spdlog::info("no filesystem in {} yet; waiting for init", s->config.data_dir);
  }
  std::unique_ptr<RequestHandler> h(new RequestHandler());
  h->impl_ = std::move(s);
  return h;
}

RequestHandler::~RequestHandler() = default;

std::vector<std::uint8_t> RequestHandler::Handle(std::span<const std::uint8_t> frame) {
  return impl_->Handle(frame);
}

const ShareStore* RequestHandler::store() const { return impl_->store.get(); }

std::size_t RequestHandler::threads() const { return impl_->threads; }

}  // namespace s3oram::serverd
