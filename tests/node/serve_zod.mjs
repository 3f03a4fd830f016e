// `orbit serve` answering structured outputs written with zod, as agent builders write them, each answer parsed
// by zod itself:
//   - the openai client's zodResponseFormat and zodFunction (its strict JSON Schema conversion of zod 4) with
//     chat.completions.parse(), which parses every answer (and forced call's arguments) with the zod schema:
//     strings of each format zod writes, numbers with bounds and multipleOf, enums, literals, nullable,
//     arrays, tuples, a discriminated union, nested objects, regular expressions;
//   - zod's own toJSONSchema with its openapi-3.0 target (exclusive bounds as draft 4's flags beside minimum
//     and maximum) sent as a response_format, the answer parsed with safeParse.
// An answer cut by max_tokens (finish_reason "length") is counted, not checked; each schema must be answered
// whole at least once. Three seeds at temperature 1 per schema.
//
//   node serve_zod.mjs ORBIT_BINARY MODEL
import { checks, importOr, scriptArgs, startServer } from "./serve_harness.mjs";

const [orbit, model] = scriptArgs("serve_zod.mjs", "ORBIT_BINARY MODEL");
const { default: OpenAI } = await importOr("openai");
const { zodResponseFormat, zodFunction } = await importOr("openai/helpers/zod", "openai's zod helpers");
const { z } = await importOr("zod");

const SEEDS = [1, 2, 3];
const MAX_TOKENS = 300;

const cases = {
  contact: z.object({ name: z.string().max(12), email: z.email(), site: z.url().max(40), id: z.uuid() }),
  times: z.object({ day: z.iso.date(), at: z.iso.datetime(), span: z.iso.duration().max(20) }),
  numbers: z.object({
    count: z.int().min(0).max(99),
    ratio: z.number().gt(0).lte(1),
    step: z.number().multipleOf(0.5).min(-5).max(5),
    small: z.int32(),
  }),
  choices: z.object({
    kind: z.enum(["a", "b", "c"]),
    flag: z.boolean(),
    lit: z.literal("x"),
    maybe: z.string().max(8).nullable(),
  }),
  lists: z.object({
    tags: z.array(z.string().max(6)).min(1).max(3),
    pair: z.tuple([z.string().max(5), z.int().min(0).max(9)]),
  }),
  union: z.object({
    shape: z.discriminatedUnion("k", [
      z.object({ k: z.literal("circle"), r: z.number().min(0).max(9) }),
      z.object({ k: z.literal("square"), side: z.int().min(1).max(9) }),
    ]),
  }),
  nested: z.object({
    user: z.object({ handle: z.string().regex(/^[a-z]{2,8}$/), roles: z.array(z.enum(["admin", "dev"])).max(2) }),
  }),
  text: z.object({
    lower: z.string().lowercase().max(10),
    starts: z.string().startsWith("ab").max(10),
    ip: z.ipv4(),
    code: z.base64().max(12),
  }),
};

const t = checks();
let cut = 0;  // answers cut by max_tokens
const server = startServer(orbit, ["--model", model, "--name", "m"]);
try {
  const client = new OpenAI({ baseURL: `${await server.ready()}/v1`, apiKey: "unused", maxRetries: 0 });
  const messages = [{ role: "user", content: "Fill in the form." }];
  const ask = (extra, seed) => ({ model: "m", messages, max_tokens: MAX_TOKENS, temperature: 1, seed, ...extra });

  // The client's strict conversion and its parse(): a LengthFinishReasonError for a cut answer, a ZodError (or
  // SyntaxError) for one that does not hold.
  for (const [name, schema] of Object.entries(cases)) {
    let whole = 0;
    for (const seed of SEEDS) {
      try {
        const format = { response_format: zodResponseFormat(schema, name) };
        const c = await client.chat.completions.parse(ask(format, seed));
        const parsed = c.choices[0].message.parsed;
        t.check(parsed !== null && schema.safeParse(parsed).success, `${name} seed ${seed}: parsed and valid`,
          c.choices[0].message.content);
        whole++;
      } catch (e) {
        if (e.constructor.name === "LengthFinishReasonError") {
          cut++;
          continue;
        }
        const why = `${e.constructor.name}: ${e.message}`;
        t.check(false, `${name} seed ${seed}: the answer parses under the zod schema`, why);
      }
    }
    t.check(whole > 0, `${name}: at least one of ${SEEDS.length} answers whole within ${MAX_TOKENS} tokens`);
  }

  // A forced call to a zod tool: its arguments parsed by the tool's schema.
  const alarm = zodFunction({
    name: "alarm",
    // Small: the tools' schemas are in the prompt, and stories260K holds 512 tokens.
    parameters: z.object({ day: z.enum(["mon", "tue"]) }),
  });
  let calls = 0;
  for (const seed of SEEDS) {
    try {
      const forced = { tools: [alarm], tool_choice: "required", max_tokens: 80 };
      const c = await client.chat.completions.parse(ask(forced, seed));
      calls++;
      const call = c.choices[0].message.tool_calls?.[0];
      t.check(call?.function.name === "alarm" && call.function.parsed_arguments !== null,
        `alarm seed ${seed}: a call whose arguments parse`, JSON.stringify(c.choices[0].message));
    } catch (e) {
      if (e.constructor.name === "LengthFinishReasonError") {
        cut++;
        continue;
      }
      const why = `${e.constructor.name}: ${e.message}`;
      t.check(false, `alarm seed ${seed}: the arguments parse under the zod schema`, why);
    }
  }
  t.check(calls > 0, "alarm: at least one call whole");

  // zod's openapi-3.0 target: draft 4's flags.
  const stock = z.object({ price: z.number().positive().max(100), left: z.int().nonnegative().lt(50) });
  const openapi = z.toJSONSchema(stock, { target: "openapi-3.0" });
  t.check(JSON.stringify(openapi).includes('"exclusiveMinimum":true'), "zod's openapi-3.0 target writes a flag",
    JSON.stringify(openapi));
  let whole = 0;
  for (const seed of SEEDS) {
    let c;
    try {
      c = await client.chat.completions.create(
        ask({ response_format: { type: "json_schema", json_schema: { name: "stock", schema: openapi } } }, seed));
    } catch (e) {
      t.check(false, `openapi-3.0 seed ${seed}: answered`, `${e.constructor.name}: ${e.message}`);
      continue;
    }
    if (c.choices[0].finish_reason === "length") {
      cut++;
      continue;
    }
    whole++;
    const content = c.choices[0].message.content;
    let value = null;
    try {
      value = JSON.parse(content);
    } catch {
      // checked below
    }
    t.check(value !== null && stock.safeParse(value).success, `openapi-3.0 seed ${seed}: valid under zod`, content);
  }
  t.check(whole > 0, "openapi-3.0: at least one answer whole");
} finally {
  await server.stop(t.check);
}
console.log(`${cut} answers cut by max_tokens (not checked)`);
t.finish();
