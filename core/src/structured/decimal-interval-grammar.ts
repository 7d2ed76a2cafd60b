/**
 * EBNF for the JSON numbers inside an interval, written digit by digit the way regex-range
 * generators do, because XGrammar 0.1.27's own bounds are wrong (`maximum: 150` lets 151–159
 * through, `minimum: 0.5` lets 0.4 through, `exclusiveMinimum: 0` lets 0 through).
 *
 * What the grammar produces, exactly:
 * - plain decimals `-?(0|[1-9][0-9]*)(\.[0-9]+)?`, never an exponent and never `-0`;
 * - integers (`integer: true`) never have a fraction;
 * - a number has at most `fractionDigits` digits after the point (6, or more when a bound needs
 *   them) and at most 15 digits in all, so that every value the grammar writes converts to a
 *   distinct double: comparing the text exactly (what the grammar does) and comparing the parsed
 *   doubles (what a validator does) then always agree, exclusive bounds included;
 * - every such decimal inside the interval is produced, and none outside it.
 * It is therefore a subset of the schema's numbers (no exponents, no 16th digit; a missing bound,
 * or one beyond that range on its open side, becomes the largest 15-digit magnitude), never a
 * superset.
 */

/** One side of an interval: the bound and whether it is excluded. */
export interface IntervalBound {
  readonly value: number
  readonly exclusive: boolean
}

export interface NumericInterval {
  readonly integer: boolean
  readonly min?: IntervalBound
  readonly max?: IntervalBound
}

/** Rules for one interval: `root` is the name matching it; `rules` are `name ::= body` lines. */
export interface IntervalGrammar {
  readonly root: string
  readonly rules: string[]
}

/** Why an interval has no grammar; the caller turns it into a `grammar_unsupported` error. */
export class IntervalUnsupportedError extends Error {}

/** Doubles hold every decimal of 15 significant digits exactly enough to tell them apart. */
const MAX_DIGITS = 15
/** Fraction digits a `number` gets when its bounds do not need more. */
const DEFAULT_FRACTION_DIGITS = 6

/** A finite number as `mantissa / 10^scale` exactly as JavaScript prints it (its shortest form). */
interface Decimal {
  readonly mantissa: bigint
  readonly scale: number
}

function decimalOf(x: number): Decimal {
  if (!Number.isFinite(x)) throw new IntervalUnsupportedError(`bound ${x} is not a finite number`)
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(x))
  if (match === null) throw new IntervalUnsupportedError(`bound ${x} is not a number`)
  const [, sign, whole, fraction = '', exp = '0'] = match
  let mantissa = BigInt(`${sign}${whole}${fraction}`)
  let scale = fraction.length - Number(exp)
  if (scale < 0) {
    mantissa *= 10n ** BigInt(-scale)
    scale = 0
  }
  return { mantissa, scale }
}

/** `d` at `scale` fraction digits, rounded toward -∞ (`up` false) or +∞ (`up` true). */
function scaled(d: Decimal, scale: number, up: boolean): bigint {
  if (scale >= d.scale) return d.mantissa * 10n ** BigInt(scale - d.scale)
  const div = 10n ** BigInt(d.scale - scale)
  const q = d.mantissa / div // truncates toward zero
  const exact = q * div === d.mantissa
  if (exact) return q
  if (up) return d.mantissa > 0n ? q + 1n : q
  return d.mantissa < 0n ? q - 1n : q
}

/** Digits of the integer part of |d| (0 for |d| < 1). */
function integerDigits(d: Decimal): number {
  const whole = (d.mantissa < 0n ? -d.mantissa : d.mantissa) / 10n ** BigInt(d.scale)
  return whole === 0n ? 0 : whole.toString().length
}

/** Builds deduplicated rules: equal bodies share one name. */
class RuleSet {
  readonly rules: string[] = []
  readonly #byBody = new Map<string, string>()
  readonly #prefix: string

  constructor(prefix: string) {
    this.#prefix = prefix
  }

  intern(body: string): string {
    const known = this.#byBody.get(body)
    if (known !== undefined) return known
    const name = `${this.#prefix}_${this.#byBody.size}`
    this.#byBody.set(body, name)
    this.rules.push(`${name} ::= ${body}`)
    return name
  }
}

/** Null stands for the empty string. */
type Ref = string | null

const seq = (head: string, next: Ref): string => (next === null ? head : `${head} ${next}`)
const digitClass = (a: number, b: number): string => (a === b ? `"${a}"` : `[${a}-${b}]`)

/**
 * The grammar of all decimals of one integer-part length `k` (and `fraction` fraction digits at
 * most) whose digit strings, padded with zeros to `k + fraction` digits, lie in [lo, hi] (both
 * given as strings of that length). States are (position, still equal to lo's prefix, still equal
 * to hi's prefix); a fraction may stop wherever the rest padded with zeros would still be ≥ lo.
 */
