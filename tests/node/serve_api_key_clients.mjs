// `orbit serve --api-key KEY` driven by the agent clients other than `openai` (serve_api_key.mjs runs that
// one), one client per run:
//
//   node serve_api_key_clients.mjs ORBIT_BINARY MODEL CLIENT      CLIENT: langchain | aisdk | agents
//
//   langchain  @langchain/openai's ChatOpenAI (apiKey) with bindTools, its calls from AIMessage.tool_calls
//   aisdk      the AI SDK's generateText with @ai-sdk/openai-compatible (apiKey), which runs the loop itself
//   agents     the OpenAI Agents SDK's Runner through OpenAIProvider (apiKey), on the Responses API and on
//              Chat Completions
//
// With the server's key: a two-round tool loop as serve_tools.mjs runs it on stories260K (tool_choice
// "required", so the server decodes each call under the tool's grammar; the client parses the call, the tool
// runs, its result goes back with the key and the model calls again). With another key: the client's own
// authentication error, 401 with OpenAI's code invalid_api_key and type invalid_request_error read from the
// body, a message that says the key is wrong without echoing it. With none: the AI SDK sends no Authorization
// and gets the 401 that says no key was given; LangChain and the Agents SDK refuse to send a request without a
// key (OPENAI_API_KEY is removed from the environment first), which the test records as a failure too.
//
// Exit status: 0 all passed, 1 a check failed, 77 skipped (a package or `orbit serve` missing). The server is
// always stopped, also when a check throws.
import { checks, importOr, scriptArgs, startServer } from "./serve_harness.mjs";

const [orbit, model, client] = scriptArgs("serve_api_key_clients.mjs", "ORBIT_BINARY MODEL CLIENT");
const packages = { langchain: ["@langchain/openai", "@langchain/core/messages"],
                   aisdk: ["ai", "@ai-sdk/openai-compatible"], agents: ["@openai/agents"] };
if (!packages[client]) {
  console.error("usage: node serve_api_key_clients.mjs ORBIT_BINARY MODEL langchain|aisdk|agents");
  process.exit(2);
}
const modules = {};
for (const name of packages[client]) modules[name] = await importOr(name);
delete process.env.OPENAI_API_KEY;  // "no key" must mean none, not the environment's

const t = checks();
const check = t.check;
const KEY = "sk-orbit-clients-9c2b";
const WRONG = "sk-not-this-one-4d1e";
const server = startServer(orbit, ["--model", model, "--api-key", KEY]);
const base = await server.ready();
const modelId = model.replace(/\/+$/, "").split("/").pop();

const description = "Read a page of the book.";
const parameters = { type: "object", properties: { page: { type: "integer" } }, required: ["page"] };
const TASK = "Read the book.";
const pagesRead = [];
const readPage = (page) => (pagesRead.push(page), `Page ${page}: Tom saw a dog.`);

// What a call with a wrong or no key must throw: the 401 and OpenAI's fields, as the client exposes them
// (`fields` reads status, code and type off the error), and a message that says why without the key.
function refused(name, error, fields, says) {
  const { status, code, type } = fields(error);
  check(status === 401 && code === "invalid_api_key" && type === "invalid_request_error",
        `${name}: 401 invalid_api_key (invalid_request_error)`, `${status} ${code} ${type}: ${error}`);
  check(says.test(error?.message ?? "") && !String(error?.message).includes(WRONG),
        `${name}: the message says why, without the key`, error?.message);
}

async function failure(call) {
  try {
    await call();
  } catch (e) {
    return e;
  }
  return undefined;
}

async function langchain() {
  const { ChatOpenAI } = modules["@langchain/openai"];
  const { HumanMessage, ToolMessage } = modules["@langchain/core/messages"];
  const llm = (apiKey) => new ChatOpenAI({ model: modelId, apiKey, configuration: { baseURL: `${base}/v1` },
                                           temperature: 0, maxTokens: 80, maxRetries: 0 });
  const tool = { type: "function", function: { name: "read_page", description, parameters } };
  const bound = llm(KEY).bindTools([tool], { tool_choice: "required", parallel_tool_calls: false });
  const history = [new HumanMessage(TASK)];
  for (let round = 1; round <= 2; round++) {
    const ai = await bound.invoke(history);
    const call = ai.tool_calls?.[0];
    check(ai.tool_calls?.length === 1 && call.name === "read_page" && Number.isInteger(call.args.page),
          `langchain with the key: round ${round} calls read_page`, JSON.stringify(ai.tool_calls));
    if (!call) return;
    history.push(ai, new ToolMessage({ content: readPage(call.args.page), tool_call_id: call.id }));
  }
  const fields = (e) => ({ status: e?.status, code: e?.code, type: e?.type });
  const wrong = llm(WRONG).bindTools([tool], { tool_choice: "required" });
  let e = await failure(() => wrong.invoke(TASK));
  refused("langchain with a wrong key: invoke", e, fields, /Incorrect API key provided/);
  check(e?.lc_error_code === "MODEL_AUTHENTICATION", "langchain with a wrong key: lc_error_code MODEL_AUTHENTICATION",
        e?.lc_error_code);
  e = await failure(async () => {
    for await (const _ of await wrong.stream(TASK)) {
      // no chunk is expected
    }
  });
  refused("langchain with a wrong key: stream", e, fields, /Incorrect API key provided/);
  e = await failure(() => llm(undefined).invoke(TASK));
  check(e !== undefined && /apiKey|API key/i.test(e.message), "langchain without a key: the client refuses to send",
        String(e));
}

