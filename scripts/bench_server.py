#!/usr/bin/env python3
"""Aggregate decode throughput of a running `hyperstream serve` at several concurrency levels.

At each level N of --streams: N concurrent greedy chat requests (or seeded ones at
--temperature T) of --max-tokens tokens each (ignore_eos, streamed with usage), wall-clock
timed from the first request sent to the last stream ended. Prints a markdown table (streams |
aggregate tok/s | per-stream tok/s | TTFT p50 ms | requests ok); --json FILE writes the same
numbers. TTFT is the time to the first content or reasoning delta. Python 3 standard library
only (the GPU lease machine has nothing else).

A random model whose vocabulary is larger than its tokenizer's (`serve --synthetic flash`: 129280
ids, the built-in tokenizer's 730) streams text only for the few ids the tokenizer has, so its
first delta comes late or never. --server-log FILE (the server's stderr) adds the server's own
time to the first token of each request (its access log's ttft_ms: queue + prefill) as a column.

  python3 scripts/bench_server.py [--url http://127.0.0.1:8000] [--streams 1,8,32]
                                  [--max-tokens 256] [--wait S] [--json FILE] [--server-log FILE]

--response-format JSON sends that response_format (e.g. '{"type": "json_object"}') instead of
ignore_eos: structured output, sampled under its token mask; a request then ends when its value
is complete (--max-tokens is a cap), the aggregate counts the tokens it had, and the warm-up
request runs in full so that the levels see the schema's mask cache warm.

Exit status 1 when a request failed (the table is printed all the same), 2 on bad usage or
a server that did not become ready within --wait seconds.
"""
import argparse
import concurrent.futures
import json
import re
import statistics
import sys
import time
import urllib.error
import urllib.request


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default %(default)s)")
    p.add_argument("--streams", default="1,8,32", metavar="N,N,...",
                   help="concurrency levels (default %(default)s)")
    p.add_argument("--max-tokens", type=int, default=256, metavar="N", help="tokens per request (default %(default)s)")
    p.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="untimed requests of min(16, max-tokens) tokens sent first, one at a time (default 1)")
    p.add_argument("--wait", type=float, default=0, metavar="S",
                   help="poll /health for up to S seconds until the server is ready (default 0: ask once)")
    p.add_argument("--timeout", type=float, default=600, metavar="S", help="seconds one request may take (default 600)")
    p.add_argument("--api-key", metavar="KEY", help="sent as Authorization: Bearer KEY")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--temperature", type=float, default=0, metavar="T",
                   help="sampling temperature (default 0: greedy)")
    p.add_argument("--response-format", metavar="JSON", type=json.loads,
                   help="send this response_format (structured output) instead of ignore_eos")
    p.add_argument("--label", metavar="TEXT", help="recorded in the JSON (e.g. the serve command line)")
    p.add_argument("--server-log", metavar="FILE",
                   help="the server's stderr: adds its first-token time per request (access log ttft_ms)")
    a = p.parse_args(argv)
    try:
        a.levels = [int(x) for x in a.streams.split(",") if x.strip()]
    except ValueError:
        p.error(f"--streams: expected N,N,... got {a.streams!r}")
    if not a.levels or min(a.levels) < 1:
        p.error(f"--streams: every level must be at least 1, got {a.streams!r}")
    if a.max_tokens < 1:
        p.error("--max-tokens must be at least 1")
    a.url = a.url.rstrip("/")
    return a


def http_get(args, path, timeout=10):
    req = urllib.request.Request(args.url + path)
    if args.api_key:
        req.add_header("Authorization", f"Bearer {args.api_key}")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def wait_ready(args):
    """The /health JSON once it answers 200; exits 2 when it does not within --wait seconds."""
    deadline = time.monotonic() + args.wait
    last = "no answer"
    while True:
        try:
            return json.loads(http_get(args, "/health", timeout=5))
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}: {e.read().decode(errors='replace').strip()}"
        except (urllib.error.URLError, OSError) as e:
            last = str(getattr(e, "reason", e))
        if time.monotonic() >= deadline:
            print(f"bench_server: {args.url} not ready after {args.wait:g} s ({last})", file=sys.stderr)
            sys.exit(2)
        time.sleep(0.2)


def max_sequences(args):
    """The server's --max-seqs from /metrics, or None."""
    try:
        m = re.search(r"^hyperstream_max_sequences (\d+)", http_get(args, "/metrics"), re.M)
        return int(m.group(1)) if m else None
    except (urllib.error.URLError, OSError):
        return None


