/**
 * A plain float64 forward pass of the Llama-family models the test kit builds (and real ones of
 * the same layout): the oracle every backend's logits are compared against. It favours being
 * obviously right over being fast: one token at a time, no batching, weights decoded to f64.
 *
 * Conventions match Hugging Face transformers: RMSNorm `x / sqrt(mean(x²) + eps) · w`; RoPE with
 * `rotate_half` (the two halves of a head, not interleaved pairs); Llama 3 / linear RoPE scaling;
 * grouped-query attention (query head `h` reads KV head `h / (numHeads / numKvHeads)`); SwiGLU MLP
 * `down(silu(gate x) · up x)`; Qwen2's q/k/v biases; LoRA `y += scale · B (A x)`.
 */
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { readModelConfig, PROJECTIONS, type HfModelConfig, type Projection } from './model-config.ts'
import { readSafetensors } from './safetensors-reader.ts'
import { findPatternKey, peftModuleName } from './peft-pattern.ts'
import { writeModelWeights } from './model-builder.ts'

/** One projection's low-rank update, decoded to f64. */
export interface ReferenceLoraModule {
  readonly rank: number
  readonly scale: number
  /** `[rank, in]` */
  readonly a: Float64Array
  /** `[out, rank]` */
  readonly b: Float64Array
}

/** A LoRA adapter as the reference applies it: `layers[l][module]`. */
export interface ReferenceLora {
  readonly dir: string
  readonly layers: Partial<Record<Projection, ReferenceLoraModule>>[]
}

/** Read every tensor of a model folder (single file or sharded), decoded to f64. */
export function readModelTensors(dir: string): Map<string, { shape: readonly number[]; data: Float64Array }> {
  const indexPath = join(dir, 'model.safetensors.index.json')
  const files = existsSync(indexPath)
    ? [
        ...new Set(
          Object.values(
            (JSON.parse(readFileSync(indexPath, 'utf8')) as { weight_map: Record<string, string> }).weight_map,
          ),
        ),
      ]
    : ['model.safetensors']
  const out = new Map<string, { shape: readonly number[]; data: Float64Array }>()
  for (const file of files) {
    for (const [name, t] of readSafetensors(join(dir, file)).tensors) out.set(name, { shape: t.shape, data: t.data })
  }
  return out
}

/** Read a PEFT LoRA adapter folder and resolve each module's scale (rsLoRA, rank/alpha patterns). */
export function readReferenceLora(dir: string, config: HfModelConfig): ReferenceLora {
  const cfg = JSON.parse(readFileSync(join(dir, 'adapter_config.json'), 'utf8')) as {
    r: number
    lora_alpha: number
    use_rslora?: boolean
    rank_pattern?: Record<string, number>
    alpha_pattern?: Record<string, number>
  }
  const { tensors } = readSafetensors(join(dir, 'adapter_model.safetensors'))
  const layers: Partial<Record<Projection, ReferenceLoraModule>>[] = Array.from(
    { length: config.num_hidden_layers },
    () => ({}),
  )
  const keyRe = /^base_model\.model\.model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_A\.weight$/
  for (const [name, a] of tensors) {
    const m = keyRe.exec(name)
    if (m === null) continue
    const layer = Number(m[1])
    const module = m[2] as Projection
    const b = tensors.get(name.replace('lora_A', 'lora_B'))
    if (b === undefined) throw new Error(`${dir}: ${name} has no lora_B`)
    const moduleName = peftModuleName(layer, module)
    const rankKey = findPatternKey(Object.keys(cfg.rank_pattern ?? {}), moduleName)
    const alphaKey = findPatternKey(Object.keys(cfg.alpha_pattern ?? {}), moduleName)
    const r = rankKey === null ? cfg.r : cfg.rank_pattern![rankKey]!
    const alpha = alphaKey === null ? cfg.lora_alpha : cfg.alpha_pattern![alphaKey]!
    const rank = a.shape[0]!
    if (rank !== r) throw new Error(`${dir}: ${name} has rank ${rank}, adapter_config says ${r}`)
    const scale = cfg.use_rslora ? alpha / Math.sqrt(r) : alpha / r
    layers[layer]![module] = { rank, scale, a: a.data, b: b.data }
  }
  return { dir, layers }
}

