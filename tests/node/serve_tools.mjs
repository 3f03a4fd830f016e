// Tool loops against `orbit serve` with the clients agent builders use, one client per run:
//
//   node serve_tools.mjs ORBIT_BINARY MODEL CLIENT        CLIENT: openai | langchain | aisdk | agents
//
//   openai     the official `openai` client: chat.completions.create with tools, the calls read from
//              message.tool_calls (whole) and from delta.tool_calls (streamed, on every other step); then
//              tools under tool_choice "auto" with a json_schema response_format: a call or the JSON; then a
//              call max_tokens cuts: finish_reason "length" and the call so far, which goes back in the history;
//              then tool results whose call is gone: taken in chat (an agent trims calls and keeps their
//              results), refused in the Responses API as OpenAI refuses them
//   langchain  @langchain/openai's ChatOpenAI with bindTools: the calls read from AIMessage.tool_calls
//   aisdk      the AI SDK's generateText with @ai-sdk/openai-compatible: the SDK runs the loop (the tool's
//              schema given with jsonSchema(), as compact as the others': the model has 512 positions); then
//              generateObject with a schema returns a valid object (response_format json_schema), and with
//              a zod schema (an ISO date, an integer range, a regex, a positive multiple of 0.25; startsWith
//              and lowercase; jwt, base64 and base64url; iso.duration, whose pattern has lookaheads) one that
//              zod's own parse accepts
//   agents     the OpenAI Agents SDK on its default Responses API (/v1/responses): the Runner runs the loop
//              (toolChoice "required" kept, the history windowed by callModelInputFilter)
// and then, for each client, the loops its own helpers run, whose later rounds send back what the client made
// of the answers (serve_tool_rounds.mjs: runTools, parse, responses function_call_output and
// previous_response_id, streamText, the Runner on Chat Completions and chained, LangChain on both APIs).
//
// Starts `orbit serve` on 127.0.0.1 (a free port) with MODEL (the bundled stories260K: a story model whose
// byte tokens can spell any JSON), then runs a 5-step tool loop: each step the model must call the tool
// (tool_choice "required": the server decodes the call under the tool's grammar), the client parses the
// call, the tool runs, and its result goes back. The agent keeps its first message and the last exchange
// (a sliding window, as agents trim their history; the model has 512 positions), so orbit keeps what it
// can and forwards the rest. Then one answer in text (tool_choice "none"). The server is always stopped.
//
// Exit status: 0 all passed, 1 a check failed, 77 skipped (node package or `orbit serve` missing).
import { SKIP, checks, startServer } from "./serve_harness.mjs";
import { agentsRounds, aisdkRounds, langchainRounds, openaiRounds } from "./serve_tool_rounds.mjs";

const [orbit, model, client] = process.argv.slice(2);
if (!orbit || !model || !["openai", "langchain", "aisdk", "agents"].includes(client)) {
  console.error("usage: node serve_tools.mjs ORBIT_BINARY MODEL openai|langchain|aisdk|agents");
  process.exit(2);
}
const packages = { openai: ["openai", "openai/helpers/zod", "zod"], langchain: ["@langchain/openai", "@langchain/core/messages"],
                   aisdk: ["ai", "@ai-sdk/openai-compatible", "zod"], agents: ["@openai/agents", "openai"] };
const modules = {};
for (const name of packages[client]) {
  try {
    modules[name] = await import(name);
  } catch (e) {
    console.log(`SKIPPED: ${name} is not installed (npm install in tests/node): ${e.message}`);
    process.exit(SKIP);
  }
}

const { check, finish } = checks();

// ---- the server (always stopped, whatever happens below) ----
const server = startServer(orbit, ["--model", model]);
const base = await server.ready();
const modelId = model.replace(/\/+$/, "").split("/").pop();

// ---- the tool ----
const STEPS = 5;
const PAGES = ["Tom saw a dog.", "The dog ran.", "Tom ran too.", "They found a ball.", "Then they went home."];
const pagesRead = [];
function readPage(page) {
  pagesRead.push(page);
  return `Page ${page}: ${PAGES[Math.abs(Math.trunc(page)) % PAGES.length]}`;
}
const description = "Read a page of the book.";
const parameters = { type: "object", properties: { page: { type: "integer" } }, required: ["page"] };
const TASK = "Read the book.";

