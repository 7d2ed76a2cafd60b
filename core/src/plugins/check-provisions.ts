import { LoomError } from '../errors/index.ts'
import type { AdapterSource, AuthChecker, ContractName } from '../contracts/index.ts'
import type { LoadedPlugin, Provision } from './plugin-set.ts'

/**
 * After one plugin's `register`: it provided every contract it declared and nothing else, and its
 * sources and checkers carry the names the server routes by. Throws `plugin_contract_mismatch`.
 */
export function checkOwnProvisions(plugin: LoadedPlugin, provided: readonly Provision[]): void {
  const contracts = new Set(provided.map((p) => p.contract))
  for (const contract of contracts) {
    if (!plugin.provides.includes(contract)) {
      throw mismatch(plugin, `provides ${contract}, which is not declared in its \`provides\` list`)
    }
  }
  for (const contract of plugin.provides) {
    if (!contracts.has(contract)) {
      throw mismatch(plugin, `declares ${contract} in \`provides\` but register() did not provide one`)
    }
  }
  for (const { contract, implementation } of provided) {
    const problem = shapeProblem(contract, implementation)
    if (problem !== null) throw mismatch(plugin, `provided ${a(contract)} ${problem}`)
  }
}

/** What is wrong with an implementation of a keyed contract, or null. Other contracts are trusted. */
function shapeProblem(contract: ContractName, impl: unknown): string | null {
  if (impl === null || typeof impl !== 'object') return 'that is not an object'
  if (contract === 'AdapterSource') {
    const source = impl as Partial<AdapterSource>
    if (typeof source.name !== 'string' || source.name === '') return 'without a non-empty string `name`'
    if (typeof source.resolve !== 'function' || typeof source.fetch !== 'function') {
      return `\`${source.name}\` without resolve() and fetch() methods`
    }
  }
  if (contract === 'AuthChecker') {
    const checker = impl as Partial<AuthChecker>
    if (typeof checker.source !== 'string' || checker.source === '') return 'without a non-empty string `source`'
    if (typeof checker.check !== 'function') return `for \`${checker.source}\` without a check() method`
  }
  return null
}

/**
 * Across plugins: adapter_source names are unique, one AuthChecker per source, and one provider
 * of each single contract (the Backend / StepRunner pair counts as one: the model runtime).
 * `earlier` holds the provisions accepted so far; `added` the new plugin's.
 */
export function checkConflicts(earlier: readonly Provision[], added: readonly Provision[]): void {
  const seen = [...earlier]
  for (const next of added) {
    for (const prior of seen) {
      const conflict = conflictBetween(prior, next)
      if (conflict !== null) throw conflict
    }
    seen.push(next)
  }
}

function conflictBetween(prior: Provision, next: Provision): LoomError | null {
  if (prior.contract === 'AdapterSource' && next.contract === 'AdapterSource') {
    const name = (next.implementation as AdapterSource).name
    if ((prior.implementation as AdapterSource).name !== name) return null
    return new LoomError('source_name_conflict', { source: name, first: prior.plugin.label, second: next.plugin.label })
  }
  if (prior.contract === 'AuthChecker' && next.contract === 'AuthChecker') {
    const source = (next.implementation as AuthChecker).source
    if ((prior.implementation as AuthChecker).source !== source) return null
    return new LoomError('contract_conflict', {
      first: prior.plugin.label,
      second: next.plugin.label,
      contract: `the AuthChecker of adapter_source \`${source}\``,
    })
  }
  const runtime = (c: ContractName): boolean => c === 'Backend' || c === 'StepRunner'
  if (runtime(prior.contract) && runtime(next.contract)) {
    const contract = prior.contract === next.contract ? next.contract : 'the model runtime (a Backend or a StepRunner)'
    return new LoomError('contract_conflict', { first: prior.plugin.label, second: next.plugin.label, contract })
  }
  if (prior.contract === next.contract && (next.contract === 'TemplateEngine' || next.contract === 'TokenizerLoader')) {
    return new LoomError('contract_conflict', {
      first: prior.plugin.label,
      second: next.plugin.label,
      contract: next.contract,
    })
  }
  return null
}

/** Startup needs something to run the model. Throws `contract_missing`. */
export function checkRuntimePresent(provisions: readonly Provision[]): void {
  if (!provisions.some((p) => p.contract === 'Backend' || p.contract === 'StepRunner')) {
    throw new LoomError('contract_missing', {
      contract: 'a Backend or StepRunner',
      example: '`@loom/backend-cuda-native`',
    })
  }
}

function mismatch(plugin: LoadedPlugin, detail: string): LoomError {
  return new LoomError('plugin_contract_mismatch', { plugin: plugin.label, detail })
}

function a(contract: ContractName): string {
  return /^[AEIOU]/.test(contract) ? `an ${contract}` : `a ${contract}`
}
