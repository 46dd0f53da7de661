// Uploading a state backup from the command line (backup-state, passwd):
// opens the state read-only with the passphrase, so a daemon that has the
// filesystem mounted is not fenced off (both use its epoch), and uploads a
// new generation. When no other process writes the state (its flock is free,
// and held here until the end), the state records the upload (its backup
// mark, for freshness); a mounted filesystem records its own at unmount.
#pragma once

#include <string>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/protocol/state_backup.h"

namespace s3oram::cli {

Result<BackupResult> UploadStateBackup(const std::string& state, const Secret& passphrase);

}  // namespace s3oram::cli
