// What one s3oram server does with one client request frame, without sockets:
// decode, check (fs id, epoch fencing, every index and length against the
// store's shape), apply to the ShareStore, encode the reply. The SMP rounds of
// an EVICT_PREPARE go through a PeerExchange, so the whole request path runs in
// process (the fuzz harness) as well as behind Server's ZeroMQ sockets.
//
// Contract: Handle never throws on malformed input and never reads outside
// the frame; every request that is not applied gets an ErrorReply frame (with
// the request's seq when the header is readable). Requests are handled one at
// a time (not thread-safe); the store never sees two mutations interleave.
// The one exception: while an EVICT_PREPARE runs (minutes at large blocks),
// another thread may ask AnswerAside for STATUS and STATS, which are answered
// from what they said when the PREPARE began plus its progress.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
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

  // Whether `frame` is an EVICT_PREPARE: the request Server runs on a thread
  // of its own, between BeginAside and EndAside, so that STATUS and STATS
  // are answered meanwhile.
  static bool IsEvictPrepare(std::span<const std::uint8_t> frame);
  // Called with no Handle running, before the PREPARE's Handle starts on the
  // other thread: takes the snapshot AnswerAside replies from.
  void BeginAside();
  // Thread-safe while that Handle runs: the reply to a STATUS (with the
  // eviction's progress) or STATS frame; nullopt for any other frame, which
  // the caller keeps and hands to Handle, in order, after the PREPARE.
  std::optional<std::vector<std::uint8_t>> AnswerAside(std::span<const std::uint8_t> frame);
  // Called once that Handle has returned.
  void EndAside();
  // Thread-safe: what STATUS says of the PREPARE under way (for the log).
  wire::StatusReply Progress() const;

  // The store, or nullptr before INIT. Valid until the next Handle.
  const ShareStore* store() const;
  // Kernel threads in use.
  std::size_t threads() const;

 private:
  RequestHandler() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace s3oram::serverd
