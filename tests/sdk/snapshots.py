"""Snapshots, fork and volumes through the official Python SDK (PyPI `e2b`) against the
E2B emulator.

Run by tests/tests/it/official_sdk_snapshots.rs with E2B_API_URL, E2B_SANDBOX_URL,
E2B_API_KEY and E2B_VOLUME_API_URL set and PYTHONPATH pointing at the installed SDK.
`snapshots.py phase1` / `phase2` are the two halves of the volume-across-restart flow
(the test restarts the emulator on the same root in between); without an argument the
snapshot and fork flows run. Each prints its marker when every check holds.
"""

import sys

from e2b import NotFoundException, Sandbox, SandboxException, Volume


def snapshot_and_fork() -> None:
    src = Sandbox.create("base", timeout=120)
    src.files.write("/home/user/state.txt", "before")
    src.commands.run("sudo sh -c 'echo root-owned > /opt/outside-home.txt'")

    snap = src.create_snapshot()
    assert snap.snapshot_id.endswith(":default"), snap.snapshot_id
    assert snap.names == [], snap.names
    named = src.create_snapshot(name="checkpoint")
    assert named.snapshot_id == "local/checkpoint:default", named.snapshot_id
    assert named.names == ["local/checkpoint"], named.names

    # The source keeps running and changes after the snapshot stay out of it.
    src.files.write("/home/user/state.txt", "after")
    assert src.is_running()

    listed = Sandbox.list_snapshots(sandbox_id=src.sandbox_id).next_items()
    ids = sorted(s.snapshot_id for s in listed)
    assert ids == sorted([snap.snapshot_id, named.snapshot_id]), ids
    page = Sandbox.list_snapshots(limit=1)
    first = page.next_items()
    assert len(first) == 1 and page.has_next, (first, page.has_next)
    second = page.next_items()
    assert len(second) == 1 and second[0].snapshot_id != first[0].snapshot_id, second

    restored = Sandbox.create(snap.snapshot_id, timeout=60)
    assert restored.files.read("/home/user/state.txt") == "before"
    out = restored.commands.run("cat /opt/outside-home.txt; whoami")
    assert out.stdout == "root-owned\nuser\n", out.stdout
    by_name = Sandbox.create("checkpoint", timeout=60)
    assert by_name.files.read("/home/user/state.txt") == "before"

    # Deleting a snapshot in use: the sandboxes made from it keep their files.
    assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    assert Sandbox.delete_snapshot(snap.snapshot_id) is False
    assert restored.files.read("/home/user/state.txt") == "before"
    try:
        Sandbox.create(snap.snapshot_id, timeout=30)
    except SandboxException as e:
        assert "not found" in str(e), e
    else:
        raise AssertionError("a deleted snapshot still creates sandboxes")

    # Fork two, diverge: each sees only its own change.
    a, b = src.fork(count=2, timeout=60)
    assert isinstance(a, Sandbox) and isinstance(b, Sandbox), (a, b)
    assert a.sandbox_id != b.sandbox_id != src.sandbox_id
    for f in (a, b):
        assert f.files.read("/home/user/state.txt") == "after"
    a.files.write("/home/user/state.txt", "fork a")
    b.commands.run("echo 'fork b' > /home/user/state.txt")
    assert a.files.read("/home/user/state.txt") == "fork a"
    assert b.files.read("/home/user/state.txt") == "fork b\n"
    assert src.files.read("/home/user/state.txt") == "after"

    src.pause()
    try:
        src.fork()
    except SandboxException as e:
        assert "paused" in str(e), e
    else:
        raise AssertionError("a paused sandbox was forked")

    for s in (restored, by_name, a, b, src):
        s.kill()
    assert Sandbox.delete_snapshot(named.snapshot_id) is True
    print("SNAPSHOTS OK")


def volume_phase1() -> None:
    vol = Volume.create("cache")
    assert vol.name == "cache"
    assert any(v.volume_id == vol.volume_id for v in Volume.list())
    vol.write_file("/seed.txt", b"from the content api")
    try:
        Volume.create("cache")
    except Exception as e:
        assert "already exists" in str(e), e
    else:
        raise AssertionError("a volume name was reused")

    one = Sandbox.create("base", timeout=60, volume_mounts={"/mnt/cache": vol})
    two = Sandbox.create("base", timeout=60, volume_mounts={"/data/shared": "cache"})
    assert one.files.read("/mnt/cache/seed.txt") == "from the content api"
    one.files.write("/mnt/cache/from-one.txt", "written by one")
    # Shared while both run: two sees one's write at once.
    assert two.files.read("/data/shared/from-one.txt") == "written by one"
    two.commands.run("mkdir -p /data/shared/dir && echo deep > /data/shared/dir/f")
    names = sorted(e.name for e in vol.list("/"))
    assert names == ["dir", "from-one.txt", "seed.txt"], names
    assert vol.read_file("/dir/f") == "deep\n"
    one.kill()
    two.kill()
    print("VOLUME PHASE1 OK " + vol.volume_id)


def volume_phase2() -> None:
    vols = [v for v in Volume.list() if v.name == "cache"]
    assert len(vols) == 1, vols
    vol = Volume.connect(vols[0].volume_id)
    nxt = Sandbox.create("base", timeout=60, volume_mounts={"/mnt/cache": vol})
    assert nxt.files.read("/mnt/cache/from-one.txt") == "written by one"
    assert nxt.files.read("/mnt/cache/dir/f") == "deep\n"
    nxt.kill()
    try:
        Sandbox.create("base", timeout=30, volume_mounts={"/mnt/x": "no-such-volume"})
    except SandboxException as e:
        assert "volume 'no-such-volume' not found" in str(e), e
    else:
        raise AssertionError("a missing volume was mounted")
    assert Volume.destroy(vol.volume_id) is True
    assert Volume.destroy(vol.volume_id) is False
    try:
        Volume.get_info(vol.volume_id)
    except NotFoundException:
        pass
    except Exception as e:
        assert "not found" in str(e).lower(), e
    else:
        raise AssertionError("a destroyed volume is still there")
    print("VOLUME PHASE2 OK")


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else ""
    {"phase1": volume_phase1, "phase2": volume_phase2}.get(arg, snapshot_and_fork)()
