"""Smoke test of the official Python SDK (PyPI `e2b`) against the E2B emulator.

Run by tests/tests/official_sdk.rs with E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set and
PYTHONPATH pointing at the installed SDK. Exits 0 and prints "SMOKE OK" when every check holds.
"""

import re
import time

from e2b import CommandExitException, Sandbox


TICKER = (
    "nohup bash -c 'while true; do date +%s%N > /home/user/tick.tmp; mv /home/user/tick.tmp /home/user/tick; sleep 0.1; done'"
    " >/dev/null 2>&1 &"
)


def ticking(sbx: Sandbox) -> bool:
    a = sbx.files.read("/home/user/tick")
    time.sleep(0.6)
    return a != sbx.files.read("/home/user/tick")


def main() -> None:
    sbx = Sandbox.create("base", timeout=120)
    assert re.fullmatch(r"i[a-z0-9]{20}", sbx.sandbox_id), sbx.sandbox_id

    ok = sbx.commands.run("echo hello; echo oops 1>&2")
    assert ok.exit_code == 0, ok
    assert ok.stdout == "hello\n", ok.stdout
    assert ok.stderr == "oops\n", ok.stderr

    try:
        sbx.commands.run("echo bad; exit 3")
    except CommandExitException as e:
        assert e.exit_code == 3, e.exit_code
        assert e.stdout == "bad\n", e.stdout
    else:
        raise AssertionError("expected CommandExitException")

    info = sbx.files.write("/home/user/smoke/hello.txt", "hi there")
    assert info.path == "/home/user/smoke/hello.txt", info
    assert info.name == "hello.txt", info
    assert sbx.files.read("/home/user/smoke/hello.txt") == "hi there"
    entries = sbx.files.list("/home/user/smoke")
    assert [e.name for e in entries] == ["hello.txt"], entries
    assert entries[0].path == "/home/user/smoke/hello.txt", entries

    assert sbx.is_running()
    listed = Sandbox.list().next_items()
    assert any(s.sandbox_id == sbx.sandbox_id for s in listed), listed

    # lifecycle: timeout, info, pause (memory), connect (restore), pause + reboot
    sbx.set_timeout(90)
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id, info
    assert info.state == "running", info.state
    sbx.commands.run(TICKER)
    time.sleep(0.3)
    assert ticking(sbx), "ticker runs"
    assert sbx.pause() is True
    assert sbx.pause() is False, "second pause: 409 -> False"
    assert sbx.get_info().state == "paused"
    restored = Sandbox.connect(sbx.sandbox_id, timeout=60)
    assert restored.sandbox_id == sbx.sandbox_id
    assert ticking(restored), "memory resume keeps processes"
    assert restored.pause() is True
    rebooted = Sandbox.connect(sbx.sandbox_id, on_resume="reboot")
    assert not ticking(rebooted), "reboot ends processes"
    assert rebooted.files.read("/home/user/smoke/hello.txt") == "hi there"

    assert sbx.kill() is True
    assert Sandbox.kill(sbx.sandbox_id) is False
    print("SMOKE OK")


if __name__ == "__main__":
    main()
