// What a call throws, as text, for tests that compare refusals' messages: the orbit::Error's message, or
// "(no error)". Any other exception escapes (and fails the test).
#pragma once

#include <functional>
#include <string>

#include "orbit/common/error.h"

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const orbit::Error& e) {
    return e.what();
  }
  return "(no error)";
}
