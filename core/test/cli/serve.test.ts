import { spawn, spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const root = fileURLToPath(new URL('../../../', import.meta.url))
const cli = join(root, 'core/src/cli/main.ts')

interface Run {
  code: number | null
  stdout: string
  stderr: string
}

/** Run `loom serve` as `npm start` does, until it prints its address (then `onListening`) or exits. */
function serve(args: string[], onListening?: (url: string) => Promise<void>): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', cli, 'serve', ...args], {
      cwd: root,
      env: { ...process.env, PORT: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    let handled = false
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString()
      const ready = /"model ready"/.test(stdout) && /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)
      if (ready && !handled && onListening) {
        handled = true
        onListening(ready[1]!).then(
          () => child.kill('SIGTERM'),
          (err: unknown) => {
            child.kill('SIGKILL')
            reject(err)
          },
        )
      }
    })
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
    child.on('exit', (code) => resolve({ code, stdout, stderr }))
  })
}

t.test('loom serve with the default config answers /generate, then drains on SIGTERM', async (t) => {
  const run = await serve(['--config', 'config/default.yaml', '--host', '127.0.0.1', '--port', '0'], async (url) => {
    const health = await fetch(`${url}/health`)
    t.equal(health.status, 200)
    const res = await fetch(`${url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ inputs: 'To be or not', parameters: { max_new_tokens: 5, details: true } }),
    })
    t.equal(res.status, 200)
    const body = (await res.json()) as { generated_text: string; details: { generated_tokens: number } }
    t.equal(body.details.generated_tokens, 5)
    t.type(body.generated_text, 'string')
    const adapter = await fetch(`${url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ inputs: 'To be or not', parameters: { max_new_tokens: 5, adapter_id: 'kjv' } }),
    })
    t.equal(adapter.status, 200, 'the default config serves its local adapters')
    // The README's OpenAI SDK example, run as a user would, must print what the README shows.
    const example = spawnSync(process.execPath, [join(root, 'tools/demo-voices.mjs')], {
      env: { ...process.env, LOOM_URL: url },
      encoding: 'utf8',
    })
    t.equal(example.status, 0, example.stderr)
    const readme = readFileSync(join(root, 'README.md'), 'utf8')
    t.ok(
      readme.includes(
        `which prints (greedy decoding, so every run gives the same text):\n\n\`\`\`\n${example.stdout}\`\`\``,
      ),
      'the README shows exactly what the example prints',
    )
  })
  t.equal(run.code, 0, 'exits 0 after SIGTERM')
  t.equal(run.stderr, '')
})

t.test('a bad configuration stops the server before it listens, with one clear line', async (t) => {
  const dir = t.testdir()
  const file = join(dir, 'bad.yaml')
  await writeFile(
    file,
    'model:\n  id: x\n  path: .\nlimits:\n  max_batch_sise: 4\nplugins:\n  - use: "@loom/source-local"\n    options: { roots: ["."] }\n',
  )
  const run = await serve(['--config', file, '--port', '0'])
  t.equal(run.code, 1)
  t.match(
    run.stderr,
    /^\[config_invalid\] .*bad\.yaml: `limits\.max_batch_sise` is not a known key \(did you mean `max_batch_size`\?\); found 4\n$/,
  )
  t.notMatch(run.stdout, /listening/)
})

t.test('unknown flags print the usage and exit 1', async (t) => {
  const run = await serve(['--prot', '3000'])
  t.equal(run.code, 1)
  t.match(run.stderr, /Unknown option '--prot'/)
  t.match(run.stderr, /Usage: loom serve/)
})
