#include "oramcore/base/no_core_dumps.h"

#include <sys/prctl.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace s3oram {

Status ForbidCoreDumps() {
  // The limit first: if the flag cannot be cleared, at least no core is
  // written; and a zero hard limit cannot be raised again by this process.
  const struct rlimit none { 0, 0 };
  if (::setrlimit(RLIMIT_CORE, &none) != 0) {
    return Status::IoError(std::string("cannot set the core size limit to 0 (setrlimit): ") +
                           std::strerror(errno));
  }
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return Status::IoError(std::string("cannot turn off core dumps (prctl PR_SET_DUMPABLE): ") +
                           std::strerror(errno));
  }
  return Status::Ok();
}

bool CoreDumpsAllowed() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_CORE, &lim) != 0) return true;
  return ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0 || lim.rlim_cur != 0 || lim.rlim_max != 0;
}

}  // namespace s3oram
