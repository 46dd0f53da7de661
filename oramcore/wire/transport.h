// NetworkServerSet, the ServerSet (wire/server_set.h) every real client
// uses: the client's connections to the ℓ servers, one persistent ZeroMQ DEALER
// socket per server, reused for every request (never reopened per access),
// always under CURVE: each server is authenticated by its public key, and the
// client by its keypair. A server that refuses the client's key fails the
// exchange at once with PermissionDenied naming the server and the fix. One
// whose handshakes keep failing without a refusal (its key does not match,
// or a relay in front of it drops every connection while it is down) is left
// to the liveness check below, whose down verdict says so.
//
// Requests are idempotent by construction (see docs/ARCHITECTURE.md), so the
// same frame may be sent again: at once when the connection it went out on was
// replaced, else after a silence paced by the link that doubles every time
// (ExchangeWith); a reply is accepted only if its seq and type match the
// outstanding request, so late replies to earlier attempts are dropped. A
// server that stays silent for the whole budget yields Unavailable.
//
// A server that leaves a request open past a short time is checked on a
// connection of its own (wire/liveness_monitor.h; the time grows with what
// the request should take at the learned pace, and a large request sent
// before any large exchange was timed waits until another server answered
// it, or 10 s): one that does not answer
// the check is down, its open requests fail then (DownStatus, within about
// 5 s instead of the deadline), and later requests that need it fail at once
// until it answers a check again or connects anew.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/wire/server_set.h"
#include "oramcore/wire/wire.h"

namespace s3oram {

class NetworkServerSet final : public ServerSet {
 public:
  // Connects (lazily, as ZeroMQ does) to every endpoint; server_keys[i] is
  // server i's CURVE public key (Z85). A server that sends a frame larger
  // than max_reply_bytes is disconnected by ZeroMQ before the frame is
  // buffered (ZMQ_MAXMSGSIZE; the request then fails as for a silent
  // server): callers that know the store's shape pass
  // LimitsFor(shape).reply_bytes (wire/message_limits.h); the default covers
  // every reply that does not depend on it (STATUS, LEASE_*, BACKUP_GET).
  static constexpr std::uint64_t kDefaultMaxReplyBytes = std::uint64_t{32} << 20;
  // Replies ZeroMQ queues per server before it stops reading from the
  // connection: more than a pipelined batch, far fewer than a flood.
  static constexpr int kReceiveQueue = 64;
  static Result<std::unique_ptr<NetworkServerSet>> Connect(
      const std::vector<std::string>& endpoints, const std::vector<std::string>& server_keys,
      const CurveKeypair& client, std::uint64_t max_reply_bytes = kDefaultMaxReplyBytes,
      bool log_liveness = true);
  ~NetworkServerSet() override;
  NetworkServerSet(const NetworkServerSet&) = delete;
  NetworkServerSet& operator=(const NetworkServerSet&) = delete;

  std::size_t size() const override;
  const std::string& endpoint(std::size_t i) const override;
  const TransportStats& stats() const override { return stats_; }
  std::optional<ServerDown> Down(std::size_t i) const override;

  // What a request of request_bytes (all servers' frames) and its replies
  // should take at the pace learned so far: a round trip plus their bytes
  // (zero pace until a large exchange was timed).
  std::chrono::steady_clock::duration ExpectedTransfer(std::size_t request_bytes,
                                                       wire::MessageType expected_reply) const;
  // How long a request of `request_bytes` (all servers' frames together)
  // expecting `expected_reply` is waited for before it is first sent again
  // on a live connection: resend_after, or four times what the request and
  // its reply should take at the pace learned from earlier exchanges, if
  // longer (capped at the deadline). Slower links and busier machines only
  // make it longer.
  std::chrono::steady_clock::duration FirstResendSilence(std::size_t request_bytes,
                                                         wire::MessageType expected_reply,
                                                         const TransportOptions& options) const;

  // Pipelining: every request goes to each server of the subset at once, in
  // order, without waiting for replies (a server handles one connection's
  // requests in the order they arrive). A server that times out (`deadline`
  // after it answered the request before), or whose handshake fails, fails
  // that request and every later one (and the other servers stop waiting for
  // them under Wait::kEvery). A reconnection resends a server's unanswered
  // requests in order; a silence only the first of them.
  std::vector<Answers> ExchangeAnswers(const std::vector<std::size_t>& servers,
                                       const std::vector<RequestView>& requests,
                                       const TransportOptions& options, Wait wait) override;
  // Lagging requests (Wait::kQuorum): sent again, in order and before
  // anything newer, on a connection that replaced theirs; their replies are
  // taken whenever the server's socket is read; one found down or silent
  // past the deadline fails them.
  std::vector<Lagged> TakeLagged() override;
  Result<wire::Message> AwaitLagged(std::size_t server, std::uint64_t seq) override;
  std::size_t Lagging(std::size_t i) const override;

 private:
  NetworkServerSet() = default;
  // Sends server i's open lagging requests again where the connection they
  // went out on was replaced.
  Status ResendLagging(std::size_t i);
  // Without waiting: resends (ResendLagging), takes the replies waiting on
  // server i's socket, and fails its open lagging requests if it was found
  // down or the first of them is past its deadline (checking its liveness
  // once it is open for long).
  void TendLagging(std::size_t i);
  class OneExchange;  // one ExchangeAnswers call (transport.cpp)
  struct Impl;
  std::unique_ptr<Impl> impl_;
  TransportStats stats_;
};

// The ServerConnector for the network: loads the client's CURVE key from
// addresses.client_key_file and connects a NetworkServerSet.
Result<std::unique_ptr<ServerSet>> ConnectOverNetwork(const ServerAddresses& addresses);
// `connector`'s set, or ConnectOverNetwork's if it is empty.
Result<std::unique_ptr<ServerSet>> ConnectServers(const ServerConnector& connector,
                                                  const ServerAddresses& addresses);

}  // namespace s3oram
