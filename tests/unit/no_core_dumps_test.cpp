// ForbidCoreDumps in a child process (the change cannot be undone, and the
// test binary itself should stay debuggable).
#include "oramcore/base/no_core_dumps.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace s3oram {
namespace {

// Runs `body` in a forked child and returns its exit code (its failures are
// reported as distinct codes, since gtest assertions do not cross fork).
template <typename F>
int InChild(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(NoCoreDumpsTest, LeavesTheProcessUndumpableWithAZeroCoreLimit) {
  const int code = InChild([] {
    // A fresh process is dumpable; the test would prove nothing otherwise.
    if (::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 1) return 10;
    if (!CoreDumpsAllowed()) return 11;
    if (!ForbidCoreDumps().ok()) return 12;
    if (::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) return 13;
    struct rlimit lim {};
    if (::getrlimit(RLIMIT_CORE, &lim) != 0 || lim.rlim_cur != 0 || lim.rlim_max != 0) return 14;
    if (CoreDumpsAllowed()) return 15;
    // The limit is inherited by what the process forks.
    const int child = InChild([] {
      struct rlimit l {};
      return ::getrlimit(RLIMIT_CORE, &l) == 0 && l.rlim_cur == 0 && l.rlim_max == 0 ? 0 : 1;
    });
    return child == 0 ? 0 : 16;
  });
  EXPECT_EQ(code, 0) << "10: not dumpable at start; 11: CoreDumpsAllowed wrong at start; "
                        "12: ForbidCoreDumps failed; 13: still dumpable; 14: core limit not 0; "
                        "15: CoreDumpsAllowed wrong after; 16: a child's core limit not 0";
}

}  // namespace
}  // namespace s3oram
