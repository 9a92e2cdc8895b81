#!/usr/bin/env python3
"""scripts/bench_serve.sh + scripts/bench_server.py against the built-in model (CTest
py_bench_serve): streams 1,2 of 8 tokens on a free port; the table has both rows, the JSON
holds every request's tokens, the server stops cleanly on SIGTERM. Then bench_server.py
against a closed port: it gives up after --wait with exit status 2 and a message."""
import json
import os
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("HS_CLI") or sys.exit("HS_CLI (the hyperstream binary) is not set; run through CTest")


def check(cond, what, out=""):
    if not cond:
        sys.exit(f"FAIL: {what}\n{out}")


with tempfile.TemporaryDirectory() as out:
    r = subprocess.run(
        ["bash", f"{ROOT}/scripts/bench_serve.sh", "--port", "0", "--streams", "1,2", "--max-tokens", "8",
         "--out", out, "--wait", "60", "--", "--threads", "1", "--max-seqs", "2"],
        env={**os.environ, "HS_BIN": CLI, "HS_LOG": "error"}, capture_output=True, text=True, timeout=120)
    both = r.stdout + r.stderr
    check(r.returncode == 0, f"bench_serve.sh exited {r.returncode}", both)
    rows = [l for l in r.stdout.splitlines() if l.startswith("| ") and l[2].isdigit()]
    check(len(rows) == 2, "two table rows", r.stdout)
    check(rows[0].startswith("| 1 |") and rows[1].startswith("| 2 |"), "rows for 1 and 2 streams", r.stdout)
    check(all(len(row.split("|")) == 8 for row in rows), "six columns (with the server's TTFT)", r.stdout)
    check(rows[1].split("|")[5].strip() == "2/2", "every request ok", r.stdout)
    check(open(f"{out}/bench_server.md").read() == r.stdout, "bench_server.md holds the table")
    j = json.load(open(f"{out}/bench_server.json"))
    check(j["model"] == "hyperstream-builtin" and j["max_seqs"] == 2 and j["max_tokens"] == 8, "JSON header", j)
    check("--max-seqs 2" in j["label"], "label: the serve arguments", j)
    check([lv["streams"] for lv in j["levels"]] == [1, 2], "JSON levels", j)
    for lv in j["levels"]:
        check(lv["requests_ok"] == lv["streams"] and lv["completion_tokens"] == 8 * lv["streams"], "tokens", lv)
        check(lv["aggregate_tok_s"] > 0 and lv["ttft_p50_ms"] > 0 and lv["server_ttft_p50_ms"] > 0, "rates", lv)
    check("hyperstream serve: stopped" in open(f"{out}/serve.log").read(), "clean stop logged")

with socket.socket() as s:  # a port nothing listens on
    s.bind(("127.0.0.1", 0))
    closed = s.getsockname()[1]
r = subprocess.run([sys.executable, f"{ROOT}/scripts/bench_server.py", "--url", f"http://127.0.0.1:{closed}",
                    "--wait", "0.5", "--streams", "1"], capture_output=True, text=True, timeout=30)
check(r.returncode == 2 and "not ready after 0.5 s" in r.stderr, "closed port: exit 2 with a message",
      r.stdout + r.stderr)
print("ok")
