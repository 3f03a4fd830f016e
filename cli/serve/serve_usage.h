// The text of `orbit serve --help` (serve_usage.cpp), kept apart from the parsing in cmd_serve.cpp.
#pragma once

namespace orbit::cli {

// The usage and every option, one per paragraph; ends with a newline.
extern const char* const kServeUsage;

}  // namespace orbit::cli
