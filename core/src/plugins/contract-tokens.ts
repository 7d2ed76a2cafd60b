import {
  AdapterSource,
  AuthChecker,
  Backend,
  StepRunner,
  TemplateEngine,
  TokenizerLoader,
  type ContractName,
} from '../contracts/index.ts'

/** The injection token of each contract a plugin may provide. */
export const CONTRACT_TOKENS: Readonly<Record<ContractName, symbol>> = Object.freeze({
  AdapterSource,
  AuthChecker,
  Backend,
  StepRunner,
  TemplateEngine,
  TokenizerLoader,
})

export const CONTRACT_NAMES = Object.keys(CONTRACT_TOKENS) as ContractName[]

/** Contracts that may be provided many times (one per `adapter_source` code). */
export const MULTI_CONTRACTS: ReadonlySet<ContractName> = new Set(['AdapterSource', 'AuthChecker'])

/** The contract a token belongs to, or null for a symbol that is not one of Loom's tokens. */
export function contractOfToken(token: unknown): ContractName | null {
  for (const name of CONTRACT_NAMES) if (CONTRACT_TOKENS[name] === token) return name
  return null
}

export function isContractName(value: unknown): value is ContractName {
  return typeof value === 'string' && (CONTRACT_NAMES as string[]).includes(value)
}
