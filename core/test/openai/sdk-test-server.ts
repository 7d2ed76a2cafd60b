import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import OpenAI from 'openai'
import { buildModel, type BuildModelOptions } from '@loom/testkit'
import { startTestServer, type TestServer } from '../server/test-server.ts'

/** A test server listening on loopback and an `openai` SDK client pointed at its `/v1`. */
export interface SdkTestServer {
  readonly test: TestServer
  readonly client: OpenAI
  /** `http://127.0.0.1:<port>`, for requests the SDK cannot make (raw bodies). */
  readonly baseUrl: string
}

/**
 * Build a testkit model in `dir`, start a real server on port 0 and connect the official SDK to it
 * (no retries, so a refused request fails the test at once). The caller closes `test`.
 */
export async function startSdkServer(
  dir: string,
  options: {
    model?: BuildModelOptions
    server?: Parameters<typeof startTestServer>[2]
    /** Runs after the model is built, before the server starts (adapters, extra files). */
    prepare?: (modelDir: string, config: Awaited<ReturnType<typeof buildModel>>) => Promise<unknown>
  } = {},
): Promise<SdkTestServer> {
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { seed: 21, ...options.model })
  await options.prepare?.(modelDir, config)
  const test = await startTestServer(join(dir, 'server'), modelDir, options.server)
  try {
    await test.server.listen({ host: '127.0.0.1', port: 0 })
  } catch (err) {
    await test.close()
    throw err
  }
  const { port } = test.server.app.server.address() as AddressInfo
  const baseUrl = `http://127.0.0.1:${port}`
  return { test, baseUrl, client: new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'any-key', maxRetries: 0 }) }
}

/** A response read without the SDK: its status and JSON body (an OpenAI error body on failure). */
export interface RawResponse {
  readonly status: number
  readonly body: { error?: { message: string; type: string; param: string | null; code: string } } & Record<
    string,
    unknown
  >
}

/** POST a raw JSON body (fields the SDK's types refuse) and return the status and parsed body. */
export async function postJson(baseUrl: string, path: string, body: unknown): Promise<RawResponse> {
  const res = await fetch(`${baseUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  return { status: res.status, body: (await res.json()) as RawResponse['body'] }
}
