#include "orbit/version.h"

namespace orbit {

const char* version() noexcept { return ORBIT_VERSION_STRING; }

}  // namespace orbit
