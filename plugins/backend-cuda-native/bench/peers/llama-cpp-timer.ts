/**
 * llama.cpp's side of the peer benchmark, through node-llama-cpp's `controlledEvaluate`, which
 * feeds given token ids (the same ids Loom gets) and samples the next token greedily
 * (temperature 0) where asked. Two contexts on one model, same threads (`min` = `ideal`):
 *
 * - one sequence (batch 1 decode, prefill, greedy probe), so its KV view holds one sequence;
 * - eight sequences (batch 8): each step queues one token on each of the 8 sequences in the same
 *   tick; node-llama-cpp dispatches a batch as soon as every sequence has queued, so the step is
 *   one `llama_decode` of 8 tokens (one per sequence) followed by 8 greedy samples.
 *
 * Each timed interval is from the call to the resolved result of every sequence in the step.
 */
import type { LlamaContext, LlamaContextSequence, LlamaModel } from './node-llama-cpp.ts'
import { benchToken } from './bench-tokens.ts'

const greedy = { generateNext: { token: true, options: { temperature: 0 } } } as const

async function evalAndSample(seq: LlamaContextSequence, tokens: readonly number[]): Promise<number> {
  const out = await seq.controlledEvaluate([...tokens.slice(0, -1), [tokens[tokens.length - 1]!, greedy]])
  const token = out[out.length - 1]?.next?.token
  if (token === undefined || token === null) throw new Error('llama.cpp returned no token')
  return token
}

export class LlamaCppPeer {
  private constructor(
    private readonly single: LlamaContext,
    private readonly batched: LlamaContext,
    private readonly singleSeq: LlamaContextSequence,
    private readonly batchedSeqs: LlamaContextSequence[],
  ) {}

  /**
   * @param contextTokens per-sequence context size (node-llama-cpp allocates it per sequence).
   * @param maxBatch sequences of the batched context.
   */
  static async open(
    model: LlamaModel,
    threads: number,
    contextTokens: number,
    maxBatch: number,
  ): Promise<LlamaCppPeer> {
    const options = { contextSize: contextTokens, batchSize: contextTokens, threads: { ideal: threads, min: threads } }
    const single = await model.createContext({ ...options, sequences: 1 })
    const batched = await model.createContext({ ...options, sequences: maxBatch })
    const seqs = Array.from({ length: maxBatch }, () => batched.getSequence())
    return new LlamaCppPeer(single, batched, single.getSequence(), seqs)
  }

  /** What the contexts were created with, for the report. */
  describe(): string {
    const c = this.single
    return (
      `context ${c.contextSize} tokens per sequence, batch ${c.batchSize}, ${c.idealThreads} threads, ` +
      `flash attention ${String(c.flashAttention)}`
    )
  }

  /** Step wall times (ms) of `timedSteps` decode steps at batch `batch`, after `warmupSteps`. */
  async decode(o: { batch: number; promptTokens: number; warmupSteps: number; timedSteps: number }): Promise<number[]> {
    const seqs = o.batch === 1 ? [this.singleSeq] : this.batchedSeqs.slice(0, o.batch)
    if (seqs.length < o.batch) throw new Error(`batch ${o.batch} needs ${o.batch} sequences, have ${seqs.length}`)
    for (const s of seqs) await s.clearHistory()
    // Sequence ids 1..B and positions as decode-timer.ts numbers them, so the ids match Loom's.
    const prompts = seqs.map((_, i) => Array.from({ length: o.promptTokens }, (_, p) => benchToken(i + 1, p)))
    await Promise.all(seqs.map((s, i) => evalAndSample(s, prompts[i]!)))
    const stepMs: number[] = []
    for (let step = 0; step < o.warmupSteps + o.timedSteps; step++) {
      const pos = o.promptTokens + step
      const t0 = process.hrtime.bigint()
      await Promise.all(seqs.map((s, i) => evalAndSample(s, [benchToken(i + 1, pos)])))
      const ms = Number(process.hrtime.bigint() - t0) / 1e6
      if (step >= o.warmupSteps) stepMs.push(ms)
    }
    return stepMs
  }

  /** Wall time (ms) of each of `repeats` prefills of a `promptTokens`-token prompt into an empty sequence. */
  async prefill(o: { promptTokens: number; repeats: number }): Promise<number[]> {
    const prompt = Array.from({ length: o.promptTokens }, (_, p) => benchToken(1, p))
    const ms: number[] = []
    for (let r = 0; r < o.repeats; r++) {
      await this.singleSeq.clearHistory()
      const t0 = process.hrtime.bigint()
      await evalAndSample(this.singleSeq, prompt)
      ms.push(Number(process.hrtime.bigint() - t0) / 1e6)
    }
    return ms
  }

  /**
   * The greedy tokens after `prompt` and `steps` further steps, with each one's raw log-softmax
   * (from the full logits llama.cpp returns at each step).
   */
  async greedy(prompt: readonly number[], steps: number): Promise<{ tokens: number[]; logprobs: number[] }> {
    const seq = this.singleSeq
    await seq.clearHistory()
    const tokens: number[] = []
    const logprobs: number[] = []
    let input: readonly number[] = prompt
    for (let i = 0; i <= steps; i++) {
      const out = await seq.controlledEvaluate([
        ...input.slice(0, -1),
        [input[input.length - 1]!, { generateNext: { token: true, logits: true, options: { temperature: 0 } } }],
      ])
      const next = out[out.length - 1]?.next
      if (!next?.logits || next.token === undefined || next.token === null)
        throw new Error('llama.cpp returned no token or logits')
      let max = -Infinity
      for (const v of next.logits.values()) max = Math.max(max, v)
      let sum = 0
      for (const v of next.logits.values()) sum += Math.exp(v - max)
      tokens.push(next.token)
      logprobs.push(next.logits.get(next.token)! - max - Math.log(sum))
      input = [next.token]
    }
    await seq.clearHistory()
    return { tokens, logprobs }
  }

  async dispose(): Promise<void> {
    await this.single.dispose()
    await this.batched.dispose()
  }
}
