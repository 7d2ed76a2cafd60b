/**
 * Writes each set of demo Medusa heads' draft vocabulary (`medusa_draft_vocab.json`, read by
 * core/src/adapters/read-medusa.ts): the tokens the model, with the adapter the heads serve,
 * actually generates — FR-Spec's frequency-ranked shortlist, counted on the served model's own
 * output (the same self-distillation the heads were trained on), not on the training text.
 *
 * For each heads folder, a real server (native CPU backend, speculation off) continues prompts
 * cut from the three corpora in `data/` (evenly spaced lines; none are the serving bench's), 96
 * tokens each, greedy and sampled (temperature 1, fixed seeds):
 * - `medusa/` (the default heads, also used by adapters without their own): the base model on
 *   prompts of all three texts, and each adapter on its own text's prompts;
 * - `adapters/<name>/`: that adapter on its own text's and Shakespeare's prompts.
 * The even-numbered prompts build the counts, the odd ones measure coverage. The list is the most
 * frequent quarter of the vocabulary (FR-Spec's ratio for Llama 3: 32k of 128k). On the demo
 * model that holds 99.9% of held-out greedy tokens and 75-80% of sampled ones (128 tokens
 * already hold 97-99.8% of greedy output, 51-54% of sampled: temperature 1 reaches far into this
 * small model's tail, where a head's best guesses rarely are anyway).
 *
 *   node --import tsx tools/demo-model/draft-vocab.ts [model folder, default models/demo]
 */
import 'reflect-metadata'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { Writable } from 'node:stream'
import { stringify } from 'yaml'
import { loadConfig } from '../../core/src/config/index.ts'
import { LoomServer } from '../../core/src/server/loom-server.ts'

const ROOT = resolve(import.meta.dirname, '../..')
const NEW_TOKENS = 96
const PROMPTS_PER_TEXT = 48
const BATCH = 32
const TEXTS = { shakespeare: 'tinyshakespeare.txt', kjv: 'kjv.txt', devil: 'devils-dictionary.txt' } as const
type Text = keyof typeof TEXTS

/** Each text's prompts, cut once (several jobs share a text). */
const promptsByText = new Map<Text, Promise<string[]>>()

/**
 * PROMPTS_PER_TEXT prompts from evenly spaced lines of `text` with at least four words: their
 * first 4–7 words.
 */
function prompts(text: Text): Promise<string[]> {
  let cut = promptsByText.get(text)
  if (cut === undefined) promptsByText.set(text, (cut = cutPrompts(text, PROMPTS_PER_TEXT)))
  return cut
}

async function cutPrompts(text: Text, n: number): Promise<string[]> {
  const lines = (await readFile(join(ROOT, 'data', TEXTS[text]), 'utf8'))
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.split(/\s+/).length >= 4)
  return Array.from({ length: n }, (_, i) => {
    const words = lines[Math.floor(((i + 0.5) * lines.length) / n)]!.split(/\s+/)
    return words.slice(0, 4 + (i % 4)).join(' ')
  })
}

interface Job {
  readonly adapter: string | null
  readonly text: Text
}

/** Token ids generated: the even prompts' (greedy and sampled), and the odd prompts' greedy and sampled ones. */
interface Generated {
  readonly build: number[]
  readonly greedy: number[]
  readonly sampled: number[]
}

