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

/** One generated (or prompt) token with its log-probability under the sampling distribution's source logits. */
export interface TokenLogprob {
  readonly id: number
  /** Natural-log probability of `id` from the model's softmax (before temperature and warpers). */
  readonly logprob: number
}