// ---- one loop per client ----
async function openaiLoop() {
  const OpenAI = modules.openai.default;
  const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
  const tools = [{ type: "function", function: { name: "read_page", description, parameters } }];
  const first = { role: "user", content: TASK };
  let last = [];
  for (let step = 1; step <= STEPS; step++) {
    const request = { model: modelId, messages: [first, ...last], tools, tool_choice: "required",
                      parallel_tool_calls: false, max_tokens: 80, temperature: 0 };
    let calls = [];
    let finish;
    let usage;
    if (step % 2 === 0) {  // streamed: the calls come as delta.tool_calls, assembled by index
      const chunks = await api.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
      for await (const chunk of chunks) {
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices[0];
        if (!choice) continue;
        finish = choice.finish_reason ?? finish;
        for (const d of choice.delta.tool_calls ?? []) {
          calls[d.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
          if (d.id) calls[d.index].id = d.id;
          calls[d.index].function.name += d.function?.name ?? "";
          calls[d.index].function.arguments += d.function?.arguments ?? "";
        }
      }
    } else {
      const r = await api.chat.completions.create(request);
      calls = r.choices[0].message.tool_calls ?? [];
      finish = r.choices[0].finish_reason;
      usage = r.usage;
    }
    check(finish === "tool_calls", `openai step ${step}: finish_reason tool_calls`, finish);
    check(calls.length === 1 && calls[0].function.name === "read_page", `openai step ${step}: one call to read_page`,
          JSON.stringify(calls));
    if (calls.length !== 1) return;
    const args = JSON.parse(calls[0].function.arguments);
    check(Number.isInteger(args.page), `openai step ${step}: arguments hold an integer page`, calls[0].function.arguments);
    check(usage?.orbit !== undefined, `openai step ${step}: usage.orbit`);
    const result = readPage(args.page);
    console.log(`openai step ${step}${step % 2 === 0 ? " (streamed)" : ""}: read_page(${calls[0].function.arguments}) ` +
                `-> "${result}"; prompt ${usage?.prompt_tokens}, orbit forwarded ${usage?.orbit?.forward_tokens}, ` +
                `radix ${usage?.orbit?.radix_cache_tokens}, plan ${usage?.orbit?.plan}`);
    last = [{ role: "assistant", content: null, tool_calls: calls },
            { role: "tool", tool_call_id: calls[0].id, content: result }];
  }
  const r = await api.chat.completions.create({ model: modelId, messages: [first, ...last], tools, tool_choice: "none",
                                                max_tokens: 16, temperature: 0 });
  check(typeof r.choices[0].message.content === "string" && r.choices[0].message.content.length > 0 &&
        !r.choices[0].message.tool_calls, "openai: the answer after the loop is text");
}

// tools under tool_choice "auto" with a JSON response_format (an agent with tools and a structured final
// answer, as the Agents SDK's outputType sends): each answer is a call or the JSON, decoded from the first
// byte. stories260K's tokens for '<' (its byte token, 3 + the byte, and 504) pick which: favoured, a call
// comes back; banned, the JSON (streamed).
async function openaiCallOrAnswer() {
  const OpenAI = modules.openai.default;
  const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
  const lt = (bias) => ({ [3 + "<".charCodeAt(0)]: bias, 504: bias });
  const answer = { type: "object", properties: { title: { type: "string", maxLength: 12 } }, required: ["title"],
                   additionalProperties: false };
  const request = { model: modelId, messages: [{ role: "user", content: TASK }], max_tokens: 80, temperature: 0,
                    tools: [{ type: "function", function: { name: "read_page", description, parameters } }],
                    tool_choice: "auto", response_format: { type: "json_schema", json_schema: { name: "book", schema: answer } } };
  const called = await api.chat.completions.create({ ...request, logit_bias: lt(100) });
  const calls = called.choices[0].message.tool_calls ?? [];
  check(called.choices[0].finish_reason === "tool_calls" && calls[0]?.function.name === "read_page" &&
        Number.isInteger(JSON.parse(calls[0].function.arguments).page),
        "openai: with a JSON response_format, tools under auto can still be called", JSON.stringify(called.choices[0]));
  const chunks = await api.chat.completions.create({ ...request, logit_bias: lt(-100), stream: true });
  let text = "";
  for await (const chunk of chunks) text += chunk.choices[0]?.delta?.content ?? "";
  let parsed;
  try { parsed = JSON.parse(text); } catch { parsed = undefined; }
  check(typeof parsed?.title === "string", "openai: ... or answer the JSON (streamed)", text);
  console.log(`openai call or answer: ${calls[0]?.function.arguments} / ${text}`);
}

async function langchainLoop() {
  const { ChatOpenAI } = modules["@langchain/openai"];
  const { HumanMessage, ToolMessage } = modules["@langchain/core/messages"];
  const llm = new ChatOpenAI({ model: modelId, apiKey: "unused", configuration: { baseURL: `${base}/v1` },
                               temperature: 0, maxTokens: 80, maxRetries: 0 });
  const tool = { type: "function", function: { name: "read_page", description, parameters } };
  const bound = llm.bindTools([tool], { tool_choice: "required", parallel_tool_calls: false });
  const first = new HumanMessage(TASK);
  let last = [];
  for (let step = 1; step <= STEPS; step++) {
    const ai = await bound.invoke([first, ...last]);
    const calls = ai.tool_calls ?? [];
    check(calls.length === 1 && calls[0].name === "read_page", `langchain step ${step}: one call to read_page`,
          JSON.stringify(calls));
    if (calls.length !== 1) return;
    check(Number.isInteger(calls[0].args.page), `langchain step ${step}: args hold an integer page`,
          JSON.stringify(calls[0].args));
    const result = readPage(calls[0].args.page);
    console.log(`langchain step ${step}: read_page(${JSON.stringify(calls[0].args)}) -> "${result}"`);
    last = [ai, new ToolMessage({ content: result, tool_call_id: calls[0].id })];
  }
  const answer = await llm.bindTools([tool], { tool_choice: "none" }).invoke([first, ...last]);
  check(typeof answer.content === "string" && answer.content.length > 0 && (answer.tool_calls ?? []).length === 0,
        "langchain: the answer after the loop is text");
}

async function aisdkLoop() {
  const { generateText, tool, stepCountIs, jsonSchema } = modules.ai;
  const { createOpenAICompatible } = modules["@ai-sdk/openai-compatible"];
  const provider = createOpenAICompatible({ name: "orbit", baseURL: `${base}/v1`, apiKey: "unused" });
  const result = await generateText({
    model: provider(modelId),
    tools: {
      read_page: tool({ description, inputSchema: jsonSchema(parameters), execute: async ({ page }) => readPage(page) }),
    },
    toolChoice: "required",
    stopWhen: stepCountIs(STEPS),
    prompt: TASK,
    maxOutputTokens: 80,
    temperature: 0,
    maxRetries: 0,
    // A sliding window: the task and the last exchange.
    prepareStep: ({ messages }) => ({ messages: messages.length > 3 ? [messages[0], ...messages.slice(-2)] : messages }),
  });
  check(result.steps.length === STEPS, "aisdk: the loop ran every step", String(result.steps.length));
  result.steps.forEach((s, i) => {
    check(s.toolCalls.length === 1 && s.toolCalls[0].toolName === "read_page", `aisdk step ${i + 1}: one call to read_page`,
          JSON.stringify(s.toolCalls));
    check(s.toolResults.length === 1, `aisdk step ${i + 1}: the tool ran and its result went back`);
    console.log(`aisdk step ${i + 1}: read_page(${JSON.stringify(s.toolCalls[0]?.input)}) -> ` +
                `${JSON.stringify(s.toolResults[0]?.output)}; finish ${s.finishReason}`);
  });
}

async function agentsLoop() {
  const { Agent, Runner, OpenAIProvider, setTracingDisabled, tool } = modules["@openai/agents"];
  setTracingDisabled(true);  // no exporter calling out
  const provider = new OpenAIProvider({ baseURL: `${base}/v1`, apiKey: "unused", useResponses: true });
  const runner = new Runner({ modelProvider: provider, tracingDisabled: true });
  // Not strict: the SDK then sends the schema as given, as compact as the other clients' (512 positions).
  const reader = tool({ name: "read_page", description, parameters, strict: false,
                        execute: async ({ page }) => readPage(page) });
  const agent = new Agent({
    name: "Reader",
    model: modelId,
    tools: [reader],
    modelSettings: { temperature: 0, toolChoice: "required", parallelToolCalls: false, maxTokens: 80 },
    resetToolChoice: false,  // every turn calls the tool ...
    // ... until the fifth call's result is the final output.
    toolUseBehavior: (context, results) =>
      pagesRead.length >= STEPS ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: results[0].output }
                                : { isFinalOutput: false, isInterrupted: undefined },
  });
  // A sliding window: the task and the last call with its result.
  const callModelInputFilter = ({ modelData }) =>
    ({ ...modelData, input: modelData.input.length > 3 ? [modelData.input[0], ...modelData.input.slice(-2)] : modelData.input });
  const result = await runner.run(agent, TASK, { maxTurns: STEPS + 1, callModelInputFilter });
  const calls = result.newItems.filter((i) => i.type === "tool_call_item");
  check(calls.length === STEPS, "agents: a call on every turn", String(calls.length));
  check(result.rawResponses.every((r) => r.providerData?.usage?.orbit !== undefined), "agents: usage.orbit on every response");
  check(typeof result.finalOutput === "string" && result.finalOutput.startsWith("Page "), "agents: the last result is the output",
        JSON.stringify(result.finalOutput));
  result.rawResponses.forEach((r, i) => {
    const o = r.providerData?.usage?.orbit ?? {};
    console.log(`agents turn ${i + 1}: read_page(${calls[i]?.rawItem?.arguments}); prompt ${r.usage.inputTokens}, ` +
                `orbit forwarded ${o.forward_tokens}, plan ${o.plan}`);
  });
}

