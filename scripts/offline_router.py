"""Drive offline-router from Python, the way a simulator does.

    from offline_router import OfflineRouter, RouterError

    with OfflineRouter(config={"block_size": 512, "queue_threshold": 1}) as router:
        router.worker_ready(1, max_num_batched_tokens=8192)
        resp = router.place("r1", input_tokens=1000, block_hashes=[7, 8], now_ms=0)
        for p in resp["placements"]:
            router.dispatch_committed(p["request_id"])

Each method sends one command and returns the parsed response (a dict).
A response with "ok": false raises RouterError carrying its code and
message; if the process dies, RouterDied carries what it wrote on stderr.
A config dict travels as the stream's first command ({"op": "config", ...}),
so no file is written; the effective config is then in .config.
Integers, hashes included, stay exact: Python's json keeps big ints as ints.
No dependency beyond the standard library.
"""

import json
import os
import subprocess
import tempfile
import threading

__all__ = ["OfflineRouter", "RouterError", "RouterDied", "RouterClosed"]


class RouterError(Exception):
    """The router answered a command with "ok": false."""

    def __init__(self, response):
        self.response = response
        self.code = response["error"]["code"]
        self.message = response["error"]["message"]
        super().__init__(f"{self.code}: {self.message}")


class RouterDied(Exception):
    """The router process ended while a response was expected. responses:
    those send_many read before it ended (with --fail-fast, the last is the
    error that ended it)."""

    def __init__(self, returncode, stderr):
        self.returncode = returncode
        self.stderr = stderr
        self.responses = []
        super().__init__(f"offline-router exited with status {returncode}: {stderr.strip()}")


class RouterClosed(Exception):
    """A command was sent after close()."""


class OfflineRouter:
    """One offline-router process, spoken to over its stdin and stdout."""

    def __init__(self, binary="offline-router", config=None, args=()):
        """config: a dict of config keys, sent as the first command, or the
        path of a JSON config file, passed as --config."""
        cmd = [binary]
        if config is not None and not isinstance(config, dict):
            cmd += ["--config", os.fspath(config)]
        cmd += list(args)
        # stderr goes to a file, not a pipe: a chatty router must never block.
        self._stderr = tempfile.TemporaryFile()
        self._closed = False
        self.commands_sent = 0
        self.config = None
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        if isinstance(config, dict):
            try:
                self.config = self.send({"op": "config", **config})["config"]
            except BaseException:
                self._abandon()
                raise
            self.commands_sent = 0  # what the session sent, the config apart

    # -- the protocol -------------------------------------------------------

    def send(self, command):
        """Send one command (a dict) and return its response."""
        self._write([command])
        return self._check(self._read())

    def send_many(self, commands, check=True):
        """Send a batch of commands without waiting between them (faster),
        then read their responses, in order. With check, the first error
        response raises RouterError after every response was read."""
        data = self._encode(commands)  # a command json cannot write fails here, before anything is sent
        writer = threading.Thread(target=self._write_encoded, args=(data, len(data)))
        writer.start()  # a separate writer: a full pipe each way cannot deadlock
        responses = []
        try:
            for _ in data:
                responses.append(self._read())
        except RouterDied as e:
            e.responses = responses
            raise
        finally:
            writer.join()
        if check:
            for r in responses:
                self._check(r)
        return responses

    def worker_ready(self, worker_id, now_ms=None, **fields):
        return self.send(self._cmd("worker_ready", now_ms, worker_id=worker_id, **fields))

    def worker_draining(self, worker_id, now_ms=None):
        return self.send(self._cmd("worker_draining", now_ms, worker_id=worker_id))

    def worker_removed(self, worker_id, now_ms=None):
        return self.send(self._cmd("worker_removed", now_ms, worker_id=worker_id))

    def topology_settled(self, now_ms=None):
        return self.send(self._cmd("topology_settled", now_ms))

    def place(self, request_id, now_ms=None, **fields):
        return self.send(self._cmd("place", now_ms, request_id=request_id, **fields))

    def observe(self, events, now_ms=None):
        return self.send(self._cmd("observe", now_ms, events=events))

    def dispatch_committed(self, request_id, now_ms=None):
        return self.send(self._cmd("dispatch_committed", now_ms, request_id=request_id))

    def dispatch_aborted(self, request_id, now_ms=None):
        return self.send(self._cmd("dispatch_aborted", now_ms, request_id=request_id))

    def prefill_completed(self, request_id, now_ms=None):
        return self.send(self._cmd("prefill_completed", now_ms, request_id=request_id))

    def request_terminal(self, request_id, now_ms=None):
        return self.send(self._cmd("request_terminal", now_ms, request_id=request_id))

    def cancel_pending(self, request_id, now_ms=None):
        return self.send(self._cmd("cancel_pending", now_ms, request_id=request_id))

    def advance_clock(self, now_ms):
        return self.send({"op": "advance_clock", "now_ms": now_ms})

    def inspect(self):
        return self.send({"op": "inspect"})["state"]

    # -- the process --------------------------------------------------------

    def close(self):
        """Close stdin, wait for the router to finish, and check its status."""
        if self._closed:
            return
        self._closed = True
        if self._proc.stdin and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except BrokenPipeError:
                pass
        code = self._proc.wait()
        if self._proc.stdout:
            self._proc.stdout.close()
        stderr = self._stderr_text()
        self._stderr.close()
        if code != 0:
            raise RouterDied(code, stderr)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._abandon()

    def _abandon(self):
        """End the process without waiting for it to finish its input."""
        if self._closed:
            return
        self._closed = True
        self._proc.kill()
        self._proc.wait()
        for f in (self._proc.stdin, self._proc.stdout, self._stderr):
            try:
                f.close()
            except (OSError, ValueError):
                pass

    # -- internals ----------------------------------------------------------

    @staticmethod
    def _cmd(op, now_ms, **fields):
        cmd = {"op": op}
        if now_ms is not None:
            cmd["now_ms"] = now_ms
        cmd.update({k: v for k, v in fields.items() if v is not None})
        return cmd

    def _write(self, commands):
        data = self._encode(commands)
        self._write_encoded(data, len(data))

    def _encode(self, commands):
        if self._closed:
            raise RouterClosed("the router was closed; start a new OfflineRouter")
        return [json.dumps(c, separators=(",", ":")).encode() + b"\n" for c in commands]

    def _write_encoded(self, lines, n):
        try:
            self._proc.stdin.write(b"".join(lines))
            self._proc.stdin.flush()
        except BrokenPipeError:
            return  # the read that follows reports the death, with stderr
        self.commands_sent += n

    def _read(self):
        line = self._proc.stdout.readline()
        if not line.endswith(b"\n"):
            # End of output, or a last line cut short: the router is gone.
            code = self._proc.wait()
            raise RouterDied(code, self._stderr_text() + (f"\n(last output line cut short: {line[:200]!r})" if line else ""))
        return json.loads(line)

    def _stderr_text(self):
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    @staticmethod
    def _check(response):
        if not response["ok"]:
            raise RouterError(response)
        return response
