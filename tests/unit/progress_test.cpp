#include "cli/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace s3oram::cli {
namespace {

TEST(ProgressTest, RendersBarPercentRateAndEta) {
  std::string line = Progress::Render("rebuild", 50, 200, Progress::Unit::kItems,
                                      std::chrono::seconds(10), /*bar=*/true);
  EXPECT_NE(line.find("rebuild: [#######"), std::string::npos) << line;
  EXPECT_NE(line.find(" 25% 50/200"), std::string::npos) << line;
  EXPECT_NE(line.find("5/s"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 0:30"), std::string::npos) << line;
}

TEST(ProgressTest, PlainLinesHaveNoBarAndUnknownTotalsNoEta) {
  std::string line = Progress::Render("backup", 3 << 20, 0, Progress::Unit::kBytes,
                                      std::chrono::seconds(1), /*bar=*/false);
  EXPECT_EQ(line.find('['), std::string::npos) << line;
  EXPECT_EQ(line.find("ETA"), std::string::npos) << line;
  EXPECT_NE(line.find("3.0 MiB"), std::string::npos) << line;
}

TEST(ProgressTest, NotATerminalGivesPlainLinesAndOneFinalLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("fsck", 4, Progress::Unit::kItems, f, /*force_plain=*/false,
               std::chrono::milliseconds(0));
    for (int i = 1; i <= 4; ++i) p.Update(i);
    p.Update(9);  // clamped to the total
  }
  std::rewind(f);
  std::string all;
  char buf[256];
  while (std::fgets(buf, sizeof buf, f)) all += buf;
  std::fclose(f);
  EXPECT_EQ(all.find('\r'), std::string::npos) << all;
  EXPECT_NE(all.find("100% 4/4"), std::string::npos) << all;
  EXPECT_EQ(all.find("9/4"), std::string::npos) << all;
  EXPECT_NE(all.find("(done in"), std::string::npos) << all;
}

}  // namespace
}  // namespace s3oram::cli
