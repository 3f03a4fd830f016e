// orbit — command-line entry point.
#include <ATen/Parallel.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <thread>

#include "commands.h"
#include "orbit/common/error.h"
#include "orbit/version.h"

namespace {

const char* kUsage =
    "usage: orbit <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  info --model PATH [--json] [--device D] [--dtype T]\n"
    "      architecture, sizes, RoPE configuration and fingerprint of a model\n"
    "  logits --model PATH (--tokens 1,5,9[,...] | --text TEXT) [--positions P,...] [--all-positions] [--device D] "
    "[--dtype T]\n"
    "      JSON {\"tokens\": [...], \"logits\": [[...], ...]} (last position unless --all-positions)\n"
    "  tokenize --model PATH --text TEXT [--no-bos] [--pieces]\n"
    "      JSON {\"tokens\": [...]}: the model's tokenizer (llama2.c's tok512.bin / tokenizer.bin beside it, a\n"
    "      Hugging Face directory's tokenizer.json, or --tokenizer FILE)\n"
    "  generate --model PATH --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P] [--seed S] [--json]\n"
    "      the continuation of PROMPT as text (greedy unless --temperature > 0)\n"
    "  serve --model PATH [--host 127.0.0.1] [--port N] [--policy SPEC] [--store DIR] [--remote URL]\n"
    "      an OpenAI-compatible HTTP server: chat completions (streamed or not), completions, sessions as\n"
    "      windows, usage with orbit's forward tokens beside a radix cache's, /metrics (`orbit serve --help`)\n"
    "  make-model --out DIR [--preset NAME | --arch llama|qwen2] [size options] [--dtype D] [--seed N]\n"
    "      write a random-weight Hugging Face model directory (see `orbit make-model --help`)\n"
    "  fidelity --model PATH --chunk 4,5,6 [--context \"1,2,3;7,8,9\"] [--query 10,11] [--strategies S,...] [--json]\n"
    "           (or text: --chunk-text TEXT [--context-text \"TEXT|TEXT\"] [--query-text TEXT])\n"
    "      repair strategies for reused chunk B side by side vs. re-prefill: KL, eta, top-1, flip-recover, cost\n"
    "      (query default 1; strategies: reprefill, blind, prefix, cacheblend:R, firstk:K, "
    "patch:M[/MV][:deep][:rand],\n"
    "      orbit:M[/MV][:all][:rand])\n"
    "  replay TRACE --model PATH [--policy SPEC[,SPEC...]] [--json OUT|-] [--explain] [--no-fidelity]\n"
    "      replay a window-operation trace under the policy and the baselines (reprefill, prefix, blind) side by\n"
    "      side: forward tokens, bytes, device bytes, time and KL vs. re-prefill per step, totals and ratios\n"
    "  make-trace --model PATH --out FILE [--kind browse|coding|videoqa|fanout|rag|web|video|agent] [--steps N]\n"
    "             [--seed S]\n"
    "      write a generated agent trace (slides, reorders, look-backs, forks) for `orbit replay`; the agent\n"
    "      patterns are story-like text\n"
    "  store ls|stat|verify|gc|repair|reset-counts|forget-remote --store DIR [--json] [...]\n"
    "      list a chunk store, totals (and a remote tier's: stat --remote URL), verify every checksum, remove\n"
    "      unreferenced blobs (gc [--dry-run]), rebuild a lost index, and maintain the records of remote\n"
    "      writes (`orbit store --help`)\n"
    "  version (or --version)\n"
    "\n"
    "PATH is a llama2.c .bin file or a Hugging Face directory (config.json + *.safetensors).\n"
    "--device D (info, logits, fidelity, replay, serve): cpu (default), cuda or cuda:N; an error where there is no\n"
    "CUDA device. --dtype T: float32 (default), bfloat16 or float16 (float16 on CUDA only; also written fp32,\n"
    "bf16, fp16 or half, in any case); weights load straight into it.\n"
    "Every command answers --help with its arguments.\n"
    "Threads: every core, unless OMP_NUM_THREADS is set.\n";

// Runs `command` (argv[1]); its exit status.
int run_command(const std::string& command, int argc, char** argv) {
  if (command == "info") return orbit::cli::run_info(argc, argv, 2);
  if (command == "logits") return orbit::cli::run_logits(argc, argv, 2);
  if (command == "make-model") return orbit::cli::run_make_model(argc, argv, 2);
  if (command == "store") return orbit::cli::run_store(argc, argv, 2);
  if (command == "fidelity") return orbit::cli::run_fidelity(argc, argv, 2);
  if (command == "replay") return orbit::cli::run_replay(argc, argv, 2);
  if (command == "make-trace") return orbit::cli::run_make_trace(argc, argv, 2);
  if (command == "tokenize") return orbit::cli::run_tokenize(argc, argv, 2);
  if (command == "generate") return orbit::cli::run_generate(argc, argv, 2);
  if (command == "serve") return orbit::cli::run_serve(argc, argv, 2);
  if (command == "version" || command == "--version") {  // --version: as most command-line tools take it
    if (argc > 2 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h"))) {
      std::puts("usage: orbit version\n  Prints orbit's version.\naccepted arguments: --help");
      return 0;
    }
    ORBIT_CHECK(argc == 2, "version: unknown argument '" << argv[2] << "' (it takes none)");
    std::printf("orbit %s\n", orbit::version());
    return 0;
  }
  std::fprintf(stderr, "orbit: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}

// `status`, or 1 when what the command wrote to standard output did not all reach it (a full disk, a closed
// descriptor): a script reading the output must not take an empty or cut file for a success.
int written(const std::string& command, int status) {
  if (status != 0) return status;
  errno = 0;
  std::cout.flush();
  if (std::cout && std::fflush(stdout) == 0 && !std::ferror(stdout)) return status;
  std::fprintf(stderr, "orbit %s: error: writing standard output failed%s%s\n", command.c_str(), errno ? ": " : "",
               errno ? std::strerror(errno) : "");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  // Debian's libtorch can start with one intra-op thread; use every core unless OMP_NUM_THREADS says.
  if (std::getenv("OMP_NUM_THREADS") == nullptr && std::thread::hardware_concurrency() > 1) {
    at::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
  }
  try {
    return written(command, run_command(command, argc, argv));
  } catch (const orbit::Error& e) {
    std::fprintf(stderr, "orbit %s: error: %s\n", command.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orbit %s: internal error: %s\n", command.c_str(), e.what());
    return 3;
  }
}
