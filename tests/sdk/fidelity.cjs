// Protocol fidelity of the E2B emulator, seen through the official JS SDK (npm `e2b`): the
// places where the SDK's own tests look and where the emulator once differed from E2B.
// Run by tests/tests/official_sdk.rs with E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set and
// NODE_PATH pointing at the installed SDK. Each check prints "ok <name>"; the script exits 0
// and prints "FIDELITY OK" when every check holds.
const assert = require('node:assert/strict')
const http = require('node:http')
const { Sandbox, TimeoutError, SandboxError } = require('e2b')

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
// A timer that does not keep the process alive (for races against a hang).
const deadline = (ms) => new Promise((r) => setTimeout(r, ms).unref())
const t0 = Date.now()
const ok = (name) => console.log(`ok ${name} (${Date.now() - t0} ms since start)`)

// envd's own routes, called with the routing headers the SDK sends.
function envdHeaders(sbx, extra = {}) {
  return { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', ...extra }
}

async function pausedIsNotRunning() {
  // Cause 1: the proxy answers 502 for a paused sandbox, so isRunning() is false.
  const sbx = await Sandbox.create('base', { timeoutMs: 60_000 })
  assert.equal(await sbx.isRunning(), true)
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.isRunning(), false, 'paused sandbox: isRunning() is false')
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/health`, { headers: envdHeaders(sbx) })
  assert.equal(res.status, 502)
  assert.deepEqual(await res.json(), {
    sandboxId: sbx.sandboxId,
    message: 'The sandbox was not found',
    code: 502,
  })
  const back = await Sandbox.connect(sbx.sandboxId)
  assert.equal(await back.isRunning(), true, 'connect resumes it')
  await back.kill()
  assert.equal(await back.isRunning(), false, 'killed sandbox: isRunning() is false')
  ok('paused and missing sandboxes answer 502')
}

async function killCutsStreams(sbx) {
  // Cause 2: a killed sandbox's running command ends with the SDK's TimeoutError (the
  // stream is cut, /health then says 502), not with a clean end event.
  const handle = await sbx.commands.run('sleep 60', { background: true })
  const waited = handle.wait().then(
    (r) => ({ result: r }),
    (e) => ({ error: e })
  )
  await sleep(200)
  assert.equal(await Sandbox.kill(sbx.sandboxId), true)
  const out = await Promise.race([waited, deadline(20_000).then(() => ({ hung: true }))])
  assert.ok(!out.hung, 'wait() returns after the kill')
  assert.ok(out.error, `wait() must fail after a kill, got ${JSON.stringify(out.result)}`)
  assert.ok(out.error instanceof TimeoutError, `expected TimeoutError, got ${out.error}`)
  assert.match(out.error.message, /killed or reached its end of life/)
  ok('kill cuts running commands')
}

async function metricsByRange(sbx) {
  // Cause 3: metrics are a series filtered by start/end.
  const hourAgo = new Date(Date.now() - 3600_000)
  const before = await sbx.getMetrics({ start: hourAgo, end: new Date(Date.now() - 1800_000) })
  assert.deepEqual(before, [], 'no sample before the sandbox existed')
  const now = await sbx.getMetrics()
  assert.ok(now.length >= 1, 'a sample since the start')
  for (const m of now) {
    assert.ok(m.timestamp.getTime() >= hourAgo.getTime(), `sample at ${m.timestamp}`)
    assert.ok(m.timestamp.getTime() <= Date.now() + 1000, `sample at ${m.timestamp}`)
    assert.ok(m.memTotal > 0 && m.cpuCount > 0)
  }
  ok('metrics filtered by range')
}

async function refusedUploadAnswers(sbx) {
  // Cause 6: an upload refused before its body is read still gets its HTTP answer.
  // The parent of the target is a regular file: envd refuses before reading the body.
  await sbx.files.write('/home/user/plain-file', 'not a directory')
  const body = 'x'.repeat(200 << 10)
  let err
  try {
    await sbx.files.write('/home/user/plain-file/file.bin', body)
  } catch (e) {
    err = e
  }
  assert.ok(err, 'writing below a regular file must fail')
  assert.ok(err instanceof SandboxError, `expected an SDK error, got ${err}`)
  assert.doesNotMatch(String(err.message), /fetch failed|EPIPE|ECONNRESET|socket/i)
  assert.match(String(err.message), /path is a file/)
  ok('refused upload answers with its status')
}

async function signedUrls(sbx) {
  // Cause 7: signed URLs (no routing header) reach the sandbox that signed them.
  await sbx.files.write('/home/user/signed.txt', 'signed content')
  const down = await sbx.downloadUrl('/home/user/signed.txt')
  assert.ok(down.includes('signature='), down)
  let res = await fetch(down)
  assert.equal(res.status, 200, await res.clone().text())
  assert.equal(await res.text(), 'signed content')

  const up = await sbx.uploadUrl('/home/user/uploaded.txt')
  const form = new FormData()
  form.append('file', new Blob(['sent by url']), 'uploaded.txt')
  res = await fetch(up, { method: 'POST', body: form })
  assert.equal(res.status, 200, await res.clone().text())
  assert.equal(await sbx.files.read('/home/user/uploaded.txt'), 'sent by url')

  const bad = down.replace(/signature=[^&]+/, 'signature=v1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA')
  res = await fetch(bad)
  assert.equal(res.status, 401)
  assert.equal((await res.json()).message, 'invalid signature')

  const soon = await sbx.downloadUrl('/home/user/signed.txt', { useSignatureExpiration: 1 })
  await sleep(2200)
  res = await fetch(soon)
  assert.equal(res.status, 401)
  assert.equal((await res.json()).message, 'signature is already expired')
  ok('signed URLs routed by signature')
}

async function envdDetails(sbx) {
  // Cause 9: processes start through /usr/bin/nice; SendSignal needs a selector; /health
  // carries an empty Content-Type.
  const rpc = sbx.commands.rpc
  const run = async (cmd) => {
    let stderr = ''
    let end
    for await (const ev of rpc.start({ process: { cmd, args: [], envs: {} } })) {
      const e = ev.event && ev.event.event
      if (!e) continue
      if (e.case === 'data' && e.value.output.case === 'stderr') {
        stderr += Buffer.from(e.value.output.value).toString()
      }
      if (e.case === 'end') end = e.value
    }
    return { stderr, end }
  }
  const missing = await run('no-such-program-e2b')
  assert.equal(missing.stderr, "/usr/bin/nice: 'no-such-program-e2b': No such file or directory\n")
  assert.equal(missing.end.exitCode, 127)
  const empty = await run('')
  assert.equal(empty.end.exitCode, 127)

  let signalErr
  try {
    await rpc.sendSignal({ signal: 9 })
  } catch (e) {
    signalErr = e
  }
  assert.ok(signalErr, 'SendSignal without a selector fails')
  assert.equal(signalErr.code, 12, `expected unimplemented (12), got ${signalErr.code}: ${signalErr.message}`)
  assert.match(signalErr.message, /invalid input type \*process\.ProcessSelector/)

  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/health`, { headers: envdHeaders(sbx) })
  assert.equal(res.status, 204)
  assert.equal(res.headers.get('content-type'), '', 'empty Content-Type header')
  ok('envd details: nice, SendSignal, /health')
}

