// `mmrt serve` through the official openai client (pinned in package.json). Run by
// tests/server/server_test.py against a real server process:
//   node server_openai.mjs BASE_URL IMAGE_FILE
// Prints one line per check and exits 1 if any failed.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [baseURL, imagePath] = process.argv.slice(2);
const root = baseURL.replace(/\/v1\/?$/, "");
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const model = (await client.models.list()).data[0].id;
const user = (content) => [{ role: "user", content }];

async function metric(name, labels = {}) {
  const text = await (await fetch(root + "/metrics")).text();
  let total = 0;
  let seen = false;
  for (const line of text.split("\n")) {
    if (!line.startsWith(name + "{") && !line.startsWith(name + " ")) continue;
    const ok = Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`));
    if (!ok) continue;
    total += Number(line.slice(line.lastIndexOf(" ") + 1));
    seen = true;
  }
  assert.ok(seen, `metric ${name} ${JSON.stringify(labels)} is missing`);
  return total;
}

async function until(what, fn, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const checks = [
  ["models.list names the served model", async () => {
    const list = await client.models.list();
    assert.equal(list.data.length, 1);
    assert.equal(list.data[0].object, "model");
  }],
  ["chat, not streamed: shape, usage, finish_reason", async () => {
    const r = await client.chat.completions.create({ model, messages: user("Hello"), max_tokens: 5 });
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.object, "chat.completion");
    assert.equal(r.model, model);
    assert.equal(typeof r.created, "number");
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, "assistant");
    assert.equal(typeof r.choices[0].message.content, "string");
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(r.usage.completion_tokens, 5);
    assert.ok(r.usage.prompt_tokens > 0);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 5);
    assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, "number");
  }],
  ["chat, streamed: role first, content deltas, finish, usage chunk", async () => {
    const stream = await client.chat.completions.create({
      model, messages: user("Tell me"), max_tokens: 6, stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    assert.equal(chunks[0].choices[0].delta.role, "assistant");
    const finish = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
    assert.equal(finish.length, 1);
    assert.equal(finish[0].choices[0].finish_reason, "length");
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 6);
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
    const whole = await client.chat.completions.create({ model, messages: user("Tell me"), max_tokens: 6 });
    assert.equal(text, whole.choices[0].message.content, "streamed text equals the whole text");
  }],
  ["an image as a data URL", async () => {
    const b64 = readFileSync(imagePath).toString("base64");
    const r = await client.chat.completions.create({
      model, max_tokens: 4,
      messages: user([
        { type: "image_url", image_url: { url: "data:image/png;base64," + b64 } },
        { type: "text", text: "What is in the image?" },
      ]),
    });
    assert.equal(r.usage.completion_tokens, 4);
    // The image's placeholder tokens are part of the prompt.
    const text = await client.chat.completions.create({ model, max_tokens: 4, messages: user("What is in the image?") });
    assert.ok(r.usage.prompt_tokens > text.usage.prompt_tokens + 3, "image tokens are counted");
  }],
  ["stop strings end the text before the stop", async () => {
    const free = await client.chat.completions.create({ model, messages: user("Count"), max_tokens: 12 });
    const text = free.choices[0].message.content;
    assert.ok(text.length >= 4, "the reply is long enough to cut");
    // Cut at the first code point that does not also occur earlier, past the first one.
    const cps = [...text];
    let k = 1;
    while (k < cps.length && cps.slice(0, k).includes(cps[k])) k++;
    assert.ok(k < cps.length, "a stop character exists");
    const r = await client.chat.completions.create({ model, messages: user("Count"), max_tokens: 12, stop: [cps[k]] });
    assert.equal(r.choices[0].finish_reason, "stop");
    assert.equal(r.choices[0].message.content, cps.slice(0, k).join(""));
  }],
  ["seed: the same seed gives the same sample, another seed another", async () => {
    const ask = (seed) => client.chat.completions.create({
      model, messages: user("Random"), max_tokens: 16, temperature: 1.0, seed,
    });
    const [a, b, c] = [await ask(7), await ask(7), await ask(8)];
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
  }],
  ["logprobs: one per token, greedy picks the top one, streamed equals whole", async () => {
    const ask = { model, messages: user("Logprobs please"), max_tokens: 6, ignore_eos: true,
                  logprobs: true, top_logprobs: 3 };
    const r = await client.chat.completions.create(ask);
    const lp = r.choices[0].logprobs.content;
    assert.equal(lp.length, r.usage.completion_tokens);
    for (const t of lp) {
      assert.ok(t.logprob <= 0 && Number.isFinite(t.logprob));
      assert.equal(t.top_logprobs.length, 3);
      for (let i = 1; i < 3; i++) assert.ok(t.top_logprobs[i - 1].logprob >= t.top_logprobs[i].logprob);
      // Greedy without penalties draws the argmax of the raw logits: the top entry.
      assert.equal(t.top_logprobs[0].token, t.token);
      assert.equal(t.top_logprobs[0].logprob, t.logprob);
      assert.ok(t.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
      assert.ok(t.top_logprobs.reduce((m, x) => m + Math.exp(x.logprob), 0) <= 1 + 1e-6);
    }
    const stream = await client.chat.completions.create({ ...ask, stream: true });
    const streamed = [];
    for await (const c of stream) if (c.choices.length && c.choices[0].logprobs) streamed.push(...c.choices[0].logprobs.content);
    assert.deepEqual(streamed.map((t) => [t.token, t.logprob]), lp.map((t) => [t.token, t.logprob]));
    const plain = await client.chat.completions.create({ model, messages: user("Logprobs please"), max_tokens: 2 });
    assert.equal(plain.choices[0].logprobs, null);
    await assert.rejects(
      client.chat.completions.create({ model, messages: user("x"), max_tokens: 2, top_logprobs: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "top_logprobs");
    const c = await client.completions.create({ model, prompt: "Once", max_tokens: 3, logprobs: 2 });
    assert.equal(c.choices[0].logprobs.token_logprobs.length, 3);
    assert.equal(Object.keys(c.choices[0].logprobs.top_logprobs[0]).length <= 2, true);
  }],
  ["a request that cannot meet its deadline is refused: 429, with Retry-After when a retry can help", async () => {
    let err;
    try {
      await client.chat.completions.create({ model, messages: user("Late"), max_tokens: 2, ttft_deadline_ms: 0.001 });
    } catch (e) { err = e; }
    // Its own work alone is over 1 us: no retry helps, and it is told so.
    assert.ok(err instanceof OpenAI.RateLimitError, `deadline: got ${err}`);
    assert.match(err.message, /this server cannot serve it in that class/);
    assert.equal(err.headers.get("retry-after"), null);
    assert.equal(err.headers.get("x-should-retry"), "false");
    err = undefined;
    try {
      // A long prompt in platinum behind a queue of work: predicted past 300 ms.
      const long = Array.from({ length: 3000 }, (_, i) => "w" + i).join(" ");
      const queue = Array.from({ length: 4 }, () =>
        client.completions.create({ model, prompt: long, max_tokens: 1 }).catch(() => null));
      // The platinum request must arrive behind that queue, not race it to admission.
      await until("the queue", async () =>
        (await metric("mmrt_num_requests_running")) + (await metric("mmrt_num_requests_waiting")) >= 2, 5000)
        .catch(() => null);
      // Its own prompt is twice the queue's: on a fast machine the queue alone may fit 300 ms.
      await client.chat.completions.create({ model, messages: user(long + " " + long), max_tokens: 2, sla_class: "platinum" });
      await Promise.all(queue);
    } catch (e) { err = e; }
    assert.ok(err instanceof OpenAI.RateLimitError, `got ${err}`);
    assert.equal(err.status, 429);
    assert.equal(err.code, "sla_unattainable");
    if (/this server cannot serve it in that class/.test(err.message)) {
      // Its own 6,000 tokens alone are predicted over 300 ms here (a slow machine): no retry.
      assert.equal(err.headers.get("retry-after"), null);
    } else {
      // The queue makes it miss: retry once it has drained. Admission runs as the request is
      // read, against a cost model one step older than the step loop's: where that step moves
      // the young model (a 28,000-token prompt predicted at 147 ms, then 338 ms), the loop's
      // late check refuses it within a step of its arrival instead.
      assert.ok(Number(err.headers.get("retry-after")) >= 1);
      assert.match(err.message, /predicted time to first token|ms after arrival its first token can no longer come/);
    }
  }],
  ["an unknown model: 404 NotFoundError", async () => {
    await assert.rejects(
      client.chat.completions.create({ model: "no-such-model", messages: user("x"), max_tokens: 2 }),
      (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && /does not exist/.test(e.message));
  }],
  ["SLA classes: service_tier maps to a class, the response says which", async () => {
    const p = await client.chat.completions.create({ model, messages: user("a"), max_tokens: 2, service_tier: "priority" });
    assert.equal(p.service_tier, "priority");
    assert.equal(p.mmrt.sla_class, "platinum");
    const f = await client.chat.completions.create({ model, messages: user("a"), max_tokens: 2, service_tier: "flex" });
    assert.equal(f.mmrt.sla_class, "silver");
    const d = await client.chat.completions.create({ model, messages: user("a"), max_tokens: 2 });
    assert.equal(d.mmrt.sla_class, "batch", "no class: the configured default");
    await assert.rejects(
      client.chat.completions.create({ model, messages: user("a"), max_tokens: 2, sla_class: "diamond" }),
      (e) => e.status === 400 && e.param === "sla_class");
  }],
  ["completions endpoint with a raw prompt", async () => {
    const r = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 3 });
    assert.equal(r.object, "text_completion");
    assert.equal(r.usage.completion_tokens, 3);
    assert.equal(typeof r.choices[0].text, "string");
  }],
  ["an aborted stream (break) cancels the request and frees its KV blocks", async () => {
    const cancelled = await metric("mmrt_request_outcome_total", { outcome: "cancelled" }).catch(() => 0);
    const stream = await client.chat.completions.create({
      model, messages: user("Go on"), max_tokens: 4000, stream: true, ignore_eos: true,
    });
    let n = 0;
    for await (const c of stream) if (++n >= 3) break;
    await until("the cancellation", async () =>
      (await metric("mmrt_request_outcome_total", { outcome: "cancelled" }).catch(() => 0)) > cancelled);
    await until("free KV blocks", async () => (await metric("mmrt_kv_cache_blocks_used")) === 0);
    assert.equal(await metric("mmrt_num_requests_running"), 0);
  }],
];

let failed = 0;
for (const [name, fn] of checks) {
  try {
    await fn();
    console.log("ok   " + name);
  } catch (e) {
    failed++;
    console.log("FAIL " + name + ": " + (e && e.stack ? e.stack : e));
  }
}
console.log(`${checks.length - failed}/${checks.length} openai-client checks passed`);
process.exit(failed ? 1 : 0);
