// `orbit serve`'s stored chat completions (store: true on /v1/chat/completions) driven by the official
// `openai` npm client's own methods.
//
//   node serve_chat_store.mjs ORBIT_BINARY MODEL_DIR
//
// Starts `orbit serve` on 127.0.0.1 (a free port) with a store directory and --max-chat-completions 6, then:
// creates completions with store and metadata, whole, streamed and with n = 2 (and two not stored);
// chat.completions.retrieve returns each as it was returned (a streamed one as its chunks assembled it,
// every choice of n = 2) with its metadata; .list pages them through the client's auto-pagination, filtered
// by metadata and model, in either order; .messages.list pages a request's messages; .update replaces the
// metadata (another field is refused by name), which lists then filter by; .delete answers OpenAI's
// deleted object and the id is gone (404), and a list's next page after a deleted one goes on from its place;
// a stream of n = 2 is kept with both choices; bad query parameters are 400s naming them. The server is then
// restarted on the same store: what was stored is still there, and past 6 completions the least recently used
// is dropped. Each server is stopped (SIGTERM, then SIGKILL) whatever happens.
//
// Exit status: 0 all passed, 1 a check failed, 77 skipped (the package or the server is missing).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { checks, importOr, scriptArgs, startServer } from "./serve_harness.mjs";

const [orbit, model] = scriptArgs("serve_chat_store.mjs", "ORBIT_BINARY MODEL_DIR");
const { default: OpenAI } = await importOr("openai");

const { check, finish } = checks();
const status = (promise) => promise.then(() => 200, (e) => e.status ?? -1);
const refusal = (promise) => promise.then((s) => `served ${typeof s}`, (e) => `${e.status} ${e.error?.param}`);
const all = async (page) => {
  const out = [];
  for await (const item of page) out.push(item);
  return out;
};
const suite = "chat-store";
const messages = [
  { role: "system", content: "Tell short stories." },
  { role: "user", content: [{ type: "text", text: "A cat " }, { type: "text", text: "sat on a mat." }] },
];

// The completions of the first server: whole, streamed, n = 2, and two not stored.
async function create(client, modelName) {
  const base = { model: modelName, messages, max_tokens: 8, temperature: 0 };
  const whole = await client.chat.completions.create({ ...base, store: true, metadata: { suite, kind: "whole" } });
  const stream = await client.chat.completions.create({
    ...base, store: true, metadata: { suite, kind: "streamed" }, stream: true, stream_options: { include_usage: true },
  });
  let streamedId = "";
  let text = "";
  let finishReason = null;
  for await (const chunk of stream) {
    streamedId = chunk.id;
    text += chunk.choices[0]?.delta?.content ?? "";
    finishReason = chunk.choices[0]?.finish_reason ?? finishReason;
  }
  const two = await client.chat.completions.create({ ...base, temperature: 1, seed: 3, n: 2, store: true,
                                                     metadata: { suite, kind: "n2" } });
  const unstored = await client.chat.completions.create({ ...base, store: false, metadata: { suite } });
  const plain = await client.chat.completions.create(base);
  return { whole, streamed: { id: streamedId, text, finishReason }, two, unstored, plain };
}

async function retrieved(client, made) {
  const { whole, streamed, two, unstored, plain } = made;
  const got = await client.chat.completions.retrieve(whole.id);
  check(got.metadata?.kind === "whole" && got.metadata?.suite === suite, "retrieve: the metadata", JSON.stringify(got));
  check(JSON.stringify({ ...got, metadata: undefined }) === JSON.stringify(whole), "retrieve: the object as returned",
        `${JSON.stringify(got)}\n  ${JSON.stringify(whole)}`);
  const fromStream = await client.chat.completions.retrieve(streamed.id);
  check(fromStream.object === "chat.completion" && fromStream.choices.length === 1 &&
        fromStream.choices[0].message.content === streamed.text &&
        fromStream.choices[0].finish_reason === streamed.finishReason,
        "retrieve: a streamed completion as its chunks assembled it", JSON.stringify(fromStream));
  const both = await client.chat.completions.retrieve(two.id);
  check(both.choices.length === 2 && both.choices.map((c) => c.index).join() === "0,1" &&
        JSON.stringify(both.choices) === JSON.stringify(two.choices), "retrieve: every choice of n = 2");
  check(await status(client.chat.completions.retrieve(unstored.id)) === 404, "store false: not kept (404)");
  check(await status(client.chat.completions.retrieve(plain.id)) === 404, "store absent: not kept (404)");
  console.log(`stored ${whole.id}, ${streamed.id} (streamed ${JSON.stringify(streamed.text)}), ${two.id}`);
}

