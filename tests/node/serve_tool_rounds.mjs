// Multi-round tool loops run by each client's own loop helper, for serve_tools.mjs: what a client sends back on
// round 2 and after (its copy of the answer, with whatever it added while parsing it, and the tool's result) is
// what a real agent sends, so the server must take it. Every client here is given a fetch that records each
// request's body and status, so a case checks that round 2 was sent, answered 200, and held the tool's result.
//
//   openai     chat.completions.runTools (plain function tools, zodFunction tools, streamed) for two rounds,
//              then its messages sent on with tool_choice "none"; chat.completions.parse under a json_schema
//              response_format and with zodFunction tools, the parsed answer sent back; the Responses API's
//              function_call items sent back with function_call_output, whole in input and chained by
//              previous_response_id (the same prompt both ways), and responses.parse's items sent back
//   langchain  a streamed call's merged chunk sent back (bindTools), and the loop on the Responses API
//              (useResponsesApi)
//   aisdk      streamText running the loop (stopWhen: stepCountIs, prepareStep handing round 2 tool_choice none)
//   agents     the Runner on Chat Completions (useResponses false), and on the Responses API chained by
//              previousResponseId (each round after the first sends only the call's output, chained)
//
// The tiny model calls a tool only where the request forces one (tool_choice "required" or a function), so a
// loop's rounds after the first are forced or answered in text with tool_choice "none".

// A fetch that records every request's parsed body and the answer's status.
export function recordingFetch() {
  const sent = [];
  const record = async (url, init) => {
    const response = await fetch(url, init);
    let body;
    try {
      body = typeof init?.body === "string" ? JSON.parse(init.body) : undefined;
    } catch {
      body = init.body;
    }
    sent.push({ url: String(url), body, status: response.status });
    return response;
  };
  return { sent, fetch: record };
}

// Pages 1 to 9: a call's arguments stay short, so two exchanges fit the model's 512 positions.
const parameters = { type: "object", properties: { page: { type: "integer", minimum: 1, maximum: 9 } },
                     required: ["page"] };
const TASK = "Read.";
const page = (n) => `${n}: Tom ran.`;
const oneLine = (sent) => sent.map((s) => `${s.status} ${JSON.stringify(s.body)}`).join("\n  ");

// Round r (1-based) of a chat loop: the request's status, its messages and the tool results among them.
function chatRound(sent, r) {
  const request = sent.filter((s) => s.url.endsWith("/chat/completions"))[r - 1];
  const results = (request?.body?.messages ?? []).filter((m) => m.role === "tool").map((m) => m.content);
  return { status: request?.status, results, messages: request?.body?.messages ?? [] };
}

export async function openaiRounds(ctx) {
  ctx = { ...ctx, zod: { z: ctx.modules.zod.z, ...ctx.modules["openai/helpers/zod"] } };
  for (const cases of [openaiRunTools, openaiParse, openaiResponses]) {  // one refusal does not hide the others
    await cases(ctx).catch((e) => ctx.check(false, `${cases.name} threw`, e.stack ?? String(e)));
  }
}

