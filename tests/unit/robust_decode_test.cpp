// RobustDecoder against answers made by naive polynomial evaluation: every
// answer right, one wrong, one missing, two wrong, and the subsets order.
#include "oramcore/math/robust_decode.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "oramcore/math/field.h"
#include "oramcore/math/shamir.h"
#include "tests/support/test_seed.h"

namespace s3oram::shamir {
namespace {

using field::Elem;
using field::kPrime;

struct Sharing {
  std::vector<Elem> secrets;
  std::vector<std::vector<Elem>> answers;  // [party][element]
};

// A random degree-`degree` polynomial per element, evaluated naively (Horner)
// at every party's x.
Sharing Make(std::mt19937_64& rng, std::size_t parties, std::size_t degree, std::size_t n) {
  std::uniform_int_distribution<Elem> dist(0, kPrime - 1);
  Sharing s;
  s.answers.assign(parties, std::vector<Elem>(n));
  for (std::size_t e = 0; e < n; ++e) {
    std::vector<Elem> coeffs(degree + 1);
    for (Elem& c : coeffs) c = dist(rng);
    s.secrets.push_back(coeffs[0]);
    for (std::size_t i = 0; i < parties; ++i) {
      Elem y = 0;
      for (std::size_t k = coeffs.size(); k-- > 0;) {
        y = field::Add(field::Mul(y, PartyX(i)), coeffs[k]);
      }
      s.answers[i][e] = y;
    }
  }
  return s;
}

std::vector<const Elem*> Pointers(const Sharing& s) {
  std::vector<const Elem*> p;
  for (const auto& a : s.answers) p.push_back(a.data());
  return p;
}

RobustDecoder::Accept Equals(const std::vector<Elem>& want, int* calls) {
  return [&want, calls](std::span<const Elem> got) {
    ++*calls;
    return std::equal(got.begin(), got.end(), want.begin(), want.end());
  };
}

TEST(RobustDecodeTest, RightAnswersAreTakenTogetherAndOfferedOnce) {
  std::mt19937_64 rng(testing::TestSeed());
  for (std::size_t parties : {3, 4, 5}) {
    Sharing s = Make(rng, parties, 2, 17);
    auto d = RobustDecoder::Make(parties, 2);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    std::vector<Elem> out(17);
    int calls = 0;
    auto o = d->Decode(Pointers(s), 17, Equals(s.secrets, &calls), out.data());
    ASSERT_TRUE(o);
    EXPECT_TRUE(o->accepted);
    EXPECT_TRUE(o->consistent);
    EXPECT_TRUE(o->wrong.empty());
    EXPECT_EQ(o->used, (std::vector<std::size_t>{0, 1, 2}));
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(out, s.secrets);
  }
}

TEST(RobustDecodeTest, OneWrongAnswerOfFourOrFiveIsNamedAndOutvoted) {
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (std::size_t parties : {4, 5}) {
    auto d = RobustDecoder::Make(parties, 2);
    ASSERT_TRUE(d.ok());
    for (std::size_t liar = 0; liar < parties; ++liar) {
      Sharing s = Make(rng, parties, 2, 9);
      const std::size_t at = rng() % 9;
      s.answers[liar][at] = field::Add(s.answers[liar][at], 1 + rng() % (kPrime - 1));
      std::vector<Elem> out(9);
      int calls = 0;
      auto o = d->Decode(Pointers(s), 9, Equals(s.secrets, &calls), out.data());
      ASSERT_TRUE(o);
      EXPECT_TRUE(o->accepted) << "parties " << parties << " liar " << liar;
      EXPECT_FALSE(o->consistent);
      EXPECT_EQ(o->wrong, std::vector<std::size_t>{liar});
      EXPECT_EQ(std::count(o->used.begin(), o->used.end(), liar), 0);
      EXPECT_EQ(out, s.secrets);
    }
  }
}

TEST(RobustDecodeTest, AMissingAnswerAndAWrongOneOfFive) {
  std::mt19937_64 rng(testing::TestSeed());
  auto d = RobustDecoder::Make(5, 2);
  ASSERT_TRUE(d.ok());
  Sharing s = Make(rng, 5, 2, 5);
  s.answers[3][4] = field::Add(s.answers[3][4], 7);
  std::vector<const Elem*> p = Pointers(s);
  p[1] = nullptr;  // server 1 did not answer
  std::vector<Elem> out(5);
  int calls = 0;
  auto o = d->Decode(p, 5, Equals(s.secrets, &calls), out.data());
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->accepted);
  EXPECT_EQ(o->wrong, std::vector<std::size_t>{3});
  EXPECT_EQ(out, s.secrets);
  // Three answers of five, all right: taken as they are.
  p[1] = s.answers[1].data();
  p[3] = nullptr;
  p[4] = nullptr;
  calls = 0;
  o = d->Decode(p, 5, Equals(s.secrets, &calls), out.data());
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->accepted && o->consistent);
  EXPECT_EQ(o->used, (std::vector<std::size_t>{0, 1, 2}));
  // Two answers: too few for degree 2.
  p[2] = nullptr;
  EXPECT_FALSE(d->Decode(p, 5, Equals(s.secrets, &calls), out.data()));
}

TEST(RobustDecodeTest, TwoWrongAnswersOfFourAreNotAccepted) {
  std::mt19937_64 rng(testing::TestSeed());
  auto d = RobustDecoder::Make(4, 2);
  ASSERT_TRUE(d.ok());
  Sharing s = Make(rng, 4, 2, 3);
  s.answers[0][0] = field::Add(s.answers[0][0], 1);
  s.answers[2][1] = field::Add(s.answers[2][1], 1);
  std::vector<Elem> out(3);
  int calls = 0;
  auto o = d->Decode(Pointers(s), 3, Equals(s.secrets, &calls), out.data());
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->accepted);
  EXPECT_FALSE(o->consistent);
  EXPECT_EQ(calls, 4);  // every 3-subset tried
}

TEST(RobustDecodeTest, ThreeAnswersCannotBeCheckedAndAreTakenAsTheyAre) {
  std::mt19937_64 rng(testing::TestSeed());
  auto d = RobustDecoder::Make(3, 2);
  ASSERT_TRUE(d.ok());
  Sharing s = Make(rng, 3, 2, 4);
  s.answers[1][0] = field::Add(s.answers[1][0], 1);
  std::vector<Elem> out(4);
  int calls = 0;
  auto o = d->Decode(Pointers(s), 4, Equals(s.secrets, &calls), out.data());
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->consistent);  // nothing to check them against
  EXPECT_FALSE(o->accepted);   // the caller's check is all there is
  EXPECT_EQ(calls, 1);
}

TEST(RobustDecodeTest, BadShapesAreRefused) {
  EXPECT_FALSE(RobustDecoder::Make(2, 2).ok());
  EXPECT_FALSE(RobustDecoder::Make(17, 2).ok());
  auto d = RobustDecoder::Make(4, 2);
  ASSERT_TRUE(d.ok());
  std::vector<const Elem*> three(3, nullptr);
  Elem out = 0;
  int calls = 0;
  std::vector<Elem> none;
  EXPECT_FALSE(d->Decode(three, 1, Equals(none, &calls), &out));
}

}  // namespace
}  // namespace s3oram::shamir
