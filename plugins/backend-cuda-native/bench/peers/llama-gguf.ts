/**
 * Converts a Hugging Face Llama folder (the bench model: `config.json`, `tokenizer.json`,
 * safetensors) into the GGUF llama.cpp loads, in F32, BF16 or Q8_0, from facts of the GGUF spec
 * and of llama.cpp's loader:
 *
 * - metadata: `general.architecture = llama` and the `llama.*` hyper-parameters llama.cpp reads
 *   (`block_count`, `feed_forward_length`, `attention.head_count[_kv]`, `rope.dimension_count`,
 *   `attention.layer_norm_rms_epsilon`, `rope.freq_base`, ...); `general.file_type` (llama.cpp's
 *   `LLAMA_FTYPE`: 0 all F32, 32 mostly BF16, 7 mostly Q8_0).
 * - tensors: `token_embd`, per layer `attn_norm`, `attn_q/k/v`, `attn_output`, `ffn_norm`,
 *   `ffn_gate/up/down`, then `output_norm`; no `output` for tied embeddings (llama.cpp then uses
 *   `token_embd` for the LM head). Norm vectors stay F32 in every variant, as llama.cpp expects.
 * - RoPE layout: HF rotates the pairs (i, i + d/2) of each head (rotate_half); llama.cpp's llama
 *   graph rotates adjacent pairs (2i, 2i + 1). So q_proj and k_proj rows are permuted per head:
 *   HF row h·d + half·d/2 + i goes to row h·d + 2i + half (the spec's `permute`), which leaves
 *   q·k, and so the model's output, unchanged.
 * - tokenizer: `tokenizer.ggml.model = gpt2` (byte-level BPE) with the folder's tokens, merges and
 *   token types (normal, control for special added tokens, unused for the `[PADn]` fillers up to
 *   `vocab_size`, as llama.cpp's converter pads). The bench feeds token ids, so the tokenizer only
 *   has to load.
 */
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync } from 'node:fs'
import path from 'node:path'
import { bf16BitsToF32, f32ToBf16Bits } from '@loom/testkit'
import { indexSafetensors } from '../../src/safetensors-index.ts'
import type { NativeTensor } from '../../src/load-native.ts'
import { writeGguf, type GgmlTypeName, type GgufTensor, type GgufValue } from './gguf-writer.ts'
import { quantizeQ8_0 } from './q8-0.ts'

/** The GGUF variants the bench compares. */
export type GgufVariant = 'F32' | 'BF16' | 'Q8_0'

/** llama.cpp's `LLAMA_FTYPE_*` for each variant. */
const FILE_TYPE: Readonly<Record<GgufVariant, number>> = { F32: 0, BF16: 32, Q8_0: 7 }

/** llama.cpp's token types (`LLAMA_TOKEN_TYPE_*`). */
const TOKEN_TYPE = { normal: 1, control: 3, unused: 5 } as const

interface HfConfig {
  readonly hidden_size: number
  readonly intermediate_size: number
  readonly num_hidden_layers: number
  readonly num_attention_heads: number
  readonly num_key_value_heads?: number
  readonly head_dim?: number
  readonly vocab_size: number
  readonly max_position_embeddings: number
  readonly rms_norm_eps: number
  readonly rope_theta?: number
  readonly rope_scaling?: unknown
  readonly tie_word_embeddings?: boolean
  readonly bos_token_id?: number
  readonly eos_token_id?: number | number[]
  readonly model_type?: string
}

interface HfTokenizer {
  readonly model: { readonly type: string; readonly vocab: Record<string, number>; readonly merges: unknown[] }
  readonly added_tokens?: readonly { readonly id: number; readonly content: string; readonly special?: boolean }[]
}

