"""The official Python SDK (PyPI `e2b`) on the emulator's sandbox boundary (issue 12
causes 4 and 5): a writable root for root, passwordless sudo for `user`, a boot id and
uptime of the sandbox's own that a reboot (`on_resume="reboot"`) renews while a memory
resume keeps them, and files that stay across both.

Run by tests/tests/sdk_isolation.rs with E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set and
PYTHONPATH pointing at the installed SDK. Prints "SMOKE OK" when every check holds.
"""

import time

from e2b import Sandbox

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def uptime(sbx: Sandbox) -> float:
    return float(sbx.commands.run("cut -d' ' -f1 /proc/uptime").stdout)


def main() -> None:
    with open(BOOT_ID) as f:
        host_boot_id = f.read()
    before = time.monotonic()
    sbx = Sandbox.create("base", timeout=120)

    # cause 5: as root, writes anywhere succeed and stay in this sandbox
    sbx.files.write("/0/x", "root layer", user="root")
    assert sbx.commands.run("cat /0/x", user="root").stdout == "root layer"
    assert sbx.commands.run("echo usr > /usr/local/sdk-x && cat /usr/local/sdk-x", user="root").stdout == "usr\n"
    assert sbx.commands.run("sudo -n whoami").stdout == "root\n", "passwordless sudo for user"
    other = Sandbox.create("base", timeout=60)
    assert not other.files.exists("/0/x"), "root writes leak into another sandbox"
    other.kill()

    # cause 4: the boot id and uptime are the sandbox's own
    first = sbx.files.read(BOOT_ID)
    assert first != host_boot_id, "the host's boot id"
    assert len(first.strip()) == 36, first
    assert uptime(sbx) <= time.monotonic() - before, "uptime did not start at the boot"

    assert sbx.pause() is True
    resumed = Sandbox.connect(sbx.sandbox_id, timeout=60)
    assert resumed.files.read(BOOT_ID) == first, "a memory resume is not a reboot"
    assert resumed.pause() is True
    before_reboot = time.monotonic()
    rebooted = Sandbox.connect(sbx.sandbox_id, on_resume="reboot")
    second = rebooted.files.read(BOOT_ID)
    assert second != first, "a reboot keeps the boot id"
    assert uptime(rebooted) <= time.monotonic() - before_reboot, "uptime did not restart"
    assert rebooted.files.read("/0/x", user="root") == "root layer", "a reboot lost the root layer"

    assert rebooted.kill() is True
    print("SMOKE OK")


if __name__ == "__main__":
    main()
