"""Scripted stand-in model API (tests only; standard library only).

One conversation per agent CLI: the first request that offers a shell tool gets a call of that tool
running `echo done > marker-<agent>.txt`; a request carrying the tool's result gets a final text
answer; anything else (titles, token counts, side questions) gets a short text. aider has no shell
tool: its first answer writes the marker through aider's whole-file edit format instead. A new
prompt in a conversation that already holds a tool call (a resumed session: `claude --continue`,
`codex exec resume`) gets a second call, `echo continued >> marker-<agent>.txt`, answered "continued".

Every request is appended to $MODEL_API_LOG (JSON lines: method, path, headers, body, what was
answered) so tests can check which key header arrived. With $MODEL_API_EXPECTED_KEY set, a request
that does not carry that key (x-api-key, Authorization: Bearer, x-goog-api-key or ?key=) gets 401,
as from a real API. A CONNECT (the server used as HTTPS_PROXY) is logged and refused. With
$MODEL_API_TLS_CERT and $MODEL_API_TLS_KEY it answers over TLS on 443 too."""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

LOG = os.environ.get("MODEL_API_LOG", "/tmp/requests.jsonl")
EXPECTED = os.environ.get("MODEL_API_EXPECTED_KEY", "")
FINAL = "Done: the marker file is written."
_lock = threading.Lock()


def marker(agent: str) -> str:
    return os.environ.get("MODEL_API_MARKER", f"marker-{agent}.txt")


def command(agent: str, calls: int = 0) -> str:
    """The shell command of the conversation's next tool call, after `calls` earlier ones."""
    return f"echo continued >> {marker(agent)}" if calls else f"echo done > {marker(agent)}"


