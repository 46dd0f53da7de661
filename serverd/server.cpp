#include "serverd/server.h"

#include <spdlog/spdlog.h>
#include <zmq.h>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <latch>
#include <map>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "oramcore/field.h"
#include "oramcore/geometry.h"
#include "oramcore/kernels.h"
#include "oramcore/random.h"
#include "oramcore/shamir.h"
#include "oramcore/wire.h"
#include "serverd/share_store.h"

namespace s3oram::serverd {

using field::Elem;
using Clock = std::chrono::steady_clock;

namespace {

std::string ZmqError(const std::string& what) { return what + ": " + zmq_strerror(zmq_errno()); }

std::string HexId(const wire::FsId& id) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (auto b : id) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

// Key of one SMP message: (eviction, attempt, round, sender).
using SmpKey = std::tuple<std::uint64_t, std::uint32_t, std::uint32_t, std::uint32_t>;

}  // namespace

struct Server::Impl {
  ServerConfig config;
  std::size_t parties = 0;
  std::size_t threshold = 0;
  std::vector<Elem> lambda;  // Lagrange weights at 0 over all parties
  void* context = nullptr;
  void* router = nullptr;
  void* pull = nullptr;
  std::map<std::uint32_t, void*> pushes;  // peer index -> PUSH socket
  std::unique_ptr<ShareStore> store;
  std::unique_ptr<boost::asio::thread_pool> pool;
  std::size_t threads = 1;
  // SMP messages that arrived before this server was ready for them.
  std::map<SmpKey, std::vector<Elem>> smp_buffer;
  // (eviction, attempt) whose shadow this process sealed; lets a duplicate
  // PREPARE (client resend) be answered without a new SMP run.
  std::optional<std::pair<std::uint64_t, std::uint32_t>> sealed;
  std::uint64_t peer_bytes_sent = 0;
  std::uint64_t max_epoch = 0;  // highest client epoch accepted by this process
  // Reused buffers for bucket reads (a path; an eviction's inputs).
  std::vector<Elem> path_buffer, source_buffer, target_buffer, sibling_buffer;

