// ServerSet: how the client side (the client, rebuild, restore) talks to the
// ℓ servers of a filesystem, whatever carries the frames. Requests go out as
// encoded frames and come back as decoded replies, one per server, matched to
// the request by seq and type.
//
// Implementations: NetworkServerSet (wire/transport.h: ZeroMQ under CURVE,
// resends, deadlines) for every real use; tests/support/in_process_cluster.h
// runs the servers' real request handlers in this process, without sockets,
// so that the client's access and eviction logic can be tested
// deterministically, with a server that is down or lies.
//
// Contract of ExchangeAnswers (every implementation):
//  * request r is handed to each server of the subset after request r - 1
//    (a server sees one client's requests in the order sent);
//  * a server that cannot answer request r (down, silent past the deadline,
//    refused handshake, an undecodable reply) fails r and every later request
//    of the call on that server, with a Status naming the server (index and
//    endpoint; SilenceStatus for a server silent past the deadline,
//    DownStatus for one found down); the other servers still get every
//    request (a pipelined sender has sent them already), except that a server
//    known to be down when the call begins fails it at once, and then under
//    Wait::kEvery nothing is sent to anyone;
//  * under Wait::kEvery a request needs every server: the first failure is
//    request r's answer from every server that has not answered it yet, and
//    they are not waited for; so requests after a failed one may have been
//    applied by some servers. Under Wait::kEach every server is on its own:
//    one server's failure is its own answer and nobody else's, and the call
//    returns when every server answered or failed each request;
//  * under Wait::kQuorum (options.quorum = q servers, 1 <= q <= the subset's
//    size; 0 means all of them) a request is answered once q servers
//    answered it (a reply or an ErrorReply), and fails for every server that
//    has not answered it once more than n - q servers failed it (as under
//    kEvery); servers known to be down when the call begins fail at once,
//    and if fewer than q remain nothing is sent to anyone. The call returns
//    when every request is answered or failed. A server that has not
//    answered one of them then *lags*: its answer is LaggingStatus, with
//    Answer::lagging set, and the set keeps the request (a copy of its
//    frame): later requests to that server go after it, a new connection
//    sends it again, it fails as any request does (a deadline, the server
//    found down), and its reply or failure is handed out exactly once, by
//    TakeLagged or AwaitLagged. No server lags by more than kMaxLagging
//    requests: a call that would leave more waits for it instead;
//  * otherwise an answer is the server's reply as sent: of the expected type
//    or an ErrorReply.
// ExchangeViews (and Exchange, ExchangeWith, ExchangeSequence) are
// Wait::kEvery with the replies turned into one result per request: the
// failure, or an ErrorReply from any server as that server's Status with
// "server i (endpoint)" as context (the first by server order, except that a
// server reporting damaged storage wins: ResultOfReplies), or one reply per
// server of the subset, in the subset's order, each of the expected type.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/wire/server_down.h"
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
  // Wait::kQuorum: how many servers' answers a request needs (0: every
  // server of the subset).
  std::size_t quorum = 0;
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
  virtual ~ServerSet() = default;

  virtual std::size_t size() const = 0;
  // Where server i is, for messages ("tcp://host:port").
  virtual const std::string& endpoint(std::size_t i) const = 0;
  virtual const TransportStats& stats() const = 0;
  // Whether this client counts server i as down, and why (NetworkServerSet
  // checks a server that leaves a request open; others never say so).
  // Thread-safe in every implementation: it may be asked beside a call.
  virtual std::optional<ServerDown> Down(std::size_t /*i*/) const { return std::nullopt; }

  // Sends frames[i] to server i (every i at once) and waits for every reply
  // of type expected_reply.
  Result<std::vector<wire::Message>> Exchange(const std::vector<std::vector<std::uint8_t>>& frames,
                                              const wire::Header& header,
                                              wire::MessageType expected_reply,
                                              const TransportOptions& options);
  // Same, for a subset of servers (indices), e.g. STATUS to one server;
  // frames[k] goes to servers[k].
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
  // subset at once, in order, without waiting for replies, and collects
  // every reply; result r is as ExchangeWith's for request r.
  std::vector<Result<std::vector<wire::Message>>> ExchangeSequence(
      const std::vector<std::size_t>& servers, const std::vector<Outgoing>& requests,
      const TransportOptions& options);

  // A request as ExchangeViews takes it: its frames stay the caller's.
  struct RequestView {
    wire::Header header;
    wire::MessageType expected_reply;
    const std::vector<std::vector<std::uint8_t>>* frames;
  };
  // What request r got from each server of the subset (Answers[r][k] from
  // servers[k]): its reply, or why there is none.
  struct Answer {
    Result<wire::Message> reply;  // of the expected type, or an ErrorReply
    // From the first send of the call to this reply or failure (a first
    // request includes connecting).
    std::chrono::microseconds after{0};
    // Wait::kQuorum: the server had not answered when the call returned;
    // `reply` is LaggingStatus, and the answer comes from TakeLagged or
    // AwaitLagged.
    bool lagging = false;
  };
  using Answers = std::vector<Answer>;
  enum class Wait {
    kEvery,   // a request needs every server: the first failure fails it for all
    kEach,    // each server on its own (status, a quorum's answers)
    kQuorum,  // a request needs options.quorum servers; the others may lag
  };
  // The most requests a server may be left answering under kQuorum (four
  // pipelined chunks of accesses).
  static constexpr std::size_t kMaxLagging = 32;
  // The one operation an implementation provides (the contract above). Every
  // request has one frame per server of the subset (else every answer is
  // InvalidArgument).
  virtual std::vector<Answers> ExchangeAnswers(const std::vector<std::size_t>& servers,
                                               const std::vector<RequestView>& requests,
                                               const TransportOptions& options, Wait wait) = 0;
  // A lagging request's end (Wait::kQuorum): the server's reply (of the
  // expected type or an ErrorReply) or its failure.
  struct Lagged {
    std::size_t server = 0;
    std::uint64_t seq = 0;
    wire::MessageType expected_reply = wire::MessageType::kError;
    Result<wire::Message> reply{Status::Unavailable("not answered")};
  };
  // The lagging requests that ended since they were last asked for, in the
  // order each server was sent them; each is handed out once. Never waits.
  virtual std::vector<Lagged> TakeLagged() { return {}; }
  // Waits for server `server`'s answer to its lagging request `seq` (its
  // earlier lagging requests end first; TakeLagged hands them out) and hands
  // it out: the reply, or the failure (the request's deadline, the server
  // found down). NotFound if no such request lags or it was handed out.
  virtual Result<wire::Message> AwaitLagged(std::size_t server, std::uint64_t seq) {
    return Status::NotFound("server " + std::to_string(server) + " has no lagging request seq " +
                            std::to_string(seq));
  }
  // How many of server i's requests lag (sent, not answered yet).
  virtual std::size_t Lagging(std::size_t /*i*/) const { return 0; }

  // ExchangeAnswers under Wait::kEvery, one result per request (the
  // contract above); the three above are views of it.
  std::vector<Result<std::vector<wire::Message>>> ExchangeViews(
      const std::vector<std::size_t>& servers, const std::vector<RequestView>& requests,
      const TransportOptions& options);

  // Server servers[k]'s answer as a result: an ErrorReply becomes that
  // server's Status with "server i (endpoint)" as context.
  Result<wire::Message> ReplyOrError(std::size_t server, Answer answer) const;

  // A server that answered that its own stored shares failed their digests
  // (an ErrorReply of code kDamaged, seen by ReplyOrError or by an exchange
  // under Wait::kEvery), with that answer's message: the first one since
  // they were last taken, then handed out once. Thread-safe.
  struct DamageReport {
    std::size_t server = 0;
    std::string message;
  };
  std::vector<DamageReport> TakeDamageReports();

 private:
  void NoteDamage(std::size_t server, const Status& st) const;
  mutable std::mutex damage_mu_;
  mutable std::vector<DamageReport> damage_reports_;
  // Request r's result from the replies of the subset's servers (replies[k]
  // from servers[k], each of the expected type or an ErrorReply), as the
  // contract says.
  Result<std::vector<wire::Message>> ResultOfReplies(const std::vector<std::size_t>& servers,
                                                     std::vector<wire::Message> replies) const;
};

