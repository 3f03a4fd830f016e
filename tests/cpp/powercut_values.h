// The values the power-cut test's writers put (store_powercut_child.cpp) and its checker reads back
// (test_store_powercut.cpp): value i is a pure function of i, small (at most 50 rows of 64 floats) so a
// run of a thousand cuts stays a few hundred MB of synced records.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "orbit/store/value.h"
#include "test_store_values.h"

namespace orbit::test {

inline store::ValuePtr powercut_value(int64_t i) {
  const int64_t rows = 1 + (i * 7919) % 50;
  const at::Tensor k = at::arange(rows * 64, at::kFloat).mul(0.01).add(static_cast<double>(i)).reshape({rows, 4, 16});
  return store::make_value(EntryKind::kCanonical, {{"layer.0.k", k}, {"layer.0.v", k.neg()}},
                           {{"index", std::to_string(i)}});
}

}  // namespace orbit::test
