// fs::RenderStatus (fused/status_report.h): the per-server lines a client's
// own verdicts add beside what each server answered, for an excluded
// server (EXCLUDED, with the reason and the fix) and for a slow one whose
// answers came after the first three (four or more servers).
#include "fused/status_report.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace s3oram::fs {
namespace {

ServerViews FourServersAnswering() {
  ServerViews views;
  for (std::size_t i = 0; i < 4; ++i) {
    ServerReport r;
    r.endpoint = "tcp://127.0.0.1:" + std::to_string(7700 + i);
    r.reply.initialized = true;
    r.reply.server_index = static_cast<std::uint32_t>(i);
    views.reports.push_back(r);
    views.backups.emplace_back(std::vector<wire::BackupInfo>{});
    views.leases.emplace_back(wire::LeaseReply{});
  }
  return views;
}

std::size_t Count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(StatusReportTest, AnExcludedServerIsNamedWithItsReasonHowFarBehindAndTheFix) {
  OramClient::Snapshot client;
  client.state_path = "/home/u/fs.s3oram";
  client.params.parties = 4;
  client.counters.ne = 20;
  client.exclusions.push_back(Exclusion{2, 17, 1764374400, "found down since 00:00:00 UTC"});
  ServerViews views = FourServersAnswering();
  views.reports[2].reply.applied_evictions = 16;  // it lagged before it was found down
  StatusReport report = RenderStatus(client, views);
  EXPECT_NE(report.text.find("server 2    tcp://127.0.0.1:7702  EXCLUDED since eviction 17 "
                             "(2025-11-29 00:00 UTC): found down since 00:00:00 UTC; it is 4 "
                             "evictions behind (it applied 16, the others 20). "),
            std::string::npos)
      << report.text;
  EXPECT_NE(report.text.find("a mount catches it up (or `s3oram rebuild --server 2`)"),
            std::string::npos)
      << report.text;
  EXPECT_EQ(Count(report.text, "EXCLUDED"), 1u) << report.text;
  EXPECT_EQ(report.unreachable, 0);
  // Silent: behind by what the others applied since its exclusion.
  views.reports[2].status = Status::Unavailable("timeout");
  report = RenderStatus(client, views);
  EXPECT_NE(report.text.find("found down since 00:00:00 UTC; the others applied 3 evictions "
                             "without it. "),
            std::string::npos)
      << report.text;
  EXPECT_EQ(report.unreachable, 1);
}

// Excluded for what it answered: no catch-up is offered, only the full
// rebuild, and no distance is given (none of its buckets counts).
TEST(StatusReportTest, ASuspectIsShownExcludedForWhatItAnsweredWithTheFullRebuild) {
  OramClient::Snapshot client;
  client.state_path = "/home/u/fs.s3oram";
  client.params.parties = 4;
  client.counters.ne = 20;
  client.exclusions.push_back(
      Exclusion{1, 9, 1764374400, "it reported damaged storage: bucket 1 slot 3", true});
  const StatusReport report = RenderStatus(client, FourServersAnswering());
  EXPECT_NE(report.text.find("server 1    tcp://127.0.0.1:7701  EXCLUDED since eviction 9 "
                             "(2025-11-29 00:00 UTC) for what it answered: it reported damaged "
                             "storage: bucket 1 slot 3. The others go on without it, writable; "
                             "nothing of it is read or trusted again until `s3oram rebuild "
                             "--server 1` rebuilds it in full"),
            std::string::npos)
      << report.text;
  EXPECT_EQ(Count(report.text, "catches it up"), 0u) << report.text;
  EXPECT_EQ(Count(report.text, "behind"), 0u) << report.text;
}

// A catch-up the mount runs now: its progress on a line of its own.
TEST(StatusReportTest, ACatchUpUnderWayShowsItsProgress) {
  OramClient::Snapshot client;
  client.state_path = "/home/u/fs.s3oram";
  client.params.parties = 4;
  client.counters.ne = 20;
  client.exclusions.push_back(Exclusion{3, 17, 1764374400, "found down"});
  client.catching_up =
      OramClient::Snapshot::CatchUp{3, 3u << 20, 12u << 20, std::chrono::milliseconds(2500)};
  const StatusReport report = RenderStatus(client, FourServersAnswering());
  EXPECT_NE(report.text.find("server 3    tcp://127.0.0.1:7703  CATCHING UP: 3.0 MiB of the "
                             "12.0 MiB of buckets it missed sent in 2.5 s"),
            std::string::npos)
      << report.text;
  EXPECT_EQ(Count(report.text, "CATCHING UP"), 1u) << report.text;
}

TEST(StatusReportTest, ASlowServerIsShownWithTheAnswersThatCameLate) {
  OramClient::Snapshot client;
  client.state_path = "/home/u/fs.s3oram";
  client.params.parties = 4;
  client.lagged_answers = {0, 0, 0, 42};
  const StatusReport report = RenderStatus(client, FourServersAnswering());
  EXPECT_NE(report.text.find("server 3    tcp://127.0.0.1:7703  slow: 42 of its retrieval "
                             "answers came after the first three"),
            std::string::npos)
      << report.text;
  EXPECT_EQ(Count(report.text, "slow:"), 1u) << report.text;
  EXPECT_EQ(Count(report.text, "EXCLUDED"), 0u) << report.text;
}

}  // namespace
}  // namespace s3oram::fs
