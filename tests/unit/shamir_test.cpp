// Shamir sharing (Algorithm 1) and SMP degree reduction (Protocol 1): checked
// against naive polynomial evaluation, by round trips through every threshold
// configuration we support, statistically for privacy, and by simulating the
// whole SMP exchange among the parties.
#include "oramcore/math/shamir.h"

#include <NTL/lzz_p.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "oramcore/base/random.h"
#include "oramcore/math/field.h"
#include "oramcore/math/random_elems.h"
#include "tests/support/test_seed.h"

namespace s3oram::shamir {
namespace {

using field::kPrime;

using Shares = std::vector<std::vector<Elem>>;  // [party][element]

std::vector<Elem> UniformElems(std::mt19937_64& rng, std::size_t n) {
  std::uniform_int_distribution<Elem> dist(0, kPrime - 1);
  std::vector<Elem> v(n);
  for (Elem& e : v) e = dist(rng);
  return v;
}

std::vector<Elem> CsprngElems(std::size_t n) {
  std::vector<Elem> v(n);
  random::Elems(v);
  return v;
}

std::vector<Elem*> Pointers(Shares& s) {
  std::vector<Elem*> p;
  for (auto& v : s) p.push_back(v.data());
  return p;
}

Shares Share(std::span<const Elem> secrets, std::size_t parties, std::size_t t,
             std::span<const Elem> coeffs) {
  Shares out(parties, std::vector<Elem>(secrets.size()));
  const auto ptrs = Pointers(out);
  Create(secrets, t, coeffs, ptrs);
  return out;
}

// share_i[j] = secret[j] + sum_k c_k[j] x^k evaluated term by term with Pow.
Elem NaiveShare(Elem secret, std::span<const Elem> coeffs, std::size_t n, std::size_t j,
                std::size_t t, Elem x) {
  Elem acc = secret;
  for (std::size_t k = 1; k <= t; ++k) {
    acc = field::Add(acc, field::Mul(coeffs[(k - 1) * n + j], field::Pow(x, k)));
  }
  return acc;
}

std::vector<std::size_t> RandomSubset(std::mt19937_64& rng, std::size_t parties, std::size_t k) {
  std::vector<std::size_t> idx(parties);
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), rng);
  idx.resize(k);
  return idx;
}

std::vector<Elem> XsOf(std::span<const std::size_t> subset) {
  std::vector<Elem> xs;
  for (std::size_t i : subset) xs.push_back(PartyX(i));
  return xs;
}

// Recovers from the parties in `subset` (any order).
std::vector<Elem> RecoverFrom(const Shares& shares, std::span<const std::size_t> subset) {
  const auto xs = XsOf(subset);
  auto lambda = LagrangeAtZero(xs);
  EXPECT_TRUE(lambda.ok()) << lambda.status().ToString();
  std::vector<const Elem*> ptrs;
  for (std::size_t i : subset) ptrs.push_back(shares[i].data());
  std::vector<Elem> out(shares[0].size());
  Recover(ptrs, *lambda, out.size(), out.data());
  return out;
}

// Every k-subset of {0..n-1}, in lexicographic order.
std::vector<std::vector<std::size_t>> AllSubsets(std::size_t n, std::size_t k) {
  std::vector<std::vector<std::size_t>> out;
  std::vector<bool> pick(n, false);
  std::fill(pick.begin(), pick.begin() + static_cast<std::ptrdiff_t>(k), true);
  do {
    std::vector<std::size_t> s;
    for (std::size_t i = 0; i < n; ++i) {
      if (pick[i]) s.push_back(i);
    }
    out.push_back(std::move(s));
  } while (std::prev_permutation(pick.begin(), pick.end()));
  return out;
}

constexpr std::array<std::pair<std::size_t, std::size_t>, 4> kConfigs = {
    {{3, 1}, {5, 2}, {7, 3}, {4, 1}}};  // (parties, t)

