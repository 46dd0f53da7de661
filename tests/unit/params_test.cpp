// Parameter safety: the binomial tail against exact arithmetic, the overflow
// bound against design.md's reference values and the acceptance threshold,
// the bucket-size search, validation and the cost model.
#include "oramcore/tree/params.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/share_mac.h"

namespace s3oram {
namespace {

constexpr double kLn2 = 0.69314718055994530942;

// log P(Bin(n, q) > z), naively: the pmf by the forward recurrence from
// P(0) = (1-q)^n in long double (range down to 1e-4951, so no underflow for the
// n used here), summed from the top so small terms are added first.
long double NaiveLogTail(unsigned n, long double q, unsigned z) {
  std::vector<long double> pmf(n + 1);
  pmf[0] = std::pow(1.0L - q, static_cast<long double>(n));
  for (unsigned k = 0; k < n; ++k) {
    pmf[k + 1] = pmf[k] * static_cast<long double>(n - k) / static_cast<long double>(k + 1) * q /
                 (1.0L - q);
  }
  long double tail = 0;
  for (unsigned k = n; k > z; --k) tail += pmf[k];
  return std::log(tail);
}

TEST(ParamsTest, BinomialTailMatchesNaiveForSmallN) {
  struct Case {
    unsigned n;
    double q;
  };
  const std::vector<Case> cases = {{10, 0.5},       {64, 0.5},          {100, 0.25},
                                   {256, 1.0 / 32}, {512, 1.0 / 64},    {1000, 0.3},
                                   {2000, 1.0 / 1024}, {3000, 0.01}};
  for (const auto& c : cases) {
    for (unsigned z = 0; z < c.n; ++z) {
      const long double naive = NaiveLogTail(c.n, c.q, z);
      if (naive < -200.0L * kLn2) break;  // far enough: the bound only needs 2^-200
      const double got = LogBinomialUpperTail(c.n, c.q, z);
      // 1e-9 relative in the log (and 1e-12 absolute near log = 0) is far
      // tighter than any use of the bound needs.
      const double tol = 1e-12 + 1e-9 * std::fabs(static_cast<double>(naive));
      ASSERT_NEAR(got, static_cast<double>(naive), tol)
          << "n=" << c.n << " q=" << c.q << " z=" << z;
    }
  }
}

TEST(ParamsTest, BinomialTailEdgeCases) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(LogBinomialUpperTail(10, 0.5, 10), -inf);  // X <= n
  EXPECT_EQ(LogBinomialUpperTail(10, 0.5, 11), -inf);
  EXPECT_EQ(LogBinomialUpperTail(0, 0.5, 0), -inf);
  EXPECT_EQ(LogBinomialUpperTail(10, 0.0, 0), -inf);   // X = 0
  EXPECT_EQ(LogBinomialUpperTail(10, 1.0, 9), 0.0);    // X = n
  // P(Bin(n, q) > n - 1) = q^n.
  EXPECT_NEAR(LogBinomialUpperTail(40, 0.5, 39), 40 * std::log(0.5), 1e-12);
  // P(Bin(n, q) > 0) = 1 - (1-q)^n: the complement branch.
  EXPECT_NEAR(LogBinomialUpperTail(1000, 0.5, 0), std::log1p(-std::pow(0.5, 1000)), 1e-15);
  EXPECT_NEAR(LogBinomialUpperTail(20, 0.25, 0), std::log1p(-std::pow(0.75, 20)), 1e-14);
}

// log P(Bin(n, q) > z) for large n: the pmf at z+1 with long double lgamma
// (error ~n log n * 2^-64, i.e. < 1e-5 nats at n = 2^40) times the sum of the
// ratio series. Independent of the implementation's product-form log C(n, k).
double LgammaLogTail(long double n, long double q, long double z) {
  const long double k0 = z + 1;
  const long double log_t0 = std::lgamma(n + 1) - std::lgamma(k0 + 1) - std::lgamma(n - k0 + 1) +
                             k0 * std::log(q) + (n - k0) * std::log1p(-q);
  long double sum = 1, term = 1;
  for (long double k = k0; k < k0 + 5000 && k < n; k += 1) {
    term *= (n - k) / (k + 1) * q / (1 - q);
    sum += term;
  }
  return static_cast<double>(log_t0 + std::log(sum));
}

TEST(ParamsTest, BinomialTailForHugeN) {
  // Leaves of tall trees: n up to 2^40 with means of tens to hundreds.
  for (int e : {20, 30, 40}) {
    for (int d : {e - 7, e - 5}) {
      const long double n = std::ldexp(1.0L, e);
      const long double q = std::ldexp(1.0L, -d);
      const double mean = std::ldexp(1.0, e - d);
      for (double z : {mean, mean + 20, 3 * mean, 8 * mean}) {
        const double want = LgammaLogTail(n, q, z);
        const double got = LogBinomialUpperTail(static_cast<double>(n), static_cast<double>(q), z);
        EXPECT_NEAR(got, want, 1e-4 + 1e-9 * std::fabs(want)) << "n=2^" << e << " q=2^-" << d
                                                              << " z=" << z;
      }
    }
  }
  // Tails well beyond 2^-200 stay finite and ordered.
  const double deep = LogBinomialUpperTail(std::ldexp(1.0, 40), std::ldexp(1.0, -33), 2000);
  EXPECT_TRUE(std::isfinite(deep));
  EXPECT_LT(deep, -200 * kLn2);
  EXPECT_LT(LogBinomialUpperTail(std::ldexp(1.0, 40), std::ldexp(1.0, -33), 2001), deep);
}

TEST(ParamsTest, Log2OverflowMatchesTheUnionBound) {
  // Small trees where the whole bound can be recomputed naively.
  for (std::uint32_t A : {2u, 4u, 8u}) {
    for (std::uint32_t H : {1u, 2u, 4u, 6u}) {
      const std::uint64_t N = std::uint64_t{A} << (H - 1);
      for (std::uint32_t Z = A + 4; Z < A + 40; Z += 3) {
        long double total = 0;
        for (std::uint32_t d = 1; d < H; ++d) {
          total += std::exp(NaiveLogTail(A << d, std::ldexp(1.0L, -static_cast<int>(d)), Z));
        }
        if (N > Z) {
          const long double leaf_q = std::ldexp(1.0L, -static_cast<int>(H));
          total += 2 * std::exp(NaiveLogTail(static_cast<unsigned>(N), leaf_q, Z));
        }
        const double got = Log2OverflowPerEviction(A, H, Z, N);
        if (total == 0) {
          EXPECT_EQ(got, -std::numeric_limits<double>::infinity());
          continue;
        }
        const double want = std::min(0.0, static_cast<double>(std::log2(total)));
        EXPECT_NEAR(got, want, 1e-9 * (1 + std::fabs(want)))
            << "A=" << A << " H=" << H << " Z=" << Z;
      }
    }
  }
}

TEST(ParamsTest, Log2OverflowAtZEqualsAIsLikely) {
  // Z = A (the paper's choice): each internal bucket overflows with probability
  // ~1/2, so the bound is ~probability 1.
  for (std::uint32_t A : {8u, 32u, 280u}) {
    const std::uint32_t H = 14;
    const double l2 = Log2OverflowPerEviction(A, H, A, std::uint64_t{A} << (H - 1));
    EXPECT_LE(l2, 0.0);
    EXPECT_GT(l2, -1.0) << "A=" << A;
    // One level alone: P(Bin(2A, 1/2) > A) = (1 - C(2A, A) / 4^A) / 2, just
    // under 1/2 (the leaf term, Bin(1, 1/4) > A, is 0).
    const double center = std::exp(std::lgamma(2.0 * A + 1) - 2 * std::lgamma(A + 1.0) -
                                   2.0 * A * kLn2);
    EXPECT_NEAR(Log2OverflowPerEviction(A, 2, A, 1), std::log2((1 - center) / 2), 1e-9);
  }
  // Z < A: the root overflows at every eviction.
  EXPECT_EQ(Log2OverflowPerEviction(10, 5, 9, 10), 0.0);
}

TEST(ParamsTest, Log2OverflowIsMonotone) {
  const std::uint32_t A = 64, H = 14;
  const std::uint64_t N = std::uint64_t{A} << (H - 1);
  double prev = Log2OverflowPerEviction(A, H, A, N);
  for (std::uint32_t Z = A + 1; Z < 400; ++Z) {
    const double cur = Log2OverflowPerEviction(A, H, Z, N);
    ASSERT_LE(cur, prev) << Z;
    prev = cur;
  }
  EXPECT_LT(prev, -200.0);
  // More levels, more buckets to overflow.
  EXPECT_LT(Log2OverflowPerEviction(A, 8, 150, 1), Log2OverflowPerEviction(A, 20, 150, 1));
}

std::uint32_t TallTreeZ(std::uint32_t A, std::uint32_t lambda = 80, std::uint32_t H = 14) {
  return MinSafeBucketSize(A, H, lambda, std::uint64_t{A} << (H - 1));
}

TEST(ParamsTest, AcceptanceA280) {
  const std::uint32_t z = MinSafeBucketSize(280, 14, 80, std::uint64_t{280} << 13);
  EXPECT_GE(z, 460u);
  // The reference implementation's Z = 333 for A = 280 is unsafe.
  EXPECT_GT(Log2OverflowPerEviction(280, 14, 333, std::uint64_t{280} << 13), -80.0);
}

TEST(ParamsTest, ReferenceValuesFromDesign) {
  // design.md §3: A=32 -> ~107, 64 -> ~164, 128 -> ~262, 280 -> ~471 (tall tree).
  struct Ref {
    std::uint32_t A, Z;
  };
  for (const Ref r : {Ref{32, 107}, Ref{64, 164}, Ref{128, 262}, Ref{280, 471}}) {
    const std::uint32_t z = TallTreeZ(r.A);
    const double rel = std::fabs(static_cast<double>(z) - r.Z) / r.Z;
    EXPECT_LT(rel, 0.04) << "A=" << r.A << " Z=" << z << " reference " << r.Z;
  }
}

TEST(ParamsTest, MinSafeBucketSizeIsTheSmallestSafe) {
  for (std::uint32_t A : {1u, 8u, 16u, 32u, 48u, 64u, 128u, 280u}) {
    for (std::uint32_t lambda : {20u, 80u, 128u}) {
      const std::uint32_t H = 14;
      const std::uint64_t N = std::uint64_t{A} << (H - 1);
      const std::uint32_t z = MinSafeBucketSize(A, H, lambda, N);
      EXPECT_GE(z, A);
      EXPECT_LE(Log2OverflowPerEviction(A, H, z, N), -static_cast<double>(lambda));
      if (z > A) {
        EXPECT_GT(Log2OverflowPerEviction(A, H, z - 1, N), -static_cast<double>(lambda))
            << "A=" << A << " lambda=" << lambda;
      }
    }
  }
  // With no blocks below the root and no internal level, Z = A is safe.
  EXPECT_EQ(MinSafeBucketSize(5, 1, 80, 0), 5u);
}

TEST(ParamsTest, MinSafeBucketSizeGrowsWithLambdaAndA) {
  std::uint32_t prev = 0;
  for (std::uint32_t lambda = 10; lambda <= 200; lambda += 10) {
    const std::uint32_t z = TallTreeZ(64, lambda);
    EXPECT_GE(z, prev) << lambda;
    prev = z;
  }
  EXPECT_GT(TallTreeZ(64, 200), TallTreeZ(64, 40));
  prev = 0;
  for (std::uint32_t A : {1u, 2u, 4u, 8u, 16u, 32u, 48u, 64u, 128u, 280u, 512u}) {
    const std::uint32_t z = TallTreeZ(A);
    EXPECT_GT(z, prev) << A;
    EXPECT_GT(z, A) << "lambda = 80 always needs slack above A";
    prev = z;
  }
}

TEST(ParamsTest, ReportMinSafeBucketSizes) {
  // Not a check: prints the table quoted in docs and reviews.
  for (std::uint32_t A : {8u, 16u, 32u, 48u, 64u, 128u, 280u}) {
    const std::uint32_t z = TallTreeZ(A);
    std::printf("A=%u H=14 lambda=80 N=A*2^13: Z=%u (log2 P=%.2f)\n", A, z,
                Log2OverflowPerEviction(A, 14, z, std::uint64_t{A} << 13));
  }
}

OramParams SafeParams() {
  OramParams p;
  p.height = 14;
  p.evict_rate = 64;
  p.bucket_size = TallTreeZ(64);
  p.block_bytes = 4096;
  p.capacity_blocks = std::uint64_t{64} << 13;
  p.lambda = 80;
  p.parties = 3;
  p.threshold = 1;
  return p;
}

TEST(ParamsTest, ValidateAcceptsSafe) {
  const OramParams p = SafeParams();
  EXPECT_TRUE(ValidateParams(p, false).ok()) << ValidateParams(p, false).ToString();
  EXPECT_TRUE(ValidateParams(p, true).ok());
}

TEST(ParamsTest, ValidateRefusesUnsafeUnlessAllowed) {
  OramParams p = SafeParams();
  p.bucket_size -= 1;  // just below the smallest safe size
  const Status s = ValidateParams(p, false);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("unsafe"), std::string::npos) << s.ToString();
  EXPECT_TRUE(ValidateParams(p, true).ok());

