// InProcessCluster: ℓ s3oram servers in this process, each the real
// serverd::RequestHandler over a real ShareStore in its own directory, wired
// to each other by an in-process PeerExchange (the eviction's SMP rounds) and
// to clients by an in-process ServerSet (oramcore/wire/server_set.h). No
// sockets, no CURVE, no resends: what a client sends reaches the handler as
// the same frame the network would carry, and the handler's reply frame is
// decoded as NetworkServerSet decodes it.
//
// It is the in-memory Env of the protocol (LevelDB's model): the client's
// access and eviction logic run against it deterministically, and a test
// makes any one server
//  * down (SetDown): its requests fail at once with Unavailable naming it,
//    as the network transport reports a server silent past its deadline,
//    and the set's Down() says so; its peers' SMP shares are not delivered
//    to it, and it sends none;
//  * slow (SetDelay): each request waits that long before it is handled;
//  * a liar (SetLiar): each of its decoded replies passes through a function
//    that may change it before the client sees it;
//  * lagging (SetLagging): under ServerSet::Wait::kQuorum its requests are
//    held, not served, and answered as lagging (up to kMaxLagging); held
//    requests are served, in order, before anything else that reaches it,
//    when the client awaits one (AwaitLagged), and, once it lags no more,
//    when the client takes the ends (TakeLagged). A held request it is down
//    for when it is served fails, as a real server's would.
// A server handles one client's requests in order; an EVICT_PREPARE's
// computation runs on a thread of its own while the requests the handler
// serves during a prepare (RequestHandler::ServedDuringPrepare) are answered
// and the rest wait for it, as serverd's Server does.
//
// Thread safety: the cluster's methods may be called from any thread; each
// server handles one request at a time. The cluster must outlive every
// ServerSet its connector made.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/wire/server_set.h"
#include "oramcore/wire/wire.h"

namespace s3oram::testing {

class InProcessCluster {
 public:
  struct Options {
    std::size_t servers = 3;
    // How long a server's eviction waits for a peer's SMP shares before it
    // fails the round (serverd's peer_timeout_ms).
    std::chrono::milliseconds peer_timeout{5000};
    // fsync the stores (off: the tests do not cut power).
    bool sync = false;
  };

  // Servers with empty data directories under `dir` (server0, server1, ...),
  // waiting for INIT, as freshly started s3oram-serverd processes are.
  static Result<std::unique_ptr<InProcessCluster>> Create(const std::string& dir,
                                                          const Options& options);
  ~InProcessCluster();
  InProcessCluster(const InProcessCluster&) = delete;
  InProcessCluster& operator=(const InProcessCluster&) = delete;

  std::size_t size() const;
  // "in-process://server<i>"; what clients' FsConfig::servers list.
  std::vector<std::string> endpoints() const;

  // For ClientOptions::connect and OramClient::Initialize: every call makes a
  // new client connection (a ServerSet) to this cluster's servers. It checks
  // that the addresses name this cluster's servers, in order.
  ServerConnector connector();

  void SetDown(std::size_t server, bool down);
  void SetDelay(std::size_t server, std::chrono::milliseconds delay);
  void SetLagging(std::size_t server, bool lagging);
  using Liar = std::function<void(wire::Message& reply)>;
  void SetLiar(std::size_t server, Liar liar);  // empty: honest again

  // Stops server i as a crash would between two requests (its running
  // eviction computation, if any, is waited for first) and starts it again on
  // the same directory.
  Status Restart(std::size_t server);

  // Server i as a disk replacement leaves it: its data directory emptied,
  // started again waiting for INIT (or a rebuild).
  Status Wipe(std::size_t server);
  // Sees every REBUILD_TERMS a survivor sends the rebuild target `to`
  // (called under the cluster's lock; must not call into the cluster).
  using TermsObserver = std::function<void(std::size_t to, const wire::RebuildTerms& terms)>;
  void ObserveTerms(TermsObserver observer);
  // The servers' CURVE public keys (Z85), for a state's server_keys: no link
  // uses them in process, but a rebuild's masks derive from them.
  const std::vector<std::string>& public_keys() const;

  // What server i applied: its store's applied-evictions count (0 before INIT).
  std::uint64_t applied_evictions(std::size_t server);
  // Requests server i has handled, of every kind.
  std::uint64_t requests_handled(std::size_t server);

  struct Server;  // one server's handler, peers and fault settings
  struct Hub;     // the SMP shares in flight between the servers, who is down

 private:
  InProcessCluster() = default;
  class Connection;
  bool down(std::size_t server) const;
  bool lagging(std::size_t server) const;
  std::unique_ptr<Hub> hub_;  // outlives servers_ (the destructor clears them first)
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::string> public_keys_;
  std::string dir_;
  Options options_;
};

}  // namespace s3oram::testing
