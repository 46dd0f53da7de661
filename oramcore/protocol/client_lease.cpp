// OramClient's single-writer lease (client.h, class comment): acquired on
// every server at Open, renewed, released at Close; a client told another
// holds it is fenced.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "oramcore/math/field.h"
#include "oramcore/protocol/client.h"
#include "oramcore/protocol/client_internal.h"
#include "oramcore/protocol/lease_holder.h"

namespace s3oram {

using field::Elem;
using namespace client_internal;

Status OramClient::SendLease(std::size_t server, const wire::Body& body, wire::LeaseReply* reply) {
  wire::Header h = NextHeader();
  auto frame = wire::Encode(h, body);
  S3ORAM_ASSIGN_OR_RETURN(
      auto replies, servers_->ExchangeWith({server}, {frame}, h, wire::MessageType::kLeaseReply,
                                           options_.requests));
  if (reply) *reply = std::get<wire::LeaseReply>(replies[0].body);
  return Status::Ok();
}

namespace {

std::string Ago(std::uint64_t ms) {
  const std::uint64_t s = ms / 1000;
  if (s < 120) return std::to_string(s) + " s";
  if (s < 7200) return std::to_string(s / 60) + " min";
  return std::to_string(s / 3600) + " h";
}

}  // namespace

Status OramClient::AcquireLease(const std::string& state_path) {
  const LeaseHolder me = CurrentLeaseHolder(state_path, options_.lease_purpose);
  const std::string sealed = SealHolder(*sealer_, counters_.epoch, me);
  const bool force = options_.force_lease;
  std::vector<std::size_t> granted;
  std::vector<std::pair<std::size_t, wire::LeaseReply>> refusals;
  auto give_back = [&] {
    // A failed open leaves nothing held.
    for (std::size_t i : granted) (void)SendLease(i, wire::LeaseReleaseRequest{}, nullptr);
  };
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    wire::LeaseReply r;
    if (Status failure = SendLease(i, wire::LeaseAcquireRequest{force, sealed}, &r);
        !failure.ok()) {
      give_back();
      return failure.WithContext("acquiring the filesystem's lease");
    }
    if (r.granted) {
      granted.push_back(i);
    } else {
      refusals.emplace_back(i, std::move(r));
    }
  }
  // A crashed process of this very state file may have left the lease held
  // on some servers (all, or only those it could not release it on: a
  // server that was down at its unmount). Its epoch is the one this state
  // had when it was opened (that process made it durable here before
  // acquiring). Only such records are taken over without --force, each on
  // the server that holds it: a refusal naming anyone else, or an older
  // record a server replays, stands, so no server's word displaces a live
  // client.
  std::optional<LeaseHolder> first_other;
  std::size_t first_other_server = 0;
  const wire::LeaseReply* first_other_reply = nullptr;
  std::vector<std::size_t> dead_twin;
  for (const auto& [i, r] : refusals) {
    const auto holder = OpenHolder(*sealer_, r.holder_epoch, r.holder);
    if (!force && holder && r.holder_epoch == opened_epoch_ &&
        HolderIsDeadLocalTwin(*holder, state_path)) {
      dead_twin.push_back(i);
      continue;
    }
    if (first_other_reply == nullptr) {
      first_other = holder;
      first_other_server = i;
      first_other_reply = &r;
    }
  }
  if (first_other_reply == nullptr && !dead_twin.empty()) {
    const auto& r = refusals.front().second;
    spdlog::warn(
        "taking over the lease of a crashed client of this state file on this machine "
        "({} of {} servers held it): {}",
        dead_twin.size(), servers_->size(),
        DescribeHolder(*OpenHolder(*sealer_, r.holder_epoch, r.holder)));
    for (std::size_t i : dead_twin) {
      wire::LeaseReply r2;
      Status st = SendLease(i, wire::LeaseAcquireRequest{true, sealed}, &r2);
      if (st.ok() && !r2.granted)
        st = Status::LeaseHeld("server " + std::to_string(i) + " refused the takeover");
      if (!st.ok()) {
        give_back();
        return st.WithContext("taking over the lease of a crashed client");
      }
      granted.push_back(i);
    }
    refusals.clear();
  }
  if (refusals.empty()) {
    lease_held_ = true;
    lease_sealed_ = sealed;
    if (force) spdlog::warn("took the filesystem's lease over as epoch {}", counters_.epoch);
    spdlog::info("lease acquired on all servers as epoch {}", counters_.epoch);
    return Status::Ok();
  }
  give_back();
  const wire::LeaseReply& refusal = *first_other_reply;
  const std::string who = first_other
                              ? DescribeHolder(*first_other)
                              : "a client with epoch " + std::to_string(refusal.holder_epoch) +
                                    " whose description does not authenticate with this key";
  return Status::LeaseHeld(
      "the filesystem is in use by " + who + " (server " + std::to_string(first_other_server) +
      ": lease held for " + Ago(refusal.held_ms) + ", holder last active " + Ago(refusal.idle_ms) +
      " ago). Only one client may write it. If that client is gone for good, take the lease "
      "over with --force: it is then fenced off and can change nothing");
}

Result<wire::LeaseReply> OramClient::QueryLease(std::size_t server) {
  wire::LeaseReply r;
  S3ORAM_RETURN_IF_ERROR(SendLease(server, wire::LeaseQueryRequest{}, &r));
  return r;
}

Status OramClient::RenewLease() {
  if (fenced_) return Status::LeaseHeld("this client was fenced off");
  if (!lease_held_) return Status::FailedPrecondition("this client holds no lease");
  // Same epoch and (re-sealed) description: servers just note the contact.
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    wire::LeaseReply r;
    S3ORAM_RETURN_IF_ERROR(SendLease(i, wire::LeaseAcquireRequest{false, lease_sealed_}, &r)
                               .WithContext("renewing the lease"));
    if (!r.granted) {
      return NoteFencing(
          Status::LeaseHeld("server " + std::to_string(i) + " says another client (epoch " +
                            std::to_string(r.holder_epoch) + ") took the lease over"));
    }
  }
  return Status::Ok();
}

void OramClient::ReleaseLease() {
  const auto saved = options_.requests;
  options_.requests.deadline =
      std::min(options_.requests.deadline, std::chrono::milliseconds(3000));
  options_.requests.resend_after =
      std::min(options_.requests.resend_after, options_.requests.deadline);
  for (std::size_t i = 0; i < servers_->size(); ++i) {
    if (Status st = SendLease(i, wire::LeaseReleaseRequest{}, nullptr); !st.ok()) {
      spdlog::warn("releasing the lease on server {}: {}", i, st.ToString());
    }
  }
  options_.requests = saved;
  lease_held_ = false;
}

Status OramClient::NoteFencing(Status st) {
  NoteProblem(st);
  if (st.code() == Status::Code::kLeaseHeld && !fenced_) {
    fenced_ = true;
    spdlog::error(
        "fenced off: {}. This client can no longer read or change the filesystem; "
        "nothing it had not committed is applied",
        st.message());
  }
  return st;
}

}  // namespace s3oram