  ~Impl() {
    for (auto& [i, s] : pushes) zmq_close(s);
    if (pull) zmq_close(pull);
    if (router) zmq_close(router);
    if (context) zmq_ctx_term(context);
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
      r.peer_bytes_sent = peer_bytes_sent;
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
    S3ORAM_ASSIGN_OR_RETURN(store, ShareStore::Create(config.data_dir, meta, req.overwrite, config.sync));
    sealed.reset();
    smp_buffer.clear();
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

  // Sends this server's round shares to every peer.
  Status SendSmp(const wire::Header& h, std::uint64_t eviction, std::uint32_t attempt,
                 std::uint32_t round, std::vector<std::vector<Elem>>& outs) {
    for (auto& [peer, socket] : pushes) {
      wire::SmpShares msg{eviction, attempt, round, config.index, std::move(outs[peer])};
      auto frame = wire::Encode(h, msg);
      if (zmq_send(socket, frame.data(), frame.size(), 0) < 0) {
        return Status::IoError(ZmqError("sending SMP shares to peer " + std::to_string(peer)));
      }
      peer_bytes_sent += frame.size();
    }
    return Status::Ok();
  }

  // Reads peer messages into smp_buffer until every peer's shares for
  // (eviction, attempt, round) are there or the peer timeout passes.
  Status AwaitSmp(std::uint64_t eviction, std::uint32_t attempt, std::uint32_t round,
                  std::size_t expected_elems) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(config.peer_timeout_ms);
    auto have_all = [&] {
      for (auto& [peer, s] : pushes) {
        if (!smp_buffer.count(SmpKey{eviction, attempt, round, peer})) return false;
      }
      return true;
    };
    while (!have_all()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        std::string missing;
        for (auto& [peer, s] : pushes) {
          if (!smp_buffer.count(SmpKey{eviction, attempt, round, peer})) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
          }
        }
        return Status::Unavailable("eviction " + std::to_string(eviction) + " attempt " +
                                   std::to_string(attempt) + " round " + std::to_string(round) +
                                   ": no SMP shares from peer(s) " + missing + " within " +
                                   std::to_string(config.peer_timeout_ms) + " ms");
      }
      zmq_pollitem_t item{pull, 0, ZMQ_POLLIN, 0};
      int rc = zmq_poll(&item, 1, std::min<long>(left.count(), 200));
      if (rc < 0 && zmq_errno() != EINTR) return Status::IoError(ZmqError("zmq_poll"));
      if (rc > 0) {
        S3ORAM_RETURN_IF_ERROR(DrainPeers());
        // A peer already on a newer attempt of this eviction means the client
        // gave up on ours: stop now rather than wait for the timeout.
        for (const auto& [key, v] : smp_buffer) {
          if (std::get<0>(key) == eviction && std::get<1>(key) > attempt) {
            return Status::Unavailable("eviction " + std::to_string(eviction) + " attempt " +
                                       std::to_string(attempt) + " superseded by attempt " +
                                       std::to_string(std::get<1>(key)));
          }
        }
      }
    }
    for (auto& [peer, s] : pushes) {
      if (smp_buffer[SmpKey{eviction, attempt, round, peer}].size() != expected_elems) {
        return Status::Protocol("peer " + std::to_string(peer) + " sent " +
                                std::to_string(smp_buffer[SmpKey{eviction, attempt, round, peer}].size()) +
                                " SMP shares for round " + std::to_string(round) + ", expected " +
                                std::to_string(expected_elems));
      }
    }
    return Status::Ok();
  }

  // Moves every waiting peer message into smp_buffer (validated, bounded).
  Status DrainPeers() {
    for (;;) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, pull, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        return Status::Ok();
      }
      auto decoded = wire::Decode(std::span<const std::uint8_t>(
          static_cast<const std::uint8_t*>(zmq_msg_data(&msg)), zmq_msg_size(&msg)));
      zmq_msg_close(&msg);
      if (!decoded.ok()) {
        spdlog::warn("dropping malformed peer message: {}", decoded.status().ToString());
        continue;
      }
      auto* smp = std::get_if<wire::SmpShares>(&decoded->body);
      if (!smp || !store || decoded->header.fs_id != store->meta().fs_id ||
          !pushes.count(smp->from_index) ||
          smp->eviction < store->meta().applied_evictions) {
        continue;  // not for us, or for an eviction already committed
      }
      // Keep only the newest attempt per eviction and a bounded number of entries.
      for (auto it = smp_buffer.begin(); it != smp_buffer.end();) {
        bool stale = std::get<0>(it->first) < store->meta().applied_evictions ||
                     (std::get<0>(it->first) == smp->eviction && std::get<1>(it->first) < smp->attempt);
        it = stale ? smp_buffer.erase(it) : std::next(it);
      }
      const std::size_t cap = 4 * (store->meta().shape.height + 1) * pushes.size();
      if (smp_buffer.size() >= cap) smp_buffer.erase(smp_buffer.begin());
      smp_buffer[SmpKey{smp->eviction, smp->attempt, smp->round, smp->from_index}] =
          std::move(smp->shares);
    }
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
      S3ORAM_RETURN_IF_ERROR(SendSmp(h, req.eviction, req.attempt, round, outs));
      t_smp += since(t0);
      t0 = Clock::now();
      S3ORAM_RETURN_IF_ERROR(AwaitSmp(req.eviction, req.attempt, round, product.size()));
      t_wait += since(t0);
      t0 = Clock::now();
      std::vector<const Elem*> received{mine.data()};
      for (auto& [peer, s] : pushes) {
        received.push_back(smp_buffer[SmpKey{req.eviction, req.attempt, round, peer}].data());
      }
      combined.resize(product.size());
      shamir::SmpCombine(received, product.size(), combined.data());
      for (auto& [peer, s] : pushes) smp_buffer.erase(SmpKey{req.eviction, req.attempt, round, peer});
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

Server::Server(ServerConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
}
Server::~Server() = default;

