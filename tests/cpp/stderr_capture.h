// What a test process writes to stderr (fd 2) while a StderrCapture lives, read back by text() (and still shown in
// the test's log). Shared by the tests that check a warning's wording.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

#include "orbit_catch.h"

namespace orbit::test {

// Redirects fd 2 to a temporary file from construction until text() or destruction.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()), saved_(::dup(2)) {
    REQUIRE(file_ != nullptr);
    std::fflush(stderr);
    REQUIRE(::dup2(::fileno(file_), 2) == 2);
  }
  ~StderrCapture() {
    restore();
    std::fclose(file_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  std::string text() {
    restore();
    std::string out;
    std::rewind(file_);
    for (int c = std::fgetc(file_); c != EOF; c = std::fgetc(file_)) out.push_back(static_cast<char>(c));
    std::fputs(out.c_str(), stderr);  // still shown in the test's log
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::FILE* file_;
  int saved_;
};

}  // namespace orbit::test
