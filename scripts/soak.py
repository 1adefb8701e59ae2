#!/usr/bin/env python3
"""Soak driver for scripts/soak.sh (not in CI): mixed traffic against a running sluicegate.

Exact clients hammer a token_bucket policy through forward-auth (as a trusted proxy naming
each client in X-Forwarded-For); a flood task sends a new key on every request; slow
clients open connections that never finish their request head; for the Redis phase the
redis-server is killed and restarted on the same port every RESTART_EVERY seconds. It
reports decisions, errors, the server's RSS over time and over-admissions: per exact client,
admitted - (burst * (1 + restarts) + rate * elapsed), which must be 0 with an exact store
(the policy fails closed, so an outage admits nothing; a restarted Redis is empty, so each
restart may give one more burst).
Usage: soak.py API_ADDR PID SECONDS [REDIS_PORT REDIS_CMD...]
"""
import asyncio
import json
import os
import signal
import subprocess
import sys
import time

LIMIT, BURST, PERIOD_S = 50, 50, 1.0  # the "exact" policy of soak.sh's config
EXACT_CLIENTS = 20
FLOOD_TASKS = 2
SLOW_CLIENTS = 100
RESTART_EVERY = 60.0


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Conn:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def request(self, path, headers):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        lines = [f"GET {path} HTTP/1.1", "Host: soak"] + [f"{k}: {v}" for k, v in headers]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length:
            await self.reader.readexactly(length)
        return status

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class Stats:
    def __init__(self):
        self.allowed = self.denied = self.errors = self.conn_errors = 0
        self.flood = 0
        self.slow_opened = self.slow_closed_by_server = 0
        self.restarts = 0
        self.rss = []
        self.exact_admitted = [0] * EXACT_CLIENTS
        self.other_status = {}


async def exact_client(i, host, port, stats, deadline):
    conn = Conn(host, port)
    headers = [("X-Original-URI", "/exact/x"), ("X-Forwarded-For", f"198.18.{i // 250}.{i % 250 + 1}")]
    while time.monotonic() < deadline:
        try:
            status = await conn.request("/v1/forward-auth", headers)
        except (OSError, asyncio.IncompleteReadError):
            stats.conn_errors += 1
            conn.close()
            await asyncio.sleep(0.05)
            continue
        if status == 200:
            stats.allowed += 1
            stats.exact_admitted[i] += 1
        elif status == 429:
            stats.denied += 1
        else:
            stats.errors += 1
            stats.other_status[status] = stats.other_status.get(status, 0) + 1
    conn.close()


async def flood(t, host, port, stats, deadline):
    conn, n = Conn(host, port), 0
    while time.monotonic() < deadline:
        n += 1
        headers = [("X-Original-URI", "/flood/x"), ("X-Api-Key", f"flood-{t}-{n}")]
        try:
            status = await conn.request("/v1/forward-auth", headers)
        except (OSError, asyncio.IncompleteReadError):
            stats.conn_errors += 1
            conn.close()
            await asyncio.sleep(0.05)
            continue
        stats.flood += 1
        if status not in (200, 429):
            stats.errors += 1
            stats.other_status[status] = stats.other_status.get(status, 0) + 1


async def slow_client(host, port, stats, deadline):
    """Sends half a request head and waits: the server must close it (header_read_timeout)."""
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.2)
            continue
        stats.slow_opened += 1
        writer.write(b"GET /v1/policies HTTP/1.1\r\nHost: slow\r\n")
        try:
            await writer.drain()
            left = deadline - time.monotonic()
            data = await asyncio.wait_for(reader.read(), timeout=max(left, 0.1))
            if data == b"" or data.startswith(b"HTTP/1.1 408"):
                stats.slow_closed_by_server += 1
        except (asyncio.TimeoutError, OSError):
            pass
        writer.close()


async def sample_rss(pid, stats, start, deadline):
    while time.monotonic() < deadline:
        stats.rss.append((round(time.monotonic() - start), round(rss_mib(pid), 1)))
        await asyncio.sleep(10)


async def restart_redis(port, cmd, stats, deadline):
    while time.monotonic() + RESTART_EVERY < deadline:
        await asyncio.sleep(RESTART_EVERY)
        subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(2)  # two seconds of outage
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stats.restarts += 1


async def main():
    addr, pid, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    host, port = addr.rsplit(":", 1)
    port = int(port)
    redis_port = int(sys.argv[4]) if len(sys.argv) > 4 else None
    redis_cmd = sys.argv[5:]
    stats = Stats()
    start = time.monotonic()
    deadline = start + seconds
    tasks = [exact_client(i, host, port, stats, deadline) for i in range(EXACT_CLIENTS)]
    tasks += [flood(t, host, port, stats, deadline) for t in range(FLOOD_TASKS)]
    tasks += [slow_client(host, port, stats, deadline) for _ in range(SLOW_CLIENTS)]
    tasks.append(sample_rss(pid, stats, start, deadline))
    if redis_port:
        tasks.append(restart_redis(redis_port, redis_cmd, stats, deadline))
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - start
    stats.rss.append((round(elapsed), round(rss_mib(pid), 1)))
    bound = BURST * (1 + stats.restarts) + LIMIT / PERIOD_S * elapsed
    over = [max(0, a - int(bound)) for a in stats.exact_admitted]
    report = {
        "seconds": round(elapsed, 1),
        "exact_decisions": {"allowed": stats.allowed, "denied": stats.denied},
        "flood_keys": stats.flood,
        "errors_non_200_429": stats.errors,
        "other_statuses": stats.other_status,
        "connection_errors": stats.conn_errors,
        "slow_clients": {"opened": stats.slow_opened, "closed_by_server": stats.slow_closed_by_server},
        "redis_restarts": stats.restarts,
        "exact_admitted_per_client": {"min": min(stats.exact_admitted), "max": max(stats.exact_admitted),
                                      "bound": int(bound)},
        "over_admissions": sum(over),
        "rss_mib_over_time": " ".join(f"{t}s:{m}" for t, m in stats.rss),
    }
    print(json.dumps(report, indent=1))
    return 0 if sum(over) == 0 and stats.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
