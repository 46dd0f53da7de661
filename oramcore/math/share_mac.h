// Authenticated shares: a linear MAC the client appends to every slot it
// writes, so that an eviction's output can be checked before it is committed
// even against a server that deals a *consistent* sharing of wrong values.
//
// A slot of m = d + kShareMacElems elements is d data elements x followed by
//   tag[r] = sum_c key[r][c] * x[c]   (mod p),   r < kShareMacElems,
// key a kShareMacElems x d matrix expanded from a 32-byte secret only the
// client holds (subkeys.h, context "s3osmac_"). The map x -> (x, tag) is
// linear, so every linear combination of tagged slots is a tagged slot: the
// all-zero slot (holes, dummies), every slot an eviction computes (a
// permutation of tagged slots), every retrieval answer. An eviction's
// prepared buckets are checked by opening a random public linear combination
// of all their slots (EVICT_CHECK) and verifying its tag.
//
// What it guarantees: the servers hold shares only; no set of t of them learns
// anything of the key or of the tagged values. An error E (any nonzero vector
// of slot changes a lying server chooses without knowing the key) survives
// the check only if the opened combination's error has data part e and tag
// part f with f = key * e: probability <= 2^-30 per tag element for e != 0
// (weights are uniform up to the one folded value), (2^-30)^4 = 2^-120 for
// the four. It is not a signature: the client, which holds the key, can forge
// tags, and the block seal (block_seal.h) still decides which block a value is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "oramcore/math/field.h"

namespace s3oram::share_mac {

using field::Elem;

inline constexpr std::size_t kShareMacElems = 4;
inline constexpr std::size_t kKeyBytes = 32;

class ShareMacKey {
 public:
  // `data_elems` is d, the number of data elements of a slot (> 0).
  ShareMacKey(std::span<const std::uint8_t, kKeyBytes> secret, std::size_t data_elems);
  ~ShareMacKey();
  ShareMacKey(const ShareMacKey&) = delete;
  ShareMacKey& operator=(const ShareMacKey&) = delete;

  std::size_t data_elems() const { return d_; }
  std::size_t slot_elems() const { return d_ + kShareMacElems; }

  // Writes the tags of slot[0, d) into slot[d, d + kShareMacElems).
  // slot.size() == slot_elems(); the data elements must be canonical.
  void Tag(std::span<Elem> slot) const;
  // True if slot[d, m) are the tags of slot[0, d) and every element is
  // canonical. slot.size() == slot_elems().
  [[nodiscard]] bool Verify(std::span<const Elem> slot) const;
  // The definition, element by element, for the property tests.
  void TagNaive(std::span<Elem> slot) const;

 private:
  void Compute(std::span<const Elem> data, Elem* tags) const;

  std::size_t d_;
  std::vector<Elem> weights_;  // kShareMacElems rows of d, row-major; secret
};

}  // namespace s3oram::share_mac
