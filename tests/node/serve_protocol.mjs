// What the four agent clients read of `orbit serve`'s wire, beyond a tool loop: the fields their types require,
// parallel_tool_calls, structured answers under a schema with $defs, $ref, anyOf and enum, and a stream each
// client aborts midway.
//
//   node serve_protocol.mjs ORBIT_BINARY MODEL        (the bundled stories260K: its byte tokens spell any JSON)
//
//   fields     chat: message.refusal null (the openai client's ChatCompletionMessage requires it); the Responses
//              API: a response max_output_tokens cut is incomplete with incomplete_details and completed_at
//              null, a completed one has completed_at
//   usage      streamed with stream_options.include_usage, every chunk has usage, null but in the last (text
//              with n = 2, a forced call); without it no chunk has the field
//   parallel   parallel_tool_calls false with two tools and a forced call: one call, in chat (whole and
//              streamed) and in the Responses API
//   schema     one JSON schema ($defs, a $ref, anyOf with null, enum, a bounded array) through LangChain's
//              withStructuredOutput (chat and Responses API), the AI SDK's generateObject and streamObject,
//              and the Agents SDK's outputType (Responses API and chat): each client's own parse returns an
//              object the schema holds
//   abort      a stream aborted after its first piece by each client (openai chat and Responses, LangChain's
//              stream, the AI SDK's streamText, the Agents SDK's streamed run): the server counts it cancelled,
//              holds nothing in flight or decoding, and answers the same session next
// Starts `orbit serve` on 127.0.0.1 (a free port) and always stops it.
//
// Exit status: 0 all passed, 1 a check failed, 77 skipped (a package or `orbit serve` missing).
import { checks, importOr, scriptArgs, startServer } from "./serve_harness.mjs";

const [orbit, model] = scriptArgs("serve_protocol.mjs", "ORBIT_BINARY MODEL");
const { default: OpenAI } = await importOr("openai");
const { ChatOpenAI } = await importOr("@langchain/openai");
const ai = await importOr("ai");
const { createOpenAICompatible } = await importOr("@ai-sdk/openai-compatible");
const agents = await importOr("@openai/agents");

const { check, finish } = checks();
const server = startServer(orbit, ["--model", model]);
const base = await server.ready();
const M = model.replace(/\/+$/, "").split("/").pop();
const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

async function fields() {
  const chat = await api.chat.completions.create({ model: M, messages: [{ role: "user", content: "Hi." }], max_tokens: 4 });
  const message = chat.choices[0].message;
  check("refusal" in message && message.refusal === null, "fields: chat message.refusal is null", JSON.stringify(message));
  const cut = await api.responses.create({ model: M, input: "Tell a story.", max_output_tokens: 3 });
  check(cut.status === "incomplete" && cut.incomplete_details?.reason === "max_output_tokens",
        "fields: a response max_output_tokens cut is incomplete", JSON.stringify(cut.incomplete_details));
  check(cut.completed_at === null, "fields: an incomplete response has completed_at null", String(cut.completed_at));
  const done = await api.responses.create({ model: M, input: "Hi.", max_output_tokens: 30, text: { format: {
    type: "json_schema", name: "b", schema: { type: "object", properties: { b: { type: "boolean" } }, required: ["b"],
                                              additionalProperties: false } } } });
  check(done.status === "completed" && Number.isInteger(done.completed_at) && done.completed_at >= done.created_at,
        "fields: a completed response has completed_at", `${done.status} ${done.completed_at}`);
}

// Streamed with stream_options.include_usage, every chunk has a usage field, null but in the last one, which
// has the usage (OpenAI: "All other chunks will also include a usage field, but with a null value"); without it,
// no chunk has the field. Read raw (the clients drop what they do not use), and through the openai client.
async function usage() {
  const chunks = async (body) => {
    const response = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" },
                                                                  body: JSON.stringify({ model: M, stream: true, ...body }) });
    const text = await response.text();
    return text.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)));
  };
  const p = { type: "object", properties: {}, required: [], additionalProperties: false };
  for (const [label, body] of [["text", { messages: [{ role: "user", content: "Hi." }], max_tokens: 8, n: 2 }],
                               ["a call", { messages: [{ role: "user", content: "Go." }], max_tokens: 60, tool_choice: "required",
                                            tools: [{ type: "function", function: { name: "a", parameters: p } }] }]]) {
    const withUsage = await chunks({ ...body, stream_options: { include_usage: true } });
    const last = withUsage[withUsage.length - 1];
    check(withUsage.length > 2 && withUsage.slice(0, -1).every((c) => "usage" in c && c.usage === null) &&
          last.choices.length === 0 && last.usage?.completion_tokens > 0,
          `usage (${label}): every chunk has usage, null but in the last`, JSON.stringify(withUsage.map((c) => c.usage)));
    const without = await chunks({ ...body, stream_options: { include_usage: false } });
    check(without.length > 1 && without.every((c) => !("usage" in c)), `usage (${label}): none without include_usage`,
          JSON.stringify(without.slice(-2)));
  }
  const stream = await api.chat.completions.create({ model: M, messages: [{ role: "user", content: "Hi." }], max_tokens: 8,
                                                    stream: true, stream_options: { include_usage: true } });
  const read = [];
  for await (const chunk of stream) read.push(chunk.usage);
  check(read.filter((u) => u).length === 1 && read[read.length - 1]?.total_tokens > 0,
        "usage: the openai client reads one usage, last", JSON.stringify(read));
}