/** RoPE inverse frequencies `1 / theta^(2i/d)`, with Llama 3 or linear scaling applied. */
export function ropeInvFreq(config: HfModelConfig): Float64Array {
  const d = config.head_dim
  const inv = new Float64Array(d / 2)
  for (let i = 0; i < d / 2; i++) inv[i] = 1 / Math.pow(config.rope_theta, (2 * i) / d)
  const scaling = config.rope_scaling as (Record<string, number | string> & { type?: string }) | null
  const kind = scaling?.rope_type ?? scaling?.type
  if (scaling && kind === 'llama3') {
    const factor = scaling.factor as number
    const low = scaling.low_freq_factor as number
    const high = scaling.high_freq_factor as number
    const oldLen = scaling.original_max_position_embeddings as number
    const lowWavelen = oldLen / low
    const highWavelen = oldLen / high
    for (let i = 0; i < inv.length; i++) {
      const wavelen = (2 * Math.PI) / inv[i]!
      if (wavelen < highWavelen) continue
      if (wavelen > lowWavelen) inv[i] = inv[i]! / factor
      else {
        const smooth = (oldLen / wavelen - low) / (high - low)
        inv[i] = ((1 - smooth) * inv[i]!) / factor + smooth * inv[i]!
      }
    }
  } else if (scaling && kind === 'linear') {
    for (let i = 0; i < inv.length; i++) inv[i] = inv[i]! / (scaling.factor as number)
  } else if (scaling && kind !== 'default') {
    throw new Error(`reference model: unsupported rope_scaling ${String(kind)}`)
  }
  return inv
}

/** `y = W x (+ bias)` with `W` row-major `[out, in]`. */
function matvec(w: Float64Array, x: Float64Array, out: number, bias?: Float64Array): Float64Array {
  const inF = x.length
  const y = new Float64Array(out)
  for (let o = 0; o < out; o++) {
    let s = bias ? bias[o]! : 0
    const row = o * inF
    for (let i = 0; i < inF; i++) s += w[row + i]! * x[i]!
    y[o] = s
  }
  return y
}

function rmsNorm(x: Float64Array, w: Float64Array, eps: number): Float64Array {
  let ss = 0
  for (let i = 0; i < x.length; i++) ss += x[i]! * x[i]!
  const inv = 1 / Math.sqrt(ss / x.length + eps)
  const y = new Float64Array(x.length)
  for (let i = 0; i < x.length; i++) y[i] = x[i]! * inv * w[i]!
  return y
}

/** Rotate each `headDim` slice of `v` in place (HF `rotate_half`: pairs `i` and `i + d/2`). */
function applyRope(v: Float64Array, heads: number, headDim: number, pos: number, invFreq: Float64Array): void {
  const half = headDim / 2
  for (let i = 0; i < half; i++) {
    const angle = pos * invFreq[i]!
    const c = Math.cos(angle)
    const s = Math.sin(angle)
    for (let h = 0; h < heads; h++) {
      const base = h * headDim
      const x1 = v[base + i]!
      const x2 = v[base + i + half]!
      v[base + i] = x1 * c - x2 * s
      v[base + i + half] = x2 * c + x1 * s
    }
  }
}

/** The base model, loaded once; sequences share its weights. */
export class ReferenceModel {
  readonly config: HfModelConfig
  readonly dir: string
  readonly invFreq: Float64Array
  private readonly weights: Map<string, { shape: readonly number[]; data: Float64Array }>
  private readonly loras = new Map<string, ReferenceLora>()

  private constructor(dir: string, config: HfModelConfig) {
    this.dir = dir
    this.config = config
    this.weights = readModelTensors(dir)
    this.invFreq = ropeInvFreq(config)
  }

  /** Load a model folder (`config.json` + `model.safetensors` or a sharded index). */
  static async load(dir: string): Promise<ReferenceModel> {
    return new ReferenceModel(dir, readModelConfig(dir))
  }

  /** A weight by its Hugging Face name, decoded to f64. Throws if absent. */
  weight(name: string): Float64Array {
    const w = this.weights.get(name)
    if (w === undefined) throw new Error(`reference model ${this.dir}: missing tensor ${name}`)
    return w.data
  }

  /** Whether the model has a tensor of that name. */
  hasWeight(name: string): boolean {
    return this.weights.has(name)
  }

  /** Read (once, then cached by folder) a LoRA adapter for this model. */
  loadLora(dir: string): ReferenceLora {
    let lora = this.loras.get(dir)
    if (lora === undefined) {
      lora = readReferenceLora(dir, this.config)
      this.loras.set(dir, lora)
    }
    return lora
  }