function fixedLength(rules: RuleSet, lo: string, hi: string, k: number, fraction: number): Ref {
  const n = k + fraction
  const memo = new Map<string, Ref>()
  const allZero = (s: string, p: number): boolean => /^0*$/.test(s.slice(p))
  const allNine = (s: string, p: number): boolean => /^9*$/.test(s.slice(p))

  /** Digits from position p on; `required`: a digit must come here (just after the point). */
  const state = (p: number, loT: boolean, hiT: boolean, required: boolean): Ref => {
    // A bound whose remaining digits are all 0 (lo) or all 9 (hi) constrains nothing more.
    if (loT && allZero(lo, p)) loT = false
    if (hiT && allNine(hi, p)) hiT = false
    const key = `${p}:${loT}:${hiT}:${required}`
    if (memo.has(key)) return memo.get(key)!
    let ref: Ref
    if (p === n) {
      ref = null
    } else if (p === k && !required) {
      // Between the integer part and the fraction: stop (if the rest may be zeros) or write '.'.
      const dot = `"." ${state(p, loT, hiT, true)}`
      ref = rules.intern(loT ? `(${dot})` : `("" | ${dot})`)
    } else {
      const a = loT ? Number(lo[p]) : 0
      const b = hiT ? Number(hi[p]) : 9
      // Consecutive digits leading to the same state share one character class.
      const groups: { from: number; to: number; next: Ref }[] = []
      for (let d = a; d <= b; d++) {
        const next = p + 1 === n ? null : state(p + 1, loT && d === a, hiT && d === b, false)
        const last = groups[groups.length - 1]
        if (last !== undefined && last.next === next) last.to = d
        else groups.push({ from: d, to: d, next })
      }
      const digits = groups.map((g) => seq(digitClass(g.from, g.to), g.next)).join(' | ')
      // In the fraction (not right after the point) the number may also end here.
      const mayStop = p > k && !required && !loT
      ref = rules.intern(mayStop ? `("" | ${digits})` : `(${digits})`)
    }
    memo.set(key, ref)
    return ref
  }

  return state(0, true, true, false)
}

/**
 * Non-negative decimals whose value times 10^fraction lies in [a, b] (a ≤ b, both ≥ 0), with an
 * integer part of at most `maxIntDigits` digits: one alternative per integer-part length.
 */
function magnitude(rules: RuleSet, a: bigint, b: bigint, fraction: number, maxIntDigits: number): string[] {
  const alternatives: string[] = []
  for (let k = 1; k <= maxIntDigits; k++) {
    const lengthLo = k === 1 ? 0n : 10n ** BigInt(k - 1 + fraction)
    const lengthHi = 10n ** BigInt(k + fraction) - 1n
    const lo = a > lengthLo ? a : lengthLo
    const hi = b < lengthHi ? b : lengthHi
    if (lo > hi) continue
    const width = k + fraction
    const ref = fixedLength(rules, lo.toString().padStart(width, '0'), hi.toString().padStart(width, '0'), k, fraction)
    if (ref !== null) alternatives.push(ref)
  }
  return alternatives
}

/**
 * EBNF rules (names starting with `prefix`) matching exactly the JSON numbers of the interval
 * that have at most 15 digits (see the file comment). Throws `IntervalUnsupportedError` when a
 * bound needs more than 15 digits or no such number lies in the interval.
 */
export function intervalGrammar(prefix: string, interval: NumericInterval): IntervalGrammar {
  // A bound beyond the largest 15-digit magnitude, on the side it does not restrict, is no bound
  // here (every number this grammar writes already lies inside it): the ±(2^53 − 1) that JSON
  // schema generators (zod's `.int()`) put on every integer then costs nothing.
  const widest = 10 ** MAX_DIGITS - 1
  const outside = (b: IntervalBound | undefined, sign: 1 | -1): boolean =>
    b === undefined || sign * b.value > widest || (sign * b.value === widest && !b.exclusive)
  const min = outside(interval.min, -1) ? null : decimalOf(interval.min!.value)
  const max = outside(interval.max, 1) ? null : decimalOf(interval.max!.value)
  const bounds = [min, max].filter((d): d is Decimal => d !== null)
  const boundIntDigits = Math.max(0, ...bounds.map(integerDigits))
  let fraction = 0
  if (!interval.integer) {
    const boundFraction = Math.max(0, ...bounds.map((d) => d.scale))
    fraction = Math.max(boundFraction, Math.min(DEFAULT_FRACTION_DIGITS, MAX_DIGITS - Math.max(1, boundIntDigits)))
  }
  if (Math.max(1, boundIntDigits) + fraction > MAX_DIGITS) {
    throw new IntervalUnsupportedError(`bounds needing more than ${MAX_DIGITS} digits are not supported`)
  }
  const maxIntDigits = MAX_DIGITS - fraction
  const limit = 10n ** BigInt(MAX_DIGITS) - 1n
  // The interval in units of 10^-fraction, closed: exclusive bounds step one unit inward.
  let lo = -limit
  let hi = limit
  if (min !== null) {
    const s = scaled(min, fraction, true)
    const exactlyOnGrid = scaled(min, fraction, false) === s
    lo = interval.min!.exclusive && exactlyOnGrid ? s + 1n : s
  }
  if (max !== null) {
    const s = scaled(max, fraction, false)
    const exactlyOnGrid = scaled(max, fraction, true) === s
    hi = interval.max!.exclusive && exactlyOnGrid ? s - 1n : s
  }
  if (lo < -limit) lo = -limit
  if (hi > limit) hi = limit
  if (lo > hi) throw new IntervalUnsupportedError('no number of at most 15 digits satisfies the bounds')

  const rules = new RuleSet(prefix)
  const alternatives: string[] = []
  if (lo < 0n) {
    // Negative values are '-' and a magnitude; zero is only ever written without a sign.
    const a = hi < 0n ? -hi : 1n
    for (const ref of magnitude(rules, a, -lo, fraction, maxIntDigits)) alternatives.push(`"-" ${ref}`)
  }
  if (hi >= 0n) alternatives.push(...magnitude(rules, lo > 0n ? lo : 0n, hi, fraction, maxIntDigits))
  const root = `${prefix}_root`
  rules.rules.push(`${root} ::= (${alternatives.map((alt) => `(${alt})`).join(' | ')})`)
  return { root, rules: rules.rules }
}
