import t, { type Test } from 'tap'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { writeSafetensors, type TensorToWrite } from '../src/safetensors-writer.ts'
import { ReferenceModel, ropeInvFreq, argmax } from '../src/reference-model.ts'
import type { HfModelConfig } from '../src/model-config.ts'

/** A hand-made model: hidden 2, one head of dim 2, one layer, vocab 3; weights chosen by the test. */
function tinyModel(dir: string, weights: Record<string, number[]>, extra: Partial<HfModelConfig> = {}): void {
  mkdirSync(dir, { recursive: true })
  const config = {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    hidden_size: 2,
    intermediate_size: 2,
    num_hidden_layers: 1,
    num_attention_heads: 1,
    num_key_value_heads: 1,
    head_dim: 2,
    vocab_size: 3,
    max_position_embeddings: 16,
    rms_norm_eps: 0,
    rope_theta: 10000,
    rope_scaling: null,
    tie_word_embeddings: true,
    torch_dtype: 'float32',
    bos_token_id: 0,
    eos_token_id: 1,
    hidden_act: 'silu',
    ...extra,
  }
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config))
  const zero2x2 = [0, 0, 0, 0]
  const all: Record<string, number[]> = {
    'model.embed_tokens.weight': [1, 0, 0, 1, 3, 4],
    'model.layers.0.input_layernorm.weight': [1, 1],
    'model.layers.0.post_attention_layernorm.weight': [1, 1],
    'model.norm.weight': [1, 1],
    ...Object.fromEntries(
      [
        'self_attn.q_proj',
        'self_attn.k_proj',
        'self_attn.v_proj',
        'self_attn.o_proj',
        'mlp.gate_proj',
        'mlp.up_proj',
        'mlp.down_proj',
      ].map((m) => [`model.layers.0.${m}.weight`, zero2x2]),
    ),
    ...weights,
  }
  const tensors: Record<string, TensorToWrite> = {}
  for (const [name, data] of Object.entries(all)) {
    tensors[name] = {
      dtype: 'F32',
      shape: data.length === 2 ? [2] : [data.length / 2, 2],
      data: new Float32Array(data),
    }
  }
  writeSafetensors(join(dir, 'model.safetensors'), tensors)
}

const close = (t: Test, got: ArrayLike<number>, want: number[], msg: string): void => {
  const diff = Math.max(...want.map((w, i) => Math.abs(w - got[i]!)))
  t.ok(diff < 1e-12, `${msg}: got ${Array.from(got).join(', ')}, want ${want.join(', ')}`)
}

t.test('embedding → RMSNorm → tied LM head, with every block zeroed', async (t) => {
  const dir = t.testdir()
  tinyModel(dir, {})
  const m = await ReferenceModel.load(dir)
  const [logits] = m.newSequence().forward([2])
  // e = (3, 4); rms = sqrt((9 + 16) / 2); n = e / rms; logits = E n.
  const rms = Math.sqrt(12.5)
  close(t, logits!, [3 / rms, 4 / rms, 25 / rms], 'logits')
})

t.test('attention averages values over the causal window; MLP is SwiGLU', async (t) => {
  const dir = t.testdir()
  // q = k = 0 → uniform attention; v = o = identity. gate = identity, up = identity, down = identity.
  const id = [1, 0, 0, 1]
  tinyModel(dir, {
    'model.layers.0.self_attn.v_proj.weight': id,
    'model.layers.0.self_attn.o_proj.weight': id,
    'model.layers.0.mlp.gate_proj.weight': id,
    'model.layers.0.mlp.up_proj.weight': id,
    'model.layers.0.mlp.down_proj.weight': id,
  })
  const m = await ReferenceModel.load(dir)
  const s = m.newSequence()
  const logits = s.forward([0, 2])
  const E = [
    [1, 0],
    [0, 1],
    [3, 4],
  ]
  const norm = (v: number[]): number[] => {
    const r = Math.sqrt((v[0]! ** 2 + v[1]! ** 2) / 2)
    return v.map((x) => x / r)
  }
  const silu = (x: number): number => x / (1 + Math.exp(-x))
  const expected = (tokens: number[]): number[] => {
    const normed = tokens.map((tk) => norm(E[tk]!))
    const last = E[tokens.at(-1)!]!
    const attn = [0, 1].map((i) => normed.reduce((s, n) => s + n[i]!, 0) / normed.length)
    const x = last.map((v, i) => v + attn[i]!)
    const h = norm(x)
    const y = x.map((v, i) => v + silu(h[i]!) * h[i]!)
    const f = norm(y)
    return E.map((row) => row[0]! * f[0]! + row[1]! * f[1]!)
  }
  close(t, logits[0]!, expected([0]), 'token 0')
  close(t, logits[1]!, expected([0, 2]), 'token 1')
  // Feeding in two calls gives the same as one call.
  const s2 = m.newSequence()
  s2.forward([0])
  close(t, s2.forward([2])[0]!, expected([0, 2]), 'incremental')
})

