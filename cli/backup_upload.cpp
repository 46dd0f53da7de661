#include "cli/backup_upload.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "cli/progress.h"
#include "oramcore/crypto/subkeys.h"

namespace s3oram::cli {

Result<std::unique_ptr<BackupSession>> BackupSession::Open(const std::string& state,
                                                           const Secret& passphrase) {
  std::unique_ptr<BackupSession> s(new BackupSession());
  s->lock_fd_ = ::open(state.c_str(), O_RDONLY | O_CLOEXEC);
  s->exclusive_ = s->lock_fd_ >= 0 && ::flock(s->lock_fd_, LOCK_EX | LOCK_NB) == 0;
  S3ORAM_ASSIGN_OR_RETURN(s->client_, OramClient::OpenReadOnly(state, passphrase));
  return s;
}

BackupSession::~BackupSession() {
  client_.reset();  // before the lock goes
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Result<BackupResult> BackupSession::Upload() {
  const Secret key = DeriveBackupKey(client_->unlocked_state()->master());
  std::unique_ptr<Progress> progress;
  auto r = BackupStateWithKey(*client_, key, TransferProgress("backup", progress));
  if (progress) progress->Finish();
  if (!r.ok()) return r.status();
  if (exclusive_) {
    if (Status m = client_->RecordBackup(r->generation, r->epoch); !m.ok()) {
      return m.WithContext("generation " + std::to_string(r->generation) +
                           " is on the servers, but recording it in the state failed");
    }
  }
  return r;
}

Result<BackupResult> UploadStateBackup(const std::string& state, const Secret& passphrase) {
  S3ORAM_ASSIGN_OR_RETURN(std::unique_ptr<BackupSession> session,
                          BackupSession::Open(state, passphrase));
  return session->Upload();
}

}  // namespace s3oram::cli
