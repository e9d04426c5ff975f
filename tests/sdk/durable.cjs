// Durable commands and the official JS SDK (npm `e2b`), on one sandbox of the E2B
// emulator. Run by tests/tests/it/durable_sdk.rs (E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY set, NODE_PATH at the installed SDK) in two phases:
//
//   durable.cjs start SANDBOX_ID TAG
//     starts `read x; echo sdk-got-$x` with envd tag TAG and a stdin pipe through the
//     SDK's own process client (the pinned `commands.run` sends no tag), leaves it
//     running, prints "SDK STARTED <pid>".
//   durable.cjs check SANDBOX_ID ID
//     finds the durable command ID (started by exec-world) in `commands.list()` by its
//     tag, connects to it by pid, sends it a line on stdin, and checks its answer on the
//     connected stream and its exit code; prints "SDK DURABLE OK".
const assert = require('node:assert/strict')
const { Sandbox } = require('e2b')

async function main() {
  const [phase, sandboxId, tag] = process.argv.slice(2)
  const sbx = await Sandbox.connect(sandboxId)
  if (phase === 'start') {
    const events = sbx.commands.rpc.start({
      process: { cmd: '/bin/bash', args: ['-l', '-c', 'read x; echo sdk-got-$x'] },
      tag,
      stdin: true,
    })
    const it = events[Symbol.asyncIterator]()
    const first = await it.next()
    assert.equal(first.value.event.event.case, 'start', JSON.stringify(first.value))
    const pid = first.value.event.event.value.pid
    // Leave the stream: envd keeps the process running.
    const listed = await sbx.commands.list()
    assert.ok(listed.some((p) => p.pid === pid && p.tag === tag), JSON.stringify(listed))
    console.log(`SDK STARTED ${pid}`)
    process.exit(0)
  }
  if (phase === 'check') {
    const listed = await sbx.commands.list()
    const mine = listed.find((p) => p.tag === tag)
    assert.ok(mine, `durable command ${tag} in commands.list(): ${JSON.stringify(listed)}`)
    let out = ''
    const h = await sbx.commands.connect(mine.pid, { onStdout: (d) => { out += d } })
    await sbx.commands.sendStdin(mine.pid, 'ping\n')
    const r = await h.wait()
    assert.equal(r.exitCode, 0)
    assert.ok(out.includes('got-ping'), JSON.stringify(out))
    console.log('SDK DURABLE OK')
    return
  }
  throw new Error(`unknown phase ${phase}`)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
