#include "tests/support/test_seed.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace s3oram::testing {

std::uint64_t TestSeed() {
  std::uint64_t seed;
  if (const char* env = std::getenv("S3ORAM_TEST_SEED"); env && *env) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    std::random_device rd;
    seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::printf("[ seed     ] S3ORAM_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

}  // namespace s3oram::testing
