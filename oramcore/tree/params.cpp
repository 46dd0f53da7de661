// ORAM parameters: the overflow bound of params.h, the search for a safe bucket
// size, structural validation and the cost model.
//
// Numerics. The bound needs binomial upper tails P(Bin(n, q) > Z) for n up to
// ~2^40 (leaves of a tall tree) and values down to 2^-200 and below, so
// everything is computed in natural-log space:
//  * log C(n, k) = sum_{i=1..k} log((n - k + i) / i): every term is the log of
//    a ratio of exactly representable integers, so the error is O(k) ulps of
//    the terms instead of the ~n log n ulps that lgamma(n+1) - lgamma(n-k+1)
//    would cost through cancellation (3e13 * 2^-53 ~ 4e-3 nats at n = 2^40).
//  * The tail is a sum of positive terms walked away from the mode with the
//    exact ratio T(k+1)/T(k) = (n-k)/(k+1) * q/(1-q), scaled by its first (and
//    largest) term, so nothing underflows and nothing cancels.
//  * When Z is below the mode the tail is >= ~1/2 and is computed as
//    1 - P(X <= Z) with the lower sum (itself <= ~1/2, so no cancellation).
#include "oramcore/tree/params.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "oramcore/crypto/seal_format.h"
#include "oramcore/math/elem_packing.h"
#include "oramcore/math/field.h"
#include "oramcore/math/share_mac.h"

namespace s3oram {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Relative size below which the rest of a geometric-bounded sum is dropped:
// far below double's 2^-53 resolution of the running sum.
constexpr double kSumTolerance = 1e-18;

// Beyond this many steps a walk is pathological (a mean of billions); the
// remaining terms are then bounded by the geometric estimate we stop with.
constexpr std::uint64_t kMaxSumTerms = 50'000'000;

// Levels deeper than this have internal-bucket loads Bin(A 2^d, 2^-d) that
// equal their Poisson(A) limit to within double precision, so their tails are
// computed once and multiplied by their number (keeps absurd H cheap).
constexpr std::uint32_t kMaxDistinctLevel = 60;

// Structural limits (params.h, ValidateParams).
constexpr std::uint32_t kMaxHeight = 40;
constexpr std::uint32_t kMinBlockBytes = 16;
constexpr std::uint32_t kMaxBlockBytes = 16u << 20;
constexpr std::uint64_t kShareFileHeaderBytes = 4096;

// log C(n, k) for integers 0 <= k <= n (n held exactly in a double, n < 2^53).
double LogChoose(double n, double k) {
  k = std::min(k, n - k);  // C(n, k) = C(n, n-k): walk the shorter product
  if (k <= 0) return 0.0;
  if (k > 1e6) {
    // Only reachable for pathological arguments; long double lgamma keeps the
    // cancellation error at ~n log n * 2^-64 (2e-6 nats at n = 2^40).
    const long double ln = static_cast<long double>(n);
    const long double lk = static_cast<long double>(k);
    return static_cast<double>(std::lgamma(ln + 1) - std::lgamma(lk + 1) -
                               std::lgamma(ln - lk + 1));
  }
  double s = 0.0;
  const double base = n - k;
  for (double i = 1; i <= k; i += 1) s += std::log((base + i) / i);
  return s;
}

// log P(Bin(n, q) = k).
double LogPmf(double n, double q, double k) {
  return LogChoose(n, k) + k * std::log(q) + (n - k) * std::log1p(-q);
}

// Adds exp(b) to exp(a) in log space.
double LogAddExp(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double hi = std::max(a, b);
  return hi + std::log1p(std::exp(std::min(a, b) - hi));
}

}  // namespace