t.test('RoPE uses rotate_half and makes scores depend on relative position', async (t) => {
  const dir = t.testdir()
  const id = [1, 0, 0, 1]
  tinyModel(
    dir,
    {
      'model.layers.0.self_attn.q_proj.weight': id,
      'model.layers.0.self_attn.k_proj.weight': id,
      'model.layers.0.self_attn.v_proj.weight': id,
      'model.layers.0.self_attn.o_proj.weight': id,
    },
    { rope_theta: 10000 },
  )
  const m = await ReferenceModel.load(dir)
  // head_dim 2 → one frequency, inv_freq = 1: position p rotates (x1, x2) by angle p.
  const rot = (v: number[], p: number): number[] => [
    v[0]! * Math.cos(p) - v[1]! * Math.sin(p),
    v[1]! * Math.cos(p) + v[0]! * Math.sin(p),
  ]
  const n0 = [Math.SQRT2, 0] // rmsnorm((1, 0))
  const n1 = [0, Math.SQRT2] // rmsnorm((0, 1))
  const expected = (p0: number, p1: number): number[] => {
    const q = rot(n1, p1)
    const s0 = (q[0]! * rot(n0, p0)[0]! + q[1]! * rot(n0, p0)[1]!) / Math.SQRT2
    const s1 = (q[0]! * q[0]! + q[1]! * q[1]!) / Math.SQRT2
    const w0 = Math.exp(s0) / (Math.exp(s0) + Math.exp(s1))
    const x = [0 + w0 * n0[0]! + (1 - w0) * n1[0]!, 1 + w0 * n0[1]! + (1 - w0) * n1[1]!]
    const r = Math.sqrt((x[0]! ** 2 + x[1]! ** 2) / 2)
    const f = [x[0]! / r, x[1]! / r]
    return [f[0]!, f[1]!, 3 * f[0]! + 4 * f[1]!]
  }
  close(t, m.newSequence().forward([0, 1])[1]!, expected(0, 1), 'positions 0, 1')
  close(t, m.newSequence().forward([0, 1], [5, 7])[1]!, expected(5, 7), 'positions 5, 7')
  t.notSame(expected(0, 1), expected(0, 2))
})

t.test('Llama 3 RoPE scaling keeps high frequencies and divides low ones by the factor', async (t) => {
  const base = { head_dim: 128, rope_theta: 500000 } as HfModelConfig
  const plain = ropeInvFreq({ ...base, rope_scaling: null })
  const scaled = ropeInvFreq({
    ...base,
    rope_scaling: {
      rope_type: 'llama3',
      factor: 8,
      low_freq_factor: 1,
      high_freq_factor: 4,
      original_max_position_embeddings: 8192,
    },
  })
  t.equal(scaled[0], plain[0])
  t.equal(scaled[63], plain[63]! / 8)
  // A medium frequency is interpolated between the two.
  const mid = [...plain].findIndex((f) => {
    const w = (2 * Math.PI) / f
    return w > 2048 && w < 8192
  })
  t.ok(mid > 0 && scaled[mid]! < plain[mid]! && scaled[mid]! > plain[mid]! / 8)
  t.equal(argmax([1, 3, 3, 2]), 1)
})