/** The tokenizer metadata: tokens, types and merges, padded to `vocabSize`. */
export function tokenizerMetadata(
  tokenizer: HfTokenizer,
  vocabSize: number,
  bosId: number | undefined,
  eosId: number | undefined,
): [string, GgufValue][] {
  if (tokenizer.model.type !== 'BPE') throw new Error(`tokenizer model ${tokenizer.model.type}: only BPE is written`)
  const tokens: string[] = new Array<string>(vocabSize)
  const types = new Int32Array(vocabSize)
  const place = (id: number, text: string, type: number): void => {
    if (id < 0 || id >= vocabSize) throw new Error(`token id ${id} (${text}) is outside vocab_size ${vocabSize}`)
    tokens[id] = text
    types[id] = type
  }
  for (const [text, id] of Object.entries(tokenizer.model.vocab)) place(id, text, TOKEN_TYPE.normal)
  for (const t of tokenizer.added_tokens ?? [])
    place(t.id, t.content, t.special ? TOKEN_TYPE.control : TOKEN_TYPE.normal)
  for (let id = 0; id < vocabSize; id++) if (tokens[id] === undefined) place(id, `[PAD${id}]`, TOKEN_TYPE.unused)
  const merges = tokenizer.model.merges.map((m) => (Array.isArray(m) ? m.join(' ') : String(m)))
  const out: [string, GgufValue][] = [
    ['tokenizer.ggml.model', { type: 'string', value: 'gpt2' }],
    ['tokenizer.ggml.pre', { type: 'string', value: 'gpt-2' }],
    ['tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens }],
    ['tokenizer.ggml.token_type', { type: 'array', itemType: 'int32', value: types }],
    ['tokenizer.ggml.merges', { type: 'array', itemType: 'string', value: merges }],
  ]
  if (bosId !== undefined) out.push(['tokenizer.ggml.bos_token_id', { type: 'uint32', value: bosId }])
  if (eosId !== undefined) out.push(['tokenizer.ggml.eos_token_id', { type: 'uint32', value: eosId }])
  out.push(['tokenizer.ggml.add_bos_token', { type: 'bool', value: false }])
  return out
}

/**
 * Reorder the rows of a `[heads·headDim, in]` projection from HF's rotate-half RoPE layout to
 * llama.cpp's adjacent-pair layout. Works on raw bytes (any element size: rows move whole).
 */
export function permuteRopeRows(bytes: Uint8Array, heads: number, headDim: number): Uint8Array {
  const rows = heads * headDim
  if (bytes.byteLength % rows !== 0) throw new Error(`${bytes.byteLength} bytes are not ${rows} rows`)
  const rowBytes = bytes.byteLength / rows
  const half = headDim / 2
  const out = new Uint8Array(bytes.byteLength)
  for (let h = 0; h < heads; h++)
    for (let side = 0; side < 2; side++)
      for (let i = 0; i < half; i++) {
        const from = h * headDim + side * half + i
        const to = h * headDim + 2 * i + side
        out.set(bytes.subarray(from * rowBytes, (from + 1) * rowBytes), to * rowBytes)
      }
  return out
}

/** A safetensors tensor's raw bytes. */
function readRaw(files: readonly string[], t: NativeTensor): Uint8Array {
  const out = new Uint8Array(t.nbytes)
  const fd = openSync(files[t.file]!, 'r')
  try {
    let done = 0
    while (done < t.nbytes) {
      const n = readSync(fd, out, done, t.nbytes - done, t.offset + done)
      if (n <= 0) throw new Error(`short read of ${t.name}`)
      done += n
    }
  } finally {
    closeSync(fd)
  }
  return out
}

/** Source dtype codes of the addon's index: 0 F32, 1 F16, 2 BF16. */
function toF32(raw: Uint8Array, dtype: number, name: string): Float32Array {
  if (dtype === 0) return new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4)
  if (dtype !== 2) throw new Error(`${name}: source dtype ${dtype} is not converted (F32 and BF16 are)`)
  const bits = new Uint16Array(raw.buffer, raw.byteOffset, raw.byteLength / 2)
  const out = new Float32Array(bits.length)
  for (let i = 0; i < bits.length; i++) out[i] = bf16BitsToF32(bits[i]!)
  return out
}

/** Convert one weight's raw source bytes to the variant's ggml bytes. */
function encode(raw: Uint8Array, srcDtype: number, type: GgmlTypeName, name: string): Uint8Array {
  if (type === 'BF16' && srcDtype === 2) return raw // the same bits Loom loads
  if (type === 'F32' && srcDtype === 0) return raw
  const values = toF32(raw, srcDtype, name)
  if (type === 'F32') return new Uint8Array(values.buffer, values.byteOffset, values.byteLength)
  if (type === 'Q8_0') return quantizeQ8_0(values)
  if (type === 'BF16') {
    const bits = new Uint16Array(values.length)
    for (let i = 0; i < values.length; i++) bits[i] = f32ToBf16Bits(values[i]!)
    return new Uint8Array(bits.buffer)
  }
  throw new Error(`${name}: no conversion to ${type}`)
}

/**
 * Write the model folder `modelDir` as a llama GGUF of `variant` to `file`. Weights come from the
 * folder's safetensors as they are (BF16 from a bf16 folder keeps its bits; Q8_0 quantises the
 * folder's values, normally the f32 folder).
 */
