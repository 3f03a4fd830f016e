// bench_constrain --key-growth: what a decode step costs as an object's written keys pile up (the key log's
// per-object state, sdk/src/constrain/key_log.h). One object of --keys members whose keys are 40 random
// letters, decoded token by token (the longest vocabulary token of the text that the mask allows); each step
// is TokenConstraint::allowed (no budget, a budget far past the answer: the key log's slack is computed but
// never binds, or a tight one: the fewest bytes left, so that every step fits its budget, the token then chosen
// from the unbudgeted mask, untimed) and accept, which alone are timed (not the bench's search for the token to take).
// Cases (--cases, comma-separated; all by default): a map whose keys are ^[a-z]{40}$ (pattern) or ^[a-z]+$ (loop) by
// propertyNames, a map of plain string keys (string), of keys from an enum of twice the object's names (enum), of plain
// string keys under minProperties 2 and maxProperties --keys + 10 (bounded), and an object that declares all its keys
// (declared: the flat baseline). Values are integers, or with --values string a sentence with escaped quotes (so that
// tokens holding a '"' are allowed in it). Over the synthetic vocabulary, or with --tokenizer a tokenizer.json's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "orbit/constraint.h"

namespace orbit::bench {

// Prints, per case and budget, the mean milliseconds per step over the steps of the members at keys 0, 50,
// 100 and the last (the fastest of `reps` runs for each), the last over the first, and the milliseconds of the
// step that closes the object (its '}'; counted in the last member's as well). `values`: "integer" or
// "string" (orbit::Error naming --values for another).
void bench_key_growth(const std::string& setting, const std::shared_ptr<const TokenVocabulary>& vocabulary,
                      int64_t keys, int64_t reps, const std::vector<std::string>& cases, const std::string& values);
// The cases a --cases list names (all for an empty one); orbit::Error naming --cases for an unknown one.
std::vector<std::string> key_growth_cases(const std::string& list);

}  // namespace orbit::bench
