#include "oramcore/math/kernels.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "oramcore/math/kernels_internal.h"
#include "tests/support/test_seed.h"

namespace s3oram::kernels {
namespace {

using field::kPrime;

// Written into `out` before a call: not canonical, so any stray write shows.
constexpr Elem kSentinel = 0xdeadbeef;

using PathFn = void (*)(std::span<const Elem* const>, std::size_t, std::size_t,
                        std::span<const Elem>, Elem*, ColumnRange);
using EvictFn = void (*)(const Elem*, const Elem*, std::size_t, std::size_t, std::span<const Elem>,
                         Elem*, ColumnRange);

struct Implementation {
  std::string name;
  PathFn path;
  EvictFn evict;
};

// Names the parameter in test output instead of dumping its bytes.
[[maybe_unused]] void PrintTo(const Implementation& impl, std::ostream* os) { *os << impl.name; }

std::vector<Implementation> Implementations() {
  std::vector<Implementation> impls = {
      {"dispatched", PathInnerProduct, EvictProduct},
      {"scalar", internal::PathInnerProductScalar, internal::EvictProductScalar},
  };
  if (internal::Avx2Available()) {
    impls.push_back({"avx2", internal::PathInnerProductAvx2, internal::EvictProductAvx2});
  }
  if (internal::Avx512Available()) {
    impls.push_back({"avx512", internal::PathInnerProductAvx512, internal::EvictProductAvx512});
  }
  return impls;
}

enum class Fill { kRandom, kAllMax, kZero, kExtremes };

void FillElems(std::mt19937_64& rng, Fill fill, std::span<Elem> v) {
  std::uniform_int_distribution<Elem> any(0, kPrime - 1);
  for (auto& e : v) {
    switch (fill) {
      case Fill::kRandom: e = any(rng); break;
      case Fill::kAllMax: e = kPrime - 1; break;
      case Fill::kZero: e = 0; break;
      case Fill::kExtremes: {
        static constexpr Elem kChoices[] = {0, 1, 2, kPrime - 2, kPrime - 1, 1u << 30};
        e = kChoices[rng() % std::size(kChoices)];
        break;
      }
    }
  }
}

std::vector<ColumnRange> RangesFor(std::mt19937_64& rng, std::size_t m) {
  std::vector<ColumnRange> ranges = {{0, m}, {0, 0}, {m, m}};
  if (m >= 2) ranges.push_back({1, m - 1});
  if (m >= 3) {
    const std::size_t a = rng() % m;
    const std::size_t b = rng() % m;
    ranges.push_back({std::min(a, b), std::max(a, b) + 1});
  }
  return ranges;
}

class KernelTest : public ::testing::TestWithParam<Implementation> {};

// ---------------------------------------------------------------------------
// PathInnerProduct

struct PathCase {
  std::size_t buckets;
  std::size_t Z;
  std::size_t m;
  Fill fill;
};

void CheckPath(const Implementation& impl, std::mt19937_64& rng, const PathCase& pc) {
  // Buckets live in separate allocations, each starting one element into its
  // vector so that no row is 32-byte aligned.
  std::vector<std::vector<Elem>> storage(pc.buckets, std::vector<Elem>(pc.Z * pc.m + 1));
  std::vector<const Elem*> buckets;
  for (auto& s : storage) {
    FillElems(rng, pc.fill, s);
    buckets.push_back(s.data() + 1);
  }
  std::vector<Elem> select(pc.buckets * pc.Z);
  FillElems(rng, pc.fill, select);

  for (const ColumnRange cols : RangesFor(rng, pc.m)) {
    std::vector<Elem> expected(pc.m, kSentinel);
    std::vector<Elem> actual(pc.m, kSentinel);
    PathInnerProductNaive(buckets, pc.Z, pc.m, select, expected.data(), cols);
    impl.path(buckets, pc.Z, pc.m, select, actual.data(), cols);
    ASSERT_EQ(actual, expected) << impl.name << ": buckets=" << pc.buckets << " Z=" << pc.Z
                                << " m=" << pc.m << " cols=[" << cols.begin << "," << cols.end
                                << ") fill=" << static_cast<int>(pc.fill);
    for (std::size_t c = 0; c < pc.m; ++c) {
      if (c < cols.begin || c >= cols.end) {
        ASSERT_EQ(actual[c], kSentinel) << "column " << c;
      }
    }
  }
}

TEST(KernelNaiveTest, PathInnerProductKnownAnswer) {
  // Two buckets of Z = 2 slots, m = 2: out[c] = sum select * chunk.
  const std::vector<Elem> b0 = {1, 2, /* slot 1 */ 3, kPrime - 1};
  const std::vector<Elem> b1 = {5, 0, /* slot 1 */ 7, kPrime - 1};
  const std::vector<const Elem*> buckets = {b0.data(), b1.data()};
  const std::vector<Elem> select = {10, 1, 0, 2};
  std::vector<Elem> out(2);
  PathInnerProductNaive(buckets, 2, 2, select, out.data(), {0, 2});
  EXPECT_EQ(out[0], 10u * 1 + 3 + 2 * 7);
  EXPECT_EQ(out[1], 17u);  // 20 + 3 * (p - 1) = 20 - 3
}

TEST_P(KernelTest, PathInnerProductMatchesNaive) {
  auto rng = testing::SeededRng();
  for (std::size_t buckets : {1u, 2u, 9u}) {
    for (std::size_t Z : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 9u, 17u}) {
      for (std::size_t m : {1u, 2u, 3u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 33u, 64u, 101u}) {
        CheckPath(GetParam(), rng, {buckets, Z, m, Fill::kRandom});
      }
    }
  }
}

TEST_P(KernelTest, PathInnerProductExtremeValues) {
  auto rng = testing::SeededRng();
  for (Fill fill : {Fill::kAllMax, Fill::kZero, Fill::kExtremes}) {
    for (std::size_t Z : {1u, 3u, 4u, 8u, 64u}) {
      for (std::size_t m : {1u, 13u, 40u}) CheckPath(GetParam(), rng, {9, Z, m, fill});
    }
  }
}

TEST_P(KernelTest, PathInnerProductLargeShapes) {
  auto rng = testing::SeededRng();
  // Wider than one column tile, realistic slot count, and no buckets at all.
  CheckPath(GetParam(), rng, {3, 2, 2048 * 2 + 13, Fill::kRandom});
  CheckPath(GetParam(), rng, {2, 3, 2048, Fill::kAllMax});
  CheckPath(GetParam(), rng, {9, 64, 1096, Fill::kRandom});
  CheckPath(GetParam(), rng, {9, 64, 1096, Fill::kAllMax});
  CheckPath(GetParam(), rng, {0, 5, 20, Fill::kRandom});
  CheckPath(GetParam(), rng, {4, 0, 20, Fill::kRandom});
}

// ---------------------------------------------------------------------------
// EvictProduct

struct EvictCase {
  std::size_t Z;
  std::size_t m;
  Fill fill;
};

void CheckEvict(const Implementation& impl, std::mt19937_64& rng, const EvictCase& ec) {
  std::vector<Elem> source(ec.Z * ec.m + 1);
  std::vector<Elem> dest(ec.Z * ec.m + 3);
  std::vector<Elem> matrix(2 * ec.Z * ec.Z);
  FillElems(rng, ec.fill, source);
  FillElems(rng, ec.fill, dest);
  FillElems(rng, ec.fill, matrix);
  // Unaligned and differently misaligned inputs.
  const Elem* src = source.data() + 1;
  const Elem* dst = dest.data() + 3;

  for (const ColumnRange cols : RangesFor(rng, ec.m)) {
    std::vector<Elem> expected(ec.Z * ec.m, kSentinel);
    std::vector<Elem> actual(ec.Z * ec.m, kSentinel);
    EvictProductNaive(src, dst, ec.Z, ec.m, matrix, expected.data(), cols);
    impl.evict(src, dst, ec.Z, ec.m, matrix, actual.data(), cols);
    ASSERT_EQ(actual, expected) << impl.name << ": Z=" << ec.Z << " m=" << ec.m << " cols=["
                                << cols.begin << "," << cols.end
                                << ") fill=" << static_cast<int>(ec.fill);
    for (std::size_t j = 0; j < ec.Z; ++j) {
      for (std::size_t c = 0; c < ec.m; ++c) {
        if (c < cols.begin || c >= cols.end) {
          ASSERT_EQ(actual[j * ec.m + c], kSentinel) << "row " << j << " column " << c;
        }
      }
    }
  }
}

TEST(KernelNaiveTest, EvictProductKnownAnswer) {
  // Z = 1: M is 2 x 1, out = M[0] * source + M[1] * dest.
  const std::vector<Elem> source = {3, kPrime - 1};
  const std::vector<Elem> dest = {4, 2};
  const std::vector<Elem> matrix = {5, 6};
  std::vector<Elem> out(2);
  EvictProductNaive(source.data(), dest.data(), 1, 2, matrix, out.data(), {0, 2});
  EXPECT_EQ(out[0], 5u * 3 + 6 * 4);
  EXPECT_EQ(out[1], 7u);  // 5 * (p - 1) + 12 = -5 + 12
  // Z = 2: out[j] = sum_i M[i * 2 + j] * u[i], u = [s0; s1; d0; d1].
  const std::vector<Elem> s2 = {1, 2};
  const std::vector<Elem> d2 = {3, 4};
  const std::vector<Elem> m2 = {1, 0, 0, 1, 1, 1, 0, 2};
  std::vector<Elem> out2(2);
  EvictProductNaive(s2.data(), d2.data(), 2, 1, m2, out2.data(), {0, 1});
  EXPECT_EQ(out2[0], 1u + 3);
  EXPECT_EQ(out2[1], 2u + 3 + 2 * 4);
}

TEST_P(KernelTest, EvictProductMatchesNaive) {
  auto rng = testing::SeededRng();
  for (std::size_t Z : {1u, 2u, 3u, 5u, 6u, 7u, 10u, 11u, 12u, 13u, 20u, 32u}) {
    for (std::size_t m : {1u, 2u, 3u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 33u, 100u}) {
      CheckEvict(GetParam(), rng, {Z, m, Fill::kRandom});
    }
  }
}

TEST_P(KernelTest, EvictProductExtremeValues) {
  auto rng = testing::SeededRng();
  for (Fill fill : {Fill::kAllMax, Fill::kZero, Fill::kExtremes}) {
    for (std::size_t Z : {1u, 4u, 6u, 19u, 64u}) {
      for (std::size_t m : {1u, 13u, 24u}) CheckEvict(GetParam(), rng, {Z, m, fill});
    }
  }
}

TEST_P(KernelTest, EvictProductLargeShapes) {
  auto rng = testing::SeededRng();
  // Several column tiles of the scalar kernel; several k blocks of the AVX2
  // kernel (2Z exceeds what fits its packing budget at once); Z = 333.
  CheckEvict(GetParam(), rng, {5, 300, Fill::kRandom});
  CheckEvict(GetParam(), rng, {200, 21, Fill::kRandom});
  CheckEvict(GetParam(), rng, {200, 9, Fill::kAllMax});
  CheckEvict(GetParam(), rng, {333, 11, Fill::kRandom});
  // Several 256-column slabs of the AVX-512 kernel, each over several k blocks.
  CheckEvict(GetParam(), rng, {200, 530, Fill::kRandom});
  CheckEvict(GetParam(), rng, {0, 10, Fill::kRandom});
}

TEST_P(KernelTest, ResultsDoNotDependOnColumnSplit) {
  // The contract lets callers split one product across threads by column range.
  auto rng = testing::SeededRng();
  const std::size_t Z = 13, m = 77;
  std::vector<Elem> source(Z * m), dest(Z * m), matrix(2 * Z * Z);
  FillElems(rng, Fill::kRandom, source);
  FillElems(rng, Fill::kRandom, dest);
  FillElems(rng, Fill::kRandom, matrix);
  std::vector<Elem> whole(Z * m), split(Z * m);
  GetParam().evict(source.data(), dest.data(), Z, m, matrix, whole.data(), {0, m});
  for (std::size_t begin = 0; begin < m; begin += 10) {
    GetParam().evict(source.data(), dest.data(), Z, m, matrix, split.data(),
                     {begin, std::min(m, begin + 10)});
  }
  EXPECT_EQ(split, whole);
}

INSTANTIATE_TEST_SUITE_P(AllImplementations, KernelTest, ::testing::ValuesIn(Implementations()),
                         [](const ::testing::TestParamInfo<Implementation>& param_info) {
                           return param_info.param.name;
                         });

TEST(KernelDispatchTest, NamesTheImplementationItUses) {
  const std::string name = FastKernelName();
  EXPECT_EQ(name, internal::Avx512Available() ? "avx512"
                  : internal::Avx2Available() ? "avx2"
                                              : "scalar");
}

TEST(KernelDeathTest, RejectsColumnRangeOutsideRow) {
  std::vector<Elem> bucket(8), select(2), out(4);
  const std::vector<const Elem*> buckets = {bucket.data()};
  EXPECT_DEATH(PathInnerProduct(buckets, 2, 4, select, out.data(), {0, 5}), "column range");
  EXPECT_DEATH(PathInnerProduct(buckets, 2, 4, select, out.data(), {3, 2}), "column range");
  EXPECT_DEATH(PathInnerProduct(buckets, 3, 4, select, out.data(), {0, 4}), "select");
  std::vector<Elem> matrix(7);
  EXPECT_DEATH(EvictProduct(bucket.data(), bucket.data(), 2, 4, matrix, out.data(), {0, 4}),
               "matrix");
}

}  // namespace
}  // namespace s3oram::kernels
