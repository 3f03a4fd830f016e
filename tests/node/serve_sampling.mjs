// OpenAI's sampling parameters against `orbit serve`, through the official `openai` client:
//
//   node serve_sampling.mjs ORBIT_BINARY MODEL
//
// logprobs / top_logprobs (whole and streamed: choices[].logprobs.content, one entry per generated token,
// its bytes writing the content, the top list sorted with the greedy token first; the Responses API's
// output_text.logprobs and its delta events likewise), logit_bias (+100 forces a
// token; -100 on the token greedy picks, its id found by bisection with bans, gives the second best),
// presence_penalty / frequency_penalty (a repetitive greedy answer repeats less), n: 3 streamed (each choice's
// chunks under its index, its own finish chunk sent when that choice ends, its tool calls with it, usage
// once), and the 400s naming the field for values out of range. Starts the server on 127.0.0.1 (a free port)
// and always stops it.
//
// Exit status: 0 all passed, 1 a check failed, 77 skipped (the openai package or `orbit serve` missing).
import { checks, importOr, scriptArgs, startServer } from "./serve_harness.mjs";

const [orbit, model] = scriptArgs("serve_sampling.mjs", "ORBIT_BINARY MODEL");
const { default: OpenAI } = await importOr("openai");

const { check, finish } = checks();
// The exact policy: every request's window holds a re-prefill's KV, so whole and streamed answers agree to
// float32 rounding (the second may be served from KV the first computed).
const server = startServer(orbit, ["--model", model, "--policy", "patch:16:exact"]);
const base = await server.ready();
const modelId = model.replace(/\/+$/, "").split("/").pop();
const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const messages = [{ role: "user", content: "Tell me a story about a little dog." }];
const ask = (extra) => api.chat.completions.create({ model: modelId, messages, temperature: 0, max_tokens: 24, ...extra });
const text = (entries) => Buffer.concat(entries.map((e) => Buffer.from(e.bytes))).toString("utf8");
const repeats = (entries) => entries.length - new Set(entries.map((e) => e.token)).size;

async function logprobs() {
  const whole = await ask({ logprobs: true, top_logprobs: 3 });
  const choice = whole.choices[0];
  const content = choice.logprobs?.content ?? [];
  check(content.length === whole.usage.completion_tokens && content.length > 0,
        "logprobs.content has one entry per generated token", JSON.stringify(choice.logprobs));
  check(text(content) === choice.message.content, "the entries' bytes write the content",
        `${JSON.stringify(text(content))} vs ${JSON.stringify(choice.message.content)}`);
  for (const [i, e] of content.entries()) {
    const tops = e.top_logprobs;
    const ok = typeof e.token === "string" && e.logprob <= 0 && Array.isArray(e.bytes) && tops.length === 3 &&
               tops.every((t, k) => k === 0 || t.logprob <= tops[k - 1].logprob) &&
               tops[0].token === e.token && Math.abs(tops[0].logprob - e.logprob) < 1e-9;
    check(ok, `entry ${i}: a greedy token's logprob leads its sorted top_logprobs`, JSON.stringify(e));
  }
  // Streamed: the same entries, spread over the chunks that carry their text.
  const stream = await ask({ logprobs: true, top_logprobs: 3, stream: true });
  const streamed = [];
  let streamedText = "";
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    streamedText += c.delta.content ?? "";
    streamed.push(...(c.logprobs?.content ?? []));
  }
  check(streamedText === choice.message.content, "the streamed answer is the whole one");
  check(streamed.length === content.length &&
        streamed.every((e, i) => e.token === content[i].token && Math.abs(e.logprob - content[i].logprob) < 1e-4),
        "streamed chunks carry the same logprobs, each once",
        JSON.stringify(streamed.map((e, i) => [e.token, e.logprob, content[i]?.token, content[i]?.logprob])));
  // The client's stream helper builds the answer from the chunks: the same entries, each once. It takes a
  // choice's first chunk's logprobs as its list and appends that chunk's again, so each choice opens with a
  // chunk of the role alone (logprobs null), as OpenAI streams it.
  const helper = await api.chat.completions.stream({ model: modelId, messages, temperature: 0, max_tokens: 24,
                                                     logprobs: true, top_logprobs: 3 }).finalChatCompletion();
  const assembled = helper.choices[0].logprobs?.content ?? [];
  check(assembled.length === content.length && assembled.every((e, i) => e.token === content[i].token),
        "the stream helper assembles the same logprobs, each once",
        JSON.stringify([assembled.map((e) => e.token), content.map((e) => e.token)]));
  let first = null;
  for await (const chunk of await ask({ logprobs: true, stream: true })) {
    first = chunk.choices[0];
    break;  // ends the stream
  }
  check(first.delta.role === "assistant" && first.delta.content === "" && first.logprobs === null,
        "a streamed choice opens with the role alone", JSON.stringify(first));
  const plain = await ask({});
  check(plain.choices[0].logprobs === null, "without logprobs: logprobs is null");
  return content;
}

