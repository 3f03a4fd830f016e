// The translation unit that builds the tests' shared precompiled headers (orbit_catch.h: ATen, then Catch, in
// orbit_test_pch; Catch alone in orbit_test_pch_light); every test executable reuses one (tests/CMakeLists.txt).
