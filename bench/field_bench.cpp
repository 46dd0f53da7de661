// Micro-benchmarks behind the choice of field (oramcore/math/field.h) and of the
// server kernels (oramcore/math/kernels.cpp).
//
// Shapes are those of a real access: B = 4096-byte blocks, a path of H + 1 = 9
// buckets, Z in {64, 333} slots per bucket. Three fields are compared at equal
// payload, so the number of elements per slot differs with the packing density:
//   p31 = 2^31 - 1   (the chosen field; 30 bits per 32-bit element)  m = 1096
//   p61 = 2^61 - 1   (7 bytes per 64-bit element, scalar 64x64->128)   m = 586
//   p32 = 2^32 - 5   (31 bits per 32-bit element, eager folding)       m = 1058
// The alternatives are implemented here only, as well as we reasonably could.
//
// Metrics:
//  * bytes_per_second: payload bytes of slot multiplications per second, i.e.
//    (slots multiplied by a scalar) * B. Comparable across fields.
//  * MAC/s: field-element multiply-accumulates per second.
//  * PathRead/*: a plain sum over as many bytes as the p31 path occupies, the
//    ceiling for the (memory-bound) inner product; one path read again and
//    again, so it lives in the cache.
//  * PathReadTree/*, P31PathTree/*: the same over a new path each iteration,
//    drawn from a 512 MiB pool: the memory read bandwidth, and the kernel on
//    data that comes from memory, as a server's does.
//  * P31Peak/*: multiply-accumulates per second with every operand in
//    registers (scalar imul + add, AVX2 vpmuludq + vpaddq), the ceiling for the
//    (compute-bound) eviction product.
#include <NTL/mat_lzz_p.h>
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/kernels.h"
#include "oramcore/math/kernels_internal.h"

namespace {

using s3oram::kernels::ColumnRange;

constexpr std::size_t kBlockBytes = 4096;
constexpr std::size_t kPathBuckets = 9;

template <class T>
std::vector<T> RandomBelow(std::size_t n, std::uint64_t bound, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint64_t> dist(0, bound - 1);
  std::vector<T> v(n);
  for (auto& e : v) e = static_cast<T>(dist(rng));
  return v;
}

// Inputs of one PathInnerProduct: kPathBuckets separately allocated buckets.
template <class T>
struct PathInput {
  PathInput(std::size_t Z, std::size_t m, std::uint64_t bound) {
    for (std::size_t b = 0; b < kPathBuckets; ++b) {
      storage.push_back(RandomBelow<T>(Z * m, bound, 100 + b));
      buckets.push_back(storage.back().data());
    }
    select = RandomBelow<T>(kPathBuckets * Z, bound, 1);
    out.resize(m);
  }
  std::vector<std::vector<T>> storage;
  std::vector<const T*> buckets;
  std::vector<T> select;
  std::vector<T> out;
};

// Inputs of one EvictProduct.
template <class T>
struct EvictInput {
  EvictInput(std::size_t Z, std::size_t m, std::uint64_t bound)
      : source(RandomBelow<T>(Z * m, bound, 2)),
        dest(RandomBelow<T>(Z * m, bound, 3)),
        matrix(RandomBelow<T>(2 * Z * Z, bound, 4)),
        out(Z * m) {}
  std::vector<T> source;
  std::vector<T> dest;
  std::vector<T> matrix;
  std::vector<T> out;
};

void ReportPath(benchmark::State& state, std::size_t Z, std::size_t m) {
  const auto slots = static_cast<double>(kPathBuckets * Z);
  const auto iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(iterations * slots * kBlockBytes));
  state.counters["MAC/s"] =
      benchmark::Counter(iterations * slots * static_cast<double>(m), benchmark::Counter::kIsRate);
  state.counters["m"] = static_cast<double>(m);
}

void ReportEvict(benchmark::State& state, std::size_t Z, std::size_t m) {
  const auto slot_mults = static_cast<double>(2 * Z * Z);
  const auto iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(iterations * slot_mults * kBlockBytes));
  state.counters["MAC/s"] = benchmark::Counter(iterations * slot_mults * static_cast<double>(m),
                                               benchmark::Counter::kIsRate);
  state.counters["m"] = static_cast<double>(m);
}

bool RequireAvx2(benchmark::State& state) {
  if (s3oram::kernels::internal::Avx2Available()) return true;
  state.SkipWithError("CPU lacks AVX2");
  return false;
}

// ---------------------------------------------------------------------------
// p31 = 2^31 - 1: the library's kernels.

