// Authenticated shares: a linear MAC the client appends to every slot it
// writes, so that an eviction's output can be checked before it is committed
// even against a server that deals a *consistent* sharing of wrong values.
//
// A slot of m = d + kShareMacElems elements is d data elements x followed by
//   tag[r] = sum_c key[r][c] * x[c]   (mod p),   r < kShareMacElems,
// key a kShareMacElems x d matrix only the client holds. Its rows come in two
// halves of kElemsPerHalf rows, each expanded from a 32-byte secret of its
// own: row r is row r of the expansion of secret[r / kElemsPerHalf]. With
// both secrets equal (every filesystem before its first rekey: the secret of
// subkeys.h, context "s3osmac_") that is one expansion of one secret, as it
// always was. A rekey replaces one half's secret (state/client_state.h), so
// while it re-tags the tree every slot, re-tagged or not, carries valid tags
// under the other half, and an eviction is checked by that half
// (VerifyHalf) rather than not at all. The map x -> (x, tag) is
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
// the four; (2^-30)^2 = 2^-60 for one half. It is not a signature: the client, which holds the key,
// can forge tags, and the block seal (block_seal.h) still decides which block a value is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "oramcore/math/field.h"

namespace s3oram::share_mac {

using field::Elem;

inline constexpr std::size_t kShareMacElems = 4;
inline constexpr std::size_t kHalves = 2;
inline constexpr std::size_t kElemsPerHalf = kShareMacElems / kHalves;
inline constexpr std::size_t kKeyBytes = 32;
using SecretSpan = std::span<const std::uint8_t, kKeyBytes>;

class ShareMacKey {
 public:
  // `data_elems` is d, the number of data elements of a slot (> 0). One
  // secret keys both halves.
  ShareMacKey(SecretSpan secret, std::size_t data_elems);
  // Half h keyed by `half_secrets[h]`.
  ShareMacKey(SecretSpan half0_secret, SecretSpan half1_secret, std::size_t data_elems);
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
  // The same for the tag elements of half h < kHalves only (slot[d + 2h],
  // slot[d + 2h + 1]): an error survives it with probability <= 2^-60.
  [[nodiscard]] bool VerifyHalf(std::span<const Elem> slot, std::size_t half) const;
  // The definition, element by element, for the property tests.
  void TagNaive(std::span<Elem> slot) const;

 private:
  void Compute(std::span<const Elem> data, Elem* tags) const;
  // Constant-time comparison of tag elements [first, first + count).
  bool TagsMatch(std::span<const Elem> slot, std::size_t first, std::size_t count) const;

  std::size_t d_;
  std::vector<Elem> weights_;  // kShareMacElems rows of d, row-major; secret
};

}  // namespace s3oram::share_mac