// Every check runs even when an earlier one failed, so one run names every difference.
// One plain HTTP/1.1 request to the emulator with a chosen Host header (fetch keeps its own).
function rawRequest(host, path, headers = {}) {
  const target = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: target.hostname, port: target.port, path, agent: false, headers: { host, ...headers } },
      (res) => {
        let body = ''
        res.on('data', (c) => (body += c))
        res.on('end', () => resolve({ status: res.statusCode, body }))
      }
    )
    req.on('error', reject)
    req.end()
  })
}

// An upgraded connection through the proxy: sends `text`, resolves with what came back.
function upgradeEcho(host, text) {
  const target = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: target.hostname,
      port: target.port,
      path: '/ws',
      agent: false,
      headers: { host, Connection: 'Upgrade', Upgrade: 'websocket' },
    })
    req.on('upgrade', (res, socket) => {
      let got = ''
      socket.on('data', (c) => {
        got += c
        if (got.length >= text.length) {
          socket.destroy()
          resolve({ status: res.statusCode, got })
        }
      })
      socket.write(text)
    })
    req.on('response', (res) => {
      let body = ''
      res.on('data', (c) => (body += c))
      res.on('end', () => reject(new Error(`no upgrade: HTTP ${res.statusCode} ${body}`)))
    })
    req.on('error', reject)
    req.end()
  })
}

