// The s3oram subcommands. Each Register* adds one subcommand to the app; its
// callback stores the process exit code in *exit_code.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "oramcore/base/human_bytes.h"

namespace s3oram::cli {

// Defaults for a new filesystem (init, and params, which predicts for init),
// chosen with bench/net-bench for a laptop on a home link
// (docs/PERFORMANCE.md §8): 256 KiB blocks, whose 64 slots of 4 KiB small
// files share, and one eviction per 280 accesses, which keeps the storage
// per server at 7.5 times a 1 GiB capacity.
inline constexpr std::uint32_t kDefaultFsBlockBytes = 262144;
inline constexpr std::uint32_t kDefaultFsEvictRate = 280;
// Defaults of `s3oram bench`, an engine setting (docs/PERFORMANCE.md §1-7).
inline constexpr std::uint32_t kDefaultBlockBytes = 4096;
inline constexpr std::uint32_t kDefaultEvictRate = 32;
inline constexpr std::uint32_t kDefaultLambda = 80;

void RegisterInit(CLI::App& app, int* exit_code);
void RegisterPasswd(CLI::App& app, int* exit_code);
void RegisterRekey(CLI::App& app, int* exit_code);
void RegisterUpgradeState(CLI::App& app, int* exit_code);
void RegisterKeygen(CLI::App& app, int* exit_code);
void RegisterParams(CLI::App& app, int* exit_code);
void RegisterStatus(CLI::App& app, int* exit_code);
void RegisterBench(CLI::App& app, int* exit_code);
void RegisterAgeFill(CLI::App& app, int* exit_code);
void RegisterCluster(CLI::App& app, int* exit_code);
void RegisterFsck(CLI::App& app, int* exit_code);

// fsck(8)'s exit code for a usage error, which `s3oram fsck` returns for a
// command line CLI11 rejects (other subcommands keep CLI11's codes).
inline constexpr int kFsckUsageError = 16;
void RegisterRebuild(CLI::App& app, int* exit_code);
void RegisterScrub(CLI::App& app, int* exit_code);
void RegisterBackupState(CLI::App& app, int* exit_code);
void RegisterRestore(CLI::App& app, int* exit_code);
void RegisterAttach(CLI::App& app, int* exit_code);
void RegisterRefreshState(CLI::App& app, int* exit_code);

// "1G", "512M", "64K", "4096" (binary units) -> bytes; throws CLI::ValidationError.
std::uint64_t ParseSize(const std::string& text);
using s3oram::HumanBytes;  // oramcore/base/human_bytes.h

}  // namespace s3oram::cli
