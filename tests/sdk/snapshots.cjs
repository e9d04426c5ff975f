// Snapshots, fork and volumes through the official JS SDK (npm `e2b`) against the E2B
// emulator. Run by tests/tests/it/official_sdk_snapshots.rs with E2B_API_URL,
// E2B_SANDBOX_URL, E2B_API_KEY and E2B_VOLUME_API_URL set and NODE_PATH pointing at the
// installed SDK. Prints "JS SNAPSHOTS OK" when every check holds.
const assert = require('node:assert/strict')
const { Sandbox, Volume } = require('e2b')

async function main() {
  const src = await Sandbox.create('base', { timeoutMs: 120_000 })
  await src.files.write('/home/user/state.txt', 'before')

  const snap = await src.createSnapshot({ name: 'js-checkpoint' })
  assert.equal(snap.snapshotId, 'local/js-checkpoint:default')
  assert.deepEqual(snap.names, ['local/js-checkpoint'])
  await src.files.write('/home/user/state.txt', 'after')

  const listed = await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems()
  assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId])

  const restored = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
  assert.equal(await restored.files.read('/home/user/state.txt'), 'before')

  const forks = await src.fork({ count: 2, timeoutMs: 60_000 })
  assert.equal(forks.length, 2)
  for (const f of forks) {
    assert.ok(f instanceof Sandbox, String(f))
    assert.equal(await f.files.read('/home/user/state.txt'), 'after')
  }
  await forks[0].files.write('/home/user/state.txt', 'fork 0')
  assert.equal(await forks[1].files.read('/home/user/state.txt'), 'after')
  assert.equal(await forks[0].files.read('/home/user/state.txt'), 'fork 0')

  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
  assert.equal(await restored.files.read('/home/user/state.txt'), 'before')

  const vol = await Volume.create('js-vol')
  await vol.writeFile('/seed.txt', 'seeded')
  const a = await Sandbox.create('base', { timeoutMs: 60_000, volumeMounts: { '/mnt/v': vol } })
  const b = await Sandbox.create('base', { timeoutMs: 60_000, volumeMounts: { '/data/v': 'js-vol' } })
  assert.equal(await a.files.read('/mnt/v/seed.txt'), 'seeded')
  await a.files.write('/mnt/v/from-a.txt', 'from a')
  assert.equal(await b.files.read('/data/v/from-a.txt'), 'from a')
  const info = await a.getInfo()
  assert.deepEqual(info.volumeMounts, [{ name: 'js-vol', path: '/mnt/v' }])
  const names = (await vol.list('/')).map((e) => e.name).sort()
  assert.deepEqual(names, ['from-a.txt', 'seed.txt'])
  assert.equal(await vol.readFile('/from-a.txt'), 'from a')

  for (const s of [src, restored, ...forks, a, b]) await s.kill()
  assert.equal(await Volume.destroy(vol.volumeId), true)
  console.log('JS SNAPSHOTS OK')
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
