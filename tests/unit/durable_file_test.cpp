// oramcore/base/durable_file: the fsync helpers every durable rename relies on.
#include "oramcore/base/durable_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

namespace s3oram {
namespace {

TEST(DurableFileTest, ParentDirOfEveryShapeOfPath) {
  EXPECT_EQ(ParentDir("state.s3oram"), ".");
  EXPECT_EQ(ParentDir("/state.s3oram"), "/");
  EXPECT_EQ(ParentDir("/a/b/state.s3oram"), "/a/b");
  EXPECT_EQ(ParentDir("a/state.s3oram"), "a");
  EXPECT_EQ(ParentDir("/a/b/"), "/a/b");
}

TEST(DurableFileTest, SyncsExistingFilesAndDirectories) {
  const std::string dir = ::testing::TempDir() + "/durable-file-ok";
  ::mkdir(dir.c_str(), 0700);
  const std::string file = dir + "/f";
  std::ofstream(file) << "x";
  EXPECT_TRUE(SyncFile(file).ok());
  EXPECT_TRUE(SyncDirectory(dir).ok());
  EXPECT_TRUE(SyncDirectory(ParentDir(file)).ok());
}

TEST(DurableFileTest, FailuresNameThePathAndTheStep) {
  const std::string dir = ::testing::TempDir() + "/durable-file-missing";
  Status s = SyncFile(dir + "/absent");
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.ToString().find(dir + "/absent"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("opening file"), std::string::npos) << s.ToString();

  // A regular file is not a directory: refused, never synced as one.
  const std::string file = ::testing::TempDir() + "/durable-file-plain";
  std::ofstream(file) << "x";
  s = SyncDirectory(file);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.ToString().find("opening directory " + file), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace s3oram
