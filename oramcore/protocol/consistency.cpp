#include "oramcore/protocol/consistency.h"

#include "oramcore/math/shamir.h"
#include "oramcore/wire/wire.h"

namespace s3oram {

std::vector<std::size_t> InconsistentSlots(
    const std::vector<std::vector<field::Elem>>& parity_rows,
    std::span<const std::vector<field::Elem>> digests,
    std::span<const std::vector<std::uint8_t>> skip) {
  constexpr std::size_t kE = wire::kParityElemsPerSlot;
  std::vector<std::size_t> out;
  if (digests.empty()) return out;
  const std::size_t slots = digests[0].size() / kE;
  bool shapes_agree = digests[0].size() % kE == 0;
  for (const auto& d : digests) shapes_agree &= d.size() == digests[0].size();
  for (const auto& s : skip) shapes_agree &= s.size() == slots;
  for (const auto& row : parity_rows) shapes_agree &= row.size() == digests.size();
  if (!shapes_agree) {
    for (std::size_t k = 0; k < slots; ++k) out.push_back(k);
    return out;
  }
  for (std::size_t k = 0; k < slots; ++k) {
    bool skipped = false;
    for (const auto& s : skip) skipped |= s[k] != 0;
    if (skipped) continue;
    bool bad = false;
    for (const auto& row : parity_rows) {
      for (std::size_t e = 0; e < kE && !bad; ++e) {
        field::Elem sum = 0;
        for (std::size_t i = 0; i < digests.size(); ++i) {
          sum = field::Add(sum, field::Mul(row[i], digests[i][k * kE + e]));
        }
        bad = sum != 0;
      }
    }
    if (bad) out.push_back(k);
  }
  return out;
}

std::optional<std::size_t> OddShareOut(std::span<const std::vector<field::Elem>> shares,
                                       const share_mac::ShareMacKey& key,
                                       std::span<const std::size_t> parties) {
  return OddShareOut(
      shares, key.slot_elems(), [&key](std::span<const field::Elem> v) { return key.Verify(v); },
      parties);
}

std::optional<std::size_t> OddShareOut(
    std::span<const std::vector<field::Elem>> shares, std::size_t elems,
    const std::function<bool(std::span<const field::Elem>)>& authentic,
    std::span<const std::size_t> parties) {
  const std::size_t n = shares.size();
  const std::size_t m = elems;
  if (n < 3 || (!parties.empty() && parties.size() != n)) return std::nullopt;
  for (const auto& s : shares) {
    if (s.size() != m) return std::nullopt;
  }
  std::optional<std::size_t> odd;
  std::vector<field::Elem> opened(m);
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<field::Elem> xs;
    std::vector<const field::Elem*> ptrs;
    for (std::size_t i = 0; i < n; ++i) {
      if (i == k) continue;
      xs.push_back(shamir::PartyX(parties.empty() ? i : parties[i]));
      ptrs.push_back(shares[i].data());
    }
    auto lambda = shamir::LagrangeAtZero(xs);
    if (!lambda.ok()) return std::nullopt;
    shamir::Recover(ptrs, *lambda, m, opened.data());
    if (!authentic(opened)) continue;
    if (odd) return std::nullopt;  // two candidates: not attributable
    odd = k;
  }
  return odd;
}

}  // namespace s3oram
