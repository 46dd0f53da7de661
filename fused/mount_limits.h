// The bounds of the daemon's numeric settings, one place for both ways of
// giving them: -o options on the command line (mount_options.h) and keys of
// the client config file (client_config.h). A value outside them is refused
// with a message naming the bound.
#pragma once

#include <cstdint>

namespace s3oram::fs {

inline constexpr std::uint32_t kMaxTimeoutSeconds = 24 * 3600;    // timeout, evict_timeout
inline constexpr std::uint64_t kMaxCacheMib = 1u << 20;           // cache_size
inline constexpr std::uint32_t kMaxWritebackDelaySeconds = 3600;  // writeback_delay
inline constexpr std::uint32_t kMaxReadaheadBlocks = 16;          // readahead
inline constexpr std::uint32_t kMaxPipelineAccesses = 8;          // pipeline (OramClient::kMaxPipelined)
// constant_rate, in milliseconds between accesses (0: off). Below 5 ms the
// daemon would spend all its time on dummy accesses; above an hour a mount
// would look dead to `s3oram status` (its lease's idle time) between two.
inline constexpr std::uint32_t kMinConstantRateMs = 5;
inline constexpr std::uint32_t kMaxConstantRateMs = 3600 * 1000;

}  // namespace s3oram::fs
