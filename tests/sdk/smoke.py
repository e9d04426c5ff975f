"""Smoke test of the official Python SDK (PyPI `e2b`) against the E2B emulator.

Run by tests/tests/official_sdk.rs with E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set and
PYTHONPATH pointing at the installed SDK. Exits 0 and prints "SMOKE OK" when every check holds.
"""

import re

from e2b import CommandExitException, Sandbox


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

    assert sbx.kill() is True
    assert Sandbox.kill(sbx.sandbox_id) is False
    print("SMOKE OK")


if __name__ == "__main__":
    main()
