import { Counter, Gauge, Histogram, Registry, exponentialBuckets } from 'prom-client'
import type { ERRORS, ErrorCode } from '../errors/registry.ts'
import { redactSecrets } from '../logging/redact-secrets.ts'
import { registerGatewayMetrics, type GatewaySample } from './gateway-metrics.ts'

/**
 * Prometheus metrics of one server, named `loom_*` after LoRAX's `lorax_*` set. Each server owns a
 * fresh `Registry` (never prom-client's global one), so two servers in one process (tests) never
 * share or collide on metrics.
 */

/** A LoRAX-style error type (`validation`, `overloaded`, `generation`, …): the `err` label. */
export type NativeErrorType = (typeof ERRORS)[ErrorCode]['nativeType']

/** Outcome of one authorization check: the `result` label of `loom_adapter_auth_checks`. */
export type AuthCheckResult = 'allowed' | 'denied' | 'cached' | 'error'

/** Outcome of one adapter fetch: the `result` label of `loom_adapter_downloads`. */
export type AdapterDownloadResult = 'downloaded' | 'cached' | 'failed'

/** Kind of a batch step: the `method` label of the `loom_batch_inference_*` metrics. */
export type BatchMethod = 'prefill' | 'decode'

/** Values the gauges read on every scrape, usually from `Backend.stats()`. */
export interface GaugeSample {
  readonly runningRequests: number
  readonly queuedRequests: number
  readonly kvBlocksTotal: number
  readonly kvBlocksFree: number
  readonly loadedAdapters: number
}

/** What a finished request reports to `Metrics.requestSucceeded`. Durations in seconds. */
export interface RequestTimings {
  /** Whole request, from arrival to the last byte of the response. */
  readonly durationS: number
  /** Parsing and validation (template, tokenization, adapter resolution). */
  readonly validationS?: number
  /** Waiting to join a batch. */
  readonly queueS?: number
  /** From joining a batch to the last token. */
  readonly inferenceS?: number
  readonly inputTokens: number
  readonly generatedTokens: number
  /** Tokens accepted by speculative decoding beyond one per step. */
  readonly skippedTokens?: number
  /** The request's cap on new tokens. */
  readonly maxNewTokens?: number
}

/** Speculative-decoding counters since start, read on every scrape (the engine's `speculationStats()`). */
export interface SpeculationSample {
  readonly verifySteps: number
  readonly acceptedTokens: number
  readonly candidateTokens: number
  readonly acceptedHistogram: readonly number[]
  readonly heads: readonly { readonly proposed: number; readonly accepted: number }[]
}

export interface CreateMetricsOptions {
  /**
   * Read the backend's counters for the gauges (`loom_batch_current_size`, `loom_queue_length`,
   * `loom_kv_blocks_*`, `loom_adapters_loaded`); called on every scrape. Return undefined while
   * there is nothing to report (the model is still loading): the gauges then read 0.
   */
  readonly sample?: () => GaugeSample | undefined
  /** Read the Medusa counters for `loom_speculation_*`; undefined when the backend does not speculate. */
  readonly speculation?: () => SpeculationSample | undefined
  /**
   * Read the backend for the inference gateway's `vllm:*` series (see gateway-metrics.ts); absent:
   * those series are not exported (`metrics.inference_gateway: false`).
   */
  readonly gateway?: () => GatewaySample | undefined
}

/**
 * The metrics a server records. Route and engine code record through the methods; the
 * instruments are exposed for anything the methods do not cover. Label values are limited to
 * short names (error types, source names, methods): a value that looks like a secret or is long
 * is replaced by `other`.
 */