// The failure of a request server `who` ("tcp://host:port", perhaps with
// more detail) did not answer within `deadline`: Unavailable, "timeout: ...".
// Every implementation reports silence so; IsSilence tells it (with any
// context added in front) from an answer (an ErrorReply, which is also
// Unavailable when a server is too busy to queue a request).
Status SilenceStatus(const std::string& who, std::chrono::milliseconds deadline,
                     wire::MessageType expected_reply, const std::string& detail = "");
// The failure of a request to a server found down (wire/liveness_monitor.h):
// Unavailable, "down: server i (endpoint) is down since ...", with what to
// do. IsSilence is true of it too.
Status DownStatus(std::size_t server, const std::string& endpoint, const ServerDown& down);
bool IsSilence(const Status& st);
// The answer of a server that lags (Wait::kQuorum): Unavailable,
// "lagging: server i (endpoint) has not answered yet"; IsSilence is false.
Status LaggingStatus(std::size_t server, const std::string& endpoint);

// Where a filesystem's servers are and how this client proves who it is.
struct ServerAddresses {
  std::vector<std::string> endpoints;
  std::vector<std::string> server_keys;  // CURVE public keys (Z85), one per endpoint
  std::string client_key_file;           // the client's CURVE secret key file
  // The largest reply frame accepted (wire::LimitsFor(shape).reply_bytes
  // when the shape is known).
  std::uint64_t max_reply_bytes = std::uint64_t{32} << 20;
  // Whether this set logs each change of a server's liveness (LivenessMonitor):
  // a process's main set does; a second set beside it (StatusProbe) does
  // not, so that each change is logged once.
  bool log_liveness = true;
};

// Makes the ServerSet a client uses. Empty means over the network
// (ConnectOverNetwork, wire/transport.h); tests pass an in-process one.
using ServerConnector =
    std::function<Result<std::unique_ptr<ServerSet>>(const ServerAddresses& addresses)>;

}  // namespace s3oram
