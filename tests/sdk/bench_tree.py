"""world-bench's tree figures for the official Python SDK (imported by bench.py).

tree_up writes every file of WB_TREE_SRC with the SDK's multi-file `files.write_files`;
tree_down lists the sandbox's tree (`files.list` with a depth) and reads each file (8 at
a time) into WB_TREE_OUT, the SDK having no tree download. The timed part includes
reading (up) and writing (down) the local files, as a harness would.
"""

import asyncio
import os
import time

TREE = "/home/user/wbtree"
ARCHIVE = "/home/user/wb-tree.tar"
DIGEST = (
    f"cd {TREE} && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum"
    " | sha256sum | cut -d' ' -f1"
)
LONG = 3600


def walk(root):
    out = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        for f in files:
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(f if rel == "." else f"{rel}/{f}")
    return out


async def timed_once(mark, f):
    mark("start")
    t0 = time.perf_counter()
    await f()
    secs = time.perf_counter() - t0
    mark("end")
    return {
        "samples_ms": [secs * 1000],
        "ops": 1,
        "errors": 0,
        "bytes": int(os.environ["WB_TREE_BYTES"]),
        "secs": secs,
    }


async def run(sbx, figure, mark):
    from e2b import FileType

    if figure == "tree_up":
        src = os.environ["WB_TREE_SRC"]

        async def up():
            entries = []
            for rel in walk(src):
                with open(os.path.join(src, rel), "rb") as f:
                    entries.append({"path": f"{TREE}/{rel}", "data": f.read()})
            await sbx.files.write_files(entries, request_timeout=LONG)

        out = await timed_once(mark, up)
        got = (await sbx.commands.run(DIGEST, timeout=LONG)).stdout.strip()
        if got != os.environ["WB_TREE_DIGEST"]:
            raise RuntimeError(f"the uploaded tree differs (digest {got})")
        return out
    if figure == "tree_down":
        with open(os.environ["WB_TREE_TAR"], "rb") as f:
            await sbx.files.write(ARCHIVE, f.read(), request_timeout=LONG)
        await sbx.commands.run(
            f"mkdir -p {TREE} && tar -x -f {ARCHIVE} -C {TREE} && rm -f {ARCHIVE}",
            timeout=LONG,
        )
        dest = os.environ["WB_TREE_OUT"]

        async def down():
            entries = await sbx.files.list(TREE, depth=64, request_timeout=LONG)
            files = [e for e in entries if e.type == FileType.FILE]
            todo = iter(files)

            async def worker():
                for e in todo:
                    data = await sbx.files.read(e.path, format="bytes", request_timeout=LONG)
                    to = os.path.join(dest, e.path[len(TREE) + 1 :])
                    os.makedirs(os.path.dirname(to), exist_ok=True)
                    with open(to, "wb") as f:
                        f.write(data)

            await asyncio.gather(*(worker() for _ in range(8)))

        return await timed_once(mark, down)
    raise RuntimeError(f"unknown tree figure {figure}")