// The id of the token greedy picks first (its bytes `want`): bisection over bans (a ban holding it changes the
// first token; one without it cannot, as it only lowers other tokens).
async function greedyTokenId(want, vocab) {
  let lo = 0;
  let hi = vocab;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    const bias = Object.fromEntries(Array.from({ length: mid - lo }, (_, k) => [String(lo + k), -100]));
    const r = await ask({ max_tokens: 1, logprobs: true, logit_bias: bias });
    const first = r.choices[0].logprobs.content[0].token;
    if (first !== want) hi = mid;
    else lo = mid;
  }
  return lo;
}

async function logitBias(content) {
  const forced = await ask({ max_tokens: 5, logprobs: true, logit_bias: { 300: 100 } });
  const entries = forced.choices[0].logprobs.content;
  check(entries.length === 5 && entries.every((e) => e.token === entries[0].token && e.logprob > -1e-3),
        "logit_bias +100 forces a token at every step", JSON.stringify(entries.map((e) => [e.token, e.logprob])));
  const vocab = 512;  // stories260K's
  const first = content[0];
  const id = await greedyTokenId(first.token, vocab);
  const banned = await ask({ max_tokens: 1, logprobs: true, logit_bias: { [id]: -100 } });
  const got = banned.choices[0].logprobs.content[0];
  check(got.token !== first.token && got.token === first.top_logprobs[1].token,
        "logit_bias -100 on greedy's token gives the second best", `${JSON.stringify(got)} after banning ${id}`);
}

async function penalties() {
  const plain = (await ask({ max_tokens: 48, logprobs: true })).choices[0].logprobs.content;
  const less = (await ask({ max_tokens: 48, logprobs: true, frequency_penalty: 2 })).choices[0].logprobs.content;
  const more = (await ask({ max_tokens: 48, logprobs: true, presence_penalty: -2 })).choices[0].logprobs.content;
  check(repeats(less) < repeats(plain) && repeats(plain) < repeats(more),
        "frequency_penalty 2 repeats fewer tokens than none, presence_penalty -2 more",
        `${repeats(less)} / ${repeats(plain)} / ${repeats(more)}: ${text(less)} | ${text(plain)} | ${text(more)}`);
}

// n: 3 streamed (the client's async iterator over the chunks): every chunk's choice carries its index, each
// choice gets a first chunk with the role and a finish chunk of its own, the choices' texts are the whole
// request's with the same seed, and usage comes once, in the last chunk.
async function streamedChoices() {
  const request = { temperature: 1, seed: 7, n: 3, logprobs: true };
  const whole = await ask(request);
  const stream = await ask({ ...request, stream: true, stream_options: { include_usage: true } });
  const texts = ["", "", ""];
  const roles = [0, 0, 0];
  const finishes = [[], [], []];
  const entries = [0, 0, 0];
  const usages = [];
  let indexed = true;
  for await (const chunk of stream) {
    if (chunk.usage) usages.push(chunk.usage);
    for (const c of chunk.choices) {
      if (!(c.index >= 0 && c.index < 3) || chunk.choices.length !== 1) indexed = false;
      texts[c.index] += c.delta?.content ?? "";
      if (c.delta?.role === "assistant") roles[c.index]++;
      if (c.finish_reason) finishes[c.index].push(c.finish_reason);
      entries[c.index] += c.logprobs?.content?.length ?? 0;
    }
  }
  check(indexed, "n: 3 streamed: each chunk carries one choice, indexed 0..2");
  check(roles.every((r) => r === 1), "n: 3 streamed: each choice's first chunk carries the role", JSON.stringify(roles));
  for (let i = 0; i < 3; i++) {
    const choice = whole.choices[i];
    check(texts[i] === choice.message.content, `n: 3 streamed: choice ${i} is the whole request's`,
          `${JSON.stringify(texts[i])} vs ${JSON.stringify(choice.message.content)}`);
    check(finishes[i].length === 1 && finishes[i][0] === choice.finish_reason,
          `n: 3 streamed: choice ${i} has one finish chunk`, JSON.stringify(finishes[i]));
    check(entries[i] === choice.logprobs.content.length, `n: 3 streamed: choice ${i}'s log probabilities`,
          `${entries[i]} vs ${choice.logprobs.content.length}`);
  }
  check(new Set(texts).size > 1, "n: 3 streamed: the choices differ at temperature 1", JSON.stringify(texts));
  check(usages.length === 1 && usages[0].completion_tokens === whole.usage.completion_tokens,
        "n: 3 streamed: usage once, counting every choice", JSON.stringify(usages));
  // The client's stream helper assembles each choice from its chunks.
  const runner = api.chat.completions.stream({ model: modelId, messages, temperature: 1, seed: 7, n: 3, max_tokens: 24 });
  const final = await runner.finalChatCompletion();
  check(final.choices.length === 3 && final.choices.every((c, i) => c.message.content === whole.choices[i].message.content),
        "n: 3 streamed: the client's stream helper assembles the three choices", JSON.stringify(final.choices));
}

