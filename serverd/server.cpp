#include "serverd/server.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "oramcore/base/fault_point.h"
#include "oramcore/base/secret.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/math/field.h"
#include "oramcore/math/kernels.h"
#include "oramcore/wire/message_limits.h"
#include "oramcore/wire/wire.h"
#include "serverd/peer_exchange.h"
#include "serverd/rebuild_terms_inbox.h"
#include "serverd/request_handler.h"
#include "serverd/share_store.h"
#include "serverd/smp_inbox.h"
#include "serverd/zap_authenticator.h"

namespace s3oram::serverd {

using field::Elem;
using Clock = std::chrono::steady_clock;

namespace {

std::string ZmqError(const std::string& what) { return what + ": " + zmq_strerror(zmq_errno()); }

// Key of one SMP message: (eviction, attempt, round, sender).
using SmpKey = SmpInbox::Key;

// A client request waiting for the worker or behind an EVICT_PREPARE's
// computation (or a reply going back): its ROUTER identity and frame.
struct QueuedRequest {
  std::vector<std::uint8_t> id;
  std::vector<std::uint8_t> frame;
};
// What may wait behind a PREPARE; past it requests are refused as busy (the
// client retries). One client sends nothing else while its PREPARE runs but
// a resend; these are for other clients' requests.
constexpr std::size_t kMaxQueuedRequests = 64;
constexpr std::size_t kMaxQueuedBytes = std::size_t{256} << 20;
// What may wait for the worker: a client pipelines at most a few accesses.
// Past it this thread stops taking requests from the socket until the worker
// catches up, so ZeroMQ's queue (kClientQueue) and TCP push back on a flood
// as they would on a server busy with one request.
constexpr std::size_t kMaxInboxRequests = 64;
constexpr std::size_t kMaxInboxBytes = std::size_t{32} << 20;
// The ZeroMQ I/O thread (a bit mask) of the clients' socket and of the
// peers' sockets.
constexpr std::uint64_t kClientAffinity = 1, kPeerAffinity = 2;
// How often the log tells how far a running PREPARE is.
constexpr auto kProgressLogEvery = std::chrono::seconds(10);

std::vector<std::uint8_t> Bytes(zmq_msg_t& m) {
  const auto* p = static_cast<const std::uint8_t*>(zmq_msg_data(&m));
  return {p, p + zmq_msg_size(&m)};
}

}  // namespace

// The sockets, and the ZeroMQ side of the SMP rounds; requests themselves are
// the RequestHandler's.
struct Server::Impl : PeerExchange {
  ServerConfig config;
  void* context = nullptr;
  void* router = nullptr;
  void* pull = nullptr;
  std::map<std::uint32_t, void*> pushes;  // peer index -> PUSH socket (SMP rounds)
  // peer index -> PUSH socket for rebuild terms: its own, because the worker
  // sends terms while an eviction's computation may use `pushes`.
  std::map<std::uint32_t, void*> term_pushes;
  std::map<std::uint32_t, void*> push_monitors;  // peer index -> monitor of its PUSH socket
  std::map<std::uint32_t, std::string> peer_link_problem;  // last logged, to log changes once
  ZapAuthenticator zap;
  std::unique_ptr<RequestHandler> handler;
  // SMP messages that arrived before this server was ready for them.
  SmpInbox smp_buffer;
  // Rebuild terms that arrived before their REBUILD_WRITE.
  RebuildTermsInbox terms_buffer;
  // Each peer's CURVE public key: the sender a peer's frame may claim.
  std::map<std::uint32_t, std::string> peer_keys;
  // The shape the sockets' frame limits were computed for (nullopt: no
  // store yet, kNoStoreFrameBytes), and where they are bound.
  std::optional<wire::StoreShape> limited_for;
  std::string router_endpoint, pull_endpoint;
  Secret curve_secret;  // this server's CURVE secret key (binary), for new sockets
  // Before a store exists only small requests are expected (INIT,
  // REBUILD_BEGIN, STATUS, LEASE_*), but a client's connection keeps the
  // limit it was accepted with: large enough for any access of a usual
  // shape, so that the client that sent INIT goes on without reconnecting.
  static constexpr std::uint64_t kNoStoreFrameBytes = std::uint64_t{64} << 20;
  // Frames ZeroMQ queues per connection before it stops reading from it.
  static constexpr int kClientQueue = 64;  // requests, and replies not yet taken
  static constexpr int kPeerQueue = 16;    // SMP frames (an honest peer sends two ahead)
  // Rebuild ranges queued towards one peer: an honest survivor has one in
  // flight (the client waits for the target before it asks for the next).
  static constexpr int kTermsQueue = 4;
  // Buffers kept between the rounds of one eviction (Trim frees them).
  std::vector<std::vector<Elem>> spare_shares;
  std::atomic<std::uint64_t> peer_bytes_sent{0};

  // An EVICT_PREPARE's computation (minutes at large blocks) runs on
  // prepare_thread (RequestHandler::RunPrepare) once its Handle has answered
  // EVICT_STARTED. This thread keeps serving the accesses, the lease and
  // STATUS/STATS meanwhile (RequestHandler::ServedDuringPrepare) and queues
  // every other request (EVICT_RESULT among them) until it is done. While it
  // runs, only that thread uses the peer sockets; it signals prepare_done_fd
  // when it ends.
  std::thread prepare_thread;
  int prepare_done_fd = -1;
  // Set when the computation ended: the loop also checks it on its 200 ms
  // tick, should the eventfd write have failed.
  std::atomic<bool> prepare_finished{false};
  std::deque<QueuedRequest> queued;
  std::size_t queued_bytes = 0;

