// Upgrading a client state from before encryption at rest (a plain SQLite
// file holding the wrapped master key in its meta rows), or a sealed state of
// format 1 (state_header.h), to the current sealed format of
// oramcore/state/state_file.h, in place.
//
// Crash rule: a kill at any point leaves either the old file or the new one
// at `path`, each usable. The sealed copy is built beside the state under
// `<path>.upgrading`, synced, and renamed over the old file; a copy left by
// a killed run is removed by the next one. The old file's write-ahead log is
// checkpointed into it and gone before the rename, so no log of the old
// format is ever paired with the new file.
#pragma once

#include <string>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"

namespace s3oram {

struct UpgradeReport {
  std::uint64_t pages = 0;        // of the sealed database
  std::uint32_t from_format = 0;  // 0: plain SQLite; else the sealed format converted
};

// FailedPrecondition if `path` is already in the current format (nothing to
// do) or in use by
// another process; PermissionDenied for a wrong passphrase (nothing
// changed); Corruption if the old file is not a readable s3oram state.
Result<UpgradeReport> UpgradeState(const std::string& path, const Secret& passphrase);

}  // namespace s3oram