// runTools for two rounds: round 1 calls the tool (tool_choice "required"), the helper runs it and sends back its
// own messages (the assistant's with parsed, each call's function with parsed_arguments where the tool parses),
// round 2 calls again; then the runner's messages go on with tool_choice "none" and are answered in text. (A
// function named in tool_choice ends runTools after its one call, by the helper's design: no round 2.)
async function openaiRunTools({ modules, base, modelId, check, zod }) {
  const OpenAI = modules.openai.default;
  const plain = { type: "function",
                  function: { name: "read", parameters, parse: JSON.parse, function: (a) => page(a.page) } };
  const parsed = zod.zodFunction({ name: "read", parameters: zod.z.object({ page: zod.z.number().int().min(1).max(9) }),
                                   function: (a) => page(a.page) });
  const variants = [["plain", false, plain], ["zodFunction", false, parsed], ["zodFunction, streamed", true, parsed]];
  for (const [label, stream, tool] of variants) {
    const { sent, fetch } = recordingFetch();
    const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000, fetch });
    const runner = api.chat.completions.runTools(
      { model: modelId, messages: [{ role: "user", content: TASK }], tools: [tool], tool_choice: "required",
        parallel_tool_calls: false, max_tokens: 50, temperature: 0, ...(stream ? { stream: true } : {}) },
      { maxChatCompletions: 2 });
    const error = await runner.done().then(() => undefined, (e) => e);
    const rounds = sent.length;
    const round2 = chatRound(sent, 2);
    check(!error && rounds === 2 && round2.status === 200 && round2.results.length === 1 &&
          /^[1-9]: Tom ran\.$/.test(round2.results[0]),
          `openai runTools (${label}): round 2 sends the tool's result back and is answered`,
          `${error}\n  ${oneLine(sent)}`);
    if (error) continue;
    const answered = round2.messages.find((m) => m.role === "assistant");
    check(answered !== undefined && "parsed" in answered,
          `openai runTools (${label}): round 2 holds the helper's parsed answer`, JSON.stringify(answered));
    // The agent goes on from the runner's messages as they are (its first and its last exchange: the model
    // has 512 positions), answered in text.
    const kept = [runner.messages[0], ...runner.messages.slice(-2)];
    const r = await api.chat.completions.create({ model: modelId, messages: kept, tools: [tool].map(plainTool),
                                                 tool_choice: "none", max_tokens: 16, temperature: 0 });
    const text = r.choices[0].message.content;
    check(typeof text === "string" && text.length > 0 && sent.at(-1).status === 200 && "parsed" in kept[1] &&
          kept[2].role === "tool", `openai runTools (${label}): the runner's last exchange, sent on, is answered in text`,
          `${JSON.stringify(r.choices[0])}\n  ${JSON.stringify(kept)}`);
    const firstCall = round2.messages[1]?.tool_calls?.[0]?.function.arguments;
    console.log(`openai runTools (${label}): ${rounds} rounds, read(${firstCall}), then ${JSON.stringify(text)}`);
  }
}

// A tool as the API takes it (runTools' own tools carry their function and parser).
function plainTool(t) {
  const f = t.function;
  return { type: "function", function: { name: f.name, description: f.description, parameters: f.parameters,
                                         ...(f.strict ? { strict: true } : {}) } };
}

// chat.completions.parse: the answer under a json_schema response_format comes back with message.parsed, and
// a call to a zodFunction tool with function.parsed_arguments; the agent keeps the message as parsed and sends
// it back on the next turn.
async function openaiParse({ modules, base, modelId, check, zod }) {
  const OpenAI = modules.openai.default;
  const { sent, fetch } = recordingFetch();
  const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000, fetch });
  const format = zod.zodResponseFormat(zod.z.object({ title: zod.z.string().max(8) }), "book");
  const user = { role: "user", content: "Name a book." };
  const first = await api.chat.completions.parse({ model: modelId, messages: [user], response_format: format,
                                                   max_tokens: 64, temperature: 0 });
  const message = first.choices[0].message;
  check(typeof message.parsed?.title === "string", "openai parse: the answer parsed under the json_schema",
        JSON.stringify(message));
  const next = await api.chat.completions.parse({ model: modelId, response_format: format, max_tokens: 64,
                                                  temperature: 0,
                                                  messages: [user, message, { role: "user", content: "Another one." }] });
  check(sent[1]?.status === 200 && "parsed" in (sent[1]?.body?.messages?.[1] ?? {}) &&
        typeof next.choices[0].message.parsed?.title === "string",
        "openai parse: the parsed answer sent back is taken and the next one parses", oneLine(sent));
  console.log(`openai parse: ${JSON.stringify(message.parsed)} then ${JSON.stringify(next.choices[0].message.parsed)}`);
  const tool = zod.zodFunction({ name: "read", parameters: zod.z.object({ page: zod.z.number().int().min(1).max(9) }) });
  const request = { model: modelId, tools: [tool], tool_choice: "required", parallel_tool_calls: false, max_tokens: 80,
                    temperature: 0 };
  const called = await api.chat.completions.parse({ ...request, messages: [{ role: "user", content: TASK }] });
  const assistant = called.choices[0].message;
  const call = assistant.tool_calls?.[0];
  check(Number.isInteger(call?.function.parsed_arguments?.page), "openai parse: a zodFunction call comes back parsed",
        JSON.stringify(assistant));
  // (create, not parse: parse refuses an answer max_tokens cuts, and a text answer is cut here.)
  const round2 = await api.chat.completions.create({
    ...request, tool_choice: "none", max_tokens: 16,
    messages: [{ role: "user", content: TASK }, assistant,
               { role: "tool", tool_call_id: call?.id, content: page(call?.function.parsed_arguments?.page) }] });
  const sentCall = sent.at(-1)?.body?.messages?.[1]?.tool_calls?.[0]?.function ?? {};
  check(sent.at(-1)?.status === 200 && "parsed_arguments" in sentCall && round2.choices[0].message.content?.length > 0,
        "openai parse: the parsed call sent back with its result is answered in text", oneLine(sent.slice(-2)));
}

