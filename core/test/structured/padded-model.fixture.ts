import { buildModel, buildTokenizer } from '@loom/testkit'
import type { Tokenizer } from '../../src/contracts/tokenizer.ts'
import { XGrammarConstraintFactory } from '../../src/structured/index.ts'
import { HfTokenizerLoader } from '../../src/tokenizer/index.ts'

/** A testkit model set up for structured-output tests, and a constraint factory over it. */
export interface PaddedModel {
  /** Width of the logits: past the tokenizer's ids, as real models pad their embeddings. */
  readonly vocabSize: number
  readonly eos: number
  /** The testkit tokenizer's ids (`vocabSize`, special tokens) without loading it. */
  readonly info: ReturnType<typeof buildTokenizer>['info']
  readonly tokenizer: Tokenizer
  readonly factory: XGrammarConstraintFactory
}

/**
 * Write the testkit model into `dir`: a byte-level BPE tokenizer (561 ids) and an embedding padded
 * past it (ids 561..639 exist in the logits but not in the tokenizer).
 */
export async function paddedModel(dir: string): Promise<PaddedModel> {
  const config = await buildModel(dir, { vocabSize: 640 })
  const info = buildTokenizer().info
  const vocabSize: number = config.vocab_size
  const eos = info.eosTokenId
  const tokenizer = (await new HfTokenizerLoader().load(dir)) as Tokenizer
  const factory = await XGrammarConstraintFactory.fromModelDir(dir, { vocabSize, eosTokenIds: [eos] })
  return { vocabSize, eos, info, tokenizer, factory }
}
