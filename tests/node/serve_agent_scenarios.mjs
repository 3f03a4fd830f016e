// What agent builders do beyond a one-call loop, through the clients they use, one client per run:
//
//   node serve_agent_scenarios.mjs ORBIT_BINARY MODEL CLIENT     CLIENT: openai | langchain | aisdk | agents
//
//   parallel   several calls in one turn (parallel_tool_calls, the default), their results sent back in
//              another order than the calls came: openai (chat whole and streamed, the Responses API chained
//              by previous_response_id and whole), LangChain's streamed tool_call_chunks, the AI SDK's
//              streamText running the tools, the Agents SDK's Runner (both APIs, streamed) running each call
//   choice     tool_choice "required", a named function (the second of two tools), "none", allowed_tools (calls
//              to the allowed tool alone, the prompt listing all; chat, Responses, LangChain's Responses API);
//              one naming no tool refused naming the field (the others send these forms through the same loops)
//   schemas    a strict function schema with nested $defs, arrays of objects (minItems), an enum, a nullable
//              and an optional field, whose arguments are large (over 150 bytes, the least the schema allows)
//              and streamed in pieces; the same schema as a structured answer (response_format json_schema, LangChain's
//              withStructuredOutput, the AI SDK's generateObject and streamObject, the Agents SDK's
//              outputType), each checked by zod
//   handoff    (agents) a triage agent hands off to a second agent, whose request carries its own
//              instructions and tools and the handoff's output, on the Responses API (streamed, chained by
//              previousResponseId) and on Chat Completions
//   fields     (agents) every model setting the Agents SDK sends is honoured (read back from the response)
//              or refused naming the field (400)
//   session    (agents) three runs in a MemorySession on both APIs: each sends the turns before it as the SDK
//              keeps them (on Chat Completions, the answer's message fields inside its text part)
//   unserved   (agents) responses.compact and an OpenAIConversationsSession: 404s that say what to use instead
//   long       a 24-round tool loop in one session: without trimming, the round the context overflows is
//              refused (400 context_length_exceeded, param max_tokens / max_output_tokens) and each client
//              surfaces that error; with the Responses API's truncation "auto" (openai, agents) every round
//              is answered
//
// The server runs MODEL (the bundled stories260K, whose byte tokens spell any JSON; 512 positions) under a
// compact chat template (tool names only, written to a temporary directory), so a turn with four calls and a
// 24-round loop fit. The tiny model writes a call only where it is forced, and a second call only where
// logit_bias favours the separator between calls ('\n', its byte token 13) and bans the end (token 2): the
// checks rest on what constrained decoding guarantees (calls and JSON valid under their schemas), never on
// what the model chose to say. The server is always stopped.
//
// The Agents SDK's cases are in serve_agent_scenarios_agents.mjs.
//
// Exit status: 0 all passed, 1 a check failed, 77 skipped (node package or `orbit serve` missing).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checks, importOr, scriptArgs, startServer } from "./serve_harness.mjs";
import { agentsCases } from "./serve_agent_scenarios_agents.mjs";
import { recordingFetch } from "./serve_tool_rounds.mjs";

const [orbit, model, client] = scriptArgs("serve_agent_scenarios.mjs", "ORBIT_BINARY MODEL CLIENT");
const packages = { openai: ["openai", "zod"], langchain: ["@langchain/openai", "@langchain/core/messages", "zod"],
                   aisdk: ["ai", "@ai-sdk/openai-compatible", "zod"], agents: ["@openai/agents", "openai", "zod"] };
if (!packages[client]) {
  console.error("usage: node serve_agent_scenarios.mjs ORBIT_BINARY MODEL openai|langchain|aisdk|agents");
  process.exit(2);
}
const modules = {};
for (const name of packages[client]) modules[name] = await importOr(name);
const { z } = modules.zod;

const { check, finish } = checks();
const dir = mkdtempSync(join(tmpdir(), "orbit-agent-scenarios-"));
const template = join(dir, "compact.jinja");
writeFileSync(template,
              "{{ bos_token }}{% if tools %}tools:{% for tool in tools %} {{ tool.function.name }}{% endfor %}\n{% endif %}" +
              "{% for message in messages %}{{ message.role }}: {{ message.content }}{% if message.tool_calls %}" +
              "{% for call in message.tool_calls %}<tool_call>{\"name\": {{ call.function.name | tojson }}, \"arguments\": " +
              "{% if call.function.arguments is string %}{{ call.function.arguments }}{% else %}" +
              "{{ call.function.arguments | tojson }}{% endif %}}</tool_call>{% endfor %}{% endif %}\n{% endfor %}" +
              "{% if add_generation_prompt %}assistant:{% endif %}");
