/**
 * Turns the benchmark's raw step times into the summary rows, the three acceptance targets of
 * issue 3 (point 6) and the printed markdown table. Times are summarised per configuration as
 * "best" (the lowest per-round median: the least disturbed window on a shared machine) and
 * "median" (over every timed step); median/best says how noisy the run was. Step-time targets
 * are judged on "best"; ratios to base on the median of per-round ratios (see vsBase).
 */
import type { AdapterMix, DecodeRun } from './decode-timer.ts'

export interface SummaryRow {
  readonly dtype: string
  readonly batch: number
  readonly mix: AdapterMix
  readonly bestMs: number
  readonly medianMs: number
  readonly minMs: number
  readonly tokensPerSec: number
  /** LoRA kernels' share of a step in the best round (native timer), ms. */
  readonly loraMs: number
  /** Adapter bytes a step streams (each distinct adapter once) over loraMs, GB/s. */
  readonly loraGBs: number
  /**
   * tokens/s relative to base rows at the same dtype and batch: the median over rounds of
   * (base step / this step) within the round, so each ratio compares two runs taken back to back
   * (the machine's speed drifts by ±10% between rounds on a shared host).
   */
  readonly vsBase: number
  /** Batch-1 only: the bandwidth roofline's step time over the measured best step time. */
  readonly rooflinePct: number | null
  readonly rooflineMs: number | null
}

export interface TargetResult {
  readonly dtype: string
  readonly name: string
  readonly value: number
  readonly limit: string
  readonly pass: boolean
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

/**
 * @param rounds per round, the runs of one dtype (the same configurations each round).
 * @param rooflineMs bandwidth roofline of a batch-1 step for a mix (bytes read / bandwidth), ms.
 */
export function summarise(
  dtype: string,
  rounds: DecodeRun[][],
  rooflineMs: (mix: AdapterMix) => number,
  adapterBytes: number,
): SummaryRow[] {
  const rows: SummaryRow[] = []
  for (const first of rounds[0] ?? []) {
    const runs = rounds.map((r) => r.find((x) => x.batch === first.batch && x.mix === first.mix)!)
    const all = runs.flatMap((r) => r.stepMs)
    const bestRun = runs.reduce((a, b) => (median(b.stepMs) < median(a.stepMs) ? b : a))
    const bestMs = median(bestRun.stepMs)
    const adapters = first.mix === 'base' ? 0 : first.mix === 'one-adapter' ? 1 : first.batch
    const roof = first.batch === 1 ? rooflineMs(first.mix) : null
    rows.push({
      dtype,
      batch: first.batch,
      mix: first.mix,
      bestMs,
      medianMs: median(all),
      minMs: Math.min(...all),
      tokensPerSec: (first.batch * 1000) / bestMs,
      loraMs: bestRun.loraMs,
      loraGBs: adapters > 0 && bestRun.loraMs > 0 ? (adapters * adapterBytes) / (bestRun.loraMs * 1e6) : NaN,
      vsBase: 1,
      rooflinePct: roof === null ? null : (100 * roof) / bestMs,
      rooflineMs: roof,
    })
  }
  const roundMedian = (round: DecodeRun[], batch: number, mix: AdapterMix): number | undefined => {
    const run = round.find((x) => x.batch === batch && x.mix === mix)
    return run ? median(run.stepMs) : undefined
  }
  return rows.map((r) => {
    const ratios = rounds.flatMap((round) => {
      const base = roundMedian(round, r.batch, 'base')
      const mine = roundMedian(round, r.batch, r.mix)
      return base !== undefined && mine !== undefined ? [base / mine] : []
    })
    return ratios.length > 0 ? { ...r, vsBase: median(ratios) } : r
  })
}

/** The three targets for one dtype; a missing configuration fails its target. */
export function judge(dtype: string, rows: readonly SummaryRow[]): TargetResult[] {
  const get = (batch: number, mix: AdapterMix): SummaryRow | undefined =>
    rows.find((r) => r.dtype === dtype && r.batch === batch && r.mix === mix)
  const b1 = get(1, 'base')
  const b8 = get(8, 'base')
  const d32 = get(32, 'distinct')
  const ratio32 = d32?.vsBase ?? NaN
  const step8 = b1 && b8 ? b8.bestMs / b1.bestMs : NaN
  const roof = b1?.rooflinePct ?? NaN
  return [
    { dtype, name: 'all-distinct / base tokens/s at batch 32', value: ratio32, limit: '>= 0.90', pass: ratio32 >= 0.9 },
    { dtype, name: 'batch-8 step / batch-1 step (base)', value: step8, limit: '<= 1.50', pass: step8 <= 1.5 },
    { dtype, name: 'batch-1 base, % of bandwidth roofline', value: roof, limit: '>= 60', pass: roof >= 60 },
  ]
}

const f = (x: number, digits: number): string => (Number.isFinite(x) ? x.toFixed(digits) : 'n/a')

/** The markdown table of every configuration, then the targets. */
export function formatTable(rows: readonly SummaryRow[], targets: readonly TargetResult[]): string {
  const lines = [
    '| dtype | batch | adapters | ms/step best | ms/step median | ms/step min | tokens/s | vs base | LoRA ms (GB/s) | % roofline (B=1) |',
    '|---|---:|---|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for (const r of rows)
    lines.push(
      `| ${r.dtype} | ${r.batch} | ${r.mix} | ${f(r.bestMs, 2)} | ${f(r.medianMs, 2)} | ${f(r.minMs, 2)} | ` +
        `${f(r.tokensPerSec, 1)} | ${f(r.vsBase, 2)} | ` +
        `${r.mix === 'base' ? '' : `${f(r.loraMs, 2)} (${f(r.loraGBs, 1)})`} | ` +
        `${r.rooflinePct === null ? '' : `${f(r.rooflinePct, 0)}% of ${f(r.rooflineMs!, 2)} ms`} |`,
    )
  lines.push('', '| dtype | target | value | limit | result |', '|---|---|---:|---|---|')
  for (const t of targets)
    lines.push(`| ${t.dtype} | ${t.name} | ${f(t.value, 2)} | ${t.limit} | ${t.pass ? 'PASS' : 'FAIL'} |`)
  return lines.join('\n')
}
