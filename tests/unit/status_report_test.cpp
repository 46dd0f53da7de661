// fs::RenderStatus (fused/status_report.h): the per-server lines a client's
// own verdicts add beside what each server answered, for an excluded
// server (EXCLUDED, with the reason and the fix) and for a slow one whose
// answers came after the first three (four or more servers).
#include "fused/status_report.h"

#include <gtest/gtest.h>

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

TEST(StatusReportTest, AnExcludedServerIsNamedWithItsReasonAndTheFix) {
  OramClient::Snapshot client;
  client.state_path = "/home/u/fs.s3oram";
  client.params.parties = 4;
  client.exclusions.push_back(Exclusion{2, 17, 1764374400, "found down since 00:00:00 UTC"});
  const StatusReport report = RenderStatus(client, FourServersAnswering());
  EXPECT_NE(report.text.find("server 2    tcp://127.0.0.1:7702  EXCLUDED since eviction 17 "
                             "(2025-11-29 00:00 UTC): found down since 00:00:00 UTC."),
            std::string::npos)
      << report.text;
  EXPECT_NE(report.text.find("`s3oram rebuild --server 2`"), std::string::npos) << report.text;
  EXPECT_EQ(Count(report.text, "EXCLUDED"), 1u) << report.text;
  EXPECT_EQ(report.unreachable, 0);
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
