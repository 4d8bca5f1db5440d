// Audio input through the official openai client (pinned in package.json), against a real
// `mmrt serve` of an audio model. Run by tests/server/checks_audio.py:
//   node server_audio.mjs BASE_URL WAV_FILE PROMPT MAX_TOKENS
// Prints one line per check, then one JSON line {"text": ...} (the greedy reply to the WAV and
// PROMPT, for the caller to compare with `mmrt generate --audio`); exits 1 if any check failed.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [baseURL, wavPath, prompt, maxTokens] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const model = (await client.models.list()).data[0].id;
const b64 = readFileSync(wavPath).toString("base64");
const n = Number(maxTokens);
const ask = (audio, extra = {}) => ({
  model,
  messages: [{ role: "user", content: [{ type: "input_audio", input_audio: audio },
                                       { type: "text", text: prompt }] }],
  max_tokens: n, temperature: 0, ignore_eos: true, ...extra,
});

let text = null;
const checks = [
  ["input_audio (wav): a completion with usage", async () => {
    const r = await client.chat.completions.create(ask({ data: b64, format: "wav" }));
    assert.equal(r.object, "chat.completion");
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(r.usage.completion_tokens, n);
    // The audio's placeholder tokens are part of the prompt.
    const plain = await client.chat.completions.create({
      model, messages: [{ role: "user", content: prompt }], max_tokens: 1 });
    assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + 1,
              `prompt tokens ${r.usage.prompt_tokens} vs ${plain.usage.prompt_tokens} without audio`);
    text = r.choices[0].message.content;
    assert.equal(typeof text, "string");
  }],
  ["input_audio streamed: the same text", async () => {
    const stream = await client.chat.completions.create(
      ask({ data: b64, format: "wav" }, { stream: true }));
    let streamed = "";
    for await (const c of stream) streamed += c.choices[0]?.delta?.content ?? "";
    assert.equal(streamed, text);
  }],
  ["an unsupported format: BadRequestError naming the field", async () => {
    await assert.rejects(
      client.chat.completions.create(ask({ data: b64, format: "aac" })),
      (e) => e.status === 400 && e.param === "messages[0].content[0].input_audio.format" &&
             /wav, mp3, flac, ogg, opus/.test(e.message));
  }],
];

let failed = 0;
for (const [name, fn] of checks) {
  try {
    await fn();
    console.log("  ok   " + name);
  } catch (e) {
    failed++;
    console.log("  FAIL " + name + ": " + (e.stack || e));
  }
}
console.log(JSON.stringify({ text }));
process.exit(failed ? 1 : 0);
