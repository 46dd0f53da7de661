// One s3oram storage server: answers the client's requests against its
// ShareStore and runs the SMP degree-reduction rounds of an eviction with its
// peers.
//
// Sockets (all persistent): a ROUTER bound at config.listen for clients, a PULL
// bound at config.peer_listen for SMP shares from peers, and one PUSH per peer.
// Requests are handled one at a time in arrival order by a RequestHandler
// (request_handler.h: every check and every store mutation lives there) on a
// worker thread, while the loop keeps receiving: it answers the quick reads
// (STATUS, STATS, LEASE_QUERY, BACKUP_LIST) itself from the state the last
// finished request left (RequestHandler::AnswerQuickRead), so a busy server
// still answers them in milliseconds, unless that client has a request
// waiting (a client's requests are answered in the order it sent them, but
// for what is served beside an eviction's computation, below). An
// EVICT_PREPARE runs its rounds to completion (or to a peer timeout) on a
// thread of its own, while the worker serves the requests the dispatch
// table marks as served during a prepare (the accesses, the lease, STATUS
// with its progress, STATS, the backups' reads) and every other request
// waits until it is done, so the store never sees two mutations of the
// same part interleave. This class
// is the ZeroMQ side: the request loop and the PeerExchange over the peer
// sockets, which buffers SMP shares that arrive early.
#pragma once

#include <atomic>
#include <memory>

#include "oramcore/base/status.h"
#include "serverd/config.h"

namespace s3oram::serverd {

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds sockets and opens the store (if initialised). After this returns OK
  // the server is ready (the caller may notify systemd).
  Status Start();
  // Serves until `stop` becomes true (checked at least every 200 ms).
  Status Run(const std::atomic<bool>& stop);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace s3oram::serverd
