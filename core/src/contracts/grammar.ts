/**
 * A per-request constraint on which tokens may come next (JSON schema, regex, …), applied as a
 * mask in the sampler. Stateful: it advances with every accepted token and can roll back, which
 * Medusa verification needs when a speculative branch is rejected.
 */
export interface TokenConstraint {
  /**
   * Write the allowed-next-token bitmask into `mask` (bit `i` of word `i >> 5` set when token `i`
   * is allowed; length `ceil(vocabSize / 32)`). Returns false when every token is allowed (no mask).
   */
  fillNextTokenMask(mask: Uint32Array): boolean
  /** Advance by one token. Returns false when the token is not allowed (the sampler never lets that happen). */
  accept(tokenId: number): boolean
  /** Undo the last `count` accepted tokens. */
  rollback(count: number): void
  /** True once the constraint has reached an accepting end state and only eos may follow. */
  isTerminated(): boolean
  /** Free what the matcher holds (native memory). Idempotent; the constraint is unusable after. */
  dispose(): void
}

/** Builds constraints from request-level specifications; provided by the structured-output module. */
export interface TokenConstraintFactory {
  /** Compile (cached per tokenizer and schema) and return a fresh matcher for one request. */
  create(spec: ResponseFormat): Promise<TokenConstraint>
  /**
   * Compile (cached) and throw what `create` would throw for `spec` (`grammar_unsupported` naming
   * the cause), without keeping a matcher: the core checks a request's grammar before it is
   * submitted, so a bad schema is a 422 before the first byte whatever the backend.
   */
  check(spec: ResponseFormat): Promise<void>
}

/**
 * Whitespace allowed between JSON tokens. `compact`: at most one space, no newlines (Outlines'
 * `[ ]?`, the form OpenAI returns). `flexible`: any JSON whitespace, newlines and indentation
 * included, in runs bounded by the backend (pretty-printed output).
 */
export type JsonWhitespace = 'compact' | 'flexible'

/**
 * What the client asked for, already validated. `whitespace` is absent when the request leaves it
 * to the server's default.
 */
export type ResponseFormat = (
  | { readonly type: 'json_object'; readonly schema?: unknown }
  | { readonly type: 'json_schema'; readonly name: string; readonly schema: unknown; readonly strict: boolean }
) & { readonly whitespace?: JsonWhitespace }
