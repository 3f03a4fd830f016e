// The `orbit` CLI end to end: info, logits (checked against the in-process forward), make-model, and
// the exit status and message of bad input.
#include "orbit_catch.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "orbit/runtime/loader.h"
#include "orbit/runtime/safetensors.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;

namespace {

using orbit::test::cli;
using orbit::test::CliRun;

}  // namespace

TEST_CASE("orbit info --json describes the bundled model", "[cli][model][cpu]") {
  CliRun r = cli("info --json --model " + orbit::test::stories_path());
  REQUIRE(r.status == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["arch"] == "llama");
  CHECK(j["num_layers"] == 5);
  CHECK(j["num_kv_heads"] == 4);
  CHECK(j["rope"]["layout"] == "interleaved");
  CHECK(j["parameters"] == 260032);
  CHECK(j["fingerprint"] == orbit::runtime::load_model(orbit::test::stories_path())->fingerprint());
  CHECK(j["fingerprint"].get<std::string>().size() == 64);
}

TEST_CASE("orbit logits prints the forward's logits as JSON", "[cli][model][cpu]") {
  CliRun last = cli("logits --model " + orbit::test::stories_path() + " --tokens 1,403,407,261");
  REQUIRE(last.status == 0);
  auto j = nlohmann::json::parse(last.out);
  CHECK(j["tokens"] == std::vector<int64_t>({1, 403, 407, 261}));
  REQUIRE(j["logits"].size() == 1);
  REQUIRE(j["logits"][0].size() == 512);

  CliRun all = cli("logits --all-positions --model " + orbit::test::stories_path() + " --tokens 1,403,407,261");
  REQUIRE(all.status == 0);
  auto rows = nlohmann::json::parse(all.out)["logits"];
  REQUIRE(rows.size() == 4);
  auto model = orbit::runtime::load_model(orbit::test::stories_path());
  orbit::runtime::ForwardInput in;
  in.tokens = {1, 403, 407, 261};
  orbit::runtime::ForwardOptions o;
  o.logits = orbit::runtime::LogitsMode::kAll;
  const at::Tensor expected = model->forward(in, nullptr, o).logits;
  double worst = 0;
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t v = 0; v < 512; ++v)
      worst = std::max(worst, std::abs(rows[t][v].get<double>() - expected[t][v].item<double>()));
  // Another process may split the BLAS work differently (threads, row counts): last-bit differences only.
  CHECK(worst < 1e-5);
  double last_row = 0;
  for (int64_t v = 0; v < 512; ++v) {
    last_row = std::max(last_row, std::abs(rows[3][v].get<double>() - j["logits"][0][v].get<double>()));
  }
  CHECK(last_row < 1e-5);
}

TEST_CASE("orbit make-model writes a model that info reads", "[cli][generator][cpu]") {
  orbit::test::TempDir dir;
  CliRun made =
      cli("make-model --arch qwen2 --layers 3 --hidden 32 --heads 4 --kv-heads 2 --intermediate 48 --vocab 100 "
          "--dtype bfloat16 --shard-mb 1 --seed 5 --out " +
          (dir / "m"));
  REQUIRE(made.status == 0);
  CliRun info = cli("info --json --model " + (dir / "m"));
  REQUIRE(info.status == 0);
  auto j = nlohmann::json::parse(info.out);
  CHECK(j["arch"] == "qwen2");
  CHECK(j["num_layers"] == 3);
  CHECK(j["head_dim"] == 8);
  CHECK(j["weight_dtype"] == "bfloat16");
  CHECK(j["attention_bias"] == true);
  CliRun again = cli("make-model --arch qwen2 --out " + (dir / "m"));
  CHECK(again.status == 1);
  CHECK_THAT(again.out, Contains("already holds a model"));
}

