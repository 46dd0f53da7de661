// Named crash points for fault-injection tests.
//
// S3ORAM_FAULT="name[@n][,name@n...]" in a process's environment makes it
// kill itself with SIGKILL the n-th time (default: the first) it reaches
// FaultPoint("name"): exactly what a power cut or an OOM kill does at that
// instant, with nothing flushed or unwound. The tests use it to crash a
// client or a server inside an eviction's PREPARE, between a PREPARE and its
// COMMIT, in the middle of an SQLite transaction, and so on (see
// tests/integration/fault_injection_test.cpp for the list of points).
//
// "name~ms" instead makes every pass through the point sleep ms milliseconds
// (tests that need a slow step, e.g. an eviction still computing while the
// next round's accesses run), and kills nothing. "name?path" makes every
// pass wait while the file `path` exists (at most 10 minutes): a test holds
// a process at a point for as long as it needs, then removes the file.
//
// Unarmed (the variable unset, as in production), a point costs one relaxed
// atomic load. The variable is read once, at the first point reached.
#pragma once

namespace s3oram {

void FaultPoint(const char* name);

}  // namespace s3oram
