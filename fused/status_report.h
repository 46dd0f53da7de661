// The text `s3oram status` prints for a filesystem that is open: what its
// client state says (OramClient::Snapshot) and what each of its servers
// answered (ServerViews). One renderer for both ways of asking: the CLI
// opening the state itself with the passphrase (cli/cmd_status.cpp), and a
// mount daemon answering on its control socket (control_socket.h) from the
// snapshot of its latest call and a StatusProbe round.
#pragma once

#include <string>

#include "oramcore/protocol/client.h"
#include "oramcore/protocol/client_session.h"

namespace s3oram::fs {

struct StatusReport {
  std::string text;     // lines ending in '\n'
  int unreachable = 0;  // servers shown UNREACHABLE (status exits 1 if any)
};

// `live_mount`: the snapshot is a running mount's (its epoch is the one it
// opened, so its backup mark is behind until the unmount's upload).
StatusReport RenderStatus(const OramClient::Snapshot& client, const ServerViews& servers,
                          bool live_mount = false);

}  // namespace s3oram::fs
