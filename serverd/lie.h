// Misbehaviour on purpose, for the lying-server tests (tests/integration/
// lying_server_test.cpp). Compiled in only where S3ORAM_LYING_SERVER is
// defined, which is the s3oram-serverd-liar test build (serverd/CMakeLists.txt:
// never installed, never packaged); in s3oram-serverd Lies() is a constant
// false and every branch on it vanishes.
//
// $S3ORAM_LIE is a comma-separated list of the kinds the server practises:
//   retrieve          every retrieval answer is off by one in its first element
//   smp-consistent    the product it re-shares in each SMP round is off by one
//                     in its first element: every server receives a consistent
//                     sharing of a wrong value
//   smp-inconsistent  the SMP share it deals to its first peer is off by one:
//                     the servers' outputs are no longer one sharing
//   shadow            its own eviction output is off by one in its first
//                     element, with the digest of the wrong value (a memory
//                     fault before the digest was computed)
//   counters          STATUS, LEASE and BACKUP_LIST report 2^64-1 as epoch,
//                     highest lease epoch, eviction count and a backup
//                     generation
#pragma once

namespace s3oram::serverd {

#ifdef S3ORAM_LYING_SERVER
bool Lies(const char* kind);
#else
constexpr bool Lies(const char*) { return false; }
#endif

}  // namespace s3oram::serverd