  // The worker: every request but a quick read is handled there, one at a
  // time in arrival order, so that this thread keeps receiving and answers
  // the quick reads (STATUS, STATS, LEASE_QUERY, BACKUP_LIST:
  // RequestHandler::AnswerQuickRead) while an access reads cold buckets
  // from a busy disk, which takes seconds. A quick read from a connection
  // that has a request waiting or running waits behind it (a client's
  // requests are answered in the order it sent them, except that what is
  // served beside a PREPARE's computation goes ahead of what waits for
  // it). A job goes to the
  // worker and its reply comes back under worker_mu; worker_done_fd tells
  // this thread. While the worker runs, only it uses the handler's state
  // and the peer sockets (this thread polls the peers only when it is idle).
  std::thread worker;
  std::mutex worker_mu;
  std::condition_variable worker_cv;
  std::optional<QueuedRequest> worker_job;    // to the worker
  std::optional<QueuedRequest> worker_reply;  // from it: the id and the reply frame
  bool worker_stop = false;
  int worker_done_fd = -1;
  // This thread's side: the request the worker runs (its id and type), what
  // waits for it, and whether a PREPARE ended meanwhile (the quick reads'
  // state is published again once it is done).
  std::optional<std::vector<std::uint8_t>> running_id;
  std::optional<wire::MessageType> running_type;
  std::deque<QueuedRequest> inbox;
  std::size_t inbox_bytes = 0;
  bool republish = false;
  // The newest EVICT_PREPARE (eviction, attempt) queued behind a computation.
  // The client sends a newer attempt only once it gave up on the running one
  // (a server failed it, or it timed out), so the computation stops at its
  // next wait for peers rather than waiting out the peer timeout for shares
  // that a failed server will never send. Set by this thread, read by
  // prepare_thread.
  std::mutex superseding_mu;
  std::optional<std::pair<std::uint64_t, std::uint32_t>> superseding;
  Clock::time_point progress_logged;

  ~Impl() override {
    StopWorker();
    if (prepare_thread.joinable()) prepare_thread.join();
    if (prepare_done_fd >= 0) close(prepare_done_fd);
    if (worker_done_fd >= 0) close(worker_done_fd);
    for (auto& [i, s] : pushes) zmq_close(s);
    for (auto& [i, s] : term_pushes) zmq_close(s);
    for (auto& [i, s] : push_monitors) zmq_close(s);
    if (pull) zmq_close(pull);
    if (router) zmq_close(router);
    zap.Stop();
    if (context) zmq_ctx_term(context);
  }

  // Logs what the CURVE handshakes of the links to peers report (once per
  // change): a peer that refuses this server's key is a configuration error
  // the operator must see on this side too.
  void CheckPeerLinks() {
    for (auto& [peer, mon] : push_monitors) {
      for (;;) {
        zmq_msg_t head;
        zmq_msg_init(&head);
        if (zmq_msg_recv(&head, mon, ZMQ_DONTWAIT) < 0) {
          zmq_msg_close(&head);
          break;
        }
        std::uint16_t event = 0;
        if (zmq_msg_size(&head) >= 2) std::memcpy(&event, zmq_msg_data(&head), 2);
        const bool more = zmq_msg_more(&head);
        zmq_msg_close(&head);
        if (more) {
          zmq_msg_t addr;
          zmq_msg_init(&addr);
          zmq_msg_recv(&addr, mon, 0);
          zmq_msg_close(&addr);
        }
        std::string problem;
        if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
          problem = "refused this server's CURVE key: add it as that peer's [[peer]] public_key";
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                   event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
          problem = "CURVE handshake failed: the [[peer]] public_key configured here does not "
                    "match that peer";
        } else if (event != ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
          continue;
        }
        if (problem == peer_link_problem[peer]) continue;
        peer_link_problem[peer] = problem;
        if (problem.empty()) {
          spdlog::info("link to peer {} authenticated", peer);
        } else {
          spdlog::error("link to peer {}: {}", peer, problem);
        }
      }
    }
  }

  // Sends this server's round frames to every peer (zmq_send copies them, so
  // the handler reuses its frames for the next round).
  Status Send(const std::vector<std::vector<std::uint8_t>>& frames) override {
    for (auto& [peer, socket] : pushes) {
      if (peer >= frames.size()) {
        return Status::FailedPrecondition("no SMP frame for peer " + std::to_string(peer));
      }
      const std::vector<std::uint8_t>& frame = frames[peer];
      if (frame.empty()) continue;  // not a participant of this attempt
      if (zmq_send(socket, frame.data(), frame.size(), 0) < 0) {
        return Status::IoError(ZmqError("sending SMP shares to peer " + std::to_string(peer)));
      }
      peer_bytes_sent += frame.size();
    }
    return Status::Ok();
  }