// The Responses API: round 1's output items (function_call, as the client returned them) go back in input with
// their function_call_output; the same round 2 chained by previous_response_id sends only the output. Both
// render the same conversation, so their prompts have the same length. responses.parse's items (function_call
// with parsed_arguments) are taken back too.
async function openaiResponses({ modules, base, modelId, check, zod }) {
  const OpenAI = modules.openai.default;
  const { sent, fetch } = recordingFetch();
  const api = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000, fetch });
  const tools = [{ type: "function", name: "read", parameters, strict: false }];
  const request = { model: modelId, tools, max_output_tokens: 80, temperature: 0 };
  const user = { role: "user", content: TASK };
  const first = await api.responses.create({ ...request, input: [user], tool_choice: "required" });
  const calls = first.output.filter((i) => i.type === "function_call");
  check(calls.length === 1 && Number.isInteger(JSON.parse(calls[0].arguments).page),
        "openai responses: round 1 calls the tool", JSON.stringify(first.output));
  if (calls.length !== 1) return;
  const output = { type: "function_call_output", call_id: calls[0].call_id,
                   output: page(JSON.parse(calls[0].arguments).page) };
  const whole = await api.responses.create({ ...request, input: [user, ...first.output, output], tool_choice: "none",
                                             max_output_tokens: 16 });
  check(whole.output_text.length > 0 && whole.usage.input_tokens > first.usage.input_tokens,
        "openai responses: the call items and their output sent back are answered in text", JSON.stringify(whole.output));
  const chained = await api.responses.create({ ...request, previous_response_id: first.id, input: [output],
                                               tool_choice: "none", max_output_tokens: 16 });
  check(chained.output_text === whole.output_text && chained.usage.input_tokens === whole.usage.input_tokens,
        "openai responses: chained by previous_response_id, the same prompt and answer",
        `${chained.usage.input_tokens} vs ${whole.usage.input_tokens}: ${JSON.stringify(chained.output_text)} vs ` +
        `${JSON.stringify(whole.output_text)}`);
  console.log(`openai responses: prompt ${first.usage.input_tokens} -> ${whole.usage.input_tokens} (whole) / ` +
              `${chained.usage.input_tokens} (chained), answer ${JSON.stringify(whole.output_text)}`);
  const pageSchema = zod.z.object({ page: zod.z.number().int().min(1).max(9) });
  const parsedTools = [zod.zodResponsesFunction({ name: "read", parameters: pageSchema })];
  const parsed = await api.responses.parse({ ...request, tools: parsedTools, input: [user], tool_choice: "required" });
  const item = parsed.output.find((i) => i.type === "function_call");
  // (This SDK's responses.parse sets parsed_arguments to the whole item again, its own parse inside.)
  const args = item?.parsed_arguments?.parsed_arguments ?? item?.parsed_arguments;
  check(Number.isInteger(args?.page), "openai responses.parse: the call comes back parsed", JSON.stringify(parsed.output));
  const back = await api.responses.parse({ ...request, tools: parsedTools, tool_choice: "none", max_output_tokens: 16,
    input: [user, ...parsed.output, { type: "function_call_output", call_id: item?.call_id, output: page(args?.page) }] });
  check(sent.at(-1)?.status === 200 && "parsed_arguments" in (sent.at(-1)?.body?.input?.[1] ?? {}) &&
        back.output_text.length > 0,
        "openai responses.parse: its items sent back with the output are answered in text", oneLine(sent.slice(-2)));
}