async function listed(client, made, modelName) {
  const { whole, streamed, two } = made;
  const ids = (items) => items.map((c) => c.id).join();
  // A page of one at a time, each after the last one's id (the client's auto-pagination).
  const mine = await all(client.chat.completions.list({ metadata: { suite }, limit: 1 }));
  check(ids(mine) === [whole.id, streamed.id, two.id].join(), "list: paged by created, filtered by metadata",
        ids(mine));
  check(mine.every((c) => c.object === "chat.completion" && c.metadata.suite === suite), "list: the objects");
  const newest = await all(client.chat.completions.list({ metadata: { suite }, order: "desc", limit: 2 }));
  check(ids(newest) === [two.id, streamed.id, whole.id].join(), "list: order desc", ids(newest));
  const one = await all(client.chat.completions.list({ metadata: { suite, kind: "streamed" } }));
  check(ids(one) === streamed.id, "list: every metadata pair must match", ids(one));
  check((await all(client.chat.completions.list({ model: modelName }))).length === 3, "list: by model");
  check((await all(client.chat.completions.list({ model: "other" }))).length === 0, "list: another model's none");
  check(await refusal(client.chat.completions.list({ limit: 0 })) === "400 limit", "list: limit 0 refused");
  check(await refusal(client.chat.completions.list({ order: "up" })) === "400 order", "list: a bad order refused");
  check(await refusal(client.chat.completions.list({ after: "chatcmpl-none" })) === "400 after",
        "list: after an unknown id refused");
  // The request's messages, one page at a time.
  const listedMessages = await all(client.chat.completions.messages.list(whole.id, { limit: 1 }));
  check(listedMessages.map((m) => m.id).join() === `${whole.id}-0,${whole.id}-1`, "messages: ids in order",
        JSON.stringify(listedMessages));
  check(listedMessages[0].role === "system" && listedMessages[0].content === messages[0].content &&
        listedMessages[0].content_parts === null, "messages: a text message");
  check(listedMessages[1].content === "A cat sat on a mat." &&
        listedMessages[1].content_parts?.map((p) => `${p.type}:${p.text}`).join() === "text:A cat ,text:sat on a mat.",
        "messages: content parts", JSON.stringify(listedMessages[1]));
  const last = await all(client.chat.completions.messages.list(whole.id, { order: "desc", limit: 1 }));
  check(last[0]?.id === `${whole.id}-1`, "messages: order desc");
  check(await refusal(client.chat.completions.messages.list(whole.id, { limit: 101 })) === "400 limit",
        "messages: limit 101 refused");
}

async function updated(client, made) {
  const { whole } = made;
  const changed = await client.chat.completions.update(whole.id, { metadata: { suite, kind: "updated" } });
  check(changed.id === whole.id && changed.metadata.kind === "updated", "update: the completion with its metadata");
  check((await client.chat.completions.retrieve(whole.id)).metadata.kind === "updated", "update: retrieve sees it");
  check((await all(client.chat.completions.list({ metadata: { kind: "whole" } }))).length === 0 &&
        (await all(client.chat.completions.list({ metadata: { kind: "updated" } })))[0]?.id === whole.id,
        "update: lists filter by the new metadata");
  check(await refusal(client.chat.completions.update(whole.id, { metadata: {}, model: "x" })) === "400 model",
        "update: another field refused by name");
  check(await refusal(client.chat.completions.update(whole.id, { metadata: { k: "v".repeat(513) } })) ===
        "400 metadata.k", "update: a value over 512 refused");
  const deleted = await client.chat.completions.delete(whole.id);
  check(deleted.id === whole.id && deleted.object === "chat.completion.deleted" && deleted.deleted === true,
        "delete: OpenAI's deleted object", JSON.stringify(deleted));
  check(await status(client.chat.completions.retrieve(whole.id)) === 404, "delete: retrieve is a 404");
  check(await refusal(client.chat.completions.retrieve(whole.id)) === "404 completion_id", "delete: 404 names the id");
  check(await status(client.chat.completions.delete(whole.id)) === 404, "delete: again is a 404");
  check(await status(client.chat.completions.messages.list(whole.id)) === 404, "delete: its messages are gone");
  check(await status(client.chat.completions.update(whole.id, { metadata: {} })) === 404, "delete: update is a 404");
}

