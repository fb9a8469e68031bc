#!/usr/bin/python3
"""attn serve under load (issue 15 part 4), beside offline attn translate on the same lines.

    serve_load.py --model M.safetensors --lines FILE [--seconds 60] [--clients 1,8,64]
                  [--beam 5] [--max-batch 64] [--attn build/attn] [--json OUT.json]

Starts `attn serve --model M --port 0`, then for each client count runs that many client
threads for --seconds, each sending one line of FILE per POST /v1/translate (the lines taken in
turn, round and round), and reports sentences/s, p50 and p99 latency and errors (an HTTP status
other than 200, a wrong number of results, or a lost connection). A sampler reads the server's
resident memory (VmRSS of /proc/PID/status) every second throughout, to show whether it stays
flat. Then it times `attn translate --batch 64 --beam B` on every line of FILE once and gives
the ratio of the served throughput at the largest client count to it (the issue's target:
>= 0.8 at 64 clients). Only the standard library; run it with /usr/bin/python3.
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def resident_kib(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


class MemorySampler(threading.Thread):
    def __init__(self, pid, every=1.0):
        super().__init__(daemon=True)
        self.pid, self.every, self.samples, self.done = pid, every, [], threading.Event()
        self.start_time = time.monotonic()

    def run(self):
        while not self.done.is_set():
            rss = resident_kib(self.pid)
            if rss is not None:
                self.samples.append((round(time.monotonic() - self.start_time, 1), rss))
            self.done.wait(self.every)


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load(port, lines, clients, seconds, beam):
    latencies, errors, sentences = [], [], 0
    lock = threading.Lock()
    next_line = [0]
    deadline = time.monotonic() + seconds

    def client():
        nonlocal sentences
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while time.monotonic() < deadline:
            with lock:
                line = lines[next_line[0] % len(lines)]
                next_line[0] += 1
            body = json.dumps({"text": [line], "beam": beam}).encode()
            start = time.monotonic()
            try:
                connection.request("POST", "/v1/translate", body=body,
                                   headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                payload = response.read()
                ok = response.status == 200 and len(json.loads(payload)["results"]) == 1
                problem = None if ok else f"HTTP {response.status}: {payload[:200]!r}"
            except (OSError, http.client.HTTPException, ValueError) as e:
                problem = f"{type(e).__name__}: {e}"
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            elapsed = time.monotonic() - start
            with lock:
                if problem is None:
                    latencies.append(elapsed)
                    sentences += 1
                else:
                    errors.append(problem)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    return {"clients": clients, "seconds": round(wall, 2), "sentences": sentences,
            "sentences_per_s": round(sentences / wall, 2),
            "p50_ms": round(1000 * percentile(latencies, 0.50), 2) if latencies else None,
            "p99_ms": round(1000 * percentile(latencies, 0.99), 2) if latencies else None,
            "errors": len(errors), "first_errors": errors[:3]}


def offline(attn, model, lines_file, beam, threads):
    command = [attn, "translate", "--model", model, "--batch", "64", "--beam", str(beam)]
    if threads:
        command += ["--threads", str(threads)]
    with open(lines_file, "rb") as source:
        start = time.monotonic()
        result = subprocess.run(command, stdin=source, capture_output=True)
        wall = time.monotonic() - start
    produced = result.stdout.count(b"\n")
    return {"sentences": produced, "seconds": round(wall, 2),
            "sentences_per_s": round(produced / wall, 2), "exit_status": result.returncode}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--lines", required=True, help="one sentence per line (UTF-8)")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--max-wait", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="decoder threads (0: all)")
    parser.add_argument("--attn", default=str(ROOT / "build" / "attn"))
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args()

    lines = [line for line in Path(args.lines).read_text(encoding="utf-8").splitlines() if line]
    if not lines:
        sys.exit(f"serve_load: {args.lines} has no lines")
    command = [args.attn, "serve", "--model", args.model, "--port", "0",
               "--max-batch", str(args.max_batch), "--max-wait", str(args.max_wait)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    server = subprocess.Popen(command, stderr=subprocess.PIPE)
    first = server.stderr.readline().decode()
    match = re.search(r"listening on http://[^:]+:(\d+)", first)
    if not match:
        server.kill()
        sys.exit(f"serve_load: attn serve did not start: {first}")
    port = int(match.group(1))
    sampler = MemorySampler(server.pid)
    sampler.start()
    report = {"model": args.model, "lines": args.lines, "beam": args.beam,
              "max_batch": args.max_batch, "max_wait_ms": args.max_wait, "runs": []}
    try:
        for clients in (int(c) for c in args.clients.split(",")):
            run = load(port, lines, clients, args.seconds, args.beam)
            report["runs"].append(run)
            print(f"{clients:3d} clients: {run['sentences_per_s']:9.2f} sentences/s  "
                  f"p50 {run['p50_ms']} ms  p99 {run['p99_ms']} ms  errors {run['errors']}",
                  flush=True)
    finally:
        sampler.done.set()
        sampler.join()
        server.send_signal(signal.SIGTERM)
        report["server_exit_status"] = server.wait(timeout=120)
        server.stderr.close()
    report["resident_kib"] = sampler.samples
    if sampler.samples:
        rss = [kib for _, kib in sampler.samples]
        print(f"server resident memory: first {rss[0]} KiB, last {rss[-1]} KiB, "
              f"max {max(rss)} KiB over {sampler.samples[-1][0]} s")
    report["offline"] = offline(args.attn, args.model, args.lines, args.beam, args.threads)
    print(f"offline attn translate --batch 64: {report['offline']['sentences_per_s']} "
          f"sentences/s ({report['offline']['sentences']} in {report['offline']['seconds']} s)")
    if report["runs"] and report["offline"]["sentences_per_s"] > 0:
        last = report["runs"][-1]
        report["ratio"] = round(last["sentences_per_s"] / report["offline"]["sentences_per_s"], 3)
        print(f"served at {last['clients']} clients / offline: {report['ratio']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    failed = any(run["errors"] for run in report["runs"]) or report["server_exit_status"] != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
