#include "oramcore/protocol/eviction_record.h"

#include <string>

namespace s3oram {

namespace {

constexpr std::uint8_t kBackgroundFormat = 2;

void Put(std::vector<std::uint8_t>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

struct Reader {
  const std::vector<std::uint8_t>& p;
  std::size_t at = 0;
  bool ok = true;
  std::uint64_t Get(int bytes) {
    if (!ok || p.size() - at < static_cast<std::size_t>(bytes)) {
      ok = false;
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{p[at++]} << (8 * i);
    return v;
  }
};

Status Bad(const std::string& what) {
  return Status::Corruption("pending eviction record: " + what);
}

}  // namespace

std::vector<std::uint8_t> EncodeEvictionRecord(const EvictionRecord& r) {
  std::vector<std::uint8_t> out;
  Put(out, r.eviction, 8);
  Put(out, r.attempt, 4);
  if (!r.plan) return out;
  const EvictionPlan& plan = *r.plan;
  Put(out, kBackgroundFormat, 1);
  Put(out, plan.leaf, 8);
  Put(out, plan.steps.size(), 4);
  for (const EvictionStep& s : plan.steps) {
    Put(out, s.source, 8);
    Put(out, s.target, 8);
    Put(out, s.rows.size(), 4);
    for (std::int32_t row : s.rows) Put(out, static_cast<std::uint32_t>(row), 4);
  }
  Put(out, plan.moves.size(), 4);
  for (const auto& [id, pos] : plan.moves) {
    const auto it = r.before.find(id);
    const Position was = it == r.before.end() ? Position{} : it->second;
    Put(out, id, 8);
    Put(out, pos.leaf, 8);
    Put(out, pos.level, 4);
    Put(out, pos.slot, 4);
    Put(out, was.level, 4);
    Put(out, was.slot, 4);
  }
  return out;
}

Result<EvictionRecord> DecodeEvictionRecord(const std::vector<std::uint8_t>& bytes,
                                            const TreeGeometry& geo, std::uint64_t capacity) {
  Reader in{bytes};
  EvictionRecord r;
  r.eviction = in.Get(8);
  r.attempt = static_cast<std::uint32_t>(in.Get(4));
  if (!in.ok) return Bad("it has " + std::to_string(bytes.size()) + " bytes");
  if (in.at == bytes.size()) return r;  // format 1
  if (in.Get(1) != kBackgroundFormat) return Bad("unknown format");
  const std::uint32_t Z = geo.bucket_size;
  EvictionPlan plan;
  plan.eviction = r.eviction;
  plan.leaf = in.Get(8);
  if (!in.ok || plan.leaf != geo.EvictionLeaf(r.eviction)) {
    return Bad("its path is not that of eviction " + std::to_string(r.eviction));
  }
  const std::uint64_t steps = in.Get(4);
  if (!in.ok || steps != std::uint64_t{geo.height} + 1) return Bad("wrong number of steps");
  for (std::uint64_t k = 0; k < steps; ++k) {
    EvictionStep s;
    s.source = in.Get(8);
    s.target = in.Get(8);
    const std::uint64_t rows = in.Get(4);
    if (!in.ok || rows != Z || s.source < 1 || s.source > geo.num_buckets() || s.target < 1 ||
        s.target > geo.num_buckets()) {
      return Bad("step " + std::to_string(k) + " is out of range");
    }
    s.rows.resize(Z);
    for (std::int32_t& row : s.rows) {
      row = static_cast<std::int32_t>(static_cast<std::uint32_t>(in.Get(4)));
      if (row < -1 || row >= static_cast<std::int64_t>(2) * Z) {
        return Bad("step " + std::to_string(k) + " has a row out of range");
      }
    }
    plan.steps.push_back(std::move(s));
  }
  const std::uint64_t moves = in.Get(4);
  if (!in.ok || moves > capacity) return Bad("too many moves");
  plan.moves.reserve(moves);
  for (std::uint64_t i = 0; i < moves; ++i) {
    const BlockId id = in.Get(8);
    Position pos;
    pos.leaf = in.Get(8);
    pos.level = static_cast<std::uint32_t>(in.Get(4));
    pos.slot = static_cast<std::uint32_t>(in.Get(4));
    Position was{pos.leaf, static_cast<std::uint32_t>(in.Get(4)),
                 static_cast<std::uint32_t>(in.Get(4))};
    if (!in.ok || id >= capacity || !geo.is_leaf(pos.leaf) || pos.level > geo.height ||
        pos.slot >= Z || was.level > geo.height || was.slot >= Z) {
      return Bad("move " + std::to_string(i) + " is out of range");
    }
    if (!r.before.emplace(id, was).second) return Bad("block " + std::to_string(id) + " moves twice");
    plan.moves.emplace_back(id, pos);
  }
  if (in.at != bytes.size()) return Bad("trailing bytes");
  r.plan = std::move(plan);
  return r;
}

}  // namespace s3oram
