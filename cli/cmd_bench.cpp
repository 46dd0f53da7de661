// s3oram bench: random read/write accesses over a fresh (or, with --age, aged)
// filesystem on a temporary local cluster, every read verified against an
// in-memory model.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <unordered_map>

#include "cli/commands.h"
#include "cli/local_cluster.h"
#include "cli/param_options.h"
#include "cli/progress.h"
#include "oramcore/base/random.h"
#include "oramcore/math/kernels.h"
#include "oramcore/protocol/client.h"

namespace s3oram::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  ParamOptions params;
  std::uint64_t accesses = 0;
  double write_fraction = 0.5;
  std::uint32_t threads = 0;
  bool no_sync = false;
  bool json = false;
  bool keep = false;
  bool age = false;
  std::string dir;
  std::string server_log_level = "warn";
};

// Block content is a function of (id, version tag), so the model stores one
// 64-bit tag per block instead of the block.
void FillBlock(std::uint64_t id, std::uint64_t tag, std::vector<std::uint8_t>& out) {
  std::mt19937_64 gen(id * 0x9e3779b97f4a7c15ull ^ tag);
  for (std::size_t i = 0; i < out.size(); i += 8) {
    std::uint64_t v = gen();
    for (std::size_t k = 0; k < 8 && i + k < out.size(); ++k) out[i + k] = std::uint8_t(v >> (8 * k));
  }
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t idx = std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size() - 1) + 0.5));
  return v[idx];
}

std::uint64_t SumPeerBytes(OramClient& c) {
  std::uint64_t total = 0;
  for (const auto& r : c.QueryServers(std::chrono::milliseconds(10000))) {
    if (r.status.ok()) total += r.reply.peer_bytes_sent;
  }
  return total;
}

// Sum over the servers that answered, and how many did.
struct StatsSum {
  wire::StatsReply total;
  int servers = 0;
};

StatsSum SumServerStats(OramClient& c) {
  StatsSum out;
  for (const auto& r : c.QueryServerStats(std::chrono::milliseconds(10000))) {
    if (!r.status.ok()) continue;
    const wire::StatsReply& s = r.reply;
    wire::StatsReply& t = out.total;
    t.requests += s.requests;
    t.busy_us += s.busy_us;
    t.retrieves += s.retrieves;
    t.retrieve_read_us += s.retrieve_read_us;
    t.retrieve_kernel_us += s.retrieve_kernel_us;
    t.root_writes += s.root_writes;
    t.root_write_us += s.root_write_us;
    t.prepares += s.prepares;
    t.prepare_kernel_us += s.prepare_kernel_us;
    t.prepare_smp_us += s.prepare_smp_us;
    t.prepare_peer_wait_us += s.prepare_peer_wait_us;
    t.prepare_shadow_us += s.prepare_shadow_us;
    t.prepare_seal_us += s.prepare_seal_us;
    t.commits += s.commits;
    t.commit_us += s.commit_us;
    ++out.servers;
  }
  return out;
}

// An ordered list of (name, ms per access) for the report.
using Breakdown = std::vector<std::pair<std::string, double>>;

// Where the client's time went, per access (AccessTimings between two points).
Breakdown ClientBreakdown(const AccessTimings& before, const AccessTimings& after,
                          double accesses, double mean_ms) {
  auto ms = [accesses](std::uint64_t b, std::uint64_t a) { return double(a - b) / 1e6 / accesses; };
  Breakdown out = {
      {"client_compute", ms(before.client_compute_ns, after.client_compute_ns)},
      {"retrieve_wait", ms(before.retrieve_wait_ns, after.retrieve_wait_ns)},
      {"root_write_wait", ms(before.root_write_wait_ns, after.root_write_wait_ns)},
      {"state_commit", ms(before.state_commit_ns, after.state_commit_ns)},
      {"eviction", ms(before.eviction_ns, after.eviction_ns)},
  };
  double accounted = 0;
  for (const auto& [name, v] : out) accounted += v;
  out.emplace_back("other", mean_ms - accounted);  // the bench's own model checks, logging
  out.emplace_back("eviction.client_compute", ms(before.eviction_client_ns, after.eviction_client_ns));
  out.emplace_back("eviction.prepare_wait",
                   ms(before.eviction_prepare_wait_ns, after.eviction_prepare_wait_ns));
  out.emplace_back("eviction.commit_wait",
                   ms(before.eviction_commit_wait_ns, after.eviction_commit_wait_ns));
  out.emplace_back("eviction.state_commit",
                   ms(before.eviction_state_commit_ns, after.eviction_state_commit_ns));
  out.emplace_back("eviction.check", ms(before.eviction_check_ns, after.eviction_check_ns));
  out.emplace_back("eviction.pace", ms(before.eviction_pace_ns, after.eviction_pace_ns));
  return out;
}

