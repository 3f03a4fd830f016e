// Include this instead of <catch2/catch.hpp> in tests that also use ATen.
//
// Debian's libtorch is built with glog (C10_USE_GLOG), whose CHECK macro aborts the process on failure.
// If glog is included after Catch it silently replaces Catch's CHECK, so a failed check would kill the
// whole test binary instead of being reported. Including ATen first lets Catch's definition win.
#pragma once

#include <ATen/ATen.h>
// clang-format off
#include <catch2/catch.hpp>
// clang-format on