// Natural log of P(Bin(n, q) > z); see the numerics notes at the top. n is a
// non-negative integer held in a double (exact below 2^53; beyond, the rounding
// of n is a relative error of 2^-53 in the mean, irrelevant to the bound).
double LogBinomialUpperTail(double n, double q, double z) {
  if (z >= n || q <= 0.0) return kNegInf;  // X <= n, and X = 0 when q = 0
  if (q >= 1.0) return 0.0;                // X = n > z
  const double odds = q / (1.0 - q);
  const double mode = std::floor((n + 1.0) * q);  // T(k) increases iff k <= mode
  const double k0 = z + 1.0;

  if (k0 > mode) {
    // Terms decrease from k0 on: T(k+1)/T(k) = r_k < 1 and r_k decreases in k,
    // so after a term t with ratio r the rest is at most t * r / (1 - r).
    double sum = 1.0;  // in units of T(k0)
    double term = 1.0;
    std::uint64_t steps = 0;
    for (double k = k0; k < n && steps < kMaxSumTerms; k += 1, ++steps) {
      const double r = (n - k) / (k + 1.0) * odds;
      term *= r;
      sum += term;
      if (term * r < kSumTolerance * sum * (1.0 - r)) break;
    }
    return LogPmf(n, q, k0) + std::log(sum);
  }

  // z < mode: the tail is the large side. Sum P(X <= z) downwards from z, where
  // T(k-1)/T(k) = k / ((n-k+1) * odds) < 1 and decreases as k falls.
  double sum = 1.0;  // in units of T(z)
  double term = 1.0;
  std::uint64_t steps = 0;
  for (double k = z; k > 0 && steps < kMaxSumTerms; k -= 1, ++steps) {
    const double r = k / ((n - k + 1.0) * odds);
    term *= r;
    sum += term;
    if (term * r < kSumTolerance * sum * (1.0 - r)) break;
  }
  const double log_lower = LogPmf(n, q, z) + std::log(sum);
  // P(X <= z) <= ~1/2 here, so 1 - P is well conditioned; the clamp only
  // guards against rounding pushing log_lower to >= 0.
  return std::log(std::max(-std::expm1(std::min(log_lower, 0.0)),
                           std::numeric_limits<double>::min()));
}

double Log2OverflowPerEviction(std::uint32_t A, std::uint32_t H, std::uint32_t Z,
                               std::uint64_t N) {
  // The root receives exactly A blocks between evictions: Z < A overflows
  // every time. (The union bound of params.h assumes Z >= A.)
  if (Z < A) return 0.0;
  const double z = Z;
  double log_total = kNegInf;

  // Internal levels 1..H-1: load of a bucket when it is emptied <= Bin(A 2^d, 2^-d).
  const std::uint32_t distinct = H == 0 ? 0 : std::min(H - 1, kMaxDistinctLevel);
  for (std::uint32_t d = 1; d <= distinct; ++d) {
    const double n = std::ldexp(static_cast<double>(A), static_cast<int>(d));
    const double q = std::ldexp(1.0, -static_cast<int>(d));
    log_total = LogAddExp(log_total, LogBinomialUpperTail(n, q, z));
  }
  if (H >= 1 && H - 1 > kMaxDistinctLevel) {
    // Levels past kMaxDistinctLevel have the same (Poisson-limit) tail.
    const double n = std::ldexp(static_cast<double>(A), static_cast<int>(kMaxDistinctLevel));
    const double tail =
        LogBinomialUpperTail(n, std::ldexp(1.0, -static_cast<int>(kMaxDistinctLevel)), z);
    const double repeats = static_cast<double>(H - 1 - kMaxDistinctLevel);
    log_total = LogAddExp(log_total, tail + std::log(repeats));
  }

  // Two leaves per eviction, each holding at most the live blocks mapped to it.
  // (H = 0 is a lone root that is also the leaf: q = 1.)
  const double leaf_q = H > 1074 ? 0.0 : std::ldexp(1.0, -static_cast<int>(H));
  const double leaf = LogBinomialUpperTail(static_cast<double>(N), leaf_q, z);
  if (leaf != kNegInf) log_total = LogAddExp(log_total, std::log(2.0) + leaf);

  // A union bound above 1 says nothing more than "overflow is likely": clamp
  // to probability 1 so the result is always a log of a probability (<= 0).
  if (log_total == kNegInf) return kNegInf;
  return std::min(0.0, log_total / std::log(2.0));
}