async function parallel() {
  const p = { type: "object", properties: {}, required: [], additionalProperties: false };
  const tools = [{ type: "function", function: { name: "a", parameters: p } }, { type: "function", function: { name: "b", parameters: p } }];
  const request = { model: M, messages: [{ role: "user", content: "Go." }], tools, tool_choice: "required",
                    parallel_tool_calls: false, max_tokens: 100, temperature: 0 };
  const whole = await api.chat.completions.create(request);
  check(whole.choices[0].message.tool_calls?.length === 1 && whole.choices[0].finish_reason === "tool_calls",
        "parallel false: one call (chat)", JSON.stringify(whole.choices[0]));
  const streamed = await api.chat.completions.stream(request).finalChatCompletion();
  check(streamed.choices[0].message.tool_calls?.length === 1, "parallel false: one call (chat, streamed)",
        JSON.stringify(streamed.choices[0].message));
  const r = await api.responses.create({ model: M, input: "Go.", tools: tools.map((t) => ({ type: "function", ...t.function })),
                                         tool_choice: "required", parallel_tool_calls: false, max_output_tokens: 100 });
  check(r.output.filter((o) => o.type === "function_call").length === 1 && r.parallel_tool_calls === false,
        "parallel false: one call (Responses API)", JSON.stringify(r.output));
}

// A schema OpenAI's strict mode takes: $defs and a $ref, anyOf with null, enum, a bounded array.
const SCHEMA = {
  type: "object",
  properties: { name: { type: "string", maxLength: 8 }, kind: { $ref: "#/$defs/kind" },
                owner: { anyOf: [{ $ref: "#/$defs/owner" }, { type: "null" }] },
                tags: { type: "array", items: { type: "string", maxLength: 4 }, maxItems: 2 } },
  required: ["name", "kind", "owner", "tags"],
  additionalProperties: false,
  $defs: { kind: { type: "string", enum: ["cat", "dog"] },
           owner: { type: "object", properties: { age: { type: "integer", minimum: 0, maximum: 99 } },
                    required: ["age"], additionalProperties: false } },
};
function holds(o) {
  const keys = (x) => Object.keys(x ?? {}).sort().join();
  return o !== null && typeof o === "object" && keys(o) === "kind,name,owner,tags" && typeof o.name === "string" &&
    o.name.length <= 8 && ["cat", "dog"].includes(o.kind) &&
    (o.owner === null || (keys(o.owner) === "age" && Number.isInteger(o.owner.age) && o.owner.age >= 0 && o.owner.age <= 99)) &&
    Array.isArray(o.tags) && o.tags.length <= 2 && o.tags.every((t) => typeof t === "string" && t.length <= 4);
}

async function schema() {
  const cases = [];
  for (const useResponsesApi of [false, true]) {
    const llm = new ChatOpenAI({ model: M, apiKey: "unused", configuration: { baseURL: `${base}/v1` }, temperature: 0,
                                 maxTokens: 150, maxRetries: 0, useResponsesApi });
    cases.push([`LangChain withStructuredOutput${useResponsesApi ? " (Responses API)" : ""}`,
                // A described schema: LangChain sends its description as the format's (taken; it changes nothing here).
                () => llm.withStructuredOutput({ ...SCHEMA, description: "A pet from a story." },
                                               { method: "jsonSchema", strict: true, name: "pet" }).invoke("A pet.")]);
  }
  const provider = createOpenAICompatible({ name: "orbit", baseURL: `${base}/v1`, apiKey: "unused",
                                            supportsStructuredOutputs: true, includeUsage: true });
  const settings = { model: provider(M), schema: ai.jsonSchema(SCHEMA), prompt: "A pet.", temperature: 0,
                     maxOutputTokens: 150, maxRetries: 0 };
  cases.push(["AI SDK generateObject", async () => (await ai.generateObject(settings)).object]);
  cases.push(["AI SDK streamObject", async () => {
    const r = ai.streamObject(settings);
    for await (const partial of r.partialObjectStream) void partial;
    return r.object;
  }]);
  const { Agent, Runner, OpenAIProvider, setTracingDisabled } = agents;
  setTracingDisabled(true);
  for (const useResponses of [true, false]) {
    const runner = new Runner({ modelProvider: new OpenAIProvider({ baseURL: `${base}/v1`, apiKey: "unused", useResponses }),
                                tracingDisabled: true });
    const agent = new Agent({ name: "Pets", model: M, modelSettings: { temperature: 0, maxTokens: 150 },
                              outputType: { type: "json_schema", name: "pet", strict: true, schema: SCHEMA } });
    cases.push([`Agents SDK outputType (${useResponses ? "Responses API" : "chat"})`,
                async () => (await runner.run(agent, "A pet.")).finalOutput]);
  }
  for (const [label, run] of cases) {
    try {
      const out = await run();
      check(holds(out), `schema: ${label} returns an object the schema holds`, JSON.stringify(out));
      console.log(`schema: ${label}: ${JSON.stringify(out)}`);
    } catch (e) {
      check(false, `schema: ${label}`, e.stack ?? String(e));
    }
  }
}

