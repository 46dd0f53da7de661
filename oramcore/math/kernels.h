// The two server-side hot loops, each with a naive reference twin that the
// property tests compare it against on random inputs.
//
// Layout convention (matches the share file): a bucket is Z slots, a slot is m
// consecutive elements ("chunks"), so bucket[s * m + c] is chunk c of slot s.
// Every kernel works on a column range [col_begin, col_end) of chunks so that a
// caller can split one product across threads; rows keep stride m.
// All inputs must be canonical (< p); all outputs are canonical.
#pragma once

#include <cstddef>
#include <span>

#include "oramcore/math/field.h"

namespace s3oram::kernels {

using field::Elem;

struct ColumnRange {
  std::size_t begin;
  std::size_t end;
};

// PIR select over a path (Subroutine 1, step 7):
//   out[c] = sum_{b, s} select[b * Z + s] * buckets[b][s * m + c]   (mod p)
// buckets.size() buckets of Z slots; select has buckets.size() * Z entries;
// out has m entries, of which [cols.begin, cols.end) are written.
void PathInnerProduct(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                      std::span<const Elem> select, Elem* out, ColumnRange cols);
void PathInnerProductNaive(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                           std::span<const Elem> select, Elem* out, ColumnRange cols);

// Triplet-eviction product (Subroutine 3, step 23): with u = [source; dest] the
// 2Z x m matrix formed by stacking the source bucket's slots over the target
// bucket's slots, and M a 2Z x Z matrix (row-major, M[i * Z + j]):
//   out[j * m + c] = sum_{i < 2Z} M[i * Z + j] * u[i][c]            (mod p)
// out is Z x m; [cols.begin, cols.end) of every row is written. `out` must not
// alias source or dest.
void EvictProduct(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                  std::span<const Elem> matrix, Elem* out, ColumnRange cols);
void EvictProductNaive(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                       std::span<const Elem> matrix, Elem* out, ColumnRange cols);

// Name of the implementation the fast kernels dispatched to ("avx2", "scalar").
const char* FastKernelName();

}  // namespace s3oram::kernels