std::uint32_t MinSafeBucketSize(std::uint32_t A, std::uint32_t H, std::uint32_t lambda,
                                std::uint64_t N) {
  // The bound is non-increasing in Z (every tail is, and so is the clamp), so
  // the safe sizes form a ray [Z*, inf): gallop up from A, then bisect.
  const double target = -static_cast<double>(lambda);
  auto safe = [&](std::uint32_t z) { return Log2OverflowPerEviction(A, H, z, N) <= target; };
  constexpr std::uint32_t kNever = std::numeric_limits<std::uint32_t>::max();

  std::uint32_t lo = A;  // invariant: every Z < lo is unsafe
  if (safe(lo)) return lo;
  std::uint32_t hi = std::max<std::uint32_t>(A, 1);
  for (;;) {
    lo = hi + 1;  // hi was unsafe
    if (hi >= kNever / 2) {
      hi = kNever;
      if (!safe(hi)) return kNever;  // no 32-bit Z is safe; ValidateParams refuses it
      break;
    }
    hi *= 2;
    if (safe(hi)) break;
  }
  // Now every Z < lo is unsafe and hi is safe.
  while (lo < hi) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (safe(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi;
}

std::uint64_t OramParams::sealed_bytes() const {
  return std::uint64_t{block_bytes} + kSealOverhead;
}

std::uint64_t OramParams::data_elems_per_slot() const {
  return field::ElemsForBytes(sealed_bytes());
}

std::uint64_t OramParams::elems_per_slot() const { return data_elems_per_slot() + mac_elems; }

std::uint64_t OramParams::slot_bytes() const { return elems_per_slot() * field::kElemBytes; }

std::uint64_t OramParams::max_capacity_blocks() const {
  if (height == 0) return 0;
  // A * 2^(H-1), saturating: validated heights never come near 64 bits, but
  // this is also called to explain why unvalidated parameters are wrong.
  const std::uint32_t shift = height - 1;
  if (shift >= 64 || (evict_rate != 0 && shift > static_cast<std::uint32_t>(
                                                      __builtin_clzll(evict_rate)))) {
    return evict_rate == 0 ? 0 : std::numeric_limits<std::uint64_t>::max();
  }
  return std::uint64_t{evict_rate} << shift;
}

std::string OramParams::ToString() const {
  return "H=" + std::to_string(height) + " Z=" + std::to_string(bucket_size) +
         " A=" + std::to_string(evict_rate) + " B=" + std::to_string(block_bytes) +
         " N=" + std::to_string(capacity_blocks) + " lambda=" + std::to_string(lambda) +
         " parties=" + std::to_string(parties) + " t=" + std::to_string(threshold) +
         " m=" + std::to_string(elems_per_slot());
}

Status ValidateParams(const OramParams& p, bool allow_unsafe) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("ORAM parameters (" + p.ToString() + "): " + why);
  };
  if (p.height < 1 || p.height > kMaxHeight) {
    return bad("height H must be in [1, " + std::to_string(kMaxHeight) + "]");
  }
  if (p.evict_rate < 1) return bad("eviction rate A must be >= 1");
  if (p.mac_elems != 0 && p.mac_elems != share_mac::kShareMacElems) {
    return bad("share MAC elements must be 0 (a filesystem made before share MACs) or " +
               std::to_string(share_mac::kShareMacElems));
  }
  if (p.bucket_size < p.evict_rate) {
    return bad("bucket size Z must be >= A (the root takes A blocks between evictions)");
  }
  if (p.bucket_size > kMaxBucketSize) {
    return bad("bucket size Z must be <= " + std::to_string(kMaxBucketSize));
  }
  if (p.block_bytes < kMinBlockBytes || p.block_bytes > kMaxBlockBytes) {
    return bad("block size must be in [" + std::to_string(kMinBlockBytes) + ", " +
               std::to_string(kMaxBlockBytes) + "] bytes");
  }
  if (p.capacity_blocks < 1) return bad("capacity N must be >= 1 block");
  if (p.capacity_blocks > kMaxCapacityBlocks) {
    return bad("capacity N must be <= 2^32 blocks (the client's position map takes 24 bytes "
               "per block of RAM); use larger blocks");
  }
  if (p.capacity_blocks > p.max_capacity_blocks()) {
    return bad("capacity N exceeds A * 2^(H-1) = " + std::to_string(p.max_capacity_blocks()));
  }
  if (p.threshold < 1) return bad("privacy threshold t must be >= 1");
  if (std::uint64_t{p.parties} < 2 * std::uint64_t{p.threshold} + 1) {
    return bad("need parties >= 2t + 1 to recover degree-2t products");
  }
  if (p.parties > kMaxParties) {
    return bad("at most " + std::to_string(kMaxParties) + " parties are supported");
  }
  // The servers reduce degrees with t = kPrivacyThreshold, so the client
  // must share with the same t.
  if (p.threshold != kPrivacyThreshold) {
    return bad("threshold t must be " + std::to_string(kPrivacyThreshold) +
               ", the degree the servers reduce to");
  }
  // Every message must fit the wire's vector limit: the eviction matrices
  // ((H+1) * 2Z^2 shares), the leaf SMP round (2 Z m) and the select vector.
  const std::uint64_t Z = p.bucket_size, levels = std::uint64_t{p.height} + 1;
  if (levels * 2 * Z * Z > wire::kMaxElems || 2 * Z * p.elems_per_slot() > wire::kMaxElems ||
      levels * Z > wire::kMaxElems) {
    return bad("messages would exceed the wire limit of " + std::to_string(wire::kMaxElems) +
               " elements ((H+1)*2Z^2 = " + std::to_string(levels * 2 * Z * Z) +
               ", 2*Z*m = " + std::to_string(2 * Z * p.elems_per_slot()) + ")");
  }
  // The share file holds (2^(H+1) - 1) buckets of Z slots; its byte offsets
  // must fit 64 bits (checked on the round-up 2^(H+1)).
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(std::uint64_t{2} << p.height, std::uint64_t{p.bucket_size},
                             &bytes) ||
      __builtin_mul_overflow(bytes, p.slot_bytes(), &bytes)) {
    return bad("share file size overflows 64 bits");
  }

  if (allow_unsafe) return Status::Ok();
  if (p.lambda < 1) return bad("security parameter lambda must be >= 1");
  const double log2_overflow =
      Log2OverflowPerEviction(p.evict_rate, p.height, p.bucket_size, p.capacity_blocks);
  if (log2_overflow > -static_cast<double>(p.lambda)) {
    const std::uint32_t z_safe =
        MinSafeBucketSize(p.evict_rate, p.height, p.lambda, p.capacity_blocks);
    return bad("unsafe: P(bucket overflow per eviction) <= 2^" + std::to_string(log2_overflow) +
               " exceeds 2^-" + std::to_string(p.lambda) + "; the smallest safe Z is " +
               std::to_string(z_safe));
  }
  return Status::Ok();
}

