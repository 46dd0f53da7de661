// The mount daemon's control socket (fused/control_socket.h) between two
// threads of this process: a request reaches the handler and its answer the
// asker; no daemon, or a socket a killed daemon left, reads as "no mount";
// a stale socket is replaced, anything else at the path is refused and left
// alone; a path longer than sun_path works; the socket is private (0600)
// and removed at the end; a peer that never sends its request, or one that
// sends too much, does not keep the next asker waiting; a handler that
// throws is an answer, not the end of the daemon; an answer that is not the
// protocol's is an error, not a status; a daemon whose queue is full (hung)
// is an error at once, not a wait without end.
#include "fused/control_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "tests/support/temp_dir.h"

namespace s3oram::fs {
namespace {

using namespace std::chrono_literals;

// The address of the Unix socket at `path` (short enough for sun_path).
sockaddr_un AddressOf(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  return addr;
}

// A raw client connection to the socket at `path` (asserting it connects).
int ConnectTo(const std::string& path) {
  sockaddr_un addr = AddressOf(path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0)
      << std::strerror(errno);
  return fd;
}

// A listening Unix socket bound at `path` that accepts nothing (as a killed
// daemon's, once closed) or whose single connection gets `answer`.
int BindAt(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = AddressOf(path);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  return fd;
}

bool IsSocket(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

TEST(ControlSocketTest, ARequestReachesTheHandlerAndItsAnswerTheAsker) {
  testing::TempDir dir;
  const std::string state = dir.path() + "/fs.state";
  std::atomic<int> calls{0};
  std::mutex seen_mu;
  std::string seen;
  auto server = ControlServer::Start(state, [&](const std::string& request) {
    const std::lock_guard<std::mutex> lock(seen_mu);
    seen = request;
    ++calls;
    return ControlAnswer{1, "line one\nline two\n"};
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ((*server)->path(), state + ".ctl");
  struct stat st {};
  ASSERT_EQ(::lstat((state + ".ctl").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the socket must be the user's only";

  auto answer = AskMountDaemon(state, "status 1000", 10s);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  ASSERT_TRUE(answer->has_value());
  EXPECT_EQ((*answer)->exit_code, 1);
  EXPECT_EQ((*answer)->text, "line one\nline two\n");
  {
    const std::lock_guard<std::mutex> lock(seen_mu);
    EXPECT_EQ(seen, "status 1000");
  }
  EXPECT_EQ(calls.load(), 1);

  server->reset();
  EXPECT_FALSE(IsSocket(state + ".ctl")) << "the socket outlived its server";
  auto none = AskMountDaemon(state, "status 1000", 10s);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
}

TEST(ControlSocketTest, ASocketAKilledDaemonLeftReadsAsNoMountAndIsReplaced) {
  testing::TempDir dir;
  const std::string state = dir.path() + "/fs.state";
  ::close(BindAt(state + ".ctl"));  // bound, never listening, closed: as after kill -9
  ASSERT_TRUE(IsSocket(state + ".ctl"));
  auto none = AskMountDaemon(state, "status 1000", 10s);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());

  auto server = ControlServer::Start(state, [](const std::string&) {
    return ControlAnswer{0, "ok\n"};
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto answer = AskMountDaemon(state, "status 1000", 10s);
  ASSERT_TRUE(answer.ok() && answer->has_value()) << answer.status().ToString();
  EXPECT_EQ((*answer)->text, "ok\n");
}

TEST(ControlSocketTest, AnythingButASocketAtThePathIsRefusedAndLeftAlone) {
  testing::TempDir dir;
  const std::string state = dir.path() + "/fs.state";
  { std::ofstream(state + ".ctl") << "a user's file"; }
  auto server = ControlServer::Start(state, [](const std::string&) {
    return ControlAnswer{0, "ok\n"};
  });
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("is not a socket"), std::string::npos)
      << server.status().ToString();
  std::ifstream in(state + ".ctl");
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "a user's file");
  auto none = AskMountDaemon(state, "status 1000", 10s);
  EXPECT_TRUE(!none.ok() || !none->has_value());
}

TEST(ControlSocketTest, ASymlinkAtThePathIsRefusedAndItsTargetLeftAlone) {
  testing::TempDir dir;
  const std::string state = dir.path() + "/fs.state";
  const std::string target = dir.path() + "/precious";
  { std::ofstream(target) << "keep me"; }
  ASSERT_EQ(::chmod(target.c_str(), 0644), 0);
  ASSERT_EQ(::symlink(target.c_str(), (state + ".ctl").c_str()), 0);
  auto server = ControlServer::Start(state, [](const std::string&) {
    return ControlAnswer{0, "ok\n"};
  });
  ASSERT_FALSE(server.ok());
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u) << "the symlink's target was changed";
  std::ifstream in(target);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "keep me");
}

TEST(ControlSocketTest, AHandlerThatThrowsIsAnAnswerAndTheServerGoesOn) {
  testing::TempDir dir;
  const std::string state = dir.path() + "/fs.state";
  std::atomic<int> calls{0};
  auto server = ControlServer::Start(state, [&](const std::string&) {
    if (++calls == 1) throw std::runtime_error("out of something");
    return ControlAnswer{0, "ok\n"};
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto failed = AskMountDaemon(state, "status 1000", 10s);
  ASSERT_TRUE(failed.ok() && failed->has_value()) << failed.status().ToString();
  EXPECT_EQ((*failed)->exit_code, 2);
  EXPECT_NE((*failed)->text.find("out of something"), std::string::npos) << (*failed)->text;
  auto next = AskMountDaemon(state, "status 1000", 10s);
  ASSERT_TRUE(next.ok() && next->has_value()) << next.status().ToString();
  EXPECT_EQ((*next)->text, "ok\n");
}

TEST(ControlSocketTest, AFullQueueIsAnErrorAtOnceNotAWait) {
  testing::TempDir dir;
  const std::string state = dir.path() + "/fs.state";
  // A "daemon" that listens but never accepts (hung), its queue already
  // holding one connection.
  const int fd = BindAt(state + ".ctl");
  ASSERT_EQ(::listen(fd, 0), 0);
  const int queued = ConnectTo(state + ".ctl");
  auto answer = AskMountDaemon(state, "status 1000", 20s);
  ::close(queued);
  ::close(fd);
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), Status::Code::kUnavailable) << answer.status().ToString();
  EXPECT_NE(answer.status().message().find("full queue"), std::string::npos)
      << answer.status().ToString();
}

TEST(ControlSocketTest, APathLongerThanSunPathWorks) {
  testing::TempDir dir;
  std::string deep = dir.path();
  while (deep.size() < 2 * sizeof(sockaddr_un{}.sun_path)) {
    deep += "/a-directory-name-of-some-length";
    ASSERT_EQ(::mkdir(deep.c_str(), 0700), 0) << std::strerror(errno);
  }
  const std::string state = deep + "/fs.state";
  auto server = ControlServer::Start(state, [](const std::string&) {
    return ControlAnswer{0, "deep\n"};
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_TRUE(IsSocket(state + ".ctl"));
  auto answer = AskMountDaemon(state, "status 1000", 10s);
  ASSERT_TRUE(answer.ok() && answer->has_value()) << answer.status().ToString();
  EXPECT_EQ((*answer)->text, "deep\n");
  server->reset();
  EXPECT_FALSE(IsSocket(state + ".ctl"));
}

TEST(ControlSocketTest, ASilentOrFloodingPeerDoesNotKeepTheNextWaiting) {
  testing::TempDir dir;
  const std::string state = dir.path() + "/fs.state";
  std::atomic<int> calls{0};
  auto server = ControlServer::Start(state, [&](const std::string&) {
    ++calls;
    return ControlAnswer{0, "ok\n"};
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  // Connected, never sends: dropped after ControlServer::kRequestDeadline.
  const int silent = ConnectTo(state + ".ctl");
  auto answer = AskMountDaemon(state, "status 1000", 60s);
  ASSERT_TRUE(answer.ok() && answer->has_value()) << answer.status().ToString();
  EXPECT_EQ((*answer)->text, "ok\n");

  // A request line longer than the limit: told so, the handler not called.
  const int flood = ConnectTo(state + ".ctl");
  const std::string big(4 * ControlServer::kMaxRequestBytes, 'x');
  ASSERT_EQ(::send(flood, big.data(), big.size(), MSG_NOSIGNAL), static_cast<ssize_t>(big.size()));
  std::string reply;
  char buf[256];
  for (ssize_t n; (n = ::recv(flood, buf, sizeof buf, 0)) > 0;) reply.append(buf, std::size_t(n));
  EXPECT_EQ(reply.rfind("exit 2\n", 0), 0u) << reply;
  ::close(flood);
  ::close(silent);
  EXPECT_EQ(calls.load(), 1);
}

TEST(ControlSocketTest, AnAnswerThatIsNotTheProtocolsIsAnError) {
  testing::TempDir dir;
  const std::string state = dir.path() + "/fs.state";
  const int fd = BindAt(state + ".ctl");
  ASSERT_EQ(::listen(fd, 1), 0);
  std::thread impostor([fd] {
    const int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) return;
    char buf[256];
    (void)::recv(c, buf, sizeof buf, 0);
    const std::string junk = "hello, this is not an exit line\n";
    (void)::send(c, junk.data(), junk.size(), MSG_NOSIGNAL);
    ::close(c);
  });
  auto answer = AskMountDaemon(state, "status 1000", 10s);
  impostor.join();
  ::close(fd);
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), Status::Code::kCorruption) << answer.status().ToString();
}

}  // namespace
}  // namespace s3oram::fs
