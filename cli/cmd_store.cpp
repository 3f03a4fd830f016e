// `orbit store ls|stat|verify|gc|repair|reset-counts|forget-remote --store DIR [--remote URL]`: inspect and maintain a
// chunk store directory offline, and look at a remote tier's server(s).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "args.h"
#include "commands.h"
#include "orbit/common/error.h"
#include "orbit/store.h"
#include "orbit/store/redis_client.h"

namespace orbit::cli {

using nlohmann::json;

namespace {

const char* kStoreUsage =
    "usage: orbit store <ls|stat|verify|gc|repair> --store DIR [--json]\n"
    "       orbit store stat [--store DIR] --remote URL [--json]\n"
    "       orbit store reset-counts --store DIR [--remote URL] [--json]\n"
    "       orbit store forget-remote --store DIR --remote URL [--dry-run] [--json]\n"
    "  ls      one line per entry: key, kind, encoding, bytes, flags (P pinned by a live process,\n"
    "          C marked corrupt), blob path\n"
    "  stat    totals (entries and bytes per kind), fingerprint, unreferenced blobs and temp files, and per\n"
    "          remote tier the writes recorded and not yet delivered and those given up (max_held_fraction);\n"
    "          --remote redis://host:port[/db] | redis-cluster://h1:p1,h2:p2,...: also the remote tier\n"
    "          (rediss:// and rediss-cluster:// over TLS; ORBIT_REDIS_TLS_CA_FILE etc., see README)\n"
    "          (reachable, nodes, orbit entries, memory, maxmemory-policy)\n"
    "  verify  re-read every blob and check its checksum; reports corrupt or missing entries, and a\n"
    "          directory or other non-file in a blob's place (deletes nothing; repair fixes them) and, apart,\n"
    "          blobs it could not read for a reason that proves nothing about them\n"
    "          (out of file descriptors, permission, I/O error); runs SQLite's integrity_check on the\n"
    "          index (a key index that disagrees with its table: repair reindexes it); exit status 1 when\n"
    "          any entry is bad or the index inconsistent, 2 when none is bad but some could not be read\n"
    "          (verify again)\n"
    "  gc      remove blobs no index row names and temp files of writes that never completed\n"
    "          (--dry-run: only list them; it changes nothing, also on a read-only disk); the store must not\n"
    "          be open in another process. Refuses an index SQLite finds inconsistent (run repair first).\n"
    "          While index rows are damaged (a row names no blob file, or not its own), keeps and names\n"
    "          every unreferenced blob repair could rebuild a row from (it verifies, and no healthy row has\n"
    "          its key) or could not read\n"
    "  repair  rebuild the index from the verified blobs (after index.sqlite was deleted or lost its\n"
    "          meta rows); drops rows whose blob is missing or corrupt; moves a directory in a blob's place\n"
    "          to DIR/quarantine/ with what it holds; reindexes an index SQLite finds inconsistent; refuses an\n"
    "          index.sqlite that is another program's SQLite database; the store must not be open\n"
    "  reset-counts  zero the counts of remote writes given up that stat shows (kept over every run):\n"
    "          --remote URL (as stat names it) for one remote's, else every remote's; the store must not\n"
    "          be open (an open store counts into them)\n"
    "  forget-remote  drop the records of writes not yet delivered to --remote URL (as stat names it):\n"
    "          only an open with that remote re-sends them, so a remote no store opens any more keeps them\n"
    "          for good; its writes are then never sent (--dry-run: only count them); the store must not be\n"
    "          open\n"
    "ls, stat and verify only read (safe while engines have the store open, also on a read-only disk; as any\n"
    "reader of index.sqlite, SQLite may leave its side files index.sqlite-shm and -wal where it can write).\n"
    "stat, verify and gc name each directory under blobs/ they cannot list (UNREADABLE DIRECTORY; permission)\n"
    "and exit 2 (what it holds is not counted, nor removed), unless another failure gave 1.\n"
    // One line: the last of every command's --help lists the accepted names (test_text_cli).
    "accepted arguments: SUBCOMMAND, --store VALUE, --remote VALUE (stat, reset-counts, forget-remote), --json, "
    "--dry-run (gc, forget-remote), --help\n";

// A path as the line-per-entry text output shows it: a control character (a newline in a directory's name) and a
// backslash escaped as C writes them (\n, \x1b, \\), so one entry stays one line. --json gives the
// path as it is.
std::string shown(const std::string& path) {
  std::string out;
  for (const char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02x", u);
      out += buffer;
    } else {
      out += c;
    }
  }
  return out;
}

json remote_json(const RemoteSummary& r) {
  return {{"url", r.url},
          {"reachable", r.reachable},
          {"error", r.error},
          {"cluster", r.cluster},
          {"nodes", r.nodes},
          {"entries", r.entries},
          {"keys", r.keys},
          {"used_memory_bytes", r.used_memory_bytes},
          {"maxmemory_bytes", r.maxmemory_bytes},
          {"maxmemory_policy", r.maxmemory_policy},
          {"server_version", r.server_version}};
}

void print_remote(const RemoteSummary& r) {
  if (!r.reachable) {
    std::printf("remote tier  %s: UNREACHABLE (%s)\n", r.url.c_str(), r.error.c_str());
    return;
  }
  std::string nodes;
  for (const auto& n : r.nodes) nodes += (nodes.empty() ? "" : ",") + n;
  std::printf("remote tier  %s (%s %s, %zu node%s: %s)\n", r.url.c_str(), r.cluster ? "cluster of" : "server",
              r.server_version.c_str(), r.nodes.size(), r.nodes.size() == 1 ? "" : "s", nodes.c_str());
  std::printf("             %lld orbit entries, %lld keys, %lld bytes used, maxmemory %lld, policy %s\n",
              static_cast<long long>(r.entries), static_cast<long long>(r.keys),
              static_cast<long long>(r.used_memory_bytes), static_cast<long long>(r.maxmemory_bytes),
              r.maxmemory_policy.c_str());
}

json entry_json(const StoreEntryInfo& e) {
  return {{"key", e.key},
          {"kind", entry_kind_name(e.kind)},
          {"encoding", blob_encoding_name(e.encoding)},
          {"value_bytes", e.value_bytes},
          {"blob_bytes", e.blob_bytes},
          {"blob", e.blob_path},
          {"checksum", e.checksum},
          {"pinned", e.pinned},
          {"marked_corrupt", e.marked_corrupt},
          {"hits", e.hits}};
}

int run_ls(const Args& args, const std::string& dir) {
  const std::vector<StoreEntryInfo> entries = list_store(dir);
  if (args.flag("--json")) {
    json out = json::array();
    for (const auto& e : entries) out.push_back(entry_json(e));
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  for (const auto& e : entries) {
    std::printf("%s  %-9s %-5s %12lld  %s%s %s\n", e.key.c_str(), entry_kind_name(e.kind),
                blob_encoding_name(e.encoding), static_cast<long long>(e.blob_bytes), e.pinned ? "P" : "-",
                e.marked_corrupt ? "C" : "-", shown(e.blob_path).c_str());
  }
  std::printf("%zu entries\n", entries.size());
  return 0;
}

// The exit status of stat with `r` asked: 1, said on stderr too, when the remote did not answer (the report on
// stdout says it as well, where a script reading only the status and stderr would not look).
int remote_status(const std::optional<RemoteSummary>& r) {
  if (!r || r->reachable) return 0;
  std::fprintf(stderr, "orbit store stat: error: the remote tier %s is unreachable (%s)\n", r->url.c_str(),
               r->error.c_str());
  return 1;
}

// Directories under blobs/ a scan could not list, one line each on stdout, shown() as every text path is
// ("UNREADABLE DIRECTORY <path>: <reason>
// (<consequence>)").
void print_unreadable_dirs(const std::vector<std::string>& dirs, const char* consequence) {
  for (const std::string& d : dirs) std::printf("UNREADABLE DIRECTORY %s (%s)\n", shown(d).c_str(), consequence);
}

// A report left incomplete by directories it could not list exits 2, as verify does for blobs it could not read
// (said on stderr too); an earlier failure's status stands.
int incomplete_status(const std::vector<std::string>& dirs, int status) {
  if (dirs.empty() || status != 0) return status;
  std::fprintf(stderr,
               "orbit store: error: %zu director%s under blobs/ could not be listed: the report is incomplete\n",
               dirs.size(), dirs.size() == 1 ? "y" : "ies");
  return 2;
}

int run_stat(const Args& args, const std::string& dir) {
  const std::optional<std::string> remote = args.get("--remote");
  std::optional<RemoteSummary> r;
  if (remote) {
    try {
      r = summarize_remote(*remote);
    } catch (const Error& e) {  // a malformed URL (an unreachable server is reported in the summary)
      ORBIT_FAIL("store stat: argument '--remote': " << e.what());
    }
  }
  if (dir.empty() && remote) {  // the remote tier alone
    if (args.flag("--json"))
      std::cout << json{{"remote", remote_json(*r)}}.dump(2) << "\n";
    else
      print_remote(*r);
    return remote_status(r);
  }
  const StoreSummary s = summarize_store(dir);
  json kinds = json::object();
  for (const auto& [kind, count] : s.entries_by_kind) kinds[kind]["entries"] = count;
  for (const auto& [kind, bytes] : s.bytes_by_kind) kinds[kind]["blob_bytes"] = bytes;
  json out = {
      {"dir", s.dir},
      {"model_fingerprint", s.model_fingerprint},
      {"format_version", s.format_version},
      {"tiers",
       {{"disk",
         {{"entries", s.entries}, {"value_bytes", s.value_bytes}, {"blob_bytes", s.blob_bytes}, {"pinned", s.pinned}}},
        {"device", "per process (not persisted)"},
        {"host", "per process (not persisted)"}}},
      {"kinds", kinds},
      {"marked_corrupt", s.marked_corrupt},
      {"unreferenced_blobs", s.unreferenced_blobs},
      {"temp_files", s.temp_files},
      {"unreadable_dirs", s.unreadable_dirs}};
  json journal = json::object();  // by remote: undelivered writes recorded, and writes given up
  for (const auto& [url, n] : s.remote_pending) journal[url]["pending"] = n;
  for (const auto& [url, n] : s.remote_abandoned) journal[url]["abandoned"] = n;
  for (auto it = journal.begin(); it != journal.end(); ++it) {
    if (!it.value().contains("pending")) it.value()["pending"] = 0;
    if (!it.value().contains("abandoned")) it.value()["abandoned"] = 0;
  }
  out["remote_writes"] = journal;
  if (r) out["remote"] = remote_json(*r);
  if (args.flag("--json")) {
    std::cout << out.dump(2) << "\n";
    return incomplete_status(s.unreadable_dirs, remote_status(r));
  }
  std::printf("store        %s\n", shown(s.dir).c_str());
  std::printf("fingerprint  %s (format %lld)\n", s.model_fingerprint.c_str(), static_cast<long long>(s.format_version));
  std::printf("disk tier    %lld entries, %lld blob bytes (%lld bytes of tensors once read), %lld pinned\n",
              static_cast<long long>(s.entries), static_cast<long long>(s.blob_bytes),
              static_cast<long long>(s.value_bytes), static_cast<long long>(s.pinned));
  std::printf("memory tiers per process (device, host): not persisted\n");
  for (const auto& [kind, count] : s.entries_by_kind) {
    std::printf("  %-10s %lld entries, %lld bytes\n", kind.c_str(), static_cast<long long>(count),
                static_cast<long long>(kinds[kind]["blob_bytes"].get<int64_t>()));
  }
  std::printf("marked corrupt %lld, unreferenced blobs %lld, temp files %lld\n",
              static_cast<long long>(s.marked_corrupt), static_cast<long long>(s.unreferenced_blobs),
              static_cast<long long>(s.temp_files));
  for (auto it = journal.begin(); it != journal.end(); ++it) {
    std::printf(
        "remote writes %s: %lld writes or erases recorded, not yet delivered (the next open with that remote "
        "sends them; forget-remote drops them); %lld writes given up (max_held_fraction)\n",
        it.key().c_str(), static_cast<long long>(it.value()["pending"].get<int64_t>()),
        static_cast<long long>(it.value()["abandoned"].get<int64_t>()));
  }
  print_unreadable_dirs(s.unreadable_dirs, "its blobs and temp files are not counted above");
  if (r) print_remote(*r);
  return incomplete_status(s.unreadable_dirs, remote_status(r));
}

int run_repair(const Args& args, const std::string& dir) {
  const RepairReport r = repair_store(dir);
  if (args.flag("--json")) {
    std::cout << json{{"blobs_scanned", r.blobs_scanned},         {"rows_restored", r.rows_restored},
                      {"rows_dropped", r.rows_dropped},           {"blobs_rejected", r.blobs_rejected},
                      {"meta_restored", r.meta_restored},         {"index_reindexed", r.index_reindexed},
                      {"model_fingerprint", r.model_fingerprint}, {"notes", r.notes}}
                     .dump(2)
              << "\n";
    return 0;
  }
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
  std::printf("%lld blobs scanned; %lld rows restored, %lld dropped, %lld blobs rejected%s%s; model %s\n",
              static_cast<long long>(r.blobs_scanned), static_cast<long long>(r.rows_restored),
              static_cast<long long>(r.rows_dropped), static_cast<long long>(r.blobs_rejected),
              r.meta_restored ? "; meta rows restored" : "", r.index_reindexed ? "; index reindexed" : "",
              r.model_fingerprint.c_str());
  return 0;
}

int run_verify(const Args& args, const std::string& dir) {
  const VerifyReport r = verify_store(dir);
  if (args.flag("--json")) {
    json problems = json::array();
    for (const auto& p : r.problems) problems.push_back({{"key", p.key}, {"path", p.path}, {"reason", p.reason}});
    json unreadable = json::array();
    for (const auto& p : r.unreadable) unreadable.push_back({{"key", p.key}, {"path", p.path}, {"reason", p.reason}});
    std::cout << json{{"checked", r.checked},
                      {"clean", r.clean()},
                      {"problems", problems},
                      {"unreadable", unreadable},
                      {"unreferenced_blobs", r.unreferenced_blobs},
                      {"temp_files", r.temp_files},
                      {"unreadable_dirs", r.unreadable_dirs},
                      {"index_damage", r.index_damage}}
                     .dump(2)
              << "\n";
  } else {
    for (const auto& p : r.problems) {
      std::printf("BAD %s %s: %s\n", p.key.c_str(), shown(p.path).c_str(), p.reason.c_str());
    }
    for (const auto& p : r.unreadable) {
      std::printf("UNREADABLE %s %s: %s\n", p.key.c_str(), shown(p.path).c_str(), p.reason.c_str());
    }
    print_unreadable_dirs(r.unreadable_dirs, "its blobs and temp files are not counted below");
    if (!r.index_damage.empty()) {
      std::printf("DAMAGED INDEX %s/index.sqlite: SQLite's integrity_check: %s (run `orbit store repair --store %s`)\n",
                  dir.c_str(), r.index_damage.c_str(), dir.c_str());
    }
    std::printf(
        "%lld entries checked, %zu bad, %zu unreadable (not checked: verify again); %lld unreferenced "
        "blobs (a crash or a lost index journal left them, or, while a process has the store open, a write or "
        "eviction was in flight: repair restores an entry from each that verifies, gc deletes them), %lld temp "
        "files (gc removes them)\n",
        static_cast<long long>(r.checked), r.problems.size(), r.unreadable.size(),
        static_cast<long long>(r.unreferenced_blobs), static_cast<long long>(r.temp_files));
    if (!r.problems.empty()) {
      std::printf(
          "to fix the bad entries, run `orbit store repair --store %s` with the store closed: it drops their rows "
          "(recomputed when needed), restores a row from a blob that verifies, and moves a directory in a blob's "
          "place to %s/quarantine/\n",
          dir.c_str(), dir.c_str());
    }
  }
  return !r.problems.empty() || !r.index_damage.empty() ? 1
                                                        : (r.unreadable.empty() && r.unreadable_dirs.empty() ? 0 : 2);
}

int run_gc(const Args& args, const std::string& dir) {
  GcOptions options;
  options.dry_run = args.flag("--dry-run");
  const GcReport r = gc_store(dir, options);
  if (args.flag("--json")) {
    std::cout << json{{"dry_run", options.dry_run},
                      {"removed_blobs", r.removed_blobs},
                      {"removed_temps", r.removed_temps},
                      {"freed_bytes", r.freed_bytes},
                      {"paths", r.removed_paths},
                      {"kept", r.kept_paths},
                      {"unreadable_dirs", r.unreadable_dirs}}
                     .dump(2)
              << "\n";
    return incomplete_status(r.unreadable_dirs, 0);
  }
  for (const auto& p : r.removed_paths)
    std::printf("%s %s\n", options.dry_run ? "would remove" : "removed", shown(p).c_str());
  std::printf("%s%lld unreferenced blobs, %lld temp files, %lld bytes\n", options.dry_run ? "(dry run) " : "",
              static_cast<long long>(r.removed_blobs), static_cast<long long>(r.removed_temps),
              static_cast<long long>(r.freed_bytes));
  for (const auto& p : r.kept_paths) {
    std::printf(
        "kept %s: damaged index rows may be its own; repair rebuilds its row (run `orbit store repair "
        "--store %s`)\n",
        p.c_str(), dir.c_str());
  }
  print_unreadable_dirs(r.unreadable_dirs,
                        options.dry_run ? "what it holds is not looked at" : "nothing in it removed");
  return incomplete_status(r.unreadable_dirs, 0);
}

int run_reset_counts(const Args& args, const std::string& dir) {
  const std::string remote = args.get_or("--remote", "");
  ORBIT_CHECK(!args.has("--remote") || !remote.empty(),
              "store reset-counts: --remote is empty (leave it out for "
              "every remote)");
  const std::vector<std::pair<std::string, int64_t>> removed = reset_remote_abandoned(dir, remote);
  if (args.flag("--json")) {
    json out = json::object();
    for (const auto& [url, writes] : removed) out[url] = writes;
    std::cout << json{{"reset", out}}.dump(2) << "\n";
    return 0;
  }
  for (const auto& [url, writes] : removed) {
    std::printf("remote writes %s: count of writes given up reset (was %lld)\n", url.c_str(),
                static_cast<long long>(writes));
  }
  if (removed.empty() && remote.empty()) std::printf("no count of remote writes given up to reset\n");
  if (removed.empty() && !remote.empty()) {
    std::printf("no count of remote writes given up for %s to reset\n", store::redact_redis_url(remote).c_str());
  }
  return 0;
}

int run_forget_remote(const Args& args, const std::string& dir) {
  const std::string remote = args.required("--remote");
  const bool dry_run = args.flag("--dry-run");
  const int64_t records = forget_remote_writes(dir, remote, dry_run);
  const std::string name = store::redact_redis_url(remote);
  if (args.flag("--json")) {
    std::cout << json{{"remote", name}, {"records", records}, {"dry_run", dry_run}}.dump(2) << "\n";
    return 0;
  }
  std::printf("%sremote writes %s: %lld records of writes or erases not yet delivered %s (never sent now)\n",
              dry_run ? "(dry run) " : "", name.c_str(), static_cast<long long>(records),
              dry_run ? "would be dropped" : "dropped");
  return 0;
}

}  // namespace

int run_store(int argc, char** argv, int first) {
  if (first >= argc || !std::strcmp(argv[first], "--help") || !std::strcmp(argv[first], "-h")) {
    std::fputs(kStoreUsage, first >= argc ? stderr : stdout);
    return first >= argc ? 2 : 0;
  }
  const std::string sub = argv[first];
  if (sub != "ls" && sub != "stat" && sub != "verify" && sub != "gc" && sub != "repair" && sub != "reset-counts" &&
      sub != "forget-remote") {
    // An unknown subcommand is an unknown command: exit status 2 and the usage, as `orbit foo` gives.
    std::fprintf(stderr, "orbit store: unknown subcommand '%s'\n\n%s", sub.c_str(), kStoreUsage);
    return 2;
  }
  std::set<std::string> flags{"--json"};
  if (sub == "gc" || sub == "forget-remote") flags.insert("--dry-run");
  std::set<std::string> values{"--store"};
  if (sub == "stat" || sub == "reset-counts" || sub == "forget-remote") values.insert("--remote");
  const ArgSpec spec{
      values, flags,
      "usage: orbit store " + sub + " --store DIR [--json]" + (sub == "gc" ? " [--dry-run]" : "") +
          (sub == "stat" || sub == "reset-counts" ? " [--remote URL]" : "") +
          (sub == "forget-remote" ? " --remote URL [--dry-run]" : "") +
          "\n  ls: every entry; stat: totals; verify: every checksum; gc: remove unreferenced blobs;\n"
          "  repair: rebuild a lost index from the verified blobs; reset-counts: zero the counts of\n"
          "  remote writes given up (the store closed); forget-remote: drop a remote's records of\n"
          "  undelivered writes (the store closed).\n"
          "  --store DIR    the store directory\n  --json         print JSON\n" +
          (sub == "gc" ? "  --dry-run      report what gc would remove, remove nothing\n" : "") +
          (sub == "stat" ? "  --remote URL   also the remote tier (redis://host:port[/db], "
                           "redis-cluster://h:p,..., rediss:// for TLS)\n"
                         : "") +
          (sub == "reset-counts" ? "  --remote URL   only this remote's count (as stat names it)\n" : "") +
          (sub == "forget-remote" ? "  --remote URL   the remote whose records to drop (as stat names it)\n"
                                    "  --dry-run      count them, drop nothing\n"
                                  : "")};
  const Args args("store " + sub, spec, argc, argv, first + 1);
  if (sub == "stat" && args.get("--remote") && !args.get("--store")) return run_stat(args, "");
  const std::string dir = args.required("--store");
  ORBIT_CHECK(!dir.empty(), "store " << sub << ": --store is empty (give the store directory)");
  if (sub == "ls") return run_ls(args, dir);
  if (sub == "stat") return run_stat(args, dir);
  if (sub == "verify") return run_verify(args, dir);
  if (sub == "repair") return run_repair(args, dir);
  if (sub == "reset-counts") return run_reset_counts(args, dir);
  if (sub == "forget-remote") return run_forget_remote(args, dir);
  return run_gc(args, dir);
}

}  // namespace orbit::cli
