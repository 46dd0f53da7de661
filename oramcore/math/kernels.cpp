#include "oramcore/math/kernels.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>

#include "oramcore/math/kernels_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define S3ORAM_KERNELS_X86 1
#else
#define S3ORAM_KERNELS_X86 0
#endif

namespace s3oram::kernels {
namespace {

// Lazy reduction. Products of canonical elements are at most (p-1)^2 < 2^62 and
// are summed in 64-bit accumulators that are folded with
//   Fold(x) = (x & p) + (x >> 31)  ==  x (mod p), since 2^31 == 1 (mod p),
// which maps any 64-bit value below kMaxFolded (< 2^34). An accumulator that
// starts below kMaxFolded can therefore take kProductsPerFold products before
// it must be folded again; every loop below folds at least that often.
// Full reduction to [0, p) happens once per output element.
constexpr std::uint64_t kP = field::kPrime;
constexpr std::uint64_t kMaxProduct = (kP - 1) * (kP - 1);
constexpr std::uint64_t kMaxFolded = kP + (~std::uint64_t{0} >> 31);
constexpr std::size_t kProductsPerFold = 4;
static_assert(kMaxFolded <= ~std::uint64_t{0} - kProductsPerFold * kMaxProduct,
              "accumulators would overflow between folds");
static_assert(kP < kMaxFolded, "a canonical element is a valid starting accumulator");

inline std::uint64_t Fold(std::uint64_t x) { return (x & kP) + (x >> 31); }

// Shape violations are caller bugs that would otherwise read or write out of
// bounds; the checks are O(1) per call, so they stay on in release builds.
[[noreturn]] void ShapeViolation(const char* kernel, const char* what) {
  std::fprintf(stderr, "s3oram: kernels::%s called with %s\n", kernel, what);
  std::abort();
}

void CheckColumns(const char* kernel, std::size_t m, ColumnRange cols) {
  if (cols.begin > cols.end || cols.end > m) ShapeViolation(kernel, "a column range outside [0, m)");
}

void CheckPathShape(const char* kernel, std::span<const Elem* const> buckets, std::size_t Z,
                    std::size_t m, std::span<const Elem> select, ColumnRange cols) {
  CheckColumns(kernel, m, cols);
  if (select.size() != buckets.size() * Z) ShapeViolation(kernel, "select.size() != buckets * Z");
}

void CheckEvictShape(const char* kernel, std::size_t Z, std::size_t m, std::span<const Elem> matrix,
                     ColumnRange cols) {
  CheckColumns(kernel, m, cols);
  if (matrix.size() != 2 * Z * Z) ShapeViolation(kernel, "matrix.size() != 2 * Z * Z");
}

// Row i of the stacked eviction input u = [source; dest].
inline const Elem* EvictRow(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                            std::size_t i) {
  return i < Z ? source + i * m : dest + (i - Z) * m;
}

// Grows on demand and is reused across calls so that the hot path never touches
// the allocator (or page-faults fresh memory). One per thread: callers split a
// product across threads by column range.
class ScratchBuffer {
 public:
  Elem* Get(std::size_t elems) {
    if (elems > capacity_) {
      const std::size_t bytes = (elems * sizeof(Elem) + kAlignment - 1) / kAlignment * kAlignment;
      data_.reset(static_cast<Elem*>(std::aligned_alloc(kAlignment, bytes)));
      if (!data_) {
        capacity_ = 0;
        throw std::bad_alloc();
      }
      capacity_ = bytes / sizeof(Elem);
    }
    return data_.get();
  }

