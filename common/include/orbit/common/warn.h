// orbit's warnings: the store's and the SDK's reports of something the caller should know but that is no
// error (a remote tier down, a disk write that failed, a blob found corrupt). They go through one
// process-wide sink, so an embedding program decides where they appear: by default each is written to
// stderr as one line "orbit: warning: <message>" (the CLI and `orbit serve` keep that), and the Python
// bindings install a sink that issues them through Python's warnings module (bindings/python/src/warnings.cpp).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace orbit {

// Receives each warning's message (no "orbit: warning: " prefix, no trailing newline).
using WarningSink = std::function<void(std::string)>;

// Reports `message` to the installed sink, or to stderr as "orbit: warning: <message>\n" when none is.
// Thread-safe: any thread may call it. Calls are serialised: the sink runs under the sink's lock, one
// message at a time, so it must not call warn() or set_warning_sink() itself, and should return quickly
// (queue the message rather than block on another lock). Never throws: a sink that throws loses the message.
void warn(std::string_view message);

// Installs `sink` (an empty function restores the stderr default) and returns the one it replaces.
// Thread-safe. Once it returns, no call of the replaced sink is running or starts: a sink whose target goes
// away (an interpreter that finalizes) is uninstalled safely.
WarningSink set_warning_sink(WarningSink sink);

}  // namespace orbit