export interface Metrics {
  /** The server's own registry; `/metrics` renders it. */
  readonly registry: Registry
  /** A generation request arrived (`loom_request_count`). */
  requestStarted(): void
  /** A generation request finished (`loom_request_success` and the request histograms). */
  requestSucceeded(timings: RequestTimings): void
  /** A generation request failed (`loom_request_failure{err}`), labelled with its LoRAX error type. */
  requestFailed(errorType: NativeErrorType): void
  /** A generation request the client abandoned before it finished (`loom_request_cancelled`). */
  requestCancelled(): void
  /** One authorization check for an adapter of `source` (`loom_adapter_auth_checks{source,result}`). */
  authChecked(source: string, result: AuthCheckResult): void
  /** One adapter fetch from `source` (`loom_adapter_downloads{source,result}`). */
  adapterDownloaded(source: string, result: AdapterDownloadResult, durationS?: number): void
  /** One adapter loaded into the backend (`loom_adapter_load_duration{source}`). */
  adapterLoaded(source: string, durationS: number): void
  /** One batch step (`loom_batch_inference_*{method}`, `loom_batch_next_size`). */
  batchStep(method: BatchMethod, size: number, durationS: number, ok: boolean): void
  readonly instruments: MetricInstruments
}

/** The prom-client instruments behind `Metrics`. */
export interface MetricInstruments {
  readonly requestCount: Counter
  readonly requestSuccess: Counter
  readonly requestFailure: Counter<'err'>
  readonly requestCancelled: Counter
  readonly requestDuration: Histogram
  readonly requestValidationDuration: Histogram
  readonly requestQueueDuration: Histogram
  readonly requestInferenceDuration: Histogram
  readonly requestMeanTimePerTokenDuration: Histogram
  readonly requestInputLength: Histogram
  readonly requestMaxNewTokens: Histogram
  readonly requestGeneratedTokens: Histogram
  readonly requestSkippedTokens: Histogram
  readonly batchInferenceCount: Counter<'method'>
  readonly batchInferenceSuccess: Counter<'method'>
  readonly batchInferenceFailure: Counter<'method'>
  readonly batchInferenceDuration: Histogram<'method'>
  readonly batchNextSize: Histogram
  readonly batchCurrentSize: Gauge
  readonly queueLength: Gauge
  readonly kvBlocksTotal: Gauge
  readonly kvBlocksFree: Gauge
  readonly adaptersLoaded: Gauge
  readonly adapterAuthChecks: Counter<'source' | 'result'>
  readonly adapterDownloads: Counter<'source' | 'result'>
  readonly adapterDownloadDuration: Histogram<'source'>
  readonly adapterLoadDuration: Histogram<'source'>
}

// LoRAX's duration buckets: 35 geometric buckets from 0.15 ms, factor 1.5 (up to ~200 s).
const DURATION_BUCKETS = exponentialBuckets(0.00015, 1.5, 35)
// Token counts: powers of two from 1 to 131072 (LoRAX uses linear buckets sized to its limits).
const TOKEN_BUCKETS = exponentialBuckets(1, 2, 18)
const BATCH_SIZE_BUCKETS = exponentialBuckets(1, 2, 11)

const SAFE_LABEL = /^[A-Za-z0-9_.:-]{1,32}$/

/** A label value that cannot carry a secret or blow up cardinality; anything else is `other`. */
export function safeLabel(value: string): string {
  return SAFE_LABEL.test(value) && redactSecrets(value) === value ? value : 'other'
}

