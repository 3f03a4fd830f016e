// The Agents SDK's cases of serve_agent_scenarios.mjs, which documents them (parallel, handoff, fields, session,
// unserved, schemas, long) and runs them on its server: agentsCases(kit) takes what that script shares (its
// modules, server, checks and the schemas and helpers its other clients' cases use too) and returns the cases.
import { recordingFetch } from "./serve_tool_rounds.mjs";

let modules, z, M, check, openaiClient, PARALLEL, city, weather, cityOk, PLAN, planOk, sameJson, short, statusOf, ROUNDS,
  CALL;

export function agentsCases(kit) {
  ({ modules, z, M, check, openaiClient, PARALLEL, city, weather, cityOk, PLAN, planOk, sameJson, short, statusOf, ROUNDS,
     CALL } = kit);
  return [agentsParallel, agentsHandoff, agentsFields, agentsSchemas, agentsSession, agentsUnserved, agentsLong];
}

function agentsRunner(useResponses, fetch) {
  const { Runner, OpenAIProvider, setTracingDisabled } = modules["@openai/agents"];
  setTracingDisabled(true);
  const openAIClient = openaiClient(fetch);
  return { runner: new Runner({ modelProvider: new OpenAIProvider({ openAIClient, useResponses }), tracingDisabled: true }),
           openAIClient };
}

// The Runner on a turn of several calls, streamed, on both APIs: each call runs once and round 2 sends every
// output back (the Runner's next round), after which stop_on_first_tool ends the run.
async function agentsParallel() {
  const { Agent, tool } = modules["@openai/agents"];
  for (const useResponses of [true, false]) {
    const { sent, fetch } = recordingFetch();
    const { runner } = agentsRunner(useResponses, fetch);
    const ran = [];
    const get = tool({ name: "get_weather", description: "", parameters: city, strict: true,
                       execute: async ({ city: c }) => (ran.push(c), weather(c)) });
    const agent = new Agent({ name: "Weather", model: M, tools: [get], toolUseBehavior: "stop_on_first_tool",
                              modelSettings: { temperature: 0, maxTokens: 300, toolChoice: "required",
                                               providerData: { logit_bias: PARALLEL } } });
    const label = `agents (${useResponses ? "responses" : "chat"}, streamed)`;
    const run = await runner.run(agent, "Weather in Paris and Rome?", { stream: true });
    for await (const event of run) void event;
    await run.completed;
    const calls = run.newItems.filter((i) => i.type === "tool_call_item");
    const outputs = run.newItems.filter((i) => i.type === "tool_call_output_item");
    check(calls.length >= 2 && outputs.length === calls.length && ran.length === calls.length &&
          calls.every((c) => cityOk(c.rawItem.arguments)), `${label}: several calls in one turn, each run`,
          short(run.newItems.map((i) => i.type)));
    check(sent.length === 1 && sent[0].status === 200 && ran.map(weather).includes(run.finalOutput),
          `${label}: one request, the first output final`, short(run.finalOutput));
  }
}