async function aisdk() {
  const { generateText, streamText, tool, stepCountIs, jsonSchema, APICallError } = modules.ai;
  const { createOpenAICompatible } = modules["@ai-sdk/openai-compatible"];
  const provider = (apiKey) => createOpenAICompatible({ name: "orbit", baseURL: `${base}/v1`, apiKey });
  const tools = { read_page: tool({ description, inputSchema: jsonSchema(parameters),
                                    execute: async ({ page }) => readPage(page) }) };
  const options = (apiKey) => ({ model: provider(apiKey)(modelId), tools, toolChoice: "required", prompt: TASK,
                                 maxOutputTokens: 80, temperature: 0, maxRetries: 0 });
  const result = await generateText({ ...options(KEY), stopWhen: stepCountIs(2) });
  check(result.steps.length === 2, "aisdk with the key: the loop ran two rounds", String(result.steps.length));
  result.steps.forEach((s, i) => {
    check(s.toolCalls.length === 1 && s.toolCalls[0].toolName === "read_page" && s.toolResults.length === 1,
          `aisdk with the key: round ${i + 1} calls read_page and its result goes back`, JSON.stringify(s.toolCalls));
  });
  // The SDK reads the body's {"error": {...}} into data; status and retryability come from the response.
  const fields = (e) => ({ status: e?.statusCode, code: e?.data?.error?.code, type: e?.data?.error?.type });
  let e = await failure(() => generateText(options(WRONG)));
  check(APICallError.isInstance(e) && e.isRetryable === false, "aisdk with a wrong key: a not retryable APICallError",
        String(e));
  refused("aisdk with a wrong key: generateText", e, fields, /Incorrect API key provided/);
  const parts = [];
  // onError: the SDK would print the error it also yields as a part.
  for await (const part of streamText({ ...options(WRONG), onError: () => {} }).fullStream) {
    if (part.type === "error") parts.push(part.error);
  }
  refused("aisdk with a wrong key: streamText's error part", parts[0], fields, /Incorrect API key provided/);
  e = await failure(() => generateText(options(undefined)));
  refused("aisdk without a key: generateText", e, fields, /You didn't provide an API key/);
}

async function agents() {
  const { Agent, Runner, OpenAIProvider, setTracingDisabled, tool } = modules["@openai/agents"];
  setTracingDisabled(true);  // no exporter calling out
  const runner = (apiKey, useResponses) =>
    new Runner({ modelProvider: new OpenAIProvider({ baseURL: `${base}/v1`, apiKey, useResponses }),
                 tracingDisabled: true });
  const reader = tool({ name: "read_page", description, parameters, strict: false,
                        execute: async ({ page }) => readPage(page) });
  for (const useResponses of [true, false]) {
    const api = useResponses ? "Responses" : "Chat Completions";
    const before = pagesRead.length;
    const agent = new Agent({
      name: "Reader", model: modelId, tools: [reader], resetToolChoice: false,
      modelSettings: { temperature: 0, toolChoice: "required", parallelToolCalls: false, maxTokens: 80 },
      // The second call's result is the final output.
      toolUseBehavior: (context, results) => pagesRead.length - before >= 2
        ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: results[0].output }
        : { isFinalOutput: false, isInterrupted: undefined },
    });
    const result = await runner(KEY, useResponses).run(agent, TASK, { maxTurns: 3 });
    const calls = result.newItems.filter((i) => i.type === "tool_call_item");
    check(calls.length === 2 && String(result.finalOutput).startsWith("Page "),
          `agents with the key (${api}): two rounds, each a call to read_page`,
          `${calls.length} calls, output ${JSON.stringify(result.finalOutput)}`);
    const fields = (e) => ({ status: e?.status, code: e?.code, type: e?.type });
    const e = await failure(() => runner(WRONG, useResponses).run(agent, TASK, { maxTurns: 3 }));
    check(e?.constructor?.name === "AuthenticationError", `agents with a wrong key (${api}): AuthenticationError`,
          String(e));
    refused(`agents with a wrong key (${api})`, e, fields, /Incorrect API key provided/);
    const none = await failure(() => runner(undefined, useResponses).run(agent, TASK, { maxTurns: 3 }));
    check(none !== undefined && /apiKey|API key/i.test(none.message),
          `agents without a key (${api}): the client refuses to send`, String(none));
  }
}

try {
  await { langchain, aisdk, agents }[client]();
  check(!server.stderr().includes(KEY), "the key is not printed", server.stderr());
} catch (e) {
  check(false, `${client}: the test ran to its end`,
        `${e.stack ?? e}\n  server stderr: ${server.stderr().slice(-2000)}`);
} finally {
  await server.stop(check);
}
t.finish();
