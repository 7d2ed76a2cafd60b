/**
 * The token ids both engines are fed: the same formula as `decode-timer.ts`, so prompts and
 * decode inputs are identical on each side (ids 3..252, all ordinary tokens of the bench model's
 * tokenizer). Token ids do not change the work a step does.
 */
export function benchToken(seq: number, pos: number): number {
  return 3 + ((seq * 31 + pos * 7) % 250)
}
