// The server part of `make demo`: the official openai client talks to a running `mmrt serve`.
//   node demo_client.mjs BASE_URL
// Sends a text request and a streamed image request (a PNG drawn here), prints the replies and
// each request's stage breakdown, then an excerpt of /metrics.
import OpenAI from "openai";
import { deflateSync } from "node:zlib";

const baseURL = process.argv[2];
const client = new OpenAI({ baseURL, apiKey: "demo", maxRetries: 0 });
const model = (await client.models.list()).data[0].id;

// A 96x64 RGB gradient as a PNG (zlib from node, CRC-32 by hand).
function png(w, h) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => {
    let c = 0xffffffff;
    for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type), data]);
    const c = Buffer.alloc(4);
    c.writeUInt32BE(crc(td));
    return Buffer.concat([len, td, c]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      const o = y * (w * 3 + 1) + 1 + x * 3;
      raw[o] = (x * 255) / w;
      raw[o + 1] = (y * 255) / h;
      raw[o + 2] = 128;
    }
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw)), chunk("IEND", Buffer.alloc(0)),
  ]);
}

const stages = (m) =>
  Object.entries(m.stages_ms).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(", ");

console.log(`   text request (service_tier "priority"):`);
const r = await client.chat.completions.create({
  model, max_tokens: 12, service_tier: "priority",
  messages: [{ role: "user", content: "Say hello to mmrt." }],
});
console.log(`     reply: ${JSON.stringify(r.choices[0].message.content)} (${r.choices[0].finish_reason})`);
console.log(`     class ${r.mmrt.sla_class}, ${r.usage.prompt_tokens} prompt tokens ` +
            `(${r.usage.prompt_tokens_details.cached_tokens} cached), TTFT ${r.mmrt.ttft_ms.toFixed(2)} ms`);
console.log(`     stages (ms): ${stages(r.mmrt)}`);

console.log(`   image request, streamed (a 96x64 PNG as a data URL):`);
const stream = await client.chat.completions.create({
  model, max_tokens: 12, stream: true, stream_options: { include_usage: true },
  messages: [{ role: "user", content: [
    { type: "image_url", image_url: { url: "data:image/png;base64," + png(96, 64).toString("base64") } },
    { type: "text", text: "What is in this picture?" },
  ] }],
});
let text = "", last = null, usage = null;
for await (const c of stream) {
  if (c.choices.length && c.choices[0].delta.content) text += c.choices[0].delta.content;
  if (c.mmrt) last = c;
  if (c.usage) usage = c.usage;
}
console.log(`     reply: ${JSON.stringify(text)} (${last.choices[0].finish_reason})`);
console.log(`     class ${last.mmrt.sla_class}, ${usage.prompt_tokens} prompt tokens, TTFT ${last.mmrt.ttft_ms.toFixed(2)} ms`);
console.log(`     stages (ms): ${stages(last.mmrt)}`);
console.log(`     trace: ${baseURL.replace(/\/v1$/, "")}${last.mmrt.trace}`);

const metrics = await (await fetch(baseURL.replace(/\/v1$/, "") + "/metrics")).text();
console.log("   /metrics (excerpt):");
for (const line of metrics.split("\n"))
  if (/^mmrt_(time_to_first_token_seconds_(count|sum)|request_stage_seconds_sum|kv_cache_usage_perc|request_outcome_total|mm_cache_queries_total)/.test(line) &&
      !/ 0$/.test(line))
    console.log("     " + line);
