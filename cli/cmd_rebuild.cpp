// s3oram rebuild: recreate a lost server's share from the surviving servers
// (oramcore/protocol/rebuild.h), with a progress report, then verify every live block
// through the ORAM.
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "cli/progress.h"
#include "oramcore/crypto/passphrase.h"
#include "oramcore/protocol/rebuild.h"

namespace s3oram::cli {

void RegisterRebuild(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "rebuild", "recreate a lost server's share from the others (no party sees a secret)");
  struct Args {
    std::string state;
    std::string passfile;
    std::size_t server = 0;
    bool force = false;
    bool no_verify = false;
    bool full = false;
    bool plain = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-s,--state", a->state, "client state file")->required();
  cmd->add_option("--server", a->server,
                  "index (0-based, as listed by s3oram status) of the server to rebuild; it must "
                  "run, with an empty data directory")
      ->required();
  AddPassfileOption(cmd, a->passfile);
  cmd->add_flag("--force", a->force,
                "replace the server's store even if it still holds a live one (its data are "
                "discarded)");
  cmd->add_flag("--full", a->full,
                "copy the whole share even to an excluded server that kept its store (by "
                "default it is caught up: sent only the buckets it missed)");
  cmd->add_flag("--no-verify", a->no_verify,
                "skip reading every live block through the ORAM afterwards");
  cmd->add_flag("--plain-progress", a->plain, "progress as plain lines even on a terminal");
  cmd->callback([a, exit_code] {
    auto fail = [exit_code](const Status& s, int code) {
      std::fprintf(stderr, "s3oram rebuild: %s\n", s.ToString().c_str());
      *exit_code = code;
    };
    auto pass = ReadPassphrase(PassphraseSource{a->passfile, kPassphraseEnv},
                               "Passphrase for " + a->state + ": ");
    if (!pass.ok()) return fail(pass.status(), 2);
    RebuildOptions o;
    o.target = a->server;
    o.force = a->force;
    o.verify = !a->no_verify;
    o.full = a->full;
    // One Progress per phase, created when the phase reports its total.
    std::unique_ptr<Progress> bar;
    std::string phase_now;
    o.progress = [&](std::string_view phase, std::uint64_t done, std::uint64_t total) {
      if (phase != phase_now) {
        if (bar) bar->Finish();
        phase_now = std::string(phase);
        const bool bytes = phase == "rebuild";
        bar = std::make_unique<Progress>(
            bytes ? "rebuild server " + std::to_string(a->server) : "verify blocks", total,
            bytes ? Progress::Unit::kBytes : Progress::Unit::kItems, stderr, a->plain);
      }
      bar->Update(done);
    };
    auto r = RebuildServer(a->state, *pass, o);
    if (bar) bar->Finish();
    if (!r.ok()) {
      // Bad arguments or a refusal that changed nothing: 2; anything else: 1.
      const auto code = r.status().code();
      return fail(r.status(), code == Status::Code::kInvalidArgument ||
                                      code == Status::Code::kFailedPrecondition ||
                                      code == Status::Code::kPermissionDenied
                                  ? 2
                                  : 1);
    }
    std::string from;
    for (std::size_t j : r->participants) from += (from.empty() ? "" : ", ") + std::to_string(j);
    if (r->caught_up) {
      std::printf(
          "server %zu caught up from servers %s: it had applied %llu evictions; it missed %llu "
          "of %llu buckets (the root and what the evictions since rewrote), %llu were sent, %s "
          "of masked terms from server to server; it kept the rest\n",
          a->server, from.c_str(), static_cast<unsigned long long>(r->caught_up_from),
          static_cast<unsigned long long>(r->buckets_missed),
          static_cast<unsigned long long>(r->buckets),
          static_cast<unsigned long long>(r->buckets_sent),
          HumanBytes(double(r->bytes_relayed)).c_str());
    } else {
      std::printf(
          "server %zu rebuilt from servers %s: %llu of %llu buckets written, %s of masked "
          "terms from server to server\n",
          a->server, from.c_str(), static_cast<unsigned long long>(r->buckets_written),
          static_cast<unsigned long long>(r->buckets),
          HumanBytes(double(r->bytes_relayed)).c_str());
    }
    if (r->evictions_committed) {
      std::printf("committed %llu prepared eviction(s) on a lagging survivor first\n",
                  static_cast<unsigned long long>(r->evictions_committed));
    }
    if (o.verify) {
      std::printf("verified: %llu live blocks read back and authenticated\n",
                  static_cast<unsigned long long>(r->blocks_verified));
    } else {
      std::printf("not verified (--no-verify)\n");
    }
  });
}

}  // namespace s3oram::cli