/** Create the metrics of one server in a new registry. */
export function createMetrics(options: CreateMetricsOptions = {}): Metrics {
  const registry = new Registry()
  const registers = [registry]
  const counter = <L extends string = never>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Counter<L>({ name: `loom_${name}`, help, labelNames, registers })
  const histogram = <L extends string = never>(
    name: string,
    help: string,
    buckets: number[],
    labelNames: readonly L[] = [],
  ) => new Histogram<L>({ name: `loom_${name}`, help, buckets, labelNames, registers })
  const sampledGauge = (name: string, help: string, read: (sample: GaugeSample) => number) =>
    new Gauge({
      name: `loom_${name}`,
      help,
      registers,
      collect() {
        const sample = options.sample?.()
        this.set(sample === undefined ? 0 : read(sample))
      },
    })

  const instruments: MetricInstruments = {
    requestCount: counter('request_count', 'Generation requests received'),
    requestSuccess: counter('request_success', 'Generation requests that succeeded'),
    requestFailure: counter('request_failure', 'Generation requests that failed, by error type', ['err']),
    requestCancelled: counter('request_cancelled', 'Generation requests the client abandoned before the end'),
    requestDuration: histogram('request_duration', 'Request duration in seconds', DURATION_BUCKETS),
    requestValidationDuration: histogram(
      'request_validation_duration',
      'Request validation duration in seconds',
      DURATION_BUCKETS,
    ),
    requestQueueDuration: histogram(
      'request_queue_duration',
      'Time queued before joining a batch, in seconds',
      DURATION_BUCKETS,
    ),
    requestInferenceDuration: histogram(
      'request_inference_duration',
      'Time from joining a batch to the last token, in seconds',
      DURATION_BUCKETS,
    ),
    requestMeanTimePerTokenDuration: histogram(
      'request_mean_time_per_token_duration',
      'Mean inference time per generated token, in seconds',
      DURATION_BUCKETS,
    ),
    requestInputLength: histogram('request_input_length', 'Prompt length in tokens', TOKEN_BUCKETS),
    requestMaxNewTokens: histogram('request_max_new_tokens', 'Requested maximum new tokens', TOKEN_BUCKETS),
    requestGeneratedTokens: histogram('request_generated_tokens', 'Generated tokens per request', TOKEN_BUCKETS),
    requestSkippedTokens: histogram(
      'request_skipped_tokens',
      'Tokens accepted by speculative decoding beyond one per step, per request',
      TOKEN_BUCKETS,
    ),
    batchInferenceCount: counter('batch_inference_count', 'Batch steps run', ['method']),
    batchInferenceSuccess: counter('batch_inference_success', 'Batch steps that succeeded', ['method']),
    batchInferenceFailure: counter('batch_inference_failure', 'Batch steps that failed', ['method']),
    batchInferenceDuration: histogram('batch_inference_duration', 'Batch step duration in seconds', DURATION_BUCKETS, [
      'method',
    ]),
    batchNextSize: histogram('batch_next_size', 'Sequences in a batch step', BATCH_SIZE_BUCKETS),
    batchCurrentSize: sampledGauge('batch_current_size', 'Requests running now', (s) => s.runningRequests),
    queueLength: sampledGauge('queue_length', 'Requests waiting to join a batch', (s) => s.queuedRequests),
    kvBlocksTotal: sampledGauge('kv_blocks_total', 'KV cache blocks in total', (s) => s.kvBlocksTotal),
    kvBlocksFree: sampledGauge('kv_blocks_free', 'KV cache blocks free', (s) => s.kvBlocksFree),
    adaptersLoaded: sampledGauge('adapters_loaded', 'Adapters loaded on the device', (s) => s.loadedAdapters),
    adapterAuthChecks: counter('adapter_auth_checks', 'Adapter authorization checks, by source and result', [
      'source',
      'result',
    ]),
    adapterDownloads: counter('adapter_downloads', 'Adapter fetches, by source and result', ['source', 'result']),
    adapterDownloadDuration: histogram(
      'adapter_download_duration',
      'Adapter download duration in seconds',
      DURATION_BUCKETS,
      ['source'],
    ),
    adapterLoadDuration: histogram(
      'adapter_load_duration',
      'Seconds to parse an adapter and load it into the backend',
      DURATION_BUCKETS,
      ['source'],
    ),
  }
  registerSpeculationMetrics(registry, options.speculation)
  if (options.gateway) registerGatewayMetrics(registry, options.gateway)

  const m = instruments
  return {
    registry,
    instruments,
    requestStarted: () => m.requestCount.inc(),
    requestSucceeded(t) {
      m.requestSuccess.inc()
      m.requestDuration.observe(t.durationS)
      if (t.validationS !== undefined) m.requestValidationDuration.observe(t.validationS)
      if (t.queueS !== undefined) m.requestQueueDuration.observe(t.queueS)
      if (t.inferenceS !== undefined) {
        m.requestInferenceDuration.observe(t.inferenceS)
        if (t.generatedTokens > 0) m.requestMeanTimePerTokenDuration.observe(t.inferenceS / t.generatedTokens)
      }
      m.requestInputLength.observe(t.inputTokens)
      m.requestGeneratedTokens.observe(t.generatedTokens)
      m.requestSkippedTokens.observe(t.skippedTokens ?? 0)
      if (t.maxNewTokens !== undefined) m.requestMaxNewTokens.observe(t.maxNewTokens)
    },
    requestFailed: (errorType) => m.requestFailure.inc({ err: safeLabel(errorType) }),
    requestCancelled: () => m.requestCancelled.inc(),
    authChecked: (source, result) => m.adapterAuthChecks.inc({ source: safeLabel(source), result }),
    adapterDownloaded(source, result, durationS) {
      const label = safeLabel(source)
      m.adapterDownloads.inc({ source: label, result })
      if (durationS !== undefined && result === 'downloaded')
        m.adapterDownloadDuration.observe({ source: label }, durationS)
    },
    adapterLoaded: (source, durationS) => m.adapterLoadDuration.observe({ source: safeLabel(source) }, durationS),
    batchStep(method, size, durationS, ok) {
      m.batchInferenceCount.inc({ method })
      ;(ok ? m.batchInferenceSuccess : m.batchInferenceFailure).inc({ method })
      m.batchInferenceDuration.observe({ method }, durationS)
      m.batchNextSize.observe(size)
    },
  }
}

