// world-bench's tree figures for the official JS SDK (required by bench.cjs): tree_up
// writes every file of WB_TREE_SRC with the SDK's multi-file `files.write`; tree_down
// lists the sandbox's tree (`files.list` with a depth) and reads each file (8 at a
// time) into WB_TREE_OUT, the SDK having no tree download. The timed part includes
// reading (up) and writing (down) the local files, as a harness would.
const fs = require('node:fs')
const path = require('node:path')

const TREE = '/home/user/wbtree'
const ARCHIVE = '/home/user/wb-tree.tar'
const DIGEST = `cd ${TREE} && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1`

function walk(root) {
  const out = []
  const stack = ['']
  while (stack.length) {
    const rel = stack.pop()
    for (const e of fs.readdirSync(path.join(root, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name
      if (e.isDirectory()) stack.push(r)
      else if (e.isFile()) out.push(r)
    }
  }
  return out
}

async function timedOnce(mark, f) {
  await mark('start')
  const t0 = performance.now()
  await f()
  const secs = (performance.now() - t0) / 1000
  await mark('end')
  return { samples_ms: [secs * 1000], ops: 1, errors: 0, bytes: Number(process.env.WB_TREE_BYTES), secs }
}

async function run(sbx, figure, mark) {
  const long = { requestTimeoutMs: 3_600_000, timeoutMs: 3_600_000 }
  if (figure === 'tree_up') {
    const src = process.env.WB_TREE_SRC
    const out = await timedOnce(mark, async () => {
      const entries = walk(src).map((rel) => ({ path: `${TREE}/${rel}`, data: fs.readFileSync(path.join(src, rel)) }))
      await sbx.files.write(entries, long)
    })
    const got = (await sbx.commands.run(DIGEST, long)).stdout.trim()
    if (got !== process.env.WB_TREE_DIGEST) throw new Error(`the uploaded tree differs (digest ${got})`)
    return out
  }
  if (figure === 'tree_down') {
    await sbx.files.write(ARCHIVE, fs.readFileSync(process.env.WB_TREE_TAR), long)
    await sbx.commands.run(`mkdir -p ${TREE} && tar -x -f ${ARCHIVE} -C ${TREE} && rm -f ${ARCHIVE}`, long)
    const dest = process.env.WB_TREE_OUT
    return timedOnce(mark, async () => {
      const files = (await sbx.files.list(TREE, { depth: 64, ...long })).filter((e) => e.type === 'file')
      let next = 0
      const worker = async () => {
        while (next < files.length) {
          const e = files[next++]
          const data = await sbx.files.read(e.path, { format: 'bytes', ...long })
          const to = path.join(dest, e.path.slice(TREE.length + 1))
          fs.mkdirSync(path.dirname(to), { recursive: true })
          fs.writeFileSync(to, data)
        }
      }
      await Promise.all(Array.from({ length: 8 }, worker))
    })
  }
  throw new Error(`unknown tree figure ${figure}`)
}

module.exports = { run }
