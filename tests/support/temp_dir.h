// TempDir: a fresh private directory under $TMPDIR (or /tmp) for one test,
// removed with its contents when it goes out of scope. With
// S3ORAM_TEST_KEEP=1 it is kept (and its path printed) for debugging.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

namespace s3oram::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                       "/s3oram-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp(" << tmpl << "): " << std::strerror(errno);
      return;
    }
    path_ = tmpl;
  }
  ~TempDir() {
    const char* keep = std::getenv("S3ORAM_TEST_KEEP");
    if (keep != nullptr && *keep == '1') {
      std::printf("[ kept     ] %s\n", path_.c_str());
      return;
    }
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace s3oram::testing