// What one server spent per access (mean over the servers that answered).
Breakdown ServerBreakdown(const StatsSum& before, const StatsSum& after, double accesses) {
  const double n = std::max(1, after.servers) * accesses;
  auto ms = [n](std::uint64_t b, std::uint64_t a) { return double(a - b) / 1e3 / n; };
  const wire::StatsReply &b = before.total, &a = after.total;
  return {
      {"retrieve_read", ms(b.retrieve_read_us, a.retrieve_read_us)},
      {"retrieve_kernel", ms(b.retrieve_kernel_us, a.retrieve_kernel_us)},
      {"root_write", ms(b.root_write_us, a.root_write_us)},
      {"evict_kernels", ms(b.prepare_kernel_us, a.prepare_kernel_us)},
      {"evict_smp", ms(b.prepare_smp_us, a.prepare_smp_us)},
      {"evict_peer_wait", ms(b.prepare_peer_wait_us, a.prepare_peer_wait_us)},
      {"evict_shadow_write", ms(b.prepare_shadow_us, a.prepare_shadow_us)},
      {"evict_seal", ms(b.prepare_seal_us, a.prepare_seal_us)},
      {"evict_commit", ms(b.commit_us, a.commit_us)},
      {"busy_total", ms(b.busy_us, a.busy_us)},
  };
}

std::string BreakdownJson(const Breakdown& b) {
  std::string out = "{";
  for (std::size_t i = 0; i < b.size(); ++i) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s\"%s\": %.4f", i ? ", " : "", b[i].first.c_str(), b[i].second);
    out += buf;
  }
  return out + "}";
}

void PrintBreakdown(const char* title, const Breakdown& b) {
  std::printf("  %s\n", title);
  for (const auto& [name, v] : b) std::printf("    %-24s %8.3f ms\n", name.c_str(), v);
}