// After a restart on the same store: what was stored is there; past 6 the least recently used goes.
async function restarted(client, made, modelName) {
  const { streamed, two } = made;
  const again = await client.chat.completions.retrieve(streamed.id);
  check(again.choices[0].message.content === streamed.text && again.metadata.kind === "streamed",
        "restart: a stored completion is read back");
  const mine = await all(client.chat.completions.list({ metadata: { suite } }));
  check(mine.map((c) => c.id).join() === [streamed.id, two.id].join(), "restart: the list is the same");
  for (let i = 0; i < 5; i++) {
    await client.chat.completions.create({ model: modelName, messages, max_tokens: 2, store: true,
                                           metadata: { suite: "fill" } });
  }
  check(await status(client.chat.completions.retrieve(two.id)) === 404, "capacity: the least recently used is dropped");
  check(await status(client.chat.completions.retrieve(streamed.id)) === 200, "capacity: a recently used one stays");
  check((await all(client.chat.completions.list())).length === 6, "capacity: 6 are kept");
  // The client's pagination goes on after a page whose last completion was deleted before the next page.
  const everything = (await all(client.chat.completions.list())).map((c) => c.id);
  const first = await client.chat.completions.list({ limit: 2 });
  await client.chat.completions.delete(first.data[1].id);
  const next = await first.getNextPage();
  check(next.data.map((c) => c.id).join() === everything.slice(2, 4).join(),
        "list: the next page after a deleted completion goes on from its place", JSON.stringify(next.data.map((c) => c.id)));
  // A stream of n = 2 is stored with every choice, as its chunks assembled them.
  const stream = await client.chat.completions.create({ model: modelName, messages, max_tokens: 8, temperature: 1,
                                                        seed: 5, n: 2, stream: true, store: true });
  const texts = ["", ""];
  let id = "";
  for await (const chunk of stream) {
    id = chunk.id;
    for (const c of chunk.choices) texts[c.index] += c.delta?.content ?? "";
  }
  const kept = await client.chat.completions.retrieve(id);
  check(kept.choices.length === 2 && kept.choices.every((c, i) => c.index === i && c.message.content === texts[i]),
        "store: a stream of n = 2 keeps every choice", JSON.stringify(kept.choices));
}

const storeDir = mkdtempSync(join(tmpdir(), "orbit-chat-store-"));
const args = ["--model", model, "--store", storeDir, "--max-chat-completions", "6"];
try {
  let server = startServer(orbit, args);
  let made;
  let modelName;
  try {
    const client = new OpenAI({ baseURL: `${await server.ready()}/v1`, apiKey: "unused", maxRetries: 0 });
    modelName = (await client.models.list()).data[0].id;
    made = await create(client, modelName);
    await retrieved(client, made);
    await listed(client, made, modelName);
    await updated(client, made);
  } finally {
    await server.stop(check);
  }
  server = startServer(orbit, args);
  try {
    const client = new OpenAI({ baseURL: `${await server.ready()}/v1`, apiKey: "unused", maxRetries: 0 });
    await restarted(client, made, modelName);
  } finally {
    await server.stop(check);
  }
} catch (e) {
  check(false, "no exception", e.stack);
} finally {
  rmSync(storeDir, { recursive: true, force: true });
}
finish();