async function metrics() {
  const text = await (await fetch(`${base}/metrics`)).text();
  const get = (name) => Number((text.match(new RegExp(`^${name.replace(/[{}]/g, "\\$&")} (\\S+)$`, "m")) ?? [])[1]);
  return { cancelled: get("orbit_cancelled_total"), completion: get("orbit_completion_tokens_total"), busy: get('orbit_requests_in_flight{endpoint="chat"}') +
    get('orbit_requests_in_flight{endpoint="responses"}') + get("orbit_decode_running") + get("orbit_decode_waiting") };
}

// Each client reads the first piece of a long answer, then aborts: the run ends (counted cancelled, nothing held)
// and the session takes the next request.
async function abort() {
  const session = { "X-Orbit-Session": "aborted" };
  const MAX = 400;
  const noEnd = { 1: -100, 2: -100 };  // stories260K's BOS and EOS, its stop tokens, banned: MAX tokens unless cut
  const long = { max_tokens: MAX, temperature: 1, logit_bias: noEnd };
  const pieces = async (iterable, controller, after = 1) => {
    let n = 0;
    try {
      for await (const piece of iterable) {
        void piece;
        if (++n === after) controller.abort();
      }
    } catch (e) {
      void e;  // the abort
    }
    return n;
  };
  const runs = {
    "openai chat": (c) => api.chat.completions.create({ model: M, messages: [{ role: "user", content: "A story." }], ...long,
                                                         stream: true }, { signal: c.signal, headers: session }),
    "openai Responses API": (c) => api.responses.create({ model: M, input: "A story.", max_output_tokens: MAX, logit_bias: noEnd, stream: true },
                                                          { signal: c.signal, headers: session }),
    "LangChain stream": (c) => new ChatOpenAI({ model: M, apiKey: "unused", configuration: { baseURL: `${base}/v1` },
                                                maxTokens: MAX, logitBias: noEnd, maxRetries: 0 }).stream("A story.", { signal: c.signal, headers: session }),
    "AI SDK streamText": (c) => ai.streamText({ model: createOpenAICompatible({ name: "orbit", baseURL: `${base}/v1`, apiKey: "unused" })(M),
                                                prompt: "A story.", maxOutputTokens: MAX, abortSignal: c.signal, headers: session,
                                                providerOptions: { orbit: { logit_bias: noEnd } },
                                                onError: () => {} }).textStream,
    "Agents SDK streamed run": async (c) => {
      const runner = new agents.Runner({ modelProvider: new agents.OpenAIProvider({ baseURL: `${base}/v1`, apiKey: "unused" }),
                                         tracingDisabled: true });
      const agent = new agents.Agent({ name: "Teller", model: M, modelSettings: { maxTokens: MAX, providerData: { logit_bias: noEnd } } });
      return runner.run(agent, "A story.", { stream: true, signal: c.signal });
    },
  };
  // The model writes a token in well under a millisecond: where the whole answer went out before the abort
  // reached the server (all of max_tokens counted, none cancelled), the case runs once more.
  // The run has ended once nothing is busy; the server counts it (cancelled, or its tokens) before it leaves the
  // in-flight gauge, so from then on it is one or the other. Waited for, not for a fixed time: on a loaded machine
  // the server may see the abort late. The deadline is a hang guard; past it the check below fails with the counts.
  const ended = (now, before) =>
    now.busy === 0 && (now.cancelled !== before.cancelled || now.completion - before.completion === MAX);
  const attempt = async (start) => {
    const before = await metrics();
    const controller = new AbortController();
    const read = await pieces(await start(controller), controller);
    const deadline = Date.now() + 180_000;
    let now = await metrics();
    while (!ended(now, before) && Date.now() < deadline) {
      await sleep(50);
      now = await metrics();
    }
    return { read, now, before, ranOut: now.cancelled === before.cancelled && now.completion - before.completion === MAX };
  };
  for (const [label, start] of Object.entries(runs)) {
    let a = await attempt(start);
    if (a.ranOut) a = await attempt(start);
    check(a.read >= 1 && a.now.cancelled === a.before.cancelled + 1 && a.now.busy === 0,
          `abort: ${label}: the run is cancelled and nothing is held`, JSON.stringify(a));
    console.log(`abort: ${label}: read ${a.read} pieces, orbit_cancelled_total ${a.now.cancelled}`);
    const next = await api.chat.completions.create({ model: M, messages: [{ role: "user", content: "Hi." }], max_tokens: 3 },
                                                   { headers: session });
    check(next.choices[0].message.content.length > 0, `abort: ${label}: the session answers next`);
  }
}

try {
  for (const part of [fields, usage, parallel, schema, abort]) {  // one failing part does not hide the others
    await part().catch((e) => check(false, `${part.name} threw`, e.stack ?? String(e)));
  }
} finally {
  await server.stop(check);
}
finish();
