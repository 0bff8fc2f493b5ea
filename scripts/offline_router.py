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

timeout (seconds; default $OFFLINE_ROUTER_TIMEOUT_S, unset or empty: none)
bounds the wait for each response (each one of a send_many) and for each
write: a router that stops answering (hung, SIGSTOP'd) is killed and reaped,
the call raises RouterTimeout (a RouterDied) with the stderr so far, and any
later call raises RouterClosed. A call interrupted before its response
arrived (KeyboardInterrupt, a line that is not JSON) ends the router the same
way, as the stream is then out of step.

close() (or leaving the with block) ends the process: it closes stdin,
gives the router 1 s to finish, then kills it; it reaps it and closes the
pipes. An object dropped without close() does the same when it is
collected, or at interpreter exit: no process or descriptor outlives it.
No dependency beyond the standard library.
"""

import json
import math
import os
import selectors
import subprocess
import tempfile
import threading
import time
import weakref

__all__ = ["OfflineRouter", "RouterError", "RouterDied", "RouterTimeout", "RouterClosed",
           "TIMEOUT_ENV", "FROM_ENV"]

TIMEOUT_ENV = "OFFLINE_ROUTER_TIMEOUT_S"
# The default of every timeout argument: take it from TIMEOUT_ENV.
FROM_ENV = object()
# How long the finalizer of a dropped object lets its router finish after its
# stdin closes, before killing it.
CLOSE_GRACE_S = 1.0
# How long close() lets it finish: a router at the end of its input exits
# at once, but a loaded machine (CI, a race-built binary) can take longer
# than the finalizer's second.
CLOSE_WAIT_S = 10.0
READ_CHUNK = 1 << 16


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

    def __init__(self, returncode, stderr, message=None):
        self.returncode = returncode
        self.stderr = stderr
        self.responses = []
        super().__init__(message or f"offline-router exited with status {returncode}: {stderr.strip()}")


class RouterTimeout(RouterDied):
    """No response (or no room to write a command) within the timeout: the
    router was killed and reaped. timeout: the seconds waited."""

    def __init__(self, timeout, returncode, stderr):
        self.timeout = timeout
        super().__init__(returncode, stderr,
                         f"offline-router did not answer within {timeout} s, so it was killed "
                         f"(status {returncode}); its stderr so far: {stderr.strip()}")


class RouterClosed(Exception):
    """A command was sent after close(), or after a timeout ended the router."""


def _timeout_seconds(value):
    """value (seconds) checked, or read from TIMEOUT_ENV when it is
    FROM_ENV; None is no timeout. A bad value is a ValueError that names
    the argument or the variable."""
    if value is FROM_ENV:
        raw = os.environ.get(TIMEOUT_ENV, "").strip()
        if not raw:
            return None
        try:
            seconds = float(raw)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds above 0 "
                             "(unset or empty: no timeout)")
        return seconds
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"timeout {value!r}: expected a number of seconds above 0, or None for no timeout")
    return float(value)


def _end_child(proc, stderr, grace):
    """End proc (close its stdin, give it grace[0] seconds, kill it), reap
    it, close its pipes and the stderr file. Returns (status, stderr text).
    A module function, not a method: the finalizer must not hold the
    object it finalizes; grace is a one-item list so that close() can
    give the router longer than a dropped object's finalizer does."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        code = proc.wait(grace[0])
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    proc.stdout.close()
    text = _stderr_text(stderr)
    stderr.close()
    return code, text


def _stderr_text(stderr):
    stderr.seek(0)
    return stderr.read().decode(errors="replace")


class OfflineRouter:
    """One offline-router process, spoken to over its stdin and stdout."""

    def __init__(self, binary="offline-router", config=None, args=(), timeout=FROM_ENV):
        """config: a dict of config keys, sent as the first command, or the
        path of a JSON config file, passed as --config. timeout: seconds to
        wait for each response, None for no limit; by default
        $OFFLINE_ROUTER_TIMEOUT_S (unset or empty: no limit)."""
        self.timeout = _timeout_seconds(timeout)  # refused before anything starts
        cmd = [binary]
        if config is not None and not isinstance(config, dict):
            cmd += ["--config", os.fspath(config)]
        cmd += list(args)
        # stderr goes to a file, not a pipe: a chatty router never blocks,
        # nothing has to drain it, and what it wrote so far is always there.
        self._stderr = tempfile.TemporaryFile()
        self._closed = None  # why no command may be sent, once one may not
        self.commands_sent = 0
        self.config = None
        try:
            # Unbuffered: the pipes are read and written through their
            # descriptors, so no bytes hide in a Python buffer from poll.
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._stderr, bufsize=0)
        except BaseException:
            self._stderr.close()
            raise
        self._grace = [CLOSE_GRACE_S]
        self._end = weakref.finalize(self, _end_child, self._proc, self._stderr, self._grace)
        # stdin is non-blocking so that a write to a stopped router can give up.
        os.set_blocking(self._proc.stdin.fileno(), False)
        # poll, not epoll: no descriptor of its own to leak or close.
        self._readable = selectors.PollSelector()
        self._readable.register(self._proc.stdout.fileno(), selectors.EVENT_READ)
        self._writable = selectors.PollSelector()  # used by one writer at a time
        self._writable.register(self._proc.stdin.fileno(), selectors.EVENT_WRITE)
        self._out = bytearray()  # what was read of stdout past the last whole line
        self._scanned = 0  # how much of _out holds no newline: each byte is searched once
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
        data = self._encode([command])
        deadline = self._deadline()
        try:
            self._write_encoded(data, 1, deadline)
            response = self._read(deadline)
        except RouterDied:
            raise
        except BaseException:
            self._interrupted()
            raise
        finally:
            self._release_if_ended()
        return self._check(response)

    def send_many(self, commands, check=True):
        """Send a batch of commands without waiting between them (faster),
        then read their responses, in order. With check, the first error
        response raises RouterError after every response was read. The
        timeout applies to each response: a batch may take longer while
        the router keeps answering."""
        data = self._encode(commands)  # a command json cannot write fails here, before anything is sent
        # A separate writer: a full pipe each way cannot deadlock. It waits
        # without a deadline; a timeout here kills the router, which ends
        # its write with EPIPE.
        writer = threading.Thread(target=self._write_encoded, args=(data, len(data), None))
        writer.start()
        responses = []
        try:
            for _ in data:
                responses.append(self._read(self._deadline()))
        except RouterDied as e:
            e.responses = responses
            raise
        except BaseException:
            self._interrupted()  # also ends a writer blocked on a router that does not read
            raise
        finally:
            writer.join()
            self._release_if_ended()  # after the join: the writer no longer uses stdin
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
        """Close stdin, let the router finish (CLOSE_WAIT_S: the per-call
        timeout bounds answers, not an exit; then it is killed), reap it,
        and check its status. Again, or after a timeout: nothing."""
        if self._closed is None:
            self._closed = "the router was closed"
        self._grace[0] = CLOSE_WAIT_S
        ended = self._end()  # None when it already ran
        if ended is not None and ended[0] != 0:
            raise RouterDied(*ended)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._abandon()

    def _abandon(self):
        """End the process without waiting for it to finish its input."""
        if self._closed is None:
            self._closed = "the router was closed"
        if self._end.alive:
            self._proc.kill()
            self._end()

    # -- internals ----------------------------------------------------------

    @staticmethod
    def _cmd(op, now_ms, **fields):
        cmd = {"op": op}
        if now_ms is not None:
            cmd["now_ms"] = now_ms
        cmd.update({k: v for k, v in fields.items() if v is not None})
        return cmd

    def _encode(self, commands):
        if self._closed is not None:
            raise RouterClosed(f"{self._closed}; start a new OfflineRouter")
        return [json.dumps(c, separators=(",", ":")).encode() + b"\n" for c in commands]

    def _deadline(self):
        return None if self.timeout is None else time.monotonic() + self.timeout

    def _write_encoded(self, lines, n, deadline):
        data = memoryview(b"".join(lines))
        fd = self._proc.stdin.fileno()
        while data:
            try:
                data = data[os.write(fd, data):]
            except BlockingIOError:  # the pipe is full: wait for room, or for the router's end
                if not self._writable.select(self._left(deadline)):
                    raise self._timed_out() from None
            except BrokenPipeError:
                return  # the read that follows reports the death, with stderr
        self.commands_sent += n

    def _read(self, deadline):
        """The next response line, parsed. Partial lines wait in _out for
        their end."""
        while (end := self._out.find(b"\n", self._scanned)) < 0:
            self._scanned = len(self._out)
            if deadline is not None and not self._readable.select(self._left(deadline)):
                raise self._timed_out()
            chunk = os.read(self._proc.stdout.fileno(), READ_CHUNK)
            if not chunk:
                # End of output, or a last line cut short: the router is gone.
                code = self._reap(deadline)
                cut = f"\n(last output line cut short: {bytes(self._out[:200])!r})" if self._out else ""
                raise RouterDied(code, _stderr_text(self._stderr) + cut)
            self._out += chunk
        line = self._out[:end + 1]
        del self._out[:end + 1]  # O(1) in CPython: a bytearray drops its head by moving its start
        self._scanned = 0
        return json.loads(line)

    def _reap(self, deadline):
        try:
            return self._proc.wait(self._left(deadline))
        except subprocess.TimeoutExpired:  # its output closed, but it lives on
            raise self._timed_out() from None

    @staticmethod
    def _left(deadline):
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _timed_out(self):
        """Kill and reap the router; the exception to raise. Its pipes are
        closed by _release_if_ended, once no thread writes to them."""
        self._proc.kill()
        code = self._proc.wait()
        self._closed = f"the router was killed after no answer within {self.timeout} s"
        return RouterTimeout(self.timeout, code, _stderr_text(self._stderr))

    def _interrupted(self):
        """A call ended between a command and its response (Ctrl-C, a line
        that is not JSON): the stream is out of step, so no later response
        could be matched to its command. Kill the router; the pipes go with
        _release_if_ended."""
        if self._closed is None:
            self._closed = "a call was interrupted before its response"
        self._proc.kill()

    def _release_if_ended(self):
        if self._closed is not None:
            self._end()

    @staticmethod
    def _check(response):
        if not response["ok"]:
            raise RouterError(response)
        return response
