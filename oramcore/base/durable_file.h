// Making a rename or a new file survive power loss: fsync of the file and of
// the directory that names it. One copy for the client state, the state
// backup and both server stores.
//
// Guarantees: each call returns Ok only after fsync(2) returned 0 on a
// descriptor of the named file or directory (retried on EINTR); errors name
// the path and the failing step: Status::NoSpace for ENOSPC and EDQUOT,
// Status::IoError otherwise.
#pragma once

#include <string>

#include "oramcore/base/status.h"

namespace s3oram {

// The directory part of `path`: "." for a bare name, "/" for "/name".
std::string ParentDir(const std::string& path);

// fsync of a regular file's data and metadata.
Status SyncFile(const std::string& path);

// fsync of a directory, making the creations, renames and removals in it
// durable.
Status SyncDirectory(const std::string& dir);

}  // namespace s3oram