  p.bucket_size = p.evict_rate;  // the paper's Z = A
  EXPECT_FALSE(ValidateParams(p, false).ok());
  EXPECT_TRUE(ValidateParams(p, true).ok());

  OramParams zero_lambda = SafeParams();
  zero_lambda.lambda = 0;
  EXPECT_FALSE(ValidateParams(zero_lambda, false).ok());
}

TEST(ParamsTest, ValidateRefusesStructuralErrorsEvenWhenUnsafeAllowed) {
  std::vector<std::pair<std::string, OramParams>> bad;
  auto add = [&](const std::string& name, auto mutate) {
    OramParams p = SafeParams();
    mutate(p);
    bad.emplace_back(name, p);
  };
  add("H=0", [](OramParams& p) { p.height = 0; });
  add("H=41", [](OramParams& p) { p.height = 41; });
  add("A=0", [](OramParams& p) { p.evict_rate = 0; });
  add("Z<A", [](OramParams& p) { p.bucket_size = p.evict_rate - 1; });
  add("Z>2^16", [](OramParams& p) {
    p.bucket_size = (1u << 16) + 1;
    p.height = 10;
    p.capacity_blocks = 1;
  });
  add("B<16", [](OramParams& p) { p.block_bytes = 15; });
  add("B>16MiB", [](OramParams& p) { p.block_bytes = (16u << 20) + 1; });
  add("N=0", [](OramParams& p) { p.capacity_blocks = 0; });
  add("N>A2^(H-1)", [](OramParams& p) { p.capacity_blocks = (std::uint64_t{64} << 13) + 1; });
  add("parties<2t+1", [](OramParams& p) { p.parties = 2; });
  add("t=2,parties=4", [](OramParams& p) {
    p.parties = 4;
    p.threshold = 2;
  });
  add("t=0", [](OramParams& p) { p.threshold = 0; });
  add("t=2,parties=5", [](OramParams& p) {
    p.parties = 5;
    p.threshold = 2;
  });
  add("parties>16", [](OramParams& p) { p.parties = 17; });
  add("file overflows", [](OramParams& p) {
    // 2^41 * 2^16 * ~17.9 MB > 2^64.
    p.height = 40;
    p.evict_rate = 1u << 16;
    p.bucket_size = 1u << 16;
    p.block_bytes = 16u << 20;
    p.capacity_blocks = 1;
  });
  for (const auto& [name, p] : bad) {
    EXPECT_FALSE(ValidateParams(p, true).ok()) << name;
    EXPECT_FALSE(ValidateParams(p, false).ok()) << name;
    EXPECT_EQ(ValidateParams(p, true).code(), Status::Code::kInvalidArgument) << name;
  }
  // Boundaries that are allowed.
  OramParams edge = SafeParams();
  edge.block_bytes = 16;
  EXPECT_TRUE(ValidateParams(edge, false).ok());
  edge.block_bytes = 1u << 20;
  EXPECT_TRUE(ValidateParams(edge, false).ok());
  // 16 MiB blocks pass the block-size range but, at this Z, the leaf SMP round
  // (2 Z m elements) exceeds the wire's vector limit.
  edge.block_bytes = 16u << 20;
  Status too_big = ValidateParams(edge, true);
  EXPECT_EQ(too_big.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(too_big.message().find("wire limit"), std::string::npos) << too_big.ToString();
  edge.block_bytes = 4096;
  edge.parties = 16;  // t = 1 whatever the number of servers
  EXPECT_TRUE(ValidateParams(edge, false).ok());
}

TEST(ParamsTest, DerivedSizes) {
  OramParams p = SafeParams();
  // A slot carries the sealed block: B + 24-byte nonce + 16-byte tag.
  EXPECT_EQ(p.sealed_bytes(), 4096u + 40);
  EXPECT_EQ(p.data_elems_per_slot(), field::ElemsForBytes(4096 + 40));
  EXPECT_EQ(p.data_elems_per_slot(), 1104u);  // ceil(4136 / 15) * 4
  // ... and the four share-MAC tags (math/share_mac.h).
  EXPECT_EQ(p.mac_elems, share_mac::kShareMacElems);
  EXPECT_EQ(p.elems_per_slot(), 1108u);
  EXPECT_EQ(p.slot_bytes(), 1108u * 4);
  EXPECT_EQ(p.max_capacity_blocks(), std::uint64_t{64} << 13);
  p.block_bytes = 5;  // 45 sealed bytes: 3 groups of 15
  EXPECT_EQ(p.elems_per_slot(), 12u + 4);
  p.block_bytes = 6;  // 46: a fourth group
  EXPECT_EQ(p.elems_per_slot(), 16u + 4);
  p.mac_elems = 0;  // a filesystem made before share MACs
  EXPECT_EQ(p.elems_per_slot(), 16u);
  EXPECT_TRUE(ValidateParams(SafeParams(), false).ok());
  OramParams odd = SafeParams();
  odd.mac_elems = 3;
  EXPECT_FALSE(ValidateParams(odd, false).ok()) << "share MAC elements are 0 or 4";
  p.height = 1;
  EXPECT_EQ(p.max_capacity_blocks(), 64u);
  p.height = 0;
  EXPECT_EQ(p.max_capacity_blocks(), 0u);
  p.height = 64;
  p.evict_rate = 4;
  EXPECT_EQ(p.max_capacity_blocks(), std::numeric_limits<std::uint64_t>::max()) << "saturates";
  const std::string s = SafeParams().ToString();
  EXPECT_NE(s.find("H=14"), std::string::npos) << s;
  EXPECT_NE(s.find("A=64"), std::string::npos) << s;
  EXPECT_NE(s.find("Z=" + std::to_string(TallTreeZ(64))), std::string::npos) << s;
}

TEST(ParamsTest, ChooseParams) {
  // 1 GiB of 4 KiB blocks with A = 64: N = 2^18 = 64 * 2^12, so H = 13.
  auto r = ChooseParams(std::uint64_t{1} << 30, 4096, 64, 80);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->height, 13u);
  EXPECT_EQ(r->capacity_blocks, std::uint64_t{1} << 18);
  EXPECT_EQ(r->bucket_size, MinSafeBucketSize(64, 13, 80, std::uint64_t{1} << 18));
  EXPECT_EQ(r->evict_rate, 64u);
  EXPECT_EQ(r->lambda, 80u);
  EXPECT_TRUE(ValidateParams(*r, false).ok());

  // One byte more needs one more block, and then one more level.
  auto r2 = ChooseParams((std::uint64_t{1} << 30) + 1, 4096, 64, 80);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->capacity_blocks, (std::uint64_t{1} << 18) + 1);
  EXPECT_EQ(r2->height, 14u);

  // Tiny: H is at least 1.
  auto tiny = ChooseParams(100, 4096, 64, 80);
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->height, 1u);
  EXPECT_EQ(tiny->capacity_blocks, 1u);

  EXPECT_FALSE(ChooseParams(0, 4096, 64, 80).ok());
  EXPECT_FALSE(ChooseParams(1 << 20, 0, 64, 80).ok());
  EXPECT_FALSE(ChooseParams(1 << 20, 4096, 0, 80).ok());
  EXPECT_FALSE(ChooseParams(std::numeric_limits<std::uint64_t>::max(), 16, 1, 80).ok())
      << "needs more than 40 levels";
  EXPECT_FALSE(ChooseParams(1 << 20, 8, 64, 80).ok()) << "block below 16 bytes";
}

