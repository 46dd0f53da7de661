// A server's share file read the way someone with its disk would: the
// buckets' elements, bucket-major from bucket 1, wherever each lies in the
// file (serverd/share_store.h: buckets move between places as evictions
// commit). For tests that compare what crossed a link with the shares at
// rest.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "oramcore/math/field.h"
#include "serverd/store_inspection.h"
#include "tests/support/file_bytes.h"

namespace s3oram::testing {

inline std::vector<field::Elem> ShareFileElems(const std::string& path) {
  constexpr std::size_t kHeaderRegion = 4096;  // share_store_format.h
  const std::string file = ReadAll(path);
  if (file.size() < kHeaderRegion) {
    ADD_FAILURE() << path << " is not a share file";
    return {};
  }
  auto at = serverd::StoreInspection::InspectFile(path);
  EXPECT_TRUE(at.ok()) << at.status().ToString();
  if (!at.ok()) return {};
  // The data region's size, from the shape in the header
  // (share_store_format.h: height at 44, Z at 48, m at 52).
  std::uint32_t shape[3];
  std::memcpy(shape, file.data() + 44, sizeof shape);
  const std::size_t buckets = at->size() - 1;
  const std::size_t bucket_bytes = std::size_t{shape[1]} * shape[2] * sizeof(field::Elem);
  EXPECT_EQ(buckets, (std::size_t{1} << (shape[0] + 1)) - 1);
  std::vector<field::Elem> out(buckets * bucket_bytes / sizeof(field::Elem));
  for (std::size_t b = 1; b <= buckets; ++b) {
    EXPECT_LE((*at)[b].data + bucket_bytes, file.size());
    if ((*at)[b].data + bucket_bytes > file.size()) return {};
    std::memcpy(reinterpret_cast<std::uint8_t*>(out.data()) + (b - 1) * bucket_bytes,
                file.data() + (*at)[b].data, bucket_bytes);
  }
  return out;
}

}  // namespace s3oram::testing
