#include "oramcore/math/slot_digest.h"

#include <sodium.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "oramcore/math/kernels.h"
#include "oramcore/math/lazy_sum.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define S3ORAM_DIGEST_AVX2 1
#else
#define S3ORAM_DIGEST_AVX2 0
#endif

namespace s3oram::digest {

using field::lazy::Fold;
using field::lazy::kProductsPerFold;

namespace {

#if S3ORAM_DIGEST_AVX2
[[gnu::target("avx2"), gnu::always_inline]] inline __m256i Fold256(__m256i v) {
  const __m256i p = _mm256_set1_epi64x(static_cast<long long>(field::lazy::kP));
  return _mm256_add_epi64(_mm256_and_si256(v, p), _mm256_srli_epi64(v, 31));
}

// Eight folded lanes (even and odd) summed below 2^37, folded once more.
[[gnu::target("avx2"), gnu::always_inline]] inline std::uint64_t SumLanes(__m256i e, __m256i o) {
  const __m256i s = _mm256_add_epi64(Fold256(e), Fold256(o));
  alignas(32) std::uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), s);
  return Fold(t[0] + t[1] + t[2] + t[3]);
}
#endif

#if S3ORAM_DIGEST_AVX2
// The digest's sums over the first 8*floor(m/8) elements, 8 per step in
// 64-bit lanes (_mm256_mul_epu32 multiplies the low half of each lane: the
// even elements as loaded, the odd ones shifted down), folded every
// kProductsPerFold steps as the scalar loop folds. Exact sums mod p, so the
// digest is the same value whatever the lane split. Returns the elements
// done; *a0, *a1 are folded (below 2^31 + 2^7) and *high collects the
// canonical check as the scalar loop does.
[[gnu::target("avx2")]] std::size_t DigestPrefixAvx2(const Elem* x, const Elem* w0,
                                                    const Elem* w1, std::size_t m,
                                                    std::uint64_t* a0, std::uint64_t* a1,
                                                    Elem* high) {
  const __m256i one = _mm256_set1_epi32(1);
  __m256i e0 = _mm256_setzero_si256(), o0 = e0, e1 = e0, o1 = e0, hi = e0;
  const std::size_t steps = m / 8;
  std::size_t v = 0;
  while (v < steps) {
    e0 = Fold256(e0);
    o0 = Fold256(o0);
    e1 = Fold256(e1);
    o1 = Fold256(o1);
    const std::size_t group_end = std::min(steps, v + kProductsPerFold);
    for (; v < group_end; ++v) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * v));
      const __m256i k0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0 + 8 * v));
      const __m256i k1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w1 + 8 * v));
      hi = _mm256_or_si256(hi, _mm256_or_si256(xv, _mm256_add_epi32(xv, one)));
      const __m256i xo = _mm256_srli_epi64(xv, 32);
      e0 = _mm256_add_epi64(e0, _mm256_mul_epu32(xv, k0));
      o0 = _mm256_add_epi64(o0, _mm256_mul_epu32(xo, _mm256_srli_epi64(k0, 32)));
      e1 = _mm256_add_epi64(e1, _mm256_mul_epu32(xv, k1));
      o1 = _mm256_add_epi64(o1, _mm256_mul_epu32(xo, _mm256_srli_epi64(k1, 32)));
    }
  }
  *a0 = SumLanes(e0, o0);
  *a1 = SumLanes(e1, o1);
  *high |= static_cast<Elem>(_mm256_movemask_ps(_mm256_castsi256_ps(hi))) != 0 ? 0x80000000u : 0;
  return steps * 8;
}

bool HaveAvx2() {
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return have;
}
#endif

}  // namespace

DigestKey::DigestKey(const Seed& seed, std::size_t m) : m_(m), weights_(kDigestElems * m) {
  // randombytes_buf_deterministic is ChaCha20 keyed by the seed with a fixed
  // nonce: documented to give the same bytes for the same seed in every
  // libsodium version, which the digests on disk depend on
  // (SlotDigestTest.KnownAnswer pins it).
  randombytes_buf_deterministic(weights_.data(), weights_.size() * sizeof(Elem), seed.data());
  for (Elem& w : weights_) {
    w &= field::kPrime;
    if (w == field::kPrime) w = 0;  // 2^-31 per weight; the bias is irrelevant here
  }
}

