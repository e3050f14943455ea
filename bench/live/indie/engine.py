#!/usr/bin/env python3
"""A small vLLM-compatible inference engine that runs no model.

It serves the OpenAI API as vLLM does (POST /v1/chat/completions and
/v1/completions, streaming or not; GET /v1/models, /health, /metrics with
vLLM V1's metric names) and answers with timing from a queueing model, so
that routers can be compared on an engine that shares no code or model
with Switchyard's enginesim (simulator/engine). Python 3 standard library
only.

Model. At most --slots requests run at once (the batch); the rest wait in
FIFO order. A request that starts while `running` requests run (itself
included) has a first token after

    (overhead + uncached prompt tokens x per-token prefill time)
        x (1 + (f - 1)(running - 1)/(slots - 1))

and then streams its tokens, each after

    tbot x (1 + g(running - 1)/(slots - 1))

with `running` read when the token is due, until max_tokens, when its slot
frees and the next waiting request starts. Its KV blocks (prompt and
max_tokens, 16 tokens a block) are held from start to finish; the prompt's
full blocks, named by chained hashes of their tokens, stay in a prefix
cache once computed and are evicted least recently used first when a
starting request needs room. A request whose blocks do not fit waits (the
queue is FIFO, so those behind it wait too). A client that disconnects,
waiting or running, gives its slot back (vLLM aborts it).

Tokenizer: a regex splits text into words (with their leading space),
runs of punctuation and runs of whitespace; pieces longer than 4
characters are cut into 4-character tokens (about 4 characters a token, as
for English with BPE tokenizers).

usage: engine.py --port 8000 --preset fast|slow [--model NAME] [--seed N]
                 [--slots N] [--overhead-ms X] [--prefill-us-per-token X]
                 [--ttft-factor F] [--tbot-ms X] [--tbot-growth G]
                 [--cache-blocks N] [--max-model-len N]
"""

import argparse
import collections
import hashlib
import json
import math
import random
import re
import select
import signal
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BLOCK_TOKENS = 16

# fast: an 8-slot engine; slow: 4 slots, 2.5x the prefill time per token,
# slower and more batch-sensitive decode, a smaller cache. Cache sizes are
# in 16-token blocks: 16384 blocks hold 262,144 tokens, a few dozen of the
# bench's prompts (up to 8,192 of its tokens, about 11,000 of ours).
PRESETS = {
    "fast": dict(slots=8, overhead_ms=40.0, prefill_us_per_token=100.0, ttft_factor=2.5,
                 tbot_ms=25.0, tbot_growth=1.0, cache_blocks=16384),
    "slow": dict(slots=4, overhead_ms=60.0, prefill_us_per_token=250.0, ttft_factor=2.0,
                 tbot_ms=45.0, tbot_growth=0.8, cache_blocks=8192),
}

TOKEN_RE = re.compile(r" ?[A-Za-z0-9_]+| ?[^\sA-Za-z0-9_]+|\s+")


def tokenize(text):
    """Splits text into tokens of at most 4 characters."""
    out = []
    for m in TOKEN_RE.finditer(text):
        piece = m.group(0)
        for i in range(0, len(piece), 4):
            out.append(piece[i:i + 4])
    return out


