// Include this instead of <catch2/catch.hpp> in tests that also use ATen.
//
// Debian's libtorch is built with glog (C10_USE_GLOG), whose CHECK macro aborts the process on failure.
// If glog is included after Catch it silently replaces Catch's CHECK, so a failed check would kill the
// whole test binary instead of being reported. Including ATen first lets Catch's definition win.
//
// A test that uses no ATen is built with ORBIT_TEST_WITHOUT_ATEN (tests/CMakeLists.txt decides from its
// sources): Catch alone, and the identifier c10 poisoned after it, so that ATen (and glog) reached later
// through some header fails the compile ("attempt to use poisoned c10") instead of replacing CHECK. Such a
// test is marked ATEN in its orbit_add_test.
#pragma once

#ifndef ORBIT_TEST_WITHOUT_ATEN
#include <ATen/ATen.h>
#endif
// clang-format off
#include <catch2/catch.hpp>
// clang-format on
#ifdef ORBIT_TEST_WITHOUT_ATEN
#pragma GCC poison c10
#endif
