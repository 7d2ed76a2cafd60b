import type { AdapterHandle } from '../../contracts/adapter.ts'
import { LoomError } from '../../errors/index.ts'

/**
 * Which Medusa heads a request speculates with, by LoRAX's rules (lorax.md §5):
 * - no per-request Medusa adapter → the server's default (null when none is configured: plain decoding);
 * - a per-request Medusa adapter is accepted only when a default was configured
 *   (`medusa_no_default`) and has the default's head count (`medusa_heads_mismatch`).
 *
 * LoRAX also refuses per-request version-1 heads; Loom does not, because its runtime loads either
 * version into any adapter slot.
 *
 * @param requested the Medusa handle the request named (its `adapter_id` resolved to a Medusa
 *   adapter), or null.
 * @param defaultSpeculator the handle of the default Medusa adapter loaded at startup, or null.
 * @param id the adapter id as the request named it, for the error message.
 */
export function resolveSpeculator(
  requested: AdapterHandle | null,
  defaultSpeculator: AdapterHandle | null,
  id = requested?.key ?? '',
): AdapterHandle | null {
  if (requested === null) return defaultSpeculator
  if (requested.kind !== 'medusa') {
    throw new LoomError('bad_request', { detail: `adapter \`${id}\` is a ${requested.kind} adapter, not Medusa heads` })
  }
  if (defaultSpeculator === null) throw new LoomError('medusa_no_default', { id })
  if (requested.size !== defaultSpeculator.size) {
    throw new LoomError('medusa_heads_mismatch', { id, heads: requested.size, expected: defaultSpeculator.size })
  }
  return requested
}
