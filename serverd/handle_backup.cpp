// The client-state backups a server keeps for the filesystem's devices:
// BACKUP_PUT, BACKUP_LIST, BACKUP_GET and who may send them.
#include <string>
#include <utility>

#include "serverd/backup_store.h"
#include "serverd/lie.h"
#include "serverd/request_handler_internal.h"

namespace s3oram::serverd {

Status RequestHandler::Impl::CheckBackupRead(const wire::Header& h) const {
  if (!store || !backups) {
    return Status::FailedPrecondition("server holds no filesystem; run s3oram init");
  }
  if (h.fs_id != store->meta().fs_id) {
    return Status::FailedPrecondition("backup request for filesystem " + HexId(h.fs_id) +
                                      " but this server holds " + HexId(store->meta().fs_id));
  }
  return Status::Ok();
}

Status RequestHandler::Impl::CheckBackupWrite(const wire::Header& h) {
  S3ORAM_RETURN_IF_ERROR(CheckRequest(h, true));
  if (!backups) return Status::FailedPrecondition("server holds no filesystem");
  if (lease.held() && h.epoch != lease.holder_epoch) {
    return Status::LeaseHeld("fenced: epoch " + std::to_string(h.epoch) +
                             " may not replace the backup while epoch " +
                             std::to_string(lease.holder_epoch) + " holds the filesystem");
  }
  if (!lease.held() && h.epoch < store->meta().epoch) {
    return Status::LeaseHeld("stale epoch " + std::to_string(h.epoch) + ": epoch " +
                             std::to_string(store->meta().epoch) +
                             " has used the filesystem since");
  }
  return Status::Ok();
}

Result<wire::Body> RequestHandler::Impl::HandleBackupPut(const wire::BackupPutRequest& req) {
  S3ORAM_ASSIGN_OR_RETURN(
      std::uint64_t received,
      backups->Put(req.generation, req.offset, req.total, req.last, req.shares, req.key_epoch));
  return wire::Body{wire::BackupPutReply{req.generation, received}};
}

Result<wire::Body> RequestHandler::Impl::HandleBackupGet(const wire::BackupGetRequest& req) {
  wire::BackupGetReply reply;
  reply.generation = req.generation;
  S3ORAM_ASSIGN_OR_RETURN(reply.shares,
                          backups->Get(req.generation, req.offset, req.count, &reply.total));
  return wire::Body{std::move(reply)};
}

std::vector<wire::BackupInfo> RequestHandler::Impl::BackupListToSay() const {
  auto list = backups->List();
  if (Lies("counters")) list.push_back(wire::BackupInfo{UINT64_MAX, 1});
  return list;
}

Result<wire::Body> RequestHandler::Impl::HandleBackupList() {
  return wire::Body{wire::BackupListReply{BackupListToSay()}};
}

}  // namespace s3oram::serverd
