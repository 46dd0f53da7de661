// libFuzzer harness: the client-state loader (oramcore/state/client_state.h:
// ClientStateStore::Open, LoadPositionMap, LoadPending) on damaged and hostile
// state files.
//
// Random bytes are almost never an SQLite database, so the harness builds one
// valid state file per process (ClientStateStore::Create with a small FsConfig,
// then a batch with counters, four placed blocks and a pending eviction) and
// lets each input mutate a copy of it: the input is a script of SQL-level
// changes (rows and values of any type written into any column of any table,
// PRAGMAs, schema changes) and raw byte pokes, in the format of
// fuzz/state_mutation.h. CHECK constraints are off while the script runs.
//
// The state is sealed (oramcore/state/state_file.h): the script's SQL goes through
// the template's own key, and byte pokes land on sealed pages or the clear
// header, where they must be refused as Corruption.
// Feeds: the mutated copy to UnlockedState::UnlockWithMaster and
// ClientStateStore::Open, then (if it opens) LoadPending and LoadPositionMap.
// Asserts (abort on violation):
//   * Open returns a store or a Corruption error, and a refused file is left
//     byte-identical (client_state.h: "file untouched");
//   * an opened store's parameters pass the checks Open promises to apply
//     (1 <= H <= 62, Z >= 1, A >= 1, N <= A * 2^(H-1));
//   * LoadPending and LoadPositionMap return data or a Corruption error, and a
//     loaded position map passes PositionMap::CheckInvariants with at most N
//     live blocks.
// ASan/UBSan catch out-of-bounds accesses and undefined behaviour throughout.
//
// Not fed to LoadPositionMap: stores whose capacity N exceeds kMaxLoadedCapacity.
// Open refuses N > 2^32 and Z > 2^16 (what no valid filesystem has; the former
// known issues huge-capacity and huge-bucket-size are now regressions), but a
// valid N up to 2^32 still makes PositionMap allocate 24 bytes per block up
// front: gigabytes, by design, for a store that large. The guard keeps such
// (legitimate, just big) inputs out of the bounded run;
// S3ORAM_FUZZ_NO_MEMORY_GUARD=1 lifts it.
#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/state_mutation.h"
#include "oramcore/base/status.h"
#include "oramcore/crypto/key_wrap.h"
#include "oramcore/state/client_state.h"
#include "oramcore/tree/params.h"
#include "oramcore/tree/position_map.h"

namespace {

using s3oram::ClientStateStore;
using s3oram::Status;
namespace fz = s3oram::fuzz;

constexpr std::uint64_t kMaxLoadedCapacity = std::uint64_t{1} << 16;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "client_state_fuzz: %s\n", what.c_str());
  std::abort();
}

std::vector<std::uint8_t> ReadFile(const std::string& path) {
  std::vector<std::uint8_t> out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  std::uint8_t buf[65536];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

void WriteFile(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    Fail("cannot write " + path);
  }
  std::fclose(f);
}

struct Env {
  std::filesystem::path base;
  std::string work;  // the state file each input mutates
  std::vector<std::uint8_t> template_bytes;
  s3oram::Secret master;  // the template's: SQL mutations go through its sealed VFS
};

Env* g_env = nullptr;

void RemoveTempDir() {
  if (g_env != nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(g_env->base, ec);
  }
}

void RemoveState(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((path + suffix).c_str());
}

// A tmpfs keeps SQLite's syncs cheap; any writable directory works.
std::string TempBase() {
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && *t != '\0') return t;
  if (::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return "/tmp";
}

