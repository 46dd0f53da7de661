// Uploading a state backup from the command line (backup-state, passwd).
//
// BackupSession opens the state read-only with the passphrase: no new
// epoch, so a daemon that has the filesystem mounted is not fenced off (both
// use its epoch); the open checks that the state is not stale and that the
// servers answer. It also tries to take the state's flock (held until the
// session ends): when it gets it, no other process writes the state, and an
// upload records the generation the state now equals (its backup mark, for
// freshness); a mounted filesystem records its own at unmount.
#pragma once

#include <memory>
#include <string>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/state_backup.h"

namespace s3oram::cli {

class BackupSession {
 public:
  static Result<std::unique_ptr<BackupSession>> Open(const std::string& state,
                                                     const Secret& passphrase);
  ~BackupSession();
  BackupSession(const BackupSession&) = delete;
  BackupSession& operator=(const BackupSession&) = delete;

  // True if no other process has the state open for writing (a mount).
  bool exclusive() const { return exclusive_; }
  OramClient& client() { return *client_; }
  // A new generation from the state as it is on disk now (its header's key
  // wrap and key epoch included), with a progress line for a large one.
  Result<BackupResult> Upload();

 private:
  BackupSession() = default;
  int lock_fd_ = -1;
  bool exclusive_ = false;
  std::unique_ptr<OramClient> client_;
};

// Open, then Upload.
Result<BackupResult> UploadStateBackup(const std::string& state, const Secret& passphrase);

}  // namespace s3oram::cli
