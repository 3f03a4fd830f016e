// train_binding's command line: the training options, --out and --threads, each value checked against the
// range the trainer supports before anything is built or trained.
#pragma once

#include <string>

#include "binding_train.h"

namespace orbit::binding {

struct Command {
  TrainOptions options;  // options.log left empty
  std::string out;       // --out as given (OutputDir checks the path itself)
  int threads = 1;
  std::string line;  // the command as typed, for train_log.json and README.md
};

// Parses argv[1..argc). `--help` prints the usage and exits 0; a missing, malformed or out-of-range argument
// prints a message naming it and the usage on stderr and exits 2. Never returns a command that would fail
// later for a reason the arguments alone decide (episodes past the model's positions, an auxiliary layer the
// model lacks, a --stop-at no evaluation can reach).
Command parse_command(int argc, char** argv);

// The usage text (--help and the argument errors).
const char* train_binding_usage();

}  // namespace orbit::binding