  /** A new empty sequence, optionally with a LoRA adapter (a folder or an already read adapter). */
  newSequence(lora?: string | ReferenceLora | null): ReferenceSequence {
    const resolved = lora == null ? null : typeof lora === 'string' ? this.loadLora(lora) : lora
    return new ReferenceSequence(this, resolved)
  }
}

/** One sequence's KV cache and the tokens fed so far. */
export class ReferenceSequence {
  readonly model: ReferenceModel
  readonly lora: ReferenceLora | null
  /** Tokens fed so far, in cache order. */
  readonly tokens: number[] = []
  /** Positions used for each cached token. */
  readonly positions: number[] = []
  /** Next-token logits after the last fed token (null before the first). */
  lastLogits: Float64Array | null = null
  // [layer][cache index] → [numKvHeads * headDim], keys after RoPE.
  private readonly keys: Float64Array[][]
  private readonly values: Float64Array[][]

  constructor(model: ReferenceModel, lora: ReferenceLora | null) {
    this.model = model
    this.lora = lora
    this.keys = Array.from({ length: model.config.num_hidden_layers }, () => [])
    this.values = Array.from({ length: model.config.num_hidden_layers }, () => [])
  }

  /** Number of cached tokens. */
  get length(): number {
    return this.tokens.length
  }

  /** An independent copy (cache included) that can be continued differently. */
  clone(): ReferenceSequence {
    const copy = new ReferenceSequence(this.model, this.lora)
    copy.tokens.push(...this.tokens)
    copy.positions.push(...this.positions)
    copy.lastLogits = this.lastLogits
    for (let l = 0; l < this.keys.length; l++) {
      copy.keys[l]!.push(...this.keys[l]!)
      copy.values[l]!.push(...this.values[l]!)
    }
    return copy
  }

  /**
   * Feed tokens (appending them to the cache, causally) and return each one's next-token logits.
   * `positions` default to the cache indices (`length`, `length + 1`, …).
   */
  forward(tokenIds: readonly number[], positions?: readonly number[]): Float64Array[] {
    const out: Float64Array[] = []
    tokenIds.forEach((id, i) => out.push(this.step(id, positions?.[i] ?? this.length)))
    return out
  }

  /**
   * Greedy continuation for up to `maxNewTokens`, stopping after a stop id. `prompt` is fed first;
   * when it is empty the sequence continues from its last logits. Every generated token but the
   * last is fed, so the cache ends one token short of the output (as a server's does).
   */
  generateGreedy(prompt: readonly number[], maxNewTokens: number, stopIds: readonly number[] = []): number[] {
    let logits = this.forward(prompt).at(-1) ?? this.lastLogits ?? undefined
    const generated: number[] = []
    while (logits !== undefined && generated.length < maxNewTokens) {
      const next = argmax(logits)
      generated.push(next)
      if (stopIds.includes(next) || generated.length === maxNewTokens) break
      logits = this.forward([next])[0]
    }
    return generated
  }

  private project(
    layer: number,
    module: Projection,
    x: Float64Array,
    out: number,
    weightName: string,
    biasName?: string,
  ): Float64Array {
    const m = this.model
    const bias = biasName !== undefined && m.hasWeight(biasName) ? m.weight(biasName) : undefined
    const y = matvec(m.weight(weightName), x, out, bias)
    const lora = this.lora?.layers[layer]?.[module]
    if (lora) {
      const t = matvec(lora.a, x, lora.rank)
      const delta = matvec(lora.b, t, out)
      for (let o = 0; o < out; o++) y[o] = y[o]! + lora.scale * delta[o]!
    }
    return y
  }