export function writeLlamaGguf(modelDir: string, variant: GgufVariant, file: string): void {
  const config = JSON.parse(readFileSync(path.join(modelDir, 'config.json'), 'utf8')) as HfConfig
  const tokenizer = JSON.parse(readFileSync(path.join(modelDir, 'tokenizer.json'), 'utf8')) as HfTokenizer
  if (config.model_type !== undefined && config.model_type !== 'llama')
    throw new Error(`model_type ${config.model_type}: only llama is converted`)
  if (config.rope_scaling) throw new Error('rope_scaling is not converted')
  const heads = config.num_attention_heads
  const kvHeads = config.num_key_value_heads ?? heads
  const headDim = config.head_dim ?? config.hidden_size / heads
  const eos = Array.isArray(config.eos_token_id) ? config.eos_token_id[0] : config.eos_token_id
  const u32 = (value: number): GgufValue => ({ type: 'uint32', value })
  const f32 = (value: number): GgufValue => ({ type: 'float32', value })
  const metadata: [string, GgufValue][] = [
    ['general.architecture', { type: 'string', value: 'llama' }],
    ['general.name', { type: 'string', value: path.basename(modelDir) }],
    ['general.file_type', u32(FILE_TYPE[variant])],
    ...(variant === 'Q8_0' ? ([['general.quantization_version', u32(2)]] as [string, GgufValue][]) : []),
    ['general.alignment', u32(32)],
    ['llama.context_length', u32(config.max_position_embeddings)],
    ['llama.embedding_length', u32(config.hidden_size)],
    ['llama.block_count', u32(config.num_hidden_layers)],
    ['llama.feed_forward_length', u32(config.intermediate_size)],
    ['llama.attention.head_count', u32(heads)],
    ['llama.attention.head_count_kv', u32(kvHeads)],
    ['llama.attention.key_length', u32(headDim)],
    ['llama.attention.value_length', u32(headDim)],
    ['llama.rope.dimension_count', u32(headDim)],
    ['llama.rope.freq_base', f32(config.rope_theta ?? 10000)],
    ['llama.attention.layer_norm_rms_epsilon', f32(config.rms_norm_eps)],
    ['llama.vocab_size', u32(config.vocab_size)],
    ...tokenizerMetadata(tokenizer, config.vocab_size, config.bos_token_id, eos),
  ]

  const index = indexSafetensors(modelDir)
  const byName = new Map(index.tensors.map((t) => [t.name, t]))
  const source = (name: string): NativeTensor => {
    const t = byName.get(name)
    if (!t) throw new Error(`${modelDir}: no tensor ${name}`)
    return t
  }
  const weight = (ggufName: string, hfName: string, permuteHeads = 0): GgufTensor => {
    const t = source(hfName)
    return {
      name: ggufName,
      shape: t.shape,
      type: variant,
      data: () => {
        const raw = readRaw(index.files, t)
        return encode(permuteHeads > 0 ? permuteRopeRows(raw, permuteHeads, headDim) : raw, t.dtype, variant, hfName)
      },
    }
  }
  const norm = (ggufName: string, hfName: string): GgufTensor => {
    const t = source(hfName)
    return {
      name: ggufName,
      shape: t.shape,
      type: 'F32',
      data: () => encode(readRaw(index.files, t), t.dtype, 'F32', hfName),
    }
  }
  const tensors: GgufTensor[] = [weight('token_embd.weight', 'model.embed_tokens.weight')]
  for (let l = 0; l < config.num_hidden_layers; l++) {
    const hf = `model.layers.${l}`
    const g = `blk.${l}`
    tensors.push(
      norm(`${g}.attn_norm.weight`, `${hf}.input_layernorm.weight`),
      weight(`${g}.attn_q.weight`, `${hf}.self_attn.q_proj.weight`, heads),
      weight(`${g}.attn_k.weight`, `${hf}.self_attn.k_proj.weight`, kvHeads),
      weight(`${g}.attn_v.weight`, `${hf}.self_attn.v_proj.weight`),
      weight(`${g}.attn_output.weight`, `${hf}.self_attn.o_proj.weight`),
      norm(`${g}.ffn_norm.weight`, `${hf}.post_attention_layernorm.weight`),
      weight(`${g}.ffn_gate.weight`, `${hf}.mlp.gate_proj.weight`),
      weight(`${g}.ffn_up.weight`, `${hf}.mlp.up_proj.weight`),
      weight(`${g}.ffn_down.weight`, `${hf}.mlp.down_proj.weight`),
    )
  }
  tensors.push(norm('output_norm.weight', 'model.norm.weight'))
  if (!config.tie_word_embeddings) tensors.push(weight('output.weight', 'lm_head.weight'))
  mkdirSync(path.dirname(file), { recursive: true })
  writeGguf(file, metadata, tensors)
}

/** `file` as written by `writeLlamaGguf`, written first unless it already exists. */
export function cachedLlamaGguf(modelDir: string, variant: GgufVariant, file: string): boolean {
  if (existsSync(file)) return false
  writeLlamaGguf(modelDir, variant, file)
  return true
}