def fill(schema: dict):
    """A small value matching a JSON schema (Gemini's side questions): the user speaks next, no loop."""
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        return {name: ("user" if name == "next_speaker" else fill(sub))
                for name, sub in (schema.get("properties") or {}).items()}
    if "enum" in schema:
        return schema["enum"][0]
    return {"string": "stand-in", "integer": 10, "number": 0.1, "boolean": False, "array": []}.get(kind)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):   # our own log line instead
        pass

    # --- plumbing -------------------------------------------------------------------------
    def _body(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode(errors="replace")

    def _record(self, body, answer: str, status: int) -> None:
        entry = {"time": time.time(), "method": self.command, "path": self.path,
                 "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body,
                 "answer": answer, "status": status}
        with _lock, open(LOG, "a") as log:
            log.write(json.dumps(entry) + "\n")
        print(f"MODEL-API {self.command} {self.path} -> {status} {answer}", flush=True)

    def _key_ok(self) -> bool:
        if not EXPECTED:
            return True
        query = parse_qs(urlsplit(self.path).query)
        return EXPECTED in (self.headers.get("x-api-key"), self.headers.get("x-goog-api-key"),
                            (self.headers.get("authorization") or "").removeprefix("Bearer "),
                            (query.get("key") or [None])[0])

    def _json(self, status: int, payload) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events) -> None:
        """events: (event name or None, payload); the body ends when the connection closes."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for name, payload in events:
            head = f"event: {name}\n" if name else ""
            self.wfile.write(f"{head}data: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True

    # --- dispatch -------------------------------------------------------------------------
    def do_CONNECT(self):
        # Tests may set HTTPS_PROXY to this server: every host a CLI tries besides its model API
        # (telemetry, update checks) is then logged here and refused, as the sandbox's proxy would.
        self._record(None, "connect-refused", 403)
        self._json(403, {"error": {"message": "stand-in: no tunnels"}})
        self.close_connection = True

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self._record(None, "head", 200)

    def do_GET(self):
        path = urlsplit(self.path).path
        if not self._key_ok():
            self._record(None, "unauthorized", 401)
            return self._json(401, {"error": {"type": "authentication_error", "message": "bad key"}})
        if path.endswith("/models"):
            self._record(None, "models", 200)
            return self._json(200, {"object": "list", "data": [{"id": "stand-in", "object": "model",
                                    "type": "model", "display_name": "stand-in", "created_at": "2026-01-01T00:00:00Z"}],
                                    "models": [{"name": "models/stand-in"}], "has_more": False})
        self._record(None, "not-found", 404)
        self._json(404, {"error": {"message": f"no {path} here"}})

    def do_POST(self):
        body = self._body()
        path = urlsplit(self.path).path
        if not self._key_ok():
            self._record(body, "unauthorized", 401)
            return self._json(401, {"error": {"type": "authentication_error", "message": "missing or wrong API key"}})
        body = body if isinstance(body, dict) else {}
        for suffix, handler in ((":streamGenerateContent", self.gemini), (":generateContent", self.gemini),
                                (":countTokens", self.gemini_count), ("/messages/count_tokens", self.anthropic_count),
                                ("/messages", self.anthropic), ("/responses", self.openai_responses),
                                ("/chat/completions", self.chat)):
            if path.endswith(suffix):
                return handler(body, path)
        self._record(body, "not-found", 404)
        self._json(404, {"error": {"message": f"no {path} here"}})

    # --- Anthropic Messages ---------------------------------------------------------------
    def anthropic_count(self, body, path):
        self._record(body, "count_tokens", 200)
        self._json(200, {"input_tokens": 100})

    def anthropic(self, body, path):
        messages = body.get("messages") or []
        last = messages[-1].get("content") if messages else None
        has_result = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last if isinstance(b, dict))
        tools = {t.get("name") for t in body.get("tools") or []}
        calls = sum(isinstance(b, dict) and b.get("type") == "tool_use" for m in messages
                    if m.get("role") == "assistant" and isinstance(m.get("content"), list) for b in m["content"])
        if has_result:
            answer, block = "final", {"type": "text", "text": FINAL}
        elif "Bash" in tools or "bash" in tools:   # Claude Code's, opencode's
            answer, agent = "continued" if calls else "tool_call", "claude-code" if "Bash" in tools else "opencode"
            block = {"type": "tool_use", "id": f"toolu_stand_in_{calls + 1}", "name": "Bash" if "Bash" in tools else "bash",
                     "input": {"command": command(agent, calls), "description": "Write the marker file"}}
        else:
            answer, block = "text", {"type": "text", "text": "stand-in"}
        stop = "tool_use" if block["type"] == "tool_use" else "end_turn"
        model = body.get("model", "stand-in")
        usage = {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        self._record(body, answer, 200)
        if not body.get("stream"):
            return self._json(200, {"id": "msg_stand_in", "type": "message", "role": "assistant", "model": model,
                                    "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage})
        start = dict(block, input={}) if block["type"] == "tool_use" else dict(block, text="")
        delta = ({"type": "input_json_delta", "partial_json": json.dumps(block["input"])} if block["type"] == "tool_use"
                 else {"type": "text_delta", "text": block["text"]})
        self._sse([
            ("message_start", {"type": "message_start", "message": {
                "id": "msg_stand_in", "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": dict(usage, output_tokens=1)}}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
            ("ping", {"type": "ping"}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 20}}),
            ("message_stop", {"type": "message_stop"}),
        ])

    # --- OpenAI Responses (Codex) ---------------------------------------------------------
    def openai_responses(self, body, path):
        items = body.get("input") if isinstance(body.get("input"), list) else []
        outputs = [n for n, i in enumerate(items) if isinstance(i, dict) and str(i.get("type", "")).endswith("_output")]
        prompts = [n for n, i in enumerate(items) if isinstance(i, dict) and i.get("role") == "user"]
        calls = sum(isinstance(i, dict) and i.get("type") in ("function_call", "custom_tool_call", "local_shell_call")
                    for i in items)
        has_result = bool(outputs) and prompts[-1:] < outputs[-1:]   # not a new prompt after the result
        tools = {t.get("name") or t.get("type") for t in body.get("tools") or [] if isinstance(t, dict)}
        # Codex's own models get "code mode" instead: an input item listing namespaces of tools, the
        # shell reached only from JavaScript given to the custom tool `exec`.
        nested = {t.get("name") for i in items if isinstance(i, dict) and i.get("type") == "additional_tools"
                  for ns in i.get("tools") or [] for t in ns.get("tools") or [] if isinstance(t, dict)}
        cmd, n = command("codex", calls), calls + 1
        if has_result:
            answer = "final"
            item = {"type": "message", "id": "msg_stand_in", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": FINAL, "annotations": []}]}
        elif "shell_command" in tools:
            item = self._call("shell_command", {"command": cmd}, n)
        elif "exec_command" in tools:
            item = self._call("exec_command", {"cmd": cmd}, n)
        elif "shell" in tools:
            item = self._call("shell", {"command": ["bash", "-lc", cmd]}, n)
        elif "exec" in nested:
            item = {"type": "custom_tool_call", "id": f"ctc_stand_in_{n}", "call_id": f"call_stand_in_{n}", "name": "exec",
                    "status": "completed", "input": f"await tools.exec_command({json.dumps({'cmd': cmd})});"}
        elif "local_shell" in tools:
            item = {"type": "local_shell_call", "id": f"lsh_stand_in_{n}", "call_id": f"call_stand_in_{n}",
                    "status": "completed", "action": {"type": "exec", "command": ["bash", "-lc", cmd]}}
        else:
            answer = "text"
            item = {"type": "message", "id": "msg_stand_in", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "stand-in", "annotations": []}]}
        if item["type"] != "message":
            answer = "continued" if calls else "tool_call"
        self._record(body, answer, 200)
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 120}
        response = {"id": "resp_stand_in", "object": "response", "created_at": int(time.time()),
                    "model": body.get("model", "stand-in"), "status": "in_progress", "output": []}
        events = [("response.created", {"type": "response.created", "sequence_number": 0, "response": response}),
                  ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 1,
                                                  "output_index": 0, "item": item})]
        if item["type"] == "message":
            events.append(("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 2,
                           "item_id": item["id"], "output_index": 0, "content_index": 0,
                           "delta": item["content"][0]["text"]}))
        events += [("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 3,
                                                  "output_index": 0, "item": item}),
                   ("response.completed", {"type": "response.completed", "sequence_number": 4,
                                           "response": dict(response, status="completed", output=[item], usage=usage)})]
        if not body.get("stream"):
            return self._json(200, dict(response, status="completed", output=[item], usage=usage))
        self._sse(events)

    @staticmethod
    def _call(name: str, arguments: dict, n: int) -> dict:
        return {"type": "function_call", "id": f"fc_stand_in_{n}", "call_id": f"call_stand_in_{n}", "name": name,
                "arguments": json.dumps(arguments), "status": "completed"}

    # --- OpenAI chat completions (aider) --------------------------------------------------
    def chat(self, body, path):
        messages = body.get("messages") or []
        # aider's prompt carries example exchanges: only an answer of ours counts as asked already
        asked = any(m.get("role") == "assistant" and marker("aider") in str(m.get("content"))
                    for m in messages if isinstance(m, dict))
        if asked:
            answer, text = "final", FINAL
        else:   # aider's "whole" edit format: the file name, then its whole content in a fence
            answer, text = "edit", f"Writing the marker.\n\n{marker('aider')}\n```\ndone\n```\n"
        self._record(body, answer, 200)
        base = {"id": "chatcmpl-stand-in", "created": int(time.time()), "model": body.get("model", "stand-in")}
        usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        if not body.get("stream"):
            return self._json(200, dict(base, object="chat.completion", usage=usage, choices=[
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]))
        chunk = dict(base, object="chat.completion.chunk")
        self._sse([(None, dict(chunk, choices=[{"index": 0, "delta": {"role": "assistant", "content": text},
                                                "finish_reason": None}])),
                   (None, dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}], usage=usage))])
        self.wfile.write(b"data: [DONE]\n\n")

    # --- Gemini ---------------------------------------------------------------------------
    def gemini_count(self, body, path):
        self._record(body, "count_tokens", 200)
        self._json(200, {"totalTokens": 100})

    def gemini(self, body, path):
        contents = body.get("contents") or []
        parts = [p for c in contents if isinstance(c, dict) for p in c.get("parts") or [] if isinstance(p, dict)]
        last = contents[-1].get("parts") or [] if contents else []
        has_result = any("functionResponse" in p for p in last if isinstance(p, dict))
        tools = {d.get("name") for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []}
        config = body.get("generationConfig") or {}
        if "json" in str(config.get("responseMimeType", "")):
            # side questions (model routing, next speaker, loop check) ask for JSON of a schema
            schema = config.get("responseJsonSchema") or config.get("responseSchema") or {}
            answer, part = "json", {"text": json.dumps(fill(schema))}
        elif has_result:
            answer, part = "final", {"text": FINAL}
        elif "run_shell_command" in tools and not any("functionCall" in p for p in parts):
            answer = "tool_call"
            part = {"functionCall": {"name": "run_shell_command",
                                     "args": {"command": command("gemini-cli"), "description": "Write the marker file"}}}
        else:
            answer, part = "text", {"text": FINAL}
        self._record(body, answer, 200)
        payload = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                   "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120},
                   "modelVersion": "stand-in"}
        if path.endswith(":streamGenerateContent"):
            return self._sse([(None, payload)])
        self._json(200, payload)


def serve_tls(cert: str, key: str) -> None:
    """The same API over TLS on 443 (tests of which CA variables a CLI honours)."""
    import ssl

    server = ThreadingHTTPServer(("0.0.0.0", 443), Handler)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    server = ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("PORT", "80"))), Handler)
    server.daemon_threads = True
    if os.environ.get("MODEL_API_TLS_CERT"):
        threading.Thread(target=serve_tls, args=(os.environ["MODEL_API_TLS_CERT"], os.environ["MODEL_API_TLS_KEY"]),
                         daemon=True).start()
    print("READY", flush=True)
    server.serve_forever()
