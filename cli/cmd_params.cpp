// s3oram params: the safe bucket size for (A, H, lambda), the cost model and,
// with --profile, the predicted time per access over a named network.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/param_options.h"
#include "oramcore/tree/link_model.h"

namespace s3oram::cli {

namespace {

struct ProfileOptions {
  std::string profile;
  // Defaults: this project's kernels on the development machine (Zen 4, one
  // core per server), rounded down: docs/PERFORMANCE.md §5.
  double server_read_gbps = 10.0;
  double server_gmacs = 10.0;
  double local_ms = 0;
};

std::string ProfileNames() {
  std::string names;
  for (const auto& p : NamedLinkProfiles()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

std::string DescribeLink(const OramParams& p, const LinkProfile& link, const LinkPrediction& r,
                         const ServerSpeed& speed) {
  char buf[512];
  std::string out;
  std::snprintf(buf, sizeof buf, "  over %s (%s):\n", link.name.c_str(), link.description.c_str());
  out += buf;
  std::snprintf(buf, sizeof buf,
                "    time per access   %.1f ms (access %.1f ms + eviction %.0f ms / A)\n",
                r.per_access_s * 1e3, r.access_s * 1e3, r.eviction_s * 1e3);
  out += buf;
  std::snprintf(buf, sizeof buf, "    user data rate    %.1f KB/s (B / time per access)\n",
                r.user_bytes_per_s / 1e3);
  out += buf;
  std::snprintf(buf, sizeof buf,
                "    bytes per user byte: client up %.2f, client down %.2f, server<->server %.1f\n",
                r.client_up_per_user_byte, r.client_down_per_user_byte,
                r.server_peer_per_user_byte);
  out += buf;
  std::snprintf(buf, sizeof buf, "    bottleneck        %s\n", r.bottleneck.c_str());
  out += buf;
  if (speed.local_access_s > 0) {
    std::snprintf(buf, sizeof buf,
                  "    (plus %.2f ms per access measured without a network; B = %u)\n",
                  speed.local_access_s * 1e3, p.block_bytes);
  } else {
    std::snprintf(buf, sizeof buf,
                  "    (server path read %.3g GB/s, eviction product %.3g G MAC/s; B = %u)\n",
                  speed.read_bytes_per_s / 1e9, speed.macs_per_s / 1e9, p.block_bytes);
  }
  out += buf;
  return out;
}

std::string LinkJson(const LinkProfile& link, const LinkPrediction& r) {
  char buf[768];
  std::snprintf(
      buf, sizeof buf,
      "{\"profile\": \"%s\", \"per_access_s\": %.6f, \"access_s\": %.6f, \"eviction_s\": %.6f, "
      "\"user_bytes_per_s\": %.1f, \"client_up_per_user_byte\": %.4f, "
      "\"client_down_per_user_byte\": %.4f, \"server_peer_per_user_byte\": %.4f, "
      "\"bottleneck\": \"%s\"}",
      link.name.c_str(), r.per_access_s, r.access_s, r.eviction_s, r.user_bytes_per_s,
      r.client_up_per_user_byte, r.client_down_per_user_byte, r.server_peer_per_user_byte,
      r.bottleneck.c_str());
  return buf;
}

}  // namespace

void RegisterParams(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("params", "smallest safe bucket size Z and per-access costs");
  auto opts = std::make_shared<ParamOptions>();
  auto json = std::make_shared<bool>(false);
  auto link = std::make_shared<ProfileOptions>();
  opts->block_bytes = kDefaultFsBlockBytes;
  opts->evict_rate = kDefaultFsEvictRate;
  AddParamOptions(cmd, *opts);
  cmd->add_option("--servers", opts->servers,
                  "servers the shares are spread over (l); the privacy threshold is "
                  "t = 1 for any l")
      ->capture_default_str();
  cmd->add_flag("--json", *json, "print JSON");
  cmd->add_option(
         "--profile", link->profile,
         "predict time per access and bytes per user byte over a network: " + ProfileNames())
      ->check(CLI::IsMember([] {
        std::vector<std::string> v;
        for (const auto& p : NamedLinkProfiles()) v.push_back(p.name);
        return v;
      }()));
  cmd->add_option("--server-read-rate", link->server_read_gbps,
                  "with --profile: GB/s a server streams its path at (0: leave out)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option(
         "--server-mac-rate", link->server_gmacs,
         "with --profile: G multiply-accumulates/s of a server's eviction product (0: leave out)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option(
         "--local-ms", link->local_ms,
         "with --profile: ms per access measured without a network (s3oram bench at the same "
         "parameters); replaces the two rates above")
      ->check(CLI::Range(0.0, 1e7));
  cmd->callback([opts, json, link, exit_code] {
    auto p = ResolveParams(*opts, std::uint64_t{1} << 30);
    if (!p.ok()) {
      std::fprintf(stderr, "s3oram params: %s\n", p.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    std::optional<LinkProfile> profile;
    LinkPrediction prediction;
    const ServerSpeed speed{link->server_read_gbps * 1e9, link->server_gmacs * 1e9,
                            link->local_ms / 1e3};
    if (!link->profile.empty()) {
      profile = FindLinkProfile(link->profile);
      prediction = PredictOverLink(*p, *profile, speed);
    }
    if (*json) {
      std::string out = ParamsJson(*p);
      if (profile) out.insert(out.size() - 1, ", \"link\": " + LinkJson(*profile, prediction));
      std::printf("%s\n", out.c_str());
    } else {
      std::printf("S3ORAM parameters (lambda = %u):\n%s", p->lambda,
                  DescribeParams(*p, opts->allow_unsafe).c_str());
      if (profile) std::printf("%s", DescribeLink(*p, *profile, prediction, speed).c_str());
    }
  });
}

}  // namespace s3oram::cli