TEST_CASE("bad CLI input exits non-zero naming the argument", "[cli][errors][cpu]") {
  const std::string model = " --model " + orbit::test::stories_path();
  CliRun r = cli("logits" + model + " --tokens 1,x,3");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("--tokens") && Contains("'x'"));
  r = cli("logits" + model + " --tokens 1,512");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("--tokens") && Contains("512"));
  r = cli("logits --model /nonexistent/model.bin --tokens 1");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("/nonexistent/model.bin") && Contains("no such file"));
  r = cli("logits" + model);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("missing required argument '--tokens'"));
  r = cli("logits" + model + " --tokens 1 --bogus 2");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("unknown argument '--bogus'"));
  r = cli("frobnicate");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Contains("unknown command 'frobnicate'"));
  r = cli("store frobnicate --store /tmp/orbit-never");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Contains("unknown subcommand 'frobnicate'") && Contains("usage: orbit store"));
  r = cli("make-model --preset nope --out /tmp/orbit-never");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("unknown model preset 'nope'"));
  r = cli("make-model --preset '' --out /tmp/orbit-never");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("make-model: argument '--preset' is empty (leave it out for the tiny preset of --arch)"));
  r = cli("logits" + model + " --tokens 1 --all-positions --all-positions");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("logits: argument '--all-positions' given twice"));
  r = cli("logits" + model + " --tokens 1,99999999999999999999");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("--tokens: item 1 ('99999999999999999999') is out of range (past a 64-bit integer)"));
  // Inputs past the model's positions are named by their argument, not by the forward's positions.
  std::string many = "5";
  for (int i = 0; i < 600; ++i) many += ",5";
  r = cli("logits" + model + " --tokens " + many);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("logits: --tokens gives 601 tokens, more than the model's 512 positions"));
  std::string words;
  for (int i = 0; i < 300; ++i) words += "the cat ";
  r = cli("generate" + model + " --prompt '" + words + "'");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("generate: --prompt gives 902 tokens, and the model's 512 positions leave no room"));
  // Weights past float16's range were written as inf, and the model refused when loaded.
  r = cli("make-model --init-std 1e30 --dtype float16 --out /tmp/orbit-never");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("argument '--init-std' 1e+30 draws weights past float16's largest value"));
}

namespace {

// A FIFO at `path`; the test fails when one cannot be made.
void make_fifo(const std::string& path) { REQUIRE(::mkfifo(path.c_str(), 0600) == 0); }

bool is_fifo(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

}  // namespace

TEST_CASE("outputs are never renamed over a FIFO or device", "[cli][errors][cpu]") {
  // Writing a temporary file and renaming it over the target replaced the special file (as root,
  // `--out /dev/null` would destroy /dev/null). A FIFO stands in for any special file here.
  orbit::test::TempDir dir;
  const std::string fifo = dir / "out.fifo";
  make_fifo(fifo);
  const CliRun r = cli("make-trace --kind web --steps 3 --model " + orbit::test::stories_path() + " --out " + fifo);
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains(fifo + ": refusing to write the trace file (--out) over a FIFO"));
  CHECK(is_fifo(fifo));

  const at::Tensor t = at::ones({2});
  CHECK_THROWS_WITH(orbit::runtime::write_safetensors(fifo, {{"t", t}}),
                    Contains(fifo + ": refusing to write a safetensors file over a FIFO"));
  CHECK(is_fifo(fifo));
}

TEST_CASE("a FIFO given as an input is refused without waiting for a writer", "[cli][errors][cpu]") {
  orbit::test::TempDir dir;
  const std::string fifo = dir / "in.fifo";
  make_fifo(fifo);
  // Each of these blocked forever in open().
  CliRun r = cli("info --model " + fifo);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains(fifo + ": the model (a llama2.c .bin file or a Hugging Face directory) must be a "
                                    "regular file, but this is a FIFO"));
  r = cli("replay " + fifo + " --model " + orbit::test::stories_path());
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains(fifo + ": the trace file must be a regular file, but this is a FIFO"));
  CHECK_THROWS_WITH(orbit::runtime::SafetensorsFile(fifo), Contains(fifo + ": is not a regular file"));
}

TEST_CASE("make-model writes only into a new or empty directory unless --force", "[cli][errors][cpu]") {
  orbit::test::TempDir dir;
  const std::string out = dir / "home";
  std::filesystem::create_directories(out);
  std::ofstream(out + "/notes.txt") << "keep me\n";
  const std::string args = "make-model --preset tiny-llama --out " + out;
  CliRun r = cli(args);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains(out + ": is not empty (holds 'notes.txt')") && Contains("--force"));
  CHECK(!std::filesystem::exists(out + "/config.json"));
  r = cli(args + " --force");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(std::filesystem::exists(out + "/config.json"));
  CHECK(std::filesystem::exists(out + "/notes.txt"));
}