 private:
  static constexpr std::size_t kAlignment = 64;
  struct Free {
    void operator()(Elem* p) const { std::free(p); }
  };
  std::unique_ptr<Elem, Free> data_;
  std::size_t capacity_ = 0;
};

// ---------------------------------------------------------------------------
// Portable kernels. Both are "coefficient x row" streams: acc[c] += coef_k *
// row_k[c] over a tile of columns, kProductsPerFold rows per pass over the tile.

// Columns per pass: 2048 64-bit accumulators (16 KiB) stay in L1 while whole
// rows are streamed.
constexpr std::size_t kInnerTileColumns = 2048;
// The eviction product re-reads all 2Z input rows for every output row, so its
// tile is narrow enough that those rows (2Z x 128 elements; 341 KiB at Z = 333)
// stay in L2.
constexpr std::size_t kEvictScalarTileColumns = 128;

struct RowAndCoef {
  const Elem* row;
  std::uint64_t coef;
};

template <std::size_t N>
void AccumulateScalar(std::uint64_t* acc, const std::array<const Elem*, kProductsPerFold>& rows,
                      const std::array<std::uint64_t, kProductsPerFold>& coefs, std::size_t width) {
  static_assert(N >= 1 && N <= kProductsPerFold);
  for (std::size_t c = 0; c < width; ++c) {
    std::uint64_t sum = acc[c];
    for (std::size_t k = 0; k < N; ++k) sum += coefs[k] * rows[k][c];
    acc[c] = Fold(sum);
  }
}

// acc[0, width) += sum_{k < count} coef(k) * row(k)[0, width), where
// row_and_coef(k) yields a RowAndCoef whose row is already offset to the tile.
template <class RowAndCoef>
void AccumulateRowsScalar(std::uint64_t* acc, std::size_t width, std::size_t count,
                          RowAndCoef row_and_coef) {
  std::array<const Elem*, kProductsPerFold> rows{};
  std::array<std::uint64_t, kProductsPerFold> coefs{};
  std::size_t k = 0;
  for (; k + kProductsPerFold <= count; k += kProductsPerFold) {
    for (std::size_t r = 0; r < kProductsPerFold; ++r) {
      const auto [row, coef] = row_and_coef(k + r);
      rows[r] = row;
      coefs[r] = coef;
    }
    AccumulateScalar<kProductsPerFold>(acc, rows, coefs, width);
  }
  for (; k < count; ++k) {
    const auto [row, coef] = row_and_coef(k);
    rows[0] = row;
    coefs[0] = coef;
    AccumulateScalar<1>(acc, rows, coefs, width);
  }
}

#if S3ORAM_KERNELS_X86
// ---------------------------------------------------------------------------
// AVX2 kernels. _mm256_mul_epu32 multiplies the low 32 bits of each 64-bit lane,
// so a vector of 8 elements is processed as its even lanes (as loaded) and its
// odd lanes (shifted down by 32), each into its own 4 x 64-bit accumulator.

#define S3ORAM_AVX2 [[gnu::target("avx2"), gnu::always_inline]] inline

S3ORAM_AVX2 __m256i Fold256(__m256i x) {
  const __m256i p = _mm256_set1_epi64x(static_cast<long long>(kP));
  return _mm256_add_epi64(_mm256_and_si256(x, p), _mm256_srli_epi64(x, 31));
}

// Multiply-accumulate of one 8-element vector: even/odd += x * coef.
S3ORAM_AVX2 void Mac256(__m256i& even, __m256i& odd, __m256i x, __m256i coef) {
  even = _mm256_add_epi64(even, _mm256_mul_epu32(x, coef));
  odd = _mm256_add_epi64(odd, _mm256_mul_epu32(_mm256_srli_epi64(x, 32), coef));
}

// Accumulators below kMaxFolded -> 8 canonical elements in column order.
S3ORAM_AVX2 __m256i FinishEvenOdd(__m256i even, __m256i odd) {
  // One more fold leaves each lane below 2^31 + 8, so it fits 32 bits.
  even = Fold256(even);
  odd = Fold256(odd);
  const __m256i packed = _mm256_or_si256(even, _mm256_slli_epi64(odd, 32));
  // x in [p, p + 8] becomes x - p; for x < p, x - p wraps above x and min keeps x.
  const __m256i p32 = _mm256_set1_epi32(static_cast<int>(kP));
  return _mm256_min_epu32(packed, _mm256_sub_epi32(packed, p32));
}

// Splits 8 canonical elements into even/odd 64-bit accumulators.
S3ORAM_AVX2 void StartEvenOdd(__m256i x, __m256i& even, __m256i& odd) {
  even = _mm256_and_si256(x, _mm256_set1_epi64x(0xffffffffLL));
  odd = _mm256_srli_epi64(x, 32);
}

// Inner-product accumulators: for vector block v (columns 8v..8v+7 of the tile),
// acc[8v .. 8v+3] are the even columns and acc[8v+4 .. 8v+7] the odd ones.
// Adds N rows (N <= 2 * kProductsPerFold, folding after every kProductsPerFold).
template <std::size_t N>
[[gnu::target("avx2")]] void InnerRowsAvx2(std::uint64_t* acc, const RowAndCoef* rows,
                                           std::size_t blocks) {
  static_assert(N >= 1 && N <= 2 * kProductsPerFold);
  __m256i coef[N];
  const Elem* row[N];
  for (std::size_t k = 0; k < N; ++k) {
    coef[k] = _mm256_set1_epi64x(static_cast<long long>(rows[k].coef));
    row[k] = rows[k].row;
  }
  for (std::size_t v = 0; v < blocks; ++v) {
    auto* slot = reinterpret_cast<__m256i*>(acc + 8 * v);
    __m256i even = _mm256_load_si256(slot);
    __m256i odd = _mm256_load_si256(slot + 1);
#pragma GCC unroll 8
    for (std::size_t k = 0; k < N; ++k) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[k] + 8 * v));
      Mac256(even, odd, x, coef[k]);
      if ((k + 1) % kProductsPerFold == 0 || k + 1 == N) {
        even = Fold256(even);
        odd = Fold256(odd);
      }
    }
    _mm256_store_si256(slot, even);
    _mm256_store_si256(slot + 1, odd);
  }
}

