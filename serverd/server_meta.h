// What a server's share file says about itself in its header: whose
// filesystem, which server, the tree's shape, and how far the client's
// requests and evictions have been applied (share_store_format.h has the
// bytes; ShareStore keeps it current).
#pragma once

#include <cstdint>

#include "oramcore/wire/wire.h"

namespace s3oram::serverd {

struct ServerMeta {
  wire::FsId fs_id{};
  std::uint32_t server_index = 0;
  wire::StoreShape shape;
  std::uint64_t epoch = 0;
  std::uint64_t applied_seq = 0;
  std::uint64_t applied_evictions = 0;
};

}  // namespace s3oram::serverd