// A triage agent forced to hand off (its handoff is the tool it calls) to a planner whose request carries
// the planner's instructions and tools and the handoff's output; the planner's forced call ends the run.
// On the Responses API streamed and chained from an earlier response, on Chat Completions whole.
async function agentsHandoff() {
  const { Agent, tool } = modules["@openai/agents"];
  for (const useResponses of [true, false]) {
    const { sent, fetch } = recordingFetch();
    const { runner, openAIClient } = agentsRunner(useResponses, fetch);
    const planTool = tool({ name: "make_plan", description: "", parameters: PLAN, strict: true,
                            execute: async (p) => JSON.stringify(p) });
    const planner = new Agent({ name: "Planner", instructions: "You plan.", model: M, tools: [planTool],
                                toolUseBehavior: "stop_on_first_tool",
                                modelSettings: { temperature: 0, toolChoice: "required", maxTokens: 300 } });
    const triage = new Agent({ name: "Triage", instructions: "You route.", model: M, handoffs: [planner],
                               modelSettings: { temperature: 0, toolChoice: "required", maxTokens: CALL } });
    const earlier = useResponses
      ? await openAIClient.responses.create({ model: M, input: "Hi.", max_output_tokens: 2 }) : undefined;
    const label = `agents handoff (${useResponses ? "responses, streamed, chained" : "chat"})`;
    const run = await runner.run(triage, "Plan the day.", { stream: useResponses, previousResponseId: earlier?.id, maxTurns: 4 });
    if (useResponses) {
      for await (const event of run) void event;
      await run.completed;
    }
    const rounds = sent.slice(useResponses ? 1 : 0);
    check(run.lastAgent?.name === "Planner" && planOk(run.finalOutput).success, `${label}: the planner's plan is the output`,
          short(run.finalOutput));
    const [first, second] = rounds.map((s) => s.body);
    const instructions = (b) => (useResponses ? b?.instructions : b?.messages?.find((m) => m.role === "system")?.content);
    const toolNames = (b) => (b?.tools ?? []).map((t) => t.name ?? t.function?.name);
    const handedOff = useResponses
      ? second?.previous_response_id === run.rawResponses[0]?.responseId && second?.input?.[0]?.type === "function_call_output"
      : second?.messages?.some((m) => m.role === "tool" && /Planner/.test(m.content));
    check(rounds.length === 2 && rounds.every((s) => s.status === 200) && instructions(first) === "You route." &&
          instructions(second) === "You plan." && sameJson(toolNames(second), ["make_plan"]) &&
          toolNames(first)[0]?.startsWith("transfer_to_") && handedOff,
          `${label}: the planner's request, its instructions and tools, the handoff's output`,
          rounds.map((s) => `${s.status} ${short(s.body)}`).join("\n  "));
  }
}

// Every model setting the SDK sends on the Responses API, read back from the response (OpenAI echoes them)
// or refused naming the field: nothing the SDK sends goes unread.
async function agentsFields() {
  const { Agent } = modules["@openai/agents"];
  const { sent, fetch } = recordingFetch();
  const { runner } = agentsRunner(true, fetch);
  const settings = { temperature: 0, topP: 0.9, maxTokens: 40, truncation: "auto", store: true, parallelToolCalls: false,
                     toolChoice: "none", promptCacheRetention: "24h" };
  const { tool } = modules["@openai/agents"];
  const get = tool({ name: "get_weather", description: "", parameters: city, strict: true, execute: async () => "x" });
  const agent = new Agent({ name: "A", instructions: "Be brief.", model: M, tools: [get], modelSettings: settings,
                            outputType: z.object({ ok: z.boolean() }) });
  const run = await runner.run(agent, "Hi.");
  const response = run.rawResponses[0]?.providerData ?? {};
  const body = sent[0]?.body ?? {};
  const echoed = { temperature: 0, top_p: 0.9, max_output_tokens: 40, truncation: "auto", store: true,
                   parallel_tool_calls: false, tool_choice: "none", instructions: "Be brief.", model: M };
  const differs = Object.entries(echoed).filter(([k, v]) => !sameJson(body[k], v) || !sameJson(response[k], v)).map(([k]) => k);
  check(sent[0]?.status === 200 && differs.length === 0 && response.text?.format?.type === "json_schema" &&
        typeof run.finalOutput?.ok === "boolean", "agents fields: each setting sent and read back in the response",
        `differs: ${differs} body ${short(body)} response ${short(response)}`);
  // The rest of what it sent: the request itself (input, include, tools, stream, text, checked above) and
  // prompt_cache_retention, a hint to OpenAI's cache that orbit takes and does not need (serve_api.h). A key the
  // SDK starts sending shows here first: this server refuses one it does not know (400), else it must be listed.
  const request = ["input", "include", "tools", "stream", "text", "prompt_cache_retention"];
  const unlisted = Object.keys(body).filter((k) => !(k in echoed) && !request.includes(k));
  check(unlisted.length === 0, "agents fields: nothing else sent", unlisted.join());
  // What the SDK sends this server does not have: refused naming the field, as the Agent's run error.
  for (const [setting, value, param] of [["reasoning", { effort: "high" }, "reasoning.effort"],
                                         ["text", { verbosity: "low" }, "text.verbosity"],
                                         ["contextManagement", [{ type: "compaction", compactThreshold: 1000 }],
                                          "context_management"]]) {
    const refusedAgent = new Agent({ name: "B", model: M, modelSettings: { maxTokens: 4, [setting]: value } });
    const got = await statusOf(runner.run(refusedAgent, "Hi."));
    check(got.status === 400 && got.param === param, `agents fields: ${setting} refused naming ${param}`,
          `${got.status} ${got.param} ${got.error?.message}`);
  }
  const conversation = await statusOf(runner.run(new Agent({ name: "C", model: M, modelSettings: { maxTokens: 4 } }), "Hi.",
                                                 { conversationId: "conv_1" }));
  check(conversation.status === 400 && conversation.param === "conversation",
        "agents fields: conversationId refused naming conversation",
        `${conversation.status} ${conversation.param}`);
  console.log(`agents fields: sent ${Object.keys(body).join(" ")}`);
}

