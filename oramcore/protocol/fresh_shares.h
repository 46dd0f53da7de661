// Shamir sharing of a secret vector under fresh random polynomials: the one
// place the protocol layer turns plaintext elements into per-server shares.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/random_elems.h"
#include "oramcore/math/shamir.h"
#include "oramcore/wire/share_seeds.h"

namespace s3oram {

// Shares `secret` (n elements) among outs.size() parties with threshold t,
// drawing the polynomial coefficients from the CSPRNG (a fixed or reused
// polynomial would let t colluding servers' views correlate across writes).
// outs[i] receives party i's n shares.
inline void ShareVector(std::span<const field::Elem> secret, std::size_t t,
                        std::vector<std::vector<field::Elem>>& outs) {
  std::vector<field::Elem> coeffs(secret.size() * t);
  random::Elems(coeffs);
  std::vector<field::Elem*> ptrs;
  for (auto& o : outs) {
    o.resize(secret.size());
    ptrs.push_back(o.data());
  }
  shamir::Create(secret, t, coeffs, ptrs);
}

// The party whose share goes as its seed (wire::ShareSeed) while every
// server takes part. A client seeds the lowest server that takes part
// (ClientSession::seeded_party): the same one for every request while the
// participants stay the same, so every server sees the same sizes whatever
// is accessed, and a client that left server 0 out still sends one seed
// instead of a share.
inline constexpr std::size_t kSeededParty = 0;

// As ShareVector, but party `seeded`'s share is drawn from a fresh seed
// (wire::NewShareSeed), which `seed` receives, and outs[seeded] is left
// empty: the sharing is the line through the secret and that pseudorandom
// share (shamir::CreateThroughShare), which is only possible for t = 1; for
// another t this is ShareVector, and seed.count is 0.
inline void ShareVectorSeeded(std::span<const field::Elem> secret, std::size_t t,
                              std::vector<std::vector<field::Elem>>& outs, wire::ShareSeed& seed,
                              std::size_t seeded = kSeededParty) {
  if (t != 1 || secret.empty()) {
    seed = wire::ShareSeed{};
    ShareVector(secret, t, outs);
    return;
  }
  seed = wire::NewShareSeed(static_cast<std::uint32_t>(secret.size()));
  const std::vector<field::Elem> drawn = wire::ExpandShareSeed(seed);
  std::vector<field::Elem*> ptrs;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (i == seeded) {
      outs[i].clear();
      ptrs.push_back(nullptr);
    } else {
      outs[i].resize(secret.size());
      ptrs.push_back(outs[i].data());
    }
  }
  shamir::CreateThroughShare(secret, seeded, drawn, ptrs);
}

}  // namespace s3oram
