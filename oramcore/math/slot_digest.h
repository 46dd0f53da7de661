// The digest a server stores beside every slot of its share file, so that a
// damaged slot (a bad sector, a stray write, a flipped bit) is found on the
// next read instead of being folded into an answer or an eviction.
//
// A slot x of m elements has kDigestElems digest elements
//   digest[d] = sum_c key[d][c] * x[c]   (mod p),
// key a kDigestElems x m matrix of field elements expanded from a 32-byte seed
// the server draws when it creates its store. The digest is linear in x: the
// digest of sum_q a_q * slot_q is sum_q a_q * digest(slot_q). A retrieval
// answer is such a combination, so a server checks its answer against the
// stored digests of the path in O(m + path slots) instead of re-reading every
// slot (CheckAnswer, serverd/handle_access.cpp).
//
// What it guarantees: a slot whose elements differ from the ones its digest was
// computed from passes with probability p^-kDigestElems ~ 2^-62 for a change
// that does not depend on the key (disk faults; the key stays on the server).
// It is a checksum, not a MAC against the server that holds it: a malicious
// server can recompute it. Elements that are not canonical (>= p: no
// sharing ever produces them) fail the check outright.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "oramcore/math/field.h"

namespace s3oram::digest {

using field::Elem;

inline constexpr std::size_t kDigestElems = 2;
inline constexpr std::size_t kSeedBytes = 32;
using Seed = std::array<std::uint8_t, kSeedBytes>;
using SlotDigest = std::array<Elem, kDigestElems>;

// The key for slots of m elements. Deterministic in (seed, m): a store
// re-derives it from the seed in its header every time it opens.
class DigestKey {
 public:
  DigestKey(const Seed& seed, std::size_t m);
  std::size_t slot_elems() const { return m_; }

  // Digest of one slot (slot.size() == slot_elems()). False, with *out
  // untouched, if an element is not canonical.
  bool Digest(std::span<const Elem> slot, SlotDigest* out) const;
  // The same, written as the definition reads; the property tests compare the
  // two.
  bool DigestNaive(std::span<const Elem> slot, SlotDigest* out) const;
  // Digests of the Z consecutive slots of a bucket (bucket.size() == Z * m)
  // into out (Z entries). Returns the index of the first slot with a
  // non-canonical element, or Z if there is none.
  std::size_t DigestBucket(std::span<const Elem> bucket, std::span<SlotDigest> out) const;

 private:
  std::size_t m_;
  std::vector<Elem> weights_;  // kDigestElems rows of m, row-major
};

// Public weights for `rows` random linear combinations of `count` slots
// (rows x count, row-major), deterministic in the seed and independent of the
// DigestKey of the same seed: EVICT_CHECK opens sum_q w[r][q] * slot_q of an
// eviction's prepared slots so the client can verify its share MAC
// (math/share_mac.h). Every server derives the same weights from the seed the
// client sends after the shares exist.
std::vector<Elem> CombinationWeights(const Seed& seed, std::size_t rows, std::size_t count);

// acc[c] += sum_s weights[s] * slots[s * m + c] (mod p) for c < m: one
// bucket's (or any run of slots') part of such a combination. slots holds
// weights.size() canonical slots of m elements; acc has m elements.
void AddCombination(std::span<const Elem> slots, std::size_t m, std::span<const Elem> weights,
                    std::span<Elem> acc);

// sum_q coefs[q] * digests[q] (mod p): what the digest of the combination of
// the slots must be.
SlotDigest Combine(std::span<const Elem> coefs, std::span<const SlotDigest> digests);

}  // namespace s3oram::digest
