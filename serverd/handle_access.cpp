// An access on the server: RETRIEVE (the path inner product), WRITE_ROOT and
// RETRIEVE_WRITE_ROOT (the previous access's root write beside the retrieval).
#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "oramcore/math/field.h"
#include "oramcore/math/kernels.h"
#include "oramcore/math/slot_digest.h"
#include "oramcore/tree/geometry.h"
#include "serverd/lie.h"
#include "serverd/request_handler_internal.h"

namespace s3oram::serverd {

Status RequestHandler::Impl::CheckRetrieve(std::uint64_t leaf,
                                           const std::vector<Elem>& select) const {
  const auto& shape = store->meta().shape;
  TreeGeometry geo{shape.height, shape.bucket_size};
  if (!geo.is_leaf(leaf)) return Status::InvalidArgument("retrieve: leaf out of range");
  if (select.size() != geo.path_slots()) {
    return Status::InvalidArgument("retrieve: select vector has " + std::to_string(select.size()) +
                                   " entries, expected " + std::to_string(geo.path_slots()));
  }
  return Status::Ok();
}

Status RequestHandler::Impl::CheckWriteRoot(std::uint32_t slot,
                                            const std::vector<Elem>& share) const {
  const auto& shape = store->meta().shape;
  if (slot >= shape.bucket_size) return Status::InvalidArgument("write_root: slot out of range");
  if (share.size() != shape.elems_per_slot) {
    return Status::InvalidArgument("write_root: share has " + std::to_string(share.size()) +
                                   " elements, expected " + std::to_string(shape.elems_per_slot));
  }
  return Status::Ok();
}

Result<wire::Body> RequestHandler::Impl::HandleRetrieve(const wire::RetrieveRequest& req) {
  S3ORAM_RETURN_IF_ERROR(CheckRetrieve(req.leaf, req.select));
  return Retrieve(req.leaf, req.select);
}

Result<wire::Body> RequestHandler::Impl::Retrieve(std::uint64_t leaf,
                                                  const std::vector<Elem>& select) {
  const LiveTree& tree = store->tree();
  const auto& shape = store->meta().shape;
  TreeGeometry geo{shape.height, shape.bucket_size};
  const auto t0 = Clock::now();
  const std::size_t bucket = tree.bucket_elems();
  const std::size_t Z = shape.bucket_size;
  path_buffer.resize(bucket * geo.levels());
  std::vector<const Elem*> buckets;
  // A bucket never written is a hole of the share file: its shares read
  // as zeros and add nothing to the inner product, so it is left out
  // (with its part of the select vector) instead of being read, which on
  // a young filesystem would fill the page cache with zero pages of most
  // of the tree. The answer is the same either way. The root is always
  // read: its last slot may have been written a moment ago, and a
  // filesystem need not report data that is still only in the page
  // cache; every other bucket is written by an eviction's commit, which
  // is on disk before any retrieval runs.
  std::vector<Elem> written_select;
  std::vector<std::uint64_t> written;  // bucket numbers behind `buckets`
  bool skipped = false;
  for (std::uint32_t l = 0; l <= geo.height; ++l) {
    const std::uint64_t b = geo.BucketOnPath(leaf, l);
    std::vector<bool> hole{false};
    if (l > 0) {
      S3ORAM_ASSIGN_OR_RETURN(hole, tree.Holes(b, 1));
    }
    if (hole.at(0)) {
      // Left out as zeros: its digests must say zeros too, or the disk lost
      // data that was written there.
      const auto d = tree.Digests(b);
      for (std::size_t s = 0; s < d.size(); ++s) {
        if (d[s] != digest::SlotDigest{}) {
          return tree.DamagedSlot(b, s, "it reads as never written, but was written");
        }
      }
      skipped = true;
      continue;
    }
    std::span<Elem> scratch(path_buffer.data() + l * bucket, bucket);
    S3ORAM_ASSIGN_OR_RETURN(const Elem* view, tree.BucketForRead(b, scratch));
    buckets.push_back(view);
    written.push_back(b);
    written_select.insert(written_select.end(), select.begin() + static_cast<std::ptrdiff_t>(l * Z),
                          select.begin() + static_cast<std::ptrdiff_t>((l + 1) * Z));
  }
  const auto t_read = Clock::now();
  const std::size_t m = shape.elems_per_slot;
  wire::RetrieveReply reply;
  reply.answer.assign(m, 0);
  if (!buckets.empty()) {
    const std::vector<Elem>& sel = skipped ? written_select : select;
    auto product = [&](kernels::ColumnRange r) {
      kernels::PathInnerProduct(buckets, Z, m, sel, reply.answer.data(), r);
    };
    if (computing.load()) {
      product({0, m});
    } else {
      ParallelColumns(*pool, m, product);
    }
    S3ORAM_RETURN_IF_ERROR(CheckAnswer(written, buckets, sel, reply.answer));
    if (Lies("retrieve") && !reply.answer.empty()) {
      reply.answer[0] = field::Add(reply.answer[0], 1);
    }
  }
  const auto t_end = Clock::now();
  {
    const std::lock_guard lock(aside_mu);  // STATS is answered on another thread
    ++stats.retrieves;
    stats.retrieve_read_us += Micros(t_read - t0);
    stats.retrieve_kernel_us += Micros(t_end - t_read);
  }
  last_retrieve_us = Micros(t_end - t0);
  spdlog::trace("retrieve leaf {}: {:.2f} ms", leaf,
                std::chrono::duration<double, std::milli>(t_end - t0).count());
  return wire::Body{std::move(reply)};
}

Status RequestHandler::Impl::CheckAnswer(const std::vector<std::uint64_t>& path_buckets,
                                         const std::vector<const Elem*>& views,
                                         std::span<const Elem> sel,
                                         std::span<const Elem> answer) const {
  const LiveTree& tree = store->tree();
  const std::size_t Z = store->meta().shape.bucket_size;
  std::vector<digest::SlotDigest> stored;
  stored.reserve(path_buckets.size() * Z);
  for (std::uint64_t b : path_buckets) {
    const auto d = tree.Digests(b);
    stored.insert(stored.end(), d.begin(), d.end());
  }
  digest::SlotDigest got{};
  if (tree.digest_key().Digest(answer, &got) && got == digest::Combine(sel, stored)) {
    return Status::Ok();
  }
  const std::size_t bucket = tree.bucket_elems();
  for (std::size_t i = 0; i < path_buckets.size(); ++i) {
    S3ORAM_RETURN_IF_ERROR(tree.VerifyBuckets(path_buckets[i], {views[i], bucket}));
  }
  return Status::Damaged("server " + std::to_string(config.index) +
                         ": a retrieval answer failed its digest check although every slot "
                         "of the path verifies (memory or CPU fault?); refusing to answer");
}

Result<wire::Body> RequestHandler::Impl::HandleRetrieveWriteRoot(
    const wire::Header& h, const wire::RetrieveWriteRootRequest& req) {
  S3ORAM_RETURN_IF_ERROR(CheckWriteRoot(req.slot, req.share));
  S3ORAM_RETURN_IF_ERROR(CheckRetrieve(req.leaf, req.select));
  const auto t0 = Clock::now();
  std::optional<wire::Body> answer;
  S3ORAM_RETURN_IF_ERROR(
      store->tree().WriteSlot(1, req.slot, req.share, h.seq, h.epoch, [&]() -> Status {
        S3ORAM_ASSIGN_OR_RETURN(wire::Body b, Retrieve(req.leaf, req.select));
        answer = std::move(b);
        return Status::Ok();
      }));
  // The root write's share of the time: all of it but the retrieval's own.
  const std::uint64_t total = Micros(Clock::now() - t0);
  const std::uint64_t retrieval = last_retrieve_us;
  {
    const std::lock_guard lock(aside_mu);
    ++stats.root_writes;
    stats.root_write_us += total > retrieval ? total - retrieval : 0;
  }
  spdlog::debug("retrieve+write_root seq {} slot {}", h.seq, req.slot);
  return std::move(*answer);
}

Result<wire::Body> RequestHandler::Impl::HandleWriteRoot(const wire::Header& h,
                                                         const wire::WriteRootRequest& req) {
  S3ORAM_RETURN_IF_ERROR(CheckWriteRoot(req.slot, req.share));
  const auto t0 = Clock::now();
  S3ORAM_RETURN_IF_ERROR(store->tree().WriteSlot(1, req.slot, req.share, h.seq, h.epoch));
  {
    const std::lock_guard lock(aside_mu);
    ++stats.root_writes;
    stats.root_write_us += Micros(Clock::now() - t0);
  }
  spdlog::debug("write_root seq {} slot {}", h.seq, req.slot);
  return wire::Body{wire::WriteRootReply{}};
}

}  // namespace s3oram::serverd
