import { Gauge, type Registry } from 'prom-client'
import { redactSecrets } from '../logging/redact-secrets.ts'

/**
 * The series the Gateway API Inference Extension's endpoint picker scrapes to route requests
 * (its model-server protocol, kubernetes-sigs/gateway-api-inference-extension,
 * docs/proposals/003-model-server-protocol), in vLLM's spelling, types and semantics, since vLLM is
 * the server the picker reads by default:
 *
 * | series | type | value |
 * |---|---|---|
 * | `vllm:num_requests_waiting` | gauge | requests queued, not yet in a batch |
 * | `vllm:num_requests_running` | gauge | requests in the running batch |
 * | `vllm:kv_cache_usage_perc` | gauge | KV cache in use, as a fraction (1 = full) |
 * | `vllm:gpu_cache_usage_perc` | gauge | the same, under the name older pickers read |
 * | `vllm:lora_requests_info` | gauge | labels `running_lora_adapters`, `waiting_lora_adapters` (comma-separated adapter ids) and `max_lora` (adapter slots); the value is the Unix time of the last change of those labels |
 *
 * Only the current label set of `vllm:lora_requests_info` is exported (vLLM keeps every set it
 * ever reported, each with its time; the picker reads the newest, so one series says the same with
 * bounded cardinality).
 */

/** What the gateway series read on every scrape. */
export interface GatewaySample {
  readonly runningRequests: number
  readonly queuedRequests: number
  readonly kvBlocksTotal: number
  readonly kvBlocksFree: number
  /** Distinct LoRA adapter ids of the running requests. */
  readonly runningAdapters: readonly string[]
  /** Distinct LoRA adapter ids of the waiting requests. */
  readonly waitingAdapters: readonly string[]
  /** Adapters that can be resident at once (`max_lora`). */
  readonly adapterSlots: number
}

/**
 * One adapter id as an item of a comma-separated label: a comma inside an id is percent-encoded
 * (with `%` itself) so the list splits unambiguously; an id that looks like a secret is `redacted`.
 */
export function adapterListItem(id: string): string {
  if (redactSecrets(id) !== id) return 'redacted'
  return id.replace(/[%,]/g, (c) => encodeURIComponent(c))
}

/**
 * Register the gateway series on `registry`. `read` returns undefined while the model loads: the
 * request and cache gauges read 0 and the adapter lists are empty.
 * `now` (seconds) is injectable for tests.
 */
export function registerGatewayMetrics(
  registry: Registry,
  read: () => GatewaySample | undefined,
  now: () => number = () => Date.now() / 1000,
): void {
  const gauge = (name: string, help: string, value: (s: GatewaySample) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        const sample = read()
        this.set(sample === undefined ? 0 : value(sample))
      },
    })
  gauge(
    'vllm:num_requests_waiting',
    'Requests waiting to be processed (Loom: queued, not yet in a batch)',
    (s) => s.queuedRequests,
  )
  gauge('vllm:num_requests_running', 'Requests in the running batch', (s) => s.runningRequests)
  const usage = (s: GatewaySample) => (s.kvBlocksTotal > 0 ? (s.kvBlocksTotal - s.kvBlocksFree) / s.kvBlocksTotal : 0)
  gauge('vllm:kv_cache_usage_perc', 'KV cache usage as a fraction; 1 means 100 percent', usage)
  gauge('vllm:gpu_cache_usage_perc', 'KV cache usage as a fraction; 1 means 100 percent (older name)', usage)

  let current: Record<string, string> | null = null
  let changedAt = 0
  new Gauge({
    name: 'vllm:lora_requests_info',
    help: 'Running and waiting LoRA adapters and the adapter capacity; the value is the time of the last change',
    labelNames: ['running_lora_adapters', 'waiting_lora_adapters', 'max_lora'],
    registers: [registry],
    collect() {
      const sample = read()
      const labels = {
        running_lora_adapters: (sample?.runningAdapters ?? []).map(adapterListItem).join(','),
        waiting_lora_adapters: (sample?.waitingAdapters ?? []).map(adapterListItem).join(','),
        max_lora: String(sample?.adapterSlots ?? 0),
      }
      if (
        current === null ||
        current.running_lora_adapters !== labels.running_lora_adapters ||
        current.waiting_lora_adapters !== labels.waiting_lora_adapters ||
        current.max_lora !== labels.max_lora
      ) {
        current = labels
        changedAt = now()
      }
      this.reset()
      this.set(labels, changedAt)
    },
  })
}
