// StatusProbe: asks the servers of an open filesystem what `s3oram status`
// shows of them (ServerViews: STATUS, state backups, lease) on connections
// of its own, so that a thread beside the client's can ask while the client
// is in the middle of an access or waits on an eviction (the mount daemon's
// control socket, fused/control_socket.h).
//
// Guarantees: it sends only the quick reads (ClientSession::ViewRequests),
// which change nothing on a server and which a server answers beside a busy
// worker (serverd/server.h); they go under the client's epoch with sequence
// numbers of the probe's own, which no server records (only mutations raise
// a server's applied seq). After Open it shares nothing with the session.
// Thread-compatible: one Ask at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "oramcore/base/status.h"
#include "oramcore/protocol/client_session.h"
#include "oramcore/wire/server_set.h"

namespace s3oram {

class StatusProbe {
 public:
  // Connects (lazily, as ZeroMQ does) to the servers `session` names, as
  // `session` does; nothing is sent yet.
  static Result<std::unique_ptr<StatusProbe>> Open(const ClientSession& session);
  // Every server at once, each on its own: a server that is down costs
  // `timeout` once and is reported with its failure, the others in full.
  ServerViews Ask(std::chrono::milliseconds timeout);
  // STATUS of one server, with its header (whose fs_id says which
  // filesystem it serves); its failure if it does not answer in `timeout`.
  Result<wire::Message> StatusOf(std::size_t server, std::chrono::milliseconds timeout);

 private:
  StatusProbe() = default;
  std::unique_ptr<ServerSet> servers_;
  FsId fs_id_{};
  std::uint64_t epoch_ = 0;
  std::uint64_t seq_ = 0;
};

}  // namespace s3oram
