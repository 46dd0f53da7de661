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

std::vector<Result<std::vector<wire::Message>>> ServerSet::ExchangeViews(
    const std::vector<std::size_t>& servers, const std::vector<RequestView>& requests,
    const TransportOptions& options) {
  std::vector<Answers> answers = ExchangeAnswers(servers, requests, options, Wait::kEvery);
  std::vector<Result<std::vector<wire::Message>>> results;
  results.reserve(answers.size());
  for (Answers& per_server : answers) {
    // Under kEvery every server without a reply holds the request's one
    // failure, so the first by server order is it.
    const Answer* failed = nullptr;
    for (const Answer& a : per_server) {
      if (!a.reply.ok()) {
        failed = &a;
        break;
      }
    }
    if (failed != nullptr) {
      results.emplace_back(failed->reply.status());
      continue;
    }
    std::vector<wire::Message> replies;
    replies.reserve(per_server.size());
    for (Answer& a : per_server) replies.push_back(std::move(a.reply).value());
    results.push_back(ResultOfReplies(servers, std::move(replies)));
  }
  return results;
}

Result<wire::Message> ServerSet::ReplyOrError(std::size_t server, Answer answer) const {
  if (!answer.reply.ok()) return answer.reply.status();
  const auto* err = std::get_if<wire::ErrorReply>(&answer.reply.value().body);
  if (err == nullptr) return std::move(answer.reply);
  Status st = wire::StatusFromError(*err).WithContext("server " + std::to_string(server) + " (" +
                                                      endpoint(server) + ")");
  NoteDamage(server, st);
  return st;
}

void ServerSet::NoteDamage(std::size_t server, const Status& st) const {
  if (st.code() != Status::Code::kDamaged) return;
  std::lock_guard<std::mutex> lock(damage_mu_);
  for (const DamageReport& d : damage_reports_) {
    if (d.server == server) return;
  }
  damage_reports_.push_back(DamageReport{server, st.message()});
}

std::vector<ServerSet::DamageReport> ServerSet::TakeDamageReports() {
  std::lock_guard<std::mutex> lock(damage_mu_);
  return std::exchange(damage_reports_, {});
}

namespace {
constexpr std::string_view kSilencePrefix = "timeout: ";
constexpr std::string_view kDownPrefix = "down: ";
}  // namespace

Status SilenceStatus(const std::string& who, std::chrono::milliseconds deadline,
                     wire::MessageType expected_reply, const std::string& detail) {
  return Status::Unavailable(std::string(kSilencePrefix) + who + " did not answer within " +
                             std::to_string(deadline.count()) + " ms (no " +
                             wire::MessageTypeName(expected_reply) +
                             "); the server is down, hung or unreachable" + detail);
}

Status DownStatus(std::size_t server, const std::string& endpoint, const ServerDown& down) {
  return Status::Unavailable(
      std::string(kDownPrefix) + "server " + std::to_string(server) + " (" + endpoint +
      ") is down " + DescribeDown(down) +
      "; start it, or restore the network between this client and it: until it answers, "
      "requests that need it fail at once, and then go on by themselves");
}

Status LaggingStatus(std::size_t server, const std::string& endpoint) {
  return Status::Unavailable("lagging: server " + std::to_string(server) + " (" + endpoint +
                             ") has not answered yet; its answer is collected later");
}

bool IsSilence(const Status& st) {
  // Anywhere in the message: callers add their context in front.
  return st.code() == Status::Code::kUnavailable &&
         (st.message().find(kSilencePrefix) != std::string::npos ||
          st.message().find(kDownPrefix) != std::string::npos);
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
  for (std::size_t j = 0; j < replies.size(); ++j) {
    const auto* err = std::get_if<wire::ErrorReply>(&replies[j].body);
    if (err != nullptr && err->code == static_cast<std::uint32_t>(Status::Code::kDamaged)) {
      NoteDamage(servers[j],
                 wire::StatusFromError(*err).WithContext("server " + std::to_string(servers[j]) +
                                                         " (" + endpoint(servers[j]) + ")"));
    }
  }
  const std::size_t k = *first_error;
  return wire::StatusFromError(std::get<wire::ErrorReply>(replies[k].body))
      .WithContext("server " + std::to_string(servers[k]) + " (" + endpoint(servers[k]) + ")");
}

}  // namespace s3oram
