// A small OpenAI-compatible chat server over node-llama-cpp (llama.cpp's prebuilt CPU build):
// POST /v1/chat/completions, GET /v1/models, GET /health. Loopback only, one request at a time.
//
// Structured output, in the forms llama.cpp's own server reads (tools/server/README.md there):
//   response_format {"type": "json_schema", "json_schema": {"schema": S}}   (OpenAI's form)
//   response_format {"type": "json_schema", "schema": S}
//   response_format {"type": "json_object", "schema": S}                      (llama-cpp-python's form)
//   response_format {"type": "json_object"}                                   (any JSON object)
// and, as vLLM reads it, the body field "structured_outputs": {"json": S}. Any other
// response_format type is refused with HTTP 400, as llama.cpp's server does.
//
// usage holds the tokens the context evaluated and generated for this request (the context's
// token meter), so a client meters what the model really did. finish_reason is "length" when
// max_tokens cut the answer (constrained JSON is then usually incomplete: the caller must cope).
// A client that disconnects aborts its generation, so a timed-out call frees the model at once.
//
// Usage: node server.mjs --model FILE.gguf [--host 127.0.0.1] [--port 8767] [--threads 1]
//        [--ctx-size 4096] [--model-name NAME]
import http from "node:http";
import path from "node:path";
import { parseArgs } from "node:util";
import { getLlama, LlamaChatSession, LlamaLogLevel } from "node-llama-cpp";

const { values: opts } = parseArgs({
  options: {
    model: { type: "string" },
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: "8767" },
    threads: { type: "string", default: "1" },
    "ctx-size": { type: "string", default: "4096" },
    "model-name": { type: "string" },
    "max-body-bytes": { type: "string", default: "4000000" },
  },
});
if (!opts.model) {
  console.error("server.mjs: --model FILE.gguf is required");
  process.exit(2);
}
const MODEL_NAME = opts["model-name"] || path.basename(opts.model).replace(/\.gguf$/i, "");
const MAX_BODY = Number(opts["max-body-bytes"]);
const THREADS = Math.max(1, Number(opts.threads));

// build "never": only the prebuilt binary of the npm package; nothing is compiled or downloaded
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.warn, maxThreads: THREADS });
const model = await llama.loadModel({ modelPath: opts.model });
const context = await model.createContext({ contextSize: Number(opts["ctx-size"]), threads: THREADS, sequences: 1 });
const sequence = context.getSequence();

let queue = Promise.resolve(); // one generation at a time: later requests wait their turn
const grammars = new Map(); // schema text -> grammar (the engine sends the same few schemas)

class BadRequest extends Error {}

function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (p && p.type === "text" ? p.text : "")).join("");
  return "";
}

async function grammarFor(body) {
  let schema;
  const so = body.structured_outputs;
  const rf = body.response_format;
  if (so && typeof so === "object" && so.json !== undefined) {
    schema = typeof so.json === "string" ? JSON.parse(so.json) : so.json;
  } else if (rf && typeof rf === "object" && rf.type && rf.type !== "text") {
    if (rf.type === "json_schema") schema = rf.json_schema?.schema ?? rf.schema;
    else if (rf.type === "json_object" && rf.schema === undefined) return grammarNamed("json"); // any JSON
    else if (rf.type === "json_object") schema = rf.schema;
    else throw new BadRequest(`response_format type must be one of "text", "json_object" or "json_schema", got ${JSON.stringify(rf.type)}`);
    if (!schema || typeof schema !== "object") throw new BadRequest("response_format carries no schema");
  } else {
    return undefined;
  }
  const key = JSON.stringify(schema);
  if (!grammars.has(key)) {
    try {
      grammars.set(key, await llama.createGrammarForJsonSchema(schema));
    } catch (err) {
      throw new BadRequest(`unsupported JSON schema: ${String(err?.message || err).slice(0, 200)}`);
    }
  }
  return grammars.get(key);
}

async function grammarNamed(name) {
  if (!grammars.has(name)) grammars.set(name, await llama.getGrammarFor(name));
  return grammars.get(name);
}

