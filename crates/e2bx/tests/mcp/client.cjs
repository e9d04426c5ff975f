// Drives `e2bx mcp` with the official TypeScript MCP client (npm @modelcontextprotocol/sdk).
//
// usage: node client.cjs SCENARIO TRANSPORT...   (see client.py: the same scenarios)
//   SCENARIO   world | world-local | conv-write | conv-read
//   TRANSPORT  stdio CMD ARGS...  |  http URL
// Prints "MCP JS OK" when every check holds; a failed check throws (exit 1).
// CommonJS so that NODE_PATH (the test's install cache) resolves the SDK.
const assert = require('node:assert/strict');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

const TOOLS = ['bash', 'read_file', 'write_file', 'edit_file', 'list_dir', 'search',
  'terminal_start', 'terminal_write', 'terminal_read', 'terminal_close'];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function connect(transport) {
  const client = new Client({ name: 'e2bx-test', version: '0' });
  const t = transport[0] === 'stdio'
    ? new StdioClientTransport({ command: transport[1], args: transport.slice(2), stderr: 'inherit' })
    : new StreamableHTTPClientTransport(new URL(transport[1]));
  await client.connect(t);
  return { client, t };
}

async function close({ client, t }) {
  if (t.terminateSession) await t.terminateSession();
  await client.close();
}

const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

async function call(c, name, args, { error = false, signal } = {}) {
  const r = await c.callTool({ name, arguments: args }, undefined, { signal, timeout: 60000 });
  assert.equal(Boolean(r.isError), error, `${name} ${JSON.stringify(args)}: ${text(r)}`);
  return text(r);
}

const bash = async (c, command, extra = {}) => JSON.parse(await call(c, 'bash', { command, ...extra }));
const alive = async (c, pidfile) =>
  (await bash(c, `kill -0 "$(cat ${pidfile})" 2>/dev/null && echo alive || echo gone`)).stdout.trim() === 'alive';

async function world(c) {
  const names = (await c.listTools()).tools.map((t) => t.name);
  for (const t of TOOLS) assert.ok(names.includes(t), `tool ${t} in ${names}`);
  const bashTool = (await c.listTools()).tools.find((t) => t.name === 'bash');
  assert.equal(bashTool.inputSchema.type, 'object');
  assert.ok(bashTool.inputSchema.required.includes('command'));

  let out = await bash(c, 'echo hi; echo oops >&2; exit 3');
  assert.deepEqual([out.exit_code, out.stdout, out.stderr], [3, 'hi\n', 'oops\n']);
  out = await bash(c, 'printf %s "$GREETING"', { env: { GREETING: 'hello there' } });
  assert.equal(out.stdout, 'hello there');
  // The server's own credentials and environment never reach the world.
  out = await bash(c, 'printf %s "${E2B_API_KEY-}${E2BX_TEST_SECRET-}"');
  assert.equal(out.stdout, '');

  await call(c, 'write_file', { path: 'js/notes.txt', content: 'alpha\nbeta\nbeta2\n' });
  let got = await call(c, 'read_file', { path: 'js/notes.txt', offset: 2, limit: 1 });
  assert.ok(got.includes('     2\tbeta\n') && !got.includes('alpha'), got);
  let err = await call(c, 'edit_file', { path: 'js/notes.txt', old_string: 'beta', new_string: 'x' }, { error: true });
  assert.ok(err.includes('2 times'), err);
  await call(c, 'edit_file', { path: 'js/notes.txt', old_string: 'beta2', new_string: 'gamma' });
  got = await call(c, 'read_file', { path: 'js/notes.txt' });
  assert.ok(got.includes('     3\tgamma\n'), got);
  err = await call(c, 'edit_file', { path: 'js/notes.txt', old_string: 'zeta', new_string: 'x' }, { error: true });
  assert.ok(err.includes('not found'), err);
  assert.ok((await call(c, 'list_dir', { path: 'js' })).includes('notes.txt'));
  const found = await call(c, 'search', { pattern: 'GAM+A', path: 'js', ignore_case: true });
  assert.ok(found.includes('notes.txt:3:gamma'), found);
  assert.equal(await call(c, 'search', { pattern: 'zeta', path: 'js' }), 'no matches');
  out = await bash(c, 'cat js/notes.txt');
  assert.equal(out.stdout, 'alpha\nbeta\ngamma\n');
  err = await call(c, 'bash', { command: 'true', colour: 1 }, { error: true });
  assert.ok(err.includes('colour'), err);

  const t = JSON.parse(await call(c, 'terminal_start', {}));
  await call(c, 'terminal_write', { id: t.id, input: 'echo $((6*7))x', enter: true });
  got = JSON.parse(await call(c, 'terminal_read', { id: t.id, wait_for: '42x', timeout_ms: 10000 }));
  assert.ok(got.matched, JSON.stringify(got));
  await call(c, 'terminal_close', { id: t.id });
  await call(c, 'terminal_read', { id: t.id }, { error: true });
  const t2 = JSON.parse(await call(c, 'terminal_start', {}));

  out = await bash(c, 'echo started; sleep 30', { timeout: 1 });
  assert.ok(out.timed_out && out.stdout === 'started\n', JSON.stringify(out));

  // Cancellation: AbortSignal -> notifications/cancelled; the whole tree must end.
  await bash(c, 'rm -f js/cancel.pid');
  const ac = new AbortController();
  const pending = call(c, 'bash', { command: 'sleep 3022 & echo $! > js/cancel.pid; wait' }, { signal: ac.signal })
    .then(() => 'finished', (e) => `aborted: ${e}`);
  for (let i = 0; !(await bash(c, 'test -s js/cancel.pid && echo y')).stdout; i++) {
    assert.ok(i < 300, 'the long command never started');
    await sleep(100);
  }
  assert.ok(await alive(c, 'js/cancel.pid'));
  ac.abort();
  assert.match(await pending, /^aborted/);
  for (let i = 0; await alive(c, 'js/cancel.pid'); i++) {
    assert.ok(i < 150, 'the cancelled command is still running');
    await sleep(200);
  }
  return t2.id;
}

async function otherSession(c, sharedFiles, terminalId) {
  const out = await bash(c, 'test -e js/notes.txt && echo seen || echo unseen');
  assert.equal(out.stdout, sharedFiles ? 'seen\n' : 'unseen\n');
  const err = await call(c, 'terminal_read', { id: terminalId }, { error: true });
  assert.ok(err.includes('no such terminal'), err);
}

async function main() {
  const [scenario, ...transport] = process.argv.slice(2);
  const a = await connect(transport);
  if (scenario === 'world' || scenario === 'world-local') {
    const tid = await world(a.client);
    const b = await connect(transport);
    await otherSession(b.client, scenario === 'world-local', tid);
    await close(b);
  } else if (scenario === 'conv-write') {
    await call(a.client, 'write_file', { path: 'conv.txt', content: 'kept' });
  } else if (scenario === 'conv-missing') {
    await call(a.client, 'read_file', { path: 'conv.txt' }, { error: true });
  } else if (scenario === 'conv-read') {
    assert.ok((await call(a.client, 'read_file', { path: 'conv.txt' })).includes('     1\tkept'));
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
  await close(a);
  console.log('MCP JS OK');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
