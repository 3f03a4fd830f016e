// orbit's version. Public header: no torch.
#pragma once

namespace orbit {

// "MAJOR.MINOR.PATCH" of the library this program is linked against.
const char* version() noexcept;

}  // namespace orbit
