// The reference side of tests/cpp/test_hf_tokenizer_oracle.cpp: Hugging Face's own `tokenizers` (the Rust
// library 0.22, through the @anush008/tokenizers Node binding) encodes and decodes what the test asks.
//
//   node tokenizer_oracle.mjs TOKENIZER_JSON REQUEST_JSON
//
// REQUEST_JSON: {"texts": [string...], "id_lists": [[id...]...]}
// stdout:       {"encode": [{"ids", "ids_plain", "text", "text_skip"}...],   one per text
//                "decode": [{"text", "text_skip"}...]}                        one per id list
// ids: with special tokens added (add_special_tokens); ids_plain: without. text / text_skip: those ids
// decoded keeping / skipping special tokens. The file's truncation and padding are switched off (they
// limit batches; they are not tokenization).
// Exit status 3 when the binding cannot be loaded (the test then reports skipped).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
let Tokenizer;
try {
  ({ Tokenizer } = require("@anush008/tokenizers"));
} catch (e) {
  process.stderr.write(`cannot load @anush008/tokenizers: ${e.message}\n`);
  process.exit(3);
}

const [tokenizerPath, requestPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(tokenizerPath, "utf8"));
spec.truncation = null;
spec.padding = null;
const tokenizer = Tokenizer.fromString(JSON.stringify(spec));
const request = JSON.parse(readFileSync(requestPath, "utf8"));

const decodeBoth = async (ids) => ({
  text: await tokenizer.decode(ids, false),
  text_skip: await tokenizer.decode(ids, true),
});

const out = { encode: [], decode: [] };
for (const text of request.texts) {
  const withSpecial = await tokenizer.encode(text, null, { addSpecialTokens: true });
  const plain = await tokenizer.encode(text, null, { addSpecialTokens: false });
  const ids = withSpecial.getIds();
  out.encode.push({ ids, ids_plain: plain.getIds(), ...(await decodeBoth(ids)) });
}
for (const ids of request.id_lists) out.decode.push(await decodeBoth(ids));
process.stdout.write(JSON.stringify(out));
