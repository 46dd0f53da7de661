#include "cli/backup_upload.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <memory>

#include "cli/progress.h"
#include "oramcore/crypto/subkeys.h"
#include "oramcore/protocol/client.h"

namespace s3oram::cli {

Result<BackupResult> UploadStateBackup(const std::string& state, const Secret& passphrase) {
  const int lock_fd = ::open(state.c_str(), O_RDONLY | O_CLOEXEC);
  const bool exclusive = lock_fd >= 0 && ::flock(lock_fd, LOCK_EX | LOCK_NB) == 0;
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{lock_fd};
  S3ORAM_ASSIGN_OR_RETURN(std::unique_ptr<OramClient> client,
                          OramClient::OpenReadOnly(state, passphrase));
  const Secret key = DeriveBackupKey(client->unlocked_state()->master());
  std::unique_ptr<Progress> progress;
  auto r = BackupStateWithKey(*client, key, TransferProgress("backup", progress));
  if (progress) progress->Finish();
  if (!r.ok()) return r.status();
  if (exclusive) {
    if (Status m = client->RecordBackup(r->generation, r->epoch); !m.ok()) {
      return m.WithContext("generation " + std::to_string(r->generation) +
                           " is on the servers, but recording it in the state failed");
    }
  }
  return r;
}

}  // namespace s3oram::cli
