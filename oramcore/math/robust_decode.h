// RobustDecoder: the secrets of a degree-d sharing from the answers of ℓ
// parties when some answer may be wrong (a lying server, a damaged share) or
// missing (a server that did not answer). Goldberg's robust PIR decoded by
// subsets (Devet, Goldberg, Heninger, "Optimally Robust PIR"): any d + 1
// answers determine the polynomial, and with more than d + 1 the others
// check it.
//
//  * The answers that came are first checked against each other: when every
//    element's answers lie on one polynomial of degree d, its secrets are
//    taken and offered to `accept` once.
//  * Otherwise every (d + 1)-subset of them is tried in a fixed order
//    (lexicographic by party) and the first whose secrets `accept` takes is
//    used; the answers off its polynomial are the wrong ones.
//
// Guarantee: if `accept` takes only the true secrets (a MAC, or a value the
// caller knows), the secrets returned are true, and when at most
// (answers - d - 1) answers are wrong the true ones are found and every
// wrong answer is named. With exactly d + 1 answers nothing can be checked:
// they are taken as they are (ℓ = 3 servers answering a degree-2 retrieval).
//
// Pure: no I/O, no randomness; the weights are computed once (NTL).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"

namespace s3oram::shamir {

class RobustDecoder {
 public:
  // For `parties` parties at PartyX(0..parties-1) and polynomials of degree
  // `degree`; parties >= degree + 1 and parties <= 16.
  static Result<RobustDecoder> Make(std::size_t parties, std::size_t degree);

  struct Outcome {
    // The secrets were accepted (else they are those of the answers taken
    // together when consistent, or of the first subset, and none verified).
    bool accepted = false;
    // Every answer that came lies on one polynomial.
    bool consistent = false;
    std::vector<std::size_t> used;   // the parties whose answers gave the secrets
    std::vector<std::size_t> wrong;  // answers that came, off the polynomial used
  };
  using Accept = std::function<bool(std::span<const field::Elem> secrets)>;

  // Decodes n secrets into out from answers[i] (party i's n elements, or
  // null when party i did not answer; answers.size() == parties). nullopt
  // when fewer than degree + 1 answers came.
  std::optional<Outcome> Decode(std::span<const field::Elem* const> answers, std::size_t n,
                                const Accept& accept, field::Elem* out) const;

  std::size_t parties() const { return parties_; }
  std::size_t degree() const { return degree_; }

 private:
  // One (degree + 1)-subset: its parties, its weights at 0, and for every
  // party j the weights that predict j's answer from the subset's.
  struct Subset {
    std::vector<std::size_t> members;
    std::vector<field::Elem> at_zero;
    std::vector<std::vector<field::Elem>> predict;  // [party][member]; empty for members
  };
  // The parties off the polynomial of subset s among the answers present.
  std::vector<std::size_t> OffThePolynomial(const Subset& s,
                                            std::span<const field::Elem* const> answers,
                                            std::size_t n) const;

  std::size_t parties_ = 0;
  std::size_t degree_ = 0;
  std::vector<Subset> subsets_;  // every (degree + 1)-subset, lexicographic
};

}  // namespace s3oram::shamir
