#include "oramcore/protocol/scrub.h"

#include <algorithm>
#include <string>

#include "oramcore/base/random.h"
#include "oramcore/protocol/consistency.h"

namespace s3oram {

Result<ScrubFindings> ScrubWholeStore(
    const OramParams& p, const ScrubAsk& ask,
    const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const std::uint64_t buckets = p.geometry().num_buckets();
  const std::uint64_t bucket_bytes =
      std::uint64_t{p.bucket_size} * p.elems_per_slot() * sizeof(field::Elem);
  const std::uint64_t per_request =
      std::clamp<std::uint64_t>(wire::kMaxScrubBytes / bucket_bytes, 1, buckets);
  ScrubFindings f;
  if (progress) progress(0, buckets);
  for (std::uint64_t first = 1; first <= buckets;) {
    const auto count = static_cast<std::uint32_t>(std::min(per_request, buckets - first + 1));
    S3ORAM_ASSIGN_OR_RETURN(wire::ScrubReply r, ask(first, count));
    if (r.first_bucket != first || r.damaged.size() != std::uint64_t{count} * p.bucket_size) {
      return Status::Protocol("scrub of buckets " + std::to_string(first) + "+" +
                              std::to_string(count) + " answered with " +
                              std::to_string(r.damaged.size()) + " flags from bucket " +
                              std::to_string(r.first_bucket));
    }
    for (std::size_t k = 0; k < r.damaged.size(); ++k) {
      if (r.damaged[k] == 0) continue;
      ++f.damaged;
      if (f.listed.size() < kScrubListed) {
        f.listed.push_back(
            {first + k / p.bucket_size, static_cast<std::uint32_t>(k % p.bucket_size)});
      }
    }
    first += count;
    f.buckets += count;
    if (progress) progress(f.buckets, buckets);
  }
  // The root snapshot a pending eviction reads: as much the server's as the tree.
  S3ORAM_ASSIGN_OR_RETURN(wire::ScrubReply r, ask(wire::kRootSnapshotBucket, 1));
  if (!r.damaged.empty() && r.damaged.size() != p.bucket_size) {
    return Status::Protocol("scrub of the root snapshot answered with " +
                            std::to_string(r.damaged.size()) + " flags");
  }
  for (std::size_t k = 0; k < r.damaged.size(); ++k) {
    if (r.damaged[k] == 0) continue;
    ++f.damaged;
    if (f.listed.size() < kScrubListed) {
      f.listed.push_back({wire::kRootSnapshotBucket, static_cast<std::uint32_t>(k)});
    }
  }
  return f;
}

Result<ConsistencyFindings> ScrubAndCompare(
    const OramParams& p, const std::vector<std::vector<field::Elem>>& parity_rows,
    const std::vector<std::size_t>& servers, const ParityAsk& ask,
    const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const std::uint64_t buckets = p.geometry().num_buckets();
  const std::uint64_t bucket_bytes =
      std::uint64_t{p.bucket_size} * p.elems_per_slot() * sizeof(field::Elem);
  const std::uint64_t per_request =
      std::clamp<std::uint64_t>(wire::kMaxScrubBytes / bucket_bytes, 1, buckets);
  const std::size_t Z = p.bucket_size;
  ConsistencyFindings f;
  f.servers.resize(p.parties);
  auto note = [](ScrubFindings& into, std::uint64_t bucket, std::uint32_t slot) {
    ++into.damaged;
    if (into.listed.size() < kScrubListed) into.listed.push_back({bucket, slot});
  };
  if (progress) progress(0, buckets);
  for (std::uint64_t first = 1; first <= buckets;) {
    const auto count = static_cast<std::uint32_t>(std::min(per_request, buckets - first + 1));
    // Drawn only now, after every share of the range exists: an error cannot
    // have been aimed at this key.
    wire::ParitySeed seed;
    random::Bytes(seed);
    S3ORAM_ASSIGN_OR_RETURN(std::vector<wire::ParityReply> replies, ask(first, count, seed));
    if (replies.size() != servers.size()) {
      return Status::Protocol("parity of buckets " + std::to_string(first) + " answered by " +
                              std::to_string(replies.size()) + " servers, not " +
                              std::to_string(servers.size()));
    }
    std::vector<std::vector<field::Elem>> digests;
    std::vector<std::vector<std::uint8_t>> damaged;
    for (std::size_t x = 0; x < replies.size(); ++x) {
      const std::size_t i = servers[x];
      auto& r = replies[x];
      if (r.first_bucket != first || r.damaged.size() != std::uint64_t{count} * Z ||
          r.digests.size() != std::uint64_t{count} * Z * wire::kParityElemsPerSlot) {
        return Status::Protocol("server " + std::to_string(i) + " answered the parity of buckets " +
                                std::to_string(first) + "+" + std::to_string(count) +
                                " with another range or size");
      }
      for (std::size_t k = 0; k < r.damaged.size(); ++k) {
        if (r.damaged[k] != 0) {
          note(f.servers[i], first + k / Z, static_cast<std::uint32_t>(k % Z));
        }
      }
      f.servers[i].buckets += count;
      digests.push_back(std::move(r.digests));
      damaged.push_back(std::move(r.damaged));
    }
    for (std::size_t k : InconsistentSlots(parity_rows, digests, damaged)) {
      note(f.inconsistent, first + k / Z, static_cast<std::uint32_t>(k % Z));
    }
    f.inconsistent.buckets += count;
    first += count;
    if (progress) progress(f.inconsistent.buckets, buckets);
  }
  // The root snapshot a pending eviction reads (wire::kRootSnapshotBucket):
  // a live root slot a server changed just before PREPARE copied the root
  // lives on only there, once the next round's root writes replace it.
  // Compared when every server holds one; a server without one while others
  // hold it cannot run that eviction either, and says so when asked to.
  wire::ParitySeed seed;
  random::Bytes(seed);
  S3ORAM_ASSIGN_OR_RETURN(std::vector<wire::ParityReply> replies,
                          ask(wire::kRootSnapshotBucket, 1, seed));
  if (replies.size() != servers.size()) {
    return Status::Protocol("parity of the root snapshot answered by " +
                            std::to_string(replies.size()) + " servers, not " +
                            std::to_string(servers.size()));
  }
  std::size_t held = 0;
  std::vector<std::vector<field::Elem>> digests;
  std::vector<std::vector<std::uint8_t>> damaged;
  for (std::size_t x = 0; x < replies.size(); ++x) {
    const std::size_t i = servers[x];
    auto& r = replies[x];
    if (r.damaged.empty() && r.digests.empty()) continue;  // holds none
    if (r.first_bucket != wire::kRootSnapshotBucket || r.damaged.size() != Z ||
        r.digests.size() != Z * wire::kParityElemsPerSlot) {
      return Status::Protocol("server " + std::to_string(i) +
                              " answered the parity of the root snapshot with another size");
    }
    ++held;
    for (std::size_t k = 0; k < Z; ++k) {
      if (r.damaged[k] != 0)
        note(f.servers[i], wire::kRootSnapshotBucket, static_cast<std::uint32_t>(k));
    }
    digests.push_back(std::move(r.digests));
    damaged.push_back(std::move(r.damaged));
  }
  if (held == servers.size()) {
    f.root_snapshot_checked = true;
    for (std::size_t k : InconsistentSlots(parity_rows, digests, damaged)) {
      note(f.inconsistent, wire::kRootSnapshotBucket, static_cast<std::uint32_t>(k));
    }
  }
  return f;
}

std::string DescribeDamage(const ScrubFindings& f) {
  std::string out;
  const std::size_t shown = std::min<std::size_t>(f.listed.size(), 3);
  for (std::size_t i = 0; i < shown; ++i) {
    if (!out.empty()) out += ", ";
    out += (f.listed[i].bucket == wire::kRootSnapshotBucket
                ? std::string("root snapshot (root.bin)")
                : "bucket " + std::to_string(f.listed[i].bucket)) +
           " slot " + std::to_string(f.listed[i].slot);
  }
  if (f.damaged > shown) out += " and " + std::to_string(f.damaged - shown) + " more";
  return out;
}

}  // namespace s3oram
