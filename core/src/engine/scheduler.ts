import { AdapterQueues } from './adapter-queues.ts'
import type { KvBlockAllocator } from './kv-block-allocator.ts'
import type { Draft } from './medusa/draft.ts'
import type { SubTree, TreeFamily } from './medusa/tree-family.ts'
import { draftKey, lookupKey, type AdaptiveTreePolicy, type PolicyGroup } from './medusa/tree-policy.ts'
import { buildRow, buildTreeRow, type PlannedRow } from './row-builder.ts'
import type { Sequence } from './sequence.ts'

export interface SchedulerLimits {
  /** Most rows (sequences) in one step, and so most running sequences. */
  readonly maxBatchSize: number
  /** Most prefill tokens in one step, summed over rows; longer prompts are prefilled in chunks. */
  readonly maxBatchPrefillTokens: number
}

/**
 * The LoRA slot a sequence's rows use (-1: base model), or null while one of its adapters is not
 * resident on the device (the sequence then waits in its queue without blocking others).
 */
export type AdapterSlotOf = (seq: Sequence) => number | null

/** How the scheduler plans verification rows (see `Scheduler`, step 1). */
export interface SchedulerSpeculation {
  /**
   * The candidate trees of a sequence with a drafter under policy key `key` (its draft's,
   * `draftKey`): that key's family (Medusa's tree, or prompt lookup's chain); without a policy,
   * always the full tree of it.
   */
  readonly familyOf: (seq: Sequence, key: string) => TreeFamily
  /** No tree rows (and no head logits) in a step when more sequences than this are running. */
  readonly maxBatchSize: number
  /** Most candidate tokens (tree nodes other than roots) per step, over all rows. */
  readonly maxTokens: number
  /** Longest sequence allowed (prompt + generated); trees never reach past it. */
  readonly contextLimit: number
  /** Medusa slot of a sequence's speculator (-1: none); called at admission, once its adapters are resident. */
  readonly medusaSlotOf: (seq: Sequence) => number
  /**
   * The prompt-lookup draft of a decoding sequence whose drafter is prompt lookup (null: no
   * n-gram matches). Searched when a step is planned; the draft is used only when the policy wants
   * one for its key (`draftKey`: the sequence's, and the match's length; see `wantsDraft`), and
   * searched only when the policy wants a draft for some match length (`wantsLookup`).
   */
  readonly lookupDraft: (seq: Sequence) => Draft | null
  /** Longest n-gram prompt lookup matches (`PromptLookupOptions.ngramSize`; 0 when it is off). */
  readonly lookupNgram: number
  /** Picks each key's tree size every step from measured costs; null: the largest tree that fits. */
  readonly policy: AdaptiveTreePolicy | null
}

/** What the next step should run, and the sequences that can never run. */
export interface StepPlan {
  readonly rows: PlannedRow[]
  /** Sequences removed because they need more KV blocks than the whole cache holds. */
  readonly unschedulable: Sequence[]
}

/**
 * Continuous-batching scheduler: decides, between steps, which sequences feed which tokens.
 *
 * Each plan, in order:
 * 1. every running sequence that is decoding gets a one-token row, oldest admission first; when its
 *    next token needs a block and none is free, the most recently admitted running sequence is
 *    **preempted**: its blocks are freed and it goes back to the front of the waiting line to be
 *    recomputed from scratch later (prompt + tokens generated so far, in one prefill; its sampler
 *    state is kept, so the output is unchanged). A sequence preempts itself when it is the newest.
 *    Speculation: when at most `speculation.maxBatchSize` sequences are running, a decoding
 *    sequence with a draft (Medusa heads' or prompt lookup's) gets a verification row instead
 *    (root + a prefix of its key's tree, sized per key by the policy), cut to its remaining token
 *    allowance and context, to the step's candidate budget (sequences that went longest without a
 *    tree first) and to the blocks free — speculation never preempts anyone. Every row of a
 *    sequence with Medusa heads then also asks for head logits at its sampled position, so the
 *    next step has a draft; when speculation is off, none are asked for.
 * 2. running sequences still prefilling a long prompt get their next chunk, within the prefill-token
 *    budget and the free blocks;
 * 3. waiting sequences are admitted — preempted ones first, then the per-adapter queues
 *    round-robin, skipping queues whose adapter is not resident yet (S-LoRA style: a request
 *    waiting for its adapter to be (re)loaded never holds up requests for resident adapters) —
 *    while there is a free row (`maxBatchSize`), prefill budget left, and enough free blocks for
 *    the sequence's whole known length. A prompt larger than the budget is admitted with a first
 *    chunk; the first ready waiting sequence that does not fit stops admission (no overtaking, so
 *    a long prompt is not starved by short ones).
 * 4. The step's rows are ordered by LoRA slot (stable), so each adapter's rows form one run of
 *    tokens and the runner reads its weights once per projection (see `tryPlan`).
 */
