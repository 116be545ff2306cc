"""The code-execution sandbox: real solutions pass, hostile candidates fail only themselves."""

import gzip
import json
import os
import socket
import subprocess
import threading
import time

import pytest
import routeforge.scoring.metrics.code_exec as code_exec
from routeforge.artifacts.bundle.signing import generate_key_pair
from routeforge.scoring.metrics.code_exec import (
    assert_program,
    humaneval_program,
    run_many,
    run_program,
    sandbox_status,
)


def test_all_164_canonical_humaneval_solutions_pass(shared_data):
    with gzip.open(shared_data / "prompts" / "humaneval.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    results = run_many([humaneval_program(r["prompt"], r["canonical_solution"], r["test"], r["entry_point"])
                        for r in rows])
    failed = [(r["task_id"], res.reason) for r, res in zip(rows, results) if not res.passed]
    assert len(rows) == 164 and failed == []


def test_completion_forms_a_body_a_whole_function_or_a_fenced_block():
    prompt = 'def add(a, b):\n    """Add."""\n'
    tests = "def check(f):\n    assert f(2, 3) == 5\n"
    assert run_program(humaneval_program(prompt, "    return a + b\n", tests, "add")).passed
    assert run_program(humaneval_program(prompt, "def add(a, b):\n    return a + b\n", tests, "add")).passed
    fenced = "Here you go:\n```python\ndef add(a, b):\n    return b + a\n```\nDone."
    assert run_program(humaneval_program(prompt, fenced, tests, "add")).passed
    assert not run_program(humaneval_program(prompt, "    return a - b\n", tests, "add")).passed
    assert run_program(assert_program("def sq(x):\n    return x * x", ["assert sq(3) == 9"])).passed


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1 that records whether anyone connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    hits = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                hits.append(1)
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], hits
    stop.set()
    thread.join(2)
    server.close()


def test_hostile_candidates_fail_only_themselves(tmp_path, listener, monkeypatch):
    port, hits = listener
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("precious")
    monkeypatch.setenv("ROUTEFORGE_TEST_SECRET", "s3cr3t")
    hostile = {
        "infinite loop": "while True:\n    pass",
        "fork bomb": "import os\nwhile True:\n    os.fork()",
        "shell fork bomb": "import subprocess\nsubprocess.run(['sh', '-c', ':(){ :|:& };:'])",
        "huge allocation": "x = bytearray(16 << 30)",
        "network access": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)",
        "http request": f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/', timeout=2)",
        "write outside the working directory": f"open({str(outside / 'pwned.txt')!r}, 'w').write('x')",
        "delete outside the working directory": f"import shutil\nshutil.rmtree({str(outside)!r})",
        "kill the parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "read environment secrets": "import os\nassert os.environ.get('ROUTEFORGE_TEST_SECRET') == 's3cr3t'",
        "ctypes fork": "import ctypes\nctypes.CDLL(None).fork()",
        "early exit with success": "import os\nos._exit(0)",
        "sys.exit(0)": "import sys\nsys.exit(0)",
        "fake success token, then exit before the tests": "import os\nprint('0' * 32)\nos._exit(0)\nassert False",
        "stack overflow": "def f():\n    return f()\nf()",
        "fill the disk": "open('big.bin', 'wb').write(b'0' * (64 << 20))",
    }
    valid = {"valid 1": "assert sum(range(5)) == 10", "valid 2": "import math\nassert math.isqrt(49) == 7"}
    programs = {**hostile, **valid}
    start = time.perf_counter()
    results = dict(zip(programs, run_many(list(programs.values()), timeout_s=3.0, memory_mb=512)))
    wall = time.perf_counter() - start
    assert len(hostile) >= 10
    for name in hostile:
        assert not results[name].passed, name
    assert results["infinite loop"].reason == "timeout"
    assert "MemoryError" in results["huge allocation"].reason
    assert "sandbox: os.fork" in results["fork bomb"].reason
    assert "sandbox: os.kill" in results["kill the parent"].reason
    assert all(results[n].passed for n in valid)  # the scoring run goes on
    assert wall < 30
    assert hits == []  # nothing reached the listener
    assert (outside / "keep.txt").read_text() == "precious" and not (outside / "pwned.txt").exists()
    assert os.getpid() > 0  # and we are still here


