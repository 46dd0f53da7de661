// Sizes as people read them: "1.5 GiB", "512 B" (binary units, one decimal
// above bytes).
#pragma once

#include <string>

namespace s3oram {

std::string HumanBytes(double bytes);

}  // namespace s3oram
