#!/usr/bin/env node
// Checks a Switchyard gateway with the official OpenAI Node SDK and prints
// one JSON report on stdout: {"sdk","version","checks":[{name,ok,detail}]}.
// It exits 1 when a check fails. services/gateway/sdk_test.go runs it
// against a real gateway in front of enginesim engines and asserts on the
// report; by hand:
//
//   node check.js --base-url http://127.0.0.1:8080/v1 --model switchyard-sim-8b \
//     [--engine-base-url http://127.0.0.1:8001/v1] \
//     [--metrics-url http://127.0.0.1:8080/metrics] [--engine-metrics URL,URL] \
//     [--shed-base-url URL] [--saturated-base-url URL] [--broken-base-url URL]
//
// With --engine-base-url (an engine the gateway routes to, or one like
// it) the same_* checks make each call through the gateway and directly
// to the engine and require the same answer: status, error type and
// param, object, choices and their indexes, streamed chunks per choice,
// logprobs, tool calls, embeddings' count and dimension, ... (generated
// text and ids aside).
'use strict';

const OpenAI = require('openai');
const sdkVersion = require('openai/version').VERSION;

function parseArgs(argv) {
  const a = {};
  for (let i = 2; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    a[argv[i].slice(2)] = argv[i + 1];
  }
  if (!a['base-url'] || !a.model) throw new Error('--base-url and --model are required');
  return a;
}

const args = parseArgs(process.argv);
const model = args.model;
const checks = [];

// fetchLog wraps fetch to count the SDK's HTTP attempts and keep their
// statuses and response headers (the SDK retries inside one call).
function fetchLog() {
  const log = [];
  const f = async (url, init) => {
    const resp = await fetch(url, init);
    log.push({ url: String(url), status: resp.status, headers: Object.fromEntries(resp.headers.entries()), at: Date.now() });
    return resp;
  };
  return { log, fetch: f };
}