const server = startServer(orbit, ["--model", model, "--chat-template", template]);
const base = await server.ready();
const M = model.replace(/\/+$/, "").split("/").pop();

// ---- what the cases share ----
const PARALLEL = { 13: 10, 2: -100 };  // '\n' (between two calls) favoured, the end banned: more than one call
const city = { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"],
               additionalProperties: false };
const weather = (c) => `sunny in ${c}`;
// Arguments as the schema holds them: the schema's zod twin checks what the server decoded.
const City = z.object({ city: z.string().max(8) }).strict();
const cityOk = (args) => City.safeParse(typeof args === "string" ? JSON.parse(args) : args).success;
// A plan: nested $defs (a step refers to a tag), an array of objects of which at least 4, an enum, a nullable
// and an optional field. Strict as OpenAI's strict mode writes a schema (additionalProperties false).
const PLAN = {
  type: "object",
  properties: { steps: { type: "array", items: { $ref: "#/$defs/step" }, minItems: 4, maxItems: 5 },
                owner: { anyOf: [{ type: "string", maxLength: 4 }, { type: "null" }] },
                done: { type: "boolean" } },
  required: ["steps", "owner"],
  additionalProperties: false,
  $defs: { step: { type: "object", properties: { what: { type: "string", maxLength: 6 }, tag: { $ref: "#/$defs/tag" },
                                                  hours: { type: "integer", minimum: 0, maximum: 9 } },
                   required: ["what", "tag", "hours"], additionalProperties: false },
           tag: { type: "string", enum: ["now", "later", "never"] } },
};
const Plan = z.object({
  steps: z.array(z.object({ what: z.string().max(6), tag: z.enum(["now", "later", "never"]),
                            hours: z.number().int().min(0).max(9) }).strict()).min(4).max(5),
  owner: z.string().max(4).nullable(),
  done: z.boolean().optional(),
}).strict();
const planOk = (value) => Plan.safeParse(typeof value === "string" ? JSON.parse(value) : value);
const sameJson = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const short = (x) => JSON.stringify(x)?.slice(0, 600);
const statusOf = (promise) => promise.then(() => ({ status: 200 }), (e) => ({ status: e.status, param: e.param, code: e.code,
                                                                               error: e }));
const ROUNDS = 24;
const CALL = 80;  // room for one call to get_weather (73 tokens of stories260K's)

// ---- openai ----
function openaiClient(fetch) {
  const OpenAI = modules.openai.default;
  return new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000, ...(fetch ? { fetch } : {}) });
}
const chatTools = [{ type: "function", function: { name: "get_weather", parameters: city, strict: true } },
                   { type: "function", function: { name: "get_time", parameters: city, strict: true } }];
const respTools = chatTools.map((t) => ({ type: "function", name: t.function.name, parameters: city, strict: true }));

// Chat: a turn of several calls, whole and streamed (assembled by index as the client documents it), each
// call's id its own; the results sent back last first are taken and the next turn answers in text.
async function openaiParallelChat() {
  const api = openaiClient();
  const user = { role: "user", content: "Weather in Paris and Rome?" };
  const request = { model: M, messages: [user], tools: chatTools, tool_choice: "required", max_tokens: 300,
                    temperature: 0, logit_bias: PARALLEL };
  const whole = await api.chat.completions.create(request);
  const calls = whole.choices[0].message.tool_calls ?? [];
  check(whole.choices[0].finish_reason === "tool_calls" && calls.length >= 2 &&
        new Set(calls.map((c) => c.id)).size === calls.length && calls.every((c) => cityOk(c.function.arguments)),
        "openai chat: several calls in one turn, each with its own id and valid arguments", short(whole.choices[0]));
  const chunks = await api.chat.completions.create({ ...request, stream: true });
  const streamed = [];
  for await (const chunk of chunks) {
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
      streamed[d.index] ??= { id: d.id, name: "", arguments: "" };
      streamed[d.index].name += d.function?.name ?? "";
      streamed[d.index].arguments += d.function?.arguments ?? "";
    }
  }
  check(sameJson(streamed.map((c) => [c.name, c.arguments]), calls.map((c) => [c.function.name, c.function.arguments])) &&
        streamed.every((c) => c.id?.startsWith("call_")), "openai chat (streamed): the same calls, by index, each with an id",
        short(streamed));
  const results = calls.map((c) => ({ role: "tool", tool_call_id: c.id,
                                      content: weather(JSON.parse(c.function.arguments).city) }));
  const back = await api.chat.completions.create({
    model: M, tools: chatTools, tool_choice: "none", max_tokens: 8, temperature: 0,
    messages: [user, { role: "assistant", content: null, tool_calls: calls }, ...results.reverse()] });
  check(typeof back.choices[0].message.content === "string" && !back.choices[0].message.tool_calls,
        "openai chat: the results sent back in reverse order are taken, answered in text", short(back.choices[0]));
  console.log(`openai chat: ${calls.length} calls ${calls.map((c) => c.function.name)}, results reversed, then ` +
              `${JSON.stringify(back.choices[0].message.content)}`);
}