def one_request(args, i, max_tokens):
    """One streamed chat request: {ok, id, tokens, ttft_s, seconds, error}."""
    body = {
        "messages": [{"role": "user", "content": f"Request {i}: tell me a story."}],
        "max_tokens": max_tokens,
        "temperature": args.temperature,
        "seed": 1000 + i,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.response_format is not None:
        body["response_format"] = args.response_format
    else:
        body["ignore_eos"] = True
    req = urllib.request.Request(args.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    if args.api_key:
        req.add_header("Authorization", f"Bearer {args.api_key}")
    res = {"ok": False, "id": None, "tokens": 0, "ttft_s": None, "seconds": None, "error": None}
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as r:
            usage, done = None, False
            for raw in r:  # SSE: "data: {...}" lines, blank lines between events
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    res["error"] = json.dumps(chunk["error"])
                    break
                res["id"] = res["id"] or chunk.get("id")
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for c in chunk.get("choices", []):
                    d = c.get("delta", {})
                    if res["ttft_s"] is None and (d.get("content") or d.get("reasoning_content")):
                        res["ttft_s"] = time.monotonic() - t0
        res["seconds"] = time.monotonic() - t0
        if res["error"] is None:
            if not done:
                res["error"] = "the stream ended without [DONE]"
            elif usage is None:
                res["error"] = "no usage chunk"
            else:
                res["tokens"] = int(usage["completion_tokens"])
                res["ok"] = True
    except urllib.error.HTTPError as e:
        res["error"] = f"HTTP {e.code}: {e.read().decode(errors='replace').strip()}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        res["error"] = f"{type(e).__name__}: {e}"
    return res


def server_ttfts(path, ids, timeout=5.0):
    """{request id: ttft_ms} from the access-log lines of `ids` (waits for lines not yet written)."""
    deadline = time.monotonic() + timeout
    while True:
        found = {}
        with open(path, errors="replace") as f:
            for line in f:
                if not line.startswith("{") or '"access"' not in line:
                    continue
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if j.get("id") in ids and j.get("ttft_ms") is not None:
                    found[j["id"]] = j["ttft_ms"]
        if len(found) == len(ids) or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


def run_level(args, n):
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        t0 = time.monotonic()
        futures = [pool.submit(one_request, args, i, args.max_tokens) for i in range(n)]
        results = [f.result() for f in futures]
        seconds = time.monotonic() - t0
    ok = [r for r in results if r["ok"]]
    tokens = sum(r["tokens"] for r in ok)
    ttfts = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    agg = tokens / seconds if seconds > 0 else 0.0
    lv = {
        "streams": n,
        "requests": n,
        "requests_ok": len(ok),
        "completion_tokens": tokens,
        "seconds": seconds,
        "aggregate_tok_s": agg,
        "per_stream_tok_s": agg / n,
        "ttft_p50_ms": statistics.median(ttfts) * 1000 if ttfts else None,
        "ttft_max_ms": max(ttfts) * 1000 if ttfts else None,
        "requests_with_text": len(ttfts),
        "errors": sorted({r["error"] for r in results if r["error"]}),
    }
    if args.server_log:
        st = list(server_ttfts(args.server_log, {r["id"] for r in ok if r["id"]}).values())
        lv["server_ttft_p50_ms"] = statistics.median(st) if st else None
        lv["server_ttft_max_ms"] = max(st) if st else None
    return lv


def cell(ms):
    return "-" if ms is None else f"{ms:.0f}"


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    health = wait_ready(args)
    max_seqs = max_sequences(args)
    if max_seqs is not None and max(args.levels) > max_seqs:
        print(f"bench_server: note: the server decodes at most {max_seqs} sequences together (--max-seqs); "
              "the rest of a level queues", file=sys.stderr)
    for i in range(args.warmup):
        r = one_request(args, -1 - i, args.max_tokens if args.response_format is not None else min(16, args.max_tokens))
        if not r["ok"]:
            print(f"bench_server: warm-up request failed: {r['error']}", file=sys.stderr)

    levels = []
    extra = " first token p50 ms (server) |" if args.server_log else ""
    print("| streams | aggregate tok/s | per-stream tok/s | TTFT p50 ms | requests ok |" + extra)
    print("|---:|---:|---:|---:|---:|" + ("---:|" if extra else ""))
    for n in args.levels:
        lv = run_level(args, n)
        levels.append(lv)
        row = f"| {n} | {lv['aggregate_tok_s']:.1f} | {lv['per_stream_tok_s']:.1f} | {cell(lv['ttft_p50_ms'])} | "
        row += f"{lv['requests_ok']}/{n} |"
        if extra:
            row += f" {cell(lv['server_ttft_p50_ms'])} |"
        print(row, flush=True)
        for e in lv["errors"]:
            print(f"bench_server: {n} streams: {e}", file=sys.stderr)
        if lv["requests_with_text"] < lv["requests_ok"]:
            print(f"bench_server: {n} streams: {lv['requests_ok'] - lv['requests_with_text']} of "
                  f"{lv['requests_ok']} requests streamed no text (ids outside the tokenizer's vocabulary?); "
                  "TTFT p50 is over the others", file=sys.stderr)

    if args.json:
        out = {
            "label": args.label,
            "url": args.url,
            "model": health.get("model"),
            "max_seqs": max_seqs,
            "max_tokens": args.max_tokens,
            "response_format": args.response_format,
            "levels": levels,
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
    return 0 if all(lv["requests_ok"] == lv["requests"] for lv in levels) else 1


if __name__ == "__main__":
    sys.exit(main())