export class Scheduler {
  private readonly allocator: KvBlockAllocator
  private readonly limits: SchedulerLimits
  /** Model vocabulary: the width of a row's grammar masks. */
  private readonly vocabSize: number
  private readonly adapterSlotOf: AdapterSlotOf
  private readonly speculation: SchedulerSpeculation | null
  private plans = 0
  /** Admitted sequences, oldest admission first. */
  private readonly running: Sequence[] = []
  /** Preempted sequences awaiting recompute, oldest admission first. */
  private readonly resumeQueue: Sequence[] = []
  private readonly queues = new AdapterQueues<Sequence>()
  private admissions = 0

  constructor(
    allocator: KvBlockAllocator,
    limits: SchedulerLimits,
    vocabSize: number,
    adapterSlotOf: AdapterSlotOf = () => -1,
    speculation: SchedulerSpeculation | null = null,
  ) {
    this.allocator = allocator
    this.limits = limits
    this.vocabSize = vocabSize
    this.adapterSlotOf = adapterSlotOf
    this.speculation = speculation
  }

  get runningCount(): number {
    return this.running.length
  }

  get queuedCount(): number {
    return this.queues.size + this.resumeQueue.length
  }

  enqueue(seq: Sequence): void {
    seq.state = 'queued'
    this.queues.push(seq.queueKey, seq)
  }

  /** Take a sequence out wherever it is and free its blocks now. Idempotent. */
  remove(seq: Sequence): void {
    if (seq.state === 'running') {
      const at = this.running.indexOf(seq)
      if (at >= 0) this.running.splice(at, 1)
    } else if (seq.state === 'queued') {
      const at = this.resumeQueue.indexOf(seq)
      if (at >= 0) this.resumeQueue.splice(at, 1)
      else this.queues.remove(seq.queueKey, seq)
    }
    this.freeBlocks(seq)
    seq.state = 'finished'
  }

  /**
   * The distinct LoRA adapters (`AdapterHandle.id`) of the running sequences and of the waiting
   * ones (queued, or preempted and awaiting recompute), each in order of first appearance.
   */
  adaptersInUse(): { running: string[]; waiting: string[] } {
    const ids = (seqs: Iterable<Sequence>) => {
      const out = new Set<string>()
      for (const seq of seqs) {
        const adapter = seq.request.adapter
        if (adapter !== null && adapter.kind === 'lora') out.add(adapter.id)
      }
      return [...out]
    }
    return { running: ids(this.running), waiting: ids([...this.resumeQueue, ...this.queues.items()]) }
  }

  /** Every sequence not finished, queued or running (for destroy). */
  all(): Sequence[] {
    return [...this.running, ...this.resumeQueue, ...this.queues.items()]
  }

  plan(): StepPlan {
    const unschedulable: Sequence[] = []
    for (;;) {
      const rows = this.tryPlan(unschedulable)
      if (rows.length > 0 || this.running.length === 0) return { rows, unschedulable }
      // Every running sequence is mid-prefill and none fits: make room by preempting the newest,
      // or give up on the last one, which alone needs more blocks than exist.
      const newest = this.running[this.running.length - 1]!
      if (this.running.length === 1) {
        this.remove(newest)
        unschedulable.push(newest)
      } else {
        this.preempt(newest)
      }
    }
  }