// Streamed with n > 1, each choice's end goes out when that choice ends (as OpenAI streams it): with a stop
// string that ends choice 0 early, its finish chunk comes before choice 1's later content; with forced tool
// calls, a choice's calls come before a longer choice's finish chunk. The client's iterator and its stream
// helper assemble such streams into the whole request's choices.
async function choicesEndingApart() {
  const request = { temperature: 1, seed: 7, n: 2, max_tokens: 32 };
  const free = (await ask(request)).choices.map((c) => c.message.content);
  // A word choice 0 writes in its first half and choice 1 never writes: as a stop string it ends choice 0 only.
  const words = free[0].slice(0, free[0].length / 2).split(" ").filter((w) => w.length >= 3).map((w) => ` ${w}`);
  const stop = words.find((w) => !free[1].includes(w) && free[0].indexOf(w) > 0);
  check(stop !== undefined, "n: 2 apart: a stop string only choice 0 writes", JSON.stringify(free));
  if (stop === undefined) return;
  const want = [free[0].slice(0, free[0].indexOf(stop)), free[1]];
  const events = [];  // [index, "content" | "finish", value] in the order the chunks came
  for await (const chunk of await ask({ ...request, stop, stream: true })) {
    for (const c of chunk.choices) {
      if (c.delta?.content) events.push([c.index, "content", c.delta.content]);
      if (c.finish_reason) events.push([c.index, "finish", c.finish_reason]);
    }
  }
  const finish0 = events.findIndex(([i, kind]) => i === 0 && kind === "finish");
  const later = events.filter(([i, kind], at) => i === 1 && kind === "content" && at > finish0).length;
  check(finish0 >= 0 && later >= 5, "n: 2 apart: choice 0's finish chunk came while choice 1 still streamed",
        JSON.stringify(events));
  const texts = [0, 1].map((c) => events.filter(([i, kind]) => i === c && kind === "content").map((e) => e[2]).join(""));
  check(texts[0] === want[0] && texts[1] === want[1], "n: 2 apart: the iterator's chunks spell each choice",
        `${JSON.stringify(texts)} vs ${JSON.stringify(want)}`);
  const final = await api.chat.completions.stream({ model: modelId, messages, ...request, stop }).finalChatCompletion();
  check(final.choices.map((c) => c.message.content).join("|") === want.join("|") &&
        final.choices.map((c) => c.finish_reason).join() === "stop,length",
        "n: 2 apart: the client's stream helper assembles both choices", JSON.stringify(final.choices));

  const tools = [{ type: "function", function: { name: "search", parameters: { type: "object",
    properties: { q: { type: "string", maxLength: 12 } }, required: ["q"] } } }];
  const called = { messages: [{ role: "user", content: "Find a story about a cat." }], tools, tool_choice: "required",
                   temperature: 1, seed: 1, n: 3, max_tokens: 200, logprobs: true };
  const whole = await ask(called);
  const steps = whole.choices.map((c) => c.logprobs.content.length);
  const at = { calls: [[], [], []], finish: [[], [], []] };
  let chunks = 0;
  for await (const chunk of await ask({ ...called, stream: true })) {
    for (const c of chunk.choices) {
      if (c.delta?.tool_calls) at.calls[c.index].push(chunks);
      if (c.finish_reason) at.finish[c.index].push(chunks);
    }
    chunks++;
  }
  const pairs = [];
  for (let a = 0; a < 3; a++) for (let b = 0; b < 3; b++) if (steps[a] < steps[b]) pairs.push([a, b]);
  check(pairs.some(([a, b]) => a > b), "n: 3 calls: a later choice ends first", JSON.stringify(steps));
  check(pairs.every(([a, b]) => at.calls[a].length > 0 && at.calls[a][0] < at.finish[b][0]),
        "n: 3 calls: a choice's tool calls come before a longer choice's finish chunk", JSON.stringify({ steps, at }));
  const assembled = await api.chat.completions.stream({ model: modelId, ...called }).finalChatCompletion();
  const argsOf = (c) => JSON.stringify((c.message.tool_calls ?? []).map((t) => [t.function.name, t.function.arguments]));
  check(assembled.choices.length === 3 && assembled.choices.every((c, i) => argsOf(c) === argsOf(whole.choices[i]) &&
        c.finish_reason === "tool_calls"),
        "n: 3 calls: the client's stream helper assembles each choice's calls",
        `${JSON.stringify(assembled.choices)} vs ${JSON.stringify(whole.choices)}`);
}

