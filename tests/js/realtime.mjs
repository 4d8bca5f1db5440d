// The Realtime WebSocket through the official openai client (OpenAIRealtimeWS over the `ws`
// package): a session with turn detection off streams a PCM16 file, commits, asks for a
// response and prints one JSON line {text, done, errors, events} for checks_realtime.py. Before the
// audio it sends the malformed events (odd byte count, bad base64, an unsupported format) and
// expects one error event each, naming the problem, with the session going on.
//   node realtime.mjs BASE_URL PCM_FILE RATE MAX_TOKENS INSTRUCTIONS
import fs from "node:fs";
import net from "node:net";
import OpenAI from "openai";
import { OpenAIRealtimeWS } from "openai/beta/realtime/ws";

const [baseURL, pcmPath, rate, maxTokens, instructions] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "sk-test", maxRetries: 0 });
// The client always builds a wss:// URL; the test server speaks plain ws on loopback, so the
// connection is made over a plain TCP socket (ws's createConnection option).
const rt = new OpenAIRealtimeWS(
  { model: "tiny_audio", options: { createConnection: (o) => net.connect(o.port, o.host) } },
  client,
);
const events = [];
const errors = [];
let text = "";
const fail = (msg) => {
  console.log("FAIL " + msg);
  process.exit(1);
};
const timer = setTimeout(() => fail("timed out; events: " + JSON.stringify(events.map((e) => e.type))), 120000);

const waitFor = (pred) =>
  new Promise((resolve) => {
    const check = (e) => {
      if (pred(e)) {
        rt.off("event", check);
        resolve(e);
      }
    };
    rt.on("event", check);
  });

rt.on("event", (e) => {
  events.push(e);
  if (process.env.RT_DEBUG) console.error("event", JSON.stringify(e).slice(0, 200));
});
rt.on("error", (err) => errors.push(err.error ?? { message: err.message }));
rt.on("response.text.delta", (e) => (text += e.delta));

rt.socket.on("open", async () => {
  const created =
    events.find((e) => e.type === "session.created") ?? (await waitFor((e) => e.type === "session.created"));
  if (created.session.model !== "tiny_audio") fail("session.created model " + created.session.model);
  // Malformed events: each an error naming it; the session goes on.
  const bad = [
    [{ type: "input_audio_buffer.append", audio: Buffer.from([1, 2, 3]).toString("base64") }, "odd number of bytes"],
    [{ type: "input_audio_buffer.append", audio: "not*base64!" }, "base64"],
    [{ type: "session.update", session: { input_audio_format: "g711_ulaw" } }, "g711_ulaw"],
  ];
  for (const [ev, want] of bad) {
    const errEvent = waitFor((e) => e.type === "error");
    rt.send(ev);
    const e = await errEvent;
    if (!e.error.message.includes(want)) fail(`error for ${JSON.stringify(ev).slice(0, 60)}: ${e.error.message}`);
  }
  const updated = waitFor((e) => e.type === "session.updated");
  rt.send({
    type: "session.update",
    session: {
      instructions,
      turn_detection: null,
      temperature: 0,
      max_response_output_tokens: Number(maxTokens),
      modalities: ["text"],
      input_audio_format: "pcm16",
      mmrt: { input_sample_rate: Number(rate) },
    },
  });
  const u = await updated;
  if (u.session.turn_detection !== null || u.session.mmrt.input_sample_rate !== Number(rate))
    fail("session.updated " + JSON.stringify(u.session));
  const pcm = fs.readFileSync(pcmPath);
  const chunk = (Number(rate) / 10) * 2; // 100 ms
  for (let at = 0; at < pcm.length; at += chunk)
    rt.send({ type: "input_audio_buffer.append", audio: pcm.subarray(at, at + chunk).toString("base64") });
  const committed = waitFor((e) => e.type === "input_audio_buffer.committed");
  rt.send({ type: "input_audio_buffer.commit" });
  await committed;
  const done = waitFor((e) => e.type === "response.done");
  rt.send({ type: "response.create" });
  const d = await done;
  const textDone = events.find((e) => e.type === "response.text.done");
  if (!textDone || textDone.text !== text) fail("response.text.done does not hold the deltas' text");
  clearTimeout(timer);
  rt.close();
  console.log(JSON.stringify({ text, done: d, errors, types: events.map((e) => e.type) }));
});
