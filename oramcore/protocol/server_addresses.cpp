#include "oramcore/protocol/server_addresses.h"

#include "oramcore/wire/message_limits.h"

namespace s3oram {

wire::StoreShape ShapeOf(const OramParams& params) {
  return wire::StoreShape{params.height, params.bucket_size,
                          static_cast<std::uint32_t>(params.elems_per_slot())};
}

ServerAddresses AddressesOf(const FsConfig& config) {
  ServerAddresses a;
  a.endpoints = config.servers;
  a.server_keys = config.server_keys;
  a.client_key_file = config.client_key_file;
  a.max_reply_bytes = wire::LimitsFor(ShapeOf(config.params), config.params.parties).reply_bytes;
  return a;
}

}  // namespace s3oram
