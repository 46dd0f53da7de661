// Shamir sharing of a secret vector under fresh random polynomials: the one
// place the protocol layer turns plaintext elements into per-server shares.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/random_elems.h"
#include "oramcore/math/shamir.h"

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

}  // namespace s3oram
