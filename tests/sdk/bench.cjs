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

// A command started in the background, then attached to by pid (as a restarted host
// would) and waited for; WB_ITER at most 20 timed runs after 3 untimed ones.
async function execBg(sbx) {
  const cmd = process.env.WB_BG_COMMAND
  const once = async () => {
    const h = await sbx.commands.run(cmd, { background: true })
    const c = await sbx.commands.connect(h.pid)
    const r = await c.wait()
    if (r.exitCode !== 0) throw new Error(`${cmd}: exit ${r.exitCode}`)
  }
  for (let i = 0; i < 3; i++) await once()
  const n = Math.min(num('WB_ITER'), 20)
  const samples = []
  await mark('start')
  const t0 = now()
  for (let i = 0; i < n; i++) {
    const t = now()
    await once()
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

// The latency mode: WB_WARM untimed runs of f(i), then n timed ones (i counts on).
async function timed(n, f) {
  const warm = num('WB_WARM')
  for (let i = 0; i < warm; i++) await f(i)
  const samples = []
  await mark('start')
  const t0 = now()
  for (let i = warm; i < warm + n; i++) {
    const t = now()
    await f(i)
    samples.push(now() - t)
  }
  const secs = (now() - t0) / 1000
  await mark('end')
  return { samples_ms: samples, ops: n, errors: 0, bytes: 0, secs }
}

function checkLen(what, got, want) {
  if (got !== want) throw new Error(`${what}: ${got} bytes, not ${want}`)
}

// One latency figure: an operation (op_*) or a transfer (bw_*) on the files WB_SETUP
// prepared in WB_DIR (world-bench's plan.rs says which).
async function latency(sbx, figure) {
  await sbx.commands.run(process.env.WB_SETUP)
  const dir = process.env.WB_DIR
  const n = num('WB_OP_ITER')
  const size = figure.endsWith('4k') ? 4096 : 1 << 20
  if (figure === 'op_exec') return timed(n, () => sbx.commands.run('true'))
  if (figure.startsWith('op_read')) {
    return timed(n, async () => {
      const b = await sbx.files.read(`${dir}/r.bin`, { format: 'bytes' })
      checkLen(figure, b.length, size)
    })
  }
  if (figure.startsWith('op_write')) {
    const data = crypto.randomBytes(size)
    return timed(n, () => sbx.files.write(`${dir}/w.bin`, data))
  }
  if (figure === 'op_stat') return timed(n, () => sbx.files.getInfo(`${dir}/r.bin`))
  if (figure === 'op_list') {
    return timed(n, async () => checkLen('list', (await sbx.files.list(`${dir}/list`)).length, 100))
  }
  if (figure === 'op_mkdir') return timed(n, (i) => sbx.files.makeDir(`${dir}/m${i}`))
  if (figure === 'op_remove') return timed(n, (i) => sbx.files.remove(`${dir}/rm/${i}`))
  if (figure === 'op_rename') {
    return timed(n, (i) =>
      i % 2 === 0 ? sbx.files.rename(`${dir}/a`, `${dir}/b`) : sbx.files.rename(`${dir}/b`, `${dir}/a`)
    )
  }
  if (figure === 'op_create') {
    const made = []
    const out = await timed(num('WB_CREATE_N'), async () => {
      const s = await Sandbox.create('base', { timeoutMs: 600_000 })
      made.push(s)
      await s.commands.run('true')
    })
    for (const s of made) await s.kill()
    return out
  }
  if (figure === 'op_connect') {
    return timed(num('WB_CREATE_N'), async () => {
      const s = await Sandbox.connect(sbx.sandboxId)
      await s.commands.run('true')
    })
  }
  const big = num('WB_LARGE_BYTES')
  const transfer = async (f) => {
    await mark('start')
    const t0 = now()
    await f()
    const secs = (now() - t0) / 1000
    await mark('end')
    return { samples_ms: [secs * 1000], ops: 1, errors: 0, bytes: big, secs }
  }
  if (figure === 'bw_up') {
    const data = crypto.randomBytes(big)
    return transfer(() => sbx.files.write(`${dir}/big.bin`, data))
  }
  if (figure === 'bw_down') {
    return transfer(async () => {
      const b = await sbx.files.read(`${dir}/big.bin`, { format: 'bytes' })
      checkLen('download', b.length, big)
    })
  }
  throw new Error(`unknown figure ${figure}`)
}

async function main() {
  const sbx = await Sandbox.create('base', { timeoutMs: 3_600_000 })
  const figure = process.env.WB_FIGURE || ''
  let out
  if (figure.startsWith('tree_')) out = await require('./bench_tree.cjs').run(sbx, figure, mark)
  else if (figure.startsWith('op_') || figure.startsWith('bw_')) out = await latency(sbx, figure)
  else if (figure === 'exec_seq') out = await execSeq(sbx)
  else if (figure.startsWith('exec_c')) out = await execConc(sbx)
  else if (figure === 'files_small') out = await files(sbx, num('WB_SMALL_N'), num('WB_SMALL_BYTES'))
  else if (figure === 'files_large') out = await files(sbx, 1, num('WB_LARGE_BYTES'))
  else if (figure === 'flood') out = await flood(sbx)
  else if (figure === 'exec_bg') out = await execBg(sbx)
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