TEST(ParamsTest, EstimateCost) {
  const OramParams p = SafeParams();
  const CostModel c = EstimateCost(p);
  const double H1 = 15, Z = p.bucket_size, A = 64, m = 1108, l = 3;
  EXPECT_DOUBLE_EQ(c.slots_streamed, Z * H1);
  EXPECT_DOUBLE_EQ(c.slot_multiplications, Z * H1 + 2 * Z * Z * H1 / A);
  EXPECT_DOUBLE_EQ(c.field_mults, c.slot_multiplications * m);
  // On links an element takes 31 bits (wire packing), on disk 4 bytes; one
  // server of the l gets 36-byte seeds instead of its select, root and
  // matrix shares (t = 1; one matrix seed per A accesses).
  EXPECT_DOUBLE_EQ(c.client_upload_bytes,
                   (l - 1) * (Z * H1 + m + H1 * 2 * Z * Z / A) * 31 / 8 + (2 + 1 / A) * 36);
  EXPECT_DOUBLE_EQ(c.client_download_bytes, l * m * 31 / 8);
  EXPECT_DOUBLE_EQ(c.server_to_server_bytes,
                   l * (l - 1) * (Z * m * 13 + 2 * Z * m) / A * 31 / 8);
  EXPECT_DOUBLE_EQ(c.storage_bytes_per_server, 4096 + (std::ldexp(1.0, 15) - 1) * Z * m * 4);
  // Eviction dominates retrieval for these parameters (design.md §3).
  EXPECT_GT(2 * Z * Z * H1 / A, Z * H1);
}

}  // namespace
}  // namespace s3oram
