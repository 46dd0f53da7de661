// The bounds every decoder enforces on variable-length fields besides
// element vectors (kMaxElems, math/elem_packing.h). A leaf header: wire.h and
// the codec's I/O objects (codec_io.h) both include it.
#pragma once

#include <cstdint>

namespace s3oram::wire {

// Longest string (diagnostic text only) a decoder accepts; Encode clips.
inline constexpr std::uint32_t kMaxString = 4096;
// Largest party list or list of per-party vectors a decoder accepts.
inline constexpr std::uint32_t kMaxParties = 64;

}  // namespace s3oram::wire
