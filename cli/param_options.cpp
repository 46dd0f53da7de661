#include "cli/param_options.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace s3oram::cli {

void AddParamOptions(CLI::App* cmd, ParamOptions& o) {
  cmd->add_option("--block-size", o.block_bytes, "bytes per ORAM block")
      ->capture_default_str()->check(CLI::Range(16u, 16u << 20));
  cmd->add_option("--capacity", o.capacity, "usable capacity (e.g. 1G); N = capacity / block size");
  cmd->add_option("--blocks", o.blocks, "capacity in blocks (N)");
  cmd->add_option("--height", o.height, "tree height H (default: smallest that holds N)")
      ->check(CLI::Range(1u, 40u));
  cmd->add_option("--bucket-size", o.bucket_size, "bucket size Z (default: smallest safe)")
      ->check(CLI::Range(1u, 1u << 16));
  cmd->add_option("--evict-rate", o.evict_rate, "accesses per eviction (A)")
      ->capture_default_str()->check(CLI::Range(1u, 1u << 16));
  cmd->add_option("--lambda", o.lambda, "security: P(bucket overflow per eviction) <= 2^-lambda")
      ->capture_default_str()->check(CLI::Range(1u, 256u));
  cmd->add_flag("--allow-unsafe-params", o.allow_unsafe,
                "accept a bucket size below the overflow bound (only for comparisons)");
}

Result<OramParams> ResolveParams(const ParamOptions& o, std::uint64_t default_capacity) {
  OramParams p;
  p.block_bytes = o.block_bytes;
  p.evict_rate = o.evict_rate;
  p.lambda = o.lambda;
  if (o.servers < 3 || o.servers > kMaxParties) {
    return Status::InvalidArgument("need 3 to " + std::to_string(kMaxParties) + " servers, got " +
                                   std::to_string(o.servers) +
                                   " (t = 1 takes 2t + 1 = 3 to answer a retrieval)");
  }
  p.parties = o.servers;
  p.threshold = kPrivacyThreshold;
  std::uint64_t n = o.blocks;
  if (n == 0 && !o.capacity.empty()) {
    std::uint64_t bytes;
    try {
      bytes = ParseSize(o.capacity);
    } catch (const CLI::ValidationError& e) {
      return Status::InvalidArgument(e.what());
    }
    n = (bytes + o.block_bytes - 1) / o.block_bytes;
  }
  if (o.height) {
    p.height = o.height;
    if (n == 0) n = p.max_capacity_blocks();
  } else {
    if (n == 0) n = (default_capacity + o.block_bytes - 1) / o.block_bytes;
    S3ORAM_ASSIGN_OR_RETURN(OramParams chosen,
                            ChooseParams(n * o.block_bytes, o.block_bytes, o.evict_rate, o.lambda));
    p.height = chosen.height;
  }
  p.capacity_blocks = n;
  p.bucket_size = o.bucket_size ? o.bucket_size
                                : MinSafeBucketSize(p.evict_rate, p.height, p.lambda, n);
  S3ORAM_RETURN_IF_ERROR(ValidateParams(p, o.allow_unsafe));
  return p;
}

