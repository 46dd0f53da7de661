// s3oram age-fill (benchmarks only): brings a new filesystem to the cost of
// one in use for months in minutes instead of thousands of evictions. A new
// tree is mostly sparse holes, which retrievals skip and evictions read for
// free; here every server writes every bucket with its share of empty slots
// (wire.h AGE_FILL, oramcore/math/age_fill.h). Refused once the filesystem
// has made an access: it would overwrite blocks.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/key_options.h"
#include "cli/progress.h"
#include "oramcore/crypto/passphrase.h"
#include "oramcore/protocol/client.h"

namespace s3oram::cli {

void RegisterAgeFill(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "age-fill",
      "benchmarks only: write every bucket of a new, unused filesystem with empty slots, so that "
      "it costs what a filesystem in use for months costs (each server writes its whole share "
      "file, 7.5x the capacity at the defaults)");
  struct Args {
    std::string state;
    std::string passfile;
    bool plain = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-s,--state", a->state, "client state file")->required();
  AddPassfileOption(cmd, a->passfile);
  cmd->add_flag("--plain-progress", a->plain, "progress as plain lines even on a terminal");
  cmd->callback([a, exit_code] {
    auto fail = [exit_code](const Status& s, int code) {
      std::fprintf(stderr, "s3oram age-fill: %s\n", s.ToString().c_str());
      *exit_code = code;
    };
    PassphraseSource source{a->passfile, kPassphraseEnv, ::isatty(STDIN_FILENO) == 1};
    auto pass = ReadPassphrase(source, "Passphrase for " + a->state + ": ");
    if (!pass.ok()) return fail(pass.status(), 2);
    auto client = OramClient::Open(a->state, *pass);
    if (!client.ok()) return fail(client.status(), 1);
    std::unique_ptr<Progress> bar;
    Status s = (*client)->AgeFill([&](std::uint64_t done, std::uint64_t total) {
      if (!bar) {
        bar = std::make_unique<Progress>("age-fill: buckets", total, Progress::Unit::kItems, stderr,
                                         a->plain);
      }
      bar->Update(done);
    });
    if (bar) bar->Finish();
    if (!s.ok()) return fail(s, 1);
    if (Status closed = (*client)->Close(); !closed.ok()) return fail(closed, 1);
    std::printf("every bucket of every server's tree written: the filesystem is aged\n");
    *exit_code = 0;
  });
}

}  // namespace s3oram::cli