TEST(ShamirTest, SchemeValidate) {
  EXPECT_TRUE((Scheme{3, 1}.Validate().ok()));
  EXPECT_TRUE((Scheme{4, 1}.Validate().ok()));
  EXPECT_TRUE((Scheme{5, 2}.Validate().ok()));
  EXPECT_TRUE((Scheme{16, 7}.Validate().ok()));
  EXPECT_FALSE((Scheme{2, 1}.Validate().ok())) << "parties < 2t + 1";
  EXPECT_FALSE((Scheme{4, 2}.Validate().ok()));
  EXPECT_FALSE((Scheme{3, 0}.Validate().ok())) << "t = 0 is no privacy";
  EXPECT_EQ((Scheme{2, 1}.Validate().code()), Status::Code::kInvalidArgument);
  EXPECT_FALSE((Scheme{kPrime, 1}.Validate().ok())) << "x = p would be x = 0";
}

TEST(ShamirTest, CreateMatchesNaiveEvaluation) {
  auto rng = testing::SeededRng();
  // Up to t = 7 (16 parties) and beyond: Create itself has no limit on t.
  for (std::size_t t = 1; t <= 12; ++t) {
    const std::size_t parties = 2 * t + 1;
    const std::size_t n = 37;
    auto secrets = UniformElems(rng, n);
    secrets[0] = 0;
    secrets[1] = kPrime - 1;
    auto coeffs = UniformElems(rng, t * n);
    // Element 1: every coefficient p-1, to push the lazy accumulation hard;
    // element 2: the top coefficient only.
    for (std::size_t k = 0; k < t; ++k) coeffs[k * n + 1] = kPrime - 1;
    coeffs[(t - 1) * n + 2] = kPrime - 1;
    const Shares shares = Share(secrets, parties, t, coeffs);
    for (std::size_t i = 0; i < parties; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        ASSERT_EQ(shares[i][j], NaiveShare(secrets[j], coeffs, n, j, t, PartyX(i)))
            << "t=" << t << " party=" << i << " j=" << j;
      }
    }
  }
}

// CreateThroughShare against the line written out with NTL's zz_p: the
// fixed party's share is the given one, every other is the line through
// (0, s) and (x_fixed, r) at its own x, and any two shares recover s.
TEST(ShamirTest, CreateThroughShareIsTheLineThroughTheSecretAndTheFixedShare) {
  auto rng = testing::SeededRng();
  NTL::zz_p::init(kPrime);
  for (std::size_t parties : {3u, 4u, 5u, 16u}) {
    for (std::size_t fixed = 0; fixed < parties; ++fixed) {
      const std::size_t n = 41;
      auto secrets = UniformElems(rng, n);
      auto fixed_shares = UniformElems(rng, n);
      secrets[0] = 0;
      fixed_shares[1] = 0;
      secrets[2] = fixed_shares[2] = kPrime - 1;
      Shares out(parties, std::vector<Elem>(n, 0xdeadbeef));
      CreateThroughShare(secrets, fixed, fixed_shares, Pointers(out));
      EXPECT_EQ(out[fixed], std::vector<Elem>(n, 0xdeadbeef)) << "the fixed party's is not written";
      out[fixed] = fixed_shares;
      for (std::size_t i = 0; i < parties; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
          const NTL::zz_p s(secrets[j]), r(fixed_shares[j]);
          const NTL::zz_p slope = (r - s) / NTL::zz_p(PartyX(fixed));
          const NTL::zz_p want = s + slope * NTL::zz_p(PartyX(i));
          ASSERT_EQ(out[i][j], static_cast<Elem>(NTL::rep(want)))
              << "parties=" << parties << " fixed=" << fixed << " party=" << i << " j=" << j;
        }
      }
      // Any two parties recover the secrets.
      for (std::size_t a = 0; a < parties; ++a) {
        const std::size_t b = (a + 1 + rng() % (parties - 1)) % parties;
        const std::array<Elem, 2> xs = {PartyX(a), PartyX(b)};
        auto lambda = LagrangeAtZero(xs);
        ASSERT_TRUE(lambda.ok());
        const std::array<const Elem*, 2> two = {out[a].data(), out[b].data()};
        std::vector<Elem> got(n);
        Recover(two, *lambda, n, got.data());
        ASSERT_EQ(got, secrets) << "parties " << a << " and " << b;
      }
    }
  }
}

