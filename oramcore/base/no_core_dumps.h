// Keeping a process that holds secrets out of core files and debuggers.
//
// Guarantee: after ForbidCoreDumps() returns OK, the process is not dumpable
// (prctl PR_SET_DUMPABLE 0: no core file, no ptrace attach and no
// /proc/PID/mem by other processes of the same user) and its core size limit
// is zero, soft and hard, so neither a later setuid-style reset of the
// dumpable flag nor a child it starts can write a core. Both hold for the
// rest of the process's life; exec of a set-user-ID binary is the only way
// back, and this project execs none.
//
// Called before a passphrase is read: by every s3oram command and by the
// FUSE daemon (docs/SECURITY.md, memory).
#pragma once

#include "oramcore/base/status.h"

namespace s3oram {

// IoError naming the call that failed; the caller must then stop before it
// reads any secret.
Status ForbidCoreDumps();

// True if this process can produce a core dump (dumpable flag set or a
// nonzero core limit). For tests and `s3oram status`-style reporting.
bool CoreDumpsAllowed();

}  // namespace s3oram
