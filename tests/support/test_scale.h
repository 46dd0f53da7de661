// How much work the long randomized tests do per build.
//
// The suite runs twice in CI: in the release build, which carries the full
// counts (and every acceptance figure), and in the ASan+UBSan build, which is
// 2-3x slower and is there to catch memory and undefined-behaviour errors on
// every code path. A shorter run takes the same paths, so the sanitizer build
// runs the long loops at a fraction of their release size.
#pragma once

namespace s3oram::testing {

#ifdef S3ORAM_TEST_SANITIZED
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// `n` in the release build; n / divisor, but at least `at_least`, under the
// sanitizers.
constexpr int ScaledForBuild(int n, int divisor, int at_least) {
  if (!kSanitizedBuild) return n;
  const int scaled = n / divisor;
  return scaled > at_least ? scaled : at_least;
}

}  // namespace s3oram::testing
