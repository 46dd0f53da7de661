// Which request a server accepts, from whom, and which method runs it: one
// row per request type (libfuse's lo_oper table is the model). Dispatch
// (request_handler.cpp) finds the row of a decoded body's type, refuses it
// without a store if the row says so, runs the check the row's Sender names,
// then the method. A type without a row (a reply, a peer message) is refused.
//
// during_prepare marks what Server hands to Handle while an eviction's
// PREPARE computes on another thread (request_handler.h): the accesses, the
// lease, STATUS/STATS and the reads of the client-state backups, which touch
// neither the shadow nor the job, and the rebuild reads of live buckets.
// (A backup read still waits while a BACKUP_PUT waits behind the PREPARE:
// Server's ServeAside.)
#include <algorithm>
#include <array>
#include <span>

#include "serverd/request_handler_internal.h"

namespace s3oram::serverd {

namespace {

using Impl = RequestHandler::Impl;
using Sender = Impl::Sender;
using Type = wire::MessageType;

// Adapts a handler method to the table's signature: the body as its type,
// with the header first if the method takes it.
template <class Request, auto Method>
Result<wire::Body> Run(Impl& impl, const wire::Message& msg) {
  const Request& body = std::get<Request>(msg.body);
  if constexpr (std::is_invocable_v<decltype(Method), Impl&, const wire::Header&, const Request&>) {
    return (impl.*Method)(msg.header, body);
  } else if constexpr (std::is_invocable_v<decltype(Method), Impl&, const wire::Header&>) {
    return (impl.*Method)(msg.header);
  } else if constexpr (std::is_invocable_v<decltype(Method), Impl&, const Request&>) {
    return (impl.*Method)(body);
  } else {
    return (impl.*Method)();
  }
}

// clang-format off
constexpr std::array kRoutes = {
  //            request type                     sender                    store  prepare  method
  Impl::Route{Type::kStatusRequest,             Sender::kAnyone,          false, true,
              &Run<wire::StatusRequest, &Impl::HandleStatus>},
  Impl::Route{Type::kStatsRequest,              Sender::kAnyone,          false, true,
              &Run<wire::StatsRequest, &Impl::HandleStats>},
  Impl::Route{Type::kInitRequest,               Sender::kSelfChecked,     false, false,
              &Run<wire::InitRequest, &Impl::HandleInit>},
  // The lease: ACQUIRE and RELEASE decide for themselves whom to answer how.
  Impl::Route{Type::kLeaseAcquireRequest,       Sender::kSameFilesystem,  true,  true,
              &Run<wire::LeaseAcquireRequest, &Impl::HandleLeaseAcquire>},
  Impl::Route{Type::kLeaseReleaseRequest,       Sender::kSameFilesystem,  true,  true,
              &Run<wire::LeaseReleaseRequest, &Impl::HandleLeaseRelease>},
  Impl::Route{Type::kLeaseQueryRequest,         Sender::kSameFilesystem,  true,  true,
              &Run<wire::LeaseQueryRequest, &Impl::HandleLeaseQuery>},
  // An access.
  Impl::Route{Type::kRetrieveRequest,           Sender::kLeaseHolder,     true,  true,
              &Run<wire::RetrieveRequest, &Impl::HandleRetrieve>},
  Impl::Route{Type::kWriteRootRequest,          Sender::kLeaseHolder,     true,  true,
              &Run<wire::WriteRootRequest, &Impl::HandleWriteRoot>},
  Impl::Route{Type::kRetrieveWriteRootRequest,  Sender::kLeaseHolder,     true,  true,
              &Run<wire::RetrieveWriteRootRequest, &Impl::HandleRetrieveWriteRoot>},
  // An eviction, and the checks the client runs before it commits one
  // (EVICT_CHECK reads the prepared shadow, MAC_OPEN the committed tree).
  Impl::Route{Type::kEvictPrepareRequest,       Sender::kLeaseHolder,     true,  false,
              &Run<wire::EvictPrepareRequest, &Impl::HandlePrepare>},
  Impl::Route{Type::kEvictResultRequest,        Sender::kLeaseHolder,     true,  false,
              &Run<wire::EvictResultRequest, &Impl::HandleResult>},
  Impl::Route{Type::kEvictCommitRequest,        Sender::kLeaseHolder,     true,  false,
              &Run<wire::EvictCommitRequest, &Impl::HandleCommit>},
  Impl::Route{Type::kEvictCheckRequest,         Sender::kLeaseHolder,     true,  false,
              &Run<wire::EvictCheckRequest, &Impl::HandleEvictCheck>},
  Impl::Route{Type::kMacOpenRequest,            Sender::kLeaseHolder,     true,  false,
              &Run<wire::MacOpenRequest, &Impl::HandleMacOpen>},
  // Read-only and the same for every client: no lease, so a scrub runs
  // beside a mount (s3oram scrub, its timer). AGE_FILL writes: the holder's.
  Impl::Route{Type::kScrubRequest,              Sender::kSameFilesystem,  true,  false,
              &Run<wire::ScrubRequest, &Impl::HandleScrub>},
  Impl::Route{Type::kParityRequest,             Sender::kSameFilesystem,  true,  false,
              &Run<wire::ParityRequest, &Impl::HandleParity>},
  Impl::Route{Type::kSlotShareRequest,          Sender::kSameFilesystem,  true,  false,
              &Run<wire::SlotShareRequest, &Impl::HandleSlotShare>},
  Impl::Route{Type::kAgeFillRequest,            Sender::kLeaseHolder,     true,  false,
              &Run<wire::AgeFillRequest, &Impl::HandleAgeFill>},
  // Rebuilding a server: the target checks its own session; a survivor
  // is read for the holder of its lease only (the rebuild client takes
  // it, so no mount can change the tree under the copy).
  Impl::Route{Type::kRebuildBeginRequest,       Sender::kSelfChecked,     false, false,
              &Run<wire::RebuildBeginRequest, &Impl::HandleRebuildBegin>},
  // A rebuild read of the tree beside a PREPARE: a mount catches a server
  // up while its evictions go on (ServedDuringPrepare leaves bucket 0 out).
  Impl::Route{Type::kRebuildReadRequest,        Sender::kLeaseHolder,     true,  true,
              &Run<wire::RebuildReadRequest, &Impl::HandleRebuildRead>},
  Impl::Route{Type::kRebuildWriteRequest,       Sender::kSelfChecked,     false, false,
              &Run<wire::RebuildWriteRequest, &Impl::HandleRebuildWrite>},
  Impl::Route{Type::kRebuildFinishRequest,      Sender::kSelfChecked,     false, false,
              &Run<wire::RebuildFinishRequest, &Impl::HandleRebuildFinish>},
  // The client-state backups. Their reads are answered beside a PREPARE:
  // a client opening the filesystem after a crash lists them while the
  // servers finish the eviction the dead client began.
  Impl::Route{Type::kBackupPutRequest,          Sender::kBackupWriter,    true,  false,
              &Run<wire::BackupPutRequest, &Impl::HandleBackupPut>},
  Impl::Route{Type::kBackupListRequest,         Sender::kBackupReader,    true,  true,
              &Run<wire::BackupListRequest, &Impl::HandleBackupList>},
  Impl::Route{Type::kBackupGetRequest,          Sender::kBackupReader,    true,  true,
              &Run<wire::BackupGetRequest, &Impl::HandleBackupGet>},
};
// clang-format on

}  // namespace

const RequestHandler::Impl::Route* RequestHandler::Impl::FindRoute(wire::MessageType type) {
  const auto it = std::find_if(kRoutes.begin(), kRoutes.end(),
                               [type](const Route& r) { return r.type == type; });
  return it == kRoutes.end() ? nullptr : &*it;
}

std::span<const RequestHandler::Impl::Route> RequestHandler::Impl::Routes() { return kRoutes; }

}  // namespace s3oram::serverd
