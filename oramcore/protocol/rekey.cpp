#include "oramcore/protocol/rekey.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "oramcore/base/fault_point.h"

namespace s3oram {
namespace {

using Phase = RekeyProgress::Phase;

// The blocks the filesystem holds from `first` on (each one re-sealing access).
std::uint64_t HeldFrom(const OramClient& client, std::uint64_t first) {
  std::uint64_t n = 0;
  for (BlockId id = first; id < client.params().capacity_blocks; ++id) {
    if (client.Holds(id)) ++n;
  }
  return n;
}

// Rounds of the purge: the round that is filling when it starts (its root
// may hold slots written before), then one eviction per leaf.
std::uint64_t PurgeRounds(const OramParams& p) { return p.geometry().num_leaves() + 1; }

// Runs `items` (reads) as ordinary accesses; the first failure, named.
Status ReadAll(OramClient& client, const std::vector<OramClient::BatchItem>& items,
               const char* why) {
  auto results = client.AccessMany(items);
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Status st =
        i < results.size() ? results[i].status() : Status::Unavailable("the access was not run");
    if (!st.ok()) {
      return st.WithContext(std::string(why) + " block " + std::to_string(items[i].id));
    }
  }
  return Status::Ok();
}

}  // namespace

RekeyCost EstimateRekey(const OramClient& client) {
  const OramParams& p = client.params();
  const std::uint64_t A = p.evict_rate;
  RekeyCost cost;
  const auto& r = client.rekey();
  if (r && r->phase == Phase::kPurge) {
    const std::uint64_t ne = client.counters().ne;
    // Rounds to the target, the one filling now included.
    cost.evictions = r->purge_until > ne ? r->purge_until - ne : 0;
    cost.purge_accesses = cost.evictions * A;
    return cost;
  }
  cost.reseal_accesses = HeldFrom(client, r ? r->next_block : 0);
  // The purge begins in the round the re-seal ends in and ends with the
  // eviction of the last of PurgeRounds more.
  cost.purge_accesses = (PurgeRounds(p) + 1) * A;
  cost.evictions = (cost.total_accesses() + A - 1) / A;
  return cost;
}

Result<RekeyReport> RunRekey(OramClient& client, const RekeyOptions& options) {
  if (!client.rekey()) {
    return Status::FailedPrecondition("the state records no master-key rotation under way");
  }
  const OramParams& p = client.params();
  const std::uint64_t capacity = p.capacity_blocks;
  const std::uint64_t first_ne = client.counters().ne;
  RekeyReport report;
  RekeyProgress r = *client.rekey();
  auto progress = [&](std::string_view phase, std::uint64_t done, std::uint64_t total) {
    if (options.progress) options.progress(phase, done, total);
  };

  if (r.phase == Phase::kReseal) {
    const std::uint64_t total = HeldFrom(client, r.next_block);
    progress("reseal", 0, total);
    while (r.next_block < capacity) {
      std::vector<OramClient::BatchItem> items;
      BlockId id = r.next_block;
      for (; id < capacity && items.size() < OramClient::kMaxPipelined; ++id) {
        if (client.Holds(id)) items.push_back({AccessOp::kRead, id, {}, nullptr});
      }
      if (!items.empty()) {
        S3ORAM_RETURN_IF_ERROR(ReadAll(client, items, "re-sealing"));
        report.resealed += items.size();
      }
      r.next_block = id;
      S3ORAM_RETURN_IF_ERROR(client.session().RecordRekeyProgress(r));
      FaultPoint("rekey.reseal.after_chunk");
      progress("reseal", report.resealed, total);
    }
    // Every block the filesystem holds is sealed under the new key now; the
    // root filling at this moment may still hold older slots, so the purge
    // counts from the round after it.
    r.phase = Phase::kPurge;
    r.purge_until = client.round() + PurgeRounds(p);
    S3ORAM_RETURN_IF_ERROR(client.session().RecordRekeyProgress(r));
    FaultPoint("rekey.purge.recorded");
    spdlog::info("rekey: every block re-sealed; purging until eviction {}", r.purge_until);
  }

  // Ordinary reads, of every block id in turn (held or not: each is an
  // access like any other), until the evictions have gone round the tree.
  const std::uint64_t start_ne = client.counters().ne;
  const std::uint64_t total = r.purge_until > start_ne ? r.purge_until - start_ne : 0;
  // Each round is evict_rate accesses; twice the rounds left is a bound no
  // working client reaches, so a purge that does not advance stops.
  const std::uint64_t max_accesses = 2 * (total + 2) * p.evict_rate + OramClient::kMaxPipelined;
  BlockId next = r.next_block % capacity;
  while (client.counters().ne < r.purge_until) {
    if (report.purge_accesses > max_accesses) {
      return Status::Protocol("rekey: the purge made " + std::to_string(report.purge_accesses) +
                              " accesses but the evictions did not reach " +
                              std::to_string(r.purge_until));
    }
    std::vector<OramClient::BatchItem> items;
    for (std::size_t i = 0; i < OramClient::kMaxPipelined; ++i) {
      items.push_back({AccessOp::kRead, next, {}, nullptr});
      next = (next + 1) % capacity;
    }
    S3ORAM_RETURN_IF_ERROR(ReadAll(client, items, "purging: reading"));
    report.purge_accesses += items.size();
    const std::uint64_t ne = client.counters().ne;
    progress("purge", std::min(ne - start_ne, total), total);
  }
  report.evictions = client.counters().ne - first_ne;
  S3ORAM_RETURN_IF_ERROR(client.session().EndRekey());
  spdlog::info("rekey: done; the previous master key is forgotten");
  return report;
}

}  // namespace s3oram
