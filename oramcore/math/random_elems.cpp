#include "oramcore/math/random_elems.h"

#include <cstdint>

#include "oramcore/base/random.h"

namespace s3oram::random {

void Elems(std::span<field::Elem> out) {
  static_assert(sizeof(field::Elem) == 4);
  Bytes(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(out.data()), out.size_bytes()));
  for (auto& e : out) {
    e &= field::kPrime;
    // Probability 2^-31 per element; redraw until canonical.
    while (e == field::kPrime) {
      Bytes(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&e), sizeof e));
      e &= field::kPrime;
    }
  }
}

}  // namespace s3oram::random
