#include "oramcore/protocol/status_probe.h"

#include <utility>

#include "oramcore/protocol/server_addresses.h"
#include "oramcore/wire/transport.h"

namespace s3oram {

Result<std::unique_ptr<StatusProbe>> StatusProbe::Open(const ClientSession& session) {
  std::unique_ptr<StatusProbe> probe(new StatusProbe());
  // The session's own set logs each change of a server's liveness; this one,
  // beside it, does not (it would log every change twice).
  ServerAddresses addresses = AddressesOf(session.config());
  addresses.log_liveness = false;
  S3ORAM_ASSIGN_OR_RETURN(probe->servers_, ConnectServers(session.options().connect, addresses));
  probe->fs_id_ = session.config().fs_id;
  probe->epoch_ = session.counters().epoch;
  return probe;
}

ServerViews StatusProbe::Ask(std::chrono::milliseconds timeout) {
  auto next_header = [this] {
    wire::Header h;
    h.fs_id = fs_id_;
    h.epoch = epoch_;
    h.seq = ++seq_;
    return h;
  };
  return ClientSession::ViewsOf(
      *servers_, fs_id_,
      ClientSession::AskEveryServerOf(*servers_, next_header, ClientSession::ViewRequests(),
                                      timeout, timeout));
}

Result<wire::Message> StatusProbe::StatusOf(std::size_t server, std::chrono::milliseconds timeout) {
  wire::Header h;
  h.fs_id = fs_id_;
  h.epoch = epoch_;
  h.seq = ++seq_;
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies,
      servers_->ExchangeWith({server}, {wire::Encode(h, wire::StatusRequest{})}, h,
                             wire::MessageType::kStatusReply, TransportOptions{timeout, timeout}));
  return std::move(replies[0]);
}

}  // namespace s3oram
