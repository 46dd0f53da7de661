// StoreInspection: a ShareStore's (share_store.h) share file seen as a file:
// its size, how much of it is allocated, and where each bucket, its slot
// digests and the shadow lie in it. For STATUS, the logs, and the tools and
// tests that inspect or damage the file.
//
// Guarantees: read-only; InspectFile reads a share file without opening a
// store (no lock, no upgrade).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oramcore/base/status.h"
#include "serverd/store_view.h"

namespace s3oram::serverd {

class StoreInspection : public StoreView {
 public:
  // The share file's size, and the bytes allocated to it (st_blocks * 512):
  // less while buckets are never-written holes.
  std::uint64_t file_bytes() const;
  std::uint64_t allocated_bytes() const;

  // Where bucket b's data and its Z slot digests start in shares.bin, and
  // where those of each bucket of the shadow being written or sealed do
  // (empty if none): for tools and tests that inspect or damage the file.
  struct FileRange {
    std::uint64_t data = 0;
    std::uint64_t digests = 0;
  };
  FileRange BucketInFile(std::uint64_t b) const;
  std::vector<FileRange> ShadowInFile() const;
  // The same for every bucket (index b = 1..N; entry 0 unused) of the share
  // file at `shares_path`, read from its header and bucket map without
  // opening the store: no lock is taken and nothing is upgraded or checked
  // beyond what reading the map needs. For tests and forensic tools; a store
  // that changes meanwhile may be read half old, half new.
  // `places`, if given, receives every bucket place of the file, live or
  // free (a free one holds whatever bucket last lay there).
  static Result<std::vector<FileRange>> InspectFile(const std::string& shares_path,
                                                    std::vector<FileRange>* places = nullptr);

 private:
  friend class ShareStore;
  explicit StoreInspection(ShareStore& store) : StoreView(store) {}
};

}  // namespace s3oram::serverd