TEST(ShamirTest, RecoverMatchesNaiveDotProduct) {
  // Recover is a dot product with lazy reduction: check it at the extremes
  // (every term (p-1)^2, the largest the 64-bit accumulator must hold) and on
  // random values, for every share count up to 16 parties.
  auto rng = testing::SeededRng();
  for (std::size_t count = 1; count <= 16; ++count) {
    const std::size_t n = 64;
    Shares shares(count);
    for (auto& v : shares) v = UniformElems(rng, n);
    auto lambda = UniformElems(rng, count);
    for (std::size_t i = 0; i < count; ++i) {
      shares[i][0] = kPrime - 1;
      shares[i][1] = kPrime - 1;
    }
    std::fill(lambda.begin(), lambda.end(), kPrime - 1);  // first pass: all extreme
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<const Elem*> ptrs;
      for (const auto& v : shares) ptrs.push_back(v.data());
      std::vector<Elem> out(n);
      Recover(ptrs, lambda, n, out.data());
      for (std::size_t j = 0; j < n; ++j) {
        Elem want = 0;
        for (std::size_t i = 0; i < count; ++i) {
          want = field::Add(want, field::Mul(lambda[i], shares[i][j]));
        }
        ASSERT_EQ(out[j], want) << "count=" << count << " j=" << j << " pass=" << pass;
      }
      lambda = UniformElems(rng, count);
    }
  }
}

TEST(ShamirTest, LagrangeAtZeroKnownValues) {
  // Points 1, 2, 3: f(0) = 3 f(1) - 3 f(2) + f(3).
  const std::vector<Elem> xs = {1, 2, 3};
  auto l = LagrangeAtZero(xs);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (std::vector<Elem>{3, kPrime - 3, 1}));
  // A single point: the polynomial is constant.
  auto one = LagrangeAtZero(std::vector<Elem>{42});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<Elem>{1});
}

// Naive reference for LagrangeAt: the textbook product with field.h's own
// arithmetic (Fermat inverse), independent of NTL.
std::vector<Elem> NaiveLagrangeAt(const std::vector<Elem>& xs, Elem x) {
  std::vector<Elem> out;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    Elem num = 1, den = 1;
    for (std::size_t j = 0; j < xs.size(); ++j) {
      if (j == i) continue;
      num = field::Mul(num, field::Sub(x, xs[j]));
      den = field::Mul(den, field::Sub(xs[i], xs[j]));
    }
    out.push_back(field::Mul(num, field::Inv(den)));
  }
  return out;
}

Elem EvalPoly(const std::vector<Elem>& coeffs, Elem x) {
  Elem acc = 0;
  for (std::size_t k = coeffs.size(); k-- > 0;) acc = field::Add(field::Mul(acc, x), coeffs[k]);
  return acc;
}

TEST(ShamirTest, LagrangeAtMatchesNaiveReferenceAndInterpolates) {
  auto rng = testing::SeededRng();
  std::uniform_int_distribution<Elem> dist(1, kPrime - 1);
  for (int round = 0; round < 200; ++round) {
    const std::size_t n = 1 + rng() % 6;
    std::vector<Elem> xs;
    while (xs.size() < n) {
      // Small party-like points half the time, arbitrary field points otherwise.
      Elem x = (round % 2) ? dist(rng) : static_cast<Elem>(1 + rng() % 12);
      if (std::find(xs.begin(), xs.end(), x) == xs.end()) xs.push_back(x);
    }
    const Elem at = static_cast<Elem>(rng() % kPrime);
    auto l = LagrangeAt(xs, at);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ(*l, NaiveLagrangeAt(xs, at));
    // Interpolation: any polynomial of degree < n is reproduced at `at`.
    const std::vector<Elem> poly = UniformElems(rng, n);
    Elem sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      sum = field::Add(sum, field::Mul((*l)[i], EvalPoly(poly, xs[i])));
    }
    EXPECT_EQ(sum, EvalPoly(poly, at));
    // At 0 it is LagrangeAtZero.
    auto zero = LagrangeAt(xs, 0);
    auto ref = LagrangeAtZero(xs);
    ASSERT_TRUE(zero.ok() && ref.ok());
    EXPECT_EQ(*zero, *ref);
  }
}