namespace p31 {

using s3oram::field::Elem;
const std::size_t kElems = s3oram::field::ElemsForBytes(kBlockBytes);

using PathFn = void (*)(std::span<const Elem* const>, std::size_t, std::size_t,
                        std::span<const Elem>, Elem*, ColumnRange);
using EvictFn = void (*)(const Elem*, const Elem*, std::size_t, std::size_t, std::span<const Elem>,
                         Elem*, ColumnRange);

void P31Path(benchmark::State& state, PathFn fn, bool needs_avx2) {
  if (needs_avx2 && !RequireAvx2(state)) return;
  const auto Z = static_cast<std::size_t>(state.range(0));
  PathInput<Elem> in(Z, kElems, s3oram::field::kPrime);
  for (auto _ : state) {
    fn(in.buckets, Z, kElems, in.select, in.out.data(), {0, kElems});
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  ReportPath(state, Z, kElems);
}

void P31Evict(benchmark::State& state, EvictFn fn, bool needs_avx2) {
  if (needs_avx2 && !RequireAvx2(state)) return;
  const auto Z = static_cast<std::size_t>(state.range(0));
  EvictInput<Elem> in(Z, kElems, s3oram::field::kPrime);
  for (auto _ : state) {
    fn(in.source.data(), in.dest.data(), Z, kElems, in.matrix, in.out.data(), {0, kElems});
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  ReportEvict(state, Z, kElems);
}

// One eviction product at the 1 GiB defaults (B = 256 KiB: m = 69,920, Z =
// 460): rows 280 KB apart, far beyond the caches, unlike the B = 4 KiB
// shapes above. One product is 2.96e10 MACs.
void P31EvictDefaults(benchmark::State& state, EvictFn fn) {
  if (!RequireAvx2(state)) return;
  constexpr std::size_t Z = 460, m = 69920;
  EvictInput<Elem> in(Z, m, s3oram::field::kPrime);
  for (auto _ : state) {
    fn(in.source.data(), in.dest.data(), Z, m, in.matrix, in.out.data(), {0, m});
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  state.counters["MAC/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2 * Z * Z * static_cast<double>(m),
      benchmark::Counter::kIsRate);
}

// The AVX-512 eviction kernel, where the CPU has it (P31Evict/dispatched uses it then).
void P31EvictAvx512(benchmark::State& state) {
  if (!s3oram::kernels::internal::Avx512Available()) {
    state.SkipWithError("CPU lacks AVX-512F");
    return;
  }
  P31Evict(state, s3oram::kernels::internal::EvictProductAvx512, true);
}

// The AVX-512 path kernel, where the CPU has it (P31Path/dispatched uses it then).
void P31PathAvx512(benchmark::State& state) {
  if (!s3oram::kernels::internal::Avx512Available()) {
    state.SkipWithError("CPU lacks AVX-512F");
    return;
  }
  P31Path(state, s3oram::kernels::internal::PathInnerProductAvx512, true);
}

}  // namespace p31

// ---------------------------------------------------------------------------
// p61 = 2^61 - 1: 64-bit elements, 128-bit accumulators. AVX2 has no 64x64
// multiply, so these are scalar (mul/mulx), the best x86 can do for this field.

namespace p61 {

__extension__ using U128 = unsigned __int128;
using Elem = std::uint64_t;
constexpr std::uint64_t kPrime = (std::uint64_t{1} << 61) - 1;
constexpr std::size_t kPackBytes = 7;
constexpr std::size_t kElems = (kBlockBytes + kPackBytes - 1) / kPackBytes;
// Products are < 2^122; a folded accumulator is < 2^68, so 32 more products fit.
constexpr std::size_t kProductsPerFold = 32;
constexpr std::size_t kRowsPerPass = 4;

inline U128 Fold(U128 x) { return (x & kPrime) + (x >> 61); }
inline Elem Reduce(U128 x) {
  x = Fold(Fold(x));  // < 2^61 + 2^8
  const auto r = static_cast<std::uint64_t>(x);
  return r >= kPrime ? r - kPrime : r;
}

// acc[c] += sum_k coef[k] * rows[k][c] for a pass of kRowsPerPass rows.
void AccumulatePass(U128* acc, const Elem* const* rows, const Elem* coefs, std::size_t width) {
  for (std::size_t c = 0; c < width; ++c) {
    acc[c] += static_cast<U128>(coefs[0]) * rows[0][c] + static_cast<U128>(coefs[1]) * rows[1][c] +
              static_cast<U128>(coefs[2]) * rows[2][c] + static_cast<U128>(coefs[3]) * rows[3][c];
  }
}

// A short last pass repeats its first row with coefficient 0.
template <class RowAndCoef>
void AccumulateRows(U128* acc, std::size_t width, std::size_t count, RowAndCoef row_and_coef) {
  std::array<const Elem*, kRowsPerPass> rows;
  std::array<Elem, kRowsPerPass> coefs;
  std::size_t since_fold = 0;
  for (std::size_t k = 0; k < count;) {
    const std::size_t n = std::min(kRowsPerPass, count - k);
    for (std::size_t r = 0; r < kRowsPerPass; ++r) {
      if (r < n) {
        rows[r] = row_and_coef(k + r, coefs[r]);
      } else {
        rows[r] = rows[0];
        coefs[r] = 0;
      }
    }
    AccumulatePass(acc, rows.data(), coefs.data(), width);
    k += n;
    since_fold += kRowsPerPass;
    if (since_fold + kRowsPerPass > kProductsPerFold) {
      for (std::size_t c = 0; c < width; ++c) acc[c] = Fold(acc[c]);
      since_fold = 0;
    }
  }
}

void PathInnerProduct(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                      std::span<const Elem> select, Elem* out) {
  std::vector<U128> acc(m, 0);
  AccumulateRows(acc.data(), m, buckets.size() * Z, [&](std::size_t q, Elem& coef) {
    coef = select[q];
    return buckets[q / Z] + (q % Z) * m;
  });
  for (std::size_t c = 0; c < m; ++c) out[c] = Reduce(acc[c]);
}

// Per output row, over a column tile small enough that the 2Z input rows of the
// tile stay in L2.
void EvictProduct(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                  std::span<const Elem> matrix, Elem* out) {
  constexpr std::size_t kTile = 64;
  std::array<U128, kTile> acc;
  for (std::size_t tile = 0; tile < m; tile += kTile) {
    const std::size_t width = std::min(kTile, m - tile);
    for (std::size_t j = 0; j < Z; ++j) {
      std::fill_n(acc.begin(), width, U128{0});
      AccumulateRows(acc.data(), width, 2 * Z, [&](std::size_t i, Elem& coef) {
        coef = matrix[i * Z + j];
        return (i < Z ? source + i * m : dest + (i - Z) * m) + tile;
      });
      for (std::size_t c = 0; c < width; ++c) out[j * m + tile + c] = Reduce(acc[c]);
    }
  }
}

void P61Path(benchmark::State& state) {
  const auto Z = static_cast<std::size_t>(state.range(0));
  PathInput<Elem> in(Z, kElems, kPrime);
  for (auto _ : state) {
    PathInnerProduct(in.buckets, Z, kElems, in.select, in.out.data());
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  ReportPath(state, Z, kElems);
}

void P61Evict(benchmark::State& state) {
  const auto Z = static_cast<std::size_t>(state.range(0));
  EvictInput<Elem> in(Z, kElems, kPrime);
  for (auto _ : state) {
    EvictProduct(in.source.data(), in.dest.data(), Z, kElems, in.matrix, in.out.data());
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  ReportEvict(state, Z, kElems);
}

}  // namespace p61

// ---------------------------------------------------------------------------
// p32 = 2^32 - 5: a full 32-bit product no longer leaves headroom in 64 bits,
// so every product is split on arrival: lo += t mod 2^32, hi += t >> 32, and
// the result is (lo + 5 hi) mod p at the end (2^32 == 5 mod p). That is 5 vector
// operations per product where p31 needs 2 plus a fold every 4.

namespace p32 {

using Elem = std::uint32_t;
constexpr std::uint64_t kPrime = (std::uint64_t{1} << 32) - 5;
constexpr std::size_t kElems = (kBlockBytes * 8 + 30) / 31;

inline Elem Finish(std::uint64_t lo, std::uint64_t hi) {
  __extension__ using U128 = unsigned __int128;
  return static_cast<Elem>((static_cast<U128>(hi) * 5 + lo) % kPrime);
}

void PathInnerProductScalar(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                            std::span<const Elem> select, Elem* out) {
  std::vector<std::uint64_t> lo(m, 0), hi(m, 0);
  for (std::size_t q = 0; q < buckets.size() * Z; ++q) {
    const Elem* row = buckets[q / Z] + (q % Z) * m;
    const std::uint64_t coef = select[q];
    for (std::size_t c = 0; c < m; ++c) {
      const std::uint64_t t = coef * row[c];
      lo[c] += t & 0xffffffffu;
      hi[c] += t >> 32;
    }
  }
  for (std::size_t c = 0; c < m; ++c) out[c] = Finish(lo[c], hi[c]);
}

void EvictProductScalar(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                        std::span<const Elem> matrix, Elem* out) {
  constexpr std::size_t kTile = 128;
  std::array<std::uint64_t, kTile> lo, hi;
  for (std::size_t tile = 0; tile < m; tile += kTile) {
    const std::size_t width = std::min(kTile, m - tile);
    for (std::size_t j = 0; j < Z; ++j) {
      std::fill_n(lo.begin(), width, 0);
      std::fill_n(hi.begin(), width, 0);
      for (std::size_t i = 0; i < 2 * Z; ++i) {
        const Elem* row = (i < Z ? source + i * m : dest + (i - Z) * m) + tile;
        const std::uint64_t coef = matrix[i * Z + j];
        for (std::size_t c = 0; c < width; ++c) {
          const std::uint64_t t = coef * row[c];
          lo[c] += t & 0xffffffffu;
          hi[c] += t >> 32;
        }
      }
      for (std::size_t c = 0; c < width; ++c) out[j * m + tile + c] = Finish(lo[c], hi[c]);
    }
  }
}

#define P32_AVX2 [[gnu::target("avx2"), gnu::always_inline]] inline

P32_AVX2 void Mac(__m256i& lo, __m256i& hi, __m256i x, __m256i coef, __m256i low_mask) {
  const __m256i t = _mm256_mul_epu32(x, coef);
  lo = _mm256_add_epi64(lo, _mm256_and_si256(t, low_mask));
  hi = _mm256_add_epi64(hi, _mm256_srli_epi64(t, 32));
}

// Accumulators per 8 columns: lo/hi of even lanes, lo/hi of odd lanes. Adds N
// rows per pass over the accumulators, like the p31 kernel.
template <std::size_t N>
[[gnu::target("avx2")]] void PathRowsAvx2(std::uint64_t* acc, const Elem* const* rows,
                                          const Elem* coefs, std::size_t blocks) {
  const __m256i low_mask = _mm256_set1_epi64x(0xffffffffLL);
  __m256i coef[N];
  for (std::size_t k = 0; k < N; ++k) coef[k] = _mm256_set1_epi32(static_cast<int>(coefs[k]));
  for (std::size_t v = 0; v < blocks; ++v) {
    auto* a = reinterpret_cast<__m256i_u*>(acc + 16 * v);
    __m256i lo_e = _mm256_loadu_si256(a), hi_e = _mm256_loadu_si256(a + 1);
    __m256i lo_o = _mm256_loadu_si256(a + 2), hi_o = _mm256_loadu_si256(a + 3);
    for (std::size_t k = 0; k < N; ++k) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i_u*>(rows[k] + 8 * v));
      Mac(lo_e, hi_e, x, coef[k], low_mask);
      Mac(lo_o, hi_o, _mm256_srli_epi64(x, 32), coef[k], low_mask);
    }
    _mm256_storeu_si256(a, lo_e);
    _mm256_storeu_si256(a + 1, hi_e);
    _mm256_storeu_si256(a + 2, lo_o);
    _mm256_storeu_si256(a + 3, hi_o);
  }
}

[[gnu::target("avx2")]] void PathInnerProductAvx2(std::span<const Elem* const> buckets,
                                                  std::size_t Z, std::size_t m,
                                                  std::span<const Elem> select, Elem* out) {
  constexpr std::size_t kGroup = 4;
  const std::size_t blocks = m / 8;
  const std::size_t slots = buckets.size() * Z;
  std::vector<std::uint64_t> acc(blocks * 16, 0);
  std::vector<std::uint64_t> tail_lo(m, 0), tail_hi(m, 0);
  for (std::size_t q = 0; q < slots; q += kGroup) {
    const std::size_t n = std::min(kGroup, slots - q);
    std::array<const Elem*, kGroup> rows;
    std::array<Elem, kGroup> coefs;
    for (std::size_t k = 0; k < n; ++k) {
      rows[k] = buckets[(q + k) / Z] + ((q + k) % Z) * m;
      coefs[k] = select[q + k];
    }
    if (n == kGroup) {
      PathRowsAvx2<kGroup>(acc.data(), rows.data(), coefs.data(), blocks);
    } else {
      for (std::size_t k = 0; k < n; ++k) PathRowsAvx2<1>(acc.data(), &rows[k], &coefs[k], blocks);
    }
    for (std::size_t k = 0; k < n; ++k) {
      for (std::size_t c = blocks * 8; c < m; ++c) {
        const std::uint64_t t = std::uint64_t{coefs[k]} * rows[k][c];
        tail_lo[c] += t & 0xffffffffu;
        tail_hi[c] += t >> 32;
      }
    }
  }
  for (std::size_t v = 0; v < blocks; ++v) {
    const std::uint64_t* a = acc.data() + 16 * v;
    for (std::size_t l = 0; l < 4; ++l) {
      out[8 * v + 2 * l] = Finish(a[l], a[4 + l]);
      out[8 * v + 2 * l + 1] = Finish(a[8 + l], a[12 + l]);
    }
  }
  for (std::size_t c = blocks * 8; c < m; ++c) out[c] = Finish(tail_lo[c], tail_hi[c]);
}

// Same blocking as the p31 kernel (packed A block in L2, packed 8-column slab
// of u in L1) with a 3 x 8 register tile: 4 accumulators per row.
[[gnu::target("avx2")]] void EvictProductAvx2(const Elem* source, const Elem* dest, std::size_t Z,
                                              std::size_t m, std::span<const Elem> matrix,
                                              Elem* out) {
  constexpr std::size_t R = 3;
  const std::size_t depth = 2 * Z;
  const std::size_t row_blocks = (Z + R - 1) / R;
  const std::size_t kc = std::min(depth, std::max<std::size_t>(16, 65536 / (row_blocks * R)));
  std::vector<Elem> packed_a(row_blocks * R * kc);
  std::vector<Elem> packed_u(kc * 8);
  // Sums of up to 2Z products of < 2^64 each, kept exact across k blocks.
  std::vector<std::uint64_t> lo(Z * m, 0), hi(Z * m, 0);
  const __m256i low_mask = _mm256_set1_epi64x(0xffffffffLL);
  for (std::size_t k0 = 0; k0 < depth; k0 += kc) {
    const std::size_t kn = std::min(kc, depth - k0);
    for (std::size_t block = 0; block < row_blocks; ++block) {
      for (std::size_t k = 0; k < kn; ++k) {
        for (std::size_t r = 0; r < R; ++r) {
          const std::size_t j = block * R + r;
          packed_a[(block * kn + k) * R + r] = j < Z ? matrix[(k0 + k) * Z + j] : 0;
        }
      }
    }
    for (std::size_t c0 = 0; c0 < m; c0 += 8) {
      const std::size_t width = std::min<std::size_t>(8, m - c0);
      for (std::size_t k = 0; k < kn; ++k) {
        const std::size_t i = k0 + k;
        const Elem* row = (i < Z ? source + i * m : dest + (i - Z) * m) + c0;
        std::fill_n(packed_u.data() + k * 8, 8, 0);
        std::copy_n(row, width, packed_u.data() + k * 8);
      }
      for (std::size_t block = 0; block < row_blocks; ++block) {
        __m256i acc[R][4];
        for (auto& row_acc : acc) {
          for (auto& a : row_acc) a = _mm256_setzero_si256();
        }
        const Elem* a_block = packed_a.data() + block * kn * R;
        for (std::size_t k = 0; k < kn; ++k) {
          const __m256i x =
              _mm256_loadu_si256(reinterpret_cast<const __m256i_u*>(packed_u.data() + k * 8));
          const __m256i x_odd = _mm256_srli_epi64(x, 32);
#pragma GCC unroll 4
          for (std::size_t r = 0; r < R; ++r) {
            const __m256i coef = _mm256_set1_epi32(static_cast<int>(a_block[k * R + r]));
            Mac(acc[r][0], acc[r][1], x, coef, low_mask);
            Mac(acc[r][2], acc[r][3], x_odd, coef, low_mask);
          }
        }
        for (std::size_t r = 0; r < R && block * R + r < Z; ++r) {
          alignas(32) std::uint64_t lanes[4][4];
          for (std::size_t l = 0; l < 4; ++l) {
            _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[l]), acc[r][l]);
          }
          const std::size_t base = (block * R + r) * m + c0;
          for (std::size_t l = 0; l < 4; ++l) {
            for (std::size_t parity = 0; parity < 2; ++parity) {
              const std::size_t c = 2 * l + parity;
              if (c >= width) continue;
              lo[base + c] += lanes[2 * parity][l];
              hi[base + c] += lanes[2 * parity + 1][l];
            }
          }
        }
      }
    }
  }
  for (std::size_t e = 0; e < Z * m; ++e) out[e] = Finish(lo[e], hi[e]);
}

#undef P32_AVX2

using PathFn = void (*)(std::span<const Elem* const>, std::size_t, std::size_t,
                        std::span<const Elem>, Elem*);
using EvictFn = void (*)(const Elem*, const Elem*, std::size_t, std::size_t, std::span<const Elem>,
                         Elem*);

void P32Path(benchmark::State& state, PathFn fn, bool needs_avx2) {
  if (needs_avx2 && !RequireAvx2(state)) return;
  const auto Z = static_cast<std::size_t>(state.range(0));
  PathInput<Elem> in(Z, kElems, kPrime);
  for (auto _ : state) {
    fn(in.buckets, Z, kElems, in.select, in.out.data());
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  ReportPath(state, Z, kElems);
}

void P32Evict(benchmark::State& state, EvictFn fn, bool needs_avx2) {
  if (needs_avx2 && !RequireAvx2(state)) return;
  const auto Z = static_cast<std::size_t>(state.range(0));
  EvictInput<Elem> in(Z, kElems, kPrime);
  for (auto _ : state) {
    fn(in.source.data(), in.dest.data(), Z, kElems, in.matrix, in.out.data());
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  ReportEvict(state, Z, kElems);
}

}  // namespace p32

// ---------------------------------------------------------------------------
// Read bandwidth over as many bytes as the p31 path holds, in the same
// kPathBuckets separate buffers.

[[gnu::target("avx2")]] std::uint64_t SumAvx2(const std::uint64_t* data, std::size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const auto* v = reinterpret_cast<const __m256i_u*>(data + i);
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(v));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(v + 1));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(v + 2));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(v + 3));
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  std::uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) sum += data[i];
  return sum;
}