// Responses: the calls' outputs sent back last first, chained by previous_response_id and whole in input:
// the same conversation either way (the same prompt length), each output's call found.
async function openaiParallelResponses() {
  const api = openaiClient();
  const first = await api.responses.create({ model: M, input: "Weather?", tools: respTools, tool_choice: "required",
                                             max_output_tokens: 300, temperature: 0, logit_bias: PARALLEL });
  const calls = first.output.filter((i) => i.type === "function_call");
  check(calls.length >= 2 && new Set(calls.map((c) => c.call_id)).size === calls.length &&
        calls.every((c) => cityOk(c.arguments)), "openai responses: several calls in one turn", short(first.output));
  const outputs = calls.map((c) => ({ type: "function_call_output", call_id: c.call_id, output: weather(c.name) })).reverse();
  const request = { model: M, tools: respTools, tool_choice: "none", max_output_tokens: 8, temperature: 0 };
  const chained = await api.responses.create({ ...request, previous_response_id: first.id, input: outputs });
  const whole = await api.responses.create({ ...request, store: false,
                                             input: [{ role: "user", content: "Weather?" }, ...first.output, ...outputs] });
  check(chained.usage.input_tokens === whole.usage.input_tokens && chained.output_text === whole.output_text,
        "openai responses: the outputs reversed, chained and whole, read as the same conversation",
        `${chained.usage.input_tokens} vs ${whole.usage.input_tokens}`);
  const items = [];
  for await (const item of api.responses.inputItems.list(chained.id, { order: "asc" })) items.push(item);
  check(sameJson(items.map((i) => i.call_id), outputs.map((o) => o.call_id)), "openai responses: the input items as sent",
        short(items));
}

