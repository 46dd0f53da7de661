#include "oramcore/wire/server_set.h"

#include <optional>
#include <string_view>
#include <utility>
#include <variant>

namespace s3oram {

Result<std::vector<wire::Message>> ServerSet::Exchange(
    const std::vector<std::vector<std::uint8_t>>& frames, const wire::Header& header,
    wire::MessageType expected_reply, const TransportOptions& options) {
  std::vector<std::size_t> all(size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  return ExchangeWith(all, frames, header, expected_reply, options);
}

Result<std::vector<wire::Message>> ServerSet::ExchangeWith(
    const std::vector<std::size_t>& servers, const std::vector<std::vector<std::uint8_t>>& frames,
    const wire::Header& header, wire::MessageType expected_reply, const TransportOptions& options) {
  if (frames.size() != servers.size())
    return Status::InvalidArgument("one frame per server expected");
  const std::vector<RequestView> one{RequestView{header, expected_reply, &frames}};
  return std::move(ExchangeViews(servers, one, options)[0]);
}

std::vector<Result<std::vector<wire::Message>>> ServerSet::ExchangeSequence(
    const std::vector<std::size_t>& servers, const std::vector<Outgoing>& requests,
    const TransportOptions& options) {
  std::vector<RequestView> views;
  views.reserve(requests.size());
  for (const Outgoing& o : requests) views.push_back({o.header, o.expected_reply, &o.frames});
  return ExchangeViews(servers, views, options);
}

namespace {
constexpr std::string_view kSilencePrefix = "timeout: ";
}  // namespace

Status SilenceStatus(const std::string& who, std::chrono::milliseconds deadline,
                     wire::MessageType expected_reply, const std::string& detail) {
  return Status::Unavailable(std::string(kSilencePrefix) + who + " did not answer within " +
                             std::to_string(deadline.count()) + " ms (no " +
                             wire::MessageTypeName(expected_reply) +
                             "); the server is down, hung or unreachable" + detail);
}

bool IsSilence(const Status& st) {
  // Anywhere in the message: callers add their context in front.
  return st.code() == Status::Code::kUnavailable &&
         st.message().find(kSilencePrefix) != std::string::npos;
}

Result<std::vector<wire::Message>> ServerSet::ResultOfReplies(
    const std::vector<std::size_t>& servers, std::vector<wire::Message> replies) const {
  // The first error by server order, except that a server reporting damaged
  // storage wins: it is the cause, and the others' errors are often its
  // consequence (peers time out waiting for the SMP shares of a server that
  // refused an eviction), which a caller would otherwise retry.
  std::optional<std::size_t> first_error;
  for (std::size_t k = 0; k < replies.size(); ++k) {
    const auto* err = std::get_if<wire::ErrorReply>(&replies[k].body);
    if (err == nullptr) continue;
    if (!first_error) first_error = k;
    if (err->code == static_cast<std::uint32_t>(Status::Code::kDamaged)) {
      first_error = k;
      break;
    }
  }
  if (!first_error) return replies;
  const std::size_t k = *first_error;
  return wire::StatusFromError(std::get<wire::ErrorReply>(replies[k].body))
      .WithContext("server " + std::to_string(servers[k]) + " (" + endpoint(servers[k]) + ")");
}

}  // namespace s3oram