// The reference for ParityChecks: a vector c is a parity check of degree-t
// sharings exactly when sum_i c_i * x_i^d = 0 for every d <= t (the sharings
// of the monomials span them all).
TEST(ShamirTest, ParityChecksAnnihilateEverySharingAndCatchEveryOneShareChange) {
  auto rng = testing::SeededRng();
  std::uniform_int_distribution<Elem> dist(1, kPrime - 1);
  // The known case n = 3, t = 1 at x = 1, 2, 3: c = (1/2, -1, 1/2), i.e. f(1) - 2 f(2) + f(3) = 0.
  auto known = ParityChecks(std::vector<Elem>{1, 2, 3}, 1);
  ASSERT_TRUE(known.ok());
  ASSERT_EQ(known->size(), 1u);
  const Elem half = field::Inv(2);
  EXPECT_EQ((*known)[0], (std::vector<Elem>{half, kPrime - 1, half}));
  for (int round = 0; round < 300; ++round) {
    const std::size_t n = 1 + rng() % 7;
    const std::size_t t = rng() % n;
    std::vector<Elem> xs;
    while (xs.size() < n) {
      const Elem x = (round % 2) ? dist(rng) : static_cast<Elem>(1 + rng() % 12);
      if (std::find(xs.begin(), xs.end(), x) == xs.end()) xs.push_back(x);
    }
    auto rows = ParityChecks(xs, t);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    ASSERT_EQ(rows->size(), t + 1 >= n ? 0 : n - t - 1) << "n " << n << " t " << t;
    for (const auto& row : *rows) {
      ASSERT_EQ(row.size(), n);
      for (std::size_t d = 0; d <= t; ++d) {
        Elem sum = 0;
        for (std::size_t i = 0; i < n; ++i) {
          sum = field::Add(sum, field::Mul(row[i], field::Pow(xs[i], d)));
        }
        EXPECT_EQ(sum, 0u) << "round " << round << " degree " << d;
      }
      // A random sharing passes; the same with one share changed does not.
      const std::vector<Elem> poly = UniformElems(rng, t + 1);
      std::vector<Elem> y(n);
      for (std::size_t i = 0; i < n; ++i) y[i] = EvalPoly(poly, xs[i]);
      auto check = [&] {
        Elem sum = 0;
        for (std::size_t i = 0; i < n; ++i) sum = field::Add(sum, field::Mul(row[i], y[i]));
        return sum;
      };
      EXPECT_EQ(check(), 0u);
      const std::size_t bad = rng() % n;
      y[bad] = field::Add(y[bad], dist(rng));
      EXPECT_NE(check(), 0u) << "round " << round << " share " << bad;
    }
  }
  EXPECT_FALSE(ParityChecks(std::vector<Elem>{1, 1, 2}, 1).ok());
}

TEST(ShamirTest, LagrangeAtKnownValuesAndErrors) {
  // Shares of parties 0 and 1 (x = 1, 2) give party 2's share (x = 3):
  // f(3) = -1 f(1) + 2 f(2) for any line.
  auto l = LagrangeAt(std::vector<Elem>{PartyX(0), PartyX(1)}, PartyX(2));
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (std::vector<Elem>{kPrime - 1, 2}));
  // At one of the points: the indicator of that point.
  auto at_point = LagrangeAt(std::vector<Elem>{1, 2, 3}, 2);
  ASSERT_TRUE(at_point.ok());
  EXPECT_EQ(*at_point, (std::vector<Elem>{0, 1, 0}));
  EXPECT_FALSE(LagrangeAt(std::vector<Elem>{1, 1}, 3).ok());
  EXPECT_FALSE(LagrangeAt(std::vector<Elem>{}, 3).ok());
  EXPECT_FALSE(LagrangeAt(std::vector<Elem>{1, 2}, kPrime).ok());
}

TEST(ShamirTest, RoundTripFromRandomSubsets) {
  auto rng = testing::SeededRng();
  for (auto [parties, t] : kConfigs) {
    ASSERT_TRUE((Scheme{parties, t}.Validate().ok()));
    const std::size_t n = 1000;
    auto secrets = UniformElems(rng, n);
    secrets[0] = 0;
    secrets[1] = 1;
    secrets[2] = kPrime - 1;
    const auto coeffs = CsprngElems(t * n);
    const Shares shares = Share(secrets, parties, t, coeffs);
    for (int trial = 0; trial < 20; ++trial) {
      // t + 1 shares suffice; more (up to all) give the same answer.
      const std::size_t extra = trial < 10 ? 0 : static_cast<std::size_t>(trial) % (parties - t);
      const std::size_t k = t + 1 + extra;
      const auto subset = RandomSubset(rng, parties, k);
      ASSERT_EQ(RecoverFrom(shares, subset), secrets)
          << "parties=" << parties << " t=" << t << " k=" << k;
    }
  }
}

