// Shamir secret sharing over F_p (Algorithm 1 of the S3ORAM paper) and the math
// of the SMP degree reduction (Protocol 1, Gennaro et al.).
//
// Parties are numbered 0..parties-1 and party i evaluates at x_i = i + 1 (public,
// non-zero, distinct). A sharing of privacy t uses a random polynomial of degree
// t; any t shares are uniformly distributed whatever the secret; any t + 1
// recover it, and a product of two degree-t sharings (degree 2t) needs 2t + 1.
//
// Functions here are pure: randomness is an input (the caller draws it from
// random::Elems), so tests can check them against naive references.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "oramcore/base/status.h"
#include "oramcore/math/field.h"

namespace s3oram::shamir {

using field::Elem;

// x-coordinate of party i.
constexpr Elem PartyX(std::size_t party) { return static_cast<Elem>(party + 1); }

struct Scheme {
  std::size_t parties = 3;    // ℓ
  std::size_t threshold = 1;  // t; needs parties >= 2t + 1
  Status Validate() const;
};

// Shares n secrets among `parties` parties with degree-t polynomials.
//   coeffs: t * n random elements; coefficient k (1..t) of secret j is coeffs[(k-1) * n + j].
//   out[i]: pointer to n elements for party i.
//   share_i[j] = secrets[j] + sum_k coeffs[k][j] * x_i^k
void Create(std::span<const Elem> secrets, std::size_t t, std::span<const Elem> coeffs,
            std::span<Elem* const> out);

// The degree-1 sharing (t = 1) whose share at party `fixed` is given: for
// every secret j, the line through (0, secrets[j]) and (PartyX(fixed),
// fixed_shares[j]), evaluated at every other party:
//   share_i[j] = s + (r - s) * x_i / x_fixed     (s = secrets[j], r = fixed_shares[j])
// Its slope (r - s) / x_fixed is uniform and independent of s when r is, so
// with fixed_shares drawn at random this is a sharing as random as Create's
// with t = 1; the fixed party's share is then r itself, which lets it be sent
// as the seed r was drawn from (oramcore/math/seed_stream.h). out[i] points
// to n elements for every party i but `fixed`, whose pointer is not used.
void CreateThroughShare(std::span<const Elem> secrets, std::size_t fixed,
                        std::span<const Elem> fixed_shares, std::span<Elem* const> out);

// Lagrange coefficients for interpolating at 0 from the points xs (distinct,
// non-zero): secret = sum_i lambda[i] * y_i for any polynomial of degree < xs.size().
// Computed with NTL.
Result<std::vector<Elem>> LagrangeAtZero(std::span<const Elem> xs);

// Lagrange coefficients for interpolating at an arbitrary point x from the
// points xs (distinct, non-zero): L_i(x) = prod_{j != i} (x - x_j) / (x_i - x_j),
// so that f(x) = sum_i L_i(x) * f(x_i) for any f of degree < xs.size().
// LagrangeAt(xs, 0) == LagrangeAtZero(xs). Used by the server rebuild: t + 1
// survivors' shares determine a lost server's share at its own x.
Result<std::vector<Elem>> LagrangeAt(std::span<const Elem> xs, Elem x);

// Parity checks of degree-t sharings at the points xs (distinct, non-zero):
// n - t - 1 rows of n coefficients, row k being c_i * xs[i]^k with
// c_i = 1 / prod_{j != i} (x_i - x_j), so that sum_i row[i] * f(x_i) = 0 for
// every f of degree <= t, and a change to one share alone makes every row's sum
// nonzero (c_i and x_i are nonzero). Empty if t + 1 >= n (no redundancy).
// Used to check the servers' sharings against each other (wire.h PARITY).
Result<std::vector<std::vector<Elem>>> ParityChecks(std::span<const Elem> xs, std::size_t t);

// Inverse of the Vandermonde matrix V[i][j] = xs[i]^j (row-major, n x n). Row 0 of
// the inverse equals LagrangeAtZero(xs). Computed with NTL.
Result<std::vector<Elem>> VandermondeInverse(std::span<const Elem> xs);

// Recovers n secrets from the shares of the parties at xs, using the given
// Lagrange coefficients (from LagrangeAtZero(xs)):
//   out[j] = sum_i lambda[i] * shares[i][j]
void Recover(std::span<const Elem* const> shares, std::span<const Elem> lambda, std::size_t n,
             Elem* out);

// SMP degree reduction, split into the two local steps around the exchange.
// Party i holds beta_i = its degree-2t share of each product. It re-shares
// lambda_i * beta_i with degree t (lambda from LagrangeAtZero over the 2t+1
// participating parties) and sends share j to party j:
//   SmpSplit(beta, lambda_i, t, coeffs, out)  == Create(lambda_i * beta, t, coeffs, out)
// Party j then adds what it received from every participant (its own included):
//   SmpCombine(received, n, out): out[k] = sum_i received[i][k]
// The result is a degree-t sharing of the product (Protocol 1, step 6, with the
// Lagrange weight applied by the sender instead of the receiver).
void SmpSplit(std::span<const Elem> beta, Elem lambda_i, std::size_t t,
              std::span<const Elem> coeffs, std::span<Elem* const> out);
void SmpCombine(std::span<const Elem* const> received, std::size_t n, Elem* out);

}  // namespace s3oram::shamir
