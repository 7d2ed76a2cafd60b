/**
 * Summarises the peer benchmark's rounds into table cells, judges the targets of issue 19 and
 * prints the markdown. A cell's figure per round is tokens/s from the median step (or prefill) of
 * that round; the table shows min/median/max over rounds. The ratio Loom/llama.cpp is the median
 * over rounds of the two engines' figures in the same round, taken back to back, so a burst of
 * load from other processes hits both sides of a ratio alike; the targets are judged on it. Beside
 * it, the ratio of the two engines' best rounds (each one's least disturbed window on a shared
 * machine). The roofline share uses the best round, as `npm run bench` does.
 */
import { median } from '../bench-report.ts'

export type PeerDtype = 'f32' | 'bf16' | '8-bit'
export type PeerMeasure = 'decode B=1' | 'decode B=8' | 'prefill 256'
export const PEER_MEASURES: readonly PeerMeasure[] = ['decode B=1', 'decode B=8', 'prefill 256']

/** Per round, tokens/s of one engine in one cell. */
export interface Spread {
  readonly min: number
  readonly median: number
  readonly max: number
  readonly rounds: readonly number[]
}

export interface PeerCell {
  readonly dtype: PeerDtype
  readonly measure: PeerMeasure
  /** Null with `loomMissing`: Loom cannot run this cell. */
  readonly loom: Spread | null
  readonly loomMissing: string | null
  readonly llama: Spread
  /** Median over rounds of Loom / llama.cpp tokens/s in the same round; null without Loom. */
  readonly ratio: number | null
  /** Loom's best round over llama.cpp's best round; null without Loom. */
  readonly bestRatio: number | null
  /** Decode B=1 only: roofline step time (bytes / bandwidth) over the best round's step time, %. */
  readonly loomRooflinePct: number | null
  readonly llamaRooflinePct: number | null
  readonly rooflineMs: number | null
}

export interface PeerTarget {
  readonly name: string
  readonly value: number | null
  readonly limit: string
  readonly pass: boolean
  /** Why there is no value. */
  readonly note?: string
}

/** The weights check of one dtype: both engines' greedy continuation of the same prompt. */
export interface WeightsCheck {
  readonly dtype: PeerDtype
  readonly steps: number
  readonly sameTokens: number
  /** Largest |Δ| between the engines' log-softmax of each chosen token where both chose it. */
  readonly maxLogprobDiff: number
}

export function spread(perRound: readonly number[]): Spread {
  return { min: Math.min(...perRound), median: median(perRound), max: Math.max(...perRound), rounds: perRound }
}

/**
 * @param loomRounds per round tokens/s, or null when Loom cannot run the cell.
 * @param rooflineMs for decode B=1: the step time the memory bandwidth allows.
 * @param batch tokens per step (decode B=1 only uses it for the roofline).
 */
export function peerCell(
  dtype: PeerDtype,
  measure: PeerMeasure,
  loomRounds: readonly number[] | null,
  loomMissing: string | null,
  llamaRounds: readonly number[],
  rooflineMs: number | null,
): PeerCell {
  const loom = loomRounds ? spread(loomRounds) : null
  const llama = spread(llamaRounds)
  const ratio = loomRounds ? median(loomRounds.map((v, r) => v / llamaRounds[r]!)) : null
  // tokens/s at batch 1 is 1000 / step ms, so roofline ms over step ms is roofline ms × tokens/s / 1000.
  const pct = (s: Spread | null): number | null =>
    rooflineMs === null || s === null ? null : (100 * rooflineMs * s.max) / 1000
  return {
    dtype,
    measure,
    loom,
    loomMissing,
    llama,
    ratio,
    bestRatio: loom ? loom.max / llama.max : null,
    loomRooflinePct: pct(loom),
    llamaRooflinePct: pct(llama),
    rooflineMs,
  }
}

