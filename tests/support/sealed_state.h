// Sealed client-state files for tests that work below OramClient: one
// process-wide master key makes and opens them, so a test can reach any
// state file's database by its path, as the product does with the key the
// passphrase unwraps (oramcore/state/state_file.h).
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "oramcore/base/random.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/state/state_file.h"

namespace s3oram::testing {

inline const Secret& TestStateMaster() {
  static const Secret* master = new Secret(NewMasterKey());
  return *master;
}

// The passphrase whose wrap of TestStateMaster() the test states carry.
inline constexpr std::string_view kTestStatePassphrase = "test state passphrase";

// The unlocked state at `path` (which must exist and be sealed under
// TestStateMaster()), one per path for the life of the process, so its VFS
// outlives every connection a test opens and forgets.
inline std::shared_ptr<UnlockedState> TestState(const std::string& path) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, std::shared_ptr<UnlockedState>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(path);
  if (it != cache->end()) return it->second;
  auto u = UnlockedState::UnlockWithMaster(path, Secret::CopyOf(TestStateMaster().bytes()));
  EXPECT_TRUE(u.ok()) << path << ": " << u.status().ToString();
  if (!u.ok()) return nullptr;
  std::shared_ptr<UnlockedState> shared(std::move(*u));
  cache->emplace(path, shared);
  return shared;
}

// An empty sealed state file (no tables) at `path`, which must not exist.
inline std::shared_ptr<UnlockedState> CreateSealedStateFile(const std::string& path) {
  StateHeader h;
  random::Bytes(h.fs_id);
  auto wrap = WrapMasterKey(TestStateMaster(), Secret::CopyOf(kTestStatePassphrase), h.fs_id,
                            MinimalKdfParams());
  EXPECT_TRUE(wrap.ok()) << wrap.status().ToString();
  if (!wrap.ok()) return nullptr;
  h.wrap = *wrap;
  auto u = UnlockedState::Create(path, h, Secret::CopyOf(TestStateMaster().bytes()));
  EXPECT_TRUE(u.ok()) << path << ": " << u.status().ToString();
  if (!u.ok()) return nullptr;
  return TestState(path);
}

// A connection to the database of the test state at `path`, made first if
// the file does not exist; the caller closes it.
inline sqlite3* OpenTestStateDb(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0 && CreateSealedStateFile(path) == nullptr) return nullptr;
  std::shared_ptr<UnlockedState> state = TestState(path);
  if (state == nullptr) return nullptr;
  auto db = state->OpenDatabase();
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? *db : nullptr;
}

}  // namespace s3oram::testing