int RunBench(const BenchArgs& a) {
  auto p = ResolveParams(a.params, std::uint64_t{64} << 20);
  if (!p.ok()) {
    std::fprintf(stderr, "s3oram bench: %s\n", p.status().ToString().c_str());
    return 2;
  }
  const std::uint64_t accesses =
      a.accesses ? a.accesses : std::max<std::uint64_t>(200, 3ull * p->evict_rate);
  std::string dir = a.dir;
  if (dir.empty()) {
    char tmpl[] = "/tmp/s3oram-bench-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      std::perror("s3oram bench: mkdtemp");
      return 1;
    }
    dir = tmpl;
  }
  cluster::LocalClusterOptions copts;
  copts.dir = dir;
  copts.threads = a.threads;
  copts.servers = p->parties;
  copts.sync = !a.no_sync;
  copts.log_level = a.server_log_level;
  copts.peer_timeout_ms = 600000;
  auto cl = cluster::LocalCluster::Start(copts);
  if (!cl.ok()) {
    std::fprintf(stderr, "s3oram bench: %s\n", cl.status().ToString().c_str());
    return 1;
  }
  const std::string state = (std::filesystem::path(dir) / "bench.s3oram").string();
  FsConfig config;
  config.params = *p;
  config.servers = (*cl)->endpoints();
  config.server_keys = (*cl)->server_public_keys();
  config.client_key_file = (*cl)->client_key_file();
  config.allow_unsafe = a.params.allow_unsafe;
  // A throwaway filesystem: a random passphrase that is never stored, and the
  // cheapest KDF (the benchmark measures accesses, not Argon2id).
  Secret passphrase(32);
  random::Bytes(passphrase.bytes());
  if (auto st = OramClient::Initialize(state, config, passphrase, MinimalKdfParams()); !st.ok()) {
    std::fprintf(stderr, "s3oram bench: init: %s\n", st.ToString().c_str());
    return 1;
  }
  auto client = OramClient::Open(state, passphrase);
  if (!client.ok()) {
    std::fprintf(stderr, "s3oram bench: %s\n", client.status().ToString().c_str());
    return 1;
  }
  OramClient& c = **client;
  if (!a.json) {
    std::printf(
        "benchmark: %llu accesses (%.0f%% writes), %u local servers, %s kernels, sync=%s\n%s",
        static_cast<unsigned long long>(accesses), a.write_fraction * 100, p->parties,
        kernels::FastKernelName(), a.no_sync ? "off" : "on",
        DescribeParams(*p, a.params.allow_unsafe).c_str());
    std::fflush(stdout);
  }

  std::random_device rd;
  std::mt19937_64 rng((std::uint64_t{rd()} << 32) ^ rd());
  std::unordered_map<std::uint64_t, std::uint64_t> model;  // id -> content tag
  std::vector<std::uint8_t> data(p->block_bytes), expect(p->block_bytes);
  std::uint64_t reads_verified = 0;
  double last_access_ms = 0;  // the access alone, without filling or checking data
  // One access to `id`, its answer checked against the model; false (after
  // saying why on stderr) if the access failed or returned wrong data.
  auto verified_access = [&](std::uint64_t id, bool write, std::uint64_t i) {
    std::uint64_t tag = 0;
    if (write) {
      tag = rng();
      FillBlock(id, tag, data);
    }
    const auto t0 = Clock::now();
    auto r = c.Access(write ? AccessOp::kWrite : AccessOp::kRead, id,
                      write ? std::span<const std::uint8_t>(data) : std::span<const std::uint8_t>());
    last_access_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (!r.ok()) {
      std::fprintf(stderr, "s3oram bench: access %llu failed: %s\n",
                   static_cast<unsigned long long>(i), r.status().ToString().c_str());
      return false;
    }
    // The access returns the content before it; check it against the model.
    auto it = model.find(id);
    if (it == model.end()) {
      std::fill(expect.begin(), expect.end(), 0);
    } else {
      FillBlock(id, it->second, expect);
    }
    if (r.value() != expect) {
      std::fprintf(stderr, "s3oram bench: block %llu read back wrong data at access %llu\n",
                   static_cast<unsigned long long>(id), static_cast<unsigned long long>(i));
      return false;
    }
    ++reads_verified;
    if (write) model[id] = tag;
    return true;
  };

  // Aging: a young tree is mostly sparse holes, cheap to read; a filesystem
  // used for months has every bucket written. Write every block once, then go
  // on writing random blocks until 2^(H-1) evictions have run: eviction paths
  // follow reverse-lexicographic order and each also writes its leaf's
  // sibling, so those evictions have written every bucket of the tree. Only
  // the accesses after this are measured.
  std::uint64_t aging_accesses = 0;
  double aging_seconds = 0;
  if (a.age) {
    const std::uint64_t target_evictions = std::uint64_t{1} << (p->height - 1);
    const std::uint64_t estimate =
        std::max(p->capacity_blocks, target_evictions * std::uint64_t{p->evict_rate});
    std::vector<std::uint64_t> order(p->capacity_blocks);
    for (std::uint64_t id = 0; id < order.size(); ++id) order[id] = id;
    std::shuffle(order.begin(), order.end(), rng);
    const auto age_start = Clock::now();
    Progress aging("bench: aging (every block, then every bucket written)", estimate,
                   Progress::Unit::kItems);
    for (std::uint64_t i = 0; i < order.size() || c.stats().evictions < target_evictions; ++i) {
      const std::uint64_t id = i < order.size() ? order[i] : rng() % p->capacity_blocks;
      if (!verified_access(id, true, i)) return 1;
      aging_accesses = i + 1;
      aging.Update(std::min(aging_accesses, estimate));
    }
    aging.Finish();
    aging_seconds = std::chrono::duration<double>(Clock::now() - age_start).count();
  }
  const std::uint64_t evictions_before = c.stats().evictions;

  std::vector<double> latencies_ms;
  latencies_ms.reserve(accesses);
  const std::uint64_t peer_before = SumPeerBytes(c);
  const StatsSum server_before = SumServerStats(c);
  const AccessTimings client_before = c.stats().timings;
  const auto sent0 = c.transport_stats().bytes_sent, recv0 = c.transport_stats().bytes_received;
  const auto start = Clock::now();
  // On stderr: stdout carries the results (and --json must stay parseable).
  Progress progress("bench: accesses", accesses, Progress::Unit::kItems);
  for (std::uint64_t i = 0; i < accesses; ++i) {
    const std::uint64_t id = rng() % p->capacity_blocks;
    const bool write = std::uniform_real_distribution<double>(0, 1)(rng) < a.write_fraction;
    if (!verified_access(id, write, aging_accesses + i)) return 1;
    latencies_ms.push_back(last_access_ms);
    progress.Update(i + 1);
  }
  progress.Finish();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double client_bytes =
      double(c.transport_stats().bytes_sent - sent0 + c.transport_stats().bytes_received - recv0) /
      double(accesses);
  const double peer_bytes = double(SumPeerBytes(c) - peer_before) / double(accesses);
  const double mean = seconds * 1000 / double(accesses);
  const double p50 = Percentile(latencies_ms, 0.50), p99 = Percentile(latencies_ms, 0.99);
  const double worst = latencies_ms.empty() ? 0 : *std::max_element(latencies_ms.begin(), latencies_ms.end());
  const Breakdown client_ms = ClientBreakdown(client_before, c.stats().timings, double(accesses), mean);
  const Breakdown server_ms = ServerBreakdown(server_before, SumServerStats(c), double(accesses));
  if (a.json) {
    std::printf(
        "{\"params\": %s, \"accesses\": %llu, \"evictions\": %llu, \"verified\": %llu, "
        "\"seconds\": %.3f, \"mean_ms\": %.3f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
        "\"max_ms\": %.3f, \"accesses_per_s\": %.2f, \"client_server_bytes_per_access\": %.0f, "
        "\"server_server_bytes_per_access\": %.0f, \"kernels\": \"%s\", \"sync\": %s, "
        "\"aged\": %s, \"aging_accesses\": %llu, \"aging_seconds\": %.1f, "
        "\"client_ms_per_access\": %s, \"server_ms_per_access\": %s}\n",
        ParamsJson(*p).c_str(), static_cast<unsigned long long>(accesses),
        static_cast<unsigned long long>(c.stats().evictions - evictions_before),
        static_cast<unsigned long long>(reads_verified), seconds, mean, p50, p99, worst,
        double(accesses) / seconds, client_bytes, peer_bytes, kernels::FastKernelName(),
        a.no_sync ? "false" : "true", a.age ? "true" : "false",
        static_cast<unsigned long long>(aging_accesses), aging_seconds,
        BreakdownJson(client_ms).c_str(), BreakdownJson(server_ms).c_str());
  } else {
    std::printf("results:\n");
    if (a.age) {
      std::printf(
          "  aged first         %llu writes in %.1f s (every block, then every bucket written)\n",
          static_cast<unsigned long long>(aging_accesses), aging_seconds);
    }
    std::printf("  accesses           %llu (%llu evictions), every result verified\n",
                static_cast<unsigned long long>(accesses),
                static_cast<unsigned long long>(c.stats().evictions - evictions_before));
    std::printf("  latency            mean %.2f ms (amortised eviction included), p50 %.2f ms, "
                "p99 %.2f ms, max %.2f ms\n",
                mean, p50, p99, worst);
    std::printf("  throughput         %.1f accesses/s, %s/s of block payload\n",
                double(accesses) / seconds, HumanBytes(double(accesses) * p->block_bytes / seconds).c_str());
    std::printf("  client <-> servers %s per access\n", HumanBytes(client_bytes).c_str());
    std::printf("  server <-> server  %s per access\n", HumanBytes(peer_bytes).c_str());
    PrintBreakdown("client time per access (waits include the servers and the network):", client_ms);
    PrintBreakdown("one server's time per access (mean of the servers):", server_ms);
  }
  client->reset();
  (*cl)->Stop();
  if (!a.keep) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return 0;
}

}  // namespace

