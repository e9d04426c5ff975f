# A scripted JSON-RPC server over stdio for agent-tools' LSP bridge tests (stdlib only).
# Each request method exercises one behaviour; see `lsp_bridge_scripted_server`.
import json
import os
import sys
import threading
import time

inp = sys.stdin.buffer
out = sys.stdout.buffer
lock = threading.Lock()
waiting = {}  # id of a request we sent the client -> id of the request to answer
cancelled = []


def write_raw(*parts):
    """Writes parts with pauses between them, so the client sees separate reads."""
    with lock:
        for p in parts:
            out.write(p)
            out.flush()
            time.sleep(0.02)


def frame(obj, content_type=False):
    body = json.dumps(obj).encode()
    head = b""
    if content_type:
        head += b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def send(obj):
    write_raw(frame(obj))


def read():
    headers = {}
    while True:
        line = inp.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            break
        k, v = line.split(b":", 1)
        headers[k.strip().lower()] = v.strip()
    return json.loads(inp.read(int(headers[b"content-length"])))


def answer_later(req):
    time.sleep(req["params"]["delay"])
    send({"jsonrpc": "2.0", "id": req["id"], "result": req["params"]})


while True:
    m = read()
    if m is None:
        break
    method = m.get("method")
    rid = m.get("id")
    if method is None:  # the client's answer to one of our requests
        orig = waiting.pop(rid)
        send({"jsonrpc": "2.0", "id": orig,
              "result": {"result": m.get("result"), "error": m.get("error")}})
    elif method == "echo":
        threading.Thread(target=answer_later, args=(m,)).start()
    elif method == "fail":
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32001, "message": "nope", "data": {"why": "asked"}}})
    elif method == "ask":
        sid = "srv-%s" % rid
        waiting[sid] = rid
        send({"jsonrpc": "2.0", "id": sid, "method": m["params"]["method"],
              "params": m["params"]["params"]})
    elif method == "burst":
        a = frame({"jsonrpc": "2.0", "method": "note", "params": {"n": 1}})
        b = frame({"jsonrpc": "2.0", "method": "note", "params": {"n": 2}})
        c = frame({"jsonrpc": "2.0", "id": rid, "result": "burst-done"}, content_type=True)
        # header of a split, a's rest + b whole + most of c merged, c's last bytes
        write_raw(a[:9], a[9:] + b + c[:-3], c[-3:])
    elif method == "big":
        big = frame({"jsonrpc": "2.0", "id": rid, "result": "x" * m["params"]["size"]})
        write_raw(big[:100], big[100:] + frame({"jsonrpc": "2.0", "method": "after-big"}))
    elif method == "never":
        pass
    elif method == "stall":  # a notification: stop reading stdin for a while
        time.sleep(m["params"]["secs"])
    elif method == "$/cancelRequest":
        cancelled.append(m["params"]["id"])
    elif method == "cancelled":
        send({"jsonrpc": "2.0", "id": rid, "result": cancelled})
    elif method == "crash":
        os._exit(3)
    elif method == "shutdown":
        send({"jsonrpc": "2.0", "id": rid, "result": None})
    elif method == "exit":
        sys.exit(0)
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32601, "message": "unknown method " + method}})