/** The token ids generated for each prompt of each job, greedy and sampled. */
async function generate(server: LoomServer, jobs: readonly Job[]): Promise<Generated> {
  const out: Generated = { build: [], greedy: [], sampled: [] }
  const requests: { into: number[]; payload: object }[] = []
  for (const job of jobs) {
    const list = await prompts(job.text)
    for (const [i, inputs] of list.entries()) {
      for (const sampled of [false, true]) {
        const parameters = {
          max_new_tokens: NEW_TOKENS,
          details: true,
          ...(sampled ? { do_sample: true, temperature: 1, seed: 1000 + i } : {}),
          ...(job.adapter === null ? {} : { adapter_id: job.adapter }),
        }
        requests.push({
          into: i % 2 === 0 ? out.build : sampled ? out.sampled : out.greedy,
          payload: { inputs, parameters },
        })
      }
    }
  }
  // A full batch at a time (the server refuses more than max_concurrent_requests).
  for (let i = 0; i < requests.length; i += BATCH) {
    await Promise.all(
      requests.slice(i, i + BATCH).map(async ({ into, payload }) => {
        const res = await server.app.inject({ method: 'POST', url: '/generate', payload })
        if (res.statusCode !== 200) throw new Error(`${res.statusCode} ${res.body}`)
        const body = JSON.parse(res.body) as { details: { tokens: { id: number }[] } }
        into.push(...body.details.tokens.map((t) => t.id))
      }),
    )
  }
  return out
}

/** The `size` most frequent ids of `ids`, most frequent first (ties: lower id first). */
function shortlist(ids: readonly number[], size: number): number[] {
  const counts = new Map<number, number>()
  for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1)
  return [...counts.keys()].sort((a, b) => counts.get(b)! - counts.get(a)! || a - b).slice(0, size)
}

async function main(): Promise<void> {
  const model = resolve(process.argv[2] ?? join(ROOT, 'models/demo'))
  const { vocab_size: vocab } = JSON.parse(await readFile(join(model, 'config.json'), 'utf8')) as { vocab_size: number }
  const size = Math.ceil(vocab / 4)
  const dir = await mkdtemp(join(tmpdir(), 'loom-draft-vocab-'))
  const doc = {
    server: { host: '127.0.0.1', port: 0, log_level: 'warn' },
    model: { id: 'loom-demo', path: model },
    limits: { max_total_tokens: 512, max_batch_size: 32 },
    adapters: { default_source: 'local', cache_dir: join(dir, 'cache') },
    speculation: { max_batch_size: 0 },
    plugins: [
      { use: '@loom/backend-cuda-native', options: { device: 'cpu' } },
      { use: '@loom/source-local', options: { roots: [join(model, 'adapters')] } },
    ],
  }
  await writeFile(join(dir, 'loom.yaml'), stringify(doc))
  const quiet = new Writable({ write: (_chunk, _encoding, done) => done() })
  const server = await LoomServer.create(await loadConfig(join(dir, 'loom.yaml')), { logDestination: quiet })
  await server.start()
  try {
    const heads: { folder: string; jobs: Job[] }[] = [
      {
        folder: 'medusa',
        jobs: [
          { adapter: null, text: 'shakespeare' },
          { adapter: null, text: 'kjv' },
          { adapter: null, text: 'devil' },
          { adapter: 'kjv', text: 'kjv' },
          { adapter: 'devil', text: 'devil' },
        ],
      },
      {
        folder: 'adapters/kjv',
        jobs: [
          { adapter: 'kjv', text: 'kjv' },
          { adapter: 'kjv', text: 'shakespeare' },
        ],
      },
      {
        folder: 'adapters/devil',
        jobs: [
          { adapter: 'devil', text: 'devil' },
          { adapter: 'devil', text: 'shakespeare' },
        ],
      },
    ]
    for (const { folder, jobs } of heads) {
      const { build, greedy, sampled } = await generate(server, jobs)
      const ids = shortlist(build, size)
      const kept = new Set(ids)
      const coverage = (check: number[]) => (check.filter((id) => kept.has(id)).length / check.length).toFixed(3)
      const file = join(model, folder, 'medusa_draft_vocab.json')
      const note =
        `the ${ids.length} tokens most frequent in ${build.length} the served model generated ` +
        `(tools/demo-model/draft-vocab.ts); they hold ${coverage(greedy)} of ${greedy.length} held-out greedy ` +
        `tokens and ${coverage(sampled)} of ${sampled.length} sampled ones`
      await writeFile(file, JSON.stringify({ description: note, token_ids: ids }) + '\n')
      console.log(`${folder}: ${note}`)
    }
  } finally {
    await server.close()
    await rm(dir, { recursive: true, force: true })
  }
}

await main()
