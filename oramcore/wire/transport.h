// The client's connections to the ℓ servers: one persistent ZeroMQ DEALER
// socket per server, reused for every request (never reopened per access),
// always under CURVE: each server is authenticated by its public key, and the
// client by its keypair. A server that refuses the client's key, or whose key
// does not match, fails the exchange at once with PermissionDenied naming the
// server and the likely fix, instead of timing out.
//
// Requests are idempotent by construction (see docs/ARCHITECTURE.md), so the
// same frame may be sent again: at once when the connection it went out on was
// replaced, else after a silence paced by the link that doubles every time
// (ExchangeWith); a reply is accepted only if its seq and type match the
// outstanding request, so late replies to earlier attempts are dropped. A
// server that stays silent for the whole budget yields Unavailable.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/crypto/curve_keys.h"
#include "oramcore/wire/wire.h"

namespace s3oram {

struct TransportOptions {
  // The least silence before the request is sent again over a connection
  // that was not replaced (longer for requests the link needs longer for,
  // and doubled after every resend).
  std::chrono::milliseconds resend_after{2000};
  // Total time one exchange may take before it fails with Unavailable (in a
  // sequence, each request from the answer to the one before it).
  std::chrono::milliseconds deadline{30000};
};

struct TransportStats {
  std::uint64_t bytes_sent = 0;      // request frames, all servers, retries included
  std::uint64_t bytes_received = 0;  // accepted reply frames
  std::uint64_t resends = 0;
  // The part of bytes_sent that was resent (after a silence or a replaced
  // connection): bytes_sent - bytes_resent is what the requests themselves
  // cost, whatever the link's or the machine's delays made the client repeat.
  std::uint64_t bytes_resent = 0;
};

class ServerSet {
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
  static Result<std::unique_ptr<ServerSet>> Connect(
      const std::vector<std::string>& endpoints, const std::vector<std::string>& server_keys,
      const CurveKeypair& client, std::uint64_t max_reply_bytes = kDefaultMaxReplyBytes);
  ~ServerSet();
  ServerSet(const ServerSet&) = delete;
  ServerSet& operator=(const ServerSet&) = delete;

  std::size_t size() const;
  const std::string& endpoint(std::size_t i) const;

  // Sends frames[i] to server i (every i at once) and waits for every reply.
  // expected_reply is the reply type for each request; an ErrorReply from any
  // server turns into that server's Status (with its endpoint as context).
  Result<std::vector<wire::Message>> Exchange(const std::vector<std::vector<std::uint8_t>>& frames,
                                              const wire::Header& header,
                                              wire::MessageType expected_reply,
                                              const TransportOptions& options);
  // Same, for a subset of servers (indices), e.g. STATUS to one server.
  // How long a request of `request_bytes` (all servers' frames together)
  // expecting `expected_reply` is waited for before it is first sent again
  // on a live connection: resend_after, or four times what the request and
  // its reply should take at the pace learned from earlier exchanges, if
  // longer (capped at the deadline). Slower links and busier machines only
  // make it longer.
  std::chrono::steady_clock::duration FirstResendSilence(std::size_t request_bytes,
                                                         wire::MessageType expected_reply,
                                                         const TransportOptions& options) const;
  Result<std::vector<wire::Message>> ExchangeWith(
      const std::vector<std::size_t>& servers, const std::vector<std::vector<std::uint8_t>>& frames,
      const wire::Header& header, wire::MessageType expected_reply,
      const TransportOptions& options);

  // One request of a sequence: frames[k] goes to the k-th server of the
  // subset, all under `header` (each request its own seq).
  struct Outgoing {
    wire::Header header;
    wire::MessageType expected_reply = wire::MessageType::kError;
    std::vector<std::vector<std::uint8_t>> frames;
  };
  // Pipelining: sends every request of `requests` to each server of the
  // subset at once, in order, without waiting for replies (a server handles
  // one connection's requests in the order they arrive), and collects every
  // reply. The result of request r is as ExchangeWith's; a server that times
  // out (`deadline` after it answered the request before), or whose handshake
  // fails, fails that request and every later one (and the other servers
  // stop waiting for them). A reconnection resends a server's unanswered
  // requests in order; a silence only the first of them.
  // ExchangeWith is the sequence of one.
  std::vector<Result<std::vector<wire::Message>>> ExchangeSequence(
      const std::vector<std::size_t>& servers, const std::vector<Outgoing>& requests,
      const TransportOptions& options);

  const TransportStats& stats() const { return stats_; }

 private:
  ServerSet() = default;
  // A request as ExchangeViews sends it: its frames are the caller's.
  struct RequestView {
    wire::Header header;
    wire::MessageType expected_reply;
    const std::vector<std::vector<std::uint8_t>>* frames;
  };
  std::vector<Result<std::vector<wire::Message>>> ExchangeViews(
      const std::vector<std::size_t>& servers, const std::vector<RequestView>& requests,
      const TransportOptions& options);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  TransportStats stats_;
};

}  // namespace s3oram