TEST_CASE("a refused make-model changes nothing on disk, even with --force", "[cli][errors][cpu]") {
  orbit::test::TempDir dir;
  const std::string out = dir / "m";
  REQUIRE(cli("make-model --preset tiny-llama --out " + out).status == 0);
  const std::string before = orbit::runtime::load_model(out)->fingerprint();
  // Too large for this machine's memory: refused after the directory was checked, before it changes.
  CliRun r = cli("make-model --hidden 1000000 --force --out " + out);
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("bytes of memory"));
  CHECK(std::filesystem::exists(out + "/model.safetensors"));
  CHECK(orbit::runtime::load_model(out)->fingerprint() == before);
  // A refused run into a missing directory does not create it.
  const std::string fresh = dir / "fresh";
  r = cli("make-model --hidden 1000000 --out " + fresh);
  CHECK(r.status == 1);
  CHECK(!std::filesystem::exists(fresh));
}

// A run killed while it writes (here by its file-size limit: `ulimit -f` blocks of 512 bytes for /bin/sh, past
// which SIGXFSZ ends it) removed the model --force replaces first, and left nothing that loads.
TEST_CASE("make-model --force killed part way keeps the old model whole, and says what it left",
          "[cli][errors][cpu][kill]") {
  orbit::test::TempDir dir;
  const std::string out = dir / "m";
  REQUIRE(cli("make-model --preset tiny-llama --out " + out).status == 0);
  const std::string before = orbit::runtime::load_model(out)->fingerprint();
  const CliRun killed =
      orbit::test::run_command("ulimit -f 200; exec " + std::string(ORBIT_CLI_PATH) +
                               " make-model --preset tiny-llama --hidden 128 --seed 9 --force --out " + out + " 2>&1");
  INFO(killed.out);
  CHECK(killed.status != 0);
  CHECK(orbit::runtime::load_model(out)->fingerprint() == before);
  std::string left;
  for (const auto& entry : std::filesystem::directory_iterator(out)) {
    if (entry.path().filename().string().rfind(".make-model-", 0) == 0) left = entry.path().filename().string();
  }
  REQUIRE(!left.empty());
  CliRun r = cli("make-model --preset tiny-llama --seed 9 --out " + out);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains(out + ": holds " + left + ", what an interrupted make-model left") && Contains("--force"));
  r = cli("make-model --preset tiny-llama --seed 9 --force --out " + out);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(orbit::runtime::load_model(out)->fingerprint() != before);
  CHECK(!std::filesystem::exists(out + "/" + left));
}