// streamText runs the loop (the generateText loop is serve_tools.mjs'): round 1 forced to call, the tool runs,
// round 2 (prepareStep hands it tool_choice "none") answers in text, and the loop stops there.
export async function aisdkRounds({ modules, base, modelId, check }) {
  const { streamText, tool, jsonSchema, stepCountIs } = modules.ai;
  const { createOpenAICompatible } = modules["@ai-sdk/openai-compatible"];
  const { sent, fetch } = recordingFetch();
  const provider = createOpenAICompatible({ name: "orbit", baseURL: `${base}/v1`, apiKey: "unused", fetch });
  const result = streamText({
    model: provider(modelId), prompt: TASK, maxOutputTokens: 50, temperature: 0, maxRetries: 0,
    tools: { read: tool({ inputSchema: jsonSchema(parameters), execute: async (a) => page(a.page) }) },
    toolChoice: "required", stopWhen: stepCountIs(4),
    prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: "none" } : {}),
  });
  let deltas = 0;
  for await (const part of result.fullStream) if (part.type === "text-delta") deltas++;
  const steps = await result.steps;
  const round2 = chatRound(sent, 2);
  check(steps.length === 2 && steps[0].toolCalls.length === 1 && steps[0].toolResults.length === 1,
        "aisdk streamText: round 1 calls the tool and runs it", JSON.stringify(steps.map((s) => s.toolCalls)));
  check(sent.length === 2 && round2.status === 200 && round2.results.length === 1 &&
        JSON.stringify(round2.results[0]).includes("Tom ran."),
        "aisdk streamText: round 2 sends the tool's result back", oneLine(sent));
  check(steps[1]?.text.length > 0 && deltas > 1 && steps[1]?.toolCalls.length === 0,
        "aisdk streamText: round 2 answers in streamed text", JSON.stringify(steps[1]?.text));
  console.log(`aisdk streamText: ${steps.length} steps, read(${JSON.stringify(steps[0]?.toolCalls[0]?.input)}), ` +
              `then ${JSON.stringify(steps[1]?.text)}`);
}

// The Agents SDK's Runner on Chat Completions (useResponses false: its items converted to chat messages), and
// on the Responses API chained from an earlier response by previousResponseId: the Runner then sends each round
// after the first as the calls' outputs alone, chained to the round before. Round 1 is forced; the Runner then
// resets the tool choice (resetToolChoice). On Chat Completions round 2 answers in text (max_tokens cuts it);
// on the Responses API the Runner takes a cut answer (status "incomplete") for a failed run, so the agent's
// output is a short JSON object (outputType), which ends, and under "auto" with that format the model may call
// again before it answers (stories260K calls once more: three rounds).
export async function agentsRounds({ modules, base, modelId, check }) {
  const { Agent, Runner, OpenAIProvider, setTracingDisabled, tool } = modules["@openai/agents"];
  const OpenAI = modules.openai.default;
  setTracingDisabled(true);
  const reader = tool({ name: "read", description: "", parameters, strict: false, execute: async (a) => page(a.page) });
  const title = { type: "object", properties: { title: { type: "string", maxLength: 8 } }, required: ["title"],
                  additionalProperties: false };
  for (const useResponses of [false, true]) {
    const { sent, fetch } = recordingFetch();
    const openAIClient = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000,
                                      fetch });
    const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient, useResponses }),
                                tracingDisabled: true });
    const label = useResponses ? "agents (responses, previousResponseId)" : "agents (chat completions)";
    const agent = new Agent({
      name: "Reader", model: modelId, tools: [reader],
      ...(useResponses ? { outputType: { type: "json_schema", name: "title", strict: true, schema: title } } : {}),
      modelSettings: { temperature: 0, toolChoice: "required", ...(useResponses ? {} : { maxTokens: 50 }) } });
    // (On the Responses API, the conversation an app started: the run goes on from its response.)
    const earlier = useResponses
      ? await openAIClient.responses.create({ model: modelId, input: "Hi.", max_output_tokens: 4 }) : undefined;
    const result = await runner.run(agent, TASK, { maxTurns: 4, previousResponseId: earlier?.id });
    const calls = result.newItems.filter((i) => i.type === "tool_call_item");
    const rounds = sent.slice(useResponses ? 1 : 0);
    // A round may call more than once (parallel calls: greedy decoding over KV that the background work has
    // or has not finished forming can differ, as on a loaded machine), so calls are counted per round.
    const callsIn = (i) => (result.rawResponses[i]?.output ?? []).filter((o) => o.type === "function_call").length;
    const perRound = rounds.map((_, i) => callsIn(i));
    check(rounds.length >= 2 && rounds.length === result.rawResponses.length &&
          perRound.slice(0, -1).every((n) => n >= 1) && perRound.at(-1) === 0 &&
          perRound.reduce((a, n) => a + n, 0) === calls.length && rounds.every((s) => s.status === 200) &&
          rounds[0].body.previous_response_id === earlier?.id,
          `${label}: a call on each round but the last`, `calls per round ${perRound}: ${oneLine(rounds)}`);
    const tookBack = rounds.slice(1).every((round, i) => {
      const b = round.body;
      if (!useResponses) {
        const sentBefore = perRound.slice(0, i + 1).reduce((a, n) => a + n, 0);
        return b.messages.filter((m) => m.role === "tool" && /Tom ran\./.test(m.content)).length === sentBefore;
      }
      return b.previous_response_id === result.rawResponses[i]?.responseId && b.input.length === perRound[i] &&
             b.input.every((item) => item.type === "function_call_output" && /Tom ran\./.test(item.output));
    });
    check(tookBack, `${label}: each round after the first sends the tool's result back`, oneLine(rounds));
    const output = useResponses ? result.finalOutput?.title : result.finalOutput;
    check(typeof output === "string" && output.length > 0, `${label}: the last round answers`,
          JSON.stringify(result.finalOutput));
    console.log(`${label}: ${rounds.length} rounds, calls ${calls.map((c) => c.rawItem.arguments)}, then ` +
                `${JSON.stringify(result.finalOutput)}`);
  }
}

