// Read-only checks that run beside a mount: SCRUB (digests), PARITY, SLOT_SHARE,
// and AGE_FILL (every bucket written with a sharing of empty slots).
#include <spdlog/spdlog.h>

#include <cstring>
#include <string>
#include <utility>

#include "oramcore/math/age_fill.h"
#include "oramcore/math/slot_digest.h"
#include "serverd/request_handler_internal.h"

namespace s3oram::serverd {

namespace {

// A scrub's or parity check's damaged slots, in the server's log with the repair.
void LogDamage(std::uint64_t first, std::uint64_t count, const std::vector<std::uint8_t>& damaged,
               std::uint32_t server) {
  std::size_t bad = 0;
  for (std::uint8_t f : damaged) bad += f;
  if (bad == 0) return;
  spdlog::error(
      "scrub: {} damaged slots in buckets {}..{} of server {}'s share file; "
      "repair: s3oram rebuild --server {}",
      bad, first, first + count - 1, server, server);
}

}  // namespace

Status RequestHandler::Impl::CheckScrubRange(std::uint64_t first, std::uint32_t count,
                                             const char* what) const {
  S3ORAM_RETURN_IF_ERROR(CheckRange(first, count, what));
  const std::uint64_t bytes = std::uint64_t{count} * store->scrub().bucket_elems() * sizeof(Elem);
  if (count > 1 && bytes > wire::kMaxScrubBytes) {
    return Status::InvalidArgument(
        std::string(what) + ": " + std::to_string(count) + " buckets are " + std::to_string(bytes) +
        " bytes, more than one request may read (" + std::to_string(wire::kMaxScrubBytes) + ")");
  }
  return Status::Ok();
}

Result<bool> RequestHandler::Impl::IsRootSnapshotRequest(std::uint64_t first,
                                                         std::uint32_t count) const {
  if (first != wire::kRootSnapshotBucket) return false;
  if (count != 1) return Status::InvalidArgument("the root snapshot is one bucket (count 1)");
  return true;
}

Result<wire::Body> RequestHandler::Impl::HandleScrub(const wire::ScrubRequest& req) {
  S3ORAM_ASSIGN_OR_RETURN(const bool root, IsRootSnapshotRequest(req.first_bucket, req.count));
  if (root) {
    wire::ScrubReply reply;
    if (store->scrub().HoldsPendingRootSnapshot()) {
      S3ORAM_ASSIGN_OR_RETURN(reply.damaged, store->scrub().ScrubRootSnapshot(nullptr, nullptr));
      LogRootSnapshotDamage(reply.damaged);
    }
    return wire::Body{std::move(reply)};
  }
  S3ORAM_RETURN_IF_ERROR(CheckScrubRange(req.first_bucket, req.count, "scrub"));
  wire::ScrubReply reply;
  reply.first_bucket = req.first_bucket;
  S3ORAM_ASSIGN_OR_RETURN(reply.damaged, store->scrub().Scrub(req.first_bucket, req.count));
  LogDamage(req.first_bucket, req.count, reply.damaged, config.index);
  return wire::Body{std::move(reply)};
}

std::vector<Elem> RequestHandler::Impl::Flatten(const std::vector<digest::SlotDigest>& d) {
  static_assert(wire::kParityElemsPerSlot == digest::kDigestElems);
  std::vector<Elem> out;
  out.reserve(d.size() * digest::kDigestElems);
  for (const auto& x : d) out.insert(out.end(), x.begin(), x.end());
  return out;
}

void RequestHandler::Impl::LogRootSnapshotDamage(const std::vector<std::uint8_t>& damaged) const {
  std::size_t bad = 0;
  for (std::uint8_t f : damaged) bad += f;
  if (bad > 0) {
    spdlog::error(
        "scrub: {} damaged slots in the root snapshot (root.bin) of server {}; "
        "repair: s3oram rebuild --server {}",
        bad, config.index, config.index);
  }
}

Result<wire::Body> RequestHandler::Impl::HandleParity(const wire::ParityRequest& req) {
  S3ORAM_ASSIGN_OR_RETURN(const bool root, IsRootSnapshotRequest(req.first_bucket, req.count));
  const digest::DigestKey key(req.seed, static_cast<std::size_t>(store->scrub().slot_elems()));
  if (root) {
    wire::ParityReply reply;
    if (store->scrub().HoldsPendingRootSnapshot()) {
      std::vector<digest::SlotDigest> digests;
      S3ORAM_ASSIGN_OR_RETURN(reply.damaged, store->scrub().ScrubRootSnapshot(&key, &digests));
      reply.digests = Flatten(digests);
      LogRootSnapshotDamage(reply.damaged);
    }
    return wire::Body{std::move(reply)};
  }
  S3ORAM_RETURN_IF_ERROR(CheckScrubRange(req.first_bucket, req.count, "parity"));
  std::vector<digest::SlotDigest> digests;
  wire::ParityReply reply;
  reply.first_bucket = req.first_bucket;
  S3ORAM_ASSIGN_OR_RETURN(reply.damaged,
                          store->scrub().Scrub(req.first_bucket, req.count, key, &digests));
  reply.digests = Flatten(digests);
  LogDamage(req.first_bucket, req.count, reply.damaged, config.index);
  return wire::Body{std::move(reply)};
}

Result<wire::Body> RequestHandler::Impl::HandleSlotShare(const wire::SlotShareRequest& req) {
  const std::uint64_t z = store->meta().shape.bucket_size;
  if (req.slot >= z) {
    return Status::InvalidArgument("slot share: slot " + std::to_string(req.slot) +
                                   " >= bucket size " + std::to_string(z));
  }
  if (req.bucket == wire::kRootSnapshotBucket) {
    S3ORAM_ASSIGN_OR_RETURN(auto share, store->scrub().RootSnapshotSlot(req.slot));
    return wire::Body{wire::SlotShareReply{req.bucket, req.slot, std::move(share)}};
  }
  S3ORAM_RETURN_IF_ERROR(CheckRange(req.bucket, 1, "slot share"));
  const LiveTree& tree = store->tree();
  std::vector<Elem> bucket(tree.bucket_elems());
  S3ORAM_RETURN_IF_ERROR(tree.ReadBucket(req.bucket, bucket));
  S3ORAM_RETURN_IF_ERROR(tree.VerifyBuckets(req.bucket, bucket));
  const std::size_t m = static_cast<std::size_t>(tree.slot_elems());
  const auto first = bucket.begin() + static_cast<std::ptrdiff_t>(req.slot * m);
  return wire::Body{wire::SlotShareReply{
      req.bucket, req.slot, std::vector<Elem>(first, first + static_cast<std::ptrdiff_t>(m))}};
}

Result<wire::Body> RequestHandler::Impl::HandleAgeFill(const wire::AgeFillRequest& req) {
  AgeFill& fill = store->age_fill();
  S3ORAM_RETURN_IF_ERROR(CheckScrubRange(req.first_bucket, req.count, "age fill"));
  S3ORAM_RETURN_IF_ERROR(fill.CheckUnused());  // before expanding up to 256 MiB
  const std::size_t be = static_cast<std::size_t>(fill.bucket_elems());
  std::vector<Elem> data(std::size_t{req.count} * be);
  for (std::uint32_t i = 0; i < req.count; ++i) {
    age_fill::BucketShares(req.seed, req.first_bucket + i, threshold, config.index,
                           std::span<Elem>(data).subspan(i * be, be));
  }
  S3ORAM_RETURN_IF_ERROR(fill.FillUnusedBuckets(req.first_bucket, data));
  if (req.first_bucket + req.count - 1 == fill.num_buckets()) {
    spdlog::info("age fill: every bucket of server {}'s tree written (benchmarks only)",
                 config.index);
  }
  return wire::Body{wire::AgeFillReply{req.first_bucket}};
}

}  // namespace s3oram::serverd