// tool_choice's forms: "required" calls one of the tools, a named function calls that one (the second
// listed), "none" answers in text, allowed_tools calls the tools it allows; a name no tool has is refused naming
// the field.
async function openaiToolChoice() {
  const api = openaiClient();
  const request = { model: M, messages: [{ role: "user", content: "Weather?" }], tools: chatTools, max_tokens: 80,
                    temperature: 0, parallel_tool_calls: false };
  const required = await api.chat.completions.create({ ...request, tool_choice: "required" });
  const named = await api.chat.completions.create({ ...request,
                                                    tool_choice: { type: "function", function: { name: "get_time" } } });
  const none = await api.chat.completions.create({ ...request, tool_choice: "none", max_tokens: 8 });
  const names = (r) => (r.choices[0].message.tool_calls ?? []).map((c) => c.function.name);
  check(names(required).length === 1 && ["get_weather", "get_time"].includes(names(required)[0]),
        "openai tool_choice required: one call to a tool", short(required.choices[0]));
  check(sameJson(names(named), ["get_time"]), "openai tool_choice named: a call to that function", short(named.choices[0]));
  check(names(none).length === 0 && typeof none.choices[0].message.content === "string",
        "openai tool_choice none: text, no call", short(none.choices[0]));
  const unknown = await statusOf(api.chat.completions.create({
    ...request, tool_choice: { type: "function", function: { name: "nope" } } }));
  check(unknown.status === 400 && unknown.param === "tool_choice.function.name",
        "openai tool_choice naming no tool: 400 naming it", `${unknown.status} ${unknown.param}`);
  // allowed_tools: calls to a subset of the tools (several, '\n' favoured), the prompt listing them all (as many
  // prompt tokens as "required"); a name no tool has refused naming it.
  const subset = (names) => ({ type: "allowed_tools", allowed_tools: { mode: "required",
    tools: names.map((name) => ({ type: "function", function: { name } })) } });
  const allowed = await api.chat.completions.create({ ...request, parallel_tool_calls: true, logit_bias: PARALLEL,
                                                      max_tokens: 300, tool_choice: subset(["get_time"]) });
  check(names(allowed).length >= 2 && names(allowed).every((n) => n === "get_time") &&
        allowed.usage.prompt_tokens === required.usage.prompt_tokens,
        "openai tool_choice allowed_tools: calls to the allowed tool alone, the prompt unchanged",
        `${names(allowed)} ${allowed.usage.prompt_tokens} vs ${required.usage.prompt_tokens}`);
  const notATool = await statusOf(api.chat.completions.create({ ...request, tool_choice: subset(["nope"]) }));
  check(notATool.status === 400 && notATool.param === "tool_choice.allowed_tools.tools[0].function.name",
        "openai tool_choice allowed_tools naming no tool: 400 naming it", `${notATool.status} ${notATool.param}`);
  const respondedSubset = await api.responses.create({
    model: M, input: "Weather?", tools: respTools, max_output_tokens: 80, temperature: 0,
    tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "get_time" }] } });
  check(sameJson(respondedSubset.output.map((i) => i.name), ["get_time"]) &&
        respondedSubset.tool_choice?.type === "allowed_tools", "openai responses tool_choice allowed_tools: that tool",
        short(respondedSubset.output));
  const responded = await api.responses.create({ model: M, input: "Weather?", tools: respTools, max_output_tokens: 80,
                                                 temperature: 0, tool_choice: { type: "function", name: "get_time" } });
  check(sameJson(responded.output.map((i) => i.name), ["get_time"]), "openai responses tool_choice named: that function",
        short(responded.output));
}

// The plan's schema as a strict function's parameters, its call forced: the arguments (large, nested) hold
// the schema, whole and streamed in pieces that make the same text; and as response_format json_schema.
async function openaiSchemas() {
  const api = openaiClient();
  const tools = [{ type: "function", function: { name: "make_plan", parameters: PLAN, strict: true } }];
  const request = { model: M, messages: [{ role: "user", content: "Plan the day." }], tools, tool_choice: "required",
                    parallel_tool_calls: false, max_tokens: 400, temperature: 0 };
  const whole = await api.chat.completions.create(request);
  const args = whole.choices[0].message.tool_calls?.[0]?.function.arguments ?? "";
  const parsed = planOk(args || "null");
  check(parsed.success && args.length > 150, "openai strict schema: large nested arguments the schema holds",
        `${args.length} bytes: ${args} ${parsed.error?.message ?? ""}`);
  let streamed = "";
  let pieces = 0;
  for await (const chunk of await api.chat.completions.create({ ...request, stream: true })) {
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
      if (d.function?.arguments) (streamed += d.function.arguments), pieces++;
    }
  }
  check(streamed === args && pieces > 10, "openai strict schema (streamed): the same arguments, in pieces",
        `${pieces}: ${streamed}`);
  const answer = await api.chat.completions.create({
    model: M, messages: [{ role: "user", content: "Plan the day." }], max_tokens: 400, temperature: 0,
    response_format: { type: "json_schema", json_schema: { name: "plan", schema: PLAN, strict: true } } });
  const content = answer.choices[0].message.content;
  check(planOk(content).success, "openai response_format json_schema: the plan the schema holds", content);
  console.log(`openai schemas: call ${args.length} bytes in ${pieces} pieces; answer ${content}`);
}

