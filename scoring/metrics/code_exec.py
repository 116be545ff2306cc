"""pass@1 by running a candidate program with its tests in a sandboxed child process.

Generated code can be steered by untrusted prompts (traffic logs), so a candidate is treated as
hostile. Layers, each of which alone stops a class of hostile candidates:
- a bubblewrap sandbox (Debian's `bubblewrap`; `sandbox_status()` says whether it is in force): new
  mount, PID, network, IPC and UTS namespaces; a read-only view of `/usr` and the interpreter's own
  prefix only (no state folder, no keys, no home, no /etc but the loader cache); a private tmpfs
  (`/sandbox`, bounded) as the only writable place and working directory; every capability dropped
  and no new privileges; killed with its parent. Run as root (CI, containers), the harness then
  switches to a user id of its own for the run, so RLIMIT_NPROC bounds a fork bomb (root is exempt
  from it) and nothing it starts can regain privileges. What `_posixsubprocess.fork_exec` (no audit
  event), `sqlite3`, `os.mkfifo` or a shell write lands in that tmpfs, which vanishes with the run;
- a fresh interpreter (`python -I`), with an environment that holds nothing but PATH and HOME (no
  secrets to read), in its own session so the whole process group is killed at the wall-clock limit;
- resource limits: address space (huge allocations fail with MemoryError), CPU seconds, file size,
  open files;
- a CPython audit hook, installed before the candidate runs and impossible to remove, that refuses
  process creation (fork, exec, spawn, subprocess, os.system), signals to other processes, sockets,
  ctypes, and any write, rename, delete or permission change outside the working directory;
- no network: the sandbox's network namespace is empty (without bubblewrap, `unshare --net` when it
  works here).

Where bubblewrap is missing or cannot start, the last three layers run alone: `sandbox_status()`
names the reason and every result's `sandbox` field says which isolation it ran under, so the
quality table records it. A failure reason is the last line of the candidate's own stderr, at most
200 printable characters: it never carries what the harness or the host could read.

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
from pathlib import Path
from typing import Any

from routeforge.core.kinds import METRICS
from routeforge.scoring.metrics.base import Unscorable, score_row

_HARNESS = r'''
import os, sys
if len(sys.argv) > 1 and os.getuid() == 0:  # in the sandbox as root: a user id of the run's own
    _uid = int(sys.argv[1])
    os.setgroups([])
    os.setgid(_uid)
    os.setuid(_uid)
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
    sandbox: str = "bubblewrap"  # or "fallback: <why bubblewrap is not in force>"


SANDBOX_DIR = "/sandbox"
SANDBOX_TMPFS_BYTES = 64 << 20
SANDBOX_PROCESSES = 16  # RLIMIT_NPROC for the run's own user id (root only; see the module docstring)
REASON_CHARS = 200


def _interpreter() -> tuple[str, str]:
    """(the real python binary, the prefix holding its standard library and libpython)."""
    return os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)


def _bwrap_command(exe: str) -> list[str]:
    python, prefix = _interpreter()
    command = [exe, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/bin", "usr/bin"), ("/sbin", "usr/sbin")):
        if os.path.islink(link):
            command += ["--symlink", target, link]
        elif os.path.isdir(link):
            command += ["--ro-bind", link, link]
    if not prefix.startswith("/usr/"):
        # its parents (e.g. /root for pyenv) are made traversable: the run's own user id must reach it
        parents = [str(p) for p in reversed(Path(prefix).parents) if str(p) != "/"]
        command += [arg for parent in parents for arg in ("--perms", "0755", "--dir", parent)]
        command += ["--ro-bind", prefix, prefix]
    if os.path.exists("/etc/ld.so.cache"):
        command += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    command += ["--proc", "/proc", "--dev", "/dev", "--size", str(SANDBOX_TMPFS_BYTES), "--tmpfs", SANDBOX_DIR,
                "--chdir", SANDBOX_DIR, "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
                "--setenv", "HOME", SANDBOX_DIR, "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--cap-drop", "ALL"]
    if os.geteuid() == 0:  # the harness switches to the run's user id: it needs these two, once
        command += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return [*command, "--", python]


@lru_cache(maxsize=1)
def sandbox_status() -> str:
    """"bubblewrap", or "fallback: <why>" when it is not installed or cannot start here."""
    exe = shutil.which("bwrap")
    if not exe:
        return "fallback: bubblewrap is not installed (Debian package `bubblewrap`)"
    try:
        probe = subprocess.run([*_bwrap_command(exe), "-I", "-S", "-c", "import os; print(os.getcwd())"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"fallback: bubblewrap did not start ({exc})"
    if probe.returncode != 0 or probe.stdout.strip() != SANDBOX_DIR:
        why = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1][:REASON_CHARS]
        return f"fallback: bubblewrap cannot start here ({why})"
    return "bubblewrap"


def _run_uid() -> int:
    """A user id no account or other run uses, so RLIMIT_NPROC counts this run's processes alone."""
    return 200_000 + secrets.randbelow(800_000)


