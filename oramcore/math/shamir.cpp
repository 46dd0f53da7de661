// Shamir sharing and SMP degree reduction over F_p, p = 2^31 - 1.
//
// Two kinds of code live here:
//  * Per-element loops (Create, Recover, SmpSplit, SmpCombine) run over vectors
//    of millions of elements on servers, so they use only field.h's inline
//    arithmetic with lazy 64-bit accumulation and no allocation.
//  * The small linear algebra (Lagrange weights, Vandermonde inverse) runs once
//    per eviction on at most a few dozen points, and is done with NTL's zz_p.
//
// Lazy accumulation invariant: every product of two canonical elements is
// <= (2^31 - 2)^2 < 2^62 - 2^32, and a reduced accumulator (or a lone
// canonical value) is < 2^31, so an accumulator that takes at most four
// products between reductions stays below 2^31 + 4 * (2^62 - 2^32) < 2^64 and
// field::Reduce (valid for any x < 2^64) finishes it.
// Inputs are therefore required to be canonical (< p). A non-canonical input
// (say, from a lying server; the wire layer rejects them) can only make the
// unsigned accumulator wrap: the output is then wrong but still a canonical
// element, never undefined behaviour.
#include "oramcore/math/shamir.h"

#include <NTL/lzz_p.h>
#include <NTL/mat_lzz_p.h>

#include <cassert>
#include <cstdint>
#include <exception>
#include <string>
#include <unordered_set>

namespace s3oram::shamir {

namespace {

using field::kPrime;
using field::Reduce;

// Products accumulated before a reduction (see the invariant above).
constexpr std::size_t kLazyProducts = 4;

// NTL keeps the zz_p modulus in a thread-local "current context". Servers call
// into this file from several threads, and other code in the same thread may use
// zz_p with another modulus, so every NTL computation here runs inside a
// zz_pPush that installs our context and restores the caller's on exit. The
// context itself is built once (building it precomputes reduction data) and is
// then shared: NTL's contexts are reference counted with atomic counts when NTL
// is built with NTL_THREADS, which Debian's libntl is.
const NTL::zz_pContext& FieldContext() {
  static const NTL::zz_pContext ctx(static_cast<long>(kPrime));
  return ctx;
}

// The points a Lagrange or Vandermonde computation may use: non-empty,
// canonical, non-zero (x = 0 is where the secret lives) and pairwise distinct
// (otherwise the Vandermonde matrix is singular).
Status ValidatePoints(std::span<const Elem> xs) {
  if (xs.empty()) return Status::InvalidArgument("shamir: no interpolation points");
  std::unordered_set<Elem> seen;
  seen.reserve(xs.size());
  for (Elem x : xs) {
    if (x == 0) return Status::InvalidArgument("shamir: interpolation point x = 0");
    if (x >= kPrime) {
      return Status::InvalidArgument("shamir: interpolation point " + std::to_string(x) +
                                     " is not a field element");
    }
    if (!seen.insert(x).second) {
      return Status::InvalidArgument("shamir: duplicate interpolation point x = " +
                                     std::to_string(x));
    }
  }
  return Status::Ok();
}

Elem ToElem(NTL::zz_p v) { return static_cast<Elem>(NTL::rep(v)); }

// Shares `scale * values[j] + sum_{k=1..t} coeffs[k-1][j] * x_i^k` to every party
// i (x_i = PartyX(i)). Create is kScaled = false (scale is implicitly 1 and the
// multiplication is skipped); SmpSplit is kScaled = true with scale = lambda_i.
template <bool kScaled>
void ShareInto(std::span<const Elem> values, Elem scale, std::size_t t,
               std::span<const Elem> coeffs, std::span<Elem* const> out) {
  const std::size_t n = values.size();
  assert(t >= 1);
  assert(coeffs.size() >= t * n);
  assert(scale < kPrime);
  const Elem* v = values.data();

  if (t == 1) {
    // Fast path, the common configuration (3 parties, t = 1): one multiply-add.
    // v*scale + c*x < 2 * 2^62 fits 64 bits, so one reduction per element.
    const Elem* c = coeffs.data();
    for (std::size_t i = 0; i < out.size(); ++i) {
      const std::uint64_t x = PartyX(i);
      Elem* o = out[i];
      for (std::size_t j = 0; j < n; ++j) {
        const std::uint64_t s = kScaled ? std::uint64_t{v[j]} * scale : std::uint64_t{v[j]};
        o[j] = Reduce(s + std::uint64_t{c[j]} * x);
      }
    }
    return;
  }

  // General t: the polynomial is evaluated as a dot product with the powers of
  // x_i (precomputed once per party), which keeps the inner loop a chain of
  // independent multiply-adds with a reduction every kLazyProducts terms.
  std::vector<std::uint64_t> xpow(t + 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Elem x = PartyX(i);
    xpow[0] = 1;
    for (std::size_t k = 1; k <= t; ++k) xpow[k] = field::Mul(static_cast<Elem>(xpow[k - 1]), x);
    Elem* o = out[i];
    for (std::size_t j = 0; j < n; ++j) {
      std::uint64_t acc = kScaled ? std::uint64_t{v[j]} * scale : std::uint64_t{v[j]};
      // Terms in acc since the last Reduce; the secret (or lambda_i * beta_j,
      // a product itself) counts as one.
      std::size_t pending = 1;
      for (std::size_t k = 1; k <= t; ++k) {
        if (pending == kLazyProducts) {
          acc = Reduce(acc);
          pending = 0;
        }
        acc += std::uint64_t{coeffs[(k - 1) * n + j]} * xpow[k];
        ++pending;
      }
      o[j] = Reduce(acc);
    }
  }
}

}  // namespace

Status Scheme::Validate() const {
  if (threshold < 1) return Status::InvalidArgument("shamir: threshold t must be >= 1");
  // parties >= 2t + 1 so that the degree-2t product of two sharings (retrieval
  // and SMP) is still recoverable from the parties that exist.
  if (parties < 2 * threshold + 1) {
    return Status::InvalidArgument("shamir: " + std::to_string(parties) +
                                   " parties cannot carry degree-2t products for t = " +
                                   std::to_string(threshold) + " (need parties >= 2t + 1)");
  }
  // x_i = i + 1 must be distinct non-zero field elements.
  if (parties >= kPrime) return Status::InvalidArgument("shamir: too many parties for the field");
  return Status::Ok();
}

void Create(std::span<const Elem> secrets, std::size_t t, std::span<const Elem> coeffs,
            std::span<Elem* const> out) {
  ShareInto<false>(secrets, 1, t, coeffs, out);
}

void CreateThroughShare(std::span<const Elem> secrets, std::size_t fixed,
                        std::span<const Elem> fixed_shares, std::span<Elem* const> out) {
  const Elem inv_fixed = field::Inv(PartyX(fixed));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (i == fixed) continue;
    // share = s + c (r - s) = (1 - c) s + c r with c = x_i / x_fixed.
    const Elem c = field::Mul(PartyX(i), inv_fixed);
    const Elem one_minus_c = field::Sub(1, c);
    Elem* o = out[i];
    for (std::size_t j = 0; j < secrets.size(); ++j) {
      o[j] = field::Add(field::Mul(one_minus_c, secrets[j]), field::Mul(c, fixed_shares[j]));
    }
  }
}