std::uint64_t SumScalar(const std::uint64_t* data, std::size_t n) {
  std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += data[i];
    s1 += data[i + 1];
    s2 += data[i + 2];
    s3 += data[i + 3];
  }
  for (; i < n; ++i) s0 += data[i];
  return s0 + s1 + s2 + s3;
}

void PathRead(benchmark::State& state, std::uint64_t (*sum)(const std::uint64_t*, std::size_t),
              bool needs_avx2) {
  if (needs_avx2 && !RequireAvx2(state)) return;
  const auto Z = static_cast<std::size_t>(state.range(0));
  const std::size_t words = Z * p31::kElems * sizeof(s3oram::field::Elem) / sizeof(std::uint64_t);
  std::vector<std::vector<std::uint64_t>> buckets;
  for (std::size_t b = 0; b < kPathBuckets; ++b) buckets.push_back(RandomBelow<std::uint64_t>(words, ~0ull, b));
  for (auto _ : state) {
    std::uint64_t total = 0;
    for (const auto& bucket : buckets) total += sum(bucket.data(), bucket.size());
    benchmark::DoNotOptimize(total);
  }
  // Same units as the p31 inner product: the payload those bytes carry.
  ReportPath(state, Z, p31::kElems);
  state.counters.erase("MAC/s");
  state.counters["read_B/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kPathBuckets * words * sizeof(std::uint64_t)),
      benchmark::Counter::kIsRate);
}

