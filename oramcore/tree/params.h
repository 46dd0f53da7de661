// ORAM parameters and their safety.
//
// Overflow model (docs/ARCHITECTURE.md §Parameters). With evictions every A
// accesses in reverse-lexicographic order, a bucket at level d (1 <= d < H) is
// emptied once every 2^d evictions; the blocks it holds when it is emptied are
// among the A * 2^d blocks written to the root since its previous emptying, each
// of which landed below it independently with probability 2^-d. So its load is
// dominated by Binomial(A * 2^d, 2^-d) (mean A). A leaf holds at most the live
// blocks mapped to it: Binomial(N, 2^-H). The root takes exactly A writes.
// One eviction fills H - 1 internal buckets and 2 leaves; by the union bound
//   P(overflow per eviction) <= sum_{d=1}^{H-1} P(Bin(A 2^d, 2^-d) > Z) + 2 P(Bin(N, 2^-H) > Z)
// and Z is safe for lambda when that is <= 2^-lambda and Z >= A.
#pragma once

#include <cstdint>
#include <string>

#include "oramcore/base/status.h"
#include "oramcore/tree/geometry.h"

namespace s3oram {

// Structural limits. Z is bounded by the wire (2 Z m elements per message);
// N by the client's memory: the position map holds one 24-byte entry per
// block (2^32 blocks: 16 TiB of 4 KiB blocks, 96 GiB of map).
inline constexpr std::uint32_t kMaxBucketSize = 1u << 16;
inline constexpr std::uint64_t kMaxCapacityBlocks = std::uint64_t{1} << 32;

// The most servers a filesystem may have (ValidateParams).
inline constexpr std::uint32_t kMaxParties = 16;
// The privacy threshold t of every filesystem, whatever its number of
// servers ℓ: no single server learns anything (two together could). The
// servers reduce products to this degree; servers beyond 2t + 1 = 3 are for
// availability (answers from any three), not for a higher threshold.
inline constexpr std::uint32_t kPrivacyThreshold = 1;

struct OramParams {
  std::uint32_t height = 0;       // H
  std::uint32_t bucket_size = 0;  // Z
  std::uint32_t evict_rate = 0;   // A: one eviction every A accesses
  std::uint32_t block_bytes = 0;  // B: plaintext bytes carried by one ORAM block
  std::uint64_t capacity_blocks = 0;  // N <= A * 2^(H-1)
  std::uint32_t lambda = 80;      // target: P(overflow per eviction) <= 2^-lambda
  std::uint32_t parties = 3;      // ℓ, at most kMaxParties
  std::uint32_t threshold = 1;    // t = kPrivacyThreshold (ValidateParams)
  // Tag elements of the linear share MAC after each slot's data
  // (math/share_mac.h): kShareMacElems for every filesystem made since the
  // MAC exists, 0 for older ones (their state has no "mac_elems" row), whose
  // evictions are checked for consistency but not for consistent wrong values.
  std::uint32_t mac_elems = 4;

  TreeGeometry geometry() const { return TreeGeometry{height, bucket_size}; }
  // Bytes of a sealed block: B + nonce + tag (seal_format.h).
  std::uint64_t sealed_bytes() const;
  // Field elements that pack sealed_bytes() (d).
  std::uint64_t data_elems_per_slot() const;
  // Field elements per slot (m = d + mac_elems).
  std::uint64_t elems_per_slot() const;
  std::uint64_t slot_bytes() const;  // m * sizeof(Elem): bytes of one slot in a share file
  std::uint64_t max_capacity_blocks() const;  // A * 2^(H-1)
  std::string ToString() const;
};

// Natural log of P(Binomial(n, q) > z) for integers 0 <= n, z (n held exactly
// in a double). Accurate in log space for n up to ~2^50 and tails far below
// 2^-200; the building block of the bound below, exposed for its unit test.
double LogBinomialUpperTail(double n, double q, double z);

// log2 of the union bound above (<= 0; -inf if exactly 0). A bound >= 1 is
// clamped to 0 (probability 1), and Z < A gives 0: the root always overflows.
double Log2OverflowPerEviction(std::uint32_t A, std::uint32_t H, std::uint32_t Z,
                               std::uint64_t N);

// Smallest Z >= A with Log2OverflowPerEviction(A, H, Z, N) <= -lambda.
std::uint32_t MinSafeBucketSize(std::uint32_t A, std::uint32_t H, std::uint32_t lambda,
                                std::uint64_t N);

// Structural checks (ranges, N <= A 2^(H-1), Z >= A, parties >= 2t+1, sizes
// that fit the wire and the share file) always apply. The overflow bound applies
// unless allow_unsafe is set, which exists only for comparisons with the paper's
// parameters and is reported loudly by every caller.
Status ValidateParams(const OramParams& p, bool allow_unsafe);

// Safe parameters for a filesystem of `capacity_bytes` with blocks of
// `block_bytes` and eviction rate A: the smallest H with A * 2^(H-1) >= N and
// the smallest safe Z for it.
Result<OramParams> ChooseParams(std::uint64_t capacity_bytes, std::uint32_t block_bytes,
                                std::uint32_t evict_rate, std::uint32_t lambda);

// Per-access cost model (per server unless stated), amortising one eviction over A accesses.
struct CostModel {
  double slots_streamed;           // Z (H+1): retrieval reads every slot of one path
  double slot_multiplications;     // retrieval Z(H+1) + eviction 2 Z^2 (H+1) / A
  double field_mults;              // slot_multiplications * m
  double client_upload_bytes;      // all servers: select shares + root write + matrices / A
                                   // (one server's select and root shares as seeds when t = 1)
  double client_download_bytes;    // all servers: retrieval answers
  double server_to_server_bytes;   // all servers: SMP shares / A
  double storage_bytes_per_server; // share file size
};
CostModel EstimateCost(const OramParams& p);

}  // namespace s3oram