// 24 rounds of a forced call in one conversation, nothing trimmed: the round whose prompt leaves too little
// room is refused before it runs, 400 context_length_exceeded naming max_tokens, as the client's
// BadRequestError. Then the same loop on the Responses API chained by previous_response_id: with truncation
// "disabled" refused the same way (naming max_output_tokens), with "auto" every round answered, the oldest
// exchanges dropped to make room (the prompt stops growing).
async function openaiLong() {
  const api = openaiClient();
  const tools = [chatTools[0]];
  const messages = [{ role: "user", content: "Weather?" }];
  const finishes = new Set();
  let refused;
  for (let round = 1; round <= ROUNDS && !refused; round++) {
    const r = await api.chat.completions.create({ model: M, messages, tools, tool_choice: "required", max_tokens: CALL,
                                                  temperature: 0 }).catch((e) => (refused = { round, e }));
    if (refused) break;
    finishes.add(r.choices[0].finish_reason);
    const call = r.choices[0].message.tool_calls[0];
    messages.push({ role: "assistant", content: null, tool_calls: [call] },
                  { role: "tool", tool_call_id: call.id, content: weather(round) });
  }
  const e = refused?.e;
  check(sameJson([...finishes], ["tool_calls"]), "openai chat: each round before it a whole call", [...finishes].join());
  check(refused !== undefined && refused.round > 2 && e?.constructor?.name === "BadRequestError" &&
        e.code === "context_length_exceeded" && e.param === "max_tokens" && /context/.test(e.message),
        "openai chat, untrimmed: the round past the context is refused 400 context_length_exceeded",
        `${refused?.round} ${e?.constructor?.name} ${e?.code} ${e?.param} ${e?.message}`);
  console.log(`openai chat untrimmed: refused at round ${refused?.round}: ${e?.message}`);
  for (const truncation of ["disabled", "auto"]) {
    let previous;
    let input = "Weather?";
    const prompts = [];
    const statuses = new Set();
    let stop;
    for (let round = 1; round <= ROUNDS; round++) {
      const r = await api.responses.create({ model: M, input, previous_response_id: previous, tools: respTools.slice(0, 1),
                                             tool_choice: "required", max_output_tokens: CALL, temperature: 0, truncation })
        .catch((err) => (stop = { round, e: err }));
      if (stop) break;
      const call = r.output.find((i) => i.type === "function_call");
      prompts.push(r.usage.input_tokens);
      statuses.add(r.status);
      previous = r.id;
      input = [{ type: "function_call_output", call_id: call.call_id, output: weather(round) }];
    }
    check(sameJson([...statuses], ["completed"]), `openai responses, truncation ${truncation}: each round a whole call`,
          [...statuses].join());
    if (truncation === "disabled") {
      check(stop?.e?.status === 400 && stop.e.code === "context_length_exceeded" && stop.e.param === "max_output_tokens",
            "openai responses, truncation disabled: the round past the context is refused", `${stop?.round} ${stop?.e}`);
    } else {
      check(stop === undefined && prompts.length === ROUNDS && Math.max(...prompts) + CALL <= 512 &&
            prompts.at(-1) < prompts.length * (prompts[1] - prompts[0]),
            `openai responses, truncation auto: all ${ROUNDS} rounds answered, the prompt kept in the context`,
            `${stop?.round} ${stop?.e} prompts ${prompts}`);
    }
    console.log(`openai responses truncation ${truncation}: ${prompts.length} rounds, prompts ${prompts.join(" ")}` +
                `${stop ? `, refused at round ${stop.round}` : ""}`);
  }
}

// ---- langchain ----
function langchainModel(options = {}) {
  const { ChatOpenAI } = modules["@langchain/openai"];
  const configuration = { baseURL: `${base}/v1`, ...(options.fetch ? { fetch: options.fetch } : {}) };
  return new ChatOpenAI({ model: M, apiKey: "unused", configuration,
                          temperature: 0, maxTokens: 300, maxRetries: 0, ...options.settings });
}

// A streamed turn of several calls: the chunks' tool_call_chunks carry each call's index, the merged message
// has each call whole (parsed args) with its id; sent back with the results last first, answered in text.
async function langchainParallel() {
  const { HumanMessage, ToolMessage } = modules["@langchain/core/messages"];
  const llm = langchainModel({ settings: { logitBias: PARALLEL } });
  const bound = llm.bindTools(chatTools, { tool_choice: "required" });
  const human = new HumanMessage("Weather in Paris and Rome?");
  let merged;
  const indexes = new Set();
  for await (const chunk of await bound.stream([human])) {
    for (const c of chunk.tool_call_chunks ?? []) indexes.add(c.index);
    merged = merged ? merged.concat(chunk) : chunk;
  }
  const calls = merged?.tool_calls ?? [];
  check(calls.length >= 2 && indexes.size === calls.length && calls.every((c) => cityOk(c.args) && c.id),
        "langchain (streamed): several calls, one index each, merged whole", `${[...indexes]} ${short(calls)}`);
  const { sent, fetch } = recordingFetch();
  const answer = await langchainModel({ fetch, settings: { maxTokens: 8 } }).bindTools(chatTools, { tool_choice: "none" })
    .invoke([human, merged,
             ...calls.map((c) => new ToolMessage({ content: weather(c.args.city), tool_call_id: c.id })).reverse()]);
  const ids = (sent[0]?.body?.messages ?? []).filter((m) => m.role === "tool").map((m) => m.tool_call_id);
  check(sent[0]?.status === 200 && sameJson(ids, calls.map((c) => c.id).reverse()) && typeof answer.content === "string",
        "langchain: the results sent back in reverse order are taken, answered in text", short(sent[0]?.body?.messages));
  console.log(`langchain: ${calls.length} calls streamed, results reversed, then ${JSON.stringify(answer.content)}`);
}

