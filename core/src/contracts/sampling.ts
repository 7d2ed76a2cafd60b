/**
 * Validated sampling parameters, as the core hands them to a backend. Every field is already
 * range-checked; a backend never validates again.
 */
export interface SamplingParams {
  /** 0 means greedy (argmax); otherwise logits are divided by it. */
  readonly temperature: number
  /** Keep the k most likely tokens; 0 disables. */
  readonly topK: number
  /** Nucleus sampling mass in (0, 1]; 1 disables. */
  readonly topP: number
  /** Locally typical sampling mass in (0, 1]; 1 disables. */
  readonly typicalP: number
  /** CTRL-style penalty (> 0) on tokens already in prompt or output; 1 disables. */
  readonly repetitionPenalty: number
  /** OpenAI-style penalty in [-2, 2] scaled by a token's count in the output; 0 disables. */
  readonly frequencyPenalty: number
  /** OpenAI-style penalty in [-2, 2] for any token present in the output; 0 disables. */
  readonly presencePenalty: number
  /**
   * Seed of this request's own random stream (a 64-bit unsigned integer). A request's samples depend
   * only on its seed and its own tokens, never on batch neighbours.
   */
  readonly seed: bigint
}

/** Greedy decoding with every penalty and warper off (seed 0: greedy draws nothing from it). */
export const GREEDY_SAMPLING: SamplingParams = {
  temperature: 0,
  topK: 0,
  topP: 1,
  typicalP: 1,
  repetitionPenalty: 1,
  frequencyPenalty: 0,
  presencePenalty: 0,
  seed: 0n,
}

/** One generated (or prompt) token with its log-probability under the sampling distribution's source logits. */
export interface TokenLogprob {
  readonly id: number
  /** Natural-log probability of `id` from the model's softmax (before temperature and warpers). */
  readonly logprob: number
}
