/**
 * TensorRT-LLM caches LoRA weights by a numeric task id the client chooses. Loom's ids are derived
 * from the adapter handle's content key (`${source}:${id}@${revision}`, or a merge key), so one
 * revision of an adapter has the same id in every process and across restarts, and a new revision
 * gets a new id: a cached old revision can never answer for a new one.
 */
import { createHash } from 'node:crypto'

/**
 * The task id of an adapter revision: the first 53 bits of SHA-256(key), never 0. 53 bits keep it a
 * safe JS integer on its way through the addon (TensorRT-LLM's `IdType` is a u64); two keys share an
 * id with odds of about n²/2^54, and the backend refuses such a pair rather than mix their weights.
 */
export function loraTaskId(key: string): number {
  const digest = createHash('sha256').update(key, 'utf8').digest()
  const id = Number(digest.readBigUInt64BE(0) >> 11n)
  // 0 is left out so that "no task" can never be confused with a real adapter.
  return id === 0 ? 1 : id
}
