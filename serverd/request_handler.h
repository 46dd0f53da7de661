// What one s3oram server does with one client request frame, without sockets:
// decode, check (fs id, epoch fencing, every index and length against the
// store's shape), apply to the ShareStore, encode the reply. The SMP rounds of
// an EVICT_PREPARE go through a PeerExchange, so the whole request path runs in
// process (the fuzz harness) as well as behind Server's ZeroMQ sockets.
//
// Contract: Handle never throws on malformed input and never reads outside
// the frame; every request that is not applied gets an ErrorReply frame (with
// the request's seq when the header is readable). Requests are handled one at
// a time (not thread-safe). The one exception is background eviction: an
// EVICT_PREPARE's Handle only checks it and snapshots the root, and its
// computation (minutes at large blocks) runs in RunPrepare, which a caller
// may run on another thread while Handle serves the frames
// ServedDuringPrepare admits (the accesses, lease, STATUS/STATS and rebuild
// reads of live buckets); the two
// share no state but the locked progress and counters. EVICT_RESULT answers
// when the computation is done (running it first if no thread did).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/wire/wire.h"
#include "serverd/config.h"
#include "serverd/peer_exchange.h"
#include "serverd/share_store.h"

namespace s3oram::serverd {

class RequestHandler {
 public:
  // Checks the party layout of `config` (at least two peers, indices in
  // range), starts the kernel thread pool and opens the store in
  // config.data_dir if one exists (NotFound is not an error: the server waits
  // for INIT). `peers` must outlive the handler.
  static Result<std::unique_ptr<RequestHandler>> Create(const ServerConfig& config,
                                                        PeerExchange& peers);
  ~RequestHandler();
  RequestHandler(const RequestHandler&) = delete;
  RequestHandler& operator=(const RequestHandler&) = delete;

  // Handles one client frame and returns the reply frame.
  std::vector<std::uint8_t> Handle(std::span<const std::uint8_t> frame);

  // Whether the last Handle started an EVICT_PREPARE whose computation waits
  // for RunPrepare.
  bool HasPendingPrepare() const;
  // Runs that computation (the SMP rounds into the shadow, then its seal) and
  // records its outcome for EVICT_RESULT. While it runs, only frames
  // ServedDuringPrepare admits may be handed to Handle (on another thread);
  // the caller keeps the rest, in order, for after it.
  void RunPrepare();
  static bool ServedDuringPrepare(std::span<const std::uint8_t> frame);
  // The (eviction, attempt) of an EVICT_PREPARE frame, nullopt for any other
  // or undecodable frame. A PREPARE that arrives while another attempt's
  // computation runs means the client gave up on that one.
  static std::optional<std::pair<std::uint64_t, std::uint32_t>> PrepareAttemptOf(
      std::span<const std::uint8_t> frame);
  // The quick reads: STATUS, STATS, LEASE_QUERY and BACKUP_LIST. They
  // change nothing, so a server answers them while another thread runs a
  // request (an access reading cold buckets from a busy disk takes seconds):
  // AnswerQuickRead is thread-safe and answers from the state the last
  // finished request left (published by Handle, or by PublishQuickState
  // after a PREPARE's computation ended), with the running PREPARE's
  // progress as of now. nullopt: a request the checks would refuse (another
  // filesystem, no store, a store being rebuilt) or an undecodable frame;
  // the caller hands it to Handle in order, which says why.
  static bool IsQuickRead(std::span<const std::uint8_t> frame);
  std::optional<std::vector<std::uint8_t>> AnswerQuickRead(std::span<const std::uint8_t> frame);
  // Publishes the state the quick reads answer from again (no other thread
  // may run Handle or RunPrepare meanwhile).
  void PublishQuickState();
  // Thread-safe: what STATUS says of the PREPARE under way (for the log).
  wire::StatusReply Progress() const;

  // The store, or nullptr before INIT. Valid until the next Handle.
  const ShareStore* store() const;
  // Kernel threads in use.
  std::size_t threads() const;

  // The handler's state and methods (serverd/request_handler_internal.h): named here for
  // the handler's own files and its dispatch table; opaque to everyone else.
  struct Impl;

 private:
  RequestHandler() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace s3oram::serverd