def block_hashes(tokens):
    """The chained hash of every full block of tokens: block k's hash covers
    blocks 0..k."""
    out = []
    parent = b""
    for k in range(len(tokens) // BLOCK_TOKENS):
        h = hashlib.blake2b(parent, digest_size=16)
        h.update("\x00".join(tokens[k * BLOCK_TOKENS:(k + 1) * BLOCK_TOKENS]).encode("utf-8", "surrogatepass"))
        parent = h.digest()
        out.append(parent)
    return out


def render_chat(messages):
    """The prompt text of a chat: each message as a role header and its
    content (this engine's chat template)."""
    parts = []
    for m in messages:
        parts.append("<|" + m["role"] + "|>\n" + m["content"] + "\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


WORDS = ("the of and to in is that for it as with was on be by at this are from or an have not "
         "which but all were when we there can more one has been if will their so would about "
         "engine router batch token cache prefix queue request stream latency model").split()

# Histogram buckets of vLLM V1 (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                   120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, v):
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1
                break
        self.sum += v
        self.count += 1


class BadRequest(Exception):
    """A request the engine refuses: its status, message, the parameter at
    fault and OpenAI's error code where it has one."""

    def __init__(self, message, status=400, param=None, code=None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


class Disconnected(Exception):
    """The client went away."""


class Request:
    def __init__(self, rid, tokens, max_tokens):
        self.id = rid
        self.tokens = tokens
        self.hashes = block_hashes(tokens)
        self.max_tokens = max_tokens
        self.arrival = time.monotonic()
        self.started = threading.Event()
        self.start = 0.0
        self.running_at_start = 0
        self.ttft_delay = 0.0
        self.hit_tokens = 0
        self.held = []  # hashes this request holds a reference on
        self.anon = 0  # blocks it holds that have no hash (yet)
        self.finished = False


class Engine:
    """The batch, the waiting queue, the block pool and the counters. Every
    field is guarded by lock."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.lock = threading.Lock()
        self.waiting = collections.deque()
        self.running = 0
        self.refs = {}  # hash -> references by running requests (0: evictable)
        self.evictable = collections.OrderedDict()  # hash -> None, least recently used first
        self.in_use = 0  # blocks held by running requests
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.queries = 0
        self.hits = 0
        self.success = collections.Counter()  # finished_reason -> count
        self.aborted = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(LATENCY_BUCKETS)
        self.queue_time = Histogram(LATENCY_BUCKETS)
        self.prefill_time = Histogram(LATENCY_BUCKETS)
        self.decode_time = Histogram(LATENCY_BUCKETS)

    def blocks_needed(self, req):
        return math.ceil((len(req.tokens) + req.max_tokens) / BLOCK_TOKENS)

    def submit(self, req):
        with self.lock:
            self.waiting.append(req)
            self._schedule()

    def _schedule(self):
        """Starts waiting requests in order while a slot and their blocks are
        free."""
        cfg = self.cfg
        while self.waiting and self.running < cfg.slots:
            req = self.waiting[0]
            # Longest cached prefix; at least one prompt token is computed.
            hit = 0
            max_hit = (len(req.tokens) - 1) // BLOCK_TOKENS
            while hit < max_hit and req.hashes[hit] in self.refs:
                hit += 1
            new = self.blocks_needed(req) - hit
            reused_evictable = sum(1 for h in req.hashes[:hit] if self.refs[h] == 0)
            if self.in_use + reused_evictable + new > cfg.cache_blocks:
                return  # waits for running requests to free blocks
            self.waiting.popleft()
            for h in req.hashes[:hit]:
                if self.refs[h] == 0:
                    del self.evictable[h]
                    self.in_use += 1
                self.refs[h] += 1
                req.held.append(h)
            while self.in_use + len(self.evictable) + new > cfg.cache_blocks:
                h, _ = self.evictable.popitem(last=False)
                del self.refs[h]
            self.in_use += new
            req.anon = new
            self.running += 1
            req.running_at_start = self.running
            req.hit_tokens = hit * BLOCK_TOKENS
            uncached = len(req.tokens) - req.hit_tokens
            req.ttft_delay = (cfg.overhead_ms / 1e3 + uncached * cfg.prefill_us_per_token / 1e6) * \
                (1 + (cfg.ttft_factor - 1) * (self.running - 1) / max(cfg.slots - 1, 1))
            req.start = time.monotonic()
            self.queries += len(req.tokens)
            self.hits += req.hit_tokens
            self.prompt_tokens += len(req.tokens)
            self.queue_time.observe(req.start - req.arrival)
            req.started.set()

    def prefilled(self, req):
        """Names the request's computed prompt blocks, so later requests hit
        them."""
        with self.lock:
            for h in req.hashes[len(req.held):]:
                if h in self.refs:
                    continue  # computed by another request meanwhile; ours stays unnamed
                self.refs[h] = 1
                req.held.append(h)
                req.anon -= 1

    def tbot(self):
        cfg = self.cfg
        with self.lock:
            running = self.running
        return cfg.tbot_ms / 1e3 * (1 + cfg.tbot_growth * (running - 1) / max(cfg.slots - 1, 1))

    def finish(self, req, reason):
        """Frees the request's slot and blocks; reason None means aborted."""
        with self.lock:
            if req.finished:
                return
            req.finished = True
            if not req.started.is_set():
                try:
                    self.waiting.remove(req)
                except ValueError:
                    pass
                self.aborted += 1
                return
            for h in req.held:
                self.refs[h] -= 1
                if self.refs[h] == 0:
                    self.in_use -= 1
                    self.evictable[h] = None
            self.in_use -= req.anon
            self.running -= 1
            if reason is None:
                self.aborted += 1
            else:
                self.success[reason] += 1
            self._schedule()

    def metrics(self, model):
        lab = 'model_name="%s",engine="0"' % model.replace("\\", "\\\\").replace('"', '\\"')
        out = []

        def family(name, kind, help_, samples):
            out.append("# HELP %s %s" % (name, help_))
            out.append("# TYPE %s %s" % (name, kind))
            for suffix, labels, v in samples:
                out.append("%s%s{%s} %s" % (name, suffix, labels, repr(float(v))))

        def hist(name, help_, h):
            samples = []
            acc = 0
            for b, c in zip(h.buckets, h.counts):
                acc += c
                samples.append(("_bucket", '%s,le="%s"' % (lab, repr(float(b))), acc))
            samples.append(("_bucket", lab + ',le="+Inf"', h.count))
            samples.append(("_sum", lab, h.sum))
            samples.append(("_count", lab, h.count))
            family(name, "histogram", help_, samples)

        with self.lock:
            cfg = self.cfg
            family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                   [("", lab, self.running)])
            family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                   [("", lab, len(self.waiting))])
            family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
                   [("", lab, self.in_use / cfg.cache_blocks)])
            family("vllm:prefix_cache_queries_total", "counter",
                   "Prefix cache queries, in terms of number of queried tokens.",
                   [("", lab, self.queries)])
            family("vllm:prefix_cache_hits_total", "counter",
                   "Prefix cache hits, in terms of number of cached tokens.", [("", lab, self.hits)])
            family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
                   [("", lab, 0)])
            family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
                   [("", lab, self.prompt_tokens)])
            family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                   [("", lab, self.generation_tokens)])
            family("vllm:request_success_total", "counter", "Count of successfully processed requests.",
                   [("", '%s,finished_reason="%s"' % (lab, r), self.success[r])
                    for r in ("stop", "length")])
            hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft)
            hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl)
            hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e)
            hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                 self.queue_time)
            hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
                 self.prefill_time)
            hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                 self.decode_time)
            family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig.",
                   [("", '%s,block_size="%d",num_gpu_blocks="%d",enable_prefix_caching="True"' %
                     (lab, BLOCK_TOKENS, cfg.cache_blocks), 1)])
        return "\n".join(out) + "\n"