// tool_choice allowed_tools through bindTools, on both APIs (LangChain writes the Responses API's own shape):
// the calls are to the allowed tool alone.
async function langchainAllowedTools() {
  const choice = { type: "allowed_tools",
                   allowed_tools: { mode: "required", tools: [{ type: "function", function: { name: "get_time" } }] } };
  for (const useResponsesApi of [false, true]) {
    const { sent, fetch } = recordingFetch();
    const ai = await langchainModel({ fetch, settings: { maxTokens: 80, useResponsesApi } })
      .bindTools(chatTools, { tool_choice: choice, parallel_tool_calls: false }).invoke("Weather?");
    const label = `langchain tool_choice allowed_tools${useResponsesApi ? " (useResponsesApi)" : ""}`;
    const names = (ai.tool_calls ?? []).map((c) => c.name);
    check(sent[0]?.body?.tool_choice?.type === "allowed_tools" && sameJson(names, ["get_time"]),
          `${label}: a call to the allowed tool`, `${short(sent[0]?.body?.tool_choice)} ${short(ai.tool_calls)}`);
  }
}

// The plan through withStructuredOutput, as a forced function call and as a json_schema answer, on both APIs.
async function langchainSchemas() {
  for (const useResponsesApi of [false, true]) {
    for (const method of ["functionCalling", "jsonSchema"]) {
      const llm = langchainModel({ settings: { maxTokens: 400, useResponsesApi } });
      const label = `langchain withStructuredOutput (${method}${useResponsesApi ? ", useResponsesApi" : ""})`;
      const r = await llm.withStructuredOutput(PLAN, { method, strict: method === "functionCalling" ? true : undefined,
                                                       name: "make_plan" }).invoke("Plan the day.");
      check(planOk(r).success, `${label}: the plan the schema holds`, short(r));
    }
  }
}

// 24 rounds with nothing trimmed: the client throws the server's 400 with its code.
async function langchainLong() {
  const { HumanMessage, ToolMessage } = modules["@langchain/core/messages"];
  const bound = langchainModel({ settings: { maxTokens: CALL } }).bindTools([chatTools[0]], { tool_choice: "required" });
  const messages = [new HumanMessage("Weather?")];
  let refused;
  for (let round = 1; round <= ROUNDS && !refused; round++) {
    const ai = await bound.invoke(messages).catch((e) => (refused = { round, e }));
    if (refused) break;
    messages.push(ai, new ToolMessage({ content: weather(round), tool_call_id: ai.tool_calls[0].id }));
  }
  const e = refused?.e;
  check(refused?.round > 2 && e?.status === 400 && e?.code === "context_length_exceeded" && /context/.test(e?.message),
        "langchain, untrimmed: the round past the context throws 400 context_length_exceeded",
        `${refused?.round} ${e?.status} ${e?.code} ${e?.message}`);
  console.log(`langchain untrimmed: refused at round ${refused?.round}`);
}

// ---- aisdk ----
function aisdkProvider(fetch) {
  const { createOpenAICompatible } = modules["@ai-sdk/openai-compatible"];
  return createOpenAICompatible({ name: "orbit", baseURL: `${base}/v1`, apiKey: "unused", supportsStructuredOutputs: true,
                                  ...(fetch ? { fetch } : {}) });
}

