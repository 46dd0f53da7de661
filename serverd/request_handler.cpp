// RequestHandler: decoding a frame, its dispatch through the table of
// dispatch_table.cpp, INIT, and the handler's construction (request_handler.h).
#include "serverd/request_handler.h"

#include <linux/magic.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "oramcore/base/random.h"
#include "oramcore/math/kernels.h"
#include "oramcore/math/shamir.h"
#include "oramcore/tree/params.h"
#include "oramcore/wire/share_seeds.h"
#include "serverd/backup_store.h"
#include "serverd/lease_file.h"
#include "serverd/lie.h"
#include "serverd/request_handler_internal.h"
#include "serverd/share_store_format.h"

namespace s3oram::serverd {

std::string HexId(const wire::FsId& id) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (auto b : id) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

// Shape limits shared by INIT and REBUILD_BEGIN (see HandleInit).
Status ValidateShape(const wire::StoreShape& s) {
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
        " m=" + std::to_string(s.elems_per_slot) + " needs messages beyond the wire limit of " +
        std::to_string(wire::kMaxElems) + " elements");
  }
  return Status::Ok();
}

// Raises the calling thread's nice value by `by` (on Linux nice is per
// thread), at most to 19. Lowering a priority needs no privilege; where it
// fails anyway, the eviction runs at the accesses' priority, as with 0.
void LowerThisThreadsPriority(std::uint32_t by) {
  if (by == 0) return;
  const auto tid = static_cast<id_t>(::gettid());
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);
  if (now == -1 && errno != 0) {
    spdlog::warn("eviction priority: getpriority: {}", std::strerror(errno));
    return;
  }
  const int want = std::min(19, now + static_cast<int>(by));
  if (::setpriority(PRIO_PROCESS, tid, want) != 0) {
    spdlog::warn("eviction priority: setpriority to nice {}: {}", want, std::strerror(errno));
  }
}

void RequestHandler::Impl::ParallelColumns(boost::asio::thread_pool& on, std::size_t m,
                                           const std::function<void(kernels::ColumnRange)>& fn) {
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
    boost::asio::post(on, [&fn, r, &done] {
      fn(r);
      done.count_down();
    });
  }
  done.wait();
}