// ---------------------------------------------------------------------------
// Tree-resident variants (PathReadTree/*, P31PathTree/*): each iteration reads
// the next path of a pool of paths much larger than the last-level cache, as a
// server does (its tree, hundreds of MB and more, is read one random path per
// access, so the buckets come from DRAM, not from a cache the previous access
// warmed). PathReadTree is then the single-core memory read bandwidth on the
// data size of one path, and P31PathTree the kernel on the same data. The
// cache-resident PathRead/P31Path above read one path over and over.

constexpr std::size_t kTreePoolBytes = std::size_t{512} << 20;

// Paths of `path_elems` 32-bit elements, each below `bound`, back to back.
struct TreePool {
  TreePool(std::size_t elems_per_path, std::uint32_t bound)
      : paths(std::max<std::size_t>(4, kTreePoolBytes / (elems_per_path * 4))),
        path_elems(elems_per_path),
        data(paths * elems_per_path) {
    std::uint64_t x = 0x9e3779b97f4a7c15ull;  // xorshift64*: fast to fill 512 MiB
    for (auto& e : data) {
      x ^= x >> 12;
      x ^= x << 25;
      x ^= x >> 27;
      e = static_cast<std::uint32_t>(((x * 0x2545f4914f6cdd1dull) >> 32) % bound);
    }
  }
  const std::uint32_t* path(std::size_t i) const { return data.data() + (i % paths) * path_elems; }
  std::size_t paths;
  std::size_t path_elems;
  std::vector<std::uint32_t> data;
};