void RegisterBench(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("bench",
                                 "random verified accesses on a fresh or aged filesystem "
                                 "over temporary local servers (three unless told)");
  auto a = std::make_shared<BenchArgs>();
  AddParamOptions(cmd, a->params);
  cmd->add_option("--servers", a->params.servers,
                  "temporary local servers the shares are spread over (l, 3 to 16; t = 1)")
      ->capture_default_str();
  cmd->add_option("-n,--accesses", a->accesses, "number of accesses (default: max(200, 3A))");
  cmd->add_option("--write-fraction", a->write_fraction, "share of writes")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--threads", a->threads, "kernel threads per server (0: cores / 3, at least 1)");
  cmd->add_flag("--no-sync", a->no_sync, "servers skip fdatasync");
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->add_option("--dir", a->dir, "cluster directory (default: a fresh one in /tmp)");
  cmd->add_flag("--keep", a->keep, "keep the cluster directory");
  cmd->add_flag("--age", a->age,
                "before measuring, write every block and run 2^(H-1) evictions so every bucket "
                "holds written data, as on a filesystem in use for months");
  cmd->add_option("--server-log-level", a->server_log_level,
                  "log level of the temporary servers (debug shows eviction phase timings)")
      ->capture_default_str();
  cmd->callback([a, exit_code] { *exit_code = RunBench(*a); });
}

}  // namespace s3oram::cli