bool DigestKey::Digest(std::span<const Elem> slot, SlotDigest* out) const {
  assert(slot.size() == m_);
  static_assert(kDigestElems == 2, "the loop below computes two digest elements");
  const Elem* x = slot.data();
  const Elem* w0 = weights_.data();
  const Elem* w1 = weights_.data() + m_;
  // Non-canonical input is detected over the whole slot; the accumulators may
  // then overflow, but the result is discarded.
  Elem high = 0;
  std::uint64_t a0 = 0, a1 = 0;
  std::size_t c = 0;
#if S3ORAM_DIGEST_AVX2
  if (HaveAvx2()) c = DigestPrefixAvx2(x, w0, w1, m_, &a0, &a1, &high);
#endif
  for (; c + kProductsPerFold <= m_; c += kProductsPerFold) {
    a0 = Fold(a0);
    a1 = Fold(a1);
    for (std::size_t k = 0; k < kProductsPerFold; ++k) {
      const Elem v = x[c + k];
      high |= (v | (v + 1)) & 0x80000000u;  // top bit for v = 2^31 - 1 and every v >= 2^31
      a0 += std::uint64_t{w0[c + k]} * v;
      a1 += std::uint64_t{w1[c + k]} * v;
    }
  }
  a0 = Fold(a0);
  a1 = Fold(a1);
  for (; c < m_; ++c) {
    const Elem v = x[c];
    high |= ((v + 1) | v) & 0x80000000u;
    a0 += std::uint64_t{w0[c]} * v;
    a1 += std::uint64_t{w1[c]} * v;
  }
  if (high != 0) return false;
  (*out)[0] = field::Reduce(a0);
  (*out)[1] = field::Reduce(a1);
  return true;
}

bool DigestKey::DigestNaive(std::span<const Elem> slot, SlotDigest* out) const {
  assert(slot.size() == m_);
  SlotDigest d{};
  for (std::size_t c = 0; c < m_; ++c) {
    if (slot[c] >= field::kPrime) return false;
    for (std::size_t k = 0; k < kDigestElems; ++k) {
      d[k] = field::Add(d[k], field::Mul(weights_[k * m_ + c], slot[c]));
    }
  }
  *out = d;
  return true;
}

std::size_t DigestKey::DigestBucket(std::span<const Elem> bucket, std::span<SlotDigest> out) const {
  assert(m_ > 0 && bucket.size() == out.size() * m_);
  for (std::size_t s = 0; s < out.size(); ++s) {
    if (!Digest(bucket.subspan(s * m_, m_), &out[s])) return s;
  }
  return out.size();
}

std::vector<Elem> CombinationWeights(const Seed& seed, std::size_t rows, std::size_t count) {
  // A seed of its own for the weights (BLAKE2b keyed by the request's seed),
  // so they are not the digest key's stream.
  static constexpr char kLabel[] = "s3oram evict-check combination weights";
  Seed derived{};
  crypto_generichash(derived.data(), derived.size(), reinterpret_cast<const unsigned char*>(kLabel),
                     sizeof kLabel - 1, seed.data(), seed.size());
  std::vector<Elem> w(rows * count);
  randombytes_buf_deterministic(w.data(), w.size() * sizeof(Elem), derived.data());
  for (Elem& x : w) {
    x &= field::kPrime;
    if (x == field::kPrime) x = 0;
  }
  return w;
}

void AddCombination(std::span<const Elem> slots, std::size_t m, std::span<const Elem> weights,
                    std::span<Elem> acc) {
  assert(slots.size() == weights.size() * m && acc.size() == m);
  std::vector<Elem> part(m);
  const Elem* rows[] = {slots.data()};
  kernels::PathInnerProduct(rows, weights.size(), m, weights, part.data(), {0, m});
  for (std::size_t c = 0; c < m; ++c) acc[c] = field::Add(acc[c], part[c]);
}

SlotDigest Combine(std::span<const Elem> coefs, std::span<const SlotDigest> digests) {
  assert(coefs.size() == digests.size());
  SlotDigest r{};
  for (std::size_t q = 0; q < coefs.size(); ++q) {
    for (std::size_t k = 0; k < kDigestElems; ++k) {
      r[k] = field::Add(r[k], field::Mul(coefs[q], digests[q][k]));
    }
  }
  return r;
}

}  // namespace s3oram::digest
