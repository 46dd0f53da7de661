// An in-memory BlockEngine for unit tests of the cache and file layers.
// Blocks never written read as 0xEE bytes: the "previous owner's data" a
// reused ORAM block would still hold, so a test fails if such bytes ever
// reach a reader. `fail` makes every access return an error.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <vector>

#include "fused/block_engine.h"

namespace s3oram::testing {

class MemoryBlockEngine final : public fs::BlockEngine {
 public:
  static constexpr std::uint8_t kStale = 0xEE;

  explicit MemoryBlockEngine(std::uint32_t block_bytes, std::uint64_t capacity = 1024)
      : block_bytes_(block_bytes), capacity_(capacity) {}

  std::uint32_t block_bytes() const override { return block_bytes_; }
  std::uint64_t capacity_blocks() const override { return capacity_; }
  Result<std::vector<std::uint8_t>> Read(std::uint64_t id) override {
    std::lock_guard<std::mutex> l(mu);
    ++reads;
    if (fail) return Status::Unavailable("injected");
    auto it = blocks.find(id);
    if (it == blocks.end()) return std::vector<std::uint8_t>(block_bytes_, kStale);
    return it->second;
  }
  Status Write(std::uint64_t id, std::span<const std::uint8_t> data) override {
    std::lock_guard<std::mutex> l(mu);
    ++writes;
    if (fail) return Status::Unavailable("injected");
    blocks[id].assign(data.begin(), data.end());
    return Status::Ok();
  }
  Result<std::vector<std::uint8_t>> Update(std::uint64_t id, const Modifier& modify) override {
    std::lock_guard<std::mutex> l(mu);
    ++updates;
    if (fail) return Status::Unavailable("injected");
    auto it = blocks.find(id);
    std::vector<std::uint8_t> content =
        it == blocks.end() ? std::vector<std::uint8_t>(block_bytes_, kStale) : it->second;
    modify(content);
    blocks[id] = content;
    return content;
  }
  Status Sync() override {
    std::lock_guard<std::mutex> l(mu);
    ++syncs;
    return fail ? Status::Unavailable("injected") : Status::Ok();
  }

  std::mutex mu;
  std::map<std::uint64_t, std::vector<std::uint8_t>> blocks;
  int reads = 0, writes = 0, updates = 0, syncs = 0;
  bool fail = false;

 private:
  std::uint32_t block_bytes_;
  std::uint64_t capacity_;
};

}  // namespace s3oram::testing
