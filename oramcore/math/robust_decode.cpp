#include "oramcore/math/robust_decode.h"

#include <algorithm>
#include <string>

#include "oramcore/math/shamir.h"

namespace s3oram::shamir {

using field::Elem;

namespace {

// The k-subsets of {0, ..., n-1}, lexicographic.
std::vector<std::vector<std::size_t>> SubsetsOf(std::size_t n, std::size_t k) {
  std::vector<std::vector<std::size_t>> out;
  std::vector<std::size_t> pick(k);
  for (std::size_t i = 0; i < k; ++i) pick[i] = i;
  for (;;) {
    out.push_back(pick);
    std::size_t i = k;
    while (i > 0 && pick[i - 1] == n - k + (i - 1)) --i;
    if (i == 0) return out;
    ++pick[i - 1];
    for (std::size_t j = i; j < k; ++j) pick[j] = pick[j - 1] + 1;
  }
}

void RecoverFrom(const std::vector<std::size_t>& members, const std::vector<Elem>& at_zero,
                 std::span<const Elem* const> answers, std::size_t n, Elem* out) {
  std::vector<const Elem*> ptrs;
  ptrs.reserve(members.size());
  for (std::size_t i : members) ptrs.push_back(answers[i]);
  Recover(ptrs, at_zero, n, out);
}

}  // namespace

Result<RobustDecoder> RobustDecoder::Make(std::size_t parties, std::size_t degree) {
  if (parties < degree + 1 || parties > 16) {
    return Status::InvalidArgument("robust decoding: " + std::to_string(parties) +
                                   " parties for degree " + std::to_string(degree) +
                                   " (needs degree + 1 to 16)");
  }
  RobustDecoder d;
  d.parties_ = parties;
  d.degree_ = degree;
  for (std::vector<std::size_t>& members : SubsetsOf(parties, degree + 1)) {
    Subset s;
    std::vector<Elem> xs;
    for (std::size_t i : members) xs.push_back(PartyX(i));
    S3ORAM_ASSIGN_OR_RETURN(s.at_zero, LagrangeAtZero(xs));
    s.predict.resize(parties);
    for (std::size_t j = 0; j < parties; ++j) {
      if (std::find(members.begin(), members.end(), j) != members.end()) continue;
      S3ORAM_ASSIGN_OR_RETURN(s.predict[j], LagrangeAt(xs, PartyX(j)));
    }
    s.members = std::move(members);
    d.subsets_.push_back(std::move(s));
  }
  return d;
}

std::vector<std::size_t> RobustDecoder::OffThePolynomial(const Subset& s,
                                                         std::span<const Elem* const> answers,
                                                         std::size_t n) const {
  std::vector<std::size_t> off;
  for (std::size_t j = 0; j < parties_; ++j) {
    if (answers[j] == nullptr || s.predict[j].empty()) continue;
    const std::vector<Elem>& w = s.predict[j];
    for (std::size_t e = 0; e < n; ++e) {
      Elem predicted = 0;
      for (std::size_t k = 0; k < s.members.size(); ++k) {
        predicted = field::Add(predicted, field::Mul(w[k], answers[s.members[k]][e]));
      }
      if (predicted != answers[j][e]) {
        off.push_back(j);
        break;
      }
    }
  }
  return off;
}

std::optional<RobustDecoder::Outcome> RobustDecoder::Decode(std::span<const Elem* const> answers,
                                                            std::size_t n, const Accept& accept,
                                                            Elem* out) const {
  if (answers.size() != parties_) return std::nullopt;
  auto present = [&](const Subset& s) {
    return std::all_of(s.members.begin(), s.members.end(),
                       [&](std::size_t i) { return answers[i] != nullptr; });
  };
  const auto first = std::find_if(subsets_.begin(), subsets_.end(), present);
  if (first == subsets_.end()) return std::nullopt;

  Outcome o;
  o.used = first->members;
  const std::vector<std::size_t> off = OffThePolynomial(*first, answers, n);
  o.consistent = off.empty();
  RecoverFrom(first->members, first->at_zero, answers, n, out);
  if (o.consistent) {
    o.accepted = accept(std::span<const Elem>(out, n));
    return o;
  }
  // Some answer is wrong: the first subset whose secrets verify.
  for (auto s = first; s != subsets_.end(); ++s) {
    if (!present(*s)) continue;
    RecoverFrom(s->members, s->at_zero, answers, n, out);
    if (accept(std::span<const Elem>(out, n))) {
      o.accepted = true;
      o.used = s->members;
      o.wrong = OffThePolynomial(*s, answers, n);
      return o;
    }
  }
  RecoverFrom(first->members, first->at_zero, answers, n, out);
  return o;
}

}  // namespace s3oram::shamir
