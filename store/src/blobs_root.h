// Where a store's blobs live, resolved once by everything that writes, reads or removes them (the disk
// tier, gc, verify, repair). Internal to orbit::store.
#pragma once

#include <string>

#include "orbit/common/status.h"

namespace orbit::store {

// The canonical path of `root`/blobs. not_found when it does not exist; refused, naming the path, when
// it is a symlink or resolves outside `root` (blob writes, or gc's removals, would then reach files
// outside the store).
Result<std::string> resolve_blobs_root(const std::string& root);

}  // namespace orbit::store
