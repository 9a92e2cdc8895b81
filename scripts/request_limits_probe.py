#!/usr/bin/env python3
# The request-path rows of issue 18, measured against a built-in-model server (docs/server.md
# "Prompt limits"): server CPU seconds and peak RSS of a MB-MiB chat message (env MB, default 50)
# and of 16K Anthropic tool results in reverse call order. Loopback only:
#   MB=50 unshare -rn python3 scripts/request_limits_probe.py build/src/hyperstream [CTX|default]
import json, os, subprocess, sys, time, urllib.request, socket
bin_, ctx = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "default")
subprocess.run(["ip", "link", "set", "lo", "up"])
args = [bin_, "serve", "--port", "8123"] + (["--ctx-size", ctx] if ctx != "default" else [])
srv = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(600):
    try:
        urllib.request.urlopen("http://127.0.0.1:8123/health", timeout=1); break
    except Exception: time.sleep(0.1)
def cpu():
    f = open(f"/proc/{srv.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def hwm():
    for l in open(f"/proc/{srv.pid}/status"):
        if l.startswith("VmHWM"): return int(l.split()[1]) // 1024
def post(path, body):
    data = json.dumps(body).encode()
    req = urllib.request.Request("http://127.0.0.1:8123" + path, data=data, headers={"content-type": "application/json"})
    c0, t0 = cpu(), time.time()
    try:
        r = urllib.request.urlopen(req, timeout=600); status, text = r.status, r.read().decode()[:160]
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()[:160]
    return status, cpu() - c0, time.time() - t0, len(data), text
base_rss = hwm()
big = " ".join(f"w{(i * 7919) % 1000003}x{i % 97}" for i in range(7_000_000))[:int(os.environ.get("MB", "50")) * 1024 * 1024]
s, c, w, n, t = post("/v1/chat/completions", {"messages": [{"role": "user", "content": big}], "max_tokens": 4})
print(f"{os.environ.get('MB', '50')}MiB message: status {s}, server CPU {c:.2f}s, wall {w:.2f}s, body {n/1e6:.1f} MB, peak RSS {base_rss} -> {hwm()} MiB: {t}")
N = 16384
uses = [{"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": {"i": i}} for i in range(N)]
results = [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"file {i} " + "x" * 64} for i in reversed(range(N))]
req = {"max_tokens": 16, "tools": [{"name": "read", "input_schema": {"type": "object"}}],
       "messages": [{"role": "user", "content": "read"}, {"role": "assistant", "content": uses}, {"role": "user", "content": results}]}
s, c, w, n, t = post("/v1/messages/count_tokens", req)
print(f"16K tool results (count_tokens): status {s}, server CPU {c:.2f}s, wall {w:.2f}s, body {n/1e6:.2f} MB: {t}")
srv.terminate(); srv.wait()