[[gnu::target("avx2")]] void PathInnerProductAvx2Impl(std::span<const Elem* const> buckets,
                                                       std::size_t Z, std::size_t m,
                                                       std::span<const Elem> select, Elem* out,
                                                       ColumnRange cols) {
  constexpr std::size_t kGroup = 2 * kProductsPerFold;
  const std::size_t slots = buckets.size() * Z;
  const auto slot_at = [&](std::size_t q, std::size_t first_column) {
    return RowAndCoef{buckets[q / Z] + (q % Z) * m + first_column, select[q]};
  };
  alignas(64) std::array<std::uint64_t, kInnerTileColumns> acc;
  for (std::size_t tile = cols.begin; tile < cols.end; tile += kInnerTileColumns) {
    const std::size_t width = std::min(kInnerTileColumns, cols.end - tile);
    const std::size_t blocks = width / 8;
    const std::size_t vector_width = blocks * 8;
    std::fill_n(acc.begin(), width, std::uint64_t{0});

    std::array<RowAndCoef, kGroup> group;
    std::size_t q = 0;
    for (; q < slots; q += kGroup) {
      const std::size_t n = std::min(kGroup, slots - q);
      for (std::size_t k = 0; k < n; ++k) group[k] = slot_at(q + k, tile);
      if (n == kGroup) {
        InnerRowsAvx2<kGroup>(acc.data(), group.data(), blocks);
      } else {
        for (std::size_t k = 0; k < n; ++k) InnerRowsAvx2<1>(acc.data(), &group[k], blocks);
      }
      if (vector_width < width) {
        AccumulateRowsScalar(acc.data() + vector_width, width - vector_width, n, [&](std::size_t k) {
          return RowAndCoef{group[k].row + vector_width, group[k].coef};
        });
      }
    }

    for (std::size_t v = 0; v < blocks; ++v) {
      const auto* slot = reinterpret_cast<const __m256i*>(acc.data() + 8 * v);
      const __m256i result = FinishEvenOdd(_mm256_load_si256(slot), _mm256_load_si256(slot + 1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + tile + 8 * v), result);
    }
    for (std::size_t c = vector_width; c < width; ++c) out[tile + c] = field::Reduce(acc[c]);
  }
}

// Eviction GEMM, out (Z x n) = A (Z x 2Z) * u (2Z x n) with A[j][i] = M[i*Z + j].
// Blocking (BLIS-style):
//  * k (the 2Z inner dimension) is cut into blocks of kc so that the packed
//    block of A (all Z rows x kc) fits comfortably in L2;
//  * for each panel of 8 output columns, the kc x 8 slab of u is packed
//    contiguously (it then lives in L1 and is reused by every row block);
//  * the micro-kernel computes kEvictRows x 8 outputs entirely in registers:
//    2 * 5 accumulators + the u vector, its odd half, the broadcast coefficient,
//    a product and the fold mask = 15 of the 16 ymm registers. (6 rows would
//    need 17: GCC spills an accumulator and the kernel gets ~20% slower.)
// Partial sums between k blocks are stored in `out` as canonical elements.
constexpr std::size_t kEvictRows = 5;
constexpr std::size_t kEvictCols = 8;
constexpr std::size_t kPackedABudgetBytes = 256 * 1024;

template <std::size_t R>
[[gnu::target("avx2")]] void EvictMicroAvx2(const Elem* a, const Elem* u, std::size_t kc, Elem* tile,
                                            std::size_t tile_stride, bool accumulate) {
  __m256i even[R];
  __m256i odd[R];
#pragma GCC unroll 8
  for (std::size_t r = 0; r < R; ++r) {
    if (accumulate) {
      StartEvenOdd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + r * tile_stride)),
                   even[r], odd[r]);
    } else {
      even[r] = _mm256_setzero_si256();
      odd[r] = _mm256_setzero_si256();
    }
  }
  // kc is a multiple of kProductsPerFold (the packing pads with zeros).
  for (std::size_t k = 0; k < kc; k += kProductsPerFold) {
    // Not unrolled: GCC would interleave the steps and spill accumulators.
#pragma GCC unroll 1
    for (std::size_t kk = 0; kk < kProductsPerFold; ++kk) {
      const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(u + (k + kk) * kEvictCols));
      const __m256i x_odd = _mm256_srli_epi64(x, 32);
      const Elem* coefs = a + (k + kk) * R;
#pragma GCC unroll 8
      for (std::size_t r = 0; r < R; ++r) {
        const __m256i coef = _mm256_set1_epi32(static_cast<int>(coefs[r]));
        even[r] = _mm256_add_epi64(even[r], _mm256_mul_epu32(x, coef));
        odd[r] = _mm256_add_epi64(odd[r], _mm256_mul_epu32(x_odd, coef));
      }
    }