// Calls streamed as they are written (the server decodes them under the tool's grammar): the same forced
// request whole and streamed through the client's own streaming API. Streamed, each call arrives in more
// than one delta (its name first, then pieces of its arguments), and the client assembles the calls the whole
// answer has (temperature 0: the same answer both times).
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

async function openaiStreamedAsWhole() {
  const OpenAI = modules.openai.default;
  const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
  const request = { model: modelId, messages: [{ role: "user", content: TASK }], max_tokens: 80, temperature: 0,
                    tools: [{ type: "function", function: { name: "read_page", description, parameters } }],
                    tool_choice: "required", parallel_tool_calls: true };
  const plain = (calls) => (calls ?? []).map((c) => ({ name: c.function.name, arguments: c.function.arguments }));
  const whole = plain((await api.chat.completions.create(request)).choices[0].message.tool_calls);
  const calls = [];
  const deltas = [];
  for await (const chunk of await api.chat.completions.create({ ...request, stream: true })) {
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
      calls[d.index] ??= { function: { name: d.function?.name, arguments: "" } };
      calls[d.index].function.arguments += d.function?.arguments ?? "";
      deltas[d.index] = (deltas[d.index] ?? 0) + 1;
    }
  }
  check(whole.length > 0 && deltas.every((n) => n > 2), "openai: a streamed call arrives in more than one delta",
        JSON.stringify(deltas));
  check(same(plain(calls), whole), "openai: the streamed deltas assemble the whole answer's calls",
        `${JSON.stringify(plain(calls))} vs ${JSON.stringify(whole)}`);
  const helper = await api.chat.completions.stream(request).finalChatCompletion();
  check(same(plain(helper.choices[0].message.tool_calls), whole), "openai: ... and so does the stream helper",
        JSON.stringify(helper.choices[0].message));
  // The Responses API: response.function_call_arguments.delta events as the arguments are written.
  const responses = { model: modelId, input: TASK, max_output_tokens: 80, temperature: 0, store: false,
                      tools: [{ type: "function", name: "read_page", description, parameters }], tool_choice: "required" };
  const items = (r) => r.output.filter((i) => i.type === "function_call").map((i) => ({ name: i.name, arguments: i.arguments }));
  const wholeItems = items(await api.responses.create(responses));
  const argumentDeltas = [];
  for await (const e of await api.responses.create({ ...responses, stream: true })) {
    if (e.type === "response.function_call_arguments.delta") argumentDeltas[e.output_index] = (argumentDeltas[e.output_index] ?? 0) + 1;
  }
  check(wholeItems.length > 0 && argumentDeltas.filter((n) => n).every((n) => n > 1),
        "openai responses: a call's arguments arrive in more than one delta", JSON.stringify(argumentDeltas));
  const final = await api.responses.stream(responses).finalResponse();
  check(same(items(final), wholeItems), "openai responses: the stream helper assembles the whole answer's calls",
        `${JSON.stringify(items(final))} vs ${JSON.stringify(wholeItems)}`);
}