TEST_CASE("replay --json writes its report atomically, never over a FIFO, and writes /dev/null as it is",
          "[cli][errors][cpu]") {
  orbit::test::TempDir dir;
  const std::string trace = std::string(ORBIT_TEST_DATA_DIR) + "/traces/lookback.json";
  const std::string replay = "replay " + trace + " --model " + orbit::test::stories_path() + " --quiet --no-fidelity";
  // A FIFO is refused before the replay runs; writing into it blocked until a reader appeared. The
  // timeout turns such a hang into a failure.
  const std::string fifo = dir / "report.fifo";
  make_fifo(fifo);
  CliRun r = orbit::test::run_command("timeout 60 " + std::string(ORBIT_CLI_PATH) + " " + replay + " --json " + fifo);
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains(fifo + ": refusing to write the replay report (--json) over a FIFO"));
  CHECK(is_fifo(fifo));
  // A regular file is replaced whole, with no temporary file left beside it.
  const std::string report = dir / "report.json";
  std::ofstream(report) << "old contents that are longer than nothing";
  r = cli(replay + " --json " + report);
  REQUIRE(r.status == 0);
  std::ifstream in(report);
  CHECK(nlohmann::json::parse(in).contains("policies"));
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) files += entry.is_regular_file();
  CHECK(files == 1);
  // What a writer killed part way left (its pid gone) is removed by the next write; a live writer's is not.
  const std::string stale = report + ".tmp.999999999";  // above any pid_max: no such process
  const std::string live = report + ".tmp." + std::to_string(::getpid());
  std::ofstream(stale) << "{\"cut";
  std::ofstream(live) << "{\"being written";
  REQUIRE(cli(replay + " --json " + report).status == 0);
  CHECK(!std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(live));
  std::filesystem::remove(live);
  // A symbolic link to the report: the file it names is replaced, the link kept (renaming over the link replaced
  // the link with a file).
  const std::string link = dir / "latest.json";
  std::filesystem::create_symlink(report, link);
  std::ofstream(report) << "old";
  REQUIRE(cli(replay + " --json " + link).status == 0);
  CHECK(std::filesystem::is_symlink(link));
  std::ifstream again(report);
  CHECK(nlohmann::json::parse(again).contains("policies"));
  // A private report stays private (the new file took the umask's mode, 0644: readable by everyone).
  std::filesystem::permissions(report, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  REQUIRE(cli(replay + " --json " + report).status == 0);
  CHECK(std::filesystem::status(report).permissions() ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  // A character device is written to as it is: /dev/null takes the report and stays /dev/null.
  r = cli(replay + " --json /dev/null");
  INFO(r.out);
  CHECK(r.status == 0);
  struct stat st {};
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
}

TEST_CASE("a directory without config.json that holds a llama2.c model names its .bin", "[cli][errors][cpu]") {
  // The model beside its tokenizer (tok512.bin, which is not offered): the error names the .bin to give.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("orbit-bin-dir-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path stories(orbit::test::stories_path());
  fs::copy_file(stories, dir / "stories260K.bin");
  fs::copy_file(stories.parent_path() / "tok512.bin", dir / "tok512.bin");
  const std::string model = (dir / "stories260K.bin").string();
  const std::string commands[] = {"info --model " + dir.string(),                // load_model
                                  "tokenize --text hi --model " + dir.string(),  // the CLI's config.json check
                                  "serve --port 0 --model " + dir.string()};
  for (const std::string& command : commands) {
    CliRun r = cli(command);
    INFO(command);
    CHECK(r.status == 1);
    CHECK_THAT(r.out, Contains("no config.json") && Contains("give its path, " + model));
    CHECK_THAT(r.out, !Contains("tok512.bin"));
  }
  fs::copy_file(stories, dir / "other.bin");
  CliRun two = cli("info --model " + dir.string());
  CHECK_THAT(two.out, Contains("give one's path, " + (dir / "other.bin").string() + " or " + model));
  fs::remove_all(dir);
}

TEST_CASE("an option that would be ignored, or wrap around, is refused naming it", "[cli][errors][cpu]") {
  orbit::test::TempDir dir;
  const std::string model = " --model " + orbit::test::stories_path();
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      // Greedy decoding: nucleus sampling and the seed would change nothing.
      {"generate" + model + " --prompt Once --top-p 0.5", "'--top-p' applies only with --temperature > 0"},
      {"generate" + model + " --prompt Once --seed 7", "'--seed' applies only with --temperature > 0"},
      {"generate" + model + " --prompt Once --temperature inf", "'--temperature' must be a finite number >= 0"},
      // Token ids read no tokenizer: the file was not even opened.
      {"fidelity" + model + " --chunk 4,5,6 --tokenizer /nonexistent", "'--tokenizer' goes with --chunk-text"},
      // Only web and agent draw text as random ids that sampled text replaces.
      {"make-trace --kind video --sample-text --out " + (dir / "t.json") + model,
       "'--sample-text' applies to --kind web and agent only (got 'video')"},
      {"make-model --seed -1 --out " + (dir / "m1"), "'--seed' must be an integer in [0, 2^64), got '-1'"},
      {"make-model --rope-scaling linear --rope-original-max 100 --out " + (dir / "m2"),
       "--rope-original-max: linear RoPE scaling does not use it"},
      {"replay " + std::string(ORBIT_TEST_DATA_DIR) + "/traces/lookback.json" + model + " --page-size 0",
       "'--page-size' must be >= 1, got 0"},
      {"replay " + std::string(ORBIT_TEST_DATA_DIR) + "/traces/lookback.json" + model + " --policy default,",
       "argument '--policy' ('default,'): policy 2 is empty (a stray comma?"},
      // Values past int were cast first and checked after: 2^32 + 1 read as port 1, and as many threads as
      // the remainder asked for.
      {"serve --port 4294967297" + model, "'--port' must be <= 65535, got 4294967297"},
      {"serve --port 0 --threads 99999999999" + model, "'--threads' must be <= 4096, got 99999999999"},
      {"serve --port 0 --drain-seconds 4294967296" + model, "'--drain-seconds' must be <= 86400"},
      {"serve --port 0 --policy bogus" + model, "serve: --policy: policy 'bogus'"},
      {"serve --port 0 --name ''" + model, "'--name' is empty"},
      {"version extra", "version: unknown argument 'extra'"},
      {"serve --port 0 --host 999.1.1.1" + model, "serve: --host 999.1.1.1: cannot bind any port"},
      // A fraction a loader would truncate: the model written would not be the one asked for.
      {"make-model --head-dim 16 --partial-rotary 0.3 --out " + (dir / "m3"),
       "--head-dim × --partial-rotary = 16 × 0.3 = 4.8 is not a whole number of rotary dimensions"},
      {"logits" + model + " --tokens 1,2,3 --positions -1,0,1", "--positions: position -1 is negative"},
      {"store stat --store " + dir.path().string() + " --remote ''", "store stat: argument '--remote': remote ''"},
  };
  for (const Case& c : cases) {
    CliRun r = orbit::test::run_command("timeout 120 " + std::string(ORBIT_CLI_PATH) + " " + c.args);
    INFO(c.args << "\n" << r.out);
    CHECK(r.status == 1);
    CHECK_THAT(r.out, Contains(c.message));
  }
  CHECK(!std::filesystem::exists(dir / "t.json"));
  CHECK(!std::filesystem::exists(dir / "m2"));
  CHECK(!std::filesystem::exists(dir / "m3"));
}

