// The real Node SDKs, each making the calls a test names, through `dejacache proxy`.
//
//   node clients.mjs BASE SCENARIO [SCENARIO...]
//
// BASE is the proxy's base URL (or a session's); each SDK is pointed at BASE/<upstream>.
// Prints one JSON object: scenario -> what the SDK returned (text, ids, events), or
// {"error": {"name", "status", "message"}} when the SDK raised. The API keys are fixed,
// fake and unmistakable, so a test can check that no file holds them.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { generateText, streamText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";

export const OPENAI_KEY = "sk-node-openai-9f3c2b7e1d";
export const ANTHROPIC_KEY = "sk-ant-node-4e8a1c6f2b";

const [base, ...scenarios] = process.argv.slice(2);
// Appended to every prompt: a test changes the requests with it, to make them miss.
const more = process.env.PROMPT_SUFFIX ?? "";
const openai = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: OPENAI_KEY, maxRetries: 0 });
const anthropic = new Anthropic({
  baseURL: `${base}/anthropic`, apiKey: ANTHROPIC_KEY, maxRetries: 0,
});
const vercel = createOpenAI({ baseURL: `${base}/openai/v1`, apiKey: OPENAI_KEY });

const weather = {
  type: "function",
  function: {
    name: "get_weather", description: "Weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } } },
  },
};

const run = {
  async "openai-chat"() {
    const r = await openai.chat.completions.create({
      model: "gpt-test", messages: [{ role: "user", content: "Say hello" + more }],
    });
    return { id: r.id, text: r.choices[0].message.content };
  },
  async "openai-stream"() {
    const stream = await openai.chat.completions.create({
      model: "gpt-test", stream: true, messages: [{ role: "user", content: "Stream a hello" + more }],
    });
    const pieces = [];
    for await (const chunk of stream) pieces.push(chunk.choices[0]?.delta?.content ?? "");
    return { pieces };
  },
  async "openai-tools"() {
    // Two turns: the tool call's id goes back in the second request (aliased by the cassette).
    const messages = [{ role: "user", content: "Weather in Paris?" + more }];
    const first = await openai.chat.completions.create({
      model: "gpt-test", messages, tools: [weather],
    });
    const call = first.choices[0].message.tool_calls[0];
    messages.push(first.choices[0].message);
    messages.push({ role: "tool", tool_call_id: call.id, content: "sunny" });
    const second = await openai.chat.completions.create({
      model: "gpt-test", messages, tools: [weather],
    });
    return { call: call.id, text: second.choices[0].message.content };
  },
  async "openai-responses"() {
    const r = await openai.responses.create({ model: "gpt-test", input: "One word" + more });
    const s = await openai.responses.create({
      model: "gpt-test", input: "Stream one word" + more, stream: true,
    });
    const deltas = [];
    for await (const ev of s) if (ev.type === "response.output_text.delta") deltas.push(ev.delta);
    return { id: r.id, text: r.output_text, deltas };
  },
  async "anthropic-messages"() {
    const m = await anthropic.messages.create({
      model: "claude-test", max_tokens: 64, messages: [{ role: "user", content: "Hi Claude" + more }],
    });
    return { id: m.id, text: m.content[0].text };
  },
  async "anthropic-stream"() {
    const stream = anthropic.messages.stream({
      model: "claude-test", max_tokens: 64,
      messages: [{ role: "user", content: "Stream, Claude" + more }],
    });
    const pieces = [];
    stream.on("text", (t) => pieces.push(t));
    const final = await stream.finalMessage();
    return { pieces, id: final.id };
  },
  async "ai-generate"() {
    const r = await generateText({ model: vercel.chat("gpt-test"), prompt: "Generate a hello" + more });
    return { text: r.text };
  },
  async "ai-stream"() {
    const r = streamText({ model: vercel.chat("gpt-test"), prompt: "Stream a hello, AI SDK" + more });
    const pieces = [];
    for await (const t of r.textStream) pieces.push(t);
    return { pieces };
  },
  async "concurrent-streams"() {
    // 50 streams at once, each asking its own question: each must get its own answer.
    const one = async (i) => {
      const s = await openai.chat.completions.create({
        model: "gpt-test", stream: true, messages: [{ role: "user", content: `Question ${i}${more}` }],
      });
      let text = "";
      for await (const c of s) text += c.choices[0]?.delta?.content ?? "";
      return text;
    };
    return await Promise.all(Array.from({ length: 50 }, (_, i) => one(i)));
  },
};

const out = {};
for (const name of scenarios) {
  try {
    out[name] = await run[name]();
  } catch (err) {
    out[name] = {
      error: { name: err?.constructor?.name, status: err?.status ?? err?.statusCode,
               message: String(err?.message ?? err) },
    };
  }
}
process.stdout.write(JSON.stringify(out) + "\n");