  private step(token: number, pos: number): Float64Array {
    const m = this.model
    const c = m.config
    const h = c.hidden_size
    const d = c.head_dim
    const nH = c.num_attention_heads
    const nKv = c.num_key_value_heads
    const group = nH / nKv
    if (token < 0 || token >= c.vocab_size)
      throw new Error(`token ${token} is outside the vocabulary (${c.vocab_size})`)
    const x = m.weight('model.embed_tokens.weight').slice(token * h, (token + 1) * h)
    for (let l = 0; l < c.num_hidden_layers; l++) {
      const p = `model.layers.${l}`
      const hn = rmsNorm(x, m.weight(`${p}.input_layernorm.weight`), c.rms_norm_eps)
      const proj = (mod: Projection, out: number, input: Float64Array): Float64Array => {
        const block = mod === 'gate_proj' || mod === 'up_proj' || mod === 'down_proj' ? 'mlp' : 'self_attn'
        return this.project(l, mod, input, out, `${p}.${block}.${mod}.weight`, `${p}.${block}.${mod}.bias`)
      }
      const q = proj('q_proj', nH * d, hn)
      const k = proj('k_proj', nKv * d, hn)
      const v = proj('v_proj', nKv * d, hn)
      applyRope(q, nH, d, pos, m.invFreq)
      applyRope(k, nKv, d, pos, m.invFreq)
      const keys = this.keys[l]!
      const values = this.values[l]!
      keys.push(k)
      values.push(v)
      const attn = new Float64Array(nH * d)
      const scale = 1 / Math.sqrt(d)
      const scores = new Float64Array(keys.length)
      for (let head = 0; head < nH; head++) {
        const kvBase = Math.floor(head / group) * d
        const qBase = head * d
        let max = -Infinity
        for (let j = 0; j < keys.length; j++) {
          let s = 0
          for (let i = 0; i < d; i++) s += q[qBase + i]! * keys[j]![kvBase + i]!
          scores[j] = s * scale
          if (scores[j]! > max) max = scores[j]!
        }
        let sum = 0
        for (let j = 0; j < keys.length; j++) {
          scores[j] = Math.exp(scores[j]! - max)
          sum += scores[j]!
        }
        for (let j = 0; j < keys.length; j++) {
          const wgt = scores[j]! / sum
          for (let i = 0; i < d; i++) attn[qBase + i] = attn[qBase + i]! + wgt * values[j]![kvBase + i]!
        }
      }
      const o = proj('o_proj', h, attn)
      for (let i = 0; i < h; i++) x[i] = x[i]! + o[i]!
      const hn2 = rmsNorm(x, m.weight(`${p}.post_attention_layernorm.weight`), c.rms_norm_eps)
      const gate = proj('gate_proj', c.intermediate_size, hn2)
      const up = proj('up_proj', c.intermediate_size, hn2)
      for (let i = 0; i < gate.length; i++) {
        const g = gate[i]!
        gate[i] = (g / (1 + Math.exp(-g))) * up[i]!
      }
      const down = proj('down_proj', h, gate)
      for (let i = 0; i < h; i++) x[i] = x[i]! + down[i]!
    }
    this.tokens.push(token)
    this.positions.push(pos)
    const final = rmsNorm(x, m.weight('model.norm.weight'), c.rms_norm_eps)
    const head = c.tie_word_embeddings ? m.weight('model.embed_tokens.weight') : m.weight('lm_head.weight')
    this.lastLogits = matvec(head, final, c.vocab_size)
    return this.lastLogits
  }
}

/** Index of the largest value (first on ties). */
export function argmax(values: ArrayLike<number>): number {
  let best = 0
  for (let i = 1; i < values.length; i++) if (values[i]! > values[best]!) best = i
  return best
}

/**
 * Write a copy of `modelDir` into `outDir` whose projections are `W + scale · B A` for the LoRA in
 * `loraDir` (computed in f64, stored in the model's dtype as one `model.safetensors`). Serving the
 * merged model must match serving the base model with the adapter.
 */
export async function mergeLoraIntoModel(modelDir: string, loraDir: string, outDir: string): Promise<void> {
  const config = readModelConfig(modelDir)
  const lora = readReferenceLora(loraDir, config)
  const tensors = readModelTensors(modelDir)
  const merged = new Map<string, { shape: readonly number[]; data: Float32Array }>()
  for (const [name, t] of tensors) {
    const data = Float64Array.from(t.data)
    const m = /^model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.weight$/.exec(name)
    const mod = m ? lora.layers[Number(m[1])]?.[m[2] as Projection] : undefined
    if (mod && (PROJECTIONS as readonly string[]).includes(m![2]!)) {
      const [outF, inF] = t.shape as [number, number]
      for (let o = 0; o < outF; o++) {
        for (let i = 0; i < inF; i++) {
          let s = 0
          for (let r = 0; r < mod.rank; r++) s += mod.b[o * mod.rank + r]! * mod.a[r * inF + i]!
          data[o * inF + i] = data[o * inF + i]! + mod.scale * s
        }
      }
    }
    merged.set(name, { shape: t.shape, data: Float32Array.from(data) })
  }
  mkdirSync(outDir, { recursive: true })
  for (const file of readdirSync(modelDir)) {
    if (file.endsWith('.safetensors') || file === 'model.safetensors.index.json') continue
    if (!statSync(join(modelDir, file)).isFile()) continue
    copyFileSync(join(modelDir, file), join(outDir, file))
  }
  writeModelWeights(outDir, merged, config.torch_dtype)
}
