// verify_store's check of rows read earlier (store/src/inspect.cpp), apart so a test can hand it rows the
// index has since changed: what an engine holding the store open does between verify's two reads.
#pragma once

#include <string>
#include <vector>

#include "orbit/store.h"
#include "orbit/store/sqlite_index.h"

namespace orbit::store {

// Checks each of `rows` (the index's rows, read at some earlier moment) against its blob under `root`
// (the store directory), as `orbit store verify` reports them; `fingerprint` is the index's model.
// A row found wrong is read again from `index` before it is reported: one that is gone, or now names
// another blob, was erased, evicted or rewritten meanwhile (verify is safe while engines have the store
// open), so what it named is not damage; it is left out of `checked` and of every list.
VerifyReport verify_rows(const SqliteIndex& index, const std::string& root, const std::string& fingerprint,
                         const std::vector<DiskRow>& rows);

}  // namespace orbit::store