#pragma GCC unroll 8
    for (std::size_t r = 0; r < R; ++r) {
      even[r] = Fold256(even[r]);
      odd[r] = Fold256(odd[r]);
    }
  }
#pragma GCC unroll 8
  for (std::size_t r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(tile + r * tile_stride),
                        FinishEvenOdd(even[r], odd[r]));
  }
}

ScratchBuffer& PackedABuffer() {
  thread_local ScratchBuffer buffer;
  return buffer;
}
ScratchBuffer& PackedUBuffer() {
  thread_local ScratchBuffer buffer;
  return buffer;
}

std::size_t RoundUp(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

// Packs one k block of the eviction matrix for a micro-kernel of R rows:
// dst[(block * k_padded + k) * R + r] = A[block*R + r][k0 + k], zero-padded
// (rows past Z, k past k_count), where A[j][i] = matrix[i*Z + j].
void PackABlock(std::span<const Elem> matrix, std::size_t Z, std::size_t R, std::size_t k0,
                std::size_t k_count, std::size_t k_padded, std::size_t row_blocks, Elem* dst) {
  for (std::size_t block = 0; block < row_blocks; ++block) {
    Elem* out = dst + block * k_padded * R;
    for (std::size_t k = 0; k < k_padded; ++k) {
      for (std::size_t r = 0; r < R; ++r) {
        const std::size_t j = block * R + r;
        out[k * R + r] = (k < k_count && j < Z) ? matrix[(k0 + k) * Z + j] : 0;
      }
    }
  }
}

[[gnu::target("avx2")]] void EvictProductAvx2Impl(const Elem* source, const Elem* dest,
                                                   std::size_t Z, std::size_t m,
                                                   std::span<const Elem> matrix, Elem* out,
                                                   ColumnRange cols) {
  constexpr std::size_t R = kEvictRows;
  const std::size_t depth = 2 * Z;
  const std::size_t row_blocks = (Z + R - 1) / R;
  const std::size_t padded_rows = row_blocks * R;
  const std::size_t kc = std::clamp(
      kPackedABudgetBytes / (padded_rows * sizeof(Elem)) / kProductsPerFold * kProductsPerFold,
      kProductsPerFold, RoundUp(depth, kProductsPerFold));
  Elem* packed_a = PackedABuffer().Get(padded_rows * kc);
  Elem* packed_u = PackedUBuffer().Get(kc * kEvictCols);

  for (std::size_t k0 = 0; k0 < depth; k0 += kc) {
    const std::size_t k_count = std::min(kc, depth - k0);
    const std::size_t k_padded = RoundUp(k_count, kProductsPerFold);
    PackABlock(matrix, Z, R, k0, k_count, k_padded, row_blocks, packed_a);
    const bool accumulate = k0 > 0;

    for (std::size_t c0 = cols.begin; c0 < cols.end; c0 += kEvictCols) {
      const std::size_t panel_width = std::min(kEvictCols, cols.end - c0);
      for (std::size_t k = 0; k < k_padded; ++k) {
        Elem* dst = packed_u + k * kEvictCols;
        std::fill_n(dst, kEvictCols, Elem{0});
        if (k < k_count) std::copy_n(EvictRow(source, dest, Z, m, k0 + k) + c0, panel_width, dst);
      }
      for (std::size_t block = 0; block < row_blocks; ++block) {
        const std::size_t j0 = block * R;
        const std::size_t rows = std::min(R, Z - j0);
        const Elem* block_a = packed_a + block * k_padded * R;
        Elem* dst = out + j0 * m + c0;
        if (rows == R && panel_width == kEvictCols) {
          EvictMicroAvx2<R>(block_a, packed_u, k_padded, dst, m, accumulate);
          continue;
        }
        // Edge tile: run the same micro-kernel on a full-size copy, so that only
        // [c0, c0 + panel_width) of the existing rows is ever read or written.
        alignas(32) std::array<Elem, R * kEvictCols> edge{};
        if (accumulate) {
          for (std::size_t r = 0; r < rows; ++r) {
            std::copy_n(dst + r * m, panel_width, edge.data() + r * kEvictCols);
          }
        }
        EvictMicroAvx2<R>(block_a, packed_u, k_padded, edge.data(), kEvictCols, accumulate);
        for (std::size_t r = 0; r < rows; ++r) {
          std::copy_n(edge.data() + r * kEvictCols, panel_width, dst + r * m);
        }
      }
    }
  }
}

#undef S3ORAM_AVX2

// ---------------------------------------------------------------------------
// AVX-512 path inner product: the AVX2 scheme on 16-element vectors (even and
// odd lanes in 8 x 64-bit accumulators each). The kernel is bound by the
// number of vector instructions per byte (multiply, shift, add, fold), not by
// memory; 512-bit vectors halve that count. On cores that execute 512-bit
// operations as two 256-bit halves (AMD Zen 4) the gain is in issue and
// scheduling, not in multiplier throughput.

// GCC 12's avx512fintrin.h builds masked intrinsics on _mm512_undefined_*()
// and then warns that the undefined operand "may be used uninitialized" (a
// known false positive of those headers, not of this code).
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define S3ORAM_AVX512 [[gnu::target("avx512f"), gnu::always_inline]] inline

S3ORAM_AVX512 __m512i Fold512(__m512i x) {
  const __m512i p = _mm512_set1_epi64(static_cast<long long>(kP));
  return _mm512_add_epi64(_mm512_and_si512(x, p), _mm512_srli_epi64(x, 31));
}

// Accumulators below kMaxFolded -> 16 canonical elements in column order.
S3ORAM_AVX512 __m512i FinishEvenOdd512(__m512i even, __m512i odd) {
  even = Fold512(even);  // below 2^31 + 8: fits 32 bits
  odd = Fold512(odd);
  const __m512i packed = _mm512_or_si512(even, _mm512_slli_epi64(odd, 32));
  const __m512i p32 = _mm512_set1_epi32(static_cast<int>(kP));
  return _mm512_min_epu32(packed, _mm512_sub_epi32(packed, p32));
}

// As InnerRowsAvx2, on 16-column blocks: acc[16v .. 16v+7] are the even
// columns of block v and acc[16v+8 .. 16v+15] the odd ones.
template <std::size_t N>
[[gnu::target("avx512f")]] void InnerRowsAvx512(std::uint64_t* acc, const RowAndCoef* rows,
                                                std::size_t blocks) {
  static_assert(N >= 1 && N <= 4 * kProductsPerFold);
  __m512i coef[N];
  const Elem* row[N];
  for (std::size_t k = 0; k < N; ++k) {
    coef[k] = _mm512_set1_epi64(static_cast<long long>(rows[k].coef));
    row[k] = rows[k].row;
  }
  for (std::size_t v = 0; v < blocks; ++v) {
    auto* slot = reinterpret_cast<__m512i*>(acc + 16 * v);
    __m512i even = _mm512_load_si512(slot);
    __m512i odd = _mm512_load_si512(slot + 1);
#pragma GCC unroll 16
    for (std::size_t k = 0; k < N; ++k) {
      // The odd columns come from a second load one element further on (the
      // multiply reads the low half of each 64-bit lane), which spends a load
      // instead of a shift. Its 16th element, beyond the block, is masked off:
      // nothing past the row is read.
      const __m512i x = _mm512_loadu_si512(row[k] + 16 * v);
      const __m512i x_odd = _mm512_maskz_loadu_epi32(0x7fff, row[k] + 16 * v + 1);
      even = _mm512_add_epi64(even, _mm512_mul_epu32(x, coef[k]));
      odd = _mm512_add_epi64(odd, _mm512_mul_epu32(x_odd, coef[k]));
      if ((k + 1) % kProductsPerFold == 0 || k + 1 == N) {
        even = Fold512(even);
        odd = Fold512(odd);
      }
    }
    _mm512_store_si512(slot, even);
    _mm512_store_si512(slot + 1, odd);
  }
}

[[gnu::target("avx512f")]] void PathInnerProductAvx512Impl(std::span<const Elem* const> buckets,
                                                           std::size_t Z, std::size_t m,
                                                           std::span<const Elem> select, Elem* out,
                                                           ColumnRange cols) {
  // 16 rows per pass over the accumulators (4 folds): 32 vector registers
  // hold the coefficients and the two accumulators.
  constexpr std::size_t kGroup = 4 * kProductsPerFold;
  const std::size_t slots = buckets.size() * Z;
  const auto slot_at = [&](std::size_t q, std::size_t first_column) {
    return RowAndCoef{buckets[q / Z] + (q % Z) * m + first_column, select[q]};
  };
  alignas(64) std::array<std::uint64_t, kInnerTileColumns> acc;
  for (std::size_t tile = cols.begin; tile < cols.end; tile += kInnerTileColumns) {
    const std::size_t width = std::min(kInnerTileColumns, cols.end - tile);
    const std::size_t blocks = width / 16;
    const std::size_t vector_width = blocks * 16;
    std::fill_n(acc.begin(), width, std::uint64_t{0});

    std::array<RowAndCoef, kGroup> group;
    for (std::size_t q = 0; q < slots; q += kGroup) {
      const std::size_t n = std::min(kGroup, slots - q);
      for (std::size_t k = 0; k < n; ++k) group[k] = slot_at(q + k, tile);
      if (n == kGroup) {
        InnerRowsAvx512<kGroup>(acc.data(), group.data(), blocks);
      } else {
        for (std::size_t k = 0; k < n; ++k) InnerRowsAvx512<1>(acc.data(), &group[k], blocks);
      }
      if (vector_width < width) {
        AccumulateRowsScalar(acc.data() + vector_width, width - vector_width, n, [&](std::size_t k) {
          return RowAndCoef{group[k].row + vector_width, group[k].coef};
        });
      }
    }

    for (std::size_t v = 0; v < blocks; ++v) {
      const auto* slot = reinterpret_cast<const __m512i*>(acc.data() + 16 * v);
      const __m512i result =
          FinishEvenOdd512(_mm512_load_si512(slot), _mm512_load_si512(slot + 1));
      _mm512_storeu_si512(reinterpret_cast<__m512i*>(out + tile + 16 * v), result);
    }
    for (std::size_t c = vector_width; c < width; ++c) out[tile + c] = field::Reduce(acc[c]);
  }
}

// AVX-512 eviction GEMM: the AVX2 blocking (packed A block in L2, a packed
// kc x 16 slab of u in L1) with a 16-column micro-kernel of kEvictRows512
// rows. 32 zmm registers hold 2 R accumulators, the u vector, its odd half,
// the broadcast coefficient and temporaries. On cores that split 512-bit
// operations in two (Zen 4) the multiplies cost the same as AVX2's; the gain
// is one broadcast and one load per 16 columns instead of per 8, and more
// rows sharing each u vector.
constexpr std::size_t kEvictRows512 = 12;
constexpr std::size_t kEvictCols512 = 16;
// Columns of u packed at once (one slab, several 16-column panels).
constexpr std::size_t kEvictSlabColumns512 = 256;

S3ORAM_AVX512 void StartEvenOdd512(__m512i x, __m512i& even, __m512i& odd) {
  even = _mm512_and_si512(x, _mm512_set1_epi64(0xffffffffLL));
  odd = _mm512_srli_epi64(x, 32);
}

template <std::size_t R>
[[gnu::target("avx512f")]] void EvictMicroAvx512(const Elem* a, const Elem* u, std::size_t u_stride,
                                                 std::size_t kc, Elem* tile,
                                                 std::size_t tile_stride, bool accumulate) {
  __m512i even[R];
  __m512i odd[R];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r) {
    if (accumulate) {
      StartEvenOdd512(_mm512_loadu_si512(tile + r * tile_stride), even[r], odd[r]);
    } else {
      even[r] = _mm512_setzero_si512();
      odd[r] = _mm512_setzero_si512();
    }
  }
  // kc is a multiple of kProductsPerFold (the packing pads with zeros).
  for (std::size_t k = 0; k < kc; k += kProductsPerFold) {
#pragma GCC unroll 1
    for (std::size_t kk = 0; kk < kProductsPerFold; ++kk) {
      const __m512i x = _mm512_loadu_si512(u + (k + kk) * u_stride);
      const __m512i x_odd = _mm512_srli_epi64(x, 32);
      const Elem* coefs = a + (k + kk) * R;
#pragma GCC unroll 16
      for (std::size_t r = 0; r < R; ++r) {
        const __m512i coef = _mm512_set1_epi32(static_cast<int>(coefs[r]));
        even[r] = _mm512_add_epi64(even[r], _mm512_mul_epu32(x, coef));
        odd[r] = _mm512_add_epi64(odd[r], _mm512_mul_epu32(x_odd, coef));
      }
    }
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
      even[r] = Fold512(even[r]);
      odd[r] = Fold512(odd[r]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r) {
    _mm512_storeu_si512(tile + r * tile_stride, FinishEvenOdd512(even[r], odd[r]));
  }
}

[[gnu::target("avx512f")]] void EvictProductAvx512Impl(const Elem* source, const Elem* dest,
                                                       std::size_t Z, std::size_t m,
                                                       std::span<const Elem> matrix, Elem* out,
                                                       ColumnRange cols) {
  constexpr std::size_t R = kEvictRows512;
  constexpr std::size_t C = kEvictCols512;
  constexpr std::size_t W = kEvictSlabColumns512;
  const std::size_t depth = 2 * Z;
  const std::size_t row_blocks = (Z + R - 1) / R;
  const std::size_t padded_rows = row_blocks * R;
  const std::size_t kc = std::clamp(
      kPackedABudgetBytes / (padded_rows * sizeof(Elem)) / kProductsPerFold * kProductsPerFold,
      kProductsPerFold, RoundUp(depth, kProductsPerFold));
  const std::size_t k_blocks = (depth + kc - 1) / kc;
  // All of A, packed once per call, k block after k block:
  // packed_a[b * padded_rows * kc + (block * k_padded + k) * R + r]
  //   = A[block*R + r][b * kc + k], zero-padded.
  Elem* packed_a = PackedABuffer().Get(k_blocks * padded_rows * kc);
  Elem* packed_u = PackedUBuffer().Get(kc * W);
  for (std::size_t b = 0; b < k_blocks; ++b) {
    const std::size_t k0 = b * kc;
    const std::size_t k_count = std::min(kc, depth - k0);
    const std::size_t k_padded = RoundUp(k_count, kProductsPerFold);
    PackABlock(matrix, Z, R, k0, k_count, k_padded, row_blocks, packed_a + b * padded_rows * kc);
  }

  // Slab by slab of W columns, every k block in turn: the slab's Z x W
  // outputs stay in L2 while the k blocks accumulate into them (with rows
  // 4 m bytes apart, at 256 KiB blocks, a pass over all outputs per k block
  // would go to memory each time).
  for (std::size_t s0 = cols.begin; s0 < cols.end; s0 += W) {
    const std::size_t slab_width = std::min(W, cols.end - s0);
    const std::size_t slab_padded = RoundUp(slab_width, C);
    for (std::size_t b = 0; b < k_blocks; ++b) {
      const std::size_t k0 = b * kc;
      const std::size_t k_count = std::min(kc, depth - k0);
      const std::size_t k_padded = RoundUp(k_count, kProductsPerFold);
      const bool accumulate = b > 0;
      // The slab's part of each row of the k block, contiguous (1 KiB reads
      // the prefetcher follows), zero-padded to whole panels.
      for (std::size_t k = 0; k < k_padded; ++k) {
        Elem* dst = packed_u + k * W;
        if (k < k_count) {
          std::copy_n(EvictRow(source, dest, Z, m, k0 + k) + s0, slab_width, dst);
          std::fill(dst + slab_width, dst + slab_padded, Elem{0});
        } else {
          std::fill_n(dst, slab_padded, Elem{0});
        }
      }
      const Elem* a_block = packed_a + b * padded_rows * kc;
      for (std::size_t p0 = 0; p0 < slab_width; p0 += C) {
        const std::size_t panel_width = std::min(C, slab_width - p0);
        const Elem* panel_u = packed_u + p0;
        const std::size_t c0 = s0 + p0;
        for (std::size_t block = 0; block < row_blocks; ++block) {
          const std::size_t j0 = block * R;
          const std::size_t rows = std::min(R, Z - j0);
          const Elem* block_a = a_block + block * k_padded * R;
          Elem* dst = out + j0 * m + c0;
          if (rows == R && panel_width == C) {
            EvictMicroAvx512<R>(block_a, panel_u, W, k_padded, dst, m, accumulate);
            continue;
          }
          // Edge tile: the same micro-kernel on a full-size copy, so that only
          // [c0, c0 + panel_width) of the existing rows is ever read or written.
          alignas(64) std::array<Elem, R * C> edge{};
          if (accumulate) {
            for (std::size_t r = 0; r < rows; ++r) {
              std::copy_n(dst + r * m, panel_width, edge.data() + r * C);
            }
          }
          EvictMicroAvx512<R>(block_a, panel_u, W, k_padded, edge.data(), C, accumulate);
          for (std::size_t r = 0; r < rows; ++r) {
            std::copy_n(edge.data() + r * C, panel_width, dst + r * m);
          }
        }
      }
    }
  }
}

#undef S3ORAM_AVX512
#pragma GCC diagnostic pop
#endif  // S3ORAM_KERNELS_X86

using PathInnerProductFn = void (*)(std::span<const Elem* const>, std::size_t, std::size_t,
                                    std::span<const Elem>, Elem*, ColumnRange);
using EvictProductFn = void (*)(const Elem*, const Elem*, std::size_t, std::size_t,
                                std::span<const Elem>, Elem*, ColumnRange);

struct Implementation {
  PathInnerProductFn path_inner_product;
  EvictProductFn evict_product;
  const char* name;
};

const Implementation& Selected() {
  static const Implementation selected =
      internal::Avx512Available()
          ? Implementation{internal::PathInnerProductAvx512, internal::EvictProductAvx512, "avx512"}
      : internal::Avx2Available()
          ? Implementation{internal::PathInnerProductAvx2, internal::EvictProductAvx2, "avx2"}
          : Implementation{internal::PathInnerProductScalar, internal::EvictProductScalar,
                           "scalar"};
  return selected;
}

}  // namespace