Result<std::vector<std::vector<Elem>>> ParityChecks(std::span<const Elem> xs, std::size_t t) {
  S3ORAM_RETURN_IF_ERROR(ValidatePoints(xs));
  const std::size_t n = xs.size();
  std::vector<std::vector<Elem>> rows;
  if (t + 1 >= n) return rows;
  // sum_i f(x_i) / prod_{j != i}(x_i - x_j) is the coefficient of x^(n-1) of
  // the polynomial interpolating f at the n points, zero when deg f <= n - 2;
  // weighting by x_i^k keeps deg(x^k f) <= n - 2 for k <= n - t - 2.
  std::vector<Elem> c(n);
  for (std::size_t i = 0; i < n; ++i) {
    Elem den = 1;
    for (std::size_t j = 0; j < n; ++j) {
      if (j != i) den = field::Mul(den, field::Sub(xs[i], xs[j]));
    }
    c[i] = field::Inv(den);
  }
  for (std::size_t k = 0; k + t + 1 < n; ++k) {
    std::vector<Elem> row(n);
    for (std::size_t i = 0; i < n; ++i) row[i] = field::Mul(c[i], field::Pow(xs[i], k));
    rows.push_back(std::move(row));
  }
  return rows;
}

Result<std::vector<Elem>> LagrangeAtZero(std::span<const Elem> xs) {
  S3ORAM_RETURN_IF_ERROR(ValidatePoints(xs));
  try {
    NTL::zz_pPush push(FieldContext());
    // lambda_i = prod_{j != i} x_j / (x_j - x_i): the value at 0 of the Lagrange
    // basis polynomial that is 1 at x_i and 0 at the other points. The
    // denominators are non-zero because the points are distinct.
    const std::size_t n = xs.size();
    std::vector<Elem> lambda(n);
    for (std::size_t i = 0; i < n; ++i) {
      NTL::zz_p num(1), den(1);
      const NTL::zz_p xi(static_cast<long>(xs[i]));
      for (std::size_t j = 0; j < n; ++j) {
        if (j == i) continue;
        const NTL::zz_p xj(static_cast<long>(xs[j]));
        num *= xj;
        den *= xj - xi;
      }
      lambda[i] = ToElem(num / den);
    }
    return lambda;
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("shamir: Lagrange coefficients: ") + e.what());
  }
}