async function langchainStreamedAsWhole() {
  const { ChatOpenAI } = modules["@langchain/openai"];
  const { HumanMessage } = modules["@langchain/core/messages"];
  const llm = new ChatOpenAI({ model: modelId, apiKey: "unused", configuration: { baseURL: `${base}/v1` },
                               temperature: 0, maxTokens: 80, maxRetries: 0 });
  const bound = llm.bindTools([{ type: "function", function: { name: "read_page", description, parameters } }],
                              { tool_choice: "required" });
  const plain = (m) => (m.tool_calls ?? []).map((c) => ({ name: c.name, args: c.args }));
  const whole = plain(await bound.invoke([new HumanMessage(TASK)]));
  let merged;
  let pieces = 0;
  for await (const chunk of await bound.stream([new HumanMessage(TASK)])) {
    if ((chunk.tool_call_chunks ?? []).length > 0) pieces++;
    merged = merged ? merged.concat(chunk) : chunk;
  }
  check(whole.length > 0 && pieces > 2, "langchain: a streamed call arrives in more than one chunk", String(pieces));
  check(same(plain(merged), whole), "langchain: the merged chunks hold the whole answer's calls",
        `${JSON.stringify(plain(merged))} vs ${JSON.stringify(whole)}`);
}

async function aisdkStreamedAsWhole() {
  const { generateText, streamText, tool, jsonSchema } = modules.ai;
  const { createOpenAICompatible } = modules["@ai-sdk/openai-compatible"];
  const provider = createOpenAICompatible({ name: "orbit", baseURL: `${base}/v1`, apiKey: "unused" });
  const options = { model: provider(modelId), tools: { read_page: tool({ description, inputSchema: jsonSchema(parameters) }) },
                    toolChoice: "required", prompt: TASK, maxOutputTokens: 80, temperature: 0, maxRetries: 0 };
  const plain = (calls) => calls.map((c) => ({ name: c.toolName, input: c.input }));
  const whole = plain((await generateText(options)).toolCalls);
  const streamed = streamText(options);
  let deltas = 0;
  for await (const part of streamed.fullStream) if (part.type === "tool-input-delta") deltas++;
  check(whole.length > 0 && deltas > 1, "aisdk: a streamed call's input arrives in more than one delta", String(deltas));
  const calls = plain(await streamed.toolCalls);
  check(same(calls, whole), "aisdk: streamText's calls are generateText's", `${JSON.stringify(calls)} vs ${JSON.stringify(whole)}`);
}

