import type { RawConfig } from './schema.ts'

/** Deeply read-only view of a parsed value: trusted configuration is never mutated after loading. */
export type Frozen<T> = T extends (...args: never[]) => unknown
  ? T
  : T extends readonly (infer E)[]
    ? readonly Frozen<E>[]
    : T extends object
      ? { readonly [K in keyof T]: Frozen<T[K]> }
      : T

declare const validConfigBrand: unique symbol

/**
 * A configuration that passed `ConfigSchema`, with `${VAR}` references substituted and
 * `model.path` / `adapters.cache_dir` made absolute. Only `loadConfig` / `parseConfig` build one,
 * so a function taking `ValidConfig` never re-checks its input (STYLE 4: parse once).
 */
export type ValidConfig = Frozen<RawConfig> & {
  /** Absolute path of the configuration file. */
  readonly file: string
  /** Directory of the configuration file; relative paths in the file resolve against it. */
  readonly dir: string
  /**
   * Key paths (`plugins[1].options.headers.Authorization`) whose value came from `${VAR}`
   * substitution, with the variables used. Errors name the variable instead of echoing the value,
   * which may be a secret.
   */
  readonly fromEnv: ReadonlyMap<string, readonly string[]>
  readonly [validConfigBrand]: true
}

/** Freeze `value` and everything under it (plugin options included) so a plugin cannot edit shared config. */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const child of Object.values(value)) deepFreeze(child)
  }
  return value
}
