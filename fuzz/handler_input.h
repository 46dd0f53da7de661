// The input format of server_handler_fuzz, shared with make_corpus (which
// writes seeds in it). Little-endian throughout.
//
//   input   := start:u8 record*
//   record  := control:u8 length:u16 frame[length]   (length clipped to the bytes left)
//
// start % 3 picks the state every input begins from: kStartEmpty (no store:
// the server waits for INIT) or a fresh store of kSmallShape / kMediumShape with
// fs id kFsId, server index 0, epoch 0, nothing applied.
//
// control: bits 0-2 how the stub peers behave in an EVICT_PREPARE (PeerMode,
// values above kLongShares behave as kEcho); bit 3 (kFixFsId) overwrites the
// frame's fs_id with the current store's; bit 4 (kFixLength) sets the frame's
// body-length field to the bytes that follow the header. The fix-ups let the
// fuzzer change a body's size, or INIT a new filesystem, and still get past
// the decoder and the fs-id check to the handler's deeper checks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "oramcore/wire/wire.h"

namespace s3oram::fuzz {

inline constexpr std::uint8_t kStartEmpty = 0;
inline constexpr std::uint8_t kStartSmall = 1;
inline constexpr std::uint8_t kStartMedium = 2;
inline constexpr wire::StoreShape kSmallShape{2, 2, 4};    // H, Z, m
inline constexpr wire::StoreShape kMediumShape{3, 4, 20};  // m = 20: one 75-byte block
inline constexpr wire::FsId kFsId = {0x53, 0x33, 0x4f, 0x52, 0x66, 0x75, 0x7a, 0x7a,
                                     0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
inline constexpr std::uint32_t kServerIndex = 0;  // the harness's server; peers are 1 and 2

enum class PeerMode : std::uint8_t {
  kEcho = 0,         // each peer answers with as many shares as it was sent (well-formed)
  kTimeout = 1,      // Await fails (Unavailable), as when a peer is down
  kShortShares = 2,  // peer 2 answers with one share too few
  kMissingPeer = 3,  // Await returns shares of one peer only
  kSendFails = 4,    // Send fails (IoError)
  kLongShares = 5,   // peer 1 answers with one share too many
};
inline constexpr std::uint8_t kPeerModeMask = 0x07;
inline constexpr std::uint8_t kFixFsId = 0x08;
inline constexpr std::uint8_t kFixLength = 0x10;

// Byte offsets in a wire frame header (oramcore/wire/wire.h).
inline constexpr std::size_t kFsIdOffset = 8;
inline constexpr std::size_t kSeqOffset = 32;
inline constexpr std::size_t kLengthOffset = 40;
static_assert(kLengthOffset + 4 == wire::kHeaderBytes);

}  // namespace s3oram::fuzz