// The valid state every input starts from.
void BuildTemplate(Env& env) {
  s3oram::FsConfig cfg;
  for (std::size_t i = 0; i < cfg.fs_id.size(); ++i) cfg.fs_id[i] = static_cast<std::uint8_t>(0xa0 + i);
  cfg.params.height = 3;
  cfg.params.bucket_size = 4;
  cfg.params.evict_rate = 2;
  cfg.params.block_bytes = 64;
  cfg.params.capacity_blocks = 8;
  cfg.params.parties = 3;
  cfg.params.threshold = 1;
  cfg.servers = {"tcp://127.0.0.1:7300", "tcp://127.0.0.1:7301", "tcp://127.0.0.1:7302"};
  cfg.server_keys = {"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"};
  cfg.client_key_file = "/nonexistent/client.key";
  s3oram::Secret master = s3oram::NewMasterKey();
  env.master = s3oram::Secret::CopyOf(master.bytes());
  auto wrap = s3oram::WrapMasterKey(master, s3oram::Secret::CopyOf(std::string_view("fuzz")),
                                    cfg.fs_id, s3oram::MinimalKdfParams());
  if (!wrap.ok()) Fail("wrapping the template's key: " + wrap.status().ToString());
  cfg.key_wrap = *wrap;
  const std::string path = (env.base / "template.db").string();
  {
    auto store = ClientStateStore::Create(path, cfg, std::move(master));
    if (!store.ok()) Fail("creating the template: " + store.status().ToString());
    ClientStateStore::Batch b;
    b.SetCounters({1, 2, 5, 3});
    b.PutPosition(0, {{8, 0, 0}, 7});   // root
    b.PutPosition(1, {{9, 3, 1}, 1});   // a leaf
    b.PutPosition(2, {{12, 1, 2}, 2});  // level 1
    b.PutPosition(3, {{15, 2, 3}, 9});  // level 2
    b.AddPending({2, "evict", {0x01, 0x02, 0x03}});
    if (Status s = (*store)->Commit(b, /*durable=*/false); !s.ok()) {
      Fail("filling the template: " + s.ToString());
    }
  }
  // Closing the last connection checkpoints the WAL into the file.
  struct stat st {};
  if (::stat((path + "-wal").c_str(), &st) == 0 && st.st_size > 0) {
    Fail("the template's WAL was not checkpointed on close");
  }
  env.template_bytes = ReadFile(path);
  if (env.template_bytes.empty()) Fail("the template is empty");
  RemoveState(path);
}

Env& Setup() {
  if (g_env != nullptr) return *g_env;
  std::string templ = TempBase() + "/s3oram-state-fuzz-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) Fail("mkdtemp " + templ + " failed");
  g_env = new Env();
  g_env->base = templ;
  g_env->work = (g_env->base / "state.db").string();
  std::atexit(RemoveTempDir);
  BuildTemplate(*g_env);
  return *g_env;
}

