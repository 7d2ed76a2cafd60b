/**
 * llama.cpp for the peer benchmark, through `node-llama-cpp` (pinned). It is not a dependency of
 * the repository: its optional packages carry CUDA and Vulkan builds of hundreds of MB that every
 * `npm ci` would fetch. The bench installs it on first use into its cache folder with npm, the
 * main package and this platform's prebuilt CPU binaries only, no install scripts, and imports it
 * from there. It is then loaded with `gpu: false` and `build: 'never'`, so it never downloads or
 * compiles llama.cpp: it runs the prebuilt binary or fails.
 *
 * Only the few members of node-llama-cpp's API the bench uses are typed here.
 */
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

export const NODE_LLAMA_CPP_VERSION = '3.22.1'

/** Prebuilt CPU-only binary packages of node-llama-cpp by `${platform}-${arch}`. */
const PREBUILT: Readonly<Record<string, string>> = {
  'linux-x64': '@node-llama-cpp/linux-x64',
  'linux-arm64': '@node-llama-cpp/linux-arm64',
  'darwin-arm64': '@node-llama-cpp/mac-arm64-metal',
  'darwin-x64': '@node-llama-cpp/mac-x64',
  'win32-x64': '@node-llama-cpp/win-x64',
}

/** A token id. */
export type LlamaToken = number

/** What `controlledEvaluate` should produce after a token: a sampled next token, raw logits. */
export interface GenerateNext {
  readonly token?: boolean
  readonly logits?: boolean
  readonly options?: { readonly temperature?: number }
}

export interface LlamaContextSequence {
  clearHistory(): Promise<void>
  readonly nextTokenIndex: number
  controlledEvaluate(
    input: (LlamaToken | readonly [LlamaToken, { readonly generateNext?: GenerateNext }])[],
  ): Promise<({ next?: { token?: LlamaToken | null; logits?: Map<LlamaToken, number> } } | undefined)[]>
}

export interface LlamaContext {
  readonly contextSize: number
  readonly batchSize: number
  readonly idealThreads: number
  readonly flashAttention: boolean
  getSequence(): LlamaContextSequence
  dispose(): Promise<void>
}

export interface LlamaModel {
  createContext(options: {
    contextSize: number
    sequences: number
    batchSize: number
    threads: { ideal: number; min: number }
    flashAttention?: boolean
    performanceTracking?: boolean
  }): Promise<LlamaContext>
  dispose(): Promise<void>
}

export interface Llama {
  readonly cpuMathCores: number
  readonly gpu: string | false
  readonly buildType: string
  readonly llamaCppRelease: { readonly repo: string; readonly release: string }
  readonly systemInfo: string
  loadModel(options: { modelPath: string; gpuLayers: number; useMmap?: boolean }): Promise<LlamaModel>
  dispose(): Promise<void>
}

interface NodeLlamaCppModule {
  getLlama(options: {
    gpu: false
    build: 'never'
    skipDownload: boolean
    usePrebuiltBinaries: boolean
    progressLogs: boolean
    maxThreads: number
    logLevel: string
    logger?: (level: string, message: string) => void
  }): Promise<Llama>
}

/** The prebuilt package for this machine, or an error saying there is none. */
function prebuiltPackage(): string {
  const key = `${process.platform}-${process.arch}`
  const pkg = PREBUILT[key]
  if (!pkg) throw new Error(`node-llama-cpp has no prebuilt CPU binary package for ${key}`)
  return pkg
}

/**
 * Install node-llama-cpp into `cacheDir` unless a complete copy is there, then import it.
 * @param log one line for the first-use install.
 */
export async function loadNodeLlamaCpp(cacheDir: string, log: (line: string) => void): Promise<NodeLlamaCppModule> {
  const dir = path.join(cacheDir, `node-llama-cpp-${NODE_LLAMA_CPP_VERSION}`)
  const marker = path.join(dir, '.complete')
  const entry = path.join(dir, 'node_modules', 'node-llama-cpp', 'dist', 'index.js')
  if (!existsSync(marker) || !existsSync(entry)) {
    const pkg = prebuiltPackage()
    log(
      `installing node-llama-cpp@${NODE_LLAMA_CPP_VERSION} + ${pkg} (prebuilt llama.cpp, CPU only, ~85 MB) ` +
        `into ${dir} (npm, first run only)`,
    )
    mkdirSync(dir, { recursive: true })
    // A package.json of its own, so npm installs here and not into the enclosing workspace.
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'loom-bench-peers', private: true }) + '\n')
    execFileSync(
      process.platform === 'win32' ? 'npm.cmd' : 'npm',
      [
        'install',
        '--prefix',
        dir,
        '--no-save',
        '--no-package-lock',
        '--omit=optional',
        '--ignore-scripts',
        '--no-audit',
        '--no-fund',
        '--no-workspaces',
        `node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`,
        `${pkg}@${NODE_LLAMA_CPP_VERSION}`,
      ],
      { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] },
    )
    writeFileSync(marker, new Date().toISOString() + '\n')
  }
  return (await import(pathToFileURL(entry).href)) as NodeLlamaCppModule
}

/** llama.cpp on the CPU with `threads` threads, from the prebuilt binary only. */
export async function cpuLlama(mod: NodeLlamaCppModule, threads: number, log: (line: string) => void): Promise<Llama> {
  return mod.getLlama({
    gpu: false,
    build: 'never',
    skipDownload: true,
    usePrebuiltBinaries: true,
    progressLogs: false,
    maxThreads: threads,
    logLevel: 'warn',
    logger: (level, message) => {
      // The bench model's eos text is not one llama.cpp knows as end-of-generation; the bench
      // feeds and generates fixed counts of tokens, so that warning says nothing here.
      if (!message.includes('special_eos_id is not in special_eog_ids')) log(`llama.cpp ${level}: ${message.trim()}`)
    },
  })
}