// A server inside the sandbox that accepts any upgrade and echoes bytes.
const ECHO_SERVER = `
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4)
while True:
    c, _ = s.accept()
    buf = b""
    while b"\\r\\n\\r\\n" not in buf:
        d = c.recv(4096)
        if not d: break
        buf += d
    if b"\\r\\n\\r\\n" not in buf:
        c.close(); continue
    c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\\r\\n")
    while True:
        d = c.recv(4096)
        if not d: break
        c.sendall(d)
    c.close()
`

// A TCP port no socket uses right now, as the sandbox sees it (the kernel's choice for a
// bind to port 0): a fixed or random port may be taken by another test's connection.
async function freePort(sbx) {
  const probe = await sbx.commands.run(
    `python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'`
  )
  return Number(probe.stdout.trim())
}

async function sandboxPorts(sbx) {
  // Cause 8: <port>-<id>.<domain> (and E2b-Sandbox-Port) reach the sandbox's listeners.
  const port = await freePort(sbx)
  await sbx.files.write('/home/user/site/index.html', '<h1>served from the sandbox</h1>')
  await sbx.commands.run(`python3 -m http.server ${port} --bind 127.0.0.1`, {
    background: true,
    cwd: '/home/user/site',
  })
  const host = sbx.getHost(port)
  assert.ok(host.startsWith(`${port}-${sbx.sandboxId}.`), host)
  let page
  for (let i = 0; i < 100; i++) {
    page = await rawRequest(host, '/index.html')
    if (page.status === 200) break
    await sleep(100)
  }
  assert.equal(page.status, 200, page.body)
  assert.equal(page.body, '<h1>served from the sandbox</h1>')
  const byHeader = await fetch(`${process.env.E2B_SANDBOX_URL}/index.html`, {
    headers: envdHeaders(sbx, { 'E2b-Sandbox-Port': String(port) }),
  })
  assert.equal(byHeader.status, 200)
  assert.equal(await byHeader.text(), '<h1>served from the sandbox</h1>')

  const closed = await rawRequest(sbx.getHost(port + 1), '/')
  assert.equal(closed.status, 502)
  assert.deepEqual(JSON.parse(closed.body), {
    sandboxId: sbx.sandboxId,
    message: 'The sandbox is running but port is not open',
    port: port + 1,
    code: 502,
  })

  const wsPort = await freePort(sbx)
  await sbx.files.write('/home/user/echo.py', ECHO_SERVER)
  await sbx.commands.run(`python3 /home/user/echo.py ${wsPort}`, { background: true })
  let echoed
  for (let i = 0; i < 100; i++) {
    echoed = await upgradeEcho(sbx.getHost(wsPort), 'ping through the proxy').catch((e) => e)
    if (!(echoed instanceof Error)) break
    await sleep(100)
  }
  assert.ok(!(echoed instanceof Error), String(echoed))
  assert.equal(echoed.status, 101)
  assert.equal(echoed.got, 'ping through the proxy')
  ok('sandbox ports: http.server, E2b-Sandbox-Port, closed port, upgrade')
}

async function main() {
  const failed = []
  const check = async (name, f) => {
    try {
      await f()
    } catch (e) {
      failed.push(name)
      console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`)
    }
  }
  await check('paused', pausedIsNotRunning)
  const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
  await check('envd details', () => envdDetails(sbx))
  await check('metrics', () => metricsByRange(sbx))
  await check('refused upload', () => refusedUploadAnswers(sbx))
  await check('signed urls', () => signedUrls(sbx))
  await check('sandbox ports', () => sandboxPorts(sbx))
  await check('kill', () => killCutsStreams(sbx))
  if (failed.length > 0) {
    console.log(`FAILED: ${failed.join(', ')}`)
    process.exit(1)
  }
  console.log('FIDELITY OK')
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