TEST(ShamirTest, RoundTripLargeVector) {
  // A slot-sized vector through the t = 1 fast path.
  const std::size_t n = std::size_t{1} << 18;
  auto secrets = CsprngElems(n);
  const auto coeffs = CsprngElems(n);
  const Shares shares = Share(secrets, 3, 1, coeffs);
  const std::vector<std::size_t> subset = {2, 0};
  EXPECT_EQ(RecoverFrom(shares, subset), secrets);
}

TEST(ShamirTest, TooFewSharesDoNotRecover) {
  auto rng = testing::SeededRng();
  for (auto [parties, t] : kConfigs) {
    const std::size_t n = 200;
    const auto secrets = UniformElems(rng, n);
    const Shares shares = Share(secrets, parties, t, CsprngElems(t * n));
    const auto subset = RandomSubset(rng, parties, t);
    // With t shares every candidate secret is equally likely; agreeing on all
    // 200 random secrets would happen with probability ~p^-200.
    EXPECT_NE(RecoverFrom(shares, subset), secrets);
  }
}

// Chi-square statistic of `counts` against the uniform distribution.
double ChiSquareUniform(const std::vector<double>& counts) {
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  const double expected = total / static_cast<double>(counts.size());
  double chi2 = 0;
  for (double c : counts) chi2 += (c - expected) * (c - expected) / expected;
  return chi2;
}

// Chi-square statistic of homogeneity between two histograms of equal size.
double ChiSquareHomogeneity(const std::vector<double>& a, const std::vector<double>& b) {
  const double na = std::accumulate(a.begin(), a.end(), 0.0);
  const double nb = std::accumulate(b.begin(), b.end(), 0.0);
  double chi2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double col = a[i] + b[i];
    const double ea = col * na / (na + nb);
    const double eb = col * nb / (na + nb);
    chi2 += (a[i] - ea) * (a[i] - ea) / ea + (b[i] - eb) * (b[i] - eb) / eb;
  }
  return chi2;
}

// With 16 bins (15 degrees of freedom) P(chi2 > 70) = 4.5e-9 for a correct
// implementation, so the six comparisons below fail spuriously with
// probability < 3e-8, while e.g. a share that leaks the secret's low bit, or
// coefficients drawn from half the field, pushes the statistic into the
// thousands at 20,000 samples.
constexpr double kChi2Threshold15Dof = 70.0;
constexpr std::size_t kSamples = 20000;

// Histogram over 16 bins of `bin(sample_index)` for kSamples sharings of `secret`.
template <typename BinFn>
std::vector<double> ShareHistogram(std::mt19937_64& rng, std::size_t parties, std::size_t t,
                                   Elem secret, BinFn bin) {
  const std::vector<Elem> secrets(kSamples, secret);
  const auto coeffs = UniformElems(rng, t * kSamples);
  const Shares shares = Share(secrets, parties, t, coeffs);
  std::vector<double> hist(16, 0.0);
  for (std::size_t j = 0; j < kSamples; ++j) hist[bin(shares, j)] += 1;
  return hist;
}

TEST(ShamirTest, OneShareIsIndependentOfTheSecretT1) {
  auto rng = testing::SeededRng();
  for (std::size_t party : {std::size_t{0}, std::size_t{2}}) {
    auto low_bits = [party](const Shares& s, std::size_t j) { return s[party][j] & 15u; };
    const auto h0 = ShareHistogram(rng, 3, 1, 0, low_bits);
    const auto h1 = ShareHistogram(rng, 3, 1, kPrime - 1, low_bits);
    EXPECT_LT(ChiSquareUniform(h0), kChi2Threshold15Dof) << "party " << party << ", secret 0";
    EXPECT_LT(ChiSquareUniform(h1), kChi2Threshold15Dof) << "party " << party << ", secret p-1";
    EXPECT_LT(ChiSquareHomogeneity(h0, h1), kChi2Threshold15Dof) << "party " << party;
  }
}

