import type { DestinationStream } from 'pino'
import { createHttpApp, type HttpApp, type HttpConfig, type InfoResponse } from '../../src/http/index.ts'
import { createLogger } from '../../src/logging/index.ts'
import { createMetrics, type GaugeSample, type Metrics } from '../../src/metrics/index.ts'

export const BODY_LIMIT = 1024 * 1024

export const INFO: InfoResponse = {
  model_id: 'tiny-llama',
  model_dtype: 'float32',
  model_device_type: 'cpu',
  backend: 'cuda-native:cpu',
  max_input_length: 1023,
  max_total_tokens: 1024,
  max_batch_size: 8,
  max_concurrent_requests: 128,
  max_stop_sequences: 4,
  max_batch_prefill_tokens: 4096,
  version: '0.1.0',
  sha: null,
  adapter_sources: ['hub', 'local'],
  default_adapter_source: 'hub',
}

export interface TestServer {
  readonly app: HttpApp
  readonly metrics: Metrics
  /** Every log line written so far, as raw text. */
  logText(): string
  setReady(ready: boolean): void
}

/**
 * A server with a capturing log destination at `trace`, so a test sees everything that is logged.
 * `config` overrides the HTTP config (body limit `BODY_LIMIT`, default timeouts).
 */
export async function startTestServer(
  sample?: () => GaugeSample | undefined,
  config: Partial<HttpConfig> = {},
): Promise<TestServer> {
  const lines: string[] = []
  const destination: DestinationStream = {
    write(line: string) {
      lines.push(line)
    },
  }
  const logger = createLogger({ level: 'trace', destination })
  const metrics = createMetrics(sample === undefined ? {} : { sample })
  let ready = false
  const app = await createHttpApp({
    config: { bodyLimit: BODY_LIMIT, ...config },
    isReady: () => ready,
    info: () => INFO,
    metrics,
    logger,
  })
  return {
    app,
    metrics,
    logText: () => lines.join(''),
    setReady: (value) => {
      ready = value
    },
  }
}
