// Identifiers every layer shares, below the wire format that carries them.
//
// FsId: a filesystem's random 128-bit id, drawn once by `s3oram init`. It is
// in every request header (a server refuses requests for another filesystem),
// bound into every sealed block and the master key's wrap (a block or a wrap
// of one filesystem never opens in another), and in the state file's clear
// header.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace s3oram {

inline constexpr std::size_t kFsIdBytes = 16;
using FsId = std::array<std::uint8_t, kFsIdBytes>;

}  // namespace s3oram