TEST(ShamirTest, TwoSharesAreJointlyIndependentOfTheSecretT2) {
  // (5, 2): the pair of shares of parties 1 and 3, low 2 bits of each.
  auto rng = testing::SeededRng();
  auto joint = [](const Shares& s, std::size_t j) { return (s[1][j] & 3u) << 2 | (s[3][j] & 3u); };
  const auto h0 = ShareHistogram(rng, 5, 2, 0, joint);
  const auto h1 = ShareHistogram(rng, 5, 2, kPrime - 1, joint);
  EXPECT_LT(ChiSquareUniform(h0), kChi2Threshold15Dof);
  EXPECT_LT(ChiSquareUniform(h1), kChi2Threshold15Dof);
  EXPECT_LT(ChiSquareHomogeneity(h0, h1), kChi2Threshold15Dof);
}

TEST(ShamirTest, ChiSquareDetectsALeakyShare) {
  // Sanity check of the statistic itself: a "share" whose coefficient comes
  // from half the field (bit 0 forced to 0, secret 1, x = 1) leaks the secret's
  // low bit and must be rejected by a wide margin.
  auto rng = testing::SeededRng();
  std::vector<double> hist(16, 0.0);
  for (Elem c : UniformElems(rng, kSamples)) hist[field::Add(1, c & ~1u) & 15u] += 1;
  EXPECT_GT(ChiSquareUniform(hist), 100 * kChi2Threshold15Dof);
}

TEST(ShamirTest, ProductOfTwoSharingsNeeds2tPlus1Points) {
  auto rng = testing::SeededRng();
  for (auto [parties, t] : kConfigs) {
    const std::size_t n = 300;
    const auto a = UniformElems(rng, n);
    const auto b = UniformElems(rng, n);
    const Shares sa = Share(a, parties, t, CsprngElems(t * n));
    const Shares sb = Share(b, parties, t, CsprngElems(t * n));
    Shares prod(parties, std::vector<Elem>(n));
    for (std::size_t i = 0; i < parties; ++i) {
      for (std::size_t j = 0; j < n; ++j) prod[i][j] = field::Mul(sa[i][j], sb[i][j]);
    }
    std::vector<Elem> ab(n);
    for (std::size_t j = 0; j < n; ++j) ab[j] = field::Mul(a[j], b[j]);

    for (int trial = 0; trial < 5; ++trial) {
      const auto subset = RandomSubset(rng, parties, 2 * t + 1);
      EXPECT_EQ(RecoverFrom(prod, subset), ab) << "parties=" << parties << " t=" << t;
      // 2t points interpolate a degree-(2t-1) polynomial: wrong for a random product.
      const auto small = RandomSubset(rng, parties, 2 * t);
      EXPECT_NE(RecoverFrom(prod, small), ab);
    }
  }
}

// Naive n x n product over F_p, row-major.
std::vector<Elem> MatMul(const std::vector<Elem>& x, const std::vector<Elem>& y, std::size_t n) {
  std::vector<Elem> out(n * n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      Elem acc = 0;
      for (std::size_t k = 0; k < n; ++k) {
        acc = field::Add(acc, field::Mul(x[i * n + k], y[k * n + j]));
      }
      out[i * n + j] = acc;
    }
  }
  return out;
}

void CheckVandermondeInverse(const std::vector<Elem>& xs) {
  const std::size_t n = xs.size();
  auto inv = VandermondeInverse(xs);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  ASSERT_EQ(inv->size(), n * n);
  std::vector<Elem> v(n * n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) v[i * n + j] = field::Pow(xs[i], j);
  }
  std::vector<Elem> identity(n * n, 0);
  for (std::size_t i = 0; i < n; ++i) identity[i * n + i] = 1;
  EXPECT_EQ(MatMul(*inv, v, n), identity) << "n=" << n;
  EXPECT_EQ(MatMul(v, *inv, n), identity) << "n=" << n;

  auto lambda = LagrangeAtZero(xs);
  ASSERT_TRUE(lambda.ok());
  EXPECT_EQ(std::vector<Elem>(inv->begin(), inv->begin() + static_cast<std::ptrdiff_t>(n)), *lambda)
      << "row 0 of V^-1 is the Lagrange weights at 0";
}

