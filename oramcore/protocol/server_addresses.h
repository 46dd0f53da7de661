// What a filesystem's client state says about reaching its servers, in the
// terms of the wire layer: the store shape the servers hold, and the
// addresses, keys and reply limit a ServerSet is made from.
#pragma once

#include "oramcore/state/client_state.h"
#include "oramcore/wire/server_set.h"
#include "oramcore/wire/wire.h"

namespace s3oram {

wire::StoreShape ShapeOf(const OramParams& params);
// The reply limit is the store shape's (wire::LimitsFor).
ServerAddresses AddressesOf(const FsConfig& config);

}  // namespace s3oram
