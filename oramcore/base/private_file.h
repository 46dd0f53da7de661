// Files that hold secrets (key files, passphrase files): who may read them,
// and how they are read and created.
//
// Guarantees: a private file is used only if it is a regular file (symlinks
// are not followed), owned by the calling user (or root), and not readable or
// writable by group or others (like ssh's private keys); otherwise the caller
// gets PermissionDenied naming the file and the fix. Contents are read into a
// Secret, never into an ordinary buffer.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "oramcore/base/secret.h"
#include "oramcore/base/status.h"

namespace s3oram {

// Checks the open file `fd` (named `path` in messages) as described above.
Status CheckPrivateFile(int fd, const std::string& path);
// The whole file (at most max_bytes; InvalidArgument if larger).
Result<Secret> ReadPrivateFile(const std::string& path, std::size_t max_bytes);
// Creates `path` with mode 0600 (AlreadyExists if it exists), writes `bytes`
// and fsyncs it.
Status WritePrivateFile(const std::string& path, std::span<const std::uint8_t> bytes);

}  // namespace s3oram
