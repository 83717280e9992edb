// A realtime voice turn over the `ws` package (what openai-node's Realtime client runs on),
// through dejacache proxy: node ws_realtime.mjs URL KEY [SEED]. It speaks the OpenAI
// Realtime protocol: waits for session.created, sends 300 ms of audio in 100 ms chunks, a
// commit and response.create, and reads the events up to response.done. It prints what it
// received as one JSON line: the event types in order, the transcript, a digest of the
// answer's audio, the ids and how the connection closed (or the handshake's failure).
import { createHash } from "node:crypto";
import WebSocket from "ws";

const [url, key, seed = "1"] = process.argv.slice(2);
const CHUNK = 4800; // 100 ms of 24 kHz PCM16

function chunk(n) {
  const bytes = Buffer.alloc(CHUNK);
  for (let i = 0; i < CHUNK; i++) bytes[i] = (i * 31 + n * 7 + Number(seed)) & 0xff;
  return bytes.toString("base64");
}

const out = { types: [], transcript: "", audio: "", ids: [], close: null, error: null };
let done = false; // what comes after response.done (rate limits) races the close: not kept
const audio = createHash("sha256");
const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${key}` } });
const send = (event) => ws.send(JSON.stringify(event));

ws.on("unexpected-response", (_req, res) => {
  let body = "";
  res.on("data", (d) => (body += d));
  res.on("end", () => {
    out.error = { status: res.statusCode, body: body.slice(0, 2000) };
    console.log(JSON.stringify(out));
    process.exit(0);
  });
});
ws.on("error", (err) => {
  out.error = { message: String(err.message || err) };
});
ws.on("message", (data) => {
  if (done) return;
  const event = JSON.parse(data.toString());
  out.types.push(event.type);
  if (event.type === "session.created") {
    out.ids.push(event.session.id);
    for (let n = 0; n < 3; n++) send({ type: "input_audio_buffer.append", audio: chunk(n) });
    send({ type: "input_audio_buffer.commit" });
    send({ type: "response.create" });
  } else if (event.type === "response.output_audio.delta") {
    audio.update(event.delta);
  } else if (event.type === "response.output_audio_transcript.done") {
    out.transcript = event.transcript;
  } else if (event.type === "response.done") {
    out.ids.push(event.response.id);
    done = true;
    ws.close(1000, "done");
  }
});
ws.on("close", (code, reason) => {
  out.close = [code, reason.toString()];
  out.audio = audio.digest("hex");
  console.log(JSON.stringify(out));
});
