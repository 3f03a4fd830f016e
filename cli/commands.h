// The `orbit` subcommands. Each parses its own arguments, prints its result on stdout (JSON where the
// command promises it) and reports problems by throwing orbit::Error.
#pragma once

namespace orbit::cli {

int run_info(int argc, char** argv, int first);
int run_logits(int argc, char** argv, int first);
int run_make_model(int argc, char** argv, int first);
int run_store(int argc, char** argv, int first);
int run_fidelity(int argc, char** argv, int first);
int run_replay(int argc, char** argv, int first);
int run_make_trace(int argc, char** argv, int first);
int run_tokenize(int argc, char** argv, int first);
int run_generate(int argc, char** argv, int first);
int run_serve(int argc, char** argv, int first);  // serve/cmd_serve.cpp, or an error without cpp-httplib

}  // namespace orbit::cli
