// The individual implementations behind kernels.h, exposed so that tests and
// benchmarks can exercise each one regardless of what the running CPU would
// dispatch to. Production code uses kernels.h only.
#pragma once

#include "oramcore/math/kernels.h"

namespace s3oram::kernels::internal {

// True iff the CPU and OS support AVX2 (what the fast kernels dispatch on).
bool Avx2Available();
// True iff AVX-512F is there too (the path inner product then uses it).
bool Avx512Available();

// Portable implementations (baseline x86-64 / any target).
void PathInnerProductScalar(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                            std::span<const Elem> select, Elem* out, ColumnRange cols);
void EvictProductScalar(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                        std::span<const Elem> matrix, Elem* out, ColumnRange cols);

// AVX2 implementations. Precondition: Avx2Available() (else SIGILL).
void PathInnerProductAvx2(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                          std::span<const Elem> select, Elem* out, ColumnRange cols);
void EvictProductAvx2(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                      std::span<const Elem> matrix, Elem* out, ColumnRange cols);

// AVX-512F path inner product. Precondition: Avx512Available() (else SIGILL).
void PathInnerProductAvx512(std::span<const Elem* const> buckets, std::size_t Z, std::size_t m,
                            std::span<const Elem> select, Elem* out, ColumnRange cols);
// AVX-512F eviction product. Precondition: Avx512Available() (else SIGILL).
void EvictProductAvx512(const Elem* source, const Elem* dest, std::size_t Z, std::size_t m,
                        std::span<const Elem> matrix, Elem* out, ColumnRange cols);

}  // namespace s3oram::kernels::internal
