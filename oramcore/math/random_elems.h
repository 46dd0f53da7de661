// Uniform field elements from the OS CSPRNG (base/random.h): the shares'
// coefficients, select-vector and matrix sharings, SMP masks. Kept beside the
// field so that base/ knows nothing of F_p.
#pragma once

#include <span>

#include "oramcore/math/field.h"

namespace s3oram::random {

// Uniform in [0, p), by rejection sampling of 31-bit words.
void Elems(std::span<field::Elem> out);

}  // namespace s3oram::random
