#include <cctype>
#include <cstdio>

#include "cli/commands.h"

namespace s3oram::cli {

std::uint64_t ParseSize(const std::string& text) {
  std::size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos > 19) throw CLI::ValidationError("size", "'" + text + "' is not a size");
  std::uint64_t value = std::stoull(text.substr(0, pos));
  std::string unit = text.substr(pos);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  int shift = 0;
  if (unit.empty()) shift = 0;
  else if (unit == "K") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (unit == "T") shift = 40;
  else throw CLI::ValidationError("size", "unknown unit in '" + text + "' (use K, M, G or T)");
  if (shift && value > (~std::uint64_t{0} >> shift)) {
    throw CLI::ValidationError("size", "'" + text + "' is too large");
  }
  return value << shift;
}

}  // namespace s3oram::cli
