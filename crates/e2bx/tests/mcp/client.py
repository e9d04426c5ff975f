"""Drives `e2bx mcp` with the official Python MCP client (PyPI `mcp`).

usage: client.py SCENARIO TRANSPORT...
  SCENARIO   world        tools, bash, files, search, terminal, timeout, cancellation,
                          and a second session that sees none of the first's state
             world-local  the same, for --local (sessions share the directory's files)
             conv-write   write a file in the named conversation
             conv-read    read it back (a reconnect)
             conv-missing the file is not there (another conversation)
  TRANSPORT  stdio CMD ARGS...   (the client starts the server)
             http URL
Prints "MCP PY OK" when every check holds; any failed check raises.
"""

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

TOOLS = {"bash", "read_file", "write_file", "edit_file", "list_dir", "search",
         "terminal_start", "terminal_write", "terminal_read", "terminal_close"}


def connect(transport):
    if transport[0] == "stdio":
        params = StdioServerParameters(command=transport[1], args=transport[2:])
        return stdio_client(params)
    return streamable_http_client(transport[1])


def text(result):
    return "".join(c.text for c in result.content if c.type == "text")


async def call(s, name, args, error=False):
    r = await s.call_tool(name, args)
    assert bool(r.is_error) == error, f"{name} {args}: isError={r.is_error}: {text(r)}"
    return text(r)


async def bash(s, command, **kw):
    return json.loads(await call(s, "bash", {"command": command, **kw}))


async def alive(s, pidfile):
    out = await bash(s, f'kill -0 "$(cat {pidfile})" 2>/dev/null && echo alive || echo gone')
    return out["stdout"].strip() == "alive"


async def world(s, shared_files):
    tools = {t.name for t in (await s.list_tools()).tools}
    assert TOOLS <= tools, tools
    refused = None
    try:
        await s.call_tool("no_such_tool", {})
    except Exception as e:  # the SDK raises the JSON-RPC error
        refused = str(e)
    assert refused is not None and "unknown tool no_such_tool" in refused, refused

    out = await bash(s, "echo hi; echo oops >&2; exit 3")
    assert out["exit_code"] == 3 and out["stdout"] == "hi\n" and out["stderr"] == "oops\n", out
    out = await bash(s, 'echo "$GREETING"', env={"GREETING": "hello there"})
    assert out["stdout"] == "hello there\n", out
    # The server's own credentials and environment never reach the world.
    out = await bash(s, 'printf %s "${E2B_API_KEY-}${E2BX_TEST_SECRET-}"')
    assert out["stdout"] == "", out

    await call(s, "write_file", {"path": "py/notes.txt", "content": "alpha\nbeta\nbeta2\n"})
    got = await call(s, "read_file", {"path": "py/notes.txt", "offset": 2, "limit": 1})
    assert "     2\tbeta\n" in got and "alpha" not in got, got
    err = await call(s, "edit_file", {"path": "py/notes.txt", "old_string": "beta",
                                      "new_string": "x"}, error=True)
    assert "2 times" in err, err
    await call(s, "edit_file", {"path": "py/notes.txt", "old_string": "beta2", "new_string": "gamma"})
    got = await call(s, "read_file", {"path": "py/notes.txt"})
    assert "     3\tgamma\n" in got, got
    err = await call(s, "edit_file", {"path": "py/notes.txt", "old_string": "zeta",
                                      "new_string": "x"}, error=True)
    assert "not found" in err, err
    err = await call(s, "read_file", {"path": "py/missing.txt"}, error=True)
    assert "missing.txt" in err, err
    listing = await call(s, "list_dir", {"path": "py"})
    assert "notes.txt" in listing, listing
    found = await call(s, "search", {"pattern": "gam+a", "path": "py"})
    assert "notes.txt:3:gamma" in found, found
    assert await call(s, "search", {"pattern": "zeta", "path": "py"}) == "no matches"
    err = await call(s, "search", {"pattern": "x", "path": "py/nope"}, error=True)
    # --local: the error names the path as the agent sees it, never the real root.
    assert ("search /py/nope: grep: /py/nope:" if shared_files else "py/nope") in err, err
    out = await bash(s, "cat py/notes.txt")
    assert out["stdout"] == "alpha\nbeta\ngamma\n", out

    t = json.loads(await call(s, "terminal_start", {}))
    await call(s, "terminal_write", {"id": t["id"], "input": "echo $((6*7))x", "enter": True})
    got = json.loads(await call(s, "terminal_read", {"id": t["id"], "wait_for": "42x",
                                                     "timeout_ms": 10000}))
    assert got["matched"], got
    await call(s, "terminal_close", {"id": t["id"]})
    await call(s, "terminal_read", {"id": t["id"]}, error=True)
    t2 = json.loads(await call(s, "terminal_start", {}))

    with anyio.fail_after(30):
        out = await bash(s, "echo started; sleep 30", timeout=1)
    assert out["timed_out"] and out["stdout"] == "started\n", out

    # Cancellation: the client abandons the call (notifications/cancelled, or on the
    # HTTP wire the request's stream closing); the whole tree must end.
    await bash(s, "rm -f py/cancel.pid")
    async with anyio.create_task_group() as tg:
        async def long_call():
            await s.call_tool("bash", {"command": "sleep 3021 & echo $! > py/cancel.pid; wait"})
        scope = anyio.CancelScope()

        async def run():
            with scope:
                await long_call()
        tg.start_soon(run)
        with anyio.fail_after(30):
            while not (await bash(s, "test -s py/cancel.pid && echo y"))["stdout"]:
                await anyio.sleep(0.1)
        assert await alive(s, "py/cancel.pid")
        scope.cancel()
    with anyio.fail_after(30):
        while await alive(s, "py/cancel.pid"):
            await anyio.sleep(0.2)
    return t2["id"]


async def other_session(s, shared_files, terminal_id):
    out = await bash(s, "test -e py/notes.txt && echo seen || echo unseen")
    assert out["stdout"] == ("seen\n" if shared_files else "unseen\n"), out
    err = await call(s, "terminal_read", {"id": terminal_id}, error=True)
    assert "no such terminal" in err, err


async def main():
    scenario, transport = sys.argv[1], sys.argv[2:]
    async with connect(transport) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        if scenario in ("world", "world-local"):
            tid = await world(s, scenario == "world-local")
            async with connect(transport) as (r2, w2), ClientSession(r2, w2) as s2:
                await s2.initialize()
                await other_session(s2, scenario == "world-local", tid)
        elif scenario == "conv-write":
            await call(s, "write_file", {"path": "conv.txt", "content": "kept"})
        elif scenario == "conv-missing":
            await call(s, "read_file", {"path": "conv.txt"}, error=True)
        elif scenario == "conv-read":
            got = await call(s, "read_file", {"path": "conv.txt"})
            assert "     1\tkept" in got, got
        else:
            raise SystemExit(f"unknown scenario {scenario}")
    print("MCP PY OK")


anyio.run(main)
