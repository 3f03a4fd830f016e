// `orbit serve`'s Responses API (POST /v1/responses) driven by the official `openai` npm client and by the
// OpenAI Agents SDK (@openai/agents), whose default model API it is.
//
//   node serve_agents.mjs ORBIT_BINARY MODEL_DIR
//
// Starts `orbit serve` on 127.0.0.1 (a free port) under the exact policy, then:
//   (a) client.responses.create whole, then streamed and chained by previous_response_id, then whole and
//       chained again: the response and event shapes the client parses, usage.orbit, and that a chained
//       response runs in the window its first response named (usage.orbit.session is that id; the plan
//       keeps the conversation) and forwards only a part of its prompt; retrieve, inputItems.list (paged) and
//       delete of stored responses (the chain through a deleted one stays whole); store false cannot be chained
//       (404), an unsupported parameter is refused by name (400);
//   (b) the Agents SDK: an Agent with instructions and a function tool on an OpenAIProvider pointed at the
//       server, run() whole and streamed, and chained by previousResponseId; each returns the story as
//       finalOutput. (The story model never calls the tool: a tool loop needs a model that writes calls.) A
//       strict tool, which this model's vocabulary cannot hold to its schema, is refused (400 naming its strict).
// The server is stopped (SIGTERM, then SIGKILL) whatever happens.
//
// Exit status: 0 all passed, 1 a check failed, 77 skipped (a package or the server is missing).
import { checks, importOr, scriptArgs, startServer } from "./serve_harness.mjs";

const [orbit, model] = scriptArgs("serve_agents.mjs", "ORBIT_BINARY MODEL_DIR");
const { default: OpenAI } = await importOr("openai");
const agents = await importOr("@openai/agents");

const { check, finish } = checks();

// ---- the server, always stopped ----
const server = startServer(orbit, ["--model", model, "--policy", "patch:16:exact"]);

// ---- (a) the openai client ----
const near = (x) => Number.isFinite(x) && x >= 0;
function checkResponse(r, label) {
  check(r.object === "response" && /^resp_[0-9a-f]{32}$/.test(r.id), `${label}: a response with an id`, r.id);
  check(r.status === "completed" || r.status === "incomplete", `${label}: status`, r.status);
  const message = r.output.find((item) => item.type === "message");
  check(message?.role === "assistant" && message.content[0].type === "output_text", `${label}: a message item`);
  check(r.output_text === message?.content[0].text, `${label}: output_text is the message's text`);
  const u = r.usage;
  check(u.total_tokens === u.input_tokens + u.output_tokens && u.output_tokens >= 1, `${label}: usage`);
  const o = u.orbit ?? {};
  // The prompt tokens orbit did not forward are what the client reads as cached.
  check(u.input_tokens_details.cached_tokens === u.input_tokens - Math.ceil(o.forward_tokens) &&
        u.output_tokens_details.reasoning_tokens === 0, `${label}: usage details`, JSON.stringify(u));
  check(near(o.forward_tokens) && o.forward_tokens <= u.input_tokens && Number.isInteger(o.radix_cache_tokens) &&
        typeof o.plan === "string" && near(o.predicted_kl) && o.predicted_kl < 1e-3, `${label}: usage.orbit`,
        JSON.stringify(o));
  console.log(`${label}: ${r.status}, prompt ${u.input_tokens}, orbit ${o.forward_tokens} ` +
              `(+${o.idle_forward_tokens} idle), plan ${o.plan}, session ${o.session}, ` +
              `answer ${JSON.stringify(r.output_text)}`);
}

async function streamed(client, request) {
  const stream = await client.responses.create({ ...request, stream: true });
  const events = [];
  for await (const event of stream) events.push(event);
  const types = events.map((e) => e.type);
  check(types[0] === "response.created" && types[1] === "response.in_progress", "stream: created, in_progress",
        types.slice(0, 2).join());
  check(events.every((e, i) => e.sequence_number === i), "stream: sequence numbers in order");
  const last = events[events.length - 1];
  check(last.type === "response.completed" || last.type === "response.incomplete", "stream: ends with the response",
        last.type);
  const text = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
  const done = events.find((e) => e.type === "response.output_text.done");
  check(done?.text === text, "stream: the deltas make the text");
  const response = last.response;
  response.output_text = response.output.find((i) => i.type === "message")?.content[0].text;
  return response;
}

