// The README's 30-second C++ example: an Engine, a few chunks, a window: admit, slide, recall, generate,
// idle.
//   build/samples/cpp/quickstart [models/stories260K/stories260K.bin]
#include <cstdio>
#include <vector>

#include "orbit/engine.h"

int main(int argc, char** argv) try {
  auto engine = orbit::Engine::open({.model = argc > 1 ? argv[1] : "models/stories260K/stories260K.bin"});

  // Chunks: content encoded once and stored position-free (token ids here; images via add_embeddings).
  orbit::ChunkRef page1 = engine->add_tokens({1, 365, 169, 44, 33, 22}, {.label = "page 1"});
  orbit::ChunkRef page2 = engine->add_tokens({1, 403, 407, 261, 378, 410}, {.label = "page 2"});
  orbit::ChunkRef page3 = engine->add_tokens({1, 52, 99, 250, 14, 87}, {.label = "page 3"});

  orbit::Window w = engine->new_window();  // the default policy: patch:16 with a per-step KL budget
  w.add_turn({1, 22, 87, 13});             // a live turn (the task)
  w.admit(page1);                          // canonical relocated + patched to its context
  w.admit(page2);
  orbit::Plan plan = w.plan_admit(page3);  // plan (const): what would happen, what it costs
  std::printf("%s", plan.describe().c_str());
  orbit::Result<orbit::ApplyReport> done = w.apply(plan);  // ... then apply (a full pool is a value:
  if (!done) std::printf("not applied: %s\n", done.status().reason().c_str());  // nothing changed)
  w.slide(1);                                 // page 1 leaves; survivors are relocated only
  orbit::ApplyReport back = w.recall(page1);  // look back: canonical from the store + a fresh patch
  std::printf("recall: %.0f forward tokens\n", back.forward_tokens);

  orbit::Generation g = w.generate({1, 403}, {.max_tokens = 8});
  std::printf("generated:");
  for (int64_t t : g.tokens) std::printf(" %lld", static_cast<long long>(t));
  orbit::IdleReport idle = w.idle();  // while the agent waits: heal, prepare a recall (background)
  std::printf("\nidle: %.0f background forward tokens", idle.forward_tokens);
  std::printf("\nwindow: %lld tokens, %.0f forward tokens in all\n", static_cast<long long>(w.tokens()),
              w.stats().forward_tokens);
} catch (const orbit::Error& e) {  // bad input names the file, field or argument at fault
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
