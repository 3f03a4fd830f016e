// The fidelity model `orbit serve` plans with, settled before it listens (`--calibrate-fidelity`,
// `--no-stored-calibration`; EngineOptions::stored_calibration, docs/ARCHITECTURE.md §10).
#pragma once

#include <functional>

#include "orbit/engine.h"
#include "serve/serve_types.h"

namespace orbit::serve {

// Settles the engine's fidelity model and says which one on stderr:
// - one the store holds for this model (its directory's, else the remote tier's, asked here so that the model
//   the first request plans with is known and said before listening): one line naming where it was read;
// - none held and `calibrate` (--calibrate-fidelity): measured now (Engine::calibrate_fidelity, seeded, nothing
//   timed), a line before, one per seed (rewritten in place on a terminal) and one after naming the model and
//   where it was stored, or why not (--no-stored-calibration, no --store or --remote, the store refused it);
// - none held and not `calibrate`: the engine's defaults, silently.
// With options.stored_calibration false (--no-stored-calibration) nothing is read, nor written.
// A --remote that did not answer the read (options.stored_calibration) is said with the seconds it took, which
// the remote tier's timeouts bound; the engine asks it again at a later request.
//
// Call once, on the thread that starts the server, after the remote's start check (so that a remote down is
// named once) and before listening. Blocks for the remote's read and, with `calibrate`, the measurement.
// An exception from the measurement (Engine::calibrate_fidelity) propagates, nothing fitted or stored; so does
// one `between_seeds` (when set, called after each seed's progress line) throws, which stops the measurement.
void prepare_fidelity_model(Engine& engine, const ServeOptions& options, bool calibrate,
                            const std::function<void()>& between_seeds = {});

}  // namespace orbit::serve
