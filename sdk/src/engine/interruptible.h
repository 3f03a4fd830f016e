// Interruption points inside a forward (orbit/interrupt.h): runtime/ knows nothing of the SDK's InterruptScope,
// so the SDK hands its forwards a ForwardOptions::before_layer that is an interruption point. A forward given it
// stops between two layers (before the next layer runs) when the calling thread's innermost InterruptScope
// answers true, throwing orbit::Interrupted("forward: interrupted"); the forward returns nothing, and its caller
// lets the exception through before it stores or commits anything of it. A patch's SVD (runtime::form_patch)
// takes one the same way (PatchOptions::before_layer, named "patch"): it stops before a layer's factorization.
// The boundary that undoes the call's work (apply_plan, BackgroundQueue::run) names its operation in the
// Interrupted it passes on.
#pragma once

#include <cstdint>
#include <functional>

#include "orbit/interrupt.h"
#include "orbit/runtime/model.h"

namespace orbit::detail {

// A ForwardOptions::before_layer (or runtime::PatchOptions::before_layer) that is an interruption point named
// `where` (a string literal). Without a scope on the calling thread it returns at once (a thread-local read per
// layer).
inline std::function<void(int64_t layer)> layer_interruption(const char* where = "forward") {
  return [where](int64_t) { interruption_point(where); };
}

// `fo` with layer_interruption() as its before_layer; `fo` must have none of its own.
inline runtime::ForwardOptions interruptible(runtime::ForwardOptions fo) {
  fo.before_layer = layer_interruption();
  return fo;
}

}  // namespace orbit::detail
