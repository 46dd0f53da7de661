#include "oramcore/math/slot_digest.h"

#include <sodium.h>

#include <cassert>
#include <cstring>

#include "oramcore/math/kernels.h"
#include "oramcore/math/lazy_sum.h"

namespace s3oram::digest {

using field::lazy::Fold;
using field::lazy::kProductsPerFold;

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