/** The targets of issue 19 over the cells; a cell Loom could not run fails its targets. */
export function judgePeers(cells: readonly PeerCell[]): PeerTarget[] {
  const get = (dtype: PeerDtype, measure: PeerMeasure): PeerCell | undefined =>
    cells.find((c) => c.dtype === dtype && c.measure === measure)
  const targets: PeerTarget[] = []
  const ratioTarget = (dtype: PeerDtype, measure: PeerMeasure, llamaName: string): void => {
    const c = get(dtype, measure)
    const name = `${dtype} ${measure}: Loom / llama.cpp ${llamaName} tokens/s`
    if (!c) return
    const value = c.ratio
    targets.push({
      name,
      value,
      limit: '>= 1.00',
      pass: value !== null && value >= 1,
      ...(c.loomMissing ? { note: c.loomMissing } : {}),
    })
  }
  ratioTarget('8-bit', 'decode B=1', 'Q8_0')
  ratioTarget('bf16', 'prefill 256', 'BF16')
  ratioTarget('f32', 'decode B=1', 'F32')
  ratioTarget('f32', 'decode B=8', 'F32')
  ratioTarget('bf16', 'decode B=1', 'BF16')
  ratioTarget('bf16', 'decode B=8', 'BF16')
  for (const dtype of ['f32', 'bf16', '8-bit'] as const) {
    const c = get(dtype, 'decode B=1')
    if (!c) continue
    targets.push({
      name: `${dtype} decode B=1: Loom's share of the DRAM roofline, %`,
      value: c.loomRooflinePct,
      limit: '>= 75',
      pass: c.loomRooflinePct !== null && c.loomRooflinePct >= 75,
      ...(c.loomMissing ? { note: c.loomMissing } : {}),
    })
  }
  return targets
}

const f = (x: number | null, digits: number): string => (x !== null && Number.isFinite(x) ? x.toFixed(digits) : 'n/a')
const span = (s: Spread): string => `${f(s.min, 1)} / **${f(s.median, 1)}** / ${f(s.max, 1)}`

/** The cells table, the weights check and the targets, as markdown. */
export function formatPeerTables(
  cells: readonly PeerCell[],
  checks: readonly WeightsCheck[],
  targets: readonly PeerTarget[],
): string {
  const lines = [
    '| weights (Loom vs llama.cpp) | cell | Loom tokens/s min / **median** / max | llama.cpp tokens/s min / **median** / max | Loom / llama.cpp, median of rounds (best / best) | % of DRAM roofline in the best round, Loom (llama.cpp) |',
    '|---|---|---:|---:|---:|---:|',
  ]
  const names: Record<PeerDtype, string> = { f32: 'f32 vs F32', bf16: 'bf16 vs BF16', '8-bit': 'int8 vs Q8_0' }
  for (const c of cells) {
    const roof =
      c.rooflineMs === null
        ? ''
        : `${c.loomRooflinePct === null ? 'n/a' : `${f(c.loomRooflinePct, 0)}%`} (${f(c.llamaRooflinePct, 0)}%) of ${f(c.rooflineMs, 2)} ms`
    lines.push(
      `| ${names[c.dtype]} | ${c.measure} | ${c.loom ? span(c.loom) : `n/a (${c.loomMissing})`} | ${span(c.llama)} | ` +
        `${c.ratio === null ? 'n/a' : `**${f(c.ratio, 2)}×** (${f(c.bestRatio, 2)}×)`} | ${roof} |`,
    )
  }
  if (checks.length > 0) {
    lines.push(
      '',
      '| weights | greedy tokens equal (prompt + steps) | max Δ log-softmax of the chosen token |',
      '|---|---:|---:|',
    )
    for (const c of checks) lines.push(`| ${names[c.dtype]} | ${c.sameTokens}/${c.steps} | ${f(c.maxLogprobDiff, 4)} |`)
  }
  lines.push('', '| target (issue 19) | value | limit | result |', '|---|---:|---|---|')
  for (const t of targets)
    lines.push(
      `| ${t.name} | ${t.value === null ? `n/a${t.note ? ` (${t.note})` : ''}` : f(t.value, 2)} | ${t.limit} | ${t.pass ? 'PASS' : 'FAIL'} |`,
    )
  return lines.join('\n')
}