namespace internal {

bool Avx2Available() {
#if S3ORAM_KERNELS_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

bool Avx512Available() {
#if S3ORAM_KERNELS_X86
  __builtin_cpu_init();
  return Avx2Available() && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

void PathInnerProductScalar(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                            std::span<const Elem> select, Elem* out, ColumnRange cols) {
  CheckPathShape("PathInnerProduct", buckets, Z, m, select, cols);
  const std::size_t slots = buckets.size() * Z;
  std::array<std::uint64_t, kInnerTileColumns> acc;
  for (std::size_t tile = cols.begin; tile < cols.end; tile += kInnerTileColumns) {
    const std::size_t width = std::min(kInnerTileColumns, cols.end - tile);
    std::fill_n(acc.begin(), width, std::uint64_t{0});
    AccumulateRowsScalar(acc.data(), width, slots, [&](std::size_t q) {
      return RowAndCoef{buckets[q / Z] + (q % Z) * m + tile, select[q]};
    });
    for (std::size_t c = 0; c < width; ++c) out[tile + c] = field::Reduce(acc[c]);
  }
}

void EvictProductScalar(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                        std::span<const Elem> matrix, Elem* out, ColumnRange cols) {
  CheckEvictShape("EvictProduct", Z, m, matrix, cols);
  std::array<std::uint64_t, kEvictScalarTileColumns> acc;
  for (std::size_t tile = cols.begin; tile < cols.end; tile += kEvictScalarTileColumns) {
    const std::size_t width = std::min(kEvictScalarTileColumns, cols.end - tile);
    for (std::size_t j = 0; j < Z; ++j) {
      std::fill_n(acc.begin(), width, std::uint64_t{0});
      AccumulateRowsScalar(acc.data(), width, 2 * Z, [&](std::size_t i) {
        return RowAndCoef{EvictRow(source, dest, Z, m, i) + tile, matrix[i * Z + j]};
      });
      for (std::size_t c = 0; c < width; ++c) out[j * m + tile + c] = field::Reduce(acc[c]);
    }
  }
}

void PathInnerProductAvx2(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                          std::span<const Elem> select, Elem* out, ColumnRange cols) {
  CheckPathShape("PathInnerProduct", buckets, Z, m, select, cols);
#if S3ORAM_KERNELS_X86
  PathInnerProductAvx2Impl(buckets, Z, m, select, out, cols);
#else
  PathInnerProductScalar(buckets, Z, m, select, out, cols);
#endif
}

void PathInnerProductAvx512(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                            std::span<const Elem> select, Elem* out, ColumnRange cols) {
  CheckPathShape("PathInnerProduct", buckets, Z, m, select, cols);
#if S3ORAM_KERNELS_X86
  PathInnerProductAvx512Impl(buckets, Z, m, select, out, cols);
#else
  PathInnerProductScalar(buckets, Z, m, select, out, cols);
#endif
}

void EvictProductAvx2(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                      std::span<const Elem> matrix, Elem* out, ColumnRange cols) {
  CheckEvictShape("EvictProduct", Z, m, matrix, cols);
#if S3ORAM_KERNELS_X86
  if (Z == 0) return;
  EvictProductAvx2Impl(source, dest, Z, m, matrix, out, cols);
#else
  EvictProductScalar(source, dest, Z, m, matrix, out, cols);
#endif
}

void EvictProductAvx512(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                        std::span<const Elem> matrix, Elem* out, ColumnRange cols) {
  CheckEvictShape("EvictProduct", Z, m, matrix, cols);
#if S3ORAM_KERNELS_X86
  if (Z == 0) return;
  EvictProductAvx512Impl(source, dest, Z, m, matrix, out, cols);
#else
  EvictProductScalar(source, dest, Z, m, matrix, out, cols);
#endif
}

}  // namespace internal

void PathInnerProduct(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                      std::span<const Elem> select, Elem* out, ColumnRange cols) {
  Selected().path_inner_product(buckets, Z, m, select, out, cols);
}

void EvictProduct(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                  std::span<const Elem> matrix, Elem* out, ColumnRange cols) {
  Selected().evict_product(source, dest, Z, m, matrix, out, cols);
}

const char* FastKernelName() { return Selected().name; }

void PathInnerProductNaive(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                           std::span<const Elem> select, Elem* out, ColumnRange cols) {
  CheckPathShape("PathInnerProductNaive", buckets, Z, m, select, cols);
  for (std::size_t c = cols.begin; c < cols.end; ++c) {
    Elem sum = 0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      for (std::size_t s = 0; s < Z; ++s) {
        sum = field::Add(sum, field::Mul(select[b * Z + s], buckets[b][s * m + c]));
      }
    }
    out[c] = sum;
  }
}

void EvictProductNaive(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                       std::span<const Elem> matrix, Elem* out, ColumnRange cols) {
  CheckEvictShape("EvictProductNaive", Z, m, matrix, cols);
  for (std::size_t j = 0; j < Z; ++j) {
    for (std::size_t c = cols.begin; c < cols.end; ++c) {
      Elem sum = 0;
      for (std::size_t i = 0; i < 2 * Z; ++i) {
        sum = field::Add(sum, field::Mul(matrix[i * Z + j], EvictRow(source, dest, Z, m, i)[c]));
      }
      out[j * m + c] = sum;
    }
  }
}

}  // namespace s3oram::kernels
