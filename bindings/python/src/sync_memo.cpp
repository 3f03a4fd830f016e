// The bounds of Window.sync's process-wide memos (orbit/sync_memo.h): orbit.set_sync_memo_limits, which sets
// them by keyword, and orbit.sync_memo_limits, which reads them back as a SyncMemoLimits.
#include "orbit/sync_memo.h"

#include <string>

#include "bindings.h"
#include "convert.h"
#include "field_repr.h"

namespace orbit_py {

namespace {

using orbit::SyncMemoLimits;

// A keyword of set_sync_memo_limits: None keeps `current`, else an int (a numpy integer too, not a bool); the
// range is the SDK's to check.
int64_t limit_or(const IntArg& arg, const char* what, int64_t current) {
  return arg.value.is_none() ? current : arg.get(what);
}

// Both bounds, those not given kept; the SDK's refusal ("SyncMemoLimits::max_entries must be in [1, ...]") raised
// naming the keyword ("set_sync_memo_limits: max_entries must be in ..."), nothing changed. The memos drop their
// least recently used lists without the GIL.
void set_limits(const IntArg& max_entries, const IntArg& max_bytes) {
  SyncMemoLimits limits = orbit::sync_memo_limits();
  limits.max_entries = limit_or(max_entries, "set_sync_memo_limits: max_entries", limits.max_entries);
  limits.max_bytes = limit_or(max_bytes, "set_sync_memo_limits: max_bytes", limits.max_bytes);
  with_keyword_names("SyncMemoLimits", "set_sync_memo_limits", [&] {
    const NativeCall release;
    orbit::set_sync_memo_limits(limits);
  });
}

}  // namespace

void init_sync_memo(py::module_& m) {
  py::class_<SyncMemoLimits>(m, "SyncMemoLimits",
                             "The bounds of Window.sync's two process-wide memos (orbit.sync_memo_limits()).")
      .def_readonly("max_entries", &SyncMemoLimits::max_entries, "Message lists each memo keeps at most.")
      .def_readonly("max_bytes", &SyncMemoLimits::max_bytes, "Bytes each memo's lists hold at most.")
      .def("__repr__", &fields_repr);
  m.def("set_sync_memo_limits", &set_limits, py::kw_only(), py::arg("max_entries") = py::none(),
        py::arg("max_bytes") = py::none(),
        "Bounds Window.sync's two memos (orbit/sync_memo.h): the renders of each synced message list's prefixes and\n"
        "the tokens of its text segments, kept for the lists that follow it. Both are process-wide (every engine\n"
        "and window shares them), least recently used dropped first, and hold one entry per new list: a process\n"
        "syncing many unrelated lists (a server) grows them up to these bounds. max_entries: lists each memo keeps\n"
        "at most, in [1, 1048576] (default 4096); max_bytes: bytes each memo's lists hold at most, in [1024, 2**40]\n"
        "(default 64 MiB), a list larger than it not kept. A keyword left out (None) keeps the bound in force.\n"
        "Lists past the new bounds are dropped at once. A smaller memo changes no result, only the time a sync takes\n"
        "(a list no longer held is rendered and tokenized again). An int or numpy integer each; a bool or another\n"
        "type raises TypeError, a value out of its range OrbitError, naming the keyword\n"
        "('set_sync_memo_limits: max_entries must be in [1, 1048576], got 0'), nothing changed. `orbit serve`\n"
        "sets the same bounds with --sync-memo-entries and --sync-memo-mb.");
  m.def("sync_memo_limits", &orbit::sync_memo_limits,
        "The bounds of Window.sync's memos in force, as a SyncMemoLimits (max_entries, max_bytes): the defaults\n"
        "(4096 lists, 64 MiB) until set_sync_memo_limits changes them.");
}

}  // namespace orbit_py