// outputType: the plan as the agent's structured output, on both APIs (the SDK's own zod parse).
async function agentsSchemas() {
  const { Agent } = modules["@openai/agents"];
  for (const useResponses of [true, false]) {
    const { runner } = agentsRunner(useResponses);
    const outputType = z.object({
      steps: z.array(z.object({ what: z.string().max(6), tag: z.enum(["now", "later", "never"]),
                                hours: z.number().int().min(0).max(9) })).min(4).max(5),
      owner: z.string().max(4).nullable(),
    });
    const agent = new Agent({ name: "Planner", model: M, outputType, modelSettings: { temperature: 0, maxTokens: 400 } });
    const run = await runner.run(agent, "Plan the day.");
    check(outputType.safeParse(run.finalOutput).success, `agents outputType (${useResponses ? "responses" : "chat"}): the plan`,
          short(run.finalOutput));
  }
}

// A conversation over three runs kept in a MemorySession, on both APIs, the second streamed: each run sends the
// earlier turns back as the SDK keeps them. On Chat Completions it keeps an answer's message, less its content,
// inside the text part it sends back ({"type": "text", "text", "refusal": null, "role": "assistant"}; a streamed
// answer's part carries "annotations": []), which is taken.
async function agentsSession() {
  const { Agent, MemorySession } = modules["@openai/agents"];
  for (const useResponses of [false, true]) {
    const { sent, fetch } = recordingFetch();
    const { runner } = agentsRunner(useResponses, fetch);
    const agent = new Agent({ name: "A", model: M, outputType: z.object({ ok: z.boolean() }),
                              modelSettings: { temperature: 0, maxTokens: 40 } });
    const session = new MemorySession();
    const label = `agents session (${useResponses ? "responses" : "chat"})`;
    const outputs = [];
    for (const [turn, question] of ["Is it sunny?", "And tomorrow?", "Sure?"].entries()) {
      const stream = turn === 1;  // the second streamed: the SDK keeps a streamed answer otherwise
      const got = await runner.run(agent, question, { session, stream }).then(async (run) => {
        if (stream) {
          for await (const event of run) void event;
          await run.completed;
        }
        return run.finalOutput;
      }, (e) => e);
      outputs.push(got);
      if (got instanceof Error) break;
    }
    check(outputs.length === 3 && outputs.every((o) => typeof o?.ok === "boolean") && sent.every((s) => s.status === 200),
          `${label}: three turns answered`,
          `${outputs.map(String)}\n  ${sent.map((s) => `${s.status} ${short(s.body)}`).join("\n  ")}`);
    const turns = sent.map((s) => (useResponses ? s.body.input : s.body.messages).length);
    check(sameJson(turns, [1, 3, 5]), `${label}: each turn sends the turns before it`, String(turns));
    if (!useResponses) {  // the whole answer's message fields, and the streamed one's annotations, in the part
      const part = sent[1]?.body?.messages?.[1]?.content?.[0] ?? {};
      const streamed = sent[2]?.body?.messages?.[3]?.content?.[0] ?? {};
      check(part.role === "assistant" && "refusal" in part && Array.isArray(streamed.annotations),
            `${label}: the answers sent back as the SDK keeps them`, `${short(part)} ${short(streamed)}`);
    }
  }
}

