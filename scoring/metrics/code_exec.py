"""pass@1 by running a candidate program with its tests in a sandboxed child process.

Layers, each of which alone stops a class of hostile candidates:
- a fresh interpreter (`python -I`) in a throwaway working directory, with an environment that holds
  nothing but PATH and HOME (no secrets to read), in its own session so the whole process group is
  killed at the wall-clock limit;
- resource limits: address space (huge allocations fail with MemoryError), CPU seconds, file size,
  open files;
- a CPython audit hook, installed before the candidate runs and impossible to remove, that refuses
  process creation (fork, exec, spawn, subprocess, os.system), signals to other processes, sockets,
  ctypes, and any write, rename, delete or permission change outside the working directory;
- no network: when `unshare --net` works here the child also runs in an empty network namespace.

A test passes only when the harness prints a per-run nonce after the candidate's tests returned;
exit code 0 alone (e.g. an early `os._exit(0)`) does not count. A candidate that deliberately
inspects the harness's memory to forge that nonce is outside what this sandbox defends: it guards the
machine and the scoring run from the candidate, not the score from a candidate written to cheat it.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

_HARNESS = r'''
import os, sys
_nonce = sys.stdin.readline().strip()
_program = sys.stdin.read()
_root = os.path.realpath(os.getcwd())
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_BLOCKED = {"os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system", "subprocess.Popen",
            "os.kill", "os.killpg", "signal.pthread_kill", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
            "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto",
            "os.putenv", "os.unsetenv", "sys.setrecursionlimit"}
_PATH_EVENTS = {"os.remove", "os.rmdir", "os.rename", "os.replace", "os.mkdir", "os.chmod", "os.chown",
                "os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move",
                "shutil.copyfile", "shutil.copytree", "os.chdir", "os.chroot"}

def _inside(path):
    try:
        p = os.path.realpath(os.fsdecode(path) if not isinstance(path, int) else ".")
    except Exception:
        return False
    return p == _root or p.startswith(_root + os.sep)

def _hook(event, args):
    if event in _BLOCKED:
        raise PermissionError("sandbox: " + event + " is not allowed")
    if event == "open" and args:
        path, mode, flags = (list(args) + [None, None])[:3]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE)
        if writing and not isinstance(path, int) and not _inside(path):
            raise PermissionError("sandbox: writing outside the working directory")
    elif event in _PATH_EVENTS:
        for arg in args[:2]:
            if isinstance(arg, (str, bytes, os.PathLike)) and not _inside(arg):
                raise PermissionError("sandbox: " + event + " outside the working directory")

sys.addaudithook(_hook)
try:
    exec(compile(_program, "<candidate>", "exec"), {"__name__": "__main__"})
except BaseException as _exc:
    sys.stderr.write("candidate failed: %s: %s\n" % (type(_exc).__name__, str(_exc)[:500]))
    sys.stderr.flush()
    os._exit(1)
sys.stdout.write("\n" + _nonce + "\n")
sys.stdout.flush()
os._exit(0)
'''


@dataclass(frozen=True)
class ExecResult:
    passed: bool
    reason: str  # "passed", "timeout", "failed: …"
    wall_s: float


@lru_cache(maxsize=1)
def _netns_prefix() -> tuple[str, ...]:
    """`unshare --net --` when this machine allows an empty network namespace, else nothing."""
    exe = shutil.which("unshare")
    if not exe:
        return ()
    try:
        ok = subprocess.run([exe, "--net", "--", sys.executable, "-c", "0"], capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ()
    return (exe, "--net", "--") if ok.returncode == 0 else ()


def _limits(memory_mb: int, cpu_s: int):
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_program(program: str, timeout_s: float = 10.0, memory_mb: int = 1024) -> ExecResult:
    """Run `program` in the sandbox; passed only if it ran to the end without raising."""
    nonce = secrets.token_hex(16)
    workdir = tempfile.mkdtemp(prefix="routeforge-exec-")
    cmd = [*_netns_prefix(), sys.executable, "-I", "-S", "-B", "-c", _HARNESS]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "HOME": workdir, "PYTHONDONTWRITEBYTECODE": "1"},
        start_new_session=True, preexec_fn=_limits(memory_mb, int(timeout_s) + 1),
    )
    try:
        out, err = proc.communicate(f"{nonce}\n{program}".encode(), timeout=timeout_s)
        wall = time.perf_counter() - start
        if proc.returncode == 0 and nonce.encode() in out.splitlines()[-1:]:
            return ExecResult(True, "passed", wall)
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return ExecResult(False, f"failed: {tail[0][:300]}", wall)
    except subprocess.TimeoutExpired:
        return ExecResult(False, "timeout", time.perf_counter() - start)
    finally:
        try:
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def extract_code(response: str) -> str:
    """The code in a response: the first fenced block if any, else the text itself."""
    m = _FENCE.search(response)
    return m.group(1) if m else response


def humaneval_program(prompt: str, completion: str, tests: str, entry_point: str) -> str:
    """HumanEval: the prompt's signature and docstring, the completion (a body or a whole function),
    the task's `check`, and the call that runs it."""
    code = extract_code(completion)
    first = next((line for line in code.splitlines() if line.strip()), "")
    body = first[:1] in (" ", "\t")
    joined = prompt + code if body else prompt + "\n    pass\n\n" + code
    return f"{joined}\n\n{tests}\n\ncheck({entry_point})\n"


def assert_program(completion: str, tests: list[str], setup: str = "") -> str:
    """MBPP-style: the completion followed by its assert statements."""
    return "\n".join([setup, extract_code(completion), "", *tests, ""])


def run_many(programs: list[str], timeout_s: float = 10.0, memory_mb: int = 1024,
             workers: int | None = None) -> list[ExecResult]:
    """Run programs concurrently (each in its own sandboxed process), results in input order."""
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2) as pool:
        return list(pool.map(lambda p: run_program(p, timeout_s, memory_mb), programs))