function history(messages) {
  if (!Array.isArray(messages) || messages.length === 0) throw new BadRequest("messages must be a non-empty list");
  const last = messages[messages.length - 1];
  if (last?.role !== "user") throw new BadRequest("the last message must be the user's");
  const items = [];
  for (const m of messages.slice(0, -1)) {
    const text = textOf(m?.content);
    if (m?.role === "system" || m?.role === "developer") items.push({ type: "system", text });
    else if (m?.role === "user") items.push({ type: "user", text });
    else if (m?.role === "assistant") items.push({ type: "model", response: [text] });
  }
  return { items, prompt: textOf(last.content) };
}

async function complete(body, signal) {
  const { items, prompt } = history(body.messages);
  const grammar = await grammarFor(body);
  const maxTokens = body.max_tokens ?? body.max_completion_tokens;
  await sequence.clearHistory(); // every request starts from an empty context: no state between callers
  const before = sequence.tokenMeter.getState();
  const session = new LlamaChatSession({ contextSequence: sequence, autoDisposeSequence: false });
  try {
    session.setChatHistory(items); // only what the caller sent: no default system prompt
    const result = await session.promptWithMeta(prompt, {
      grammar,
      maxTokens: Number.isInteger(maxTokens) && maxTokens > 0 ? maxTokens : undefined,
      temperature: typeof body.temperature === "number" ? body.temperature : 0,
      seed: Number.isInteger(body.seed) ? body.seed : undefined,
      signal,
      stopOnAbortSignal: false,
    });
    const used = sequence.tokenMeter.diff(before);
    return {
      id: `chatcmpl-${Date.now().toString(36)}`,
      object: "chat.completion",
      created: Math.floor(Date.now() / 1000),
      model: MODEL_NAME,
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: result.responseText },
          finish_reason: result.stopReason === "maxTokens" ? "length" : "stop",
        },
      ],
      usage: {
        prompt_tokens: used.usedInputTokens,
        completion_tokens: used.usedOutputTokens,
        total_tokens: used.usedInputTokens + used.usedOutputTokens,
      },
    };
  } finally {
    session.dispose({ disposeSequence: false });
  }
}

function send(res, status, payload) {
  if (res.writableEnded || res.destroyed) return;
  const data = Buffer.from(JSON.stringify(payload));
  res.writeHead(status, { "content-type": "application/json", "content-length": data.length });
  res.end(data);
}

function error(res, status, message, type) {
  send(res, status, { error: { message, type, code: status } });
}

async function readBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY) throw new BadRequest("request body too large");
    chunks.push(chunk);
  }
  return JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}");
}

const server = http.createServer(async (req, res) => {
  const url = (req.url || "/").split("?")[0];
  if (req.method === "GET" && url === "/health") return send(res, 200, { status: "ok", model: MODEL_NAME });
  if (req.method === "GET" && url === "/v1/models") {
    return send(res, 200, { object: "list", data: [{ id: MODEL_NAME, object: "model", owned_by: "llm-local" }] });
  }
  if (req.method !== "POST" || url !== "/v1/chat/completions") return error(res, 404, "not found", "not_found_error");
  let body;
  try {
    body = await readBody(req);
  } catch (err) {
    return error(res, 400, err instanceof BadRequest ? err.message : "body is not valid JSON", "invalid_request_error");
  }
  if (body.stream) return error(res, 400, "streaming is not supported", "invalid_request_error");
  const abort = new AbortController();
  res.on("close", () => {
    if (!res.writableEnded) abort.abort(new Error("client disconnected"));
  });
  const run = queue.then(() => (abort.signal.aborted ? null : complete(body, abort.signal)));
  queue = run.catch(() => undefined);
  try {
    const answer = await run;
    if (answer) send(res, 200, answer);
  } catch (err) {
    if (abort.signal.aborted) return;
    if (err instanceof BadRequest) return error(res, 400, err.message, "invalid_request_error");
    console.error("generation failed:", err);
    error(res, 500, "generation failed", "server_error");
  }
});

server.listen(Number(opts.port), opts.host, () => {
  console.log(`llm-local: ${MODEL_NAME} on http://${opts.host}:${opts.port}/v1 (${THREADS} thread(s))`);
});
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => {
    server.close();
    process.exit(0);
  });
}