  private tryPlan(unschedulable: Sequence[]): PlannedRow[] {
    const rows: PlannedRow[] = []
    const { allocator } = this
    let budget = this.limits.maxBatchPrefillTokens

    this.plans++
    const speculation = this.speculation
    // Judge by the batch this step will have once waiting sequences are admitted.
    const batchSize = Math.min(this.limits.maxBatchSize, this.running.length + this.queuedCount)
    const speculate = speculation !== null && batchSize <= speculation.maxBatchSize

    // 1. Decode rows. Iterate over a copy: preemption shrinks `running`.
    const decoders: Sequence[] = []
    for (const seq of [...this.running]) {
      if (seq.state !== 'running' || !seq.decoding) continue
      if (this.grow(seq, seq.cacheLen + 1)) decoders.push(seq)
    }
    // Whether rows draft (plain rows with heads run them, prompt lookup searches): asked once per
    // key (see `wantsDraft`).
    const asks: DraftAsks = {
      speculation: speculate ? speculation : null,
      batchSize,
      decoders,
      wants: new Map(),
      keyRows: null,
    }
    const trees = speculate ? this.planTrees(decoders, speculation, asks) : null
    for (const seq of decoders) {
      if (seq.state !== 'running') continue
      const tree = trees?.get(seq)
      rows.push(
        tree !== undefined
          ? buildTreeRow(seq, tree.subTree, tree.nodes, this.vocabSize, headsToRun(seq, asks))
          : buildRow(seq, 1, this.vocabSize, wantsHeads(seq, asks)),
      )
    }

    // 2. Chunks of prompts already being prefilled.
    for (const seq of this.running) {
      if (budget === 0) break
      if (seq.decoding) continue
      const room = (seq.blocks.length + allocator.free) * allocator.blockSize - seq.cacheLen
      const chunk = Math.min(seq.pending, budget, room)
      if (chunk <= 0) continue
      this.reserve(seq, seq.cacheLen + chunk)
      rows.push(buildRow(seq, chunk, this.vocabSize, wantsHeads(seq, asks)))
      budget -= chunk
    }

    // 3. Admissions: only sequences whose adapters are resident (see `AdapterSlotOf`).
    while (this.running.length < this.limits.maxBatchSize && budget > 0) {
      const candidate = this.nextAdmission()
      if (candidate === undefined) break
      const { seq, slot, take } = candidate
      const needed = allocator.blocksFor(seq.tokens.length)
      if (needed > allocator.blockCount) {
        this.remove(seq)
        unschedulable.push(seq)
        continue
      }
      if (needed > allocator.free) break
      take()
      seq.state = 'running'
      seq.loraSlot = slot
      seq.medusaSlot = speculation?.medusaSlotOf(seq) ?? -1
      seq.admittedOrder = ++this.admissions
      this.running.push(seq)
      const chunk = Math.min(seq.pending, budget)
      this.reserve(seq, seq.cacheLen + chunk)
      rows.push(buildRow(seq, chunk, this.vocabSize, wantsHeads(seq, asks)))
      budget -= chunk
    }
    // Rows of one adapter side by side (stable: admission order within it), so the runner sees
    // one run of tokens per adapter and reads each adapter's weights once per projection, however
    // many rows use it (Punica's SGMV segments), rather than once per row.
    return rows.sort(byLoraSlot)
  }

