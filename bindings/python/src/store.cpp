// orbit.store_*: offline inspection of a store directory (orbit/store.h; what `orbit store ls|stat|verify|gc`
// prints) and content keys. These need no model and no Engine; the GIL is released while they read the disk.
#include <pybind11/stl.h>

#include <sstream>

#include "bindings.h"
#include "convert.h"
#include "enums.h"
#include "field_repr.h"
#include "orbit/errors.h"
#include "orbit/store.h"

namespace orbit_py {

namespace {

// A store directory argument (str or os.PathLike of a str); anything else raises TypeError naming `what`
// ("store_list: dir"), where os.fspath's own error named no argument, and "" ValueError naming it (the SDK's
// own message asks for the CLI's --store).
std::string dir_arg(const py::object& obj, const char* what) {
  const auto refuse = [&] {
    return py::type_error(std::string(what) + " must be a str or os.PathLike, got " + type_name(obj));
  };
  if (!py::isinstance<py::str>(obj) && !py::hasattr(obj, "__fspath__")) throw refuse();
  const py::object path = py::module_::import("os").attr("fspath")(obj);
  if (!py::isinstance<py::str>(path)) throw refuse();  // a PathLike of bytes
  // The file system's bytes, as open() would use them (a name os.listdir gave with undecodable bytes too).
  std::string dir = fs_path(py::module_::import("os").attr("fsencode")(path).cast<std::string>(), what);
  if (dir.empty()) throw py::value_error(std::string(what) + " is empty: give the store directory");
  return dir;
}

// A summary's (kind name, number) pairs as a dict.
py::dict kind_dict(const std::vector<std::pair<std::string, int64_t>>& pairs) {
  py::dict d;
  for (const auto& [k, v] : pairs) d[py::str(k)] = v;
  return d;
}

template <typename R, typename F>
R released(F&& f) {
  const NativeCall release;
  return f();
}

}  // namespace

namespace {

// EntryKind and BlobEncoding.
void def_store_enums(py::module_& m) {
  using namespace orbit;
  py::enum_<EntryKind> kind(m, "EntryKind", "What a store entry holds.");
  kind.value("canonical", EntryKind::kCanonical)
      .value("patch", EntryKind::kPatch)
      .value("embedding", EntryKind::kEmbedding)
      .value("other", EntryKind::kOther);
  refuse_unknown_values(kind);
  kind.attr("__str__") = py::cpp_function([](EntryKind k) { return std::string(entry_kind_name(k)); },
                                          py::name("__str__"), py::is_method(kind), "The C++ name.");
  kind.def_property_readonly(
      "label", [](EntryKind k) { return std::string(entry_kind_name(k)); }, "The C++ name, e.g. 'canonical'.");
  py::enum_<BlobEncoding> enc(m, "BlobEncoding", "How a disk blob stores floating tensors.");
  enc.value("exact", BlobEncoding::kExact).value("int8", BlobEncoding::kInt8);
  refuse_unknown_values(enc);
  enc.attr("__str__") = py::cpp_function([](BlobEncoding e) { return std::string(blob_encoding_name(e)); },
                                         py::name("__str__"), py::is_method(enc), "The C++ name.");
  enc.def_property_readonly(
      "label", [](BlobEncoding e) { return std::string(blob_encoding_name(e)); }, "The C++ name, e.g. 'int8'.");
}

// StoreEntryInfo and StoreSummary.
void def_store_listing(py::module_& m) {
  using namespace orbit;
  py::class_<StoreEntryInfo>(m, "StoreEntryInfo", "One committed store entry (store_list()).")
      .def_readonly("key", &StoreEntryInfo::key, "64-hex key.")
      .def_readonly("kind", &StoreEntryInfo::kind, "EntryKind.")
      .def_readonly("encoding", &StoreEntryInfo::encoding, "BlobEncoding.")
      .def_readonly("value_bytes", &StoreEntryInfo::value_bytes, "The tensors' bytes in memory.")
      .def_readonly("blob_bytes", &StoreEntryInfo::blob_bytes, "The blob file's size.")
      .def_readonly("blob_path", &StoreEntryInfo::blob_path, "Absolute path of the blob.")
      .def_readonly("checksum", &StoreEntryInfo::checksum, "SHA-256 hex of the blob without its trailer.")
      .def_readonly("pinned", &StoreEntryInfo::pinned, "Never evicted.")
      .def_readonly("marked_corrupt", &StoreEntryInfo::marked_corrupt, "A read found it corrupt.")
      .def_readonly("hits", &StoreEntryInfo::hits, "Reads served.")
      .def("__repr__", [](const StoreEntryInfo& e) {
        return "StoreEntryInfo(" + e.key.substr(0, 12) + "..., " + entry_kind_name(e.kind) +
               ", blob_bytes=" + std::to_string(e.blob_bytes) + ")";
      });
  py::class_<StoreSummary>(m, "StoreSummary", "A store directory at a glance (store_summary()).")
      .def_readonly("dir", &StoreSummary::dir, "The directory.")
      .def_readonly("model_fingerprint", &StoreSummary::model_fingerprint, "The model it belongs to.")
      .def_readonly("format_version", &StoreSummary::format_version, "On-disk format version.")
      .def_readonly("entries", &StoreSummary::entries, "Committed entries.")
      .def_readonly("value_bytes", &StoreSummary::value_bytes, "Tensor bytes.")
      .def_readonly("blob_bytes", &StoreSummary::blob_bytes, "Blob file bytes.")
      .def_readonly("pinned", &StoreSummary::pinned, "Pinned entries.")
      .def_readonly("marked_corrupt", &StoreSummary::marked_corrupt, "Entries marked corrupt.")
      .def_property_readonly(
          "entries_by_kind", [](const StoreSummary& s) { return kind_dict(s.entries_by_kind); },
          "dict: kind name -> entries.")
      .def_property_readonly(
          "bytes_by_kind", [](const StoreSummary& s) { return kind_dict(s.bytes_by_kind); },
          "dict: kind name -> blob bytes.")
      .def_readonly("unreferenced_blobs", &StoreSummary::unreferenced_blobs, "Blob files no row names.")
      .def_readonly("temp_files", &StoreSummary::temp_files, "Writes that never completed.")
      .def_readonly(
          "unreadable_dirs", &StoreSummary::unreadable_dirs,
          "list[str]: directories under blobs/ that could not be listed ('<path>: <reason>', e.g. permission\n"
          "denied): the blobs and temp files they hold are not counted (`orbit store stat`: UNREADABLE DIRECTORY, exit "
          "status 2).")
      .def_property_readonly(
          "remote_pending", [](const StoreSummary& s) { return kind_dict(s.remote_pending); },
          "dict: remote URL (as shown) -> writes and erases recorded, not yet delivered.")
      .def_property_readonly(
          "remote_abandoned", [](const StoreSummary& s) { return kind_dict(s.remote_abandoned); },
          "dict: remote URL (as shown) -> writes given up (local copies evicted past max_held_fraction).")
      .def("__repr__", &fields_repr);
}

// what verify, gc, repair and the remote summary report.
void def_store_reports(py::module_& m) {
  using namespace orbit;
  py::class_<VerifyProblem>(m, "VerifyProblem",
                            "A corrupt or missing blob, or one that could not be read (store_verify()).")
      .def_readonly("key", &VerifyProblem::key, "The entry's key.")
      .def_readonly("path", &VerifyProblem::path, "Its blob path.")
      .def_readonly("reason", &VerifyProblem::reason, "'missing', 'checksum mismatch', 'cannot read ...', ...")
      .def("__repr__",
           [](const VerifyProblem& p) { return "VerifyProblem(" + p.key.substr(0, 12) + "..., " + p.reason + ")"; });
  py::class_<VerifyReport>(m, "VerifyReport", "What store_verify() found (problems are reported, never deleted).")
      .def_readonly("checked", &VerifyReport::checked, "Entries checked.")
      .def_readonly("problems", &VerifyReport::problems, "list[VerifyProblem]: corrupt or missing blobs.")
      .def_readonly("unreadable", &VerifyReport::unreadable,
                    "list[VerifyProblem]: blobs that could not be read for a reason that proves nothing about them\n"
                    "(permission, an I/O error, a directory where the blob was: EACCES, EIO, EISDIR; out of file\n"
                    "descriptors or memory): not checked, not called bad; verify again once that is fixed. `orbit\n"
                    "store verify` prints them as UNREADABLE (exit status 2 when nothing else is wrong).")
      .def_readonly("unreferenced_blobs", &VerifyReport::unreferenced_blobs, "Blob files no row names.")
      .def_readonly("temp_files", &VerifyReport::temp_files, "Writes that never completed.")
      .def_readonly(
          "unreadable_dirs", &VerifyReport::unreadable_dirs,
          "list[str]: directories under blobs/ that could not be listed ('<path>: <reason>', e.g. permission\n"
          "denied): the blobs and temp files they hold are not counted; the report is not clean.")
      .def_readonly("index_damage", &VerifyReport::index_damage,
                    "Why SQLite's integrity_check finds index.sqlite inconsistent (its key index disagrees\n"
                    "with its table, a damaged page), or '' when it passes: store_repair() reindexes it.")
      .def_property_readonly("clean", &VerifyReport::clean,
                             "No problems, nothing unreadable (blobs or directories), no index_damage.")
      .def("__bool__", &VerifyReport::clean, "True when clean.")
      .def("__repr__", &fields_repr);
  py::class_<GcReport>(m, "GcReport", "What store_gc() removed (or would remove, dry_run=True).")
      .def_readonly("removed_blobs", &GcReport::removed_blobs, "Unreferenced blob files.")
      .def_readonly("removed_temps", &GcReport::removed_temps, "Temp files of writes that never completed.")
      .def_readonly("freed_bytes", &GcReport::freed_bytes, "Bytes freed.")
      .def_readonly("removed_paths", &GcReport::removed_paths, "The paths.")
      .def_readonly("kept_paths", &GcReport::kept_paths,
                    "Unreferenced blobs kept while index rows are damaged (a row names no blob file, or not its\n"
                    "own): those repair could rebuild a row from (they verify and no healthy row has their key)\n"
                    "or that could not be read now. store_repair() rebuilds those rows from them.")
      .def_readonly("unreadable_dirs", &GcReport::unreadable_dirs,
                    "list[str]: directories under blobs/ that could not be listed ('<path>: <reason>'): what they\n"
                    "hold was neither looked at nor removed (`orbit store gc`: exit status 2).")
      .def("__repr__", &fields_repr);

  py::class_<RepairReport>(m, "RepairReport", "What store_repair() did.")
      .def_readonly("blobs_scanned", &RepairReport::blobs_scanned, "Blob files read.")
      .def_readonly("rows_restored", &RepairReport::rows_restored, "Entries rebuilt from their blobs.")
      .def_readonly("rows_dropped", &RepairReport::rows_dropped, "Rows whose blob is missing, corrupt or outside.")
      .def_readonly("blobs_rejected", &RepairReport::blobs_rejected, "Blobs that do not verify.")
      .def_readonly("meta_restored", &RepairReport::meta_restored, "The model fingerprint was restored.")
      .def_readonly("index_reindexed", &RepairReport::index_reindexed,
                    "SQLite found the index inconsistent and REINDEX rebuilt its indexes (a note says why).")
      .def_readonly("model_fingerprint", &RepairReport::model_fingerprint, "The store's model fingerprint.")
      .def_readonly("notes", &RepairReport::notes, "One line per rejected blob or dropped row.")
      .def("__repr__", &fields_repr);
  py::class_<RemoteSummary>(m, "RemoteSummary", "What store_remote_summary() found on a remote tier's server(s).")
      .def_readonly("url", &RemoteSummary::url, "The URL.")
      .def_readonly("reachable", &RemoteSummary::reachable, "Every node answered.")
      .def_readonly("error", &RemoteSummary::error, "Why not, naming the node.")
      .def_readonly("cluster", &RemoteSummary::cluster, "A Redis Cluster.")
      .def_readonly("nodes", &RemoteSummary::nodes, "'host:port' of the nodes asked.")
      .def_readonly("entries", &RemoteSummary::entries, "orbit entries held.")
      .def_readonly("keys", &RemoteSummary::keys, "All keys (DBSIZE).")
      .def_readonly("used_memory_bytes", &RemoteSummary::used_memory_bytes, "Σ used_memory.")
      .def_readonly("maxmemory_bytes", &RemoteSummary::maxmemory_bytes, "maxmemory (0 = no limit).")
      .def_readonly("maxmemory_policy", &RemoteSummary::maxmemory_policy, "maxmemory-policy.")
      .def_readonly("server_version", &RemoteSummary::server_version, "redis_version.")
      .def("__repr__", &fields_repr);
}

// the store_* functions.
void def_store_functions(py::module_& m) {
  using namespace orbit;
  m.def(
      "store_repair",
      [](const py::object& dir) {
        const std::string d = dir_arg(dir, "store_repair: dir");
        return released<RepairReport>([&] { return repair_store(d); });
      },
      py::arg("dir"),
      "Rebuilds the index of a store directory from its verified blobs (after index.sqlite was deleted or\n"
      "lost its meta rows). Needs the store closed everywhere.");
  m.def(
      "store_remote_summary",
      [](const StrArg& url_arg) {
        const std::string url = url_arg.get("store_remote_summary: url");
        return released<RemoteSummary>([&] { return summarize_remote(url); });
      },
      py::arg("url"),
      "Connects to a remote tier (redis://... or redis-cluster://...) and counts orbit's entries. An\n"
      "unreachable server is reported (reachable=False), not raised; a malformed URL raises OrbitError.");
  m.def(
      "store_list",
      [](const py::object& dir) {
        const std::string d = dir_arg(dir, "store_list: dir");
        return released<std::vector<StoreEntryInfo>>([&] { return list_store(d); });
      },
      py::arg("dir"),
      "The committed entries of a store directory (read-only; safe while an engine has it open). Raises\n"
      "OrbitError when DIR is not a store.");
  m.def(
      "store_summary",
      [](const py::object& dir) {
        const std::string d = dir_arg(dir, "store_summary: dir");
        return released<StoreSummary>([&] { return summarize_store(d); });
      },
      py::arg("dir"), "A StoreSummary of a store directory (read-only).");
  m.def(
      "store_verify",
      [](const py::object& dir) {
        const std::string d = dir_arg(dir, "store_verify: dir");
        return released<VerifyReport>([&] { return verify_store(d); });
      },
      py::arg("dir"), "Checks every blob's size and checksum; a VerifyReport (read-only).");
  m.def(
      "store_gc",
      [](const py::object& dir, const BoolArg& dry_run) {
        const std::string d = dir_arg(dir, "store_gc: dir");
        GcOptions o;
        o.dry_run = dry_run.get("store_gc: dry_run");
        return released<GcReport>([&] { return gc_store(d, o); });
      },
      py::arg("dir"), py::kw_only(), py::arg("dry_run") = false,
      "Removes unreferenced blobs and temp files. Needs the store closed everywhere (raises OrbitError when\n"
      "another process or engine holds it open).");
  m.def(
      "chunk_key_tokens",
      [](const StrArg& model_fingerprint, const py::object& tokens) {
        // to_tokens, as add_tokens reads them: pybind11's list of int64 took True as 1 and no numpy array.
        const std::string fingerprint = model_fingerprint.get("chunk_key_tokens: model_fingerprint");
        return chunk_key_tokens(fingerprint, to_tokens(tokens, "chunk_key_tokens: tokens"));
      },
      py::arg("model_fingerprint"), py::arg("tokens"),
      "The content key of a token chunk for a model (ModelInfo.fingerprint): what ChunkRef.key holds.");
  m.def(
      "is_store_key", [](const StrArg& key) { return is_store_key(key.get("is_store_key: key")); }, py::arg("key"),
      "True for 64 lowercase hex characters.");
}

}  // namespace

void init_store(py::module_& m) {
  def_store_enums(m);
  def_store_listing(m);
  def_store_reports(m);
  def_store_functions(m);
}

}  // namespace orbit_py
