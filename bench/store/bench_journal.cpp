// What the remote journal costs a put: puts into a store with a directory and a remote tier, with the journal
// (ChunkStoreOptions::remote_journal, the default: each remote write recorded in the index until the remote
// acknowledges it) and without it, side by side in one run, with a directory-only store for reference.
//
//   bench_journal [--puts 200] [--bytes 65536] [--rounds 5] [--dir DIR] [--remote auto|redis://...]
//
// Each round opens a fresh store per mode (the modes' order rotating from round to round), times --puts puts
// of distinct values of --bytes bytes (what a caller waits for: the blob write and its fsync, the index commit,
// the journal's record, the queueing), then the wait until the remote has every write (drain_remote: the
// writer thread's sends and the journal's clearing of its records), and closes the store. Prints microseconds
// per put, min and median over the rounds, and the ratios to the no-journal mode. --remote auto (the default)
// starts a redis-server on a free port of 127.0.0.1 for the run. Not a test: compare the ratios of one run.
#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "args.h"
#include "bench_share.h"
#include "orbit/common/error.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/disk_tier.h"

namespace fs = std::filesystem;
namespace st = orbit::store;
using Clock = std::chrono::steady_clock;

namespace {

enum class Mode { kLocal, kNoJournal, kJournal };
constexpr Mode kModes[] = {Mode::kLocal, Mode::kNoJournal, Mode::kJournal};

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kLocal: return "directory only (no remote)";
    case Mode::kNoJournal: return "directory + remote, no journal";
    case Mode::kJournal: return "directory + remote + journal";
  }
  return "?";
}

struct Sample {
  double put_us = 0;    // per put: the puts' own time
  double total_us = 0;  // per put: the puts and the drain of the remote queue
};

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One round of one mode: `puts` values (each distinct: its index in its first float) into a fresh store in `dir`.
Sample run_round(Mode mode, const std::string& dir, const std::string& url, int64_t puts, int64_t bytes, int round) {
  st::ChunkStoreOptions o;
  o.model_fingerprint = std::string(64, 'b');
  o.dir = dir;
  o.host_budget_bytes = int64_t{1} << 30;
  if (mode != Mode::kLocal) {
    o.remote.url = url;
    o.remote.warn = false;
    o.remote.command_timeout_ms = 30000;
  }
  o.remote_journal = mode == Mode::kJournal;
  const int64_t floats = std::max<int64_t>(1, bytes / 4);
  Sample s;
  st::ChunkStore store(o);
  const auto start = Clock::now();
  for (int64_t i = 0; i < puts; ++i) {
    at::Tensor x = at::zeros({floats}, at::kFloat);
    x[0] = static_cast<float>(i + puts * round);
    const std::string key = orbit::chunk_key_tokens(o.model_fingerprint, {round, static_cast<int64_t>(mode), i});
    ORBIT_CHECK(store.put(key, st::make_value(orbit::EntryKind::kOther, {{"x", x}})).is_ok(), "bench_journal: put");
  }
  s.put_us = since(start) / static_cast<double>(puts) * 1e6;
  if (mode != Mode::kLocal) {
    ORBIT_CHECK(store.drain_remote(std::chrono::milliseconds(600000)), "bench_journal: the remote did not drain");
    const orbit::RemoteStats rs = store.stats().remote;
    ORBIT_CHECK(rs.writes == puts, "bench_journal: " << rs.writes << " of " << puts << " remote writes delivered");
  }
  s.total_us = since(start) / static_cast<double>(puts) * 1e6;
  return s;
}

