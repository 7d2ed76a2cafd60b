import type { Drafter } from '../sequence.ts'

/** The two drafters a request with Medusa heads can use when prompt lookup is configured too. */
export type ChosenDrafter = Extract<Drafter, 'medusa' | 'prompt-lookup'>

export interface DrafterChoiceOptions {
  /** Keys remembered (least recently used forgotten first), however many adapters pass. */
  readonly maxKeys: number
  /**
   * Admissions per key that try each drafter before either is preferred (2 x warmup in all, in
   * Thue-Morse order: see `choose`).
   */
  readonly warmup: number
  /**
   * Once a drafter is preferred, the key tries the other after this many admissions; each try
   * that leaves the preference as it was doubles the stretch (up to `maxExploreEvery`), and a
   * change of preference starts it again from here.
   */
  readonly exploreEvery: number
  /** The longest stretch of admissions between tries of the other drafter. */
  readonly maxExploreEvery: number
  /**
   * The warm-up ends early once both drafters have 2 finished requests and one is this many
   * times as fast as the other: a clear difference needs no more evidence, and every warm-up
   * request spent on the slow drafter costs its whole difference.
   */
  readonly decisive: number
  /** Weight of older requests in a drafter's speed (0-1): lower forgets faster. */
  readonly decay: number
}

export const DEFAULT_DRAFTER_CHOICE: DrafterChoiceOptions = {
  maxKeys: 256,
  warmup: 4,
  exploreEvery: 8,
  maxExploreEvery: 64,
  decisive: 1.2,
  decay: 0.8,
}

/** What one drafter delivered for a key: decayed sums of decode tokens and their milliseconds. */
interface Arm {
  tokens: number
  ms: number
  /** Requests that finished with it. */
  finished: number
}

interface KeyState {
  readonly medusa: Arm
  readonly lookup: Arm
  admissions: number
  /** The admission that next tries the other drafter (-1: still warming up). */
  nextTry: number
  /** Admissions between tries of the other drafter (see `exploreEvery`). */
  stretch: number
}

/**
 * Which drafter a request that has Medusa heads uses when prompt lookup is configured too: its
 * heads or prompt lookup, chosen per key (adapter × speculator × greedy/sampled × how many
 * requests were in flight at its admission, since that sets a request's speed as much as its
 * drafter does) by the decode speed each delivered to the key's finished requests (tokens after
 * the first over the time from the first token to the last).
 *
 * Why: heads trained on the base model's outputs draft poorly for an adapter, and on text that
 * repeats itself prompt lookup drafts better than heads at all (on the demo model, sequential
 * greedy traffic ran 1.51× with lookup vs 1.16× with heads for base requests, 1.30× vs 1.15× for
 * `devil`). Both are lossless, so the choice changes speed only. The policy learns per key, so one
 * adapter's traffic never moves another's choice; each key's state is a few numbers in a bounded LRU.
 *
 * How: the first 2 x `warmup` admissions try both drafters in Thue-Morse order (heads, lookup,
 * lookup, heads, lookup, heads, heads, lookup): traffic that cycles through 2 or 4 prompts (or
 * alternates two kinds of request) gives each drafter the same prompts, where plain alternation
 * would judge heads on the odd ones and lookup on the even ones. The warm-up ends early when one
 * drafter is clearly faster (`decisive`). Then the faster one is used, and the other is tried
 * after `exploreEvery` admissions, so a key whose traffic changes can switch; each try that
 * confirms the choice doubles the stretch to the next (up to `maxExploreEvery`), so a settled key
 * spends ever fewer requests on its slower drafter. Speeds are ratios of decayed sums, so a few
 * slow requests move them only partly.
 */
export class DrafterChoice {
  private readonly keys = new Map<string, KeyState>()

  constructor(private readonly options: DrafterChoiceOptions = DEFAULT_DRAFTER_CHOICE) {
    const { maxKeys, warmup, exploreEvery, maxExploreEvery } = options
    if (!(maxKeys >= 1 && warmup >= 0 && exploreEvery >= 2 && maxExploreEvery >= exploreEvery))
      throw new RangeError(
        'drafter choice: maxKeys >= 1, warmup >= 0, exploreEvery >= 2 and maxExploreEvery >= exploreEvery are required',
      )
    if (!(options.decisive >= 1)) throw new RangeError('drafter choice: decisive must be at least 1')
    if (!(options.decay > 0 && options.decay <= 1)) throw new RangeError('drafter choice: decay must be in (0, 1]')
  }

