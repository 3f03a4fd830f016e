// `orbit serve` in a build without cpp-httplib: the command exists and says what it needs.
#include <cstdio>

#include "commands.h"

namespace orbit::cli {

int run_serve(int, char**, int) {
  std::fputs(
      "orbit serve: error: this orbit was built without cpp-httplib, so it has no HTTP server.\n"
      "  Install Debian's libcpp-httplib-dev (scripts/common.sh lists it), reconfigure and rebuild.\n",
      stderr);
  return 1;
}

}  // namespace orbit::cli
