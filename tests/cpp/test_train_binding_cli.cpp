// train_binding (tools/train) run as a program: arguments refused before any training, naming the argument;
// --help; and a run of two steps whose --out holds the four files it writes, replaced as a whole by a second
// run and never mixed with files it did not write.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

struct Run {
  int status = -1;  // exit status, -1 when killed by a signal
  std::string out;  // stdout and stderr together
};

// train_binding with `args` (a shell fragment), one thread.
Run train_binding(const std::string& args) {
  Run r;
  const std::string command = "OMP_NUM_THREADS=1 " + std::string(ORBIT_TRAIN_BINDING_PATH) + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer;
  std::size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.out.append(buffer.data(), n);
  const int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// A fresh directory of its own under the system's temporary directory, removed with its contents.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("orbit_train_binding_cli_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

// The JSON header of a safetensors file (8-byte little-endian length, then the header).
nlohmann::json safetensors_header(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::array<unsigned char, 8> size_bytes{};
  in.read(reinterpret_cast<char*>(size_bytes.data()), 8);
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = size << 8 | size_bytes[static_cast<std::size_t>(i)];
  REQUIRE(size < (1u << 20));
  std::string header(size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(size));
  REQUIRE(in.good());
  return nlohmann::json::parse(header);
}

// A one-layer model on the shortest episodes; with --steps 2, a couple of seconds.
const std::string kTiny =
    "--batch 2 --eval-every 0 --eval-episodes 2 --warmup 0 --layers 1 --aux-layer 0 --frame-max 8";

}  // namespace

TEST_CASE("train_binding refuses a bad --out before training", "[train_binding][cli][cpu]") {
  TempDir dir;
  const fs::path file = dir.path / "afile";
  std::ofstream(file) << "not a directory\n";
  for (const std::string& out :
       {file.string(), (file / "sub").string(), std::string("--weird"), (dir.path / "missing" / "x").string()}) {
    INFO(out);
    const Run r = train_binding(kTiny + " --steps 2 --out " + out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Contains("'--out'"));
    CHECK_THAT(r.out, !Contains("model gqa: "));  // train() never started
  }
}

TEST_CASE("train_binding names the argument whose value it refuses", "[train_binding][cli][cpu]") {
  TempDir dir;
  const std::string out = " --out " + (dir.path / "run").string();
  const std::pair<const char*, const char*> cases[] = {
      {"--aux-layer 4", "'--aux-layer'"},
      {"--steps 4294967297", "'--steps'"},
      {"--frame-max 600", "'--frame-max'"},
      {"--lr nan", "'--lr'"},
      {"--lr 0", "'--lr'"},
      {"--stop-at 2", "'--stop-at'"},
      {"--caption-weight -1", "'--caption-weight'"},
      {"--gap-prob 7", "'--gap-prob'"},
      {"--max-intros 6", "'--max-intros'"},
      {"--max-gap-texts 0", "'--max-gap-texts'"},
      {"--stop-at 0.9 --eval-every 0", "'--stop-at'"},
  };
  for (const auto& [args, named] : cases) {
    INFO(args);
    const Run r = train_binding(std::string(args) + out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Contains(named));
    CHECK_THAT(r.out, !Contains("model gqa: "));
  }
  CHECK_FALSE(fs::exists(dir.path / "run"));
}

TEST_CASE("train_binding --help prints the usage and exits 0", "[train_binding][cli][cpu]") {
  const Run r = train_binding("--help");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("usage: train_binding --out DIR"));
  CHECK_THAT(r.out, Contains("--frame-max N"));
}

TEST_CASE("train_binding writes a loadable output, replaced whole by the next run", "[train_binding][cli][cpu]") {
  TempDir dir;
  const fs::path run = dir.path / "run";
  const Run first = train_binding(kTiny + " --steps 2 --seed 3 --out " + run.string());
  INFO(first.out);
  REQUIRE(first.status == 0);
  for (const char* file : {"config.json", "model.safetensors", "train_log.json", "README.md"}) {
    CHECK(fs::is_regular_file(run / file));
  }
  const nlohmann::json log = read_json(run / "train_log.json");
  CHECK(log["steps_run"] == 2);
  CHECK(log["eval_every"] == 0);
  CHECK(log["eval_episodes"] == 2);
  CHECK(log["loss_curve"].size() == 2);
  CHECK(read_json(run / "config.json")["num_hidden_layers"] == 1);
  CHECK(safetensors_header(run / "model.safetensors").contains("model.embed_tokens.weight"));

  // A second run replaces all four files; nothing is left beside --out.
  const Run second = train_binding(kTiny + " --seed 4 --steps 1 --out " + run.string());
  INFO(second.out);
  REQUIRE(second.status == 0);
  const nlohmann::json again = read_json(run / "train_log.json");
  CHECK(again["steps_run"] == 1);
  CHECK(again["fingerprint"] != log["fingerprint"]);
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);

  // A file the tool did not write makes --out someone else's: refused, and left as it was.
  std::ofstream(run / "notes.txt") << "mine\n";
  const Run third = train_binding(kTiny + " --steps 2 --out " + run.string());
  CHECK(third.status == 2);
  CHECK_THAT(third.out, Contains("notes.txt"));
  CHECK(read_json(run / "train_log.json")["fingerprint"] == again["fingerprint"]);
}

}  // namespace ORBIT_TEST_FILE
