// s3oram status: reachability and progress of every server of a filesystem.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "fused/control_socket.h"
#include "fused/status_report.h"
#include "oramcore/crypto/passphrase.h"
#include "oramcore/protocol/client.h"
#include "oramcore/state/state_file.h"

namespace s3oram::cli {

namespace {

// Without the passphrase only the state's clear header can be read: the
// servers, counters and positions are inside the sealed database.
void PrintSealedHeader(const std::string& state, const std::vector<StateHeader>& headers) {
  const StateHeader& h = headers.front();
  std::string id;
  for (std::uint8_t b : h.fs_id) {
    static const char* hex = "0123456789abcdef";
    id += hex[b >> 4];
    id += hex[b & 15];
  }
  std::printf("filesystem  %s\n", state.c_str());
  std::printf("fs id       %s\n", id.c_str());
  std::printf(
      "state       sealed (format %u), key epoch %llu (passphrase or key changes)%s; "
      "Argon2id %llu passes, %s\n",
      h.format, static_cast<unsigned long long>(h.generation),
      headers.size() > 1 ? " (a change was cut short)" : "",
      static_cast<unsigned long long>(h.wrap.kdf.ops),
      HumanBytes(double(h.wrap.kdf.mem_bytes)).c_str());
  std::printf(
      "the servers, counters and backups need the passphrase (--passfile, $%s "
      "or a terminal)\n",
      kPassphraseEnv);
}

// The answer of the mount daemon serving `state`, if one does
// (fused/control_socket.h): no passphrase, no Argon2id, and no wait for the
// access or eviction the mount has under way. nullopt when none serves it,
// or when the one there fails to answer (said on stderr; the state is then
// opened as without a mount).
std::optional<int> AskTheMount(const std::string& state, int timeout_ms) {
  // The servers' round takes up to timeout_ms; the daemon answers after it.
  // A mount waits at most 10 s for a server (an unmount waits for its round).
  const int ask_ms = std::clamp(timeout_ms, 1, 10000);
  const auto wait = std::chrono::milliseconds(ask_ms) + std::chrono::seconds(5);
  auto answer = fs::AskMountDaemon(state, "status " + std::to_string(ask_ms), wait);
  if (!answer.ok()) {
    std::fprintf(stderr, "s3oram status: asking the mount failed (%s); opening the state instead\n",
                 answer.status().ToString().c_str());
    return std::nullopt;
  }
  if (!answer->has_value()) return std::nullopt;
  // Exit 2: the mount refused the request (its text says why).
  std::fputs((*answer)->text.c_str(), (*answer)->exit_code == 2 ? stderr : stdout);
  return (*answer)->exit_code;
}

// The exit code: 0, or 1 when the state cannot be opened or a server is
// unreachable, 2 when the passphrase cannot be read (or the mount refused
// the request).
int RunStatus(const std::string& state, int timeout_ms, const std::string& passfile, bool direct) {
  auto headers = ReadStateHeader(state);
  if (!headers.ok()) {
    std::fprintf(stderr, "s3oram status: %s\n", headers.status().ToString().c_str());
    return 1;
  }
  if (!direct) {
    if (const std::optional<int> code = AskTheMount(state, timeout_ms)) return *code;
  }
  PassphraseSource source{passfile, kPassphraseEnv, ::isatty(STDIN_FILENO) == 1};
  auto pass = ReadPassphrase(source, "Passphrase for " + state + ": ");
  if (!pass.ok() && pass.status().code() == Status::Code::kFailedPrecondition) {
    PrintSealedHeader(state, *headers);
    return 0;
  }
  if (!pass.ok()) {
    std::fprintf(stderr, "s3oram status: %s\n", pass.status().ToString().c_str());
    return 2;
  }
  ClientOptions options;
  options.requests.deadline = std::chrono::milliseconds(timeout_ms);
  options.requests.resend_after = std::chrono::milliseconds(timeout_ms);
  options.allow_stale = true;        // shown below, not refused
  options.allow_unreachable = true;  // named below, the others shown
  auto client = OramClient::OpenReadOnly(state, *pass, options);
  if (!client.ok()) {
    std::fprintf(stderr, "s3oram status: %s\n", client.status().ToString().c_str());
    return 1;
  }
  // What the open asked: one round, every server at once and each on its
  // own, so a slow or down server costs the command its own timeout once.
  // A server busy with an eviction answers it beside the work (serverd/server.h).
  const fs::StatusReport report =
      fs::RenderStatus((*client)->TakeSnapshot(), (*client)->opened_with());
  std::fputs(report.text.c_str(), stdout);
  return report.unreachable ? 1 : 0;
}

}  // namespace

void RegisterStatus(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("status", "servers reachable, epoch, applied seq, capacity used");
  auto state = std::make_shared<std::string>();
  auto timeout_ms = std::make_shared<int>(5000);
  auto passfile = std::make_shared<std::string>();
  auto direct = std::make_shared<bool>(false);
  cmd->add_option("-s,--state", *state, "client state file")->required();
  cmd->add_option("--timeout-ms", *timeout_ms, "per-server timeout")->capture_default_str();
  AddPassfileOption(cmd, *passfile);
  cmd->add_flag("--direct", *direct,
                "open the state with the passphrase even when a mount of it answers on its "
                "control socket");
  cmd->callback([state, timeout_ms, passfile, direct, exit_code] {
    *exit_code = RunStatus(*state, *timeout_ms, *passfile, *direct);
  });
}

}  // namespace s3oram::cli
