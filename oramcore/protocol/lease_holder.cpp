#include "oramcore/protocol/lease_holder.h"

#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <vector>

#include "oramcore/crypto/seal_format.h"

namespace s3oram {

namespace {

std::string FirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "key=value\n" lines; values never contain a newline (replaced by a space).
void Put(std::string& out, const char* key, std::string value) {
  for (auto& c : value) {
    if (c == '\n') c = ' ';
  }
  out += key;
  out += '=';
  out += value;
  out += '\n';
}

}  // namespace

LeaseHolder CurrentLeaseHolder(const std::string& state_path, const std::string& purpose) {
  LeaseHolder h;
  h.machine_id = FirstLine("/etc/machine-id");
  h.boot_id = FirstLine("/proc/sys/kernel/random/boot_id");
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) == 0) h.host = host;
  if (const passwd* pw = ::getpwuid(::getuid())) h.user = pw->pw_name;
  if (h.user.empty()) h.user = "uid " + std::to_string(::getuid());
  h.pid = ::getpid();
  char resolved[PATH_MAX];
  h.state_path = ::realpath(state_path.c_str(), resolved) ? resolved : state_path;
  h.purpose = purpose;
  h.since_unix = static_cast<std::int64_t>(::time(nullptr));
  return h;
}

std::string DescribeHolder(const LeaseHolder& h) {
  std::string out = h.user + "@" + (h.host.empty() ? "?" : h.host) + " pid " +
                    std::to_string(h.pid);
  if (!h.purpose.empty()) out += " (" + h.purpose + ")";
  if (!h.state_path.empty()) out += " with state " + h.state_path;
  if (h.since_unix > 0) {
    std::time_t t = static_cast<std::time_t>(h.since_unix);
    std::tm tm{};
    char buf[40];
    if (::gmtime_r(&t, &tm) && std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm)) {
      out += std::string(", since ") + buf;
    }
  }
  return out;
}

bool HolderIsDeadLocalTwin(const LeaseHolder& h, const std::string& state_path) {
  const LeaseHolder me = CurrentLeaseHolder(state_path, "");
  if (me.machine_id.empty() || h.machine_id != me.machine_id) return false;
  if (h.state_path != me.state_path) return false;
  if (h.boot_id != me.boot_id) return true;  // rebooted since: the holder cannot be running
  if (h.pid <= 0 || h.pid > INT_MAX) return false;
  if (h.pid == me.pid) return false;  // this very process holds it
  return ::kill(static_cast<pid_t>(h.pid), 0) != 0 && errno == ESRCH;
}

std::string SealHolder(const BlockSealer& sealer, std::uint64_t epoch, const LeaseHolder& h) {
  std::string text;
  Put(text, "machine", h.machine_id);
  Put(text, "boot", h.boot_id);
  Put(text, "host", h.host);
  Put(text, "user", h.user);
  Put(text, "pid", std::to_string(h.pid));
  Put(text, "state", h.state_path);
  Put(text, "purpose", h.purpose);
  Put(text, "since", std::to_string(h.since_unix));
  // Bounded so the sealed blob fits the server's limit whatever the paths.
  if (text.size() > 3000) text.resize(3000);
  std::string out(text.size() + kSealOverhead, '\0');
  sealer.Seal(kLeaseHolderSealId, epoch,
              {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()},
              {reinterpret_cast<std::uint8_t*>(out.data()), out.size()});
  return out;
}

std::optional<LeaseHolder> OpenHolder(const BlockSealer& sealer, std::uint64_t epoch,
                                      const std::string& sealed) {
  if (sealed.size() < kSealOverhead) return std::nullopt;
  std::string text(sealed.size() - kSealOverhead, '\0');
  if (!sealer.Open(kLeaseHolderSealId, epoch,
                   {reinterpret_cast<const std::uint8_t*>(sealed.data()), sealed.size()},
                   {reinterpret_cast<std::uint8_t*>(text.data()), text.size()})) {
    return std::nullopt;
  }
  LeaseHolder h;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "machine") h.machine_id = value;
    else if (key == "boot") h.boot_id = value;
    else if (key == "host") h.host = value;
    else if (key == "user") h.user = value;
    else if (key == "pid") h.pid = std::strtoll(value.c_str(), nullptr, 10);
    else if (key == "state") h.state_path = value;
    else if (key == "purpose") h.purpose = value;
    else if (key == "since") h.since_unix = std::strtoll(value.c_str(), nullptr, 10);
  }
  return h;
}

}  // namespace s3oram