// LangChain: a streamed call (the merged chunks, as an agent keeps a streamed answer) sent back with its
// result, and the same loop on the Responses API (useResponsesApi: its converter sends function_call items and
// function_call_output); round 2 answers in text under tool_choice "none".
export async function langchainRounds({ modules, base, modelId, check }) {
  const { ChatOpenAI } = modules["@langchain/openai"];
  const { HumanMessage, ToolMessage } = modules["@langchain/core/messages"];
  const readTool = { type: "function", function: { name: "read", parameters } };
  for (const useResponsesApi of [false, true]) {
    const { sent, fetch } = recordingFetch();
    const llm = new ChatOpenAI({ model: modelId, apiKey: "unused", configuration: { baseURL: `${base}/v1`, fetch },
                                 temperature: 0, maxTokens: 50, maxRetries: 0, useResponsesApi });
    const label = useResponsesApi ? "langchain (useResponsesApi)" : "langchain (streamed call)";
    const human = new HumanMessage(TASK);
    let ai;
    if (useResponsesApi) {
      // (This @langchain/openai drops a tool_choice of "required", "auto" or "none" on the Responses API and
      // sends only a named function: round 1 names it, and round 2 goes without one, as under "auto".)
      ai = await llm.bindTools([readTool], { tool_choice: "read" }).invoke([human]);
    } else {
      for await (const chunk of await llm.bindTools([readTool], { tool_choice: "required" }).stream([human])) {
        ai = ai ? ai.concat(chunk) : chunk;
      }
    }
    const call = ai?.tool_calls?.[0];
    check(call?.name === "read" && Number.isInteger(call.args.page), `${label}: round 1 calls the tool`,
          JSON.stringify(ai?.tool_calls));
    const answer = await llm.bindTools([readTool], { tool_choice: "none" })
      .invoke([human, ai, new ToolMessage({ content: page(call?.args.page), tool_call_id: call?.id })]);
    const back = sent.at(-1)?.body ?? {};
    const sentBack = useResponsesApi
      ? (back.input ?? []).some((i) => i.type === "function_call_output" && i.output === page(call?.args.page))
      : chatRound(sent, 2).results.includes(page(call?.args.page));
    check(sent.length === 2 && sent[1].status === 200 && sentBack, `${label}: round 2 sends the tool's result back`,
          oneLine(sent));
    check(typeof answer.text === "string" && answer.text.length > 0 && (answer.tool_calls ?? []).length === 0,
          `${label}: round 2 answers in text`, JSON.stringify(answer.content));
    console.log(`${label}: read(${JSON.stringify(call?.args)}), then ${JSON.stringify(answer.text)}`);
  }
}
