"""world-bench driver for the official Python SDK (PyPI `e2b`, AsyncSandbox).

Runs one figure against the emulator and prints `RESULT {json}`. Run by world-bench
(tests/src/bin/world_bench/sdk.rs) with E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY,
PYTHONPATH and the WB_* parameters set. The timed part sits between `MARK start` and
`MARK end`; after each mark it waits for a line on stdin (world-bench reads the
emulator's counters meanwhile).
"""

import asyncio
import json
import os
import sys
import time

from e2b import AsyncSandbox


def num(key):
    return int(os.environ.get(key, "0"))


def mark(what):
    sys.stdout.write(f"MARK {what}\n")
    sys.stdout.flush()
    sys.stdin.readline()


async def exec_seq(sbx):
    for _ in range(3):
        await sbx.commands.run("true")
    n = num("WB_ITER")
    samples = []
    mark("start")
    t0 = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        await sbx.commands.run("true")
        samples.append((time.perf_counter() - t) * 1000)
    secs = time.perf_counter() - t0
    mark("end")
    return {"samples_ms": samples, "ops": n, "errors": 0, "bytes": 0, "secs": secs}


async def exec_conc(sbx):
    conc, rounds = num("WB_CONC"), num("WB_ROUNDS")
    await sbx.commands.run("true")
    samples, errors = [], 0
    mark("start")
    t0 = time.perf_counter()
    for _ in range(rounds):
        t = time.perf_counter()
        got = await asyncio.gather(
            *(sbx.commands.run("true") for _ in range(conc)), return_exceptions=True
        )
        samples.append((time.perf_counter() - t) * 1000)
        errors += sum(1 for g in got if isinstance(g, BaseException))
    secs = time.perf_counter() - t0
    mark("end")
    return {"samples_ms": samples, "ops": conc * rounds, "errors": errors, "bytes": 0, "secs": secs}


async def files(sbx, count, size):
    data = os.urandom(size)
    path = "/home/user/wb-py.bin"
    samples = []
    mark("start")
    t0 = time.perf_counter()
    for _ in range(count):
        t = time.perf_counter()
        await sbx.files.write(path, data)
        back = await sbx.files.read(path, format="bytes")
        if len(back) != size:
            raise RuntimeError(f"read back {len(back)} of {size} bytes")
        samples.append((time.perf_counter() - t) * 1000)
    secs = time.perf_counter() - t0
    mark("end")
    return {"samples_ms": samples, "ops": count, "errors": 0, "bytes": 2 * size * count, "secs": secs}


async def flood(sbx):
    size = num("WB_FLOOD_BYTES")
    mark("start")
    t0 = time.perf_counter()
    r = await sbx.commands.run(f"head -c {size} /dev/zero", timeout=0, request_timeout=0)
    secs = time.perf_counter() - t0
    mark("end")
    if len(r.stdout) != size:
        raise RuntimeError(f"flood: {len(r.stdout)} of {size} bytes")
    return {"samples_ms": [secs * 1000], "ops": 1, "errors": 0, "bytes": size, "secs": secs}


async def main():
    sbx = await AsyncSandbox.create("base", timeout=3600)
    figure = os.environ.get("WB_FIGURE", "")
    if figure == "exec_seq":
        out = await exec_seq(sbx)
    elif figure.startswith("exec_c"):
        out = await exec_conc(sbx)
    elif figure == "files_small":
        out = await files(sbx, num("WB_SMALL_N"), num("WB_SMALL_BYTES"))
    elif figure == "files_large":
        out = await files(sbx, 1, num("WB_LARGE_BYTES"))
    elif figure == "flood":
        out = await flood(sbx)
    else:
        raise RuntimeError(f"unknown figure {figure}")
    await sbx.kill()
    return out


if __name__ == "__main__":
    try:
        result = asyncio.run(main())
    except Exception as e:  # reported in the table, not a crash
        result = {"error": f"{type(e).__name__}: {e}"[:300]}
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
