#include "serverd/smp_frames.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>

#include "oramcore/math/elem_packing.h"
#include "oramcore/math/random_elems.h"
#include "oramcore/math/shamir.h"

namespace s3oram::serverd {

namespace {
// Elements per chunk: the coefficients and the parties' shares of one chunk
// (64 KiB each) stay in L2 between being drawn, split and packed. A multiple
// of 8, so every chunk but the last packs into whole bytes.
constexpr std::size_t kChunk = 16384;
static_assert(kChunk % 8 == 0);
}  // namespace

void SplitIntoFrames(const wire::Header& h, const wire::SmpShares& fields,
                     std::span<const field::Elem> product, field::Elem lambda_me, std::size_t t,
                     std::size_t parties, std::uint32_t me, std::uint32_t to, SmpFrames& out) {
  assert(me < parties);
  const std::size_t n = product.size();
  out.frames.resize(parties);
  auto gets_frame = [&](std::size_t p) { return p != me && ((to >> p) & 1u) != 0; };
  for (std::size_t p = 0; p < parties; ++p) {
    if (!gets_frame(p)) {
      out.frames[p].clear();
    } else {
      out.shares_offset = wire::StartSmpSharesFrame(h, fields, n, out.frames[p]);
    }
  }
  out.own.resize(n);
  std::vector<field::Elem> coeffs(kChunk * t);
  std::vector<std::vector<field::Elem>> scratch(parties, std::vector<field::Elem>(kChunk));
  std::vector<field::Elem*> ptrs(parties);
  for (std::size_t first = 0; first < n; first += kChunk) {
    const std::size_t c = std::min(kChunk, n - first);
    const std::span<field::Elem> chunk_coeffs(coeffs.data(), c * t);
    random::Elems(chunk_coeffs);
    for (std::size_t p = 0; p < parties; ++p) {
      ptrs[p] = p == me ? out.own.data() + first : scratch[p].data();
    }
    shamir::SmpSplit(product.subspan(first, c), lambda_me, t, chunk_coeffs, ptrs);
    for (std::size_t p = 0; p < parties; ++p) {
      if (!gets_frame(p)) continue;
      std::uint8_t* at = out.frames[p].data() + out.shares_offset + wire::PackedElemBytes(first);
      if (!wire::PackElems({scratch[p].data(), c}, at)) {
        // SmpSplit only produces canonical elements.
        std::fprintf(stderr, "s3oram::serverd::SplitIntoFrames: a share of 2^31 or more\n");
        std::abort();
      }
    }
  }
}

}  // namespace s3oram::serverd
