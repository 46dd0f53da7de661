#include "oramcore/tree/link_model.h"

#include <algorithm>
#include <utility>

#include "oramcore/math/elem_packing.h"
#include "oramcore/math/field.h"

namespace s3oram {

const std::vector<LinkProfile>& NamedLinkProfiles() {
  static const std::vector<LinkProfile> profiles = {
      {"paper-home", 29e6, 5e6, 0.015, 250e6, 0.015,
       "the S3ORAM paper's laptop on home Wi-Fi: 29 Mbit/s down, 5 Mbit/s up, 15 ms; "
       "servers 250 Mbit/s, 15 ms apart"},
      {"paper-lte", 27e6, 9e6, 0.025, 250e6, 0.015,
       "LTE: 27 Mbit/s down, 9 Mbit/s up, 25 ms; servers 250 Mbit/s, 15 ms apart"},
      {"lan", 1e9, 1e9, 0.0002, 1e9, 0.0002, "1 Gbit/s everywhere, 0.2 ms"},
  };
  return profiles;
}

std::optional<LinkProfile> FindLinkProfile(std::string_view name) {
  for (const auto& p : NamedLinkProfiles()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

LinkPrediction PredictOverLink(const OramParams& p, const LinkProfile& link,
                               const ServerSpeed& speed) {
  const CostModel c = EstimateCost(p);
  const double elem = static_cast<double>(wire::kElemWireBits) / 8.0;  // on a link
  const double disk_elem = static_cast<double>(field::kElemBytes);
  const double l = p.parties;
  const double H = p.height;
  const double Z = p.bucket_size;
  const double A = std::max<double>(p.evict_rate, 1.0);
  const double m = static_cast<double>(p.elems_per_slot());
  const double B = p.block_bytes;
  auto wire_s = [](double bytes, double bps) {
    return bps > 0 ? bytes * 8.0 * kHeaderOverhead / bps : 0.0;
  };
  const double client_rtt = 2.0 * link.client_one_way_s;

  // Per access: select vector and root-write share to every server (but one,
  // which gets their seeds when t = 1: wire::ShareSeed), answers back.
  const double share_uploads = p.threshold == 1 ? l - 1.0 : l;
  const double up_access = share_uploads * (Z * (H + 1.0) + m) * elem;
  const double down_access = l * m * elem;
  const double t_up = wire_s(up_access, link.client_up_bps);
  const double t_down = wire_s(down_access, link.client_down_bps);
  const bool local_floor = speed.local_access_s > 0;
  const double t_read = !local_floor && speed.read_bytes_per_s > 0
                            ? c.slots_streamed * m * disk_elem / speed.read_bytes_per_s
                            : 0.0;

  // Per eviction: the root's last write goes alone (its bytes are the access's
  // own, counted above; the round trip is extra), the matrix shares (all but
  // one server's when t = 1: that one gets a seed, a round trip later), H
  // share exchange rounds (H-1 internal buckets, one leaf round of two
  // buckets), commit.
  const double t_ev_up = wire_s(share_uploads * (H + 1.0) * 2.0 * Z * Z * elem, link.client_up_bps);
  const double t_ev_rtt = (p.threshold == 1 ? 4.0 : 3.0) * client_rtt;
  const double t_ev_peers = wire_s((H + 1.0) * (l - 1.0) * Z * m * elem, link.server_bps);
  const double t_ev_peer_rtt = H * link.server_one_way_s;
  const double t_ev_compute =
      !local_floor && speed.macs_per_s > 0 ? (H + 1.0) * 2.0 * Z * Z * m / speed.macs_per_s : 0.0;

  LinkPrediction r;
  r.access_s = t_up + t_down + client_rtt + t_read;
  r.eviction_s = t_ev_up + t_ev_rtt + t_ev_peers + t_ev_peer_rtt + t_ev_compute;
  r.per_access_s = r.access_s + r.eviction_s / A + (local_floor ? speed.local_access_s : 0.0);
  r.user_bytes_per_s = r.per_access_s > 0 ? B / r.per_access_s : 0;
  r.client_up_per_user_byte = c.client_upload_bytes / B;
  r.client_down_per_user_byte = c.client_download_bytes / B;
  r.server_peer_per_user_byte = c.server_to_server_bytes / B;
  const std::pair<double, const char*> shares[] = {
      {t_up + t_ev_up / A, "client uplink"},
      {t_down, "client downlink"},
      {client_rtt + (t_ev_rtt + t_ev_peer_rtt) / A, "round trips"},
      {t_ev_peers / A, "server links"},
      {t_read + t_ev_compute / A + (local_floor ? speed.local_access_s : 0.0), "server compute"},
  };
  r.bottleneck = std::max_element(std::begin(shares), std::end(shares))->second;
  return r;
}

}  // namespace s3oram