Status Server::Start() {
  Impl& s = *impl_;
  random::EnsureInitialized();
  s.parties = s.config.peers.size() + 1;
  s.threshold = (s.parties - 1) / 2;
  if (s.threshold < 1) return Status::InvalidArgument("a server needs at least two peers");
  std::vector<Elem> xs;
  for (std::size_t i = 0; i < s.parties; ++i) xs.push_back(shamir::PartyX(i));
  S3ORAM_ASSIGN_OR_RETURN(s.lambda, shamir::LagrangeAtZero(xs));
  if (s.config.index >= s.parties) {
    return Status::InvalidArgument("server index " + std::to_string(s.config.index) +
                                   " out of range for " + std::to_string(s.parties) + " parties");
  }
  for (const auto& p : s.config.peers) {
    if (p.index >= s.parties) {
      return Status::InvalidArgument("peer index " + std::to_string(p.index) + " out of range");
    }
  }
  s.threads = s.config.threads ? s.config.threads : std::max(1u, std::thread::hardware_concurrency());
  s.pool = std::make_unique<boost::asio::thread_pool>(s.threads);

  auto opened = ShareStore::Open(s.config.data_dir, s.config.sync);
  if (opened.ok()) {
    s.store = std::move(opened).value();
    const ServerMeta& m = s.store->meta();
    if (m.server_index != s.config.index) {
      return Status::FailedPrecondition("data dir " + s.config.data_dir + " holds the share of server " +
                                        std::to_string(m.server_index) + ", but this is server " +
                                        std::to_string(s.config.index));
    }
    spdlog::info("opened filesystem {} (H={} Z={} m={}): {} evictions applied, seq {}",
                 HexId(m.fs_id), m.shape.height, m.shape.bucket_size, m.shape.elems_per_slot,
                 m.applied_evictions, m.applied_seq);
  } else if (opened.status().code() != Status::Code::kNotFound) {
    return opened.status().WithContext("opening " + s.config.data_dir);
  } else {
    spdlog::info("no filesystem in {} yet; waiting for init", s.config.data_dir);
  }

  s.context = zmq_ctx_new();
  if (!s.context) return Status::IoError(ZmqError("zmq_ctx_new"));
  auto make = [&](int type) { return zmq_socket(s.context, type); };
  int zero = 0;
  s.router = make(ZMQ_ROUTER);
  zmq_setsockopt(s.router, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(s.router, ZMQ_SNDHWM, &zero, sizeof zero);
  zmq_setsockopt(s.router, ZMQ_RCVHWM, &zero, sizeof zero);
  if (zmq_bind(s.router, s.config.listen.c_str()) != 0) {
    return Status::IoError(ZmqError("binding " + s.config.listen));
  }
  s.pull = make(ZMQ_PULL);
  zmq_setsockopt(s.pull, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(s.pull, ZMQ_RCVHWM, &zero, sizeof zero);
  if (zmq_bind(s.pull, s.config.peer_listen.c_str()) != 0) {
    return Status::IoError(ZmqError("binding " + s.config.peer_listen));
  }
  for (const auto& p : s.config.peers) {
    void* push = make(ZMQ_PUSH);
    zmq_setsockopt(push, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(push, ZMQ_SNDHWM, &zero, sizeof zero);
    int ivl = 100, ivl_max = 1000;
    zmq_setsockopt(push, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(push, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    if (zmq_connect(push, p.endpoint.c_str()) != 0) {
      zmq_close(push);
      return Status::InvalidArgument(ZmqError("connecting to peer " + p.endpoint));
    }
    s.pushes[p.index] = push;
  }
  spdlog::info("server {} listening on {} (peers on {}), {} kernel threads, {} kernels",
               s.config.index, s.config.listen, s.config.peer_listen, s.threads,
               kernels::FastKernelName());
  return Status::Ok();
}

Status Server::Run(const std::atomic<bool>& stop) {
  Impl& s = *impl_;
  while (!stop.load()) {
    zmq_pollitem_t items[2] = {{s.router, 0, ZMQ_POLLIN, 0}, {s.pull, 0, ZMQ_POLLIN, 0}};
    int rc = zmq_poll(items, 2, 200);
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      return Status::IoError(ZmqError("zmq_poll"));
    }
    if (items[1].revents & ZMQ_POLLIN) S3ORAM_RETURN_IF_ERROR(s.DrainPeers());
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    // ROUTER frames: [client identity][request].
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    if (zmq_msg_recv(&id, s.router, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&id);
      zmq_msg_close(&body);
      continue;
    }
    bool ok_shape = zmq_msg_more(&id) && zmq_msg_recv(&body, s.router, 0) >= 0 && !zmq_msg_more(&body);
    if (!ok_shape) {
      // Drain and drop whatever else belongs to this malformed message.
      while (zmq_msg_more(&body) || zmq_msg_more(&id)) {
        zmq_msg_close(&body);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&body, s.router, 0) < 0) break;
        if (!zmq_msg_more(&body)) break;
      }
      zmq_msg_close(&id);
      zmq_msg_close(&body);
      spdlog::warn("dropping a client message that is not a single frame");
      continue;
    }
    auto reply = s.Handle(std::span<const std::uint8_t>(
        static_cast<const std::uint8_t*>(zmq_msg_data(&body)), zmq_msg_size(&body)));
    zmq_msg_close(&body);
    if (zmq_msg_send(&id, s.router, ZMQ_SNDMORE) < 0 ||
        zmq_send(s.router, reply.data(), reply.size(), 0) < 0) {
      spdlog::warn("could not send a reply: {}", zmq_strerror(zmq_errno()));
    }
    zmq_msg_close(&id);
  }
  spdlog::info("server {} stopping", s.config.index);
  return Status::Ok();
}

}  // namespace s3oram::serverd