FORK_EXEC = """
import _posixsubprocess, os
def spawn(argv):
    r, w = os.pipe()
    pid = _posixsubprocess.fork_exec(argv, [os.fsencode(argv[0])], True, (w,), None, None, -1, -1, -1, -1, -1, -1,
                                     r, w, True, False, -1, None, None, None, -1, None, False)
    os.close(w)
    os.waitpid(pid, 0)
"""


@pytest.mark.skipif(sandbox_status() != "bubblewrap", reason=f"no bubblewrap sandbox here: {sandbox_status()}")
def test_escapes_that_beat_the_audit_hook_fail_in_the_sandbox(tmp_path, listener):
    """Each escape found against the audit-hook sandbox (issue 37) fails inside bubblewrap and
    leaves nothing outside: process creation without an audit event, sqlite3 and mkfifo writing
    outside, reading the bundle-signing key into the failure reason, a fork bomb, a connection."""
    port, hits = listener
    outside = tmp_path / "outside"
    outside.mkdir()
    private = tmp_path / "keys" / "bundle-signing.key"
    generate_key_pair(private)
    secret = private.read_text()
    hostile = {
        "fork_exec touch": FORK_EXEC + f"spawn(['/usr/bin/touch', {str(outside / 'touched')!r}])\n"
                                       f"assert os.path.exists({str(outside / 'touched')!r})",
        "sqlite3 outside": f"import sqlite3\nsqlite3.connect({str(outside / 'x.db')!r}).execute('create table t(x)')",
        "mkfifo outside": f"import os\nos.mkfifo({str(outside / 'fifo')!r})",
        "read the signing key": f"raise ValueError(open({str(private)!r}).read())",
        "fork bomb without an audit event": FORK_EXEC + "while True:\n    spawn(['/bin/sh', '-c', ':(){ :|:& };:'])",
        "connect from a child": FORK_EXEC + f"spawn(['/bin/bash', '-c', 'echo hi > /dev/tcp/127.0.0.1/{port}'])\n"
                                            "raise SystemExit(1)",
        "list the state folder": f"import os\nassert os.listdir({str(tmp_path)!r})",
    }
    start = time.perf_counter()
    results = dict(zip(hostile, run_many(list(hostile.values()), timeout_s=3.0, memory_mb=512)))
    assert time.perf_counter() - start < 60
    for name, result in results.items():
        assert not result.passed and result.sandbox == "bubblewrap", (name, result)
        assert len(result.reason) <= 220 and "PRIVATE KEY" not in result.reason and secret[40:80] not in result.reason
    assert list(outside.iterdir()) == [] and hits == []
    leftover = subprocess.run(["ps", "-eo", "uid=,comm="], capture_output=True, text=True).stdout.split("\n")
    assert not [line for line in leftover if line.strip() and int(line.split()[0]) >= 200_000]  # all gone


def test_each_result_names_the_isolation_it_ran_under_and_the_fallback_says_why(monkeypatch, tmp_path):
    """What the quality table's `sandbox` field records: bubblewrap, or the fallback and its reason,
    under which the candidate really ran (the fallback sees the host's root; bubblewrap does not)."""
    probe = f"import os\nassert os.path.isdir({str(tmp_path)!r})"
    if sandbox_status() == "bubblewrap":
        inside = run_program(probe)
        assert inside.sandbox == "bubblewrap" and not inside.passed  # the host's folders are not there
    monkeypatch.setattr(code_exec, "sandbox_status", lambda: "fallback: bubblewrap is not installed (test)")
    outside = run_program(probe)
    assert outside.passed and outside.sandbox == "fallback: bubblewrap is not installed (test)"