Result<std::vector<Elem>> LagrangeAt(std::span<const Elem> xs, Elem x) {
  S3ORAM_RETURN_IF_ERROR(ValidatePoints(xs));
  if (x >= kPrime) {
    return Status::InvalidArgument("shamir: evaluation point " + std::to_string(x) +
                                   " is not a field element");
  }
  try {
    NTL::zz_pPush push(FieldContext());
    const NTL::zz_p at(static_cast<long>(x));
    const std::size_t n = xs.size();
    std::vector<Elem> out(n);
    for (std::size_t i = 0; i < n; ++i) {
      NTL::zz_p num(1), den(1);
      const NTL::zz_p xi(static_cast<long>(xs[i]));
      for (std::size_t j = 0; j < n; ++j) {
        if (j == i) continue;
        const NTL::zz_p xj(static_cast<long>(xs[j]));
        num *= at - xj;
        den *= xi - xj;  // non-zero: the points are distinct
      }
      out[i] = ToElem(num / den);
    }
    return out;
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("shamir: Lagrange coefficients at a point: ") +
                                   e.what());
  }
}

Result<std::vector<Elem>> VandermondeInverse(std::span<const Elem> xs) {
  S3ORAM_RETURN_IF_ERROR(ValidatePoints(xs));
  try {
    NTL::zz_pPush push(FieldContext());
    const long n = static_cast<long>(xs.size());
    NTL::mat_zz_p v;
    v.SetDims(n, n);
    for (long i = 0; i < n; ++i) {
      const NTL::zz_p x(static_cast<long>(xs[static_cast<std::size_t>(i)]));
      NTL::zz_p pw(1);
      for (long j = 0; j < n; ++j) {
        v[i][j] = pw;
        pw *= x;
      }
    }
    NTL::zz_p det;
    NTL::mat_zz_p inv;
    NTL::inv(det, inv, v);
    // Distinct points make V invertible; a zero determinant here would be a bug
    // in the validation above, so report it rather than return garbage.
    if (NTL::IsZero(det)) return Status::InvalidArgument("shamir: singular Vandermonde matrix");
    std::vector<Elem> out(xs.size() * xs.size());
    for (long i = 0; i < n; ++i) {
      for (long j = 0; j < n; ++j) {
        out[static_cast<std::size_t>(i * n + j)] = ToElem(inv[i][j]);
      }
    }
    return out;
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("shamir: Vandermonde inverse: ") + e.what());
  }
}

void Recover(std::span<const Elem* const> shares, std::span<const Elem> lambda, std::size_t n,
             Elem* out) {
  assert(shares.size() == lambda.size());
  const std::size_t count = shares.size();
  for (std::size_t j = 0; j < n; ++j) {
    std::uint64_t acc = 0;
    std::size_t pending = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (pending == kLazyProducts) {
        acc = Reduce(acc);
        pending = 0;
      }
      acc += std::uint64_t{shares[i][j]} * lambda[i];
      ++pending;
    }
    out[j] = Reduce(acc);
  }
}

void SmpSplit(std::span<const Elem> beta, Elem lambda_i, std::size_t t,
              std::span<const Elem> coeffs, std::span<Elem* const> out) {
  ShareInto<true>(beta, lambda_i, t, coeffs, out);
}

void SmpCombine(std::span<const Elem* const> received, std::size_t n, Elem* out) {
  // A sum of canonical elements grows by < 2^31 per term, so 2^33 terms fit in
  // 64 bits; the number of parties is far below that and one Reduce suffices.
  const std::size_t count = received.size();
  for (std::size_t k = 0; k < n; ++k) {
    std::uint64_t acc = 0;
    for (std::size_t i = 0; i < count; ++i) acc += received[i][k];
    out[k] = Reduce(acc);
  }
}

}  // namespace s3oram::shamir
