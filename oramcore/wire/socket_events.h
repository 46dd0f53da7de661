// SocketEvent: one event of a ZeroMQ socket monitor (zmq_socket_monitor),
// read without waiting. A monitor event is two frames: a 16-bit event id
// and a 32-bit value, then the endpoint (read and dropped here).
#pragma once

#include <cstdint>
#include <optional>

namespace s3oram {

struct SocketEvent {
  std::uint16_t event = 0;  // ZMQ_EVENT_*
  std::uint32_t value = 0;  // per event: an errno, a status, an interval
};

// The next event waiting on `monitor` (the PAIR socket connected to a
// socket's monitor endpoint), nullopt if none waits.
std::optional<SocketEvent> NextSocketEvent(void* monitor);

}  // namespace s3oram