  // Reads peer messages into smp_buffer until every peer's shares for the
  // round are there or the peer timeout passes. Lengths are checked by the handler.
  Result<std::vector<std::span<const Elem>>> Await(const SmpRound& r) override {
    const std::uint64_t eviction = r.eviction;
    const std::uint32_t attempt = r.attempt, round = r.round;
    const auto deadline = Clock::now() + std::chrono::milliseconds(config.peer_timeout_ms);
    auto awaited = [&](std::uint32_t peer) { return peer < 32 && ((r.from >> peer) & 1u) != 0; };
    auto have_all = [&] {
      for (auto& [peer, s] : pushes) {
        if (awaited(peer) && !smp_buffer.Has(SmpKey{eviction, attempt, round, peer})) return false;
      }
      return true;
    };
    while (!have_all()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        std::string missing;
        for (auto& [peer, s] : pushes) {
          if (awaited(peer) && !smp_buffer.Has(SmpKey{eviction, attempt, round, peer})) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
          }
        }
        return Status::Unavailable("eviction " + std::to_string(eviction) + " attempt " +
                                   std::to_string(attempt) + " round " + std::to_string(round) +
                                   ": no SMP shares from peer(s) " + missing + " within " +
                                   std::to_string(config.peer_timeout_ms) + " ms");
      }
      {
        const std::lock_guard lock(superseding_mu);
        if (superseding && superseding->first == eviction && superseding->second > attempt) {
          return Status::Unavailable("eviction " + std::to_string(eviction) + " attempt " +
                                     std::to_string(attempt) + " superseded by attempt " +
                                     std::to_string(superseding->second) + " from the client");
        }
      }
      zmq_pollitem_t item{pull, 0, ZMQ_POLLIN, 0};
      int rc = zmq_poll(&item, 1, std::min<long>(left.count(), 200));
      if (rc < 0 && zmq_errno() != EINTR) return Status::IoError(ZmqError("zmq_poll"));
      // Only the client ends an attempt (superseding, above): a peer on a
      // newer attempt does not, or one peer could abort every eviction.
      if (rc > 0) S3ORAM_RETURN_IF_ERROR(DrainPeers());
    }
    std::vector<std::span<const Elem>> out;
    for (auto& [peer, s] : pushes) {
      if (awaited(peer)) out.emplace_back(smp_buffer.At(SmpKey{eviction, attempt, round, peer}));
    }
    return out;
  }

  void Release(const SmpRound& r) override {
    for (auto& [peer, s] : pushes) {
      const SmpKey key{r.eviction, r.attempt, r.round, peer};
      if (smp_buffer.Has(key)) Recycle(smp_buffer.Release(key));
    }
  }

  void Reset() override {
    smp_buffer.Clear();
    terms_buffer.Clear();
    Trim();
  }

  Status SendTerms(std::uint32_t target, std::span<const std::uint8_t> frame) override {
    const auto it = term_pushes.find(target);
    if (it == term_pushes.end()) {
      return Status::InvalidArgument("rebuild: server " + std::to_string(target) +
                                     " is not a configured peer");
    }
    if (zmq_send(it->second, frame.data(), frame.size(), ZMQ_DONTWAIT) < 0) {
      if (zmq_errno() == EAGAIN) {
        return Status::Unavailable("rebuild: " + std::to_string(kTermsQueue) +
                                   " ranges already wait to go to server " +
                                   std::to_string(target) + "; it does not take them");
      }
      return Status::IoError(ZmqError("sending rebuild terms to peer " + std::to_string(target)));
    }
    peer_bytes_sent += frame.size();
    return Status::Ok();
  }

  // Reads peer messages into the buffers until every participant's terms
  // are there or the peer timeout passes.
  Result<std::vector<std::vector<Elem>>> AwaitTerms(const TermsWanted& w) override {
    const auto deadline = Clock::now() + std::chrono::milliseconds(config.peer_timeout_ms);
    auto key = [&](std::uint32_t peer) {
      return RebuildTermsInbox::Key{w.nonce, w.first_bucket, peer};
    };
    for (;;) {
      std::string missing;
      for (std::uint32_t peer : w.from) {
        if (!terms_buffer.Has(key(peer), w.holes)) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
        }
      }
      if (missing.empty()) break;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        return Status::Unavailable("rebuild: no terms of buckets from " +
                                   std::to_string(w.first_bucket) + " from server(s) " + missing +
                                   " within " + std::to_string(config.peer_timeout_ms) +
                                   " ms (can they reach this server's peer_listen address?)");
      }
      zmq_pollitem_t item{pull, 0, ZMQ_POLLIN, 0};
      const int rc = zmq_poll(&item, 1, std::min<long>(left.count(), 200));
      if (rc < 0 && zmq_errno() != EINTR) return Status::IoError(ZmqError("zmq_poll"));
      if (rc > 0) S3ORAM_RETURN_IF_ERROR(DrainPeers());
    }
    std::vector<std::vector<Elem>> out;
    for (std::uint32_t peer : w.from) out.push_back(*terms_buffer.Take(key(peer), w.holes));
    return out;
  }

  void Trim() override {
    spare_shares.clear();
    spare_shares.shrink_to_fit();
  }

  // Keeps a combined round's vector for the next round's arrival (one per
  // peer at most: rounds are combined one after the other).
  void Recycle(std::vector<Elem>&& v) {
    if (spare_shares.size() < pushes.size()) spare_shares.push_back(std::move(v));
  }

  std::uint64_t bytes_sent() const override { return peer_bytes_sent; }

  // Moves every waiting peer message into smp_buffer (validated, bounded).
  Status DrainPeers() {
    const ShareStore* store = handler ? handler->store() : nullptr;
    for (;;) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, pull, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        return Status::Ok();
      }
      // The CURVE key the peer connected with (the ZAP handler's user id):
      // the only sender this frame may speak for.
      const char* user_id = zmq_msg_gets(&msg, "User-Id");
      const std::string sender_key = user_id != nullptr ? user_id : "";
      const std::span<const std::uint8_t> bytes(
          static_cast<const std::uint8_t*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      if (wire::PeekType(bytes) == wire::MessageType::kRebuildTerms) {
        TakeTerms(bytes, sender_key, store);
        zmq_msg_close(&msg);
        continue;
      }
      // Decoded into a vector of an earlier round when there is one, so a
      // round's hundreds of MB reuse pages already mapped.
      wire::Header header;
      wire::SmpShares decoded;
      wire::SmpShares* smp = &decoded;
      if (!spare_shares.empty()) {
        decoded.shares = std::move(spare_shares.back());
        spare_shares.pop_back();
      }
      const Status st = wire::DecodeSmpSharesInto(bytes, &header, smp);
      zmq_msg_close(&msg);
      // A dropped message's vector is freed, not kept: between evictions
      // the server holds no eviction-sized buffer.
      if (!st.ok()) {
        spdlog::warn("dropping malformed peer message: {}", st.ToString());
        continue;
      }
      if (!SentBy(smp->from_index, sender_key, "SMP shares")) continue;
      if (!store || header.fs_id != store->meta().fs_id) continue;  // not for us
      smp_buffer.Put(SmpKey{smp->eviction, smp->attempt, smp->round, smp->from_index},
                     std::move(smp->shares), store->meta().applied_evictions);
    }
  }

  // Whether `from`, the peer a message claims as its sender, is the one
  // whose CURVE key it came with.
  bool SentBy(std::uint32_t from, const std::string& sender_key, const char* what) const {
    const auto claimed = peer_keys.find(from);
    if (claimed != peer_keys.end() && claimed->second == sender_key) return true;
    spdlog::warn("dropping {} that claim to come from peer {} but were sent with CURVE key {}",
                 what, from, sender_key.empty() ? "(none)" : sender_key);
    return false;
  }

  // A survivor's rebuild terms: kept for the REBUILD_WRITE that sums them
  // if they are for this server's store being rebuilt.
  void TakeTerms(std::span<const std::uint8_t> bytes, const std::string& sender_key,
                 const ShareStore* store) {
    auto msg = wire::Decode(bytes);
    if (!msg.ok()) {
      spdlog::warn("dropping malformed peer message: {}", msg.status().ToString());
      return;
    }
    auto& terms = std::get<wire::RebuildTerms>(msg->body);
    if (!SentBy(terms.from_index, sender_key, "rebuild terms")) return;
    if (terms.target != config.index || !store || !store->rebuilding() ||
        msg->header.fs_id != store->meta().fs_id) {
      spdlog::warn(
          "dropping rebuild terms from peer {}: this server is not being rebuilt for "
          "that filesystem",
          terms.from_index);
      return;
    }
    terms_buffer.Put(std::move(terms));
  }

  bool preparing() const { return prepare_thread.joinable(); }

  void Reply(std::span<const std::uint8_t> id, std::span<const std::uint8_t> reply) {
    if (zmq_send(router, id.data(), id.size(), ZMQ_SNDMORE) < 0 ||
        zmq_send(router, reply.data(), reply.size(), 0) < 0) {
      spdlog::warn("could not send a reply: {}", zmq_strerror(zmq_errno()));
    }
  }

  void WorkerLoop() {
    for (;;) {
      QueuedRequest job;
      {
        std::unique_lock lock(worker_mu);
        worker_cv.wait(lock, [&] { return worker_stop || worker_job.has_value(); });
        if (!worker_job) return;
        job = std::move(*worker_job);
        worker_job.reset();
      }
      // Tests make a server slow with "server.serve~MS" (a flood then piles
      // up in the queues, which must bound it).
      FaultPoint("server.serve");
      std::vector<std::uint8_t> reply = handler->Handle(job.frame);
      {
        const std::lock_guard lock(worker_mu);
        worker_reply = QueuedRequest{std::move(job.id), std::move(reply)};
      }
      const std::uint64_t one = 1;
      if (write(worker_done_fd, &one, sizeof one) < 0) {
        spdlog::error("could not signal a handled request: {}", std::strerror(errno));
      }
    }
  }

  void StopWorker() {
    if (!worker.joinable()) return;
    {
      const std::lock_guard lock(worker_mu);
      worker_stop = true;
      worker_job.reset();
    }
    worker_cv.notify_one();
    worker.join();
  }

  bool worker_busy() const { return running_id.has_value(); }
  // Whether this thread takes another request from the socket.
  bool inbox_has_room() const {
    return inbox.size() < kMaxInboxRequests && inbox_bytes < kMaxInboxBytes;
  }

  void StartOnWorker(QueuedRequest q) {
    running_id = q.id;
    running_type = wire::PeekType(q.frame);
    {
      const std::lock_guard lock(worker_mu);
      worker_job = std::move(q);
    }
    worker_cv.notify_one();
  }

  // The worker's reply, if it has one: sent; then what the request changed
  // (frame limits, a PREPARE to compute) and the next request.
  void CollectWorkerReply() {
    std::uint64_t count = 0;
    if (read(worker_done_fd, &count, sizeof count) < 0 && errno != EAGAIN) {
      spdlog::warn("reading the worker's signal: {}", std::strerror(errno));
    }
    std::optional<QueuedRequest> done;
    {
      const std::lock_guard lock(worker_mu);
      done = std::move(worker_reply);
      worker_reply.reset();
    }
    if (!done) return;
    Reply(done->id, done->frame);
    running_id.reset();
    running_type.reset();
    if (republish) {
      handler->PublishQuickState();
      republish = false;
    }
    TightenLimits();
    // A request served beside a running PREPARE leaves that PREPARE's job
    // pending: only a PREPARE the worker just began starts a computation.
    if (!preparing() && handler->HasPendingPrepare()) StartPrepare();
    Pump();
  }

  // Starts the computation of the EVICT_PREPARE the worker just handled on
  // prepare_thread; what waits for the worker and may not be served beside
  // it now waits for the computation, in order.
  void StartPrepare() {
    progress_logged = Clock::now();
    prepare_finished.store(false);
    prepare_thread = std::thread([this] {
      handler->RunPrepare();
      prepare_finished.store(true);
      const std::uint64_t one = 1;
      if (write(prepare_done_fd, &one, sizeof one) < 0) {
        spdlog::error("could not signal the end of a PREPARE: {}", std::strerror(errno));
      }
    });
    std::deque<QueuedRequest> keep;
    for (QueuedRequest& q : inbox) {
      if (ServedBesidePrepare(q.frame)) {
        keep.push_back(std::move(q));
      } else {
        queued_bytes += q.frame.size();
        queued.push_back(std::move(q));
      }
    }
    inbox = std::move(keep);
    inbox_bytes = 0;
    for (const QueuedRequest& q : inbox) inbox_bytes += q.frame.size();
  }

  // Hands the next waiting request to the worker if it is idle.
  void Pump() {
    while (!worker_busy() && !inbox.empty()) {
      QueuedRequest q = std::move(inbox.front());
      inbox.pop_front();
      inbox_bytes -= q.frame.size();
      if (preparing() && !ServedBesidePrepare(q.frame)) {
        WaitForPrepare(std::move(q));
      } else {
        StartOnWorker(std::move(q));
      }
    }
  }

  bool BackupPutQueued() const {
    auto put = [](const QueuedRequest& q) {
      return wire::PeekType(q.frame) == wire::MessageType::kBackupPutRequest;
    };
    return running_type == wire::MessageType::kBackupPutRequest ||
           std::any_of(queued.begin(), queued.end(), put) ||
           std::any_of(inbox.begin(), inbox.end(), put);
  }

  // Whether a request of connection `id` waits for the worker or runs. (A
  // request waiting for a PREPARE's computation does not count: what is
  // served beside the computation goes ahead of it anyway.)
  bool ConnectionWaits(const std::vector<std::uint8_t>& id) const {
    auto same = [&](const QueuedRequest& q) { return q.id == id; };
    return running_id == id || std::any_of(inbox.begin(), inbox.end(), same);
  }

  // The accesses, the lease, STATUS/STATS and the backups' reads are served
  // while a PREPARE's computation runs (the rows of dispatch_table.cpp say
  // which); a backup read waits while a BACKUP_PUT waits: it must see the
  // write sent before it.
  bool ServedBesidePrepare(std::span<const std::uint8_t> frame) const {
    const auto type = wire::PeekType(frame);
    const bool backup_read = type == wire::MessageType::kBackupListRequest ||
                             type == wire::MessageType::kBackupGetRequest;
    return RequestHandler::ServedDuringPrepare(frame) && !(backup_read && BackupPutQueued());
  }

  // Refuses a request as busy: the seq from its fixed offset, as the handler
  // echoes it for a frame it cannot decode, so the client matches the error
  // to its request (and retries).
  void RefuseBusy(std::span<const std::uint8_t> id, std::span<const std::uint8_t> frame,
                  const std::string& why) {
    wire::Header h;
    constexpr std::size_t kSeqOffset = 4 + 2 + 2 + 16 + 8;
    if (frame.size() >= wire::kHeaderBytes) {
      for (int b = 0; b < 8; ++b) h.seq |= std::uint64_t{frame[kSeqOffset + b]} << (8 * b);
    }
    Reply(id, wire::Encode(h, wire::ErrorFromStatus(Status::Unavailable(why))));
  }

  // A request that arrived: a quick read is answered now (unless its
  // connection has a request waiting, or it is a backup read behind a
  // BACKUP_PUT); the rest goes to the worker, in order, or waits for a
  // PREPARE's computation.
  void Receive(std::vector<std::uint8_t> id, std::vector<std::uint8_t> frame) {
    // Also before the computation started (its PREPARE may still wait for
    // the worker): the newer attempt stops it at its next wait for peers.
    NoteSuperseding(frame);
    const bool backup_read = wire::PeekType(frame) == wire::MessageType::kBackupListRequest;
    if (RequestHandler::IsQuickRead(frame) && !ConnectionWaits(id) &&
        !(backup_read && BackupPutQueued())) {
      if (auto reply = handler->AnswerQuickRead(frame)) {
        Reply(id, *reply);
        return;
      }
    }
    if (preparing() && !ServedBesidePrepare(frame)) {
      WaitForPrepare(QueuedRequest{std::move(id), std::move(frame)});
      return;
    }
    if (!worker_busy() && inbox.empty()) {
      StartOnWorker(QueuedRequest{std::move(id), std::move(frame)});
      return;
    }
    inbox_bytes += frame.size();
    inbox.push_back(QueuedRequest{std::move(id), std::move(frame)});
  }

  // An EVICT_PREPARE that arrives while another attempt's computation runs
  // means the client gave up on that one.
  void NoteSuperseding(std::span<const std::uint8_t> frame) {
    if (const auto attempt = RequestHandler::PrepareAttemptOf(frame)) {
      const std::lock_guard lock(superseding_mu);
      if (!superseding || *superseding < *attempt) superseding = *attempt;
    }
  }

  // The computation ended: the quick reads' state is published again (by
  // the worker's next reply if it runs a request), and what waited for the
  // computation goes to the worker, in order, after what waits for it
  // already.
  void FinishPrepare() {
    // Joined first: the thread's signal is written by then, so reading it
    // leaves nothing behind for the next PREPARE's poll.
    prepare_thread.join();
    std::uint64_t count = 0;
    if (read(prepare_done_fd, &count, sizeof count) < 0) {
      if (errno != EAGAIN) spdlog::warn("reading the PREPARE signal: {}", std::strerror(errno));
    }
    if (worker_busy()) {
      republish = true;
    } else {
      handler->PublishQuickState();
    }
    while (!queued.empty()) {
      inbox_bytes += queued.front().frame.size();
      inbox.push_back(std::move(queued.front()));
      queued.pop_front();
    }
    queued_bytes = 0;
    Pump();
  }

  // A request that waits for the PREPARE's computation (bounded; past the
  // bound it is refused). A request waits in the order it came; an
  // EVICT_RESULT asked again moves to the end.
  void WaitForPrepare(QueuedRequest q) {
    const auto type = wire::PeekType(q.frame);
    // A client waiting for an eviction asks EVICT_RESULT again every few
    // seconds (Evictor::AwaitPrepared) and takes the newest answer only:
    // the newest replaces one queued from the same connection, so the wait
    // holds one place in the queue however long the eviction runs.
    if (type == wire::MessageType::kEvictResultRequest) {
      const auto older = std::find_if(queued.begin(), queued.end(), [&](const QueuedRequest& o) {
        return o.id == q.id && wire::PeekType(o.frame) == type;
      });
      if (older != queued.end()) {
        queued_bytes -= older->frame.size();
        queued.erase(older);
      }
    }
    if (queued.size() >= kMaxQueuedRequests || queued_bytes + q.frame.size() > kMaxQueuedBytes) {
      const auto p = handler->Progress();
      RefuseBusy(q.id, q.frame,
                 "busy: eviction " + std::to_string(p.evicting_eviction) +
                     " is being prepared and " + std::to_string(queued.size()) +
                     " requests already wait for it; try again");
      return;
    }
    queued_bytes += q.frame.size();
    queued.push_back(std::move(q));
  }

  // Creates and binds both listening sockets (again, closing the old ones)
  // with frame limits and bounded queues for the store's shape
  // (wire/message_limits.h). New sockets, not new options: ZeroMQ copies a
  // socket's options into its listener and each accepted connection, so only
  // fresh connections carry new limits. Closing drops every connection;
  // clients and peers reconnect (and a client resends what was in flight).
  Status BindWithLimits() {
    const ShareStore* store = handler ? handler->store() : nullptr;
    std::optional<wire::StoreShape> shape;
    if (store) shape = store->meta().shape;
    const auto parties = static_cast<std::uint32_t>(config.peers.size() + 1);
    wire::MessageLimits limits{kNoStoreFrameBytes, 0, kNoStoreFrameBytes};
    if (shape) limits = wire::LimitsFor(*shape, parties);
    auto open = [&](void*& socket, int type, const char* domain, const std::string& wanted,
                    std::string& bound, std::uint64_t max_frame, int queue,
                    std::uint64_t affinity) -> Status {
      if (socket != nullptr) {
        // A reply just queued (INIT's) still goes out.
        const int flush_ms = 1000;
        zmq_setsockopt(socket, ZMQ_LINGER, &flush_ms, sizeof flush_ms);
        zmq_close(socket);
      }
      socket = zmq_socket(context, type);
      const int one = 1, zero = 0;
      const auto max = static_cast<std::int64_t>(max_frame);
      if (socket == nullptr || zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
          zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, curve_secret.data(), curve_secret.size()) !=
              0 ||
          zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, domain, std::strlen(domain)) != 0 ||
          zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
          zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &max, sizeof max) != 0 ||
          zmq_setsockopt(socket, ZMQ_RCVHWM, &queue, sizeof queue) != 0 ||
          zmq_setsockopt(socket, ZMQ_SNDHWM, &queue, sizeof queue) != 0 ||
          zmq_setsockopt(socket, ZMQ_AFFINITY, &affinity, sizeof affinity) != 0) {
        return Status::IoError(ZmqError(std::string("setting up the ") + domain + " socket"));
      }
      // The same address again (a port the OS chose at the first bind is kept).
      // ZeroMQ closes the old listener asynchronously: the port may stay
      // taken for a moment, so the bind is retried (bounded).
      const std::string address = bound.empty() ? wanted : bound;
      const auto give_up = Clock::now() + std::chrono::seconds(5);
      while (zmq_bind(socket, address.c_str()) != 0) {
        if (zmq_errno() != EADDRINUSE || bound.empty() || Clock::now() >= give_up) {
          return Status::IoError(ZmqError("binding " + address));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      char last[256] = {};
      std::size_t len = sizeof last - 1;
      bound = zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, last, &len) == 0 && last[0] != 0
                  ? std::string(last)
                  : address;
      return Status::Ok();
    };
    // Replies a client has not taken are dropped past kClientQueue (it has
    // a pipelined batch outstanding at most).
    S3ORAM_RETURN_IF_ERROR(open(router, ZMQ_ROUTER, "clients", config.listen, router_endpoint,
                                limits.request_bytes, kClientQueue, kClientAffinity));
    S3ORAM_RETURN_IF_ERROR(open(pull, ZMQ_PULL, "peers", config.peer_listen, pull_endpoint,
                                limits.peer_bytes, kPeerQueue, kPeerAffinity));
    limited_for = shape;
    spdlog::info("frame limits: {} bytes from clients, {} bytes from peers{}",
                 limits.request_bytes, limits.peer_bytes,
                 shape ? "" : " (no store yet: set again once one exists)");
    return Status::Ok();
  }

  // After INIT or REBUILD_BEGIN the store's shape is known (or changed):
  // the limits follow, between computations (the PREPARE thread owns the
  // peer socket while it runs).
  void TightenLimits() {
    if (preparing()) return;
    const ShareStore* store = handler ? handler->store() : nullptr;
    if (!store || (limited_for && *limited_for == store->meta().shape)) return;
    if (Status st = BindWithLimits(); !st.ok()) {
      spdlog::error("could not apply the frame limits of the new store: {}", st.ToString());
      return;
    }
    // The new socket dropped every connection: a reply to a request read
    // on the old one would go nowhere, and its client sends it again.
    inbox.clear();
    inbox_bytes = 0;
  }

  void LogProgress() {
    if (Clock::now() - progress_logged < kProgressLogEvery) return;
    progress_logged = Clock::now();
    const wire::StatusReply p = handler->Progress();
    if (!p.evicting) return;
    spdlog::info("eviction {} attempt {}: round {}/{}, {}, about {}% after {:.0f} s",
                 p.evicting_eviction, p.evicting_attempt, p.evicting_round, p.evicting_rounds,
                 wire::EvictPhaseName(p.evicting_phase), p.evicting_permille / 10,
                 static_cast<double>(p.evicting_elapsed_ms) / 1000);
  }
};

