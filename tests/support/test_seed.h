// Seeds for randomized tests. Test inputs (not key material) come from a
// std::mt19937_64 whose seed is drawn fresh on every run and printed, so any
// failure can be replayed with S3ORAM_TEST_SEED=<seed>.
#pragma once

#include <cstdint>
#include <random>

namespace s3oram::testing {

// The seed for this test: $S3ORAM_TEST_SEED if set, else fresh from
// std::random_device. Records it as a test property and prints it.
std::uint64_t TestSeed();

inline std::mt19937_64 SeededRng() { return std::mt19937_64(TestSeed()); }

}  // namespace s3oram::testing