function client(opts = {}) {
  return new OpenAI({ baseURL: args['base-url'], apiKey: 'sk-switchyard-test', maxRetries: 0, timeout: 20000, ...opts });
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function check(name, fn) {
  const t0 = Date.now();
  try {
    const detail = (await fn()) || {};
    checks.push({ name, ok: true, ms: Date.now() - t0, detail });
  } catch (e) {
    checks.push({ name, ok: false, ms: Date.now() - t0, error: `${e && e.constructor && e.constructor.name}: ${e && e.message}`, detail: e && e.detail });
  }
}

const messages = [
  { role: 'system', content: 'You are a helpful assistant that answers at length about trains.' },
  { role: 'user', content: 'Tell me about switchyards.' },
];

// collect reads a chat or completions stream and checks what a client
// must see: one id, no usage unless asked, content, a finish_reason.
async function collect(stream, { chat, usage }) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert(chunks.length > 0, 'no chunks');
  const ids = new Set(chunks.map((c) => c.id));
  assert(ids.size === 1, `chunks carry ${ids.size} ids`);
  const withUsage = chunks.filter((c) => c.usage);
  const empty = chunks.filter((c) => !c.choices || c.choices.length === 0);
  let text = '';
  let finish = null;
  let contentChunks = 0;
  for (const c of chunks) {
    for (const ch of c.choices || []) {
      assert(ch.index === 0, `choice index ${ch.index}`);
      const piece = chat ? ch.delta && ch.delta.content : ch.text;
      if (piece) {
        text += piece;
        contentChunks++;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert(text.length > 0, 'no content');
  assert(finish, 'no finish_reason');
  if (usage) {
    assert(withUsage.length === 1, `${withUsage.length} chunks with usage, want 1`);
    const last = chunks[chunks.length - 1];
    assert(last.usage && last.choices.length === 0, 'the usage chunk is not the last, or has choices');
    assert(empty.length === 1, `${empty.length} chunks without choices, want 1 (the usage chunk)`);
  } else {
    assert(withUsage.length === 0, `${withUsage.length} chunks with usage, none asked for`);
    assert(empty.length === 0, `${empty.length} chunks without choices, none asked for`);
  }
  return { chunks: chunks.length, content_chunks: contentChunks, text, finish_reason: finish, usage: usage ? withUsage[0].usage : null };
}

// expectError runs fn, which must fail with the SDK error class cls, and
// checks the OpenAI error body {"error":{message,type,param,code}}.
async function expectError(fn, cls, status, want = {}) {
  try {
    await fn();
  } catch (e) {
    assert(e instanceof cls, `got ${e && e.constructor && e.constructor.name} (${e && e.message}), want ${cls.name}`);
    assert(e.status === status, `status ${e.status}, want ${status}`);
    const body = e.error;
    assert(body && typeof body === 'object', `no error body: ${JSON.stringify(body)}`);
    for (const k of ['message', 'type', 'param', 'code']) assert(k in body, `error body lacks ${k}: ${JSON.stringify(body)}`);
    assert(typeof body.message === 'string' && body.message.length > 0, 'empty message');
    for (const [k, v] of Object.entries(want)) assert(body[k] === v, `error ${k} ${JSON.stringify(body[k])}, want ${JSON.stringify(v)}`);
    assert(e.requestID, 'no x-request-id on the error');
    return { status: e.status, type: body.type, code: body.code, param: body.param, message: body.message, request_id: e.requestID };
  }
  throw new Error(`no error, want ${cls.name}`);
}

async function metricValue(url, name) {
  const text = await (await fetch(url)).text();
  let sum = null;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = line.match(/^([^\s{]+)(\{[^}]*\})?\s+(\S+)/);
    if (m && m[1] === name) sum = (sum || 0) + Number(m[3]);
  }
  return sum;
}

async function pollZero(url, name, deadlineMs) {
  const end = Date.now() + deadlineMs;
  let v;
  for (;;) {
    v = await metricValue(url, name);
    if (v === 0) return v;
    if (Date.now() > end) throw new Error(`${name} at ${url} is ${v} after ${deadlineMs} ms`);
    await new Promise((r) => setTimeout(r, 20)); // polling with a deadline
  }
}

// summary is what must be the same in the gateway's and the engine's
// answers to one call: the outcome, and the answer's structure without
// its generated text and ids.
function summary(v) {
  if (v && v.error) return v;
  const out = {};
  for (const k of ['object', 'status', 'count', 'max_model_len']) if (v && k in v) out[k] = v[k];
  if (v && Array.isArray(v.choices)) {
    out.choices = v.choices.map((c) => ({
      index: c.index,
      finish_reason: c.finish_reason,
      role: c.message && c.message.role,
      content: c.message ? typeof c.message.content : typeof c.text,
      tool_calls: c.message && c.message.tool_calls ? c.message.tool_calls.length : 0,
      logprobs: c.logprobs ? (c.logprobs.content || c.logprobs.tokens || []).length : null,
      top: c.logprobs && c.logprobs.content && c.logprobs.content[0] ? c.logprobs.content[0].top_logprobs.length : null,
    }));
  }
  if (v && Array.isArray(v.data)) out.data = v.data.map((d) => ({ index: d.index, object: d.object, dim: d.embedding ? d.embedding.length : null, score: typeof d.score }));
  if (v && Array.isArray(v.results)) out.results = v.results.length;
  if (v && Array.isArray(v.tokens)) out.tokens = v.tokens.length;
  if (v && typeof v.prompt === 'string') out.prompt = v.prompt;
  if (v && Array.isArray(v.output)) out.output = v.output.map((o) => o.type);
  if (v && v.usage) out.usage = Object.keys(v.usage).sort();
  if (v && v.usage && 'completion_tokens' in v.usage) out.completion_tokens = v.usage.completion_tokens;
  if (v && v.usage && 'output_tokens' in v.usage) out.output_tokens = v.usage.output_tokens;
  if (v && v.usage && 'prompt_tokens' in v.usage) out.prompt_tokens = v.usage.prompt_tokens;
  if (v && v.usage && 'total_tokens' in v.usage) out.total_tokens = v.usage.total_tokens;
  return out;
}

// outcome runs one SDK call and returns its summary: the answer's, a
// stream's (chunks per choice index and finish reasons, or a Responses
// stream's event types), or the error's status, type, code and param.
async function outcome(fn) {
  try {
    const r = await fn();
    if (r && typeof r[Symbol.asyncIterator] === 'function') {
      const per = {};
      const finish = {};
      const types = {};
      let usage = null;
      let logprobs = 0;
      for await (const c of r) {
        if (c.type) {
          types[c.type] = (types[c.type] || 0) + 1;
          if (c.response && c.response.usage) usage = c.response.usage;
          continue;
        }
        if (c.usage) usage = c.usage;
        for (const ch of c.choices || []) {
          const piece = ch.delta ? ch.delta.content : ch.text;
          if (piece) per[ch.index] = (per[ch.index] || 0) + 1;
          if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
          if (ch.logprobs) logprobs++;
        }
      }
      return { stream: true, chunks_per_choice: per, finish, types, logprobs, usage: usage && summary({ usage }).usage };
    }
    return { ok: true, ...summary(r) };
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw e;
    const b = e.error || {};
    return { error: true, status: e.status, type: b.type, code: b.code, param: b.param, has_message: typeof b.message === 'string' && b.message.length > 0 };
  }
}

// sameAnswers makes each call through the gateway and directly to the
// engine and checks that both answer it the same way.
async function sameAnswers() {
  const gw = client();
  const eng = client({ baseURL: args['engine-base-url'] });
  const root = (u) => u.replace(/\/v1\/?$/, '');
  const gwRoot = client({ baseURL: root(args['base-url']) });
  const engRoot = client({ baseURL: root(args['engine-base-url']) });
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const calls = {
    same_chat_n: (c) => c.chat.completions.create({ model, messages, max_tokens: 4, n: 3 }),
    same_chat_n_stream: (c) => c.chat.completions.create({ model, messages, max_tokens: 4, n: 2, stream: true, stream_options: { include_usage: true } }),
    same_chat_n_stream_no_usage: (c) => c.chat.completions.create({ model, messages, max_tokens: 3, n: 2, stream: true }),
    same_chat_logprobs: (c) => c.chat.completions.create({ model, messages, max_tokens: 3, logprobs: true, top_logprobs: 2 }),
    same_chat_logprobs_stream: (c) => c.chat.completions.create({ model, messages, max_tokens: 3, logprobs: true, top_logprobs: 2, stream: true }),
    same_completions_n_logprobs: (c) => c.completions.create({ model, prompt: 'Once upon a time', max_tokens: 3, n: 2, logprobs: 2 }),
    same_chat_tools: (c) => c.chat.completions.create({ model, messages, max_tokens: 3, tools, tool_choice: 'auto' }),
    same_chat_tools_stream: (c) => c.chat.completions.create({ model, messages, max_tokens: 3, tools, stream: true }),
    same_chat_tool_result: (c) => c.chat.completions.create({ model, max_tokens: 3, tools, messages: [...messages,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Basel"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c":21}' }] }),
    same_embeddings: (c) => c.embeddings.create({ model, input: ['a freight train', 'the switchyard at night'] }),
    same_embeddings_float: (c) => c.embeddings.create({ model, input: 'a freight train', encoding_format: 'float' }),
    same_embeddings_tokens: (c) => c.embeddings.create({ model, input: [[1953719668, 1634235424]], encoding_format: 'float', dimensions: 16 }),
    same_responses: (c) => c.responses.create({ model, input: 'Tell me about switchyards.', max_output_tokens: 4 }),
    same_responses_stream: (c) => c.responses.create({ model, input: 'Tell me about switchyards.', max_output_tokens: 4, stream: true }),
    same_responses_tools: (c) => c.responses.create({ model, input: 'Weather in Basel?', max_output_tokens: 3, tools: [{ type: 'function', name: 'get_weather', parameters: tools[0].function.parameters, strict: false }] }),
    same_rerank: (c) => c.post('/rerank', { body: { model, query: 'freight train', documents: ['the sea', 'a freight train', 'a train of thought'], top_n: 2 } }),
    same_score: (c) => c.post('/score', { body: { model, text_1: 'freight train', text_2: ['a freight train', 'the sea'] } }),
    same_tokenize: (_c, r) => r.post('/tokenize', { body: { model, messages } }),
    same_detokenize: (_c, r) => r.post('/detokenize', { body: { model, tokens: [1953719668, 1634235424] } }),
    // What the engine judges: its answers, errors included.
    same_chat_no_model: (c) => c.chat.completions.create({ messages, max_tokens: 2 }),
    same_chat_no_messages: (c) => c.chat.completions.create({ model, max_tokens: 2 }),
    same_chat_empty_messages: (c) => c.chat.completions.create({ model, messages: [], max_tokens: 2 }),
    same_chat_n_zero: (c) => c.chat.completions.create({ model, messages, n: 0 }),
    same_chat_max_tokens_zero: (c) => c.chat.completions.create({ model, messages, max_tokens: 0 }),
    same_chat_bad_logprobs: (c) => c.chat.completions.create({ model, messages, top_logprobs: 3 }),
    same_responses_no_input: (c) => c.responses.create({ model }),
    same_responses_bad_max_output_tokens: (c) => c.responses.create({ model, input: 'hi', max_output_tokens: 0 }),
    same_embeddings_no_input: (c) => c.embeddings.create({ model }),
    same_embeddings_unknown_model: (c) => c.embeddings.create({ model: 'no-such-model', input: 'x' }),
    same_rerank_no_query: (c) => c.post('/rerank', { body: { model, documents: ['a'] } }),
  };
  for (const [name, call] of Object.entries(calls)) {
    await check(name, async () => {
      const viaGateway = await outcome(() => call(gw, gwRoot));
      const direct = await outcome(() => call(eng, engRoot));
      const a = JSON.stringify(viaGateway);
      const b = JSON.stringify(direct);
      if (a !== b) {
        const e = new Error('the gateway answered otherwise than the engine');
        e.detail = { gateway: viaGateway, engine: direct };
        throw e;
      }
      return direct;
    });
  }
}

async function main() {
  const c = client();

  await check('chat_nonstream', async () => {
    const r = await c.chat.completions.create({ model, messages, max_tokens: 5 });
    assert(r.object === 'chat.completion', `object ${r.object}`);
    assert(r.choices.length === 1 && r.choices[0].message.role === 'assistant', 'one assistant choice');
    assert(r.choices[0].message.content, 'no content');
    assert(r.choices[0].finish_reason, 'no finish_reason');
    assert(r.usage && r.usage.completion_tokens === 5, `usage ${JSON.stringify(r.usage)}`);
    return { finish_reason: r.choices[0].finish_reason, usage: r.usage, request_id: r._request_id };
  });

  await check('chat_stream', async () => {
    const s = await c.chat.completions.create({ model, messages, max_tokens: 6, stream: true });
    const r = await collect(s, { chat: true, usage: false });
    assert(r.content_chunks === 6, `${r.content_chunks} content chunks, want 6`);
    return r;
  });

  await check('chat_stream_usage', async () => {
    const s = await c.chat.completions.create({ model, messages, max_tokens: 6, stream: true, stream_options: { include_usage: true } });
    const r = await collect(s, { chat: true, usage: true });
    assert(r.usage.completion_tokens === 6 && r.usage.prompt_tokens > 0, `usage ${JSON.stringify(r.usage)}`);
    assert(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, 'total_tokens');
    return r;
  });

  await check('chat_stream_usage_false', async () => {
    const s = await c.chat.completions.create({ model, messages, max_tokens: 3, stream: true, stream_options: { include_usage: false } });
    return collect(s, { chat: true, usage: false });
  });

  await check('chat_stream_helper', async () => {
    // The SDK's own accumulator (ChatCompletionStream).
    const s = c.chat.completions.stream({ model, messages, max_tokens: 4, stream_options: { include_usage: true } });
    const final = await s.finalChatCompletion();
    assert(final.choices[0].message.content, 'no content');
    assert(final.choices[0].finish_reason, 'no finish_reason');
    assert(final.usage && final.usage.completion_tokens === 4, `usage ${JSON.stringify(final.usage)}`);
    return { finish_reason: final.choices[0].finish_reason, usage: final.usage };
  });

  await check('completions_nonstream', async () => {
    const r = await c.completions.create({ model, prompt: 'Once upon a time', max_tokens: 5 });
    assert(r.object === 'text_completion', `object ${r.object}`);
    assert(r.choices[0].text && r.choices[0].finish_reason, 'text and finish_reason');
    assert(r.usage && r.usage.completion_tokens === 5, `usage ${JSON.stringify(r.usage)}`);
    return { finish_reason: r.choices[0].finish_reason, usage: r.usage };
  });

  await check('completions_stream', async () => {
    const s = await c.completions.create({ model, prompt: 'Once upon a time', max_tokens: 5, stream: true });
    return collect(s, { chat: false, usage: false });
  });

  await check('completions_stream_usage', async () => {
    const s = await c.completions.create({ model, prompt: 'Once upon a time', max_tokens: 5, stream: true, stream_options: { include_usage: true } });
    const r = await collect(s, { chat: false, usage: true });
    assert(r.usage.completion_tokens === 5, `usage ${JSON.stringify(r.usage)}`);
    return r;
  });

  // The Responses API: typed events ending at response.completed or, with
  // max_output_tokens reached, response.incomplete; usage in that event.
  const input = [{ role: 'user', content: 'Tell me about switchyards.' }];
  const instructions = 'You are a helpful assistant that answers at length about trains.';
  await check('responses_nonstream', async () => {
    const r = await c.responses.create({ model, instructions, input, max_output_tokens: 5 });
    assert(r.object === 'response', `object ${r.object}`);
    assert(r.output_text, 'no output_text');
    assert(r.usage && r.usage.output_tokens === 5 && r.usage.input_tokens > 0, `usage ${JSON.stringify(r.usage)}`);
    return { status: r.status, usage: r.usage, request_id: r._request_id };
  });

  await check('responses_stream', async () => {
    const s = await c.responses.create({ model, instructions, input: 'Tell me about switchyards.', max_output_tokens: 6, stream: true });
    const types = [];
    let text = '';
    let last = null;
    for await (const ev of s) {
      types.push(ev.type);
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed' || ev.type === 'response.incomplete') last = ev.response;
    }
    const deltas = types.filter((t) => t === 'response.output_text.delta').length;
    assert(deltas === 6, `${deltas} deltas, want 6`);
    assert(types[0] === 'response.created', `first event ${types[0]}`);
    assert(last && last.usage && last.usage.output_tokens === 6, `last event ${JSON.stringify(last)}`);
    assert(text.length > 0, 'no text');
    return { events: types.length, deltas, text, status: last.status, usage: last.usage };
  });

  await check('responses_stream_helper', async () => {
    // The SDK's own accumulator (ResponseStream).
    const s = c.responses.stream({ model, input, max_output_tokens: 4 });
    const final = await s.finalResponse();
    assert(final.output_text, 'no output_text');
    assert(final.usage && final.usage.output_tokens === 4, `usage ${JSON.stringify(final.usage)}`);
    return { status: final.status, usage: final.usage };
  });

  if (args['engine-base-url']) await sameAnswers();

  await check('models_list', async () => {
    const ids = [];
    for await (const m of c.models.list()) ids.push(m.id);
    assert(ids.includes(model), `models ${JSON.stringify(ids)} lack ${model}`);
    const one = await c.models.retrieve(model);
    assert(one.id === model && one.object === 'model', `retrieve ${JSON.stringify(one)}`);
    return { ids };
  });

  await check('error_model_unknown', () =>
    expectError(() => c.models.retrieve('no-such-model'), OpenAI.NotFoundError, 404, { code: 'model_not_found' }));

  await check('error_chat_model_unknown', () =>
    expectError(() => c.chat.completions.create({ model: 'no-such-model', messages }), OpenAI.NotFoundError, 404, { code: 'model_not_found', param: 'model' }));

  await check('error_malformed_json', () =>
    expectError(() => c.post('/chat/completions', { body: '{"model": "x", "messages": [', headers: { 'content-type': 'application/json' } }),
      OpenAI.BadRequestError, 400, { type: 'invalid_request_error' }));

  await check('error_unknown_route', () =>
    expectError(() => c.post('/no/such/route', { body: {} }), OpenAI.NotFoundError, 404, { type: 'invalid_request_error' }));

  await check('error_wrong_method', async () => {
    try {
      await c.get('/chat/completions');
    } catch (e) {
      assert(e instanceof OpenAI.APIError && e.status === 405, `got ${e.constructor.name} ${e.status}`);
      assert(e.error && e.error.type === 'invalid_request_error', JSON.stringify(e.error));
      return { status: e.status };
    }
    throw new Error('no error');
  });

  // Fields the gateway does not interpret reach the engine untouched; the
  // Go test compares passthrough_body with what the engine received.
  const passthrough = {
    model, messages: [...messages, { role: 'user', content: 'Grüße 🚂 "zitat" \\ back\u2028slash \u00e9' }], n: 1, max_tokens: 3, max_completion_tokens: 3, temperature: 0.5, top_p: 0.9, seed: 7,
    user: 'user-7', metadata: { team: 'switchyard' }, logit_bias: { '50256': -100 }, stop: ['\n\n'],
    tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }],
    tool_choice: 'auto', parallel_tool_calls: false, response_format: { type: 'text' },
  };
  await check('passthrough', async () => {
    const r = await c.chat.completions.create(passthrough, { headers: { 'X-Request-Id': 'sdk-passthrough' } });
    assert(r.choices.length === 1, 'one choice');
    return { request_id: r._request_id };
  });
  await check('passthrough_stream', async () => {
    const s = await c.chat.completions.create({ ...passthrough, stream: true }, { headers: { 'X-Request-Id': 'sdk-passthrough-stream' } });
    return collect(s, { chat: true, usage: false });
  });

  if (args['shed-base-url']) {
    await check('rate_limited_shed', async () => {
      const fl = fetchLog();
      const sc = client({ baseURL: args['shed-base-url'], maxRetries: 1, fetch: fl.fetch });
      const t0 = Date.now();
      const d = await expectError(() => sc.chat.completions.create({ model, messages }), OpenAI.RateLimitError, 429, { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
      const elapsed = Date.now() - t0;
      assert(fl.log.length === 2, `${fl.log.length} attempts, want 2 (maxRetries 1)`);
      const ra = fl.log[0].headers['retry-after'];
      assert(ra !== undefined && Number(ra) >= 0 && Number(ra) <= 60, `retry-after ${ra}`);
      const gap = fl.log[1].at - fl.log[0].at;
      assert(gap >= Number(ra) * 1000 - 50, `retried after ${gap} ms, Retry-After ${ra} s`);
      return { ...d, attempts: fl.log.length, retry_after: ra, retry_gap_ms: gap, elapsed_ms: elapsed };
    });
  }
  if (args['saturated-base-url']) {
    await check('rate_limited_engine', async () => {
      const fl = fetchLog();
      const sc = client({ baseURL: args['saturated-base-url'], maxRetries: 1, fetch: fl.fetch });
      const d = await expectError(() => sc.chat.completions.create({ model, messages, stream: true }), OpenAI.RateLimitError, 429, { type: 'rate_limit_error' });
      assert(fl.log.length === 2, `${fl.log.length} attempts, want 2`);
      const ra = fl.log[0].headers['retry-after'];
      assert(ra !== undefined, 'no retry-after');
      return { ...d, attempts: fl.log.length, retry_after: ra, retry_gap_ms: fl.log[1].at - fl.log[0].at };
    });
  }

  if (args['broken-base-url']) {
    // The engine's connection breaks mid-stream: the SDK must raise an
    // APIError from the gateway's error event, which names no address.
    await check('stream_broken', async () => {
      const bc = client({ baseURL: args['broken-base-url'] });
      const s = await bc.chat.completions.create({ model, messages, stream: true });
      let text = '';
      try {
        for await (const chunk of s) if (chunk.choices.length) text += chunk.choices[0].delta.content || '';
      } catch (e) {
        assert(e instanceof OpenAI.APIError, `got ${e.constructor.name}: ${e.message}`);
        assert(e.error && e.error.type === 'server_error' && e.error.message, `error ${JSON.stringify(e.error)}`);
        assert(!/\d+\.\d+\.\d+\.\d+|\[[0-9a-f:]+\]|localhost/.test(e.error.message), `the error names an address: ${e.error.message}`);
        assert(text.length > 0, 'no content before the break');
        return { text, error: e.error };
      }
      throw new Error(`the stream ended without an error after ${JSON.stringify(text)}`);
    });
  }

  if (args['broken-base-url']) {
    // An engine's error in vLLM's older flat shape reaches the SDK in
    // OpenAI's.
    await check('error_engine_flat', () =>
      expectError(() => client({ baseURL: args['broken-base-url'] }).chat.completions.create({ model, messages }, { headers: { 'X-Request-Id': 'sdk-flat-error' } }),
        OpenAI.BadRequestError, 400, { param: 'max_tokens', type: 'invalid_request_error', message: "This model's maximum context length is 4096 tokens" }));
  }

  await check('concurrent', async () => {
    // Many requests at once over the SDK's keep-alive pool.
    const jobs = [];
    for (let i = 0; i < 24; i++) {
      const usage = i % 3 === 1;
      if (i % 3 === 2) {
        jobs.push(c.chat.completions.create({ model, messages: [{ role: 'user', content: `question ${i}` }], max_tokens: 4 }).then((r) => {
          assert(r.usage.completion_tokens === 4 && r.choices[0].message.content, `non-stream ${i}: ${JSON.stringify(r)}`);
        }));
      } else {
        const body = { model, messages: [{ role: 'user', content: `question ${i}` }], max_tokens: 4, stream: true };
        if (usage) body.stream_options = { include_usage: true };
        jobs.push(c.chat.completions.create(body).then((st) => collect(st, { chat: true, usage })).then((r) => {
          assert(r.content_chunks === 4, `stream ${i}: ${r.content_chunks} content chunks`);
        }));
      }
    }
    const res = await Promise.allSettled(jobs);
    const failed = res.filter((r) => r.status === 'rejected').map((r) => String(r.reason && r.reason.message));
    assert(failed.length === 0, `${failed.length} of ${jobs.length} failed: ${failed.slice(0, 3).join('; ')}`);
    return { requests: jobs.length };
  });

  await check('abort_nonstream', async () => {
    const ac = new AbortController();
    const t0 = Date.now();
    const p = c.chat.completions.create({ model, messages, max_tokens: 4000 }, { signal: ac.signal, headers: { 'X-Request-Id': 'sdk-abort-whole' } });
    setTimeout(() => ac.abort(), 100);
    try {
      await p;
    } catch (e) {
      assert(e instanceof OpenAI.APIUserAbortError, `got ${e.constructor.name}: ${e.message}`);
      return { aborted_after_ms: Date.now() - t0 };
    }
    throw new Error(`completed in ${Date.now() - t0} ms before the abort`);
  });

  await check('abort_mid_stream', async () => {
    const ac = new AbortController();
    const s = await c.chat.completions.create({ model, messages, max_tokens: 4000, stream: true }, { signal: ac.signal, headers: { 'X-Request-Id': 'sdk-abort' } });
    let n = 0;
    let aborted = false;
    try {
      for await (const chunk of s) {
        if (chunk.choices.length && chunk.choices[0].delta.content) n++;
        if (n === 3) ac.abort();
      }
    } catch (e) {
      aborted = e instanceof OpenAI.APIUserAbortError || (e && e.name === 'AbortError');
      if (!aborted) throw e;
    }
    assert(n >= 3 && n < 4000, `${n} content chunks before the abort`);
    const d = { content_chunks: n, threw_abort_error: aborted };
    if (args['metrics-url']) {
      await pollZero(args['metrics-url'], 'switchyard_gateway_in_flight', 5000);
      await pollZero(args['metrics-url'], 'switchyard_gateway_admission_queued', 5000);
      d.gateway_in_flight = 0;
    }
    if (args['engine-metrics']) {
      for (const u of args['engine-metrics'].split(',')) await pollZero(u, 'vllm:num_requests_running', 5000);
      d.engines_running = 0;
    }
    return d;
  });

  const report = { sdk: 'openai-node', version: sdkVersion, node: process.version, passthrough_body: passthrough, checks };
  process.stdout.write(JSON.stringify(report) + '\n');
  process.exitCode = checks.every((x) => x.ok) ? 0 : 1;
}

main().catch((e) => {
  process.stderr.write(`${e && e.stack}\n`);
  process.exitCode = 2;
});
