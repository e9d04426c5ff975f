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


async def exec_bg(sbx):
    """A command started in the background, then attached to by pid (as a restarted host
    would) and waited for; WB_ITER at most 20 timed runs after 3 untimed ones."""
    cmd = os.environ["WB_BG_COMMAND"]

    async def once():
        h = await sbx.commands.run(cmd, background=True)
        c = await sbx.commands.connect(h.pid)
        r = await c.wait()
        if r.exit_code != 0:
            raise RuntimeError(f"{cmd}: exit {r.exit_code}")

    for _ in range(3):
        await once()
    n = min(num("WB_ITER"), 20)
    samples = []
    mark("start")
    t0 = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        await once()
        samples.append((time.perf_counter() - t) * 1000)
    secs = time.perf_counter() - t0
    mark("end")
    return {"samples_ms": samples, "ops": n, "errors": 0, "bytes": 0, "secs": secs}


async def timed(n, f):
    """The latency mode: WB_WARM untimed runs of f(i), then n timed ones (i counts on)."""
    warm = num("WB_WARM")
    for i in range(warm):
        await f(i)
    samples = []
    mark("start")
    t0 = time.perf_counter()
    for i in range(warm, warm + n):
        t = time.perf_counter()
        await f(i)
        samples.append((time.perf_counter() - t) * 1000)
    secs = time.perf_counter() - t0
    mark("end")
    return {"samples_ms": samples, "ops": n, "errors": 0, "bytes": 0, "secs": secs}


def check_len(what, got, want):
    if got != want:
        raise RuntimeError(f"{what}: {got} bytes, not {want}")


async def latency(sbx, figure):
    """One latency figure: an operation (op_*) or a transfer (bw_*) on the files WB_SETUP
    prepared in WB_DIR (world-bench's plan.rs says which)."""
    await sbx.commands.run(os.environ["WB_SETUP"])
    d = os.environ["WB_DIR"]
    n = num("WB_OP_ITER")
    size = 4096 if figure.endswith("4k") else 1 << 20

    async def run_true(_):
        await sbx.commands.run("true")

    async def read(_):
        b = await sbx.files.read(f"{d}/r.bin", format="bytes")
        check_len(figure, len(b), size)

    async def stat(_):
        await sbx.files.get_info(f"{d}/r.bin")

    async def listing(_):
        check_len("list", len(await sbx.files.list(f"{d}/list")), 100)

    async def mkdir(i):
        await sbx.files.make_dir(f"{d}/m{i}")

    async def remove(i):
        await sbx.files.remove(f"{d}/rm/{i}")

    async def rename(i):
        a, b = f"{d}/a", f"{d}/b"
        await sbx.files.rename(*((a, b) if i % 2 == 0 else (b, a)))

    simple = {
        "op_exec": run_true,
        "op_read_4k": read,
        "op_read_1m": read,
        "op_stat": stat,
        "op_list": listing,
        "op_mkdir": mkdir,
        "op_remove": remove,
        "op_rename": rename,
    }
    if figure in simple:
        return await timed(n, simple[figure])
    if figure.startswith("op_write"):
        data = os.urandom(size)

        async def write(_):
            await sbx.files.write(f"{d}/w.bin", data)

        return await timed(n, write)
    if figure == "op_create":
        made = []

        async def create(_):
            s = await AsyncSandbox.create("base", timeout=600)
            made.append(s)
            await s.commands.run("true")

        out = await timed(num("WB_CREATE_N"), create)
        for s in made:
            await s.kill()
        return out
    if figure == "op_connect":

        async def connect(_):
            s = await AsyncSandbox.connect(sbx.sandbox_id)
            await s.commands.run("true")

        return await timed(num("WB_CREATE_N"), connect)
    big = num("WB_LARGE_BYTES")
    if figure == "bw_up":
        data = os.urandom(big)

        async def transfer():
            await sbx.files.write(f"{d}/big.bin", data)

    elif figure == "bw_down":

        async def transfer():
            b = await sbx.files.read(f"{d}/big.bin", format="bytes")
            check_len("download", len(b), big)

    else:
        raise RuntimeError(f"unknown figure {figure}")
    mark("start")
    t0 = time.perf_counter()
    await transfer()
    secs = time.perf_counter() - t0
    mark("end")
    return {"samples_ms": [secs * 1000], "ops": 1, "errors": 0, "bytes": big, "secs": secs}


async def main():
    sbx = await AsyncSandbox.create("base", timeout=3600)
    figure = os.environ.get("WB_FIGURE", "")
    if figure.startswith("tree_"):
        import bench_tree

        out = await bench_tree.run(sbx, figure, mark)
    elif figure.startswith(("op_", "bw_")):
        out = await latency(sbx, figure)
    elif figure == "exec_seq":
        out = await exec_seq(sbx)
    elif figure.startswith("exec_c"):
        out = await exec_conc(sbx)
    elif figure == "files_small":
        out = await files(sbx, num("WB_SMALL_N"), num("WB_SMALL_BYTES"))
    elif figure == "files_large":
        out = await files(sbx, 1, num("WB_LARGE_BYTES"))
    elif figure == "flood":
        out = await flood(sbx)
    elif figure == "exec_bg":
        out = await exec_bg(sbx)
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
