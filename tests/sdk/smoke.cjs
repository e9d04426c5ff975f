// Smoke test of the official JS SDK (npm `e2b`) against the E2B emulator.
// Run by tests/tests/official_sdk.rs with E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set and
// NODE_PATH pointing at the installed SDK. Exits 0 and prints "SMOKE OK" when every check holds.
const assert = require('node:assert/strict')
const { Sandbox, CommandExitError } = require('e2b')

const TICKER =
  "nohup bash -c 'while true; do date +%s%N > /home/user/tick.tmp; mv /home/user/tick.tmp /home/user/tick; sleep 0.1; done' >/dev/null 2>&1 &"
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function ticking(sbx) {
  const a = await sbx.files.read('/home/user/tick')
  await sleep(600)
  return a !== (await sbx.files.read('/home/user/tick'))
}

async function main() {
  const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
  assert.match(sbx.sandboxId, /^i[a-z0-9]{20}$/)

  const ok = await sbx.commands.run('echo hello; echo oops 1>&2')
  assert.equal(ok.exitCode, 0)
  assert.equal(ok.stdout, 'hello\n')
  assert.equal(ok.stderr, 'oops\n')

  let failure
  try {
    await sbx.commands.run('echo bad; exit 3')
  } catch (e) {
    failure = e
  }
  assert.ok(failure instanceof CommandExitError, `expected CommandExitError, got ${failure}`)
  assert.equal(failure.exitCode, 3)
  assert.equal(failure.stdout, 'bad\n')

  const info = await sbx.files.write('/home/user/smoke/hello.txt', 'hi there')
  assert.equal(info.path, '/home/user/smoke/hello.txt')
  assert.equal(info.name, 'hello.txt')
  assert.equal(await sbx.files.read('/home/user/smoke/hello.txt'), 'hi there')
  const entries = await sbx.files.list('/home/user/smoke')
  assert.deepEqual(entries.map((e) => e.name), ['hello.txt'])
  assert.equal(entries[0].type, 'file')
  assert.equal(entries[0].path, '/home/user/smoke/hello.txt')

  assert.equal(await sbx.isRunning(), true)
  const listed = await Sandbox.list().nextItems()
  assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId), 'listed')

  // lifecycle: timeout, info, pause (memory), connect (restore), pause + reboot
  await sbx.setTimeout(90_000)
  const sbxInfo = await sbx.getInfo()
  assert.equal(sbxInfo.sandboxId, sbx.sandboxId)
  assert.equal(sbxInfo.state, 'running')
  await sbx.commands.run(TICKER)
  await sleep(300)
  assert.equal(await ticking(sbx), true, 'ticker runs')
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.pause(), false, 'second pause: 409 → false')
  assert.equal((await sbx.getInfo()).state, 'paused')
  const restored = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal(restored.sandboxId, sbx.sandboxId)
  assert.equal(await ticking(restored), true, 'memory resume keeps processes')
  assert.equal(await restored.pause(), true)
  const rebooted = await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' })
  assert.equal(await ticking(rebooted), false, 'reboot ends processes')
  assert.equal(await rebooted.files.read('/home/user/smoke/hello.txt'), 'hi there')

  assert.equal(await sbx.kill(), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  console.log('SMOKE OK')
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