  /**
   * Trees (a subtree of the sequence's family and its nodes, root included) for the decoding
   * sequences that verify this step. The policy picks one size per key (adapter × drafter) for the
   * whole step (see `AdaptiveTreePolicy.choose`); each tree is then the largest prefix of that
   * size's tree that fits the sequence's draft, the tokens it may still generate and the context,
   * the step's candidate budget and the free blocks (none when only the root is left: the row
   * decodes plainly).
   */
  private planTrees(
    decoders: readonly Sequence[],
    speculation: SchedulerSpeculation,
    asks: DraftAsks,
  ): Map<Sequence, { subTree: SubTree; nodes: number }> {
    const { contextLimit, policy } = speculation
    const out = new Map<Sequence, { subTree: SubTree; nodes: number }>()
    let budget = speculation.maxTokens
    for (const seq of decoders) {
      if (seq.drafter !== 'prompt-lookup') continue
      // The match's length is part of the draft's key, so a row searches when any length's key
      // wants a draft, and keeps what it finds when that length's does.
      const draft = wantsLookup(seq, asks, speculation.lookupNgram) ? speculation.lookupDraft(seq) : null
      seq.draft = draft !== null && wantsDraft(seq, asks, draftKey(seq, draft)) ? draft : null
    }
    const waiting = decoders.filter((seq) => seq.drafter !== null && seq.draft !== null)
    if (waiting.length === 0) return out
    // Longest without a tree first; ties by admission (decoders are in admission order; sort is stable).
    waiting.sort((a, b) => a.lastVerifyPlan - b.lastVerifyPlan)
    const subTrees = new Map<string, SubTree | null>()
    const families = new Map<string, TreeFamily>()
    for (const seq of waiting) {
      seq.treeKey = draftKey(seq, seq.draft!)
      if (!families.has(seq.treeKey)) families.set(seq.treeKey, speculation.familyOf(seq, seq.treeKey))
    }
    if (policy === null) {
      for (const [key, family] of families) subTrees.set(key, family.full)
    } else {
      const groups = new Map<string, { key: string; rows: number; depth: number; heads: number }>()
      for (const seq of waiting) {
        let g = groups.get(seq.treeKey)
        if (g === undefined) {
          const heads = seq.drafter === 'medusa' ? seq.request.speculator!.size : 0
          g = { key: seq.treeKey, rows: 0, depth: 0, heads }
          groups.set(seq.treeKey, g)
        }
        g.rows++
        g.depth = Math.max(g.depth, seq.draft!.depth)
      }
      const list: PolicyGroup[] = [...groups.values()]
      const others = decoders.length - waiting.length
      const ks = policy.choose(list, others)
      list.forEach((g, i) => subTrees.set(g.key, ks[i]! > 0 ? families.get(g.key)!.get(ks[i]!) : null))
    }
    const { blockSize } = this.allocator
    for (const seq of waiting) {
      const subTree = subTrees.get(seq.treeKey)
      if (budget <= 0) break
      if (subTree === null || subTree === undefined) continue
      const left = Math.min(seq.request.maxNewTokens - seq.generated, contextLimit - seq.tokens.length)
      // Accepting k candidates emits k + 1 tokens.
      const depth = Math.min(seq.draft!.depth, left - 1)
      let nodes = Math.min(subTree.tree.nodesWithin(depth), budget + 1, contextLimit - seq.cacheLen)
      nodes = Math.min(nodes, (seq.blocks.length + this.allocator.free) * blockSize - seq.cacheLen)
      if (nodes < 2) continue
      this.reserve(seq, seq.cacheLen + nodes)
      budget -= nodes - 1
      seq.lastVerifyPlan = this.plans
      out.set(seq, { subTree, nodes })
    }
    return out
  }

  /**
   * The next waiting sequence to admit whose adapters are resident: preempted ones first (their
   * adapters stay pinned, so they are ready), then the per-adapter queues round-robin, skipping
   * queues whose adapter is still loading. `take` removes it from its queue.
   */
  private nextAdmission(): { seq: Sequence; slot: number; take: () => void } | undefined {
    for (let i = 0; i < this.resumeQueue.length; i++) {
      const seq = this.resumeQueue[i]!
      const slot = this.adapterSlotOf(seq)
      if (slot !== null) return { seq, slot, take: () => this.resumeQueue.splice(i, 1) }
    }
    const found = this.queues.peekReady((seq) => this.adapterSlotOf(seq) !== null)
    if (found === undefined) return undefined
    return { seq: found.item, slot: this.adapterSlotOf(found.item)!, take: () => this.queues.shiftAt(found.at) }
  }

  /** Make `seq`'s blocks cover `entries` cache entries, preempting newer sequences if needed. */
  private grow(seq: Sequence, entries: number): boolean {
    const needed = this.allocator.blocksFor(entries) - seq.blocks.length
    while (needed > this.allocator.free) {
      const newest = this.running[this.running.length - 1]!
      this.preempt(newest)
      if (newest === seq) return false
    }
    this.reserve(seq, entries)
    return true
  }

  /** Allocate the blocks `seq` lacks for `entries` cache entries; the caller checked they are free. */
  private reserve(seq: Sequence, entries: number): void {
    const needed = this.allocator.blocksFor(entries) - seq.blocks.length
    if (needed <= 0) return
    const blocks = this.allocator.allocate(needed)
    if (blocks === null) throw new Error(`scheduler bug: ${needed} blocks reserved, ${this.allocator.free} free`)
    seq.blocks.push(...blocks)
  }

  private preempt(seq: Sequence): void {
    const at = this.running.indexOf(seq)
    if (at >= 0) this.running.splice(at, 1)
    this.freeBlocks(seq)
    seq.cacheLen = 0
    seq.draft = null
    seq.pendingCopy = null
    seq.state = 'queued'
    seq.preemptions++
    // Prompt logprobs gathered so far are recomputed with the prompt.
    if (!seq.prefillDone && seq.prefillTokens !== null) seq.prefillTokens.length = 1
    let i = this.resumeQueue.length
    while (i > 0 && this.resumeQueue[i - 1]!.admittedOrder > seq.admittedOrder) i--
    this.resumeQueue.splice(i, 0, seq)
  }

