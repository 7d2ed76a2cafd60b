/**
 * The LoRA adapters a TensorRT-LLM backend has loaded: each one's handle, Loom task id and tensors
 * in TensorRT-LLM's layout, and whether the executor is believed to hold it in its cache.
 *
 * The executor owns the real cache (host and GPU levels, LRU over tasks no running request uses);
 * Loom cannot see it, so it keeps a belief: a task is cached once a request carried its weights,
 * until a request comes back with the cache-miss error (it was evicted). A request sends the id
 * alone while the belief holds and the weights otherwise; a miss is re-sent once with the weights.
 */
import { LoomError, type AdapterHandle, type LoraWeights } from '@loom/core'
import type { EngineDtype } from './half-float.ts'
import { toTrtllmLora } from './lora-layout.ts'
import { loraTaskId } from './lora-task-id.ts'
import type { NativeLora, NativeLoraWeights } from './native-api.ts'

/** One loaded LoRA adapter. */
export interface LoraEntry {
  readonly handle: AdapterHandle
  readonly taskId: number
  readonly tensors: NativeLoraWeights
  /** The executor is believed to hold this task (see the file comment). */
  cached: boolean
}

/** The text of TensorRT-LLM's cache-miss error (`PeftTaskNotCachedException`), matched when no kind is given. */
export const LORA_NOT_CACHED = /LoRA task \d+ not found in cache\. Please send LoRA weights with request/

export class LoraRegistry {
  readonly #byKey = new Map<string, LoraEntry>()
  /** Task id → adapter key, to refuse two adapters that would share an id. */
  readonly #keyOfTask = new Map<number, string>()
  readonly #dtype: EngineDtype

  constructor(dtype: EngineDtype) {
    this.#dtype = dtype
  }

  get size(): number {
    return this.#byKey.size
  }

  /**
   * Convert and register `weights` (read and checked by the core) under the handle key `key`; the
   * same key returns the same entry. `id` names the adapter in errors.
   */
  add(key: string, id: string, weights: LoraWeights): LoraEntry {
    const existing = this.#byKey.get(key)
    if (existing !== undefined) return existing
    const taskId = loraTaskId(key)
    const other = this.#keyOfTask.get(taskId)
    if (other !== undefined) {
      throw new LoomError('adapter_load_failed', {
        id,
        detail: `its TensorRT-LLM task id ${taskId} is already used by ${other}; unload that adapter first`,
      })
    }
    const tensors = toTrtllmLora(weights, this.#dtype)
    let rank = 0
    for (const modules of weights.layers) for (const w of Object.values(modules)) rank = Math.max(rank, w?.rank ?? 0)
    const entry: LoraEntry = {
      handle: { key, id, kind: 'lora', size: rank },
      taskId,
      tensors,
      cached: false,
    }
    this.#byKey.set(key, entry)
    this.#keyOfTask.set(taskId, key)
    return entry
  }

  get(key: string): LoraEntry | undefined {
    return this.#byKey.get(key)
  }

  /**
   * Forget an adapter. Requests already holding its entry keep it (and its tensors) until they end;
   * the executor evicts the task from its cache in its own time.
   */
  remove(key: string): void {
    const entry = this.#byKey.get(key)
    if (entry === undefined) return
    this.#byKey.delete(key)
    this.#keyOfTask.delete(entry.taskId)
  }

  /**
   * The LoRA part of a request: the id alone while the task is believed cached, else the weights.
   * `withWeights` forces the weights (a re-send after a miss). The caller sets `cached` once a
   * request with the weights was accepted by the executor.
   */
  requestPart(entry: LoraEntry, withWeights = false): NativeLora {
    if (entry.cached && !withWeights) return { taskId: entry.taskId }
    return { taskId: entry.taskId, tensors: entry.tensors }
  }
}