// Sequential little-endian reader; zeros past the end.
class Script {
 public:
  Script(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  std::uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint64_t Le(int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{U8()} << (8 * i);
    return v;
  }
  std::vector<std::uint8_t> Bytes(std::size_t n) {
    std::vector<std::uint8_t> out;
    for (std::size_t i = 0; i < n && pos_ < size_; ++i) out.push_back(data_[pos_++]);
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// Reads one value (state_mutation.h) and binds it to parameter i.
void BindValue(Script& in, sqlite3_stmt* st, int i) {
  switch (in.U8() % fz::kValueTypeCount) {
    case fz::kSmallInt:
      sqlite3_bind_int64(st, i, static_cast<std::int8_t>(in.U8()));
      break;
    case fz::kInt64:
      sqlite3_bind_int64(st, i, std::bit_cast<std::int64_t>(in.Le(8)));
      break;
    case fz::kReal:
      sqlite3_bind_double(st, i, std::bit_cast<double>(in.Le(8)));
      break;
    case fz::kText: {
      auto b = in.Bytes(in.U8());
      sqlite3_bind_text(st, i, reinterpret_cast<const char*>(b.data()), static_cast<int>(b.size()),
                        SQLITE_TRANSIENT);
      break;
    }
    case fz::kBlob: {
      auto b = in.Bytes(in.U8());
      sqlite3_bind_blob(st, i, b.data(), static_cast<int>(b.size()), SQLITE_TRANSIENT);
      break;
    }
    default:
      sqlite3_bind_null(st, i);
  }
}

// Reads one row key and binds it to parameter i.
void BindKey(Script& in, sqlite3_stmt* st, int i, std::size_t table) {
  if (table == fz::kMetaTable) {
    sqlite3_bind_text(st, i, fz::kMetaKeys[in.U8() % fz::kMetaKeyCount], -1, SQLITE_STATIC);
  } else {
    BindValue(in, st, i);
  }
}

// Prepares sql, lets `bind` read its parameters from the script, runs it.
// Failures (constraints, a dropped table) are part of the game and ignored.
template <class Bind>
void Run(sqlite3* db, const std::string& sql, Bind bind) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    // Still consume the operands so the rest of the script keeps its meaning.
    sqlite3_prepare_v2(db, "SELECT ?1, ?2, ?3, ?4, ?5, ?6", -1, &st, nullptr);
  }
  bind(st);
  while (sqlite3_step(st) == SQLITE_ROW) {
  }
  sqlite3_finalize(st);
}

struct Poke {
  std::uint16_t offset;
  std::uint8_t byte;
};

// Applies the script's SQL changes; returns its byte pokes.
std::vector<Poke> ApplyScript(sqlite3* db, Script& in) {
  std::vector<Poke> pokes;
  for (std::size_t n = 0; n < fz::kMaxOps && !in.done(); ++n) {
    const std::uint8_t op = in.U8() % fz::kOpCount;
    if (op == fz::kPoke) {
      const auto offset = static_cast<std::uint16_t>(in.Le(2));
      pokes.push_back({offset, in.U8()});
      continue;
    }
    if (op == fz::kPragma) {
      const char* which = in.U8() % 2 ? "application_id" : "user_version";
      const auto v = static_cast<std::int32_t>(static_cast<std::uint32_t>(in.Le(4)));
      sqlite3_exec(db, ("PRAGMA " + std::string(which) + " = " + std::to_string(v)).c_str(),
                   nullptr, nullptr, nullptr);
      continue;
    }
    if (op == fz::kMeta) {
      Run(db, "UPDATE meta SET value = ?1 WHERE key = ?2", [&](sqlite3_stmt* st) {
        const char* key = fz::kMetaKeys[in.U8() % fz::kMetaKeyCount];
        BindValue(in, st, 1);
        sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
      });
      continue;
    }
    if (op == fz::kSchema) {
      const std::uint8_t which = in.U8() % fz::kSchemaChangeCount;
      const std::string t = fz::kStateTables[in.U8() % fz::kStateTableCount].name;
      std::string sql;
      switch (which) {
        case fz::kDrop: sql = "DROP TABLE " + t; break;
        case fz::kRename: sql = "ALTER TABLE " + t + " RENAME TO " + t + "_old"; break;
        case fz::kAddColumn: sql = "ALTER TABLE " + t + " ADD COLUMN extra"; break;
        default: sql = "DROP TABLE " + t + "; CREATE TABLE " + t + "(x)"; break;
      }
      sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
      continue;
    }
    const std::size_t ti = in.U8() % fz::kStateTableCount;
    const fz::StateTable& t = fz::kStateTables[ti];
    const std::string name = t.name;
    switch (op) {
      case fz::kUpdateRow: {
        const std::string col = t.columns[in.U8() % t.column_count];
        Run(db, "UPDATE " + name + " SET " + col + " = ?2 WHERE " + t.key + " = ?1",
            [&](sqlite3_stmt* st) {
              BindKey(in, st, 1, ti);
              BindValue(in, st, 2);
            });
        break;
      }
      case fz::kUpdateAll: {
        const std::string col = t.columns[in.U8() % t.column_count];
        Run(db, "UPDATE " + name + " SET " + col + " = ?1",
            [&](sqlite3_stmt* st) { BindValue(in, st, 1); });
        break;
      }
      case fz::kInsert: {
        std::string cols, params;
        for (std::size_t c = 0; c < t.column_count; ++c) {
          cols += (c ? ", " : "") + std::string(t.columns[c]);
          params += (c ? ", ?" : "?") + std::to_string(c + 1);
        }
        Run(db, "INSERT OR REPLACE INTO " + name + "(" + cols + ") VALUES (" + params + ")",
            [&](sqlite3_stmt* st) {
              for (std::size_t c = 0; c < t.column_count; ++c) {
                BindValue(in, st, static_cast<int>(c + 1));
              }
            });
        break;
      }
      default:  // kDelete
        Run(db, "DELETE FROM " + name + " WHERE " + t.key + " = ?1",
            [&](sqlite3_stmt* st) { BindKey(in, st, 1, ti); });
        break;
    }
  }
  return pokes;
}

// What Open promises about the parameters of a store it returns.
void CheckParams(const s3oram::OramParams& p) {
  if (p.height < 1 || p.height > 62 || p.bucket_size < 1 || p.evict_rate < 1) {
    Fail("Open accepted parameters out of range: " + p.ToString());
  }
  const unsigned shift = p.height - 1;
  const bool saturates = static_cast<unsigned>(std::bit_width(p.evict_rate)) + shift > 64;
  if (!saturates && p.capacity_blocks > (std::uint64_t{p.evict_rate} << shift)) {
    Fail("Open accepted a capacity above A * 2^(H-1): " + p.ToString());
  }
}

void ExpectCorruption(const Status& s, const char* what) {
  if (s.code() != Status::Code::kCorruption) {
    Fail(std::string(what) + " failed with a code other than Corruption: " + s.ToString());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Env& env = Setup();
  RemoveState(env.work);
  WriteFile(env.work, env.template_bytes);

  Script in(data, size);
  auto editor = s3oram::UnlockedState::UnlockWithMaster(
      env.work, s3oram::Secret::CopyOf(env.master.bytes()));
  if (!editor.ok()) Fail("cannot unlock the template copy: " + editor.status().ToString());
  auto opened = (*editor)->OpenDatabase();
  if (!opened.ok()) Fail("cannot open the template copy: " + opened.status().ToString());
  sqlite3* db = *opened;
  sqlite3_exec(db, "PRAGMA ignore_check_constraints = ON; PRAGMA synchronous = OFF", nullptr,
               nullptr, nullptr);
  const std::vector<Poke> pokes = ApplyScript(db, in);
  if (sqlite3_close(db) != SQLITE_OK) Fail("cannot close the mutated copy");
  if (!pokes.empty()) {
    std::vector<std::uint8_t> bytes = ReadFile(env.work);
    for (const Poke& p : pokes) {
      if (!bytes.empty()) bytes[p.offset % bytes.size()] = p.byte;
    }
    WriteFile(env.work, bytes);
  }

  editor->reset();
  const std::vector<std::uint8_t> before = ReadFile(env.work);
  auto unlocked = s3oram::UnlockedState::UnlockWithMaster(
      env.work, s3oram::Secret::CopyOf(env.master.bytes()));
  if (!unlocked.ok()) {
    ExpectCorruption(unlocked.status(), "UnlockWithMaster");
    if (ReadFile(env.work) != before) Fail("UnlockWithMaster refused the file but changed it");
    return 0;
  }
  auto store = ClientStateStore::Open(std::shared_ptr<s3oram::UnlockedState>(std::move(*unlocked)));
  if (!store.ok()) {
    ExpectCorruption(store.status(), "Open");
    if (ReadFile(env.work) != before) Fail("Open refused the file but changed it");
    return 0;
  }
  const s3oram::OramParams& p = (*store)->config().params;
  CheckParams(p);

  auto pending = (*store)->LoadPending();
  if (!pending.ok()) ExpectCorruption(pending.status(), "LoadPending");

  static const bool guard = std::getenv("S3ORAM_FUZZ_NO_MEMORY_GUARD") == nullptr;
  if (!guard || p.capacity_blocks <= kMaxLoadedCapacity) {
    auto map = (*store)->LoadPositionMap();
    if (!map.ok()) {
      ExpectCorruption(map.status(), "LoadPositionMap");
    } else {
      if (Status s = map->CheckInvariants(); !s.ok()) {
        Fail("a loaded position map breaks its invariants: " + s.ToString());
      }
      if (map->live_blocks() > p.capacity_blocks) Fail("more live blocks than capacity");
    }
  }
  return 0;
}
