// bench_store: the chunk store's save and load throughput per tier, side by side with a plain file copy
// of the same bytes in the same run; the time to recall a chunk's canonical from host, disk and a remote
// tier vs. re-prefilling it; and N processes sharing one store directory. Prints tables of ratios and
// writes JSON. Not a test: absolute numbers depend on the machine and its load; compare the ratios of
// one run.
//
//   bench_store [--model PATH | --preset qwen2.5-0.5b [--layers N]] [--tokens 1024] [--reps 5]
//               [--dir DIR (store location, default: the system temp dir)] [--json PATH] [--cache DIR]
//               [--threads N] [--remote auto|none|redis://...|redis-cluster://...]
//               [--procs 1,2,4] [--share-keys 200] [--share-bytes 1048576]
//
// Throughput payload: the canonical of one --tokens chunk of the model (every layer's k and v, float32);
// a save includes copying the runtime's tensors into a stored value (what an engine pays).
// "plain copy" = write(2) the same bytes to one file + fsync (the durability a store write gives), and
// read(2) them back into memory. Disk reads come from the page cache in both columns (no cache dropping).
// --remote auto (the default) starts a redis-server on a free port of 127.0.0.1 for the run (loopback:
// the network cost is the kernel's, not a real link's). --procs: each N runs N processes on one fresh
// directory, each looking up --share-keys keys in its own order and putting what it misses.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "bench_share.h"
#include "orbit/common/error.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/reuse.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/codec.h"

namespace fs = std::filesystem;
namespace rt = orbit::runtime;
namespace st = orbit::store;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string model;
  std::string preset = "qwen2.5-0.5b";
  int64_t layers = 0;  // 0 = the preset's
  int64_t tokens = 1024;
  int reps = 5;
  std::string dir;
  std::string json = "bench_store.json";
  std::string cache = "bench-models";
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::string remote = "auto";
  std::vector<int> procs = {1, 2, 4};
  int64_t share_keys = 200;
  int64_t share_bytes = int64_t{1} << 20;
};

Options parse(int argc, char** argv) {
  const orbit::cli::Args a(
      "bench_store",
      {{"--model", "--preset", "--layers", "--tokens", "--reps", "--dir", "--json", "--cache", "--threads", "--remote",
        "--procs", "--share-keys", "--share-bytes"},
       {},
       "usage: bench_store [--model PATH | --preset qwen2.5-0.5b [--layers N]] [--tokens 1024] [--reps 5]\n"
       "                   [--dir DIR] [--json PATH] [--cache DIR] [--threads N] [--remote URL]\n"
       "                   [--procs N --share-keys K --share-bytes B]\n"
       "  The chunk store's save/load throughput per tier vs. a plain file copy of the same bytes,\n"
       "  and recall from disk vs. re-prefill.\n"
       "  --model PATH     default: a random-weight model of --preset's shape (--layers overrides\n"
       "                   its depth), kept in --cache\n"
       "  --tokens N       the chunk's length;  --reps N   repetitions\n"
       "  --dir DIR        store location (default: the system temp dir)\n"
       "  --json PATH      where the JSON goes (default bench_store.json)\n"
       "  --threads N      intra-op threads (default: all cores)\n"
       "  --remote URL     also recall from a Redis remote tier (redis://host:port)\n"
       "  --procs N, --share-keys K, --share-bytes B   N processes sharing one store directory:\n"
       "                   K keys of B bytes each; lookups/s, hit rate, puts, blob bytes\n"},
      argc, argv, 1);
  Options o;
  o.model = a.get_or("--model", o.model);
  o.preset = a.get_or("--preset", o.preset);
  o.layers = a.get_int("--layers", o.layers, 0);
  o.tokens = a.get_int("--tokens", o.tokens, 1);
  o.reps = static_cast<int>(a.get_int("--reps", o.reps, 1));
  o.dir = a.get_or("--dir", o.dir);
  o.json = a.get_or("--json", o.json);
  o.cache = a.get_or("--cache", o.cache);
  o.threads = static_cast<int>(a.get_int("--threads", o.threads, 1));
  o.remote = a.get_or("--remote", o.remote);
  o.share_keys = a.get_int("--share-keys", o.share_keys, 1);
  o.share_bytes = a.get_int("--share-bytes", o.share_bytes, 8);
  if (const auto list = a.get("--procs")) {
    o.procs.clear();
    for (const std::string& item : orbit::cli::split_commas(*list)) {
      ORBIT_CHECK(!item.empty() && item.find_first_not_of("0123456789") == std::string::npos && std::stoi(item) >= 1 &&
                      std::stoi(item) <= 64,
                  "bench_store: --procs '" << *list << "': expected counts 1..64 separated by commas");
      o.procs.push_back(std::stoi(item));
    }
  }
  return o;
}