async function openaiClient(base, modelId) {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
  const request = { model: modelId, instructions: "You tell short stories.", max_output_tokens: 12, temperature: 0 };
  const first = await client.responses.create({ ...request, input: "What did the dog find?", metadata: { k: "v" } });
  checkResponse(first, "first");
  check(first.usage.orbit.session === first.id, "first: runs in the window its id names");
  check(first.usage.orbit.forward_tokens === first.usage.input_tokens, "first: a fresh window forwards the prompt");
  check(first.metadata.k === "v" && first.store === true && first.instructions === request.instructions,
        "first: settings echoed");

  const second = await streamed(client, { ...request, input: "And then?", previous_response_id: first.id });
  checkResponse(second, "second (streamed, chained)");
  const o2 = second.usage.orbit;
  check(o2.session === first.id && second.previous_response_id === first.id, "second: the first's window");
  check(/keep/.test(o2.plan) && !/evict/.test(o2.plan), "second: keeps the conversation", o2.plan);
  check(second.usage.input_tokens > first.usage.input_tokens, "second: the prompt holds the first exchange");
  check(o2.forward_tokens < second.usage.input_tokens / 2, "second: forwards less than half its prompt",
        `${o2.forward_tokens} of ${second.usage.input_tokens}`);

  const third = await client.responses.create({
    ...request,
    input: [{ role: "user", content: [{ type: "input_text", text: "Who was there?" }] }],
    previous_response_id: second.id,
  });
  checkResponse(third, "third (chained)");
  check(third.usage.orbit.session === first.id, "third: the first's window");
  check(third.usage.orbit.forward_tokens < third.usage.input_tokens / 2, "third: forwards less than half its prompt");
  const info = await (await fetch(`${base}/v1/sessions/${first.id}`)).json();
  check(info.requests === 3, "the chain's session served three requests", JSON.stringify(info.requests));

  const status = async (promise) => promise.then(() => 200, (e) => e.status ?? -1);
  // Stored responses read back, their input listed, and deleted, through the client's own methods.
  const fetched = await client.responses.retrieve(second.id);
  check(fetched.id === second.id && fetched.output_text === second.output_text, "retrieve: the response as returned");
  // A retrieve asked to stream (OpenAI replays a background response's events) or to include more is
  // refused naming the parameter: answered with the JSON body, the client read it as a stream of no events.
  const refusal = (promise) => promise.then((s) => `served ${typeof s}`, (e) => `${e.status} ${e.error?.param}`);
  check(await refusal(client.responses.retrieve(second.id, { stream: true })) === "400 stream",
        "retrieve with stream true: refused naming stream");
  check(await refusal(client.responses.retrieve(second.id, { include: ["message.output_text.logprobs"] })) ===
        "400 include[]", "retrieve with include: refused naming it");
  // The input a request would read, counted as its usage counts it, through the client's inputTokens.count;
  // what does not shape the input is refused naming it. Only background responses can be cancelled.
  const { instructions } = request;
  const counted = await client.responses.inputTokens.count({ instructions, input: "And then?", previous_response_id: third.id });
  const chained = await client.responses.create({ ...request, input: "And then?", previous_response_id: third.id });
  check(counted.object === "response.input_tokens" && counted.input_tokens === chained.usage.input_tokens,
        "inputTokens.count: the chained request's usage.input_tokens", `${counted.input_tokens} vs ${chained.usage.input_tokens}`);
  check(await refusal(client.responses.inputTokens.count({ input: "x", max_output_tokens: 4 })) === "400 max_output_tokens",
        "inputTokens.count: max_output_tokens refused naming it");
  check(await refusal(client.responses.cancel(third.id)) === "400 null", "cancel: a finished response is a 400");
  check(await status(client.responses.cancel("resp_never")) === 404, "cancel: an unknown id is a 404");
  const items = [];
  for await (const item of client.responses.inputItems.list(third.id, { order: "asc", limit: 1 })) items.push(item);
  check(items.length === 1 && items[0].type === "message" && items[0].content[0].text === "Who was there?",
        "input items: the third's input, paged one at a time", JSON.stringify(items));
  await client.responses.delete(second.id);
  check(await status(client.responses.retrieve(second.id)) === 404, "delete: the id is gone (404)");
  const fourth = await client.responses.create({ ...request, input: "The end.", previous_response_id: third.id });
  check(fourth.usage.input_tokens > third.usage.input_tokens, "delete: the chain through it stays whole");
  const unstored = await client.responses.create({ ...request, input: "A cat sat.", store: false });
  check(await status(client.responses.create({ ...request, input: "x", previous_response_id: unstored.id })) === 400,
        "store false: not chainable (400, as OpenAI)");
  check(await status(client.responses.create({ ...request, input: "x", reasoning: { effort: "high" } })) === 400,
        "reasoning effort: refused (400)");
}