  private freeBlocks(seq: Sequence): void {
    if (seq.blocks.length > 0) this.allocator.release(seq.blocks)
    seq.blocks = []
  }
}

/** One plan's questions to the policy about drafts: asked once per key (see `wantsDraft`). */
interface DraftAsks {
  /** Null when this step does not speculate. */
  readonly speculation: SchedulerSpeculation | null
  /** The batch this step will have once waiting sequences are admitted. */
  readonly batchSize: number
  readonly decoders: readonly Sequence[]
  readonly wants: Map<string, boolean>
  /** Decode rows that can draft (heads or prompt lookup) per policy key, counted at the first question. */
  keyRows: Map<string, number> | null
}

/** How many Medusa heads a plain row of `seq` runs this step: none unless it drafts (see `wantsDraft`). */
function wantsHeads(seq: Sequence, asks: DraftAsks): number {
  return seq.medusaSlot >= 0 && wantsDraft(seq, asks) ? headsToRun(seq, asks) : 0
}

/**
 * How many of `seq`'s Medusa heads run where its row's sampling ends, for the next step's draft:
 * as deep as the policy's trees for the key may go (`AdaptiveTreePolicy.headsFor`), else all.
 */
function headsToRun(seq: Sequence, asks: DraftAsks): number {
  if (seq.medusaSlot < 0) return 0
  const all = seq.request.speculator!.size
  return asks.speculation?.policy?.headsFor(seq.policyKey, all) ?? all
}

/**
 * Whether `seq` drafts this step: a row with heads runs them (a plain row's heads give the next
 * step's draft), a prompt-lookup row verifies the draft its search found (asked with `key`, the
 * draft's: `draftKey`). While the policy finds plain decoding faster for a key, its rows do
 * neither, prefill rows included, but for the policy's rare tries: at a batch size where no tree
 * can pay, drafting costs nothing (a search costs microseconds). (A function, not a closure in
 * `tryPlan`: tsx names every closure it creates, at a cost per plan.)
 */
function wantsDraft(seq: Sequence, asks: DraftAsks, key = seq.policyKey): boolean {
  const { speculation } = asks
  if (speculation === null || !canDraft(seq)) return false
  const policy = speculation.policy
  if (policy === null) return true
  let yes = asks.wants.get(key)
  if (yes === undefined) {
    let keyRows = asks.keyRows
    if (keyRows === null) {
      keyRows = asks.keyRows = new Map()
      for (const d of asks.decoders) if (canDraft(d)) keyRows.set(d.policyKey, (keyRows.get(d.policyKey) ?? 0) + 1)
    }
    // A draft's key (`key`, a prompt-lookup match's) is known only once its row searched: its rows
    // are counted as the sequence's key's.
    const rows = Math.max(1, keyRows.get(seq.policyKey) ?? 0)
    // The keys of the step's drafting rows share the exploration budget of hopeless keys.
    const others = Math.max(0, asks.batchSize - rows)
    yes = policy.wantsDraft(key, rows, others, Math.max(1, keyRows.size))
    asks.wants.set(key, yes)
  }
  return yes
}

/**
 * Whether a prompt-lookup row of `seq` searches this step: when the policy wants a draft for the
 * key of some match length it could find (`draftKey`, lengths 1 to `ngram`). Every length's key is
 * asked, so each counts this plan once (see `AdaptiveTreePolicy.wantsDraft`); while they all
 * decode plainly, the row does not search.
 */
function wantsLookup(seq: Sequence, asks: DraftAsks, ngram: number): boolean {
  let yes = false
  for (let n = 1; n <= ngram; n++) if (wantsDraft(seq, asks, lookupKey(seq, n))) yes = true
  return yes
}

/** Whether `seq` has a drafter it can run: heads in a slot, or prompt lookup. */
function canDraft(seq: Sequence): boolean {
  return seq.medusaSlot >= 0 || seq.drafter === 'prompt-lookup'
}

function byLoraSlot(a: PlannedRow, b: PlannedRow): number {
  return a.row.loraSlot - b.row.loraSlot
}
