/**
 * The values the restricted unpickler builds. They are inert data: a `PickleGlobal` is a name
 * the policy allowed, never a live function, and objects only come from the policy's hooks.
 */

/** A Python tuple (kept apart from lists so a policy can tell them apart). */
export class PickleTuple {
  constructor(readonly items: readonly PickleValue[]) {}
}

/** A Python dict or `collections.OrderedDict`, in insertion order. */
export class PickleDict {
  readonly map = new Map<PickleKey, PickleValue>()
  constructor(readonly ordered: boolean) {}
}

/** A Python set or frozenset. */
export class PickleSet {
  readonly items: PickleValue[] = []
  constructor(readonly frozen: boolean) {}
}

/**
 * A global the policy allowed. `call` is what REDUCE may do with it and `construct` what NEWOBJ
 * may do; a global with neither can only be passed around as a value (a storage type, say).
 */
export interface PickleGlobal {
  readonly kind: 'global'
  /** `module.name`, as errors print it. */
  readonly qualname: string
  call?(args: readonly PickleValue[]): PickleValue
  construct?(args: readonly PickleValue[]): PickleValue
}

/** An object a policy hook made (a tensor, a storage); the unpickler only moves it around. */
export interface PickleObject {
  readonly kind: string
}

/** Values that may be dict keys (Python requires hashable keys; tuples compare by identity here). */
export type PickleKey = null | boolean | number | bigint | string | PickleTuple

export type PickleValue = PickleKey | Uint8Array | PickleValue[] | PickleDict | PickleSet | PickleGlobal | PickleObject

/** A short description of a value's type, for error messages. */
export function describePickleValue(v: PickleValue): string {
  if (v === null) return 'None'
  if (typeof v === 'boolean') return 'a bool'
  if (typeof v === 'number' || typeof v === 'bigint') return 'an int or float'
  if (typeof v === 'string') return 'a string'
  if (v instanceof Uint8Array) return 'bytes'
  if (Array.isArray(v)) return 'a list'
  if (v instanceof PickleTuple) return 'a tuple'
  if (v instanceof PickleDict) return v.ordered ? 'an OrderedDict' : 'a dict'
  if (v instanceof PickleSet) return 'a set'
  if (v.kind === 'global') return `\`${(v as PickleGlobal).qualname}\``
  return `a ${v.kind}`
}