async function agentsStreamedAsWhole() {
  const { Agent, Runner, OpenAIProvider, setTracingDisabled, tool } = modules["@openai/agents"];
  setTracingDisabled(true);
  const provider = new OpenAIProvider({ baseURL: `${base}/v1`, apiKey: "unused", useResponses: true });
  const runner = new Runner({ modelProvider: provider, tracingDisabled: true });
  const reader = tool({ name: "read_page", description, parameters, strict: false, execute: async ({ page }) => `page ${page}` });
  const agent = new Agent({ name: "Reader", model: modelId, tools: [reader], toolUseBehavior: "stop_on_first_tool",
                            modelSettings: { temperature: 0, toolChoice: "required", maxTokens: 80 } });
  const calls = (r) => r.newItems.filter((i) => i.type === "tool_call_item")
    .map((i) => ({ name: i.rawItem.name, arguments: i.rawItem.arguments }));
  const whole = calls(await runner.run(agent, TASK));
  const streamed = await runner.run(agent, TASK, { stream: true });
  let deltas = 0;
  for await (const e of streamed) {
    if (e.type === "raw_model_stream_event" && e.data?.type === "model" &&
        e.data.event?.type === "response.function_call_arguments.delta") deltas++;
  }
  await streamed.completed;
  check(whole.length > 0 && deltas > 1, "agents: a streamed call's arguments arrive in more than one event", String(deltas));
  check(same(calls(streamed), whole), "agents: the streamed run's calls are the whole run's",
        `${JSON.stringify(calls(streamed))} vs ${JSON.stringify(whole)}`);
}

