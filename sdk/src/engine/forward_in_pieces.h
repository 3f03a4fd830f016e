// The SDK's side of orbit/forward_pieces.h: a critical-path forward of token ids in the calling thread's
// ForwardPieces scope's pieces (the apply env's prefills in context, KvStore's canonical encode).
#pragma once

#include <cstdint>
#include <vector>

#include "orbit/runtime/model.h"
#include "orbit/runtime/reuse.h"

namespace orbit::detail {

class EngineCore;

// Appends rows of KV (every layer's K and V, at `positions`) to a past: to its layers, the rows after its paged
// ones where it has pages (runtime::PastKV::paged).
void append_past_rows(runtime::PastKV& past, const runtime::Content& rows, const at::Tensor& positions);

// Whether `count` tokens forwarded now go in pieces: the thread has a ForwardPieces scope whose budget is
// positive and under `count`.
bool goes_in_pieces(int64_t count);

// tokens[from, size) forwarded at positions start + from, ... behind `past` (what precedes them: tokens[0, from)
// among it), in pieces of the scope's budget, the scope's between() before each piece but the first; each piece
// is forwarded behind `past` and the pieces before it. Their rows (every layer's K and V), in order: what one
// forward of them all computes, up to float rounding. Needs goes_in_pieces(size - from).
runtime::Content forward_in_pieces(EngineCore& core, const std::vector<int64_t>& tokens, int64_t from, int64_t start,
                                   runtime::PastKV past, const runtime::ForwardOptions& fo);

}  // namespace orbit::detail
