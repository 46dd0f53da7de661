// Command-line options that choose ORAM parameters (shared by init, params and
// bench) and their resolution into a validated OramParams.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "cli/commands.h"
#include "oramcore/base/status.h"
#include "oramcore/tree/params.h"

namespace s3oram::cli {

struct ParamOptions {
  std::uint32_t block_bytes = kDefaultBlockBytes;
  std::string capacity;           // e.g. "1G": N = capacity / block size
  std::uint64_t blocks = 0;       // N directly
  std::uint32_t height = 0;       // 0: smallest height that holds N
  std::uint32_t bucket_size = 0;  // 0: smallest safe Z
  std::uint32_t evict_rate = kDefaultEvictRate;
  std::uint32_t lambda = kDefaultLambda;
  // ℓ, the servers holding shares: init takes it from its --server count,
  // params from --servers. The privacy threshold is t = kPrivacyThreshold
  // = 1 whatever ℓ (oramcore/tree/params.h).
  std::uint32_t servers = 3;
  bool allow_unsafe = false;
};

void AddParamOptions(CLI::App* cmd, ParamOptions& o);

// N from --blocks, else --capacity, else A * 2^(H-1) when --height is given,
// else `default_capacity`; H from --height or the smallest that holds N; Z from
// --bucket-size or the smallest safe one. Refuses unsafe parameters unless
// --allow-unsafe-params.
Result<OramParams> ResolveParams(const ParamOptions& o, std::uint64_t default_capacity);

// One line per parameter and the cost model, for humans.
std::string DescribeParams(const OramParams& p, bool allow_unsafe);
std::string ParamsJson(const OramParams& p);

}  // namespace s3oram::cli
