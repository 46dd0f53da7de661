#include "serverd/smp_inbox.h"

#include <iterator>

namespace s3oram::serverd {

std::size_t SmpInbox::CountFrom(std::uint32_t sender) const {
  std::size_t n = 0;
  for (const auto& [key, v] : entries_) n += std::get<3>(key) == sender;
  return n;
}

void SmpInbox::Put(const Key& key, std::vector<field::Elem> shares, std::uint64_t applied) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = std::get<0>(it->first) < applied ? entries_.erase(it) : std::next(it);
  }
  if (std::get<0>(key) < applied) return;
  const std::uint32_t sender = std::get<3>(key);
  if (!entries_.count(key)) {
    // The sender's oldest (smallest eviction, attempt, round) goes first.
    while (CountFrom(sender) >= kPerSender) {
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (std::get<3>(it->first) == sender) {
          entries_.erase(it);
          break;
        }
      }
    }
  }
  entries_[key] = std::move(shares);
}

std::vector<field::Elem> SmpInbox::Release(const Key& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return {};
  std::vector<field::Elem> v = std::move(it->second);
  entries_.erase(it);
  return v;
}

}  // namespace s3oram::serverd