  /** The drafter for the next admission under `key`. */
  choose(key: string): ChosenDrafter {
    const state = this.state(key)
    const n = state.admissions++
    if (state.nextTry < 0) {
      if (n < 2 * this.options.warmup && !this.decisive(state)) return thueMorse(n) ? 'prompt-lookup' : 'medusa'
      state.nextTry = n + state.stretch
    }
    const best = this.preferred(state)
    if (n < state.nextTry) return best
    state.nextTry = n + state.stretch
    return best === 'medusa' ? 'prompt-lookup' : 'medusa'
  }

  /**
   * A finished request of `key` that used `drafter`: `tokens` decode tokens in `ms`. Requests too
   * short to time (fewer than 2 tokens or no measurable time) are not counted.
   */
  record(key: string, drafter: ChosenDrafter, tokens: number, ms: number): void {
    if (!(tokens >= 2 && ms > 0)) return
    const state = this.keys.get(key)
    if (state === undefined) return // forgotten meanwhile: its next admissions start over
    const before = this.preferred(state)
    const arm = drafter === 'medusa' ? state.medusa : state.lookup
    arm.tokens = arm.tokens * this.options.decay + tokens
    arm.ms = arm.ms * this.options.decay + ms
    arm.finished++
    if (state.nextTry < 0) return // warming up: no stretch yet
    const after = this.preferred(state)
    // A changed preference is looked at again soon; a try of the other drafter that left it as it
    // was makes the next try wait twice as long.
    if (after !== before) {
      state.stretch = this.options.exploreEvery
      state.nextTry = Math.min(state.nextTry, state.admissions + state.stretch)
    } else if (drafter !== after) {
      state.stretch = Math.min(this.options.maxExploreEvery, 2 * state.stretch)
    }
  }

  /** The faster drafter of a key so far (heads until both have finished requests), for tests and logs. */
  preferredFor(key: string): ChosenDrafter | null {
    const state = this.keys.get(key)
    return state === undefined ? null : this.preferred(state)
  }

  /** Decode tokens per millisecond each drafter delivered to `key` (NaN before any finished). */
  speeds(key: string): { medusa: number; lookup: number } | null {
    const state = this.keys.get(key)
    if (state === undefined) return null
    return { medusa: speed(state.medusa), lookup: speed(state.lookup) }
  }

  /** Whether the warm-up has seen enough: 2 finished requests each, one drafter `decisive` times as fast. */
  private decisive(state: KeyState): boolean {
    if (state.medusa.finished < 2 || state.lookup.finished < 2) return false
    const heads = speed(state.medusa)
    const lookup = speed(state.lookup)
    return Math.max(heads, lookup) >= this.options.decisive * Math.min(heads, lookup)
  }

  private preferred(state: KeyState): ChosenDrafter {
    if (state.medusa.finished === 0 || state.lookup.finished === 0) return 'medusa'
    return speed(state.lookup) > speed(state.medusa) ? 'prompt-lookup' : 'medusa'
  }

  private state(key: string): KeyState {
    let state = this.keys.get(key)
    if (state !== undefined) {
      this.keys.delete(key) // re-inserted last: the map's order is least recently used first
    } else {
      state = { medusa: emptyArm(), lookup: emptyArm(), admissions: 0, nextTry: -1, stretch: this.options.exploreEvery }
      if (this.keys.size >= this.options.maxKeys) this.keys.delete(this.keys.keys().next().value!)
    }
    this.keys.set(key, state)
    return state
  }
}

function emptyArm(): Arm {
  return { tokens: 0, ms: 0, finished: 0 }
}

/** Bit n of the Thue-Morse sequence: the parity of n's set bits. */
function thueMorse(n: number): boolean {
  let parity = false
  for (let v = n; v > 0; v &= v - 1) parity = !parity
  return parity
}

function speed(arm: Arm): number {
  return arm.finished === 0 ? Number.NaN : arm.tokens / arm.ms
}