def _text_content(content, where):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise BadRequest("%s: only text content parts are supported" % where, param="messages")
            parts.append(p["text"])
        return "\n".join(parts)
    if content is None:
        return ""
    raise BadRequest("%s: content must be a string or a list of text parts" % where, param="messages")


def _int_field(body, name, minimum):
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest("%s must be an integer" % name, param=name)
    if v < minimum:
        raise BadRequest("%s must be at least %d, got %d" % (name, minimum, v), param=name)
    return v


def parse_request(body, chat, cfg):
    """Validates an OpenAI request body; returns (prompt tokens, max_tokens,
    stream, include_usage)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model", cfg.model)
    if model is not None and not isinstance(model, str):
        raise BadRequest("model must be a string", param="model")
    if model is not None and model != cfg.model:
        raise BadRequest("The model `%s` does not exist." % model, status=404, param="model",
                         code="model_not_found")
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BadRequest("messages must be a non-empty list", param="messages")
        rendered = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise BadRequest("messages[%d] must be an object with a string role" % i, param="messages")
            rendered.append({"role": m["role"], "content": _text_content(m.get("content"), "messages[%d]" % i)})
        tokens = tokenize(render_chat(rendered))
    else:
        p = body.get("prompt")
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
            p = p[0]
        if isinstance(p, str):
            tokens = tokenize(p)
        elif isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
            tokens = [str(t) for t in p]
        elif isinstance(p, list) and len(p) > 1:
            raise BadRequest("this engine takes one prompt per request", param="prompt")
        else:
            raise BadRequest("prompt must be a string, a list of token ids, or a list of one of those",
                             param="prompt")
        if not tokens:
            raise BadRequest("prompt cannot be empty", param="prompt")
    n = _int_field(body, "n", 1)
    if n is not None and n != 1:
        raise BadRequest("this engine generates one choice per request (n = 1)", param="n")
    mt = _int_field(body, "max_completion_tokens", 1) if chat else None
    if mt is None:
        mt = _int_field(body, "max_tokens", 1)
    if len(tokens) >= cfg.max_model_len:
        raise BadRequest("This model's maximum context length is %d tokens. However, your request has %d "
                         "input tokens. Please reduce the length of the input messages." %
                         (cfg.max_model_len, len(tokens)), param="messages" if chat else "prompt")
    if mt is None:
        mt = cfg.max_model_len - len(tokens)
    if len(tokens) + mt > cfg.max_model_len:
        raise BadRequest("This model's maximum context length is %d tokens. However, you requested %d tokens "
                         "(%d in the messages, %d in the completion). Please reduce the length of the messages "
                         "or completion." % (cfg.max_model_len, len(tokens) + mt, len(tokens), mt),
                         param="max_tokens")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest("stream must be a boolean", param="stream")
    so = body.get("stream_options")
    include_usage = False
    if so is not None:
        if not stream:
            raise BadRequest("Stream options can only be defined when `stream=True`.", param="stream_options")
        if not isinstance(so, dict):
            raise BadRequest("stream_options must be an object", param="stream_options")
        include_usage = bool(so.get("include_usage", False))
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        v = body.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise BadRequest("%s must be a number" % name, param=name)
    return tokens, mt, stream, include_usage


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "indie-engine/1"
    max_body = 32 << 20

    def log_message(self, fmt, *args):  # one line per request is too much at load
        pass

    def end_headers(self):
        # vLLM's --enable-request-id-headers: the client's X-Request-Id, or
        # a new one.
        headers = getattr(self, "headers", None)
        self.send_header("X-Request-Id", (headers and headers.get("X-Request-Id")) or uuid.uuid4().hex)
        super().end_headers()

    # -- plumbing ---------------------------------------------------------

    def _send(self, status, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status, obj):
        self._send(status, json.dumps(obj))

    def _error(self, e):
        self._json(e.status, {"error": {"message": str(e), "type": "invalid_request_error", "param": e.param,
                                        "code": e.code}})

    def _read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if te.lower() == "chunked":
            buf = bytearray()
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    raise BadRequest("malformed chunked body")
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(buf)
                if len(buf) + size > self.max_body:
                    self.close_connection = True
                    raise BadRequest("request body too large", status=413)
                buf += self.rfile.read(size)
                self.rfile.readline(1024)
        cl = self.headers.get("Content-Length")
        if cl is None:
            return b""
        try:
            n = int(cl)
        except ValueError:
            self.close_connection = True
            raise BadRequest("bad Content-Length")
        if n < 0 or n > self.max_body:
            self.close_connection = True
            raise BadRequest("request body too large", status=413)
        return self.rfile.read(n)

    def _gone(self):
        """Whether the client closed its connection."""
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _wait_until(self, deadline):
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._gone():
                raise Disconnected()
            time.sleep(min(left, 0.05))

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    # -- routes -------------------------------------------------------------

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        eng, cfg = self.server.engine, self.server.engine.cfg
        if path == "/health":
            self._send(200, b"")
        elif path == "/metrics":
            self._send(200, eng.metrics(cfg.model), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [self._model_card()]})
        elif path.startswith("/v1/models/"):
            if path[len("/v1/models/"):] != cfg.model:
                self._error(BadRequest("The model `%s` does not exist." % path[len("/v1/models/"):], status=404,
                                       param="model", code="model_not_found"))
            else:
                self._json(200, self._model_card())
        elif path in ("/v1/chat/completions", "/v1/completions"):
            self._error(BadRequest("method GET is not allowed on %s" % path, status=405))
        else:
            self._error(BadRequest("no route %s" % path, status=404))

    def _model_card(self):
        cfg = self.server.engine.cfg
        return {"id": cfg.model, "object": "model", "created": self.server.created, "owned_by": "indie",
                "root": cfg.model, "parent": None, "max_model_len": cfg.max_model_len}

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        try:
            raw = self._read_body()
        except BadRequest as e:
            self._error(e)
            return
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._error(BadRequest("no route %s" % path, status=404))
            return
        chat = path == "/v1/chat/completions"
        cfg = self.server.engine.cfg
        try:
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as e:
                raise BadRequest("the request body is not valid JSON: %s" % e)
            tokens, max_tokens, stream, include_usage = parse_request(body, chat, cfg)
        except BadRequest as e:
            self._error(e)
            return
        except RecursionError:
            self._error(BadRequest("the request body is nested too deeply"))
            return
        self._generate(chat, tokens, max_tokens, stream, include_usage)

    def _generate(self, chat, tokens, max_tokens, stream, include_usage):
        eng, cfg = self.server.engine, self.server.engine.cfg
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"
        req = Request(rid, tokens, max_tokens)
        rng = random.Random("%d:%s" % (cfg.seed, rid))
        if stream:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()

        def event(choice, usage=None):
            d = {"id": rid, "object": obj + ".chunk" if chat else obj, "created": created,
                 "model": cfg.model, "choices": [choice] if choice is not None else []}
            if include_usage:
                d["usage"] = usage
            self._chunk(b"data: " + json.dumps(d).encode() + b"\n\n")

        reason = None
        text = []
        try:
            eng.submit(req)
            while not req.started.wait(0.05):
                if self._gone():
                    raise Disconnected()
            self._wait_until(req.start + req.ttft_delay)
            eng.prefilled(req)
            first = time.monotonic()
            with eng.lock:
                eng.ttft.observe(first - req.arrival)
                eng.prefill_time.observe(first - req.start)
            due = first
            for i in range(max_tokens):
                if i > 0:
                    gap = eng.tbot()
                    due += gap
                    self._wait_until(due)
                    with eng.lock:
                        eng.itl.observe(gap)
                with eng.lock:
                    eng.generation_tokens += 1
                tok = " " + rng.choice(WORDS)
                text.append(tok)
                last = i == max_tokens - 1
                if stream:
                    fr = "length" if last else None
                    if chat:
                        delta = {"role": "assistant", "content": tok} if i == 0 else {"content": tok}
                        event({"index": 0, "delta": delta, "logprobs": None, "finish_reason": fr})
                    else:
                        event({"index": 0, "text": tok, "logprobs": None, "finish_reason": fr})
            done = time.monotonic()
            reason = "length"
            usage = {"prompt_tokens": len(tokens), "completion_tokens": max_tokens,
                     "total_tokens": len(tokens) + max_tokens,
                     "prompt_tokens_details": {"cached_tokens": req.hit_tokens}}
            with eng.lock:
                eng.e2e.observe(done - req.arrival)
                eng.decode_time.observe(done - first)
            eng.finish(req, reason)
            if stream:
                if include_usage:
                    event(None, usage)
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
            else:
                if chat:
                    choice = {"index": 0, "message": {"role": "assistant", "content": "".join(text)},
                              "logprobs": None, "finish_reason": reason}
                else:
                    choice = {"index": 0, "text": "".join(text), "logprobs": None, "finish_reason": reason}
                self._json(200, {"id": rid, "object": obj, "created": created, "model": cfg.model,
                                 "choices": [choice], "usage": usage})
        except (Disconnected, OSError):
            self.close_connection = True
        finally:
            if reason is None:
                eng.finish(req, None)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, addr, engine):
        super().__init__(addr, Handler)
        self.engine = engine
        self.created = int(time.time())

    def handle_error(self, request, client_address):
        # A client that resets its connection is routine under load; other
        # errors are logged, one traceback each.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


def main(argv=None):
    ap = argparse.ArgumentParser(description="A small vLLM-compatible engine with modelled timing.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="fast")
    ap.add_argument("--model", default="indie-8b", help="the served model name (default indie-8b)")
    ap.add_argument("--seed", type=int, default=0, help="seeds the generated words (default 0)")
    ap.add_argument("--max-model-len", type=int, default=32768, help="prompt plus output tokens (default 32768)")
    for name, kind in (("slots", int), ("overhead-ms", float), ("prefill-us-per-token", float),
                       ("ttft-factor", float), ("tbot-ms", float), ("tbot-growth", float),
                       ("cache-blocks", int)):
        ap.add_argument("--" + name, type=kind, default=None, help="overrides the preset's value")
    a = ap.parse_args(argv)
    p = dict(PRESETS[a.preset])
    for k in p:
        v = getattr(a, k)
        if v is not None:
            p[k] = v
    cfg = argparse.Namespace(model=a.model, seed=a.seed, max_model_len=a.max_model_len, **p)
    problems = []
    if cfg.slots < 1:
        problems.append("--slots must be at least 1")
    if cfg.cache_blocks < 1:
        problems.append("--cache-blocks must be at least 1")
    if cfg.max_model_len < 2:
        problems.append("--max-model-len must be at least 2")
    if math.ceil(cfg.max_model_len / BLOCK_TOKENS) > cfg.cache_blocks:
        problems.append("--cache-blocks (%d) cannot hold one request of --max-model-len (%d) tokens" %
                        (cfg.cache_blocks, cfg.max_model_len))
    for k in ("overhead_ms", "prefill_us_per_token", "tbot_ms", "tbot_growth"):
        if not (getattr(cfg, k) >= 0 and math.isfinite(getattr(cfg, k))):
            problems.append("--%s must be a finite number >= 0" % k.replace("_", "-"))
    if not (cfg.ttft_factor >= 1 and math.isfinite(cfg.ttft_factor)):
        problems.append("--ttft-factor must be a finite number >= 1")
    if problems:
        ap.error("; ".join(problems))
    srv = Server((a.host, a.port), Engine(cfg))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown, daemon=True).start())
    print("indie engine: %s preset %s on %s:%d: %s" % (cfg.model, a.preset, a.host, a.port, json.dumps(p)),
          file=sys.stderr, flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