async function aisdkObject() {
  const { generateObject, jsonSchema } = modules.ai;
  const { createOpenAICompatible } = modules["@ai-sdk/openai-compatible"];
  const provider = createOpenAICompatible({ name: "orbit", baseURL: `${base}/v1`, apiKey: "unused",
                                            supportsStructuredOutputs: true });
  const schema = { type: "object", properties: { title: { type: "string", maxLength: 12 }, pages: { type: "integer" } },
                   required: ["title", "pages"], additionalProperties: false };
  const { object } = await generateObject({ model: provider(modelId), schema: jsonSchema(schema), prompt: "Name a book.",
                                            maxOutputTokens: 64, temperature: 0, maxRetries: 0 });
  check(typeof object?.title === "string" && Number.isInteger(object?.pages), "aisdk: generateObject returns a valid object",
        JSON.stringify(object));
  console.log(`aisdk generateObject: ${JSON.stringify(object)}`);
  // zod's keywords (format, pattern, minimum, maximum, exclusiveMinimum, multipleOf) are decoded under, and
  // zod itself checks the answer.
  const { z } = modules.zod;
  const Booking = z.object({ day: z.iso.date(), guests: z.number().int().min(1).max(12),
                             code: z.string().regex(/^[A-Z]{3}$/), price: z.number().positive().multipleOf(0.25) });
  const booked = await generateObject({ model: provider(modelId), schema: Booking, prompt: "Book a table.",
                                        maxOutputTokens: 96, temperature: 0, maxRetries: 0 });
  check(Booking.safeParse(booked.object).success, "aisdk: generateObject under a zod schema returns what zod accepts",
        JSON.stringify(booked.object));
  console.log(`aisdk generateObject (zod): ${JSON.stringify(booked.object)}`);
  // zod writes its own string checks as a format of its own beside the pattern that checks them (startsWith:
  // {"format": "starts_with", "pattern": "^T.*"}): the pattern serves them (the format alone was refused).
  const Ticket = z.object({ ref: z.string().startsWith("T").max(6), owner: z.string().lowercase().max(6) });
  const ticket = await generateObject({ model: provider(modelId), schema: Ticket, prompt: "Open a ticket.",
                                        maxOutputTokens: 64, temperature: 0, maxRetries: 0 });
  check(Ticket.safeParse(ticket.object).success, "aisdk: generateObject under zod's startsWith and lowercase",
        JSON.stringify(ticket.object));
  // zod's jwt writes its format alone, base64 and base64url beside their patterns: decoded under the formats'
  // automata, and zod's own checks (the JWT's header decoded and read as JSON) accept the answer.
  const Token = z.object({ token: z.jwt().max(64), blob: z.base64().max(12), key: z.base64url().max(12) });
  const token = await generateObject({ model: provider(modelId), schema: Token, prompt: "Issue a token.",
                                       maxOutputTokens: 160, temperature: 0, maxRetries: 0 });
  check(Token.safeParse(token.object).success, "aisdk: generateObject under zod's jwt, base64 and base64url",
        JSON.stringify(token.object));
  console.log(`aisdk generateObject (zod formats): ${JSON.stringify(token.object)}`);
  // zod's ISO duration writes its format beside a pattern with lookaheads ((?!.*W), (?=\d|T\d), T(?=\d)):
  // decoded under both, and zod's own check accepts the answer.
  const Span = z.object({ span: z.iso.duration() });
  const span = await generateObject({ model: provider(modelId), schema: Span, prompt: "How long?",
                                      maxOutputTokens: 48, temperature: 0, maxRetries: 0 });
  check(Span.safeParse(span.object).success, "aisdk: generateObject under zod's iso.duration (lookaheads)",
        JSON.stringify(span.object));
  console.log(`aisdk generateObject (zod duration): ${JSON.stringify(span.object)}`);
}