// Median seconds of `reps` runs of `body` (each run may prepare with `setup`, untimed).
double median_seconds(int reps, const std::function<void()>& setup, const std::function<void()>& body) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    if (setup) setup();
    const auto start = Clock::now();
    body();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void plain_write(const std::string& path, const std::vector<at::Tensor>& tensors) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ORBIT_CHECK(fd >= 0, "cannot create " << path);
  for (const at::Tensor& t : tensors) {
    const char* p = static_cast<const char*>(t.data_ptr());
    std::size_t left = t.nbytes();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      ORBIT_CHECK(n > 0, "write failed on " << path);
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  ORBIT_CHECK(::fsync(fd) == 0 && ::close(fd) == 0, "fsync failed on " << path);
}

at::Tensor plain_read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ORBIT_CHECK(fd >= 0, "cannot open " << path);
  at::Tensor out = at::empty({static_cast<int64_t>(fs::file_size(path))}, at::kByte);
  char* p = static_cast<char*>(out.data_ptr());
  std::size_t left = out.numel();
  while (left > 0) {
    const ssize_t n = ::read(fd, p, left);
    ORBIT_CHECK(n > 0, "read failed on " << path);
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  ::close(fd);
  return out;
}

std::string load_or_generate(const Options& o) {
  if (!o.model.empty()) return o.model;
  const std::string name = o.preset + (o.layers > 0 ? "-" + std::to_string(o.layers) + "l" : "");
  const std::string path = (fs::path(o.cache) / name).string();
  if (!fs::exists(fs::path(path) / "config.json")) {
    std::fprintf(stderr, "generating a random %s model in %s (bf16 on disk, once)...\n", name.c_str(), path.c_str());
    rt::GeneratorOptions g;
    g.config = rt::generator_preset(o.preset);
    if (o.layers > 0) g.config.num_layers = o.layers;
    g.dtype = "bfloat16";
    g.overwrite = true;
    rt::generate_model(g, path);
  }
  return path;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc > 1 && std::string(argv[1]) == "--share-worker") return orbit::bench::run_share_worker(argc, argv);
  const Options o = parse(argc, argv);
  at::set_num_threads(o.threads);
  const std::string path = load_or_generate(o);
  const auto model = rt::load_model(path);
  const rt::ModelConfig& c = model->config();
  ORBIT_CHECK(o.tokens <= c.max_position_embeddings, "--tokens: past the model's limit " << c.max_position_embeddings);
  std::mt19937 rng(1);
  rt::ChunkInput chunk;
  for (int64_t i = 0; i < o.tokens; ++i)
    chunk.tokens.push_back(std::uniform_int_distribution<int64_t>(0, c.vocab_size - 1)(rng));

  // ---- recall from disk vs. re-prefill -------------------------------------------------------------
  rt::Content canonical;
  const double prefill_s =
      median_seconds(std::max(1, o.reps / 2), nullptr, [&] { canonical = rt::canonical(*model, chunk); });
  const st::ValuePtr value = st::canonical_value(canonical);
  const double mib = static_cast<double>(value->bytes()) / (1 << 20);
  std::printf("model %s: %s, %lld layers, content widths %lld/%lld; chunk of %lld tokens = %.1f MiB of KV (float32)\n",
              path.c_str(), rt::arch_name(c.arch), (long long)c.num_layers, (long long)c.content_widths()[0],
              (long long)c.content_widths()[1], (long long)o.tokens, mib);
  std::printf("threads %d, median of %d runs\n\n", at::get_num_threads(), o.reps);

  const fs::path root = fs::path(o.dir.empty() ? fs::temp_directory_path().string() : o.dir) /
                        ("orbit-bench-store-" + std::to_string(::getpid()));
  fs::create_directories(root);
  const std::string key = orbit::chunk_key_tokens(model->fingerprint(), chunk.tokens);
  nlohmann::json tiers = nlohmann::json::array();
  auto row = [&](const char* name, double save_s, double load_s, double plain_save_s, double plain_load_s) {
    const double save = mib / save_s, load = mib / load_s;
    std::printf("%-14s %11.0f %11.0f %14.2fx %14.2fx\n", name, save, load, plain_save_s / save_s,
                plain_load_s / load_s);
    tiers.push_back({{"tier", name},
                     {"save_mib_s", save},
                     {"load_mib_s", load},
                     {"save_vs_plain", plain_save_s / save_s},
                     {"load_vs_plain", plain_load_s / load_s},
                     {"save_s", save_s},
                     {"load_s", load_s}});
  };

  // ---- plain file copy of the same bytes -----------------------------------------------------------
  std::vector<at::Tensor> raw;
  for (const st::NamedTensor& t : value->tensors) raw.push_back(t.tensor);
  const std::string plain = (root / "plain.bin").string();
  const double plain_save = median_seconds(o.reps, nullptr, [&] { plain_write(plain, raw); });
  const double plain_load = median_seconds(o.reps, nullptr, [&] { (void)plain_read(plain); });
  std::printf("%-14s %11s %11s %15s %15s\n", "tier", "save MiB/s", "load MiB/s", "save vs plain", "load vs plain");
  row("plain copy", plain_save, plain_load, plain_save, plain_load);

  // ---- each tier -----------------------------------------------------------------------------------
  auto store_options = [&](const std::string& sub, bool int8) {
    st::ChunkStoreOptions so;
    so.model_fingerprint = model->fingerprint();
    so.dir = sub.empty() ? "" : (root / sub).string();
    so.host_budget_bytes = int64_t{8} << 30;
    so.int8_cold_tier = int8;
    so.device = st::DeviceTierOptions{st::device_layout_for(c, 16), (o.tokens + 15) / 16 + 1};
    return so;
  };
  double host_recall_s = 0;
  {
    st::ChunkStore memory(store_options("", false));
    st::PutOptions dev{orbit::StoreTier::kDevice, false, /*replace=*/true};
    const double save = median_seconds(
        o.reps, nullptr, [&] { ORBIT_CHECK(memory.put(key, st::canonical_value(canonical), dev), "device put"); });
    const double load = median_seconds(o.reps, nullptr, [&] { (void)memory.get(key).value(); });
    row("device (pool)", save, load, plain_save, plain_load);
    st::PutOptions host{orbit::StoreTier::kHost, false, /*replace=*/true};
    const double hsave = median_seconds(
        o.reps, nullptr, [&] { ORBIT_CHECK(memory.put(key, st::canonical_value(canonical), host), "host put"); });
    const double hload = median_seconds(o.reps, nullptr, [&] { (void)memory.get(key).value(); });
    row("host", hsave, hload, plain_save, plain_load);
    host_recall_s = hload;
  }
  double recall_s = 0;
  for (const bool int8 : {false, true}) {
    const std::string sub = int8 ? "store-int8" : "store";
    st::PutOptions disk{orbit::StoreTier::kDisk, false, /*replace=*/true};
    double save = 0;
    {
      st::ChunkStore store(store_options(sub, int8));
      save = median_seconds(o.reps, nullptr,
                            [&] { ORBIT_CHECK(store.put(key, st::canonical_value(canonical), disk), "disk put"); });
    }
    // Loads from a freshly opened store each time: the index lookup, the read, the checksum, the decode.
    std::unique_ptr<st::ChunkStore> store;
    rt::Content loaded;
    const double load = median_seconds(
        o.reps,
        [&] {
          store.reset();
          store = std::make_unique<st::ChunkStore>(store_options(sub, int8));
        },
        [&] { loaded = st::content_from_value(*store->get(key, st::GetOptions{false}).value()); });
    row(int8 ? "disk (int8)" : "disk", save, load, plain_save, plain_load);
    if (!int8) recall_s = load;
  }
  std::printf(
      "\nsave = copying the runtime's tensors into a stored value + put; host load hands out the cached\n"
      "value itself (no bytes move); disk load = index lookup, read, SHA-256 check, decode\n");

  // ---- recall from each tier vs. re-prefill ---------------------------------------------------------
  nlohmann::json recall = {{"reprefill_s", prefill_s},
                           {"host_s", host_recall_s},
                           {"disk_s", recall_s},
                           {"disk_speedup", prefill_s / recall_s}};
  std::printf("\nrecall of a %lld-token chunk (%.1f MiB of KV), median of %d:\n", (long long)o.tokens, mib, o.reps);
  std::printf("  %-26s %10s %18s\n", "from", "seconds", "vs re-prefill");
  std::printf("  %-26s %10.4f %17.1fx\n", "re-prefill (forward)", prefill_s, 1.0);
  std::printf("  %-26s %10.4f %17.1fx\n", "host (memory tier)", host_recall_s, prefill_s / host_recall_s);
  std::printf("  %-26s %10.4f %17.1fx\n", "disk (read+verify+decode)", recall_s, prefill_s / recall_s);
  std::unique_ptr<orbit::bench::LocalRedis> redis;
  std::string remote = o.remote == "auto" ? "" : o.remote;
  if (o.remote == "auto") {
    redis = std::make_unique<orbit::bench::LocalRedis>((root / "redis").string());
    remote = redis->url();
  }
  if (o.remote != "none") {
    const orbit::bench::RemoteRecall r =
        orbit::bench::measure_remote_recall(remote, model->fingerprint(), key, st::canonical_value(canonical), o.reps);
    std::printf("  %-26s %10.4f %17.1fx   (%s; %.1f MiB on the wire, %lld/%lld hits; save %.3f s)\n", "remote (redis)",
                r.load_s, prefill_s / r.load_s, remote.c_str(), static_cast<double>(r.blob_bytes) / (1 << 20),
                (long long)r.hits, (long long)r.gets, r.save_s);
    recall["remote_s"] = r.load_s;
    recall["remote_speedup"] = prefill_s / r.load_s;
    recall["remote_save_s"] = r.save_s;
    recall["remote_blob_bytes"] = r.blob_bytes;
    recall["remote_hit_rate"] = r.gets ? static_cast<double>(r.hits) / static_cast<double>(r.gets) : 0.0;
    recall["remote_url"] = remote;
  }
  redis.reset();

  // ---- N processes, one directory ------------------------------------------------------------------
  nlohmann::json shared = nlohmann::json::array();
  std::printf("\n%zu runs of N processes sharing one store directory (%lld keys each, %.1f MiB values):\n",
              o.procs.size(), (long long)o.share_keys, static_cast<double>(o.share_bytes) / (1 << 20));
  std::printf("  %5s %10s %12s %10s %8s %12s %12s\n", "N", "lookups", "lookups/s", "hit rate", "puts", "MiB read",
              "blob MiB");
  double base_rate = 0;
  for (int n : o.procs) {
    const orbit::bench::ShareResult r = orbit::bench::measure_shared_directory(
        fs::canonical("/proc/self/exe").string(), (root / ("shared-" + std::to_string(n))).string(), n, o.share_keys,
        o.share_bytes);
    const double rate = static_cast<double>(r.lookups) / r.seconds;
    if (base_rate == 0) base_rate = rate;
    const double hit_rate = static_cast<double>(r.hits) / static_cast<double>(r.lookups);
    std::printf("  %5d %10lld %12.0f %9.1f%% %8lld %12.1f %12.1f   (%.2fx the first row's lookups/s)\n", n,
                (long long)r.lookups, rate, 100 * hit_rate, (long long)r.puts,
                static_cast<double>(r.bytes_read) / (1 << 20), static_cast<double>(r.blob_bytes) / (1 << 20),
                rate / base_rate);
    shared.push_back({{"processes", n},
                      {"lookups", r.lookups},
                      {"seconds", r.seconds},
                      {"lookups_per_s", rate},
                      {"wall_seconds", r.wall_seconds},
                      {"hits", r.hits},
                      {"puts", r.puts},
                      {"hit_rate", hit_rate},
                      {"bytes_read", r.bytes_read},
                      {"blob_bytes", r.blob_bytes}});
  }
  std::printf(
      "  lookups/s: all processes' lookups over the slowest one's loop. Puts above the key count are\n"
      "  races (two processes missed one key at once and both computed it); it is stored once (blob MiB)\n");
  const nlohmann::json report = {{"benchmark", "store"},   {"model", path},
                                 {"layers", c.num_layers}, {"tokens", o.tokens},
                                 {"kv_mib", mib},          {"threads", at::get_num_threads()},
                                 {"reps", o.reps},         {"tiers", tiers},
                                 {"recall", recall},       {"shared_directory", shared}};
  std::ofstream(o.json) << report.dump(2) << "\n";
  std::printf("wrote %s\n", o.json.c_str());
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
} catch (const orbit::Error& e) {
  std::fprintf(stderr, "bench_store: error: %s\n", e.what());
  return 1;
}