std::string DescribeParams(const OramParams& p, bool allow_unsafe) {
  const CostModel c = EstimateCost(p);
  const double log2p = Log2OverflowPerEviction(p.evict_rate, p.height, p.bucket_size,
                                               p.capacity_blocks);
  const std::uint32_t safe = MinSafeBucketSize(p.evict_rate, p.height, p.lambda, p.capacity_blocks);
  std::ostringstream out;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "  block size B        %u bytes (%llu field elements per slot, %u of them the "
                "share MAC)\n",
                p.block_bytes, static_cast<unsigned long long>(p.elems_per_slot()), p.mac_elems);
  out << buf;
  std::snprintf(buf, sizeof buf, "  capacity N          %llu blocks (%s); at most A*2^(H-1) = %llu\n",
                static_cast<unsigned long long>(p.capacity_blocks),
                HumanBytes(double(p.capacity_blocks) * p.block_bytes).c_str(),
                static_cast<unsigned long long>(p.max_capacity_blocks()));
  out << buf;
  std::snprintf(buf, sizeof buf,
                "  servers ℓ           %u, privacy threshold t = %u: %s learn%s anything of the "
                "data or of which block is read; %u together could\n",
                p.parties, p.threshold,
                p.threshold == 1
                    ? "no single server"
                    : ("no " + std::to_string(p.threshold) + " servers together").c_str(),
                p.threshold == 1 ? "s" : "", p.threshold + 1);
  out << buf;
  std::snprintf(buf, sizeof buf, "  tree height H       %u (%llu buckets)\n", p.height,
                static_cast<unsigned long long>(p.geometry().num_buckets()));
  out << buf;
  std::snprintf(buf, sizeof buf, "  eviction rate A     %u accesses per eviction\n", p.evict_rate);
  out << buf;
  std::snprintf(buf, sizeof buf,
                "  bucket size Z       %u (smallest safe for lambda=%u: %u)%s\n", p.bucket_size,
                p.lambda, safe, p.bucket_size < safe ? "  ** UNSAFE **" : "");
  out << buf;
  std::snprintf(buf, sizeof buf, "  P(overflow)         2^%.1f per eviction\n", log2p);
  out << buf;
  if (allow_unsafe && p.bucket_size < safe) {
    out << "  WARNING: below the overflow bound; an eviction may fail with a bucket overflow\n";
  }
  std::snprintf(buf, sizeof buf, "  storage per server  %s (%.1fx the capacity)\n",
                HumanBytes(c.storage_bytes_per_server).c_str(),
                c.storage_bytes_per_server / (double(p.capacity_blocks) * p.block_bytes));
  out << buf;
  out << "  cost per access (eviction amortised over A):\n";
  std::snprintf(buf, sizeof buf, "    slots streamed per server       %.0f\n", c.slots_streamed);
  out << buf;
  std::snprintf(buf, sizeof buf, "    slot multiplications per server %.0f (%.3g field mults)\n",
                c.slot_multiplications, c.field_mults);
  out << buf;
  std::snprintf(buf, sizeof buf, "    client -> servers               %s\n",
                HumanBytes(c.client_upload_bytes).c_str());
  out << buf;
  std::snprintf(buf, sizeof buf, "    servers -> client               %s\n",
                HumanBytes(c.client_download_bytes).c_str());
  out << buf;
  std::snprintf(buf, sizeof buf, "    server <-> server               %s\n",
                HumanBytes(c.server_to_server_bytes).c_str());
  out << buf;
  return out.str();
}

std::string ParamsJson(const OramParams& p) {
  const CostModel c = EstimateCost(p);
  // -inf (overflow impossible, e.g. Z at least the capacity) is not JSON: null.
  const double log2_overflow =
      Log2OverflowPerEviction(p.evict_rate, p.height, p.bucket_size, p.capacity_blocks);
  char overflow[32] = "null";
  if (std::isfinite(log2_overflow)) std::snprintf(overflow, sizeof overflow, "%.3f", log2_overflow);
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "{\"block_bytes\": %u, \"elems_per_slot\": %llu, \"capacity_blocks\": %llu, \"height\": %u, "
      "\"evict_rate\": %u, \"bucket_size\": %u, \"lambda\": %u, \"safe_bucket_size\": %u, "
      "\"servers\": %u, \"threshold\": %u, "
      "\"log2_overflow_per_eviction\": %s, \"storage_bytes_per_server\": %.0f, "
      "\"slots_streamed\": %.0f, \"slot_multiplications\": %.0f, \"field_mults\": %.0f, "
      "\"client_upload_bytes\": %.0f, \"client_download_bytes\": %.0f, "
      "\"server_to_server_bytes\": %.0f}",
      p.block_bytes, static_cast<unsigned long long>(p.elems_per_slot()),
      static_cast<unsigned long long>(p.capacity_blocks), p.height, p.evict_rate, p.bucket_size,
      p.lambda, MinSafeBucketSize(p.evict_rate, p.height, p.lambda, p.capacity_blocks), p.parties,
      p.threshold, overflow, c.storage_bytes_per_server, c.slots_streamed, c.slot_multiplications,
      c.field_mults, c.client_upload_bytes, c.client_download_bytes, c.server_to_server_bytes);
  return buf;
}

}  // namespace s3oram::cli