TEST(ShamirTest, VandermondeInverseOfPartyPoints) {
  for (std::size_t n = 1; n <= 16; ++n) {
    std::vector<Elem> xs;
    for (std::size_t i = 0; i < n; ++i) xs.push_back(PartyX(i));
    CheckVandermondeInverse(xs);
  }
}

TEST(ShamirTest, VandermondeInverseOfRandomPoints) {
  auto rng = testing::SeededRng();
  std::uniform_int_distribution<Elem> dist(1, kPrime - 1);
  for (std::size_t n = 1; n <= 8; ++n) {
    std::vector<Elem> xs;
    while (xs.size() < n) {
      const Elem x = dist(rng);
      if (std::find(xs.begin(), xs.end(), x) == xs.end()) xs.push_back(x);
    }
    xs.back() = kPrime - 1;  // the largest point too
    if (n > 1 && std::count(xs.begin(), xs.end(), kPrime - 1) > 1) continue;
    CheckVandermondeInverse(xs);
  }
}

TEST(ShamirTest, InterpolationRejectsBadPoints) {
  const std::vector<std::vector<Elem>> bad = {
      {},                 // nothing to interpolate from
      {0, 1},             // x = 0 is the secret's own point
      {1, 1},             // duplicate: Vandermonde is singular
      {1, 2, 3, 2},       //
      {kPrime},           // not a field element (would alias 0)
      {1, kPrime + 1},    // not a field element (would alias 1)
  };
  for (const auto& xs : bad) {
    auto l = LagrangeAtZero(xs);
    ASSERT_FALSE(l.ok()) << xs.size();
    EXPECT_EQ(l.status().code(), Status::Code::kInvalidArgument);
    auto v = VandermondeInverse(xs);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), Status::Code::kInvalidArgument);
  }
}

TEST(ShamirTest, SmpSplitIsCreateOfTheWeightedProduct) {
  auto rng = testing::SeededRng();
  for (auto [parties, t] : kConfigs) {
    const std::size_t n = 101;
    const auto beta = UniformElems(rng, n);
    const auto coeffs = UniformElems(rng, t * n);
    const Elem lambda = kPrime - 7;
    Shares split(parties, std::vector<Elem>(n));
    const auto ptrs = Pointers(split);
    SmpSplit(beta, lambda, t, coeffs, ptrs);
    std::vector<Elem> weighted(n);
    for (std::size_t j = 0; j < n; ++j) weighted[j] = field::Mul(lambda, beta[j]);
    EXPECT_EQ(split, Share(weighted, parties, t, coeffs));
  }
}

TEST(ShamirTest, SmpCombineSums) {
  const std::vector<Elem> a = {1, kPrime - 1, kPrime - 1, 0};
  const std::vector<Elem> b = {2, kPrime - 1, 1, 0};
  const std::vector<Elem> c = {3, kPrime - 1, 0, kPrime - 1};
  const std::vector<const Elem*> in = {a.data(), b.data(), c.data()};
  std::vector<Elem> out(4);
  SmpCombine(in, 4, out.data());
  EXPECT_EQ(out, (std::vector<Elem>{6, kPrime - 3, 0, kPrime - 1}));
}

