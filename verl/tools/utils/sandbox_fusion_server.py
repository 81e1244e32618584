"""A local server with Sandbox Fusion's ``POST /run_code`` API that runs Python in the project's sandbox.

For machines without a Sandbox Fusion deployment (and for the tests of
:class:`~verl.tools.sandbox_fusion_tools.SandboxFusionTool`)::

    python -m verl.tools.utils.sandbox_fusion_server --port 8080      # listens on 127.0.0.1

then ``sandbox_fusion_url: http://127.0.0.1:8080/run_code``. Only ``language: python`` runs (other languages are
answered ``SandboxError``); each request runs in a fresh jail of :func:`verl.sandbox.run_python_sandboxed`
with the request's ``run_timeout`` and ``memory_limit_MB`` (no network). The answer has Sandbox Fusion's shape:
``{"status", "message", "compile_result": null, "run_result": {"status", "return_code", "stdout", "stderr",
"execution_time"}, "files": {}}``.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from verl.sandbox import SandboxUnavailableError, run_python_sandboxed

__all__ = ["handle_run_code", "main", "make_server", "serve_in_thread"]

MAX_MEMORY_MB = 4096


def handle_run_code(request: dict[str, Any]) -> dict[str, Any]:
    """The Sandbox Fusion answer to one ``run_code`` request (a dict as decoded from its JSON body)."""
    code, language = request.get("code"), request.get("language", "python")
    if not isinstance(code, str):
        return {"status": "SandboxError", "message": "'code' must be a string", "run_result": None}
    if language != "python":
        return {"status": "SandboxError", "message": f"language {language!r} is not supported here (python only)"}
    timeout = float(request.get("run_timeout") or 10)
    memory = int(request.get("memory_limit_MB") or 512)
    memory = MAX_MEMORY_MB if memory <= 0 else min(memory, MAX_MEMORY_MB)
    try:
        result = run_python_sandboxed(code, stdin=str(request.get("stdin") or ""), timeout_s=timeout, memory_mb=memory)
    except SandboxUnavailableError as e:
        return {"status": "SandboxError", "message": f"the sandbox is unavailable: {e}", "run_result": None}
    if result.setup_failed:
        return {"status": "SandboxError", "message": result.describe(), "run_result": None}
    run_status = "TimeLimitExceeded" if result.timed_out else ("Finished" if result.returncode is not None else "Error")
    return {
        "status": "Success" if result.ok else "Failed",
        "message": "" if result.ok else result.describe(),
        "compile_result": None,
        "run_result": {
            "status": run_status,
            "return_code": result.returncode,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "execution_time": result.duration_s,
        },
        "files": {},
    }


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") != "/run_code":
            self._send(404, {"detail": f"no endpoint {self.path}; POST /run_code"})
            return
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except json.JSONDecodeError as e:
            self._send(400, {"detail": f"the body is not JSON: {e}"})
            return
        self._send(200, handle_run_code(request if isinstance(request, dict) else {}))

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        return None


def make_server(host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A threading server (one thread per request) bound to ``host:port`` (port 0: a free one); call
    ``serve_forever``, or :func:`serve_in_thread`."""
    return ThreadingHTTPServer((host, port), _Handler)


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    """Run ``server`` in a daemon thread; stop it with ``server.shutdown()``."""
    thread = threading.Thread(target=server.serve_forever, name="sandbox-fusion-server", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> None:
    """``python -m verl.tools.utils.sandbox_fusion_server [--host 127.0.0.1] [--port 8080]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    server = make_server(args.host, args.port)
    print(f"Sandbox Fusion API on http://{args.host}:{server.server_address[1]}/run_code", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
