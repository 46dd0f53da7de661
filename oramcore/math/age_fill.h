// The content `s3oram age-fill` gives a new tree (wire.h AGE_FILL; benchmarks
// only): in every slot, a sharing of zero whose coefficients every server
// expands from one public seed and the bucket number, so that the three
// servers write consistent sharings without talking to each other.
//
// Why zero: an empty slot of a tree in use holds a sharing of some value the
// client ignores; zero has zero share-MAC tags (share_mac.h is linear) and so
// passes every check an eviction or a scrub makes, exactly as the all-zero
// holes of a new tree do. Unlike holes, these slots are real data on disk,
// which every retrieval and eviction must read: the cost of a tree in use
// for months, without months of evictions.
//
// Not secret and not meant to be: every server knows the seed, so each knows
// the others' shares of these slots. They hold nothing but zeros, every
// block the client stores goes into fresh sharings (root writes, SMP
// outputs), and which buckets an eviction rewrites is public already.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "oramcore/math/field.h"

namespace s3oram::age_fill {

inline constexpr std::size_t kSeedBytes = 32;
using Seed = std::array<std::uint8_t, kSeedBytes>;

// Party `party`'s share of bucket `bucket`'s fill (out: the whole bucket,
// Z * m elements): out[j] = sum_{k=1..t} a_k[j] * x^k with x = PartyX(party)
// and a_k[j] expanded from (seed, bucket). Deterministic; the same a_k on
// every party, so the parties' outputs are degree-t sharings of zero.
void BucketShares(const Seed& seed, std::uint64_t bucket, std::size_t threshold, std::size_t party,
                  std::span<field::Elem> out);

}  // namespace s3oram::age_fill
