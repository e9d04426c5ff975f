// world-bench driver for the official JS SDK (npm `e2b`): runs one figure against the
// emulator and prints `RESULT {json}`. Run by world-bench (tests/src/bin/world_bench/sdk.rs)
// with E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, NODE_PATH and the WB_* parameters set.
// The timed part sits between `MARK start` and `MARK end`; after each mark it waits for a
// line on stdin (world-bench reads the emulator's counters meanwhile).
const readline = require('node:readline')
const crypto = require('node:crypto')
const { Sandbox } = require('e2b')

const num = (k) => Number(process.env[k] || '0')
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]()
async function mark(what) {
  process.stdout.write(`MARK ${what}\n`)
  await lines.next()
}
const now = () => performance.now()

async function execSeq(sbx) {
  for (let i = 0; i < 3; i++) await sbx.commands.run('true')
  const n = num('WB_ITER')
  const samples = []
  await mark('start')
  const t0 = now()
  for (let i = 0; i < n; i++) {
    const t = now()
    await sbx.commands.run('true')
    samples.push(now() - t)
  }
  const secs = (now() - t0) / 1000
  await mark('end')
  return { samples_ms: samples, ops: n, errors: 0, bytes: 0, secs }
}

async function execConc(sbx) {
  const conc = num('WB_CONC')
  const rounds = num('WB_ROUNDS')
  await sbx.commands.run('true')
  const samples = []
  let errors = 0
  await mark('start')
  const t0 = now()
  for (let r = 0; r < rounds; r++) {
    const t = now()
    const all = await Promise.allSettled(
      Array.from({ length: conc }, () => sbx.commands.run('true'))
    )
    samples.push(now() - t)
    errors += all.filter((x) => x.status !== 'fulfilled').length
  }
  const secs = (now() - t0) / 1000
  await mark('end')
  return { samples_ms: samples, ops: conc * rounds, errors, bytes: 0, secs }
}

async function files(sbx, count, size) {
  const data = crypto.randomBytes(size)
  const path = '/home/user/wb-js.bin'
  const samples = []
  await mark('start')
  const t0 = now()
  for (let i = 0; i < count; i++) {
    const t = now()
    await sbx.files.write(path, data)
    const back = await sbx.files.read(path, { format: 'bytes' })
    if (back.length !== size) throw new Error(`read back ${back.length} of ${size} bytes`)
    samples.push(now() - t)
  }
  const secs = (now() - t0) / 1000
  await mark('end')
  return { samples_ms: samples, ops: count, errors: 0, bytes: 2 * size * count, secs }
}

async function flood(sbx) {
  const size = num('WB_FLOOD_BYTES')
  await mark('start')
  const t0 = now()
  const r = await sbx.commands.run(`head -c ${size} /dev/zero`, { timeoutMs: 0, requestTimeoutMs: 0 })
  const secs = (now() - t0) / 1000
  await mark('end')
  if (r.stdout.length !== size) throw new Error(`flood: ${r.stdout.length} of ${size} bytes`)
  return { samples_ms: [secs * 1000], ops: 1, errors: 0, bytes: size, secs }
}

async function main() {
  const sbx = await Sandbox.create('base', { timeoutMs: 3_600_000 })
  const figure = process.env.WB_FIGURE || ''
  let out
  if (figure === 'exec_seq') out = await execSeq(sbx)
  else if (figure.startsWith('exec_c')) out = await execConc(sbx)
  else if (figure === 'files_small') out = await files(sbx, num('WB_SMALL_N'), num('WB_SMALL_BYTES'))
  else if (figure === 'files_large') out = await files(sbx, 1, num('WB_LARGE_BYTES'))
  else if (figure === 'flood') out = await flood(sbx)
  else throw new Error(`unknown figure ${figure}`)
  await sbx.kill()
  process.stdout.write(`RESULT ${JSON.stringify(out)}\n`)
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stdout.write(`RESULT ${JSON.stringify({ error: String(e && e.message ? e.message : e).slice(0, 300) })}\n`)
    process.exit(0)
  }
)
