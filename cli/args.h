// A small command-line parser for the `orbit` subcommands and the benchmarks (library orbit_args):
// `--name value` options and `--flag` switches, each declared up front so an unknown, repeated or
// malformed argument is an error naming it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace orbit::cli {

struct ArgSpec {
  std::set<std::string> options;  // take a value: --model PATH
  std::set<std::string> flags;    // switches: --json
  // What `--help` (or -h) prints: a usage line and one line per argument. Every name in options and
  // flags should appear in it; the accepted names are listed after it either way.
  std::string usage;
};

class Args {
 public:
  // Parses argv[first..argc). Throws orbit::Error naming the command and argument on unknown names,
  // missing values (an option followed by another of spec's names counts as one) or repeated options. `--help` or `-h`
  // anywhere prints spec.usage and the accepted names on stdout and exits the process with status 0 (nothing has run
  // yet).
  Args(std::string command, const ArgSpec& spec, int argc, char** argv, int first);

  bool flag(const std::string& name) const { return flags_.count(name) > 0; }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> get(const std::string& name) const;
  std::string required(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  // As get_int, and the value must be >= min_value (else orbit::Error naming the argument).
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min_value) const;
  std::string get_or(const std::string& name, const std::string& fallback) const {
    return get(name).value_or(fallback);
  }
  double get_double(const std::string& name, double fallback) const;
  // A seed: an integer in [0, 2^64), as the SDK's seeds are (else orbit::Error naming the argument and range).
  uint64_t get_seed(const std::string& name, uint64_t fallback) const;

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
};

// The --help text for `command`: spec.usage, then every accepted argument name.
std::string help_text(const std::string& command, const ArgSpec& spec);

// An output file argument (`name`, e.g. --json or --out) checked before any work, so a typo fails at once rather
// than after a run of minutes: refused when empty, when its directory is missing or is not a directory, and
// when the path exists as something other than a regular file or a character device (check_output_or_stream:
// /dev/null is written to, as write_file_atomically does). `what` names the output
// ("the replay report"); errors name the argument.
void check_output_argument(const std::string& command, const std::string& name, const std::string& path,
                           const std::string& what);

// An input of the same run, for check_output_not_input: the argument that names it and its path.
struct InputArgument {
  std::string name;  // "--model", "TRACE"
  std::string path;
};

// Refuses an output path (`name`) that would replace one of the run's `inputs`: the same file (a trace
// replayed, the model read), or an existing file inside an input directory (a Hugging Face model's
// config.json or weights). Other existing files are replaced, as the commands' --help says.
void check_output_not_input(const std::string& command, const std::string& name, const std::string& path,
                            const std::vector<InputArgument>& inputs);

// `others` and what a model path reads: the path itself (a Hugging Face directory, whose files
// check_output_not_input covers) and, beside a llama2.c .bin, the tokenizers it may load (tok*.bin,
// tokenizer.bin).
std::vector<InputArgument> model_inputs(const std::string& model, std::vector<InputArgument> others = {});

// "a,b,,c" -> {"a", "b", "", "c"}: every piece between commas, empty ones kept ("" -> {""}).
std::vector<std::string> split_commas(const std::string& text);

// "1,5,9" -> {1, 5, 9}; `what` names the argument in errors ("--tokens: item 2 ('x') is not an integer").
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what);

}  // namespace orbit::cli