async function refusals() {
  const cases = [
    [{ logit_bias: { abc: 1 } }, "logit_bias"], [{ logit_bias: { 5: 101 } }, "logit_bias"],
    [{ logit_bias: { 99999: 1 } }, "logit_bias"], [{ presence_penalty: 2.5 }, "presence_penalty"],
    [{ frequency_penalty: -3 }, "frequency_penalty"], [{ top_logprobs: 2 }, "top_logprobs"],
    [{ logprobs: true, top_logprobs: 21 }, "top_logprobs"],
  ];
  for (const [extra, param] of cases) {
    try {
      await ask(extra);
      check(false, `${JSON.stringify(extra)} is refused`);
    } catch (e) {
      check(e.status === 400 && e.param === param, `${JSON.stringify(extra)}: 400 naming ${param}`,
            `${e.status} ${e.param} ${e.message}`);
    }
  }
  try {
    await api.completions.create({ model: modelId, prompt: "Once", logprobs: 2, max_tokens: 2 });
    check(false, "legacy completions' logprobs is refused");
  } catch (e) {
    check(e.status === 400 && e.param === "logprobs", "legacy completions' logprobs: 400 naming logprobs", e.message);
  }
}

// The Responses API: include "message.output_text.logprobs" with top_logprobs, whole and streamed.
async function responses() {
  const request = { model: modelId, input: messages[0].content, max_output_tokens: 12, temperature: 0,
                    top_logprobs: 2, include: ["message.output_text.logprobs"] };
  const whole = await api.responses.create(request);
  const part = whole.output[0].content[0];
  const entries = part.logprobs ?? [];
  check(entries.length === whole.usage.output_tokens && text(entries) === part.text &&
        entries.every((e) => e.top_logprobs.length === 2 && e.top_logprobs[0].token === e.token),
        "responses: output_text.logprobs, one entry per token, greedy's first in its top_logprobs",
        JSON.stringify(part));
  const stream = await api.responses.create({ ...request, stream: true });
  const streamed = [];
  let done = null;
  for await (const event of stream) {
    if (event.type === "response.output_text.delta") streamed.push(...(event.logprobs ?? []));
    if (event.type === "response.output_text.done") done = event.logprobs;
  }
  check(streamed.length === entries.length && streamed.every((e, i) => e.token === entries[i].token) &&
        done?.length === entries.length, "responses: the deltas carry the same logprobs, and output_text.done all",
        `${streamed.length} / ${done?.length} vs ${entries.length}`);
}

try {
  const content = await logprobs();
  await responses();
  if (content.length > 0) await logitBias(content);
  await penalties();
  await streamedChoices();
  await choicesEndingApart();
  await refusals();
} catch (e) {
  check(false, "the checks ran", e.stack);
} finally {
  await server.stop(check);
}
finish();
