"""How one program's run ended: its output collected under the wall-time limit and output cap, then classified.

Standard library only; used by the sandbox worker's zygote (``program_zygote.py``). The verdict rules
(``pass``, ``fail``, ``timeout``, ``memory``, ``error``) are those of
``trajkit.verify.result.RunResult``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

STATUS_CAP = 1 << 16


def watch(pid: int, out_r: int, err_r: int, st_r: int, deadline: float, cap: int) -> dict:
    """Collect the child's output until it exits, the wall time runs out, or the output cap is passed."""
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    buffers = {out_r: bytearray(), err_r: bytearray(), st_r: bytearray()}
    for fd in (*buffers, pidfd):
        poller.register(fd, select.POLLIN)
    exited = timed_out = flooded = False
    try:
        while not (exited or flooded):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for fd, _ in poller.poll(remaining * 1000):
                if fd == pidfd:
                    exited = True
                elif not read_into(fd, buffers[fd]):
                    poller.unregister(fd)
            flooded = len(buffers[out_r]) + len(buffers[err_r]) > cap or len(buffers[st_r]) > STATUS_CAP
        if exited and not flooded:
            for fd, buffer in buffers.items():  # what is in the pipes now; descendants may hold them open
                os.set_blocking(fd, False)
                while len(buffer) <= cap and read_into(fd, buffer):
                    pass
    finally:
        os.close(pidfd)
    return {
        "exited": exited,
        "timed_out": timed_out,
        "flooded": flooded,
        "stdout": bytes(buffers[out_r][:cap]),
        "stderr": bytes(buffers[err_r][:cap]),
        "status": bytes(buffers[st_r][:STATUS_CAP]),
        "cap": cap,
    }


def read_into(fd: int, buffer: bytearray) -> bool:
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return False
    buffer += chunk
    return bool(chunk)


def program_status(raw: bytes, nonce: str) -> dict:
    for line in reversed(raw.splitlines()):
        try:
            status = json.loads(line)
        except ValueError:
            continue
        if isinstance(status, dict) and status.get("nonce") == nonce:
            return status
    return {}


def classify(watch, wait_status, cpu_s, oom, nonce, timeout, memory_mb, runtime, limits) -> dict:
    status = program_status(watch["status"], nonce)
    out = {"stdout": watch["stdout"], "stderr": watch["stderr"], "runtime_s": round(runtime, 4)}
    exception = status.get("exception")
    if watch["timed_out"]:
        return answer("timeout", reason=f"wall time limit of {timeout:g}s exceeded", exception=exception, **out)
    if watch["flooded"]:
        return answer("fail", reason=f"output exceeded {watch['cap']} bytes", **out)
    if "setup_error" in status:
        return answer("error", reason=f"sandbox: could not confine the program: {status['setup_error']}", **out)
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        if oom:
            verdict, reason = "memory", f"killed by the out-of-memory killer (limit {memory_mb} MB)"
        elif sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= limits["RLIMIT_CPU"] - 0.5):
            verdict, reason = "timeout", f"CPU time limit of {limits['RLIMIT_CPU']}s exceeded"
        else:
            verdict, reason = "fail", f"killed by {name}"
        return answer(verdict, reason=reason, signal=sig, exception=exception, **out)
    code = os.WEXITSTATUS(wait_status)
    if status.get("memory") or (code != 0 and oom):
        return answer(
            "memory", reason=f"memory limit of {memory_mb} MB exceeded", exit_code=code, exception=exception, **out
        )
    if code != 0:
        return answer("fail", reason=exception or f"exit code {code}", exit_code=code, exception=exception, **out)
    finished = bool(status.get("finished"))
    reason = "" if finished else (f"exited early ({exception})" if exception else "exited before the program's end")
    return answer("pass", reason=reason, exit_code=0, finished=finished, exception=exception, **out)


def answer(verdict: str, *, stdout: bytes = b"", stderr: bytes = b"", **fields) -> dict:
    return {
        "verdict": verdict,
        "stdout": stdout.decode("utf-8", "replace"),
        "stderr": stderr.decode("utf-8", "replace"),
        **fields,
    }


def emergency_status(fd: int, nonce: str, message: str) -> None:
    try:
        os.write(fd, (json.dumps({"nonce": nonce, "setup_error": message}) + "\n").encode())
    except OSError:
        pass
