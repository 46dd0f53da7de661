// Log formatting shared by the daemons (s3oram-serverd, s3oramfs-fused).
//
// Under systemd a daemon's stderr is the journal, which timestamps every line
// itself and reads sd-daemon(3) "<N>" priority prefixes; everywhere else
// (files, terminals, syslog) lines carry our own timestamp, program and PID.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace s3oram::logging {

// True if stderr is the stream systemd's JOURNAL_STREAM names.
bool StderrIsJournal();

// Makes `logger` the default logger at `level`, formatting for the journal
// ("<N>message") or with "YYYY-MM-DD HH:MM:SS.mmm program[pid] level: ".
void Install(std::shared_ptr<spdlog::logger> logger, bool journal_format,
             const std::string& program, spdlog::level::level_enum level);

}  // namespace s3oram::logging
