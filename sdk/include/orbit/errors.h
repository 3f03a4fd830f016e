// Public re-export of orbit's error and status types (docs/ARCHITECTURE.md §8): orbit::Error is thrown for misuse
// and bad input; orbit::Status / orbit::Result<T> carry expected failures.
#pragma once

#include "orbit/common/error.h"   // IWYU pragma: export
#include "orbit/common/status.h"  // IWYU pragma: export
