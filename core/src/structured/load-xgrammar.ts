/**
 * Loads XGrammar (`@mlc-ai/web-xgrammar`), the grammar engine behind structured output, into Node.
 *
 * The package ships one UMD bundle (emscripten + an inlined wasm binary) inside a package marked
 * ESM: imported as a module it neither exports anything nor finds the CommonJS names emscripten's
 * Node path uses. It does work when `require`, `__filename` and `__dirname` exist as globals while
 * the bundle is evaluated and while its wasm module starts, after which the API sits on
 * `globalThis.xgrammar`. This module does exactly that, once, and puts the globals back.
 *
 * XGrammar reports every error (an unsupported schema, a bad call) by printing `[FATAL] …` to
 * stderr and aborting the wasm module. The abort throws a plain `RuntimeError: Aborted()` and
 * leaves the instance's wasm stack unwound, so an instance that aborted must not be trusted with
 * new work. Each load therefore gives a separate instance (`loadXGrammarInstance`), and the
 * instance's stderr is routed to `captureOutput` so callers can turn the `[FATAL]` line into an
 * error message.
 */
import { createRequire } from 'node:module'
import { dirname } from 'node:path'
import { pathToFileURL } from 'node:url'
import type * as XGrammarModule from '@mlc-ai/web-xgrammar'

/** The XGrammar API (`TokenizerInfo`, `GrammarCompiler`, `GrammarMatcher`, …). */
export type XGrammarApi = typeof XGrammarModule

/** One started XGrammar wasm instance. */
export interface XGrammarInstance {
  readonly api: XGrammarApi
  /**
   * The instance's wasm memory, captured while it started, so bitmasks can be copied out of it in
   * one block instead of one binding call per 32 tokens. Null if it could not be captured.
   */
  readonly memory: WebAssembly.Memory | null
  /**
   * Run `fn` while collecting every line XGrammar prints to stderr ("[FATAL] …", "[WARNING] …").
   * Returns what `fn` returned and the lines; if `fn` throws, the error gets the lines as
   * `xgrammarOutput`. Captures run one after another (a later one waits for the earlier), so lines
   * are never attributed to the wrong call. Lines printed outside a capture go to `console.error`.
   */
  captureOutput<T>(fn: () => Promise<T>): Promise<{ value: T; output: string[] }>
}

/** An error thrown inside a `captureOutput` call, with what XGrammar printed before it. */
export interface XGrammarFailure extends Error {
  xgrammarOutput?: string[]
}

const requireHere = createRequire(import.meta.url)

/** Absolute path of the bundle (`lib/index.js`), resolved from this package's dependencies. */
function bundlePath(): string {
  // The package's `main` is the UMD bundle; resolving it never evaluates it.
  return requireHere.resolve('@mlc-ai/web-xgrammar')
}

const GLOBALS = ['require', '__filename', '__dirname', 'xgrammar'] as const
let instanceCount = 0
let shared: Promise<XGrammarInstance> | null = null
// Loads touch process-wide globals; run them one at a time.
let loadChain: Promise<unknown> = Promise.resolve()

/**
 * The process-wide XGrammar instance, started on first use and memoised (a failed start is not
 * memoised, so a later call retries).
 */
export function loadXGrammar(): Promise<XGrammarInstance> {
  if (shared === null) {
    shared = loadXGrammarInstance()
    shared.catch(() => {
      shared = null
    })
  }
  return shared
}

/**
 * Start a new, independent XGrammar instance (its own wasm memory). Use this after an instance
 * aborted; everything created from the old instance keeps working on the old one.
 */
export function loadXGrammarInstance(): Promise<XGrammarInstance> {
  const next = loadChain.then(startInstance)
  loadChain = next.catch(() => undefined)
  return next
}

async function startInstance(): Promise<XGrammarInstance> {
  const file = bundlePath()
  const g = globalThis as Record<string, unknown>
  const saved = GLOBALS.map((name) => [name, Object.getOwnPropertyDescriptor(g, name)] as const)
  const originalConsoleError = console.error
  const originalInstantiate = WebAssembly.instantiate
  let memory: WebAssembly.Memory | null = null
  let capture: string[] | null = null
  // Emscripten binds its stderr printer to `console.error` when the wasm module starts; a stable
  // forwarder bound then lets every later line be captured or passed on.
  const forward = (...args: unknown[]): void => {
    if (capture !== null) capture.push(args.map(String).join(' '))
    else originalConsoleError.apply(console, args)
  }
  try {
    g.require = requireHere
    g.__filename = file
    g.__dirname = dirname(file)
    delete g.xgrammar
    console.error = forward
    // Emscripten keeps its Memory private; note it as the bundle instantiates its wasm binary.
    const spy = async (...args: unknown[]): Promise<unknown> => {
      const result = await (originalInstantiate as (...a: unknown[]) => Promise<unknown>)(...args)
      const instance = (result as { instance?: WebAssembly.Instance }).instance ?? result
      if (instance instanceof WebAssembly.Instance) {
        for (const value of Object.values(instance.exports)) if (value instanceof WebAssembly.Memory) memory = value
      }
      return result
    }
    WebAssembly.instantiate = spy as typeof WebAssembly.instantiate
    // A query string makes Node evaluate the bundle again: a fresh closure, a fresh wasm instance.
    await import(`${pathToFileURL(file).href}?instance=${++instanceCount}`)
    const api = g.xgrammar as XGrammarApi | undefined
    if (api === undefined || typeof api.GrammarCompiler?.createGrammarCompiler !== 'function') {
      throw new Error(`${file} did not define globalThis.xgrammar`)
    }
    // Start the wasm module now, while the globals exist (its Node setup reads them).
    const probe = await api.TokenizerInfo.createTokenizerInfo([])
    probe.dispose()
    let queue: Promise<unknown> = Promise.resolve()
    const run = async <T>(fn: () => Promise<T>): Promise<{ value: T; output: string[] }> => {
      const lines: string[] = []
      capture = lines
      try {
        return { value: await fn(), output: lines }
      } catch (err) {
        if (err instanceof Error) (err as XGrammarFailure).xgrammarOutput = lines
        throw err
      } finally {
        capture = null
      }
    }
    const captureOutput = <T>(fn: () => Promise<T>): Promise<{ value: T; output: string[] }> => {
      const result = queue.then(() => run(fn))
      queue = result.catch(() => undefined)
      return result
    }
    return { api, memory, captureOutput }
  } finally {
    console.error = originalConsoleError
    WebAssembly.instantiate = originalInstantiate
    for (const [name, descriptor] of saved) {
      if (descriptor === undefined) delete g[name]
      else Object.defineProperty(g, name, descriptor)
    }
  }
}
