#include "oramcore/math/share_mac.h"

#include <sodium.h>

#include <algorithm>
#include <cassert>

#include "oramcore/math/lazy_sum.h"

namespace s3oram::share_mac {

using field::lazy::Fold;
using field::lazy::kProductsPerFold;

ShareMacKey::ShareMacKey(SecretSpan secret, std::size_t data_elems)
    : ShareMacKey(secret, secret, data_elems) {}

ShareMacKey::ShareMacKey(SecretSpan half0_secret, SecretSpan half1_secret, std::size_t data_elems)
    : d_(data_elems), weights_(kShareMacElems * data_elems) {
  assert(d_ > 0);
  static_assert(randombytes_SEEDBYTES == kKeyBytes);
  // ChaCha20 under each secret with a fixed nonce: the same weights in every
  // libsodium version (ShareMacTest.KnownAnswer pins them), which the tags
  // stored on the servers depend on. Half h takes rows [2h, 2h + 2) of its
  // secret's expansion, so equal secrets give the one-secret key.
  const std::size_t half_elems = kElemsPerHalf * d_;
  std::vector<Elem> expansion(weights_.size());
  const SecretSpan secrets[kHalves] = {half0_secret, half1_secret};
  for (std::size_t h = 0; h < kHalves; ++h) {
    randombytes_buf_deterministic(expansion.data(), expansion.size() * sizeof(Elem),
                                  secrets[h].data());
    std::copy_n(expansion.begin() + static_cast<std::ptrdiff_t>(h * half_elems), half_elems,
                weights_.begin() + static_cast<std::ptrdiff_t>(h * half_elems));
  }
  sodium_memzero(expansion.data(), expansion.size() * sizeof(Elem));
  for (Elem& w : weights_) {
    w &= field::kPrime;
    if (w == field::kPrime) w = 0;  // 0 twice as likely as any other value: 2^-30 per element
  }
}

ShareMacKey::~ShareMacKey() { sodium_memzero(weights_.data(), weights_.size() * sizeof(Elem)); }

void ShareMacKey::Compute(std::span<const Elem> data, Elem* tags) const {
  assert(data.size() == d_);
  static_assert(kShareMacElems == 4, "the loop below computes four tag elements");
  const Elem* x = data.data();
  const Elem* w0 = weights_.data();
  const Elem* w1 = w0 + d_;
  const Elem* w2 = w1 + d_;
  const Elem* w3 = w2 + d_;
  std::uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  std::size_t c = 0;
  for (; c + kProductsPerFold <= d_; c += kProductsPerFold) {
    a0 = Fold(a0);
    a1 = Fold(a1);
    a2 = Fold(a2);
    a3 = Fold(a3);
    for (std::size_t k = 0; k < kProductsPerFold; ++k) {
      const std::uint64_t v = x[c + k];
      a0 += w0[c + k] * v;
      a1 += w1[c + k] * v;
      a2 += w2[c + k] * v;
      a3 += w3[c + k] * v;
    }
  }
  a0 = Fold(a0);
  a1 = Fold(a1);
  a2 = Fold(a2);
  a3 = Fold(a3);
  for (; c < d_; ++c) {
    const std::uint64_t v = x[c];
    a0 += w0[c] * v;
    a1 += w1[c] * v;
    a2 += w2[c] * v;
    a3 += w3[c] * v;
  }
  tags[0] = field::Reduce(a0);
  tags[1] = field::Reduce(a1);
  tags[2] = field::Reduce(a2);
  tags[3] = field::Reduce(a3);
}

void ShareMacKey::Tag(std::span<Elem> slot) const {
  assert(slot.size() == slot_elems());
  Compute(slot.first(d_), slot.data() + d_);
}

bool ShareMacKey::TagsMatch(std::span<const Elem> slot, std::size_t first,
                            std::size_t count) const {
  if (slot.size() != slot_elems()) return false;
  for (Elem e : slot) {
    if (e >= field::kPrime) return false;
  }
  Elem want[kShareMacElems];
  Compute(slot.first(d_), want);
  // The tags are secret-dependent: compare without an early exit.
  Elem diff = 0;
  for (std::size_t r = first; r < first + count; ++r) diff |= want[r] ^ slot[d_ + r];
  sodium_memzero(want, sizeof want);
  return diff == 0;
}

bool ShareMacKey::Verify(std::span<const Elem> slot) const {
  return TagsMatch(slot, 0, kShareMacElems);
}

bool ShareMacKey::VerifyHalf(std::span<const Elem> slot, std::size_t half) const {
  assert(half < kHalves);
  return TagsMatch(slot, half * kElemsPerHalf, kElemsPerHalf);
}

void ShareMacKey::TagNaive(std::span<Elem> slot) const {
  assert(slot.size() == slot_elems());
  for (std::size_t r = 0; r < kShareMacElems; ++r) {
    Elem t = 0;
    for (std::size_t c = 0; c < d_; ++c) t = field::Add(t, field::Mul(weights_[r * d_ + c], slot[c]));
    slot[d_ + r] = t;
  }
}

}  // namespace s3oram::share_mac
