#pragma once
// Languages built once per process. A schema of many integer fields (each bounded to the safe integers by
// two number languages) or of many fields of one format or pattern would otherwise build the same automaton
// once per field: 1,000 date-time fields took 493 s, 4,000 integer fields 15.6 s. Grammar nodes share the
// memo's DFA (Node::dfa is a shared_ptr to const).
#include <functional>
#include <memory>
#include <string>

#include "constrain/byte_dfa.h"

namespace orbit::constrain {

// The DFA kept under `key`, else build() kept under it (when not huge) and returned. `key` must name
// everything the language depends on. A build that throws keeps nothing, so its error names the caller's
// path each time. Process-wide, thread-safe, bounded (entries and bytes; least recently used dropped first);
// build() runs outside the lock (two threads may build one key at once; the first kept is kept).
std::shared_ptr<const ByteDfa> memo_dfa(const std::string& key, const std::function<ByteDfa()>& build);

// A part of a memo key: `text` with its length before it, so that no two sequences of parts join alike.
std::string memo_part(const std::string& text);

}  // namespace orbit::constrain