// The journal's own index writes, apart from any put: `puts` records (each its own commit on the disk tier's lease
// connection, as RemoteTier::put makes them), then their clearing in batches of 64 (as the writer thread settles
// delivered writes). Microseconds per record and per cleared record.
std::pair<double, double> journal_writes_us(const std::string& dir, int64_t puts) {
  st::DiskTierOptions o;
  o.dir = dir;
  o.model_fingerprint = std::string(64, 'b');
  st::DiskTier disk(o);
  std::vector<st::RemotePendingRecord> records;
  for (int64_t i = 0; i < puts; ++i) records.push_back({0, orbit::chunk_key_tokens(o.model_fingerprint, {i}), false});
  const std::string remote = "redis://127.0.0.1:1";
  auto start = Clock::now();
  for (st::RemotePendingRecord& r : records) {
    ORBIT_CHECK(disk.record_remote_pending(r.key, remote, false, &r.seq).is_ok(), "bench_journal: record");
  }
  const double record = since(start) / static_cast<double>(puts) * 1e6;
  start = Clock::now();
  for (size_t i = 0; i < records.size(); i += 64) {
    const std::vector<st::RemotePendingRecord> batch(
        records.begin() + static_cast<std::ptrdiff_t>(i),
        records.begin() + static_cast<std::ptrdiff_t>(std::min(records.size(), i + 64)));
    ORBIT_CHECK(disk.clear_remote_pending(batch, remote).is_ok(), "bench_journal: clear");
  }
  const double clear = since(start) / static_cast<double>(puts) * 1e6;
  ORBIT_CHECK(disk.count_remote_pending(remote, disk.last_remote_pending()) == 0, "bench_journal: records left");
  return {record, clear};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  const orbit::cli::Args a("bench_journal",
                           {{"--puts", "--bytes", "--rounds", "--dir", "--remote"},
                            {},
                            "usage: bench_journal [--puts 200] [--bytes 65536] [--rounds 5] [--dir DIR]\n"
                            "                     [--remote auto|redis://host:port]\n"
                            "  Microseconds per put with and without the remote journal, side by side.\n"},
                           argc, argv, 1);
  const int64_t puts = a.get_int("--puts", 200, 1);
  const int64_t bytes = a.get_int("--bytes", 65536, 4);
  const int rounds = static_cast<int>(a.get_int("--rounds", 5, 1));
  const std::string base = a.get_or("--dir", fs::temp_directory_path().string());
  const std::string remote = a.get_or("--remote", "auto");
  const fs::path root = fs::path(base) / ("orbit-bench-journal-" + std::to_string(::getpid()));
  fs::create_directories(root);
  std::unique_ptr<orbit::bench::LocalRedis> redis;
  if (remote == "auto") redis = std::make_unique<orbit::bench::LocalRedis>((root / "redis").string());
  const std::string url = redis ? redis->url() : remote;

  std::vector<Sample> samples[3];
  std::vector<double> record_us, clear_us;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 3; ++k) {
      const Mode m = kModes[(k + r) % 3];
      const fs::path dir = root / ("store-" + std::to_string(r) + "-" + std::to_string(static_cast<int>(m)));
      samples[static_cast<int>(m)].push_back(run_round(m, dir.string(), url, puts, bytes, r));
      fs::remove_all(dir);
    }
    const fs::path dir = root / ("journal-" + std::to_string(r));
    const auto [record, clear] = journal_writes_us(dir.string(), puts);
    record_us.push_back(record);
    clear_us.push_back(clear);
    fs::remove_all(dir);
  }
  std::printf("%lld puts of %lld bytes per round, %d rounds (modes alternated), remote %s, directory %s\n\n",
              static_cast<long long>(puts), static_cast<long long>(bytes), rounds, url.c_str(), root.c_str());
  std::printf("%-32s %12s %12s %16s %16s %12s\n", "mode", "put us min", "put us med", "put+drain min", "put+drain med",
              "put vs none");
  const auto column = [&](Mode m, double Sample::*field) {
    std::vector<double> v;
    for (const Sample& s : samples[static_cast<int>(m)]) v.push_back(s.*field);
    return v;
  };
  const double none_put = median(column(Mode::kNoJournal, &Sample::put_us));
  for (Mode m : kModes) {
    const std::vector<double> put = column(m, &Sample::put_us), total = column(m, &Sample::total_us);
    std::printf("%-32s %12.1f %12.1f %16.1f %16.1f %11.3fx\n", mode_name(m), *std::min_element(put.begin(), put.end()),
                median(put), *std::min_element(total.begin(), total.end()), median(total), median(put) / none_put);
  }
  const double journal = median(column(Mode::kJournal, &Sample::put_us));
  std::printf("\nthe journal's cost per put (medians): %+.1f us (%+.1f%%)\n", journal - none_put,
              100 * (journal - none_put) / none_put);
  std::printf(
      "its index writes alone (a disk tier, no put): record %.1f us (min %.1f), clear %.1f us (min %.1f) per put\n",
      median(record_us), *std::min_element(record_us.begin(), record_us.end()), median(clear_us),
      *std::min_element(clear_us.begin(), clear_us.end()));
  redis.reset();
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
} catch (const orbit::Error& e) {
  std::fprintf(stderr, "bench_journal: error: %s\n", e.what());
  return 1;
}