// A call max_tokens cuts (a budget below the shortest call: the grammar cannot close it in time) comes back as
// OpenAI returns one: finish_reason "length", the call so far in tool_calls (whole and streamed alike), which
// the client's runTools reports as a cut answer; sent back with a tool's error, the server takes the cut call
// and the next call is whole.
async function openaiCutCall() {
  const OpenAI = modules.openai.default;
  const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
  const tools = [{ type: "function", function: { name: "read_page", description, parameters } }];
  const request = { model: modelId, messages: [{ role: "user", content: TASK }], tools, tool_choice: "required",
                    parallel_tool_calls: false, max_tokens: 48, temperature: 0 };
  const cut = await api.chat.completions.create(request);
  const call = cut.choices[0].message.tool_calls?.[0];
  check(cut.choices[0].finish_reason === "length" && call?.function.name === "read_page" &&
        call.function.arguments.startsWith("{") && !cut.choices[0].message.content,
        "openai: a call max_tokens cut comes back as the call so far", JSON.stringify(cut.choices[0]));
  const chunks = await api.chat.completions.create({ ...request, stream: true });
  let streamed = "";
  let finishReason;
  for await (const chunk of chunks) {
    finishReason = chunk.choices[0]?.finish_reason ?? finishReason;
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) streamed += d.function?.arguments ?? "";
  }
  check(finishReason === "length" && streamed === call?.function.arguments, "openai: ... and the same streamed",
        `${finishReason} ${streamed}`);
  // runTools reads finish_reason "length" as OpenAI's own cut answers: it stops with LengthFinishReasonError.
  const runner = api.chat.completions.runTools({
    ...request,
    tools: [{ type: "function", function: { name: "read_page", description, parameters, parse: JSON.parse,
                                            function: (args) => readPage(args.page) } }],
  });
  const stopped = await runner.done().then(() => undefined, (e) => e);
  check(stopped?.constructor?.name === "LengthFinishReasonError", "openai runTools: a cut call stops the loop as length",
        String(stopped));
  // An agent that answers the cut call with an error and asks again sends the call back as it came.
  const history = [{ role: "user", content: TASK }, { role: "assistant", content: null, tool_calls: [call] },
                   { role: "tool", tool_call_id: call?.id, content: "The arguments were cut short; call again." }];
  const next = await api.chat.completions.create({ ...request, messages: history, max_tokens: 80 });
  check(next.choices[0].finish_reason === "tool_calls" &&
        Number.isInteger(JSON.parse(next.choices[0].message.tool_calls[0].function.arguments).page),
        "openai: the history with the cut call is accepted and the next call is whole", JSON.stringify(next.choices[0]));
  console.log(`openai cut call: read_page(${call?.function.arguments}) finish ${cut.choices[0].finish_reason}; ` +
              `sent back, then read_page(${next.choices[0].message.tool_calls?.[0]?.function.arguments})`);
}

// A function given without parameters is OpenAI's function with an empty parameter list: its calls' arguments
// are {} (decoded as any object, the model wrote keys of its own the function does not take), whole and through
// the Responses API, whose parameters may be null.
async function openaiNoParameters() {
  const OpenAI = modules.openai.default;
  const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
  const r = await api.chat.completions.create({
    model: modelId, messages: [{ role: "user", content: TASK }], tool_choice: "required", max_tokens: 80, temperature: 0,
    tools: [{ type: "function", function: { name: "close_book", description: "Close the book." } }] });
  check(r.choices[0].finish_reason === "tool_calls" && r.choices[0].message.tool_calls?.[0]?.function.arguments === "{}",
        "openai: a function without parameters is called with {}", JSON.stringify(r.choices[0]));
  const responded = await api.responses.create({
    model: modelId, input: TASK, tool_choice: "required", max_output_tokens: 80, temperature: 0,
    tools: [{ type: "function", name: "close_book", parameters: null, strict: false }] });
  check(responded.output[0]?.type === "function_call" && responded.output[0].arguments === "{}",
        "openai responses: a function with null parameters is called with {}", JSON.stringify(responded.output));
}