def _bounded(text: str) -> str:
    return "".join(c if c.isprintable() else " " for c in text)[:REASON_CHARS]


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


def _limits(memory_mb: int, cpu_s: int, processes: int | None = None):
    def apply() -> None:
        import resource

        if processes is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_program(program: str, timeout_s: float = 10.0, memory_mb: int = 1024) -> ExecResult:
    """Run `program` in the sandbox; passed only if it ran to the end without raising."""
    nonce = secrets.token_hex(16)
    workdir = tempfile.mkdtemp(prefix="routeforge-exec-")  # the fallback's working directory
    status = sandbox_status()
    if status == "bubblewrap":
        cmd = [*_bwrap_command(shutil.which("bwrap")), "-I", "-S", "-B", "-c", _HARNESS, str(_run_uid())]
        limits = _limits(memory_mb, int(timeout_s) + 1, SANDBOX_PROCESSES if os.geteuid() == 0 else None)
    else:
        cmd = [*_netns_prefix(), sys.executable, "-I", "-S", "-B", "-c", _HARNESS]
        limits = _limits(memory_mb, int(timeout_s) + 1)
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "HOME": workdir, "PYTHONDONTWRITEBYTECODE": "1"},
        start_new_session=True, preexec_fn=limits,
    )
    try:
        out, err = proc.communicate(f"{nonce}\n{program}".encode(), timeout=timeout_s)
        wall = time.perf_counter() - start
        if proc.returncode == 0 and nonce.encode() in out.splitlines()[-1:]:
            return ExecResult(True, "passed", wall, status)
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return ExecResult(False, f"failed: {_bounded(tail[0])}", wall, status)
    except subprocess.TimeoutExpired:
        return ExecResult(False, "timeout", time.perf_counter() - start, status)
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


def code_program(response: str, meta: dict[str, Any]) -> str:
    """The program a response is run as: the response with the task's assertions, or HumanEval's prompt
    prefix, the response and its check function."""
    tests = meta.get("tests")
    if isinstance(tests, list) and tests:
        return assert_program(response, [str(t) for t in tests], setup=str(meta.get("test_setup") or ""))
    if isinstance(tests, str) and tests.strip():
        if "entry_point" not in meta or "program_prefix" not in meta:
            raise Unscorable("code tests need an entry point and the prompt's code (reference_meta)")
        return humaneval_program(meta["program_prefix"], response, tests, meta["entry_point"])
    raise Unscorable("no tests for this code task (reference_meta.tests)")


@METRICS.register("code_pass_at_1", runs_code=True)
def score(items, quarantine, scorer):
    """pass@1: each response run against its tests, inside bubblewrap (or, where the fleet allows it,
    the fallback, said in the log)."""
    c = scorer.settings.code
    sandbox = sandbox_status()
    scorer.stats["code_sandbox"] = sandbox
    if sandbox != "bubblewrap":
        if c.isolation == "required":  # refuse rather than run hostile code unconfined
            reason = (f"code_pass_at_1: not run: {sandbox.removeprefix('fallback: ')}; generated code runs "
                      "only inside bubblewrap (apt-get install bubblewrap), or set "
                      "scoring.code.isolation: allow_fallback")
            for item in items:
                quarantine.add(item["prompt_id"], reason)
            scorer.stats["code_cells_refused"] += len(items)
            scorer.log(f"warning: {len(items)} code-task cells quarantined: {reason}")
            return []
        scorer.log(f"warning: generated code runs OUTSIDE bubblewrap ({sandbox}): scoring.code.isolation is "
                   "allow_fallback (rlimits and an empty network namespace, as this user)")
    ready, programs = [], []
    for item in items:
        try:
            programs.append(code_program(item["text"], item["meta"]))
            ready.append(item)
        except Unscorable as exc:
            quarantine.add(item["prompt_id"], f"code_pass_at_1: {exc}")
    results = run_many(programs, c.timeout_s, c.memory_mb, c.workers)
    return [score_row(i, "code_pass_at_1", float(res.passed),
                      {"reason": res.reason, "wall_s": round(res.wall_s, 3), "sandbox": res.sandbox})
            for i, res in zip(ready, results)]