TEST_CASE("make-model and make-trace errors name the option typed, not the field it sets", "[cli][errors][cpu]") {
  orbit::test::TempDir dir;
  const std::string model = " --model " + orbit::test::stories_path();
  const std::string m = " --out " + (dir / "m");
  const std::string t = " --out " + (dir / "t.json") + model;
  const std::pair<std::string, std::string> cases[] = {
      {"make-model --theta 0" + m, "make-model: argument '--theta' must be positive, got 0"},
      {"make-model --vocab 0" + m, "make-model: argument '--vocab' must be >= 1, got 0"},
      {"make-model --layers 0" + m, "make-model: argument '--layers' must be >= 1, got 0"},
      {"make-model --max-pos 0" + m, "make-model: argument '--max-pos' must be >= 1, got 0"},
      {"make-model --kv-heads 3" + m, "make-model: --kv-heads (3) must divide --heads (8)"},
      {"make-model --heads 6" + m, "make-model: --kv-heads (4, the preset's) must divide --heads (6)"},
      {"make-model --hidden 7" + m, "make-model: --hidden / --heads = 7 / 8 leaves a head_dim of 0"},
      {"make-model --init-std -1" + m, "make-model: argument '--init-std' must be positive, got -1"},
      {"make-model --shard-mb -1" + m, "make-model: argument '--shard-mb' must be >= 0, got -1"},
      {"make-model --dtype fp8" + m,
       "make-model: argument '--dtype': 'fp8' is not a compute dtype (expected float32, bfloat16 or float16)"},
      // The spellings every other command takes (FP16 was refused here only).
      {"make-model --init-std 1e30 --dtype FP16" + m, "'--init-std' 1e+30 draws weights past float16's largest value"},
      {"make-model --out ''",
       "make-model: argument '--out' is empty (give the directory to write the model to)"},  // was ": cannot create
                                                                                             // ..."
      {"make-model --rope-scaling yarn --rope-original-max 0" + m, "argument '--rope-original-max' must be >= 1"},
      {"make-model --arch deepseek_v2 --kv-lora-rank 0" + m, "argument '--kv-lora-rank' must be >= 1, got 0"},
      {"make-trace --chunk-tokens -3" + t, "make-trace: argument '--chunk-tokens' must be >= 0, got -3"},
      {"make-trace --chunk-tokens 65" + t, "make-trace: argument '--chunk-tokens' must be <= 64"},
      {"make-trace --steps 0" + t, "make-trace: argument '--steps' must be >= 1, got 0"},
      {"make-trace --kind nope" + t, "make-trace: argument '--kind' must be one of web"},
  };
  for (const auto& [args, message] : cases) {
    CliRun r = orbit::test::run_command("timeout 120 " + std::string(ORBIT_CLI_PATH) + " " + args);
    INFO(args << "\n" << r.out);
    CHECK(r.status == 1);
    CHECK_THAT(r.out, Contains(message));
    for (const char* internal : {"rope_theta", "field '", "chunk_tokens", "make_trace:", "generator:"}) {
      CHECK_THAT(r.out, !Contains(internal));
    }
  }
  CHECK(!std::filesystem::exists(dir / "m"));
  CHECK(!std::filesystem::exists(dir / "t.json"));
}

TEST_CASE("serve --threads the system cannot start is an error naming it, not an abort", "[cli][errors][cpu]") {
  // 4 GB of address space holds a few hundred 8 MiB thread stacks, not 4096: the threads already started
  // are joined before the error (an exception past them ended the process in std::terminate).
  CliRun r = orbit::test::run_command("ulimit -v 4000000; exec timeout 120 " + std::string(ORBIT_CLI_PATH) +
                                      " serve --port 0 --threads 4096 --model " + orbit::test::stories_path());
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("serve: --threads 4096: the system refused a thread after"));
}

}  // namespace ORBIT_TEST_FILE
