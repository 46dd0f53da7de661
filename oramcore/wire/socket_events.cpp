#include "oramcore/wire/socket_events.h"

#include <zmq.h>

#include <cstring>

namespace s3oram {

std::optional<SocketEvent> NextSocketEvent(void* monitor) {
  zmq_msg_t head;
  zmq_msg_init(&head);
  if (zmq_msg_recv(&head, monitor, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&head);
    return std::nullopt;
  }
  SocketEvent e;
  if (zmq_msg_size(&head) >= 6) {
    std::memcpy(&e.event, zmq_msg_data(&head), 2);
    std::memcpy(&e.value, static_cast<const char*>(zmq_msg_data(&head)) + 2, 4);
  }
  const bool more = zmq_msg_more(&head);
  zmq_msg_close(&head);
  if (more) {  // the endpoint
    zmq_msg_t addr;
    zmq_msg_init(&addr);
    zmq_msg_recv(&addr, monitor, 0);
    zmq_msg_close(&addr);
  }
  return e;
}

}  // namespace s3oram
