"""Protocol fidelity of the E2B emulator, seen through the official Python SDK (PyPI `e2b`).

Run by tests/tests/official_sdk.rs with E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set and
PYTHONPATH pointing at the installed SDK. Every check runs even when an earlier one failed;
each prints "ok <name>" or "FAIL <name>: ...", and the script prints "FIDELITY OK" and exits
0 only when all hold.
"""

import datetime
import json
import os
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid

from e2b import Sandbox, SandboxNotRunningException


def http(url, method="GET", data=None, headers=None):
    """(status, body bytes, headers) of one plain HTTP request, errors included."""
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, res.read(), res.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def envd_headers(sbx):
    return {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"}


def paused_is_not_running():
    """Cause 1: the proxy answers 502 for a paused sandbox, so is_running() is False."""
    sbx = Sandbox.create("base", timeout=60)
    assert sbx.is_running()
    assert sbx.pause() is True
    assert sbx.is_running() is False, "paused sandbox: is_running() is False"
    status, body, _ = http(os.environ["E2B_SANDBOX_URL"] + "/health", headers=envd_headers(sbx))
    assert status == 502, status
    assert json.loads(body) == {
        "sandboxId": sbx.sandbox_id,
        "message": "The sandbox was not found",
        "code": 502,
    }, body
    back = Sandbox.connect(sbx.sandbox_id)
    assert back.is_running(), "connect resumes it"
    back.kill()
    assert back.is_running() is False, "killed sandbox: is_running() is False"


def metrics_by_range(sbx):
    """Cause 3: metrics are a series filtered by start/end."""
    now = datetime.datetime.now(datetime.timezone.utc)
    hour_ago = now - datetime.timedelta(hours=1)
    before = sbx.get_metrics(start=hour_ago, end=now - datetime.timedelta(minutes=30))
    assert before == [], before
    since = sbx.get_metrics()
    assert len(since) >= 1, since
    for m in since:
        assert hour_ago <= m.timestamp <= now + datetime.timedelta(seconds=5), m.timestamp


def signed_urls(sbx):
    """Cause 7: signed URLs (no routing header) reach the sandbox that signed them."""
    sbx.files.write("/home/user/signed.txt", "signed content")
    url = sbx.download_url("/home/user/signed.txt")
    assert "signature=" in url, url
    status, body, _ = http(url)
    assert (status, body) == (200, b"signed content"), (status, body)

    boundary = uuid.uuid4().hex
    form = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="file"; filename="up.txt"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
        "sent by url\r\n"
        f"--{boundary}--\r\n"
    ).encode()
    status, body, _ = http(
        sbx.upload_url("/home/user/up.txt"),
        method="POST",
        data=form,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert status == 200, (status, body)
    assert sbx.files.read("/home/user/up.txt") == "sent by url"

    soon = sbx.download_url("/home/user/signed.txt", use_signature_expiration=1)
    time.sleep(2.2)
    status, body, _ = http(soon)
    assert status == 401, (status, body)
    assert json.loads(body)["message"] == "signature is already expired", body


def kill_cuts_streams(sbx):
    """Cause 2: a killed sandbox's running command fails with SandboxNotRunningException
    (the stream is cut, /health then says 502), not with a clean end event."""
    handle = sbx.commands.run("sleep 60", background=True)
    outcome = {}

    def wait():
        try:
            outcome["result"] = handle.wait()
        except Exception as e:  # noqa: BLE001 - the test inspects whatever was raised
            outcome["error"] = e

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    time.sleep(0.3)
    assert Sandbox.kill(sbx.sandbox_id) is True
    waiter.join(20)
    assert not waiter.is_alive(), "wait() returns after the kill"
    err = outcome.get("error")
    assert err is not None, f"wait() must fail after a kill, got {outcome.get('result')}"
    assert isinstance(err, SandboxNotRunningException), repr(err)
    assert "killed or reached its end of life" in str(err), str(err)


def main() -> None:
    failed = []

    def check(name, f, *args):
        try:
            f(*args)
            print(f"ok {name}", flush=True)
        except Exception:  # noqa: BLE001 - report every failing check
            failed.append(name)
            print(f"FAIL {name}: {traceback.format_exc()}", flush=True)

    check("paused", paused_is_not_running)
    sbx = Sandbox.create("base", timeout=120)
    check("metrics", metrics_by_range, sbx)
    check("signed urls", signed_urls, sbx)
    check("kill", kill_cuts_streams, sbx)
    if failed:
        print("FAILED: " + ", ".join(failed))
        raise SystemExit(1)
    print("FIDELITY OK")


if __name__ == "__main__":
    main()
