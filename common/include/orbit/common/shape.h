// shape_string: a tensor shape as "[a, b, c]" for error messages. Header-only and torch-free; it
// takes any indexable sequence of integers with size() (std::vector<int64_t>, at::IntArrayRef).
#pragma once

#include <cstddef>
#include <string>

namespace orbit {

template <typename Dims>
std::string shape_string(const Dims& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

}  // namespace orbit
