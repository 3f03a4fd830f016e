// The translation unit that builds the tests' shared precompiled header (orbit_catch.h: ATen, then Catch);
// every test executable reuses it (tests/CMakeLists.txt, orbit_test_pch).
