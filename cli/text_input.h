// Text arguments of the `orbit` subcommands: the model's tokenizer (--tokenizer FILE, else the one beside a
// llama2.c model) and text turned into token ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "orbit/runtime/tokenizer.h"

namespace orbit::cli {

// The tokenizer for a model with `vocab_size` pieces: args' --tokenizer when given, else the file beside
// the model (runtime::find_tokenizer). Throws orbit::Error when there is none, saying where it looked and
// that token ids work without one.
std::unique_ptr<runtime::Tokenizer> model_tokenizer(const Args& args, const std::string& model_path,
                                                    int64_t vocab_size);

// The vocabulary size of a model without loading its weights: a llama2.c header, or config.json's
// vocab_size. Throws orbit::Error naming the file when it cannot be read.
int64_t model_vocab_size(const std::string& model_path);

}  // namespace orbit::cli
