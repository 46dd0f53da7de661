#include "serverd/rebuild_terms_inbox.h"

#include <utility>

namespace s3oram::serverd {

void RebuildTermsInbox::Put(wire::RebuildTerms&& m) {
  const Key key{m.nonce, m.first_bucket, m.from_index};
  if (!entries_.count(key)) {
    for (;;) {
      std::size_t from_sender = 0;
      auto oldest = entries_.end();
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (std::get<2>(it->first) != m.from_index) continue;
        ++from_sender;
        if (oldest == entries_.end() || it->second.order < oldest->second.order) oldest = it;
      }
      if (from_sender < kPerSender) break;
      entries_.erase(oldest);
    }
  }
  entries_[key] = Entry{++arrivals_, std::move(m.holes), std::move(m.terms)};
}

bool RebuildTermsInbox::Has(const Key& key, const std::vector<std::uint8_t>& holes) const {
  const auto it = entries_.find(key);
  return it != entries_.end() && it->second.holes == holes;
}

std::optional<std::vector<field::Elem>> RebuildTermsInbox::Take(
    const Key& key, const std::vector<std::uint8_t>& holes) {
  const auto it = entries_.find(key);
  if (it == entries_.end() || it->second.holes != holes) return std::nullopt;
  std::vector<field::Elem> terms = std::move(it->second.terms);
  entries_.erase(it);
  return terms;
}

}  // namespace s3oram::serverd