/**
 * `loom_speculation_*`: Medusa verification steps, tokens accepted per step (as a distribution and
 * a mean) and acceptance per head. The engine keeps the counts; they are copied in at scrape time.
 */
function registerSpeculationMetrics(registry: Registry, read: (() => SpeculationSample | undefined) | undefined): void {
  if (!read) return
  const copy = (counter: Counter<string>, labels: Record<string, string>, value: number) => {
    counter.inc(labels, value)
  }
  new Counter({
    name: 'loom_speculation_verify_steps',
    help: 'Medusa verification rows run (one per speculating sequence per step)',
    registers: [registry],
    collect() {
      this.reset()
      copy(this, {}, read()?.verifySteps ?? 0)
    },
  })
  new Counter({
    name: 'loom_speculation_accepted_tokens',
    help: 'Candidate tokens accepted by Medusa verification (reported as skipped tokens)',
    registers: [registry],
    collect() {
      this.reset()
      copy(this, {}, read()?.acceptedTokens ?? 0)
    },
  })
  new Counter({
    name: 'loom_speculation_candidate_tokens',
    help: 'Candidate tokens fed for Medusa verification',
    registers: [registry],
    collect() {
      this.reset()
      copy(this, {}, read()?.candidateTokens ?? 0)
    },
  })
  new Counter({
    name: 'loom_speculation_steps_by_accepted',
    help: 'Verification rows by the number of candidates they accepted',
    labelNames: ['accepted'],
    registers: [registry],
    collect() {
      this.reset()
      for (const [k, n] of (read()?.acceptedHistogram ?? []).entries()) copy(this, { accepted: String(k) }, n)
    },
  })
  new Gauge({
    name: 'loom_speculation_mean_accepted_per_step',
    help: 'Mean candidates accepted per verification row since start',
    registers: [registry],
    collect() {
      const s = read()
      this.set(s && s.verifySteps > 0 ? s.acceptedTokens / s.verifySteps : 0)
    },
  })
  for (const [name, pick, what] of [
    ['loom_speculation_head_proposed', (h: { proposed: number }) => h.proposed, 'candidate tree reached it'],
    ['loom_speculation_head_accepted', (h: { accepted: number }) => h.accepted, 'accepted path reached it'],
  ] as const) {
    new Counter({
      name,
      help: `Per Medusa head (0 = the token two ahead): verification rows whose ${what}`,
      labelNames: ['head'],
      registers: [registry],
      collect() {
        this.reset()
        for (const [h, head] of (read()?.heads ?? []).entries()) copy(this, { head: String(h) }, pick(head as never))
      },
    })
  }
}