// streamText runs the tools of a turn of several calls (a named tool forced in round 1) and sends every
// result back in round 2, which answers in text.
async function aisdkParallel() {
  const { streamText, tool, jsonSchema, stepCountIs } = modules.ai;
  const { sent, fetch } = recordingFetch();
  const ran = [];
  const result = streamText({
    model: aisdkProvider(fetch)(M), prompt: "Weather in Paris and Rome?", maxOutputTokens: 300, temperature: 0, maxRetries: 0,
    tools: { get_weather: tool({ inputSchema: jsonSchema(city), execute: async ({ city: c }) => (ran.push(c), weather(c)) }) },
    toolChoice: { type: "tool", toolName: "get_weather" }, stopWhen: stepCountIs(2),
    providerOptions: { orbit: { logit_bias: PARALLEL } },
    prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: "none", maxOutputTokens: 8 } : {}),
  });
  let inputs = 0;
  for await (const part of result.fullStream) if (part.type === "tool-input-start") inputs++;
  const steps = await result.steps;
  const calls = steps[0]?.toolCalls ?? [];
  check(calls.length >= 2 && inputs === calls.length && ran.length === calls.length && calls.every((c) => cityOk(c.input)),
        "aisdk streamText: several calls in one turn, each run", `${inputs} ${short(calls)}`);
  const results = (sent[1]?.body?.messages ?? []).filter((m) => m.role === "tool");
  check(steps.length === 2 && sent[1]?.status === 200 && results.length === calls.length &&
        sameJson(results.map((m) => m.tool_call_id), calls.map((c) => c.toolCallId)),
        "aisdk streamText: round 2 sends every result back and is answered", short(sent[1]?.body?.messages));
  console.log(`aisdk streamText: ${calls.length} calls run, then ${JSON.stringify(steps[1]?.text)}`);
}

// The plan through generateObject and streamObject (zod's own parse inside the SDK, then the plan's twin).
async function aisdkSchemas() {
  const { generateObject, streamObject, jsonSchema } = modules.ai;
  const options = { model: aisdkProvider()(M), schema: jsonSchema(PLAN), prompt: "Plan the day.", maxOutputTokens: 400,
                    temperature: 0, maxRetries: 0 };
  const { object } = await generateObject(options);
  check(planOk(object).success, "aisdk generateObject: the plan the schema holds", short(object));
  const streamed = streamObject(options);
  let partials = 0;
  for await (const partial of streamed.partialObjectStream) if (partial) partials++;
  const final = await streamed.object;
  check(planOk(final).success && partials > 1, "aisdk streamObject: the plan, in partial objects", `${partials} ${short(final)}`);
  const { object: under } = await generateObject({ ...options, schema: Plan });
  check(planOk(under).success, "aisdk generateObject under the zod schema", short(under));
}

// 24 rounds, nothing trimmed: generateText's loop stops on the server's 400, surfaced as the SDK's
// APICallError with the status and the server's message.
async function aisdkLong() {
  const { generateText, tool, jsonSchema, stepCountIs } = modules.ai;
  let rounds = 0;
  const error = await generateText({
    model: aisdkProvider()(M), prompt: "Weather?", maxOutputTokens: CALL, temperature: 0, maxRetries: 0,
    tools: { get_weather: tool({ inputSchema: jsonSchema(city), execute: async ({ city: c }) => (rounds++, weather(c)) }) },
    toolChoice: "required", stopWhen: stepCountIs(ROUNDS), providerOptions: { orbit: { parallel_tool_calls: false } },
  }).then(() => undefined, (e) => e);
  check(rounds > 2 && modules.ai.APICallError.isInstance(error) && error.statusCode === 400 &&
        /context/.test(error.message) && JSON.parse(error.responseBody ?? "{}").error?.code === "context_length_exceeded",
        "aisdk, untrimmed: the round past the context stops the loop with the 400", `${rounds} ${error?.constructor?.name} ` +
        `${error?.statusCode} ${error?.message} ${error?.responseBody}`);
  console.log(`aisdk untrimmed: ${rounds} rounds, then ${error?.message}`);
}

const cases = {
  openai: [openaiParallelChat, openaiParallelResponses, openaiToolChoice, openaiSchemas, openaiLong],
  langchain: [langchainParallel, langchainAllowedTools, langchainSchemas, langchainLong],
  aisdk: [aisdkParallel, aisdkSchemas, aisdkLong],
  agents: agentsCases({ modules, z, M, check, openaiClient, PARALLEL, city, weather, cityOk, PLAN, planOk, sameJson,
                        short, statusOf, ROUNDS, CALL }),
};
try {
  for (const run of cases[client]) {  // one case that throws does not hide the others
    await run().catch((e) => check(false, `${run.name} threw`,
                                   `${e.stack ?? e}\n  server stderr: ${server.stderr().slice(-1500)}`));
  }
} finally {
  await server.stop(check);
  rmSync(dir, { recursive: true, force: true });
}
finish();
