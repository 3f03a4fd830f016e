// bench_constrain --open-tag: the cost of a Sampler step where a reasoning model may still open its block
// (GenerateOptions::constraint_trigger_block {"<think>", "</think>"} without a trigger: the open-or-answer step,
// sdk/src/window/sampler.h) against the plain constrained step of the same constraint, both through
// Sampler::next on the same logits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "orbit/constraint.h"

namespace orbit::bench {

// Prints one row per case over `vocabulary`: microseconds per step (the median of `reps` fresh samplers),
// and the ratio to the plain constrained step at the same point of the text.
void bench_open_tag(const std::string& setting, const std::shared_ptr<const TokenVocabulary>& vocabulary, int64_t reps);

}  // namespace orbit::bench
