"""An OpenAI-compatible chat endpoint whose answers are files: how an LLM path is measured where no model runs.

    .venv/bin/python bench/llm_files.py DIR [--port 8765]

No LLM weights can be had on the project's machines, so the LLM options (`DREAM_SYNTHESIS_THEMES=llm`,
...) are measured by letting a reader answer their prompts: point `DREAM_LLM_URL` at
`http://127.0.0.1:PORT/v1` (`bench/synthesis_offline.py --llm-answers DIR` starts one itself) and run
once. Every prompt without an answer is written to `DIR/prompts/KEY.txt` (the system message, a line
`---`, then the user message) and answered with HTTP 404, so the caller falls back as it would on a
failing endpoint. A reader who sees nothing but that file writes the reply's JSON object to
`DIR/answers/KEY.json`; a second run then gets those answers. KEY is a digest of the messages, so an
answer only ever serves the prompt it was written for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def prompt_key(messages: list[dict[str, str]]) -> str:
    return hashlib.sha1(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def serve(folder: Path, port: int = 0) -> ThreadingHTTPServer:
    """Starts the endpoint on a daemon thread; `server.server_address[1]` is its port."""
    (folder / "prompts").mkdir(parents=True, exist_ok=True)
    (folder / "answers").mkdir(parents=True, exist_ok=True)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            messages = body["messages"]
            key = prompt_key(messages)
            answer = folder / "answers" / f"{key}.json"
            if not answer.exists():
                text = "\n---\n".join(m["content"] for m in messages)
                (folder / "prompts" / f"{key}.txt").write_text(text + "\n", encoding="utf-8")
                self._reply(404, {"error": f"no answer yet: {key}"})
                return
            content = answer.read_text(encoding="utf-8")
            self._reply(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})

        def _reply(self, code: int, data: dict[str, Any]) -> None:
            raw = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args(argv)
    server = serve(args.folder, args.port)
    print(f"http://127.0.0.1:{server.server_address[1]}/v1 (answers from {args.folder}/answers)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