// What the SDK's server-side memory calls and this server does not serve: responses.compact (its
// OpenAIResponsesCompactionSession) and /v1/conversations (its OpenAIConversationsSession) are 404s that say so
// and what to use instead, as the client's NotFoundError; the conversations session's run throws it.
async function agentsUnserved() {
  const { Agent, OpenAIConversationsSession } = modules["@openai/agents"];
  const api = openaiClient();
  const compact = await statusOf(api.responses.compact({ model: M, input: "Hi." }));
  check(compact.status === 404 && compact.error?.constructor?.name === "NotFoundError" &&
        /compact.*not served.*truncation/.test(compact.error.message), "agents: responses.compact is a 404 that says why",
        `${compact.status} ${compact.error?.message}`);
  const { runner } = agentsRunner(true);
  const session = new OpenAIConversationsSession({ client: api });
  const got = await statusOf(runner.run(new Agent({ name: "A", model: M, modelSettings: { maxTokens: 4 } }), "Hi.",
                                        { session }));
  check(got.status === 404 && /conversations.*not served.*previous_response_id/.test(got.error?.message),
        "agents: an OpenAIConversationsSession's run throws the 404 that says why", `${got.status} ${got.error?.message}`);
}

// 24 turns of a forced call in one run: with truncation "auto" every turn is answered (the Runner sends its
// whole history each turn; the server drops the oldest items); without it, the turn past the context throws
// the 400 (context_length_exceeded) out of runner.run, streamed or not.
async function agentsLong() {
  const { Agent, tool } = modules["@openai/agents"];
  for (const [truncation, stream] of [["auto", false], ["disabled", false], ["disabled", true]]) {
    const { sent, fetch } = recordingFetch();
    const { runner } = agentsRunner(true, fetch);
    let calls = 0;
    const get = tool({ name: "get_weather", description: "", parameters: city, strict: true,
                       execute: async ({ city: c }) => weather(c) });
    const agent = new Agent({
      name: "Weather", model: M, tools: [get], resetToolChoice: false,
      modelSettings: { temperature: 0, toolChoice: "required", maxTokens: CALL, parallelToolCalls: false, truncation },
      toolUseBehavior: () => (++calls >= ROUNDS ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: `${calls} calls` }
                                               : { isFinalOutput: false, isInterrupted: undefined }),
    });
    const label = `agents, truncation ${truncation}${stream ? ", streamed" : ""}`;
    const outcome = await (async () => {
      const run = await runner.run(agent, "Weather?", { maxTurns: ROUNDS + 1, stream });
      if (stream) {
        for await (const event of run) void event;
        await run.completed;
        if (run.error) throw run.error;
      }
      return run;
    })().then((run) => ({ run }), (e) => ({ e }));
    if (truncation === "auto") {
      check(outcome.run?.finalOutput === `${ROUNDS} calls` && sent.length === ROUNDS && sent.every((s) => s.status === 200),
            `${label}: all ${ROUNDS} turns answered`, `${outcome.e ?? ""} ${sent.map((s) => s.status)}`);
    } else {
      check(outcome.e?.status === 400 && outcome.e.code === "context_length_exceeded" && calls > 2 &&
            sent.at(-1)?.status === 400, `${label}: the turn past the context throws the 400`,
            `${calls} ${outcome.e?.constructor?.name} ${outcome.e?.status} ${outcome.e?.code} ${outcome.e?.message}`);
    }
    console.log(`${label}: ${calls} calls, ${sent.length} requests${outcome.e ? `, then ${outcome.e.message}` : ""}`);
  }
}
