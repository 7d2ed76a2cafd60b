import type { Draft } from './draft.ts'
import { MedusaTree } from './medusa-tree.ts'
import { TreeFamily } from './tree-family.ts'

/** Prompt-lookup (n-gram) drafting settings (`SpeculationOptions.promptLookup`). */
export interface PromptLookupOptions {
  /** Longest n-gram matched; shorter ones are tried down to 1 when it has no earlier match. */
  readonly ngramSize: number
  /** Tokens drafted after a match (the chain's depth). */
  readonly draftTokens: number
}

/** How far back a lookup scans (tokens): the cost per step stays bounded on long contexts. */
const MAX_LOOKBACK = 4096

/** The chain tree prompt lookup verifies: `[0]`, `[0, 0]`, ... `draftTokens` deep (node `d` at depth `d`). */
export function lookupTree(draftTokens: number): MedusaTree {
  return new MedusaTree(Array.from({ length: draftTokens }, (_, d) => Array<number>(d + 1).fill(0)))
}

/** The nested trees of prompt lookup's chain: `get(k)` is the chain `k` deep. */
export function lookupFamily(tree: MedusaTree): TreeFamily {
  return new TreeFamily(
    tree,
    tree.paths.slice(1).map((key) => key.split(',').map(Number)),
  )
}

/**
 * Prompt lookup decoding (LoRAX and TGI's n-gram speculation without Medusa heads; vLLM's
 * `ngram`): the last `n` tokens of the sequence (prompt + output), `n` from `ngramSize` down to 1,
 * are looked up in the earlier tokens, most recent occurrence first; the tokens that followed it
 * become the draft, a chain of up to `draftTokens` for `tree` (`lookupTree`). Null when nothing
 * matches. Text that repeats itself (lists, code, quoting the prompt) drafts well; verification
 * keeps the output lossless whatever is drafted. `minNgram` stops the search at longer n-grams
 * (a full-length match is a much better bet than one repeated token). The draft's `match` is the
 * length of the n-gram it follows.
 */
export function lookupDraft(
  tokens: readonly number[],
  options: PromptLookupOptions,
  tree: MedusaTree,
  minNgram = 1,
): Draft | null {
  const len = tokens.length
  const floor = Math.max(0, len - MAX_LOOKBACK)
  for (let n = Math.min(options.ngramSize, len - 1); n >= Math.max(1, minNgram); n--) {
    // A match ends at `end` (exclusive) with `end < len`, so at least one token follows it.
    for (let end = len - 1; end - n >= floor; end--) {
      let k = 0
      while (k < n && tokens[end - 1 - k] === tokens[len - 1 - k]) k++
      if (k < n) continue
      const depth = Math.min(options.draftTokens, len - end, tree.maxDepth)
      const draft = new Int32Array(tree.size)
      for (let d = 1; d <= depth; d++) draft[d] = tokens[end + d - 1]!
      return { tokens: draft, depth, match: n }
    }
  }
  return null
}
