// The sending half of one SMP round (docs/ARCHITECTURE.md §5), fused: this
// server's degree-2t product is re-shared with degree t (shamir::SmpSplit,
// lambda_me applied) a cache-sized chunk at a time, and each peer's shares are
// packed straight into its SMP_SHARES frame while they are in cache.
//
// Against the unfused form (draw every coefficient, split into one vector per
// party, then encode each peer's vector) it makes three fewer passes over the
// product's size in memory: the coefficient array and each peer's share vector
// are never materialised. The coefficients are still fresh CSPRNG output for
// every element (random::Elems per chunk), so the sharing is the same
// distribution.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/wire/wire.h"

namespace s3oram::serverd {

struct SmpFrames {
  // frames[p]: the SMP_SHARES frame for party p (empty for this server);
  // kept from round to round so a round maps no new pages.
  std::vector<std::vector<std::uint8_t>> frames;
  // Offset of the packed shares in every non-empty frame.
  std::size_t shares_offset = 0;
  // This server's own share of every element.
  std::vector<field::Elem> own;
};

// Re-shares lambda_me * product among `parties` parties with threshold t and
// fills `out`: frames for every party of `to` (bit p: party p) but `me`, with
// header `h` and the round's fields (`fields.shares` ignored, from_index
// should be `me`), an empty frame for every other party, and out.own. Every
// element of `product` must be canonical.
void SplitIntoFrames(const wire::Header& h, const wire::SmpShares& fields,
                     std::span<const field::Elem> product, field::Elem lambda_me, std::size_t t,
                     std::size_t parties, std::uint32_t me, std::uint32_t to, SmpFrames& out);

}  // namespace s3oram::serverd
