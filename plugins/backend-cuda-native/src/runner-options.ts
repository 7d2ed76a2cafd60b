/**
 * Options of the native runtime: the plugin's `options:` schema (snake_case, as written in YAML)
 * and the defaults `NativeStepRunner` applies when it is constructed directly.
 */
import os from 'node:os'
import { z } from '@loom/core'

export const nativeOptionsSchema = z.strictObject({
  /**
   * Compute device: `cuda` (one GPU; startup fails with `cuda_unavailable` naming the cause when it
   * cannot run), `cpu`, or `auto`: cuda when this build has it and a usable GPU is present, else cpu.
   */
  device: z.enum(['auto', 'cpu', 'cuda']).default('auto'),
  /** Worker threads including the caller; default `LOOM_THREADS` or every available core. */
  threads: z.number().int().min(1).max(1024).optional(),
  /** KV cache capacity in tokens (all sequences together). Overrides `kv_cache_mb`. */
  kv_cache_tokens: z.number().int().min(1).optional(),
  /** KV cache budget in MiB when `kv_cache_tokens` is not set. */
  kv_cache_mb: z.number().positive().default(512),
  /** Token slots per KV block. */
  kv_block_size: z.number().int().min(1).max(1024).default(16),
  /**
   * Most tokens (prefill + decode) one step may carry; sizes the scratch arenas. At most 65,535:
   * the cuda device's per-token kernels put the step's tokens on the grid's y axis.
   */
  max_batch_tokens: z.number().int().min(1).max(65535).default(2048),
  /** Resident adapters (LoRA and Medusa together). */
  adapter_slots: z.number().int().min(0).max(4096).default(32),
  /** Largest LoRA rank a slot accepts (1..128). */
  max_lora_rank: z.number().int().min(1).max(128).default(64),
  /**
   * Weight storage: `auto` serves the weights as the safetensors store them (f32, f16 or bf16);
   * `int8` quantises the seven projections of every layer and the LM head at load to 8-bit blocks
   * (32 int8 values and one f16 scale each, llama.cpp's Q8_0 layout: 1.06 bytes per weight, for
   * faster decoding on memory-bound CPUs). The embedding lookup, LoRA adapters and Medusa heads
   * keep their dtype. cpu device only for now; input sizes must be multiples of 32.
   */
  weights: z.enum(['auto', 'int8']).default('auto'),
  /**
   * Steps predicted to take at most this many microseconds run on the JS thread; longer ones run
   * on a worker thread while the JS thread serves HTTP and streams. Handing a step to a worker and
   * back costs two thread wake-ups (~40-70 µs on a 2-core VM, where a demo-model decode step
   * computes for ~100 µs); a step on the JS thread delays other requests' I/O by its length.
   * 0: every step on a worker.
   */
  inline_step_max_us: z.number().int().min(0).max(1_000_000).default(1000),
  /** Cap on the context length reported to the engine (default: the model's, bounded by the cache). */
  max_context_length: z.number().int().min(1).optional(),
})

/** Validated plugin options. */
export type NativeOptions = z.output<typeof nativeOptionsSchema>
/** What `new NativeStepRunner(path, options)` accepts: any subset, defaults filled in. */
export type NativeOptionsInput = z.input<typeof nativeOptionsSchema>

/** Threads when the option is absent: `LOOM_THREADS`, else every core this process may use. */
export function defaultThreads(): number {
  const env = Number(process.env.LOOM_THREADS)
  if (Number.isInteger(env) && env >= 1) return env
  return typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length
}