// ---- (b) the Agents SDK ----
async function agentsSdk(base, modelId) {
  const { Agent, Runner, OpenAIProvider, setTracingDisabled, tool } = agents;
  setTracingDisabled(true);  // no exporter calling out
  const provider = new OpenAIProvider({ baseURL: `${base}/v1`, apiKey: "unused", useResponses: true });
  const runner = new Runner({ modelProvider: provider, tracingDisabled: true });
  const weather = tool({
    name: "get_weather",
    description: "Gets the weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"],
                  additionalProperties: false },
    // This model's vocabulary cannot write '{', so arguments held to the schema cannot be had under
    // tool_choice auto: a strict tool (the SDK's default) is refused, checked below.
    strict: false,
    execute: async ({ city }) => `sunny in ${city}`,
  });
  const agent = new Agent({ name: "Storyteller", instructions: "You tell short stories.", model: modelId,
                            tools: [weather], modelSettings: { temperature: 0 } });
  const input = "Tell me a story about a dog.";

  const strictAgent = agent.clone({ tools: [tool({ ...weather, strict: true, parameters: weather.parameters })] });
  let refused = null;
  await runner.run(strictAgent, input).catch((e) => { refused = e; });
  check(refused?.status === 400 && refused?.error?.param === "tools[0].strict",
        "agent: a strict tool the model cannot hold to its schema is refused, naming tools[0].strict",
        String(refused?.message ?? "no error"));

  const whole = await runner.run(agent, input);
  check(typeof whole.finalOutput === "string" && whole.finalOutput.length > 0, "agent: finalOutput is text",
        JSON.stringify(whole.finalOutput));
  const raw = whole.rawResponses[0];
  check(whole.rawResponses.length === 1 && /^resp_/.test(raw.responseId), "agent: one response");
  check(raw.providerData?.tools?.[0]?.name === "get_weather", "agent: the tool reached the server");
  check(raw.providerData?.usage?.orbit?.session === raw.responseId, "agent: usage.orbit in the response");
  console.log(`agent: ${JSON.stringify(whole.finalOutput)} (prompt ${raw.usage.inputTokens} tokens)`);

  const stream = await runner.run(agent, input, { stream: true });
  let text = "";
  for await (const event of stream) {
    if (event.type === "raw_model_stream_event" && event.data.type === "output_text_delta") text += event.data.delta;
  }
  await stream.completed;
  check(stream.finalOutput === whole.finalOutput && text === whole.finalOutput,
        "agent (streamed): the same story, streamed", JSON.stringify(text));

  // The SDK throws on a response that ends incomplete: a follow-up this model answers well within its
  // context (greedy; "Was it fun?" runs on to the context's end since the tool's strict is shown to it).
  const chained = await runner.run(agent, "And then?", { previousResponseId: whole.lastResponseId });
  const o = chained.rawResponses[0]?.providerData?.usage?.orbit ?? {};
  check(typeof chained.finalOutput === "string", "agent (chained): finalOutput is text");
  check(o.session === raw.responseId && /keep/.test(o.plan), "agent (chained): the first run's window",
        JSON.stringify(o));
  console.log(`agent (chained): ${JSON.stringify(chained.finalOutput)}, orbit ${o.forward_tokens} of ` +
              `${chained.rawResponses[0]?.usage.inputTokens}, plan ${o.plan}`);
}

try {
  const base = await server.ready();
  const modelId = (await (await fetch(`${base}/v1/models`)).json()).data[0].id;
  await openaiClient(base, modelId);
  await agentsSdk(base, modelId);
} catch (e) {
  check(false, "the test ran to its end", e.stack ?? String(e));
} finally {
  await server.stop(check);
}
finish();