Server::Server(ServerConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
}
Server::~Server() = default;

Status Server::Start() {
  Impl& s = *impl_;
  S3ORAM_ASSIGN_OR_RETURN(s.handler, RequestHandler::Create(s.config, s));
  s.prepare_done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  s.worker_done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.prepare_done_fd < 0 || s.worker_done_fd < 0) {
    return Status::IoError(std::string("eventfd: ") + std::strerror(errno));
  }

  s.context = zmq_ctx_new();
  if (!s.context) return Status::IoError(ZmqError("zmq_ctx_new"));
  // Two I/O threads, the clients' socket on one and the peers' sockets on
  // the other (kClientAffinity, kPeerAffinity): CURVE decrypts on the I/O
  // thread, and a STATUS must not wait behind an eviction's hundreds of MB
  // of SMP shares.
  if (zmq_ctx_set(s.context, ZMQ_IO_THREADS, 2) != 0) {
    return Status::IoError(ZmqError("setting two ZeroMQ I/O threads"));
  }
  // CURVE everywhere: this server's keypair on both bound sockets, the ZAP
  // handler admitting authorized clients on one and configured peers on the
  // other, and this keypair again towards each peer.
  S3ORAM_ASSIGN_OR_RETURN(CurveKeypair keys, LoadCurveKeypair(s.config.secret_key_file));
  S3ORAM_ASSIGN_OR_RETURN(Secret secret_bin, DecodeSecretKey(keys));
  ZapAuthenticator::Policy policy;
  policy["clients"].insert(s.config.authorized_clients.begin(), s.config.authorized_clients.end());
  for (const auto& p : s.config.peers) policy["peers"].insert(p.public_key);
  S3ORAM_RETURN_IF_ERROR(s.zap.Start(s.context, std::move(policy)));
  auto make = [&](int type) { return zmq_socket(s.context, type); };
  // Order matters: the ZAP handler is bound (above) before any CURVE socket
  // binds (BindWithLimits), and stopped only after they are closed (~Impl).
  // A CURVE server socket with no ZAP handler would admit every key.
  int zero = 0;
  s.curve_secret = Secret::CopyOf(std::span<const std::uint8_t>(secret_bin.data(), secret_bin.size()));
  S3ORAM_RETURN_IF_ERROR(s.BindWithLimits());
  for (const auto& p : s.config.peers) s.peer_keys[p.index] = p.public_key;
  for (const auto& p : s.config.peers) {
    void* push = make(ZMQ_PUSH);
    zmq_setsockopt(push, ZMQ_AFFINITY, &kPeerAffinity, sizeof kPeerAffinity);
    zmq_setsockopt(push, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(push, ZMQ_SNDHWM, &zero, sizeof zero);
    int ivl = 100, ivl_max = 1000;
    zmq_setsockopt(push, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(push, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    if (zmq_setsockopt(push, ZMQ_CURVE_SERVERKEY, p.public_key.c_str(), kCurveKeyChars + 1) !=
            0 ||
        zmq_setsockopt(push, ZMQ_CURVE_PUBLICKEY, keys.public_key.c_str(), kCurveKeyChars + 1) !=
            0 ||
        zmq_setsockopt(push, ZMQ_CURVE_SECRETKEY, secret_bin.data(), secret_bin.size()) != 0) {
      zmq_close(push);
      return Status::IoError(ZmqError("setting CURVE keys for peer " + std::to_string(p.index)));
    }
    const std::string monitor_ep = "inproc://peer-monitor-" + std::to_string(p.index);
    zmq_socket_monitor(push, monitor_ep.c_str(),
                       ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
    void* mon = make(ZMQ_PAIR);
    zmq_connect(mon, monitor_ep.c_str());
    s.push_monitors[p.index] = mon;
    if (zmq_connect(push, p.endpoint.c_str()) != 0) {
      zmq_close(push);
      return Status::InvalidArgument(ZmqError("connecting to peer " + p.endpoint));
    }
    s.pushes[p.index] = push;
    // The rebuild terms' link: no monitor (the SMP link's reports the
    // handshake), a bounded queue (SendTerms does not wait).
    void* terms = make(ZMQ_PUSH);
    const int terms_queue = Impl::kTermsQueue;
    zmq_setsockopt(terms, ZMQ_AFFINITY, &kPeerAffinity, sizeof kPeerAffinity);
    zmq_setsockopt(terms, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(terms, ZMQ_SNDHWM, &terms_queue, sizeof terms_queue);
    zmq_setsockopt(terms, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(terms, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    if (zmq_setsockopt(terms, ZMQ_CURVE_SERVERKEY, p.public_key.c_str(), kCurveKeyChars + 1) != 0 ||
        zmq_setsockopt(terms, ZMQ_CURVE_PUBLICKEY, keys.public_key.c_str(), kCurveKeyChars + 1) !=
            0 ||
        zmq_setsockopt(terms, ZMQ_CURVE_SECRETKEY, secret_bin.data(), secret_bin.size()) != 0 ||
        zmq_connect(terms, p.endpoint.c_str()) != 0) {
      zmq_close(terms);
      return Status::IoError(
          ZmqError("setting up the rebuild link to peer " + std::to_string(p.index)));
    }
    s.term_pushes[p.index] = terms;
  }
  spdlog::info("server {} listening on {} (peers on {}), {} kernel threads, {} kernels; CURVE "
               "key {}, {} authorized client key(s)",
               s.config.index, s.config.listen, s.config.peer_listen, s.handler->threads(),
               kernels::FastKernelName(), keys.public_key, s.config.authorized_clients.size());
  return Status::Ok();
}

Status Server::Run(const std::atomic<bool>& stop) {
  Impl& s = *impl_;
  if (!s.worker.joinable()) {
    s.worker_stop = false;
    s.worker = std::thread([&s] { s.WorkerLoop(); });
  }
  while (!stop.load()) {
    // While a PREPARE runs its thread owns the peer sockets, and while the
    // worker runs a request so does it: the peers' socket is polled only
    // when neither does.
    const bool preparing = s.preparing();
    const bool poll_peers = !preparing && !s.worker_busy();
    zmq_pollitem_t items[3] = {{s.router, 0, s.inbox_has_room() ? short{ZMQ_POLLIN} : short{0}, 0},
                               {nullptr, s.worker_done_fd, ZMQ_POLLIN, 0},
                               preparing ? zmq_pollitem_t{nullptr, s.prepare_done_fd, ZMQ_POLLIN, 0}
                                         : zmq_pollitem_t{s.pull, 0, ZMQ_POLLIN, 0}};
    int rc = zmq_poll(items, preparing || poll_peers ? 3 : 2, 200);
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      return Status::IoError(ZmqError("zmq_poll"));
    }
    s.CheckPeerLinks();
    // Also on the 200 ms tick, should an eventfd write have failed.
    if ((items[1].revents & ZMQ_POLLIN) || s.worker_busy()) s.CollectWorkerReply();
    if (preparing) {
      if ((items[2].revents & ZMQ_POLLIN) || s.prepare_finished.load()) {
        s.FinishPrepare();
      } else {
        s.LogProgress();
      }
    } else if (poll_peers && (items[2].revents & ZMQ_POLLIN)) {
      S3ORAM_RETURN_IF_ERROR(s.DrainPeers());
    }
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
    std::vector<std::uint8_t> id_bytes = Bytes(id), frame = Bytes(body);
    zmq_msg_close(&body);
    zmq_msg_close(&id);
    s.Receive(std::move(id_bytes), std::move(frame));
  }
  // A PREPARE under way ends by itself (its peers' timeout bounds it); a
  // sealed shadow survives the restart, the client asks again. The request
  // the worker runs ends too; what waited is dropped, as unread messages are.
  if (s.preparing()) s.prepare_thread.join();
  s.StopWorker();
  spdlog::info("server {} stopping", s.config.index);
  return Status::Ok();
}

}  // namespace s3oram::serverd