// Tool results whose call is gone. Chat takes them, as a trimmed context sends them (OpenAI's API would
// refuse them): a tool message after no assistant calls, or with an id no call has. The Responses API
// refuses, as OpenAI does, a function_call_output whose call_id no function_call made, in the input or in the
// conversation of previous_response_id (where an output of that response's own call is accepted).
async function openaiOrphanResults() {
  const OpenAI = modules.openai.default;
  const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
  const refusal = (promise) => promise.then(() => ({ status: 200 }), (e) => ({ status: e.status, param: e.param }));
  const call = { id: "call_1", type: "function", function: { name: "read_page", arguments: '{"page": 1}' } };
  const chat = (messages) => api.chat.completions.create({ model: modelId, messages, max_tokens: 4, temperature: 0 });
  const user = { role: "user", content: TASK };
  let got = await refusal(chat([user, { role: "tool", tool_call_id: "call_1", content: "Page 1" }]));
  check(got.status === 200, "openai: a tool result whose call was trimmed is taken", JSON.stringify(got));
  got = await refusal(chat([user, { role: "assistant", content: null, tool_calls: [call] },
                            { role: "tool", tool_call_id: "call_9", content: "Page 9" }]));
  check(got.status === 200, "openai: a tool result naming a call that is gone is taken", JSON.stringify(got));
  const input = (callId) => [{ role: "user", content: TASK }, { type: "function_call_output", call_id: callId, output: "x" }];
  got = await refusal(api.responses.create({ model: modelId, input: input("call_9"), max_output_tokens: 4 }));
  check(got.status === 400 && got.param === "input[1].call_id", "openai responses: an output of no call is a 400",
        JSON.stringify(got));
  const tools = [{ type: "function", name: "read_page", description, parameters, strict: false }];
  const first = await api.responses.create({ model: modelId, input: TASK, tools, tool_choice: "required",
                                             max_output_tokens: 80, temperature: 0 });
  const made = first.output.find((item) => item.type === "function_call");
  const chained = (callId) => api.responses.create({
    model: modelId, previous_response_id: first.id, tools, max_output_tokens: 4, temperature: 0,
    input: [{ type: "function_call_output", call_id: callId, output: "Page 1" }] });
  got = await refusal(chained(made?.call_id));
  check(got.status === 200, "openai responses: the output of the previous response's call is accepted",
        JSON.stringify(got));
  got = await refusal(chained("call_9"));
  check(got.status === 400 && got.param === "input[0].call_id",
        "openai responses: an output of a call the chain never made is a 400", JSON.stringify(got));
}

try {
  await { openai: openaiLoop, langchain: langchainLoop, aisdk: aisdkLoop, agents: agentsLoop }[client]();
  check(pagesRead.length === STEPS, `${client}: the tool ran on every step`, JSON.stringify(pagesRead));
  if (client === "aisdk") await aisdkObject();
  await { openai: openaiStreamedAsWhole, langchain: langchainStreamedAsWhole, aisdk: aisdkStreamedAsWhole,
          agents: agentsStreamedAsWhole }[client]();
  if (client === "openai") await openaiCallOrAnswer();
  if (client === "openai") await openaiCutCall();
  if (client === "openai") await openaiNoParameters();
  if (client === "openai") await openaiOrphanResults();
  await { openai: openaiRounds, langchain: langchainRounds, aisdk: aisdkRounds, agents: agentsRounds }[client](
    { modules, base, modelId, check });
} catch (e) {
  check(false, `${client}: the loop threw`, `${e.stack ?? e}\n  server stderr: ${server.stderr().slice(-2000)}`);
} finally {
  await server.stop(check);
}
finish();