// The full degree reduction among `parties` simulated parties: shares of a and
// b are multiplied locally (degree 2t), the 2t+1 `participants` re-share their
// Lagrange-weighted products with fresh CSPRNG coefficients, everybody sums
// what it received, and the result must be a degree-t sharing of a*b: every
// (t+1)-subset of the parties recovers a*b.
void SimulateSmp(std::mt19937_64& rng, std::size_t parties, std::size_t t,
                 const std::vector<std::size_t>& participants) {
  ASSERT_EQ(participants.size(), 2 * t + 1);
  const std::size_t n = 257;
  const auto a = UniformElems(rng, n);
  const auto b = UniformElems(rng, n);
  const Shares sa = Share(a, parties, t, CsprngElems(t * n));
  const Shares sb = Share(b, parties, t, CsprngElems(t * n));

  auto lambda = LagrangeAtZero(XsOf(participants));
  ASSERT_TRUE(lambda.ok());

  // inbox[j][s]: what party j received from the s-th participant.
  std::vector<Shares> inbox(parties, Shares(participants.size(), std::vector<Elem>(n)));
  for (std::size_t s = 0; s < participants.size(); ++s) {
    const std::size_t i = participants[s];
    std::vector<Elem> beta(n);
    for (std::size_t k = 0; k < n; ++k) beta[k] = field::Mul(sa[i][k], sb[i][k]);
    std::vector<Elem*> out;
    for (std::size_t j = 0; j < parties; ++j) out.push_back(inbox[j][s].data());
    SmpSplit(beta, (*lambda)[s], t, CsprngElems(t * n), out);
  }
  Shares reduced(parties, std::vector<Elem>(n));
  for (std::size_t j = 0; j < parties; ++j) {
    std::vector<const Elem*> received;
    for (const auto& v : inbox[j]) received.push_back(v.data());
    SmpCombine(received, n, reduced[j].data());
  }

  std::vector<Elem> ab(n);
  for (std::size_t k = 0; k < n; ++k) ab[k] = field::Mul(a[k], b[k]);
  for (const auto& subset : AllSubsets(parties, t + 1)) {
    ASSERT_EQ(RecoverFrom(reduced, subset), ab) << "parties=" << parties << " t=" << t;
  }
  // And the reduced sharing multiplies again: the protocol composes.
  const Shares sc = Share(b, parties, t, CsprngElems(t * n));
  Shares prod(parties, std::vector<Elem>(n));
  for (std::size_t i = 0; i < parties; ++i) {
    for (std::size_t k = 0; k < n; ++k) prod[i][k] = field::Mul(reduced[i][k], sc[i][k]);
  }
  std::vector<Elem> abb(n);
  for (std::size_t k = 0; k < n; ++k) abb[k] = field::Mul(ab[k], b[k]);
  EXPECT_EQ(RecoverFrom(prod, RandomSubset(rng, parties, 2 * t + 1)), abb);
}

TEST(ShamirTest, SmpFullProtocolThreePartiesT1) {
  auto rng = testing::SeededRng();
  SimulateSmp(rng, 3, 1, {0, 1, 2});
}

TEST(ShamirTest, SmpFullProtocolFivePartiesT2) {
  auto rng = testing::SeededRng();
  SimulateSmp(rng, 5, 2, {0, 1, 2, 3, 4});
}

TEST(ShamirTest, SmpWithASubsetOfParticipants) {
  // More parties than 2t + 1: any 2t + 1 of them can run the reduction and
  // every party (participant or not) ends with a degree-t share.
  auto rng = testing::SeededRng();
  SimulateSmp(rng, 4, 1, RandomSubset(rng, 4, 3));
  SimulateSmp(rng, 7, 3, {0, 1, 2, 3, 4, 5, 6});
  SimulateSmp(rng, 7, 2, RandomSubset(rng, 7, 5));
}

TEST(ShamirTest, NtlModulusIsContainedAndThreadSafe) {
  // Callers' own zz_p modulus survives our NTL computations, and concurrent
  // callers on several threads do not disturb each other.
  auto worker = [](long own_modulus, bool* ok) {
    NTL::zz_p::init(own_modulus);
    bool good = true;
    for (int iter = 0; iter < 200; ++iter) {
      std::vector<Elem> xs;
      for (std::size_t i = 0; i < 3 + static_cast<std::size_t>(iter % 6); ++i) {
        xs.push_back(PartyX(i));
      }
      auto l = LagrangeAtZero(xs);
      auto v = VandermondeInverse(xs);
      good = good && l.ok() && v.ok() &&
             std::equal(l->begin(), l->end(), v->begin());
      // Weights at 0 always sum to 1 (they interpolate the constant 1).
      Elem sum = 0;
      for (Elem e : *l) sum = field::Add(sum, e);
      good = good && sum == 1;
      good = good && NTL::zz_p::modulus() == own_modulus;
    }
    *ok = good;
  };
  std::array<bool, 4> ok{};
  std::vector<std::thread> threads;
  const std::array<long, 4> moduli = {17, 101, 65537, 1000003};
  for (std::size_t i = 0; i < moduli.size(); ++i) threads.emplace_back(worker, moduli[i], &ok[i]);
  for (auto& th : threads) th.join();
  for (std::size_t i = 0; i < ok.size(); ++i) EXPECT_TRUE(ok[i]) << "thread " << i;
}

}  // namespace
}  // namespace s3oram::shamir