Result<wire::Body> RequestHandler::Impl::HandleInit(const wire::Header& h,
                                                    const wire::InitRequest& req) {
  if (req.server_index != config.index) {
    return Status::InvalidArgument("this is server " + std::to_string(config.index) +
                                   ", not server " + std::to_string(req.server_index));
  }
  const auto& s = req.shape;
  S3ORAM_RETURN_IF_ERROR(ValidateShape(s));
  if (store && store->rebuilding()) {
    if (!req.overwrite) {
      return Status::AlreadyExists("server " + std::to_string(config.index) +
                                   " is being rebuilt; initialise with overwrite to abandon "
                                   "the rebuild");
    }
    store.reset();
    rebuild_target.reset();
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
  sealed.reset();
  outcome.reset();
  job.reset();
  ServerMeta meta;
  meta.fs_id = h.fs_id;
  meta.server_index = req.server_index;
  meta.shape = s;
  meta.epoch = h.epoch;
  max_epoch = h.epoch;
  backups.reset();
  S3ORAM_ASSIGN_OR_RETURN(store,
                          ShareStore::Create(config.data_dir, meta, req.overwrite, config.sync));
  // A new filesystem starts without a holder (a replaced one's lease is void).
  S3ORAM_RETURN_IF_ERROR(SaveLease(config.data_dir, LeaseRecord{}, config.sync));
  lease = LeaseRecord{};
  // Backups of whatever filesystem this server held before are useless
  // (and could never be told apart from the new one's by the server).
  S3ORAM_ASSIGN_OR_RETURN(backups, BackupStore::Open(config.data_dir, config.sync));
  S3ORAM_RETURN_IF_ERROR(backups->RemoveAll());
  sealed.reset();
  mask_session.reset();
  peers->Reset();
  spdlog::info("initialised filesystem {} (H={} Z={} m={}, {} bytes logical)", HexId(h.fs_id),
               s.height, s.bucket_size, s.elems_per_slot, store->inspection().file_bytes());
  return wire::Body{wire::InitReply{}};
}

// The route of the body's type (not the header's: the body decides what the
// handler reads), its checks in the order a reader of the table expects them,
// then its handler.
Result<wire::Body> RequestHandler::Impl::Dispatch(const wire::Message& msg) {
  const Route* route = FindRoute(wire::TypeOf(msg.body));
  if (route == nullptr) {
    return Status::Protocol(std::string("a server does not accept ") +
                            wire::MessageTypeName(wire::TypeOf(msg.body)));
  }
  if (route->needs_store && !store) {
    return Status::FailedPrecondition("server holds no filesystem; run s3oram init");
  }
  const wire::Header& h = msg.header;
  switch (route->sender) {
    case Sender::kAnyone:
    case Sender::kSelfChecked:
      break;
    case Sender::kSameFilesystem:
      S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
      break;
    case Sender::kLeaseHolder:
      S3ORAM_RETURN_IF_ERROR(CheckHolder(h));
      break;
    case Sender::kBackupReader:
      S3ORAM_RETURN_IF_ERROR(CheckBackupRead(h));
      break;
    case Sender::kBackupWriter:
      S3ORAM_RETURN_IF_ERROR(CheckBackupWrite(h));
      break;
  }
  return route->run(*this, msg);
}

std::vector<std::uint8_t> RequestHandler::Impl::Handle(std::span<const std::uint8_t> frame) {
  const auto t0 = Clock::now();
  std::vector<std::uint8_t> reply = HandleUntimed(frame);
  {
    const std::lock_guard lock(aside_mu);  // STATS may be answered on another thread
    ++stats.requests;
    stats.busy_us += Micros(Clock::now() - t0);
  }
  PublishQuickState();
  return reply;
}

std::vector<std::uint8_t> RequestHandler::Impl::HandleUntimed(std::span<const std::uint8_t> frame) {
  auto decoded = wire::Decode(frame);
  wire::Header reply_header;
  if (!decoded.ok()) {
    // Echo the seq from its fixed offset when the frame is long enough, so
    // the client sees this error instead of a timeout.
    constexpr std::size_t kSeqOffset = 4 + 2 + 2 + 16 + 8;
    if (frame.size() >= wire::kHeaderBytes) {
      for (int b = 0; b < 8; ++b)
        reply_header.seq |= std::uint64_t{frame[kSeqOffset + b]} << (8 * b);
    }
    spdlog::warn("rejecting malformed request: {}", decoded.status().ToString());
    return wire::Encode(reply_header, wire::ErrorFromStatus(decoded.status()));
  }
  reply_header = decoded->header;
  if (store) reply_header.fs_id = store->meta().fs_id;
  // A share sent as its seed is expanded before any check or handler reads it.
  if (Status st = wire::ExpandShareSeeds(*decoded); !st.ok()) {
    spdlog::warn("{} (seq {}) refused: {}", wire::MessageTypeName(decoded->header.type),
                 decoded->header.seq, st.ToString());
    return wire::Encode(reply_header, wire::ErrorFromStatus(st));
  }
  auto result = Dispatch(*decoded);
  if (!result.ok()) {
    spdlog::warn("{} (seq {}) failed: {}", wire::MessageTypeName(decoded->header.type),
                 decoded->header.seq, result.status().ToString());
    return wire::Encode(reply_header, wire::ErrorFromStatus(result.status()));
  }
  if (store) reply_header.fs_id = store->meta().fs_id;
  return wire::Encode(reply_header, result.value());
}

Result<std::unique_ptr<RequestHandler>> RequestHandler::Create(const ServerConfig& config,
                                                               PeerExchange& peers) {
  random::EnsureInitialized();
  auto s = std::make_unique<Impl>();
  s->config = config;
  s->peers = &peers;
  s->parties = s->config.peers.size() + 1;
  s->threshold = kPrivacyThreshold;  // oramcore/tree/params.h
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
  if (std::adjacent_find(s->peer_indices.begin(), s->peer_indices.end()) != s->peer_indices.end() ||
      std::binary_search(s->peer_indices.begin(), s->peer_indices.end(), s->config.index)) {
    return Status::InvalidArgument("peer indices must be distinct and differ from server index " +
                                   std::to_string(s->config.index));
  }
  s->threads =
      s->config.threads ? s->config.threads : std::max(1u, std::thread::hardware_concurrency());
  s->pool = std::make_unique<boost::asio::thread_pool>(s->threads);
  s->evict_pool = std::make_unique<boost::asio::thread_pool>(s->threads);
  if (s->config.eviction_nice > 0) {
    // One task per thread: each waits for all the others, so no thread
    // takes two and every one lowers its own priority. The latch is shared:
    // a task may still be inside arrive_and_wait when the count reaches
    // zero and this function returns.
    auto all = std::make_shared<std::latch>(static_cast<std::ptrdiff_t>(s->threads));
    for (std::size_t i = 0; i < s->threads; ++i) {
      boost::asio::post(*s->evict_pool, [all, by = s->config.eviction_nice] {
        LowerThisThreadsPriority(by);
        all->arrive_and_wait();
      });
    }
    all->wait();
  }

  // tmpfs backs a read of a file hole through a mapping with a new page: the
  // server reads never-written buckets through its mapping, so on a full
  // tmpfs such a read kills it (SIGBUS), where a disk filesystem reads zeros.
  if (struct statfs fs{};
      ::statfs(s->config.data_dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
    spdlog::warn(
        "data dir {} is on tmpfs: if that tmpfs fills up, reading a never-written "
        "bucket kills this server; keep the shares on a disk filesystem",
        s->config.data_dir);
  }
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
    S3ORAM_ASSIGN_OR_RETURN(s->lease, LoadLease(s->config.data_dir));
    s->max_epoch = std::max({m.epoch, s->lease.holder_epoch, s->lease.highest_epoch});
    spdlog::info("opened filesystem {} (H={} Z={} m={}): {} evictions applied, seq {}, lease {}",
                 HexId(m.fs_id), m.shape.height, m.shape.bucket_size, m.shape.elems_per_slot,
                 m.applied_evictions, m.applied_seq,
                 s->lease.held() ? "held by epoch " + std::to_string(s->lease.holder_epoch)
                                 : std::string("free"));
    if (s->store->catching_up()) {
      spdlog::warn(
          "server {}: the share in {} was being caught up when the server stopped and is "
          "incomplete; it serves nothing until a catch-up begun again from {} evictions finishes "
          "(a mount that excluded it does so by itself, or s3oram rebuild --server {})",
          s->config.index, s->config.data_dir, m.applied_evictions, s->config.index);
    }
  } else if (opened.status().code() != Status::Code::kNotFound) {
    return opened.status().WithContext("opening " + s->config.data_dir);
  } else {
    spdlog::info("no filesystem in {} yet; waiting for init", s->config.data_dir);
  }
  s->PublishQuickState();
  std::unique_ptr<RequestHandler> h(new RequestHandler());
  h->impl_ = std::move(s);
  return h;
}

RequestHandler::~RequestHandler() = default;

std::vector<std::uint8_t> RequestHandler::Handle(std::span<const std::uint8_t> frame) {
  return impl_->Handle(frame);
}

bool RequestHandler::HasPendingPrepare() const { return impl_->job.has_value(); }

bool RequestHandler::IsQuickRead(std::span<const std::uint8_t> frame) {
  const auto type = wire::PeekType(frame);
  return type == wire::MessageType::kStatusRequest || type == wire::MessageType::kStatsRequest ||
         type == wire::MessageType::kLeaseQueryRequest ||
         type == wire::MessageType::kBackupListRequest;
}

std::optional<std::vector<std::uint8_t>> RequestHandler::AnswerQuickRead(
    std::span<const std::uint8_t> frame) {
  return impl_->AnswerQuickRead(frame);
}

void RequestHandler::PublishQuickState() { impl_->PublishQuickState(); }

void RequestHandler::RunPrepare() { impl_->RunPrepare(); }

bool RequestHandler::ServedDuringPrepare(std::span<const std::uint8_t> frame) {
  const auto type = wire::PeekType(frame);
  if (!type) return false;
  const Impl::Route* route = Impl::FindRoute(*type);
  if (route == nullptr || !route->during_prepare) return false;
  // A rebuild read of the tree reads live buckets only (as a retrieval
  // does); bucket 0 is the root snapshot, which the PREPARE may be writing.
  if (*type == wire::MessageType::kRebuildReadRequest) {
    auto msg = wire::Decode(frame);
    return msg.ok() && std::get<wire::RebuildReadRequest>(msg->body).first_bucket != 0;
  }
  return true;
}

std::optional<std::pair<std::uint64_t, std::uint32_t>> RequestHandler::PrepareAttemptOf(
    std::span<const std::uint8_t> frame) {
  const auto type = wire::PeekType(frame);
  if (!type || *type != wire::MessageType::kEvictPrepareRequest) return std::nullopt;
  auto msg = wire::Decode(frame);
  if (!msg.ok()) return std::nullopt;
  const auto* req = std::get_if<wire::EvictPrepareRequest>(&msg->body);
  if (!req) return std::nullopt;
  return std::make_pair(req->eviction, req->attempt);
}

wire::StatusReply RequestHandler::Progress() const {
  const std::lock_guard lock(impl_->aside_mu);
  return impl_->WithProgress(wire::StatusReply{});
}

const ShareStore* RequestHandler::store() const { return impl_->store.get(); }

std::size_t RequestHandler::threads() const { return impl_->threads; }

}  // namespace s3oram::serverd