void PathReadTree(benchmark::State& state,
                  std::uint64_t (*sum)(const std::uint64_t*, std::size_t), bool needs_avx2) {
  if (needs_avx2 && !RequireAvx2(state)) return;
  const auto Z = static_cast<std::size_t>(state.range(0));
  const std::size_t bucket_elems = Z * p31::kElems;
  TreePool pool(kPathBuckets * bucket_elems, ~0u);
  std::size_t i = 0;
  for (auto _ : state) {
    const auto* words = reinterpret_cast<const std::uint64_t*>(pool.path(i++));
    benchmark::DoNotOptimize(sum(words, pool.path_elems / 2));
  }
  ReportPath(state, Z, p31::kElems);
  state.counters.erase("MAC/s");
  state.counters["read_B/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * pool.path_elems * 4), benchmark::Counter::kIsRate);
  state.counters["paths"] = static_cast<double>(pool.paths);
}

void P31PathTree(benchmark::State& state, p31::PathFn fn, bool needs_avx2) {
  if (needs_avx2 && !RequireAvx2(state)) return;
  const auto Z = static_cast<std::size_t>(state.range(0));
  const std::size_t bucket_elems = Z * p31::kElems;
  TreePool pool(kPathBuckets * bucket_elems, s3oram::field::kPrime);
  const auto select = RandomBelow<s3oram::field::Elem>(kPathBuckets * Z, s3oram::field::kPrime, 1);
  std::vector<s3oram::field::Elem> out(p31::kElems);
  std::vector<const s3oram::field::Elem*> buckets(kPathBuckets);
  std::size_t i = 0;
  for (auto _ : state) {
    const std::uint32_t* path = pool.path(i++);
    for (std::size_t b = 0; b < kPathBuckets; ++b) buckets[b] = path + b * bucket_elems;
    fn(buckets, Z, p31::kElems, select, out.data(), {0, p31::kElems});
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  ReportPath(state, Z, p31::kElems);
  state.counters["paths"] = static_cast<double>(pool.paths);
}

// ---------------------------------------------------------------------------
// The machine's multiply-accumulate peak for p31 operands (32 x 32 -> 64-bit
// products), everything in registers: no loads, no stores, no reduction. Each
// of kChains independent chains does acc = acc * coef + x, one multiply and
// one add per step; with more chains than the multiplier's latency times its
// issue rate, the loop runs at the multiplier's throughput. The empty asm
// statements make every accumulator opaque to the compiler once per step, so
// the loop is neither vectorised nor folded into a closed form. The p31
// kernels do the same multiply and add per MAC plus a fold every
// kProductsPerFold products and the loads of their operands, so these two
// figures are the ceilings for P31Evict (compute-bound): scalar = one 64-bit
// imul + add per MAC, AVX2 = one _mm256_mul_epu32 + _mm256_add_epi64 per 4.
// Every loop over the chains is fully unrolled so that the accumulator arrays
// become registers (a rolled loop leaves them on the stack, and store-to-load
// forwarding then sets the pace: measured half the rate on this machine).

namespace peak {

constexpr std::size_t kSteps = 4096;  // steps of every chain per benchmark iteration

template <std::size_t Chains>
[[gnu::noinline]] std::uint64_t ScalarMacs(std::uint64_t seed) {
  std::uint64_t coef = (seed | 1) & 0x7fffffff;
  std::uint64_t x = seed >> 33;
  asm("" : "+r"(coef), "+r"(x));
  std::uint64_t acc[Chains];
#pragma GCC unroll 16
  for (std::size_t i = 0; i < Chains; ++i) acc[i] = seed + i;
  for (std::size_t s = 0; s < kSteps; ++s) {
#pragma GCC unroll 16
    for (std::size_t i = 0; i < Chains; ++i) {
      acc[i] = acc[i] * coef + x;
      asm volatile("" : "+r"(acc[i]));
    }
  }
  std::uint64_t sum = 0;
#pragma GCC unroll 16
  for (std::size_t i = 0; i < Chains; ++i) sum += acc[i];
  return sum;
}

template <std::size_t Chains>
[[gnu::noinline, gnu::target("avx2")]] std::uint64_t Avx2Macs(std::uint64_t seed) {
  __m256i coef = _mm256_set1_epi64x(static_cast<long long>((seed | 1) & 0x7fffffff));
  __m256i x = _mm256_set1_epi64x(static_cast<long long>(seed >> 33));
  asm("" : "+x"(coef), "+x"(x));
  __m256i acc[Chains];  // (std::array<__m256i> would drop the type's attributes)
#pragma GCC unroll 16
  for (std::size_t i = 0; i < Chains; ++i) {
    acc[i] = _mm256_set1_epi64x(static_cast<long long>(seed + i));
  }
  for (std::size_t s = 0; s < kSteps; ++s) {
#pragma GCC unroll 16
    for (std::size_t i = 0; i < Chains; ++i) {
      acc[i] = _mm256_add_epi64(_mm256_mul_epu32(acc[i], coef), x);
      asm volatile("" : "+x"(acc[i]));
    }
  }
  __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 16
  for (std::size_t i = 0; i < Chains; ++i) sum = _mm256_add_epi64(sum, acc[i]);
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// 8 scalar chains (64-bit imul: latency 3-4 cycles, one per cycle) and 12
// vector chains (vpmuludq: latency 3-5 cycles, one or two per cycle) leave
// the multiplier no idle cycle on current x86 cores; 14 of the 16 ymm
// registers are then in use. (On the 2-vCPU EPYC of docs/PERFORMANCE.md, 8,
// 10, 12 and 14 vector chains measured 18.0, 18.9, 20.3 and 19.8 G MAC/s in a
// standalone copy of this loop; 16 spill and drop to 14.8.)
constexpr std::size_t kScalarChains = 8;
constexpr std::size_t kAvx2Chains = 12;

void P31Peak(benchmark::State& state, std::uint64_t (*fn)(std::uint64_t), bool needs_avx2,
             std::size_t macs_per_step) {
  if (needs_avx2 && !RequireAvx2(state)) return;
  std::uint64_t seed = 0x12345678abcdefull;
  for (auto _ : state) {
    seed = fn(seed);
    benchmark::DoNotOptimize(seed);
  }
  const auto macs = static_cast<double>(state.iterations()) * static_cast<double>(kSteps) *
                    static_cast<double>(macs_per_step);
  state.counters["MAC/s"] = benchmark::Counter(macs, benchmark::Counter::kIsRate);
  state.counters["chains"] = static_cast<double>(needs_avx2 ? kAvx2Chains : kScalarChains);
}

}  // namespace peak

namespace k = s3oram::kernels;
namespace ki = s3oram::kernels::internal;

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgName("Z")->Arg(64)->Arg(333)->Unit(benchmark::kMillisecond);
}

// ---------------------------------------------------------------------------
// NTL's mat_zz_p product as the eviction kernel (the design names it as a
// candidate): out (Z x m) = M^T (Z x 2Z) * U (2Z x m) over the same prime.
namespace ntl {

void NtlEvict(benchmark::State& state) {
  const auto Z = static_cast<long>(state.range(0));
  const long m = static_cast<long>(p31::kElems);
  NTL::zz_p::init(s3oram::field::kPrime);
  std::mt19937_64 rng(42);
  NTL::mat_zz_p mt, u, out;
  mt.SetDims(Z, 2 * Z);
  u.SetDims(2 * Z, m);
  for (long i = 0; i < Z; ++i)
    for (long j = 0; j < 2 * Z; ++j) mt[i][j] = static_cast<long>(rng() % s3oram::field::kPrime);
  for (long i = 0; i < 2 * Z; ++i)
    for (long j = 0; j < m; ++j) u[i][j] = static_cast<long>(rng() % s3oram::field::kPrime);
  for (auto _ : state) {
    NTL::mul(out, mt, u);
    benchmark::DoNotOptimize(out[0][0]);
  }
  ReportEvict(state, static_cast<std::size_t>(Z), p31::kElems);
}

}  // namespace ntl

using ntl::NtlEvict;
using p31::P31Evict;
using p31::P31EvictDefaults;
using p31::P31Path;
using p32::P32Evict;
using p32::P32Path;
using p61::P61Evict;
using p61::P61Path;
using peak::P31Peak;

// Register-only MAC peaks (see namespace peak): the ceilings for P31Evict.
BENCHMARK_CAPTURE(P31Peak, scalar, peak::ScalarMacs<peak::kScalarChains>, false,
                  peak::kScalarChains)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(P31Peak, avx2, peak::Avx2Macs<peak::kAvx2Chains>, true, 4 * peak::kAvx2Chains)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(PathRead, avx2, SumAvx2, true)->Apply(Shapes);
BENCHMARK_CAPTURE(PathRead, scalar, SumScalar, false)->Apply(Shapes);

BENCHMARK_CAPTURE(PathReadTree, avx2, SumAvx2, true)->Apply(Shapes);
BENCHMARK_CAPTURE(P31PathTree, dispatched, k::PathInnerProduct, false)->Apply(Shapes);

BENCHMARK_CAPTURE(P31Path, dispatched, k::PathInnerProduct, false)->Apply(Shapes);
BENCHMARK_CAPTURE(P31Path, avx2, ki::PathInnerProductAvx2, true)->Apply(Shapes);
BENCHMARK(p31::P31PathAvx512)->Name("P31Path/avx512")->Apply(Shapes);
BENCHMARK_CAPTURE(P31Path, scalar, ki::PathInnerProductScalar, false)->Apply(Shapes);
BENCHMARK(P61Path)->Name("P61Path/scalar")->Apply(Shapes);
BENCHMARK_CAPTURE(P32Path, avx2, p32::PathInnerProductAvx2, true)->Apply(Shapes);
BENCHMARK_CAPTURE(P32Path, scalar, p32::PathInnerProductScalar, false)->Apply(Shapes);

BENCHMARK_CAPTURE(P31Evict, dispatched, k::EvictProduct, false)->Apply(Shapes);
BENCHMARK_CAPTURE(P31Evict, avx2, ki::EvictProductAvx2, true)->Apply(Shapes);
BENCHMARK(p31::P31EvictAvx512)->Name("P31Evict/avx512")->Apply(Shapes);
BENCHMARK_CAPTURE(P31EvictDefaults, dispatched, k::EvictProduct)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(P31EvictDefaults, avx2, ki::EvictProductAvx2)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(P31Evict, scalar, ki::EvictProductScalar, false)->Apply(Shapes);
BENCHMARK(P61Evict)->Name("P61Evict/scalar")->Apply(Shapes);
BENCHMARK(NtlEvict)->Name("NtlEvict/mat_zz_p")->Apply(Shapes);
BENCHMARK_CAPTURE(P32Evict, avx2, p32::EvictProductAvx2, true)->Apply(Shapes);
BENCHMARK_CAPTURE(P32Evict, scalar, p32::EvictProductScalar, false)->Apply(Shapes);

}  // namespace

BENCHMARK_MAIN();