Result<OramParams> ChooseParams(std::uint64_t capacity_bytes, std::uint32_t block_bytes,
                                std::uint32_t evict_rate, std::uint32_t lambda) {
  if (block_bytes == 0) return Status::InvalidArgument("ChooseParams: block size must be > 0");
  if (evict_rate == 0) return Status::InvalidArgument("ChooseParams: eviction rate must be > 0");
  if (capacity_bytes == 0) return Status::InvalidArgument("ChooseParams: capacity must be > 0");
  OramParams p;
  p.block_bytes = block_bytes;
  p.evict_rate = evict_rate;
  p.lambda = lambda;
  p.capacity_blocks = capacity_bytes / block_bytes + (capacity_bytes % block_bytes != 0);
  // Smallest H >= 1 with A * 2^(H-1) >= N.
  p.height = 1;
  while (p.height <= kMaxHeight &&
         (std::uint64_t{evict_rate} << (p.height - 1)) < p.capacity_blocks) {
    ++p.height;
  }
  if (p.height > kMaxHeight) {
    return Status::InvalidArgument("ChooseParams: " + std::to_string(p.capacity_blocks) +
                                   " blocks need a tree taller than " +
                                   std::to_string(kMaxHeight) + " levels");
  }
  p.bucket_size = MinSafeBucketSize(evict_rate, p.height, lambda, p.capacity_blocks);
  S3ORAM_RETURN_IF_ERROR(ValidateParams(p, /*allow_unsafe=*/false));
  return p;
}

CostModel EstimateCost(const OramParams& p) {
  const double H1 = static_cast<double>(p.height) + 1.0;  // levels on a path
  const double Z = p.bucket_size;
  const double A = std::max<double>(p.evict_rate, 1.0);
  const double m = static_cast<double>(p.elems_per_slot());
  const double l = p.parties;
  const double elem = static_cast<double>(field::kElemBytes);         // on disk
  const double wire_elem = static_cast<double>(wire::kElemWireBits) / 8.0;  // on a link

  CostModel c{};
  c.slots_streamed = Z * H1;
  // Eviction: per level, a (2Z x Z) matrix share times the 2Z slots of a bucket
  // and its sibling, 2 Z^2 slot-multiplications, once per A accesses.
  c.slot_multiplications = Z * H1 + 2.0 * Z * Z * H1 / A;
  c.field_mults = c.slot_multiplications * m;
  // To every server but one: a select vector over the path, the root
  // write of one slot and 1/A of an eviction's matrix shares; with t = 1 the
  // remaining server gets the seeds of those shares instead (wire::ShareSeed:
  // 36 bytes each; the matrices' after the others have theirs:
  // Evictor::SendPrepare).
  const double seeded = p.threshold == 1 ? 1.0 : 0.0;
  c.client_upload_bytes = (l - seeded) * (Z * H1 + m + H1 * 2.0 * Z * Z / A) * wire_elem +
                          seeded * (2.0 + 1.0 / A) * 36.0;
  // From every server: its share of the retrieved slot.
  c.client_download_bytes = l * m * wire_elem;
  // SMP: per eviction each server re-shares a bucket (Z m elements) to each of
  // its parties-1 peers for levels 1..H-1 and two leaf buckets (2 Z m) in the
  // leaf round, i.e. (H+1) Z m elements per peer.
  const double per_server_elems =
      (l - 1.0) * (Z * m * (static_cast<double>(p.height) - 1.0) + 2.0 * Z * m);
  c.server_to_server_bytes = l * per_server_elems / A * wire_elem;
  c.storage_bytes_per_server =
      static_cast<double>(kShareFileHeaderBytes) +
      (std::ldexp(1.0, static_cast<int>(p.height) + 1) - 1.0) * Z * m * elem;
  return c;
}

}  // namespace s3oram
