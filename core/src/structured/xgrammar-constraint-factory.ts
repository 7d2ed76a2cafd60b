/**
 * Structured output with XGrammar: compiles a request's `response_format` into a grammar over the
 * model's vocabulary (cached per schema) and hands out one `XGrammarConstraint` per request.
 */
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { CompiledGrammar, GrammarCompiler, TokenizerInfo } from '@mlc-ai/web-xgrammar'
import type { JsonWhitespace, ResponseFormat, TokenConstraintFactory } from '../contracts/grammar.ts'
import { LoomError } from '../errors/index.ts'
import { canonicalSchemaJson } from './canonical-json.ts'
import { boundJsonWhitespace } from './bound-json-whitespace.ts'
import { CompiledGrammarCache } from './compiled-grammar-cache.ts'
import { grammarUnsupportedError } from './compile-error.ts'
import { intervalGrammar, IntervalUnsupportedError } from './decimal-interval-grammar.ts'
import { loadXGrammar, loadXGrammarInstance, type XGrammarFailure, type XGrammarInstance } from './load-xgrammar.ts'
import { patternGrammar, PatternUnsupportedError } from './pattern-grammar.ts'
import { prepareSchema, type Splice } from './prepare-schema.ts'
import { sanitizeJsonGrammar } from './sanitize-json-grammar.ts'
import { spliceGrammar, type SplicedRules } from './splice-grammar.ts'
import { vocabularyFromTokenizerJson, type XGrammarVocabulary } from './tokenizer-vocabulary.ts'
import { XGrammarConstraint, type MatcherHandle } from './xgrammar-constraint.ts'

/** How to build an `XGrammarConstraintFactory`. */
export interface XGrammarConstraintFactoryOptions {
  /** Parsed `tokenizer.json` of the model (or adapter) whose tokens are constrained. */
  readonly tokenizerJson: object
  /**
   * Width of the model's logits (`vocab_size` in `config.json`). It may exceed the tokenizer's
   * vocabulary (padded embeddings); ids past the tokenizer's are never allowed.
   */
  readonly vocabSize: number
  /** Tokens that end generation; allowed exactly where the grammar can end. */
  readonly eosTokenIds: readonly number[]
  /** Compiled grammars kept (least recently used evicted). Default 64. */
  readonly cacheSize?: number
  /**
   * Whitespace between JSON tokens when a request does not choose (`ResponseFormat.whitespace`).
   * Default `compact`: at most one space. Small models given room for newlines spend their token
   * budget on them.
   */
  readonly jsonWhitespace?: JsonWhitespace
  /**
   * Longest run of whitespace allowed between JSON elements in `flexible` mode (XGrammar's
   * `max_whitespace_cnt`, and Loom's bound on the free-form JSON rules XGrammar leaves unbounded):
   * enough for pretty-printed output, not enough for a model to loop on blanks. A positive
   * integer; default 24.
   */
  readonly maxWhitespace?: number
}

/** What one compile needs: a schema (as XGrammar reads it), its strictness, and Loom's own rules. */
interface CompileRequest {
  /** The cache key: the request's schema, canonical. */
  readonly key: string
  /** The prepared schema (markers in place) as XGrammar reads it. */
  readonly schema: string
  /** The rules that replace each marker, generated before compiling (intervals) or during (patterns). */
  readonly splices: ReadonlyMap<string, Splice>
  /** XGrammar's strict mode: no properties or items beyond those the schema lists. */
  readonly strict: boolean
}

/** How the whitespace between JSON tokens is compiled. */
interface WhitespaceRule {
  /** The longest run (XGrammar's `max_whitespace_cnt` and Loom's bound on the free-form rules). */
  readonly max: number
  /** Only spaces: no newlines or tabs. */
  readonly spacesOnly: boolean
}

/** A started instance with this vocabulary loaded into it. */
interface Runtime {
  readonly xgrammar: XGrammarInstance
  readonly tokenizerInfo: TokenizerInfo
  readonly compiler: GrammarCompiler
  readonly cache: CompiledGrammarCache<CompiledGrammar>
  /** The binding's matcher class, taken from the first matcher made through the package API. */
  matcherClass:
    | (new (
        grammar: unknown,
        stopTokens: undefined,
        terminateWithoutStop: boolean,
        maxRollback: number,
      ) => MatcherHandle)
    | null
}

/**
 * `json_object` without a schema: any JSON object (XGrammar's non-strict object, whose values are
 * any JSON; its whitespace bounded, or made compact, like a schema's by `boundJsonWhitespace`).
 * OpenAI's JSON mode and LoRAX both promise an object, not any JSON value.
 */
const ANY_OBJECT: CompileRequest = { key: 'any-object', schema: '{"type":"object"}', splices: new Map(), strict: false }

/**
 * `TokenConstraintFactory` over XGrammar, for one tokenizer and model vocabulary size. The wasm
 * engine, the vocabulary and the compiler are set up on first use (or by `warmUp()`).
 *
 * Schemas compile in XGrammar's strict mode (as vLLM and SGLang do): a property or array item the
 * schema does not list is never produced, so every output also validates against the schema
 * under plain JSON Schema rules. OpenAI's `strict` flag therefore does not change the grammar.
 */
export class XGrammarConstraintFactory implements TokenConstraintFactory {
  readonly vocabSize: number
  readonly eosTokenIds: readonly number[]
  readonly #vocabulary: XGrammarVocabulary
  readonly #cacheSize: number
  readonly #jsonWhitespace: JsonWhitespace
  readonly #maxWhitespace: number
  #runtime: Promise<Runtime> | null = null
  #compiles = 0
  #closed = false

  constructor(options: XGrammarConstraintFactoryOptions) {
    this.#vocabulary = vocabularyFromTokenizerJson(options.tokenizerJson)
    const tokenizerSize = this.#vocabulary.encodedVocab.length
    if (!Number.isInteger(options.vocabSize) || options.vocabSize < tokenizerSize) {
      throw new RangeError(`vocabSize ${options.vocabSize} is smaller than the tokenizer's ${tokenizerSize} tokens`)
    }
    for (const id of options.eosTokenIds) {
      if (!Number.isInteger(id) || id < 0 || id >= options.vocabSize) {
        throw new RangeError(`eos token id ${id} is outside the vocabulary (size ${options.vocabSize})`)
      }
    }
    this.vocabSize = options.vocabSize
    this.eosTokenIds = [...options.eosTokenIds]
    this.#cacheSize = options.cacheSize ?? 64
    this.#jsonWhitespace = options.jsonWhitespace ?? 'compact'
    this.#maxWhitespace = options.maxWhitespace ?? 24
    // XGrammar refuses 0 ("max_whitespace_cnt must be positive") at compile time; refuse it here.
    if (!Number.isInteger(this.#maxWhitespace) || this.#maxWhitespace < 1) {
      throw new RangeError(`maxWhitespace ${this.#maxWhitespace} is not a positive integer`)
    }
  }

  /**
   * Build a factory from a model (or adapter) directory's `tokenizer.json`. `vocabSize` and
   * `eosTokenIds` come from the model (`config.json`'s `vocab_size`; the ids of `eos_token` and
   * any `eos_token_id` list in `config.json` / `generation_config.json`).
   */
  static async fromModelDir(
    dir: string,
    options: Omit<XGrammarConstraintFactoryOptions, 'tokenizerJson'>,
  ): Promise<XGrammarConstraintFactory> {
    const path = join(dir, 'tokenizer.json')
    if (!existsSync(path)) throw new LoomError('tokenizer_invalid', { path: dir, detail: 'no tokenizer.json' })
    let tokenizerJson: unknown
    try {
      tokenizerJson = JSON.parse(await readFile(path, 'utf8'))
    } catch (err) {
      const detail = `${path}: ${err instanceof Error ? err.message : String(err)}`
      throw new LoomError('tokenizer_invalid', { path: dir, detail }, { cause: err })
    }
    if (tokenizerJson === null || typeof tokenizerJson !== 'object') {
      throw new LoomError('tokenizer_invalid', { path: dir, detail: `${path} is not a JSON object` })
    }
    return new XGrammarConstraintFactory({ ...options, tokenizerJson })
  }

  /** Grammars compiled so far (cache misses), for tests and metrics. */
  get compileCount(): number {
    return this.#compiles
  }

  /** Start the engine and load the vocabulary now instead of on the first request. */
  async warmUp(): Promise<void> {
    await this.#getRuntime()
  }

  async check(spec: ResponseFormat): Promise<void> {
    ;(await this.create(spec)).dispose()
  }

  async create(spec: ResponseFormat): Promise<XGrammarConstraint> {
    if (this.#closed) throw new LoomError('server_closing')
    const request = compileRequestOf(spec)
    const runtime = await this.#getRuntime()
    const whitespace = spec.whitespace ?? this.#jsonWhitespace
    const key = `${request.strict ? 'strict' : 'loose'}:${whitespace}:${request.key}`
    // Compact: one optional space per gap. Flexible: runs of any JSON whitespace up to the bound.
    const rule: WhitespaceRule =
      whitespace === 'compact' ? { max: 1, spacesOnly: true } : { max: this.#maxWhitespace, spacesOnly: false }
    const compiled = await runtime.cache.getOrCompile(key, () => this.#compile(runtime, request, rule))
    const constraint = new XGrammarConstraint(
      await newMatcher(runtime, compiled),
      this.vocabSize,
      this.eosTokenIds,
      runtime.xgrammar.memory,
    )
    // A schema that admits no value (`{"$ref": "#"}`, a `$ref` cycle with no way out) compiles,
    // then fails the request mid-generation as a 500: refuse it here, before it is queued.
    const mask = new Uint32Array(Math.ceil(this.vocabSize / 32))
    if (constraint.fillNextTokenMask(mask) && mask.every((word) => word === 0)) {
      constraint.dispose()
      throw new LoomError(
        'grammar_unsupported',
        { detail: 'the schema admits no JSON value (is it a `$ref` cycle with no way out?)' },
        { param: 'response_format' },
      )
    }
    return constraint
  }

  /** Free the compiled grammars and refuse new requests; live constraints keep working. */
  close(): void {
    this.#closed = true
    const runtime = this.#runtime
    this.#runtime = null
    void runtime?.then(
      (r) => r.cache.clear(),
      () => undefined,
    )
  }

  async #compile(runtime: Runtime, request: CompileRequest, whitespace: WhitespaceRule): Promise<CompiledGrammar> {
    this.#compiles++
    const { compiler } = runtime
    try {
      const { api } = runtime.xgrammar
      const { value } = await runtime.xgrammar.captureOutput(async () => {
        // Whitespace allowed between elements, default separators, bounded whitespace runs
        // (XGrammar bounds its schema rules, Loom its free-form JSON rules and, for compact
        // output, narrows every run to spaces).
        // Schema → EBNF → repaired EBNF + Loom's rules → compiled grammar.
        const toEbnf = async (schema: string): Promise<string> => {
          const fromSchema = await api.Grammar.fromJSONSchema(
            schema,
            true,
            -1,
            undefined,
            request.strict,
            whitespace.max,
          )
          try {
            return fromSchema.toString()
          } finally {
            fromSchema.dispose()
          }
        }
        const ebnf = boundJsonWhitespace(
          sanitizeJsonGrammar(await toEbnf(request.schema)),
          whitespace.max,
          whitespace.spacesOnly,
        )
        const replacements = new Map<string, SplicedRules>()
        let index = 0
        for (const [marker, splice] of request.splices) {
          const prefix = `loom_${splice.kind}_${index++}`
          if (splice.kind === 'interval') replacements.set(marker, intervalGrammar(prefix, splice.interval))
          else {
            const patternEbnf = await toEbnf(JSON.stringify({ type: 'string', pattern: splice.pattern }))
            replacements.set(marker, patternOrRefuse(prefix, patternEbnf, splice.pattern))
          }
        }
        const grammar = await api.Grammar.fromEBNF(spliceGrammar(ebnf, replacements))
        try {
          return await compiler.compileGrammar(grammar)
        } finally {
          grammar.dispose()
        }
      })
      return value
    } catch (err) {
      // Refused by Loom's own checks: XGrammar did not abort, the instance is fine.
      if (err instanceof LoomError) throw err
      // The instance aborted: give later requests a fresh one; constraints made from this one
      // keep working on it.
      if (this.#runtime !== null && (await this.#runtime.catch(() => null)) === runtime) {
        this.#runtime = this.#startRuntime(true)
      }
      throw grammarUnsupportedError((err as XGrammarFailure).xgrammarOutput ?? [], err)
    }
  }

  #getRuntime(): Promise<Runtime> {
    if (this.#runtime === null) this.#runtime = this.#startRuntime(false)
    return this.#runtime
  }

  async #startRuntime(fresh: boolean): Promise<Runtime> {
    const xgrammar = fresh ? await loadXGrammarInstance() : await loadXGrammar()
    const { encodedVocab, vocabType, prependSpace } = this.#vocabulary
    const { value } = await xgrammar.captureOutput(async () => {
      const tokenizerInfo = await xgrammar.api.TokenizerInfo.createTokenizerInfo(
        encodedVocab,
        vocabType,
        prependSpace,
        this.vocabSize,
        [...this.eosTokenIds],
      )
      // XGrammar's own cache is off: this factory caches, and an aborted compile could leave an
      // entry of XGrammar's cache half-made.
      const compiler = await xgrammar.api.GrammarCompiler.createGrammarCompiler(tokenizerInfo, false)
      return { tokenizerInfo, compiler }
    })
    const cache = new CompiledGrammarCache<CompiledGrammar>(this.#cacheSize, (grammar) => grammar.dispose())
    return { xgrammar, cache, matcherClass: null, ...value }
  }
}

/**
 * A matcher's binding handle. The wrapper calls the handle directly: its methods are synchronous,
 * while the package's mask method is async only to await a start-up that has already happened.
 * After the first matcher, the binding class is called directly too: the package's factory also
 * copies the grammar's tokenizer info into a handle it never frees, once per request.
 */
async function newMatcher(runtime: Runtime, compiled: CompiledGrammar): Promise<MatcherHandle> {
  const grammarHandle = (compiled as unknown as { handle: unknown }).handle
  if (runtime.matcherClass !== null) return new runtime.matcherClass(grammarHandle, undefined, false, -1)
  const matcher = await runtime.xgrammar.api.GrammarMatcher.createGrammarMatcher(compiled)
  const handle = (matcher as unknown as { handle: MatcherHandle }).handle
  runtime.matcherClass = Object.getPrototypeOf(handle).constructor as Runtime['matcherClass']
  return handle
}

/** The schema XGrammar compiles for a request's `response_format`. */
function compileRequestOf(spec: ResponseFormat): CompileRequest {
  const schema = spec.schema
  if (spec.type === 'json_object' && (schema === undefined || schema === null)) return ANY_OBJECT
  if (typeof schema === 'boolean' && !schema) {
    throw new LoomError(
      'grammar_unsupported',
      { detail: 'the schema `false` accepts no value' },
      { param: 'response_format' },
    )
  }
  if (typeof schema !== 'boolean' && (schema === null || typeof schema !== 'object' || Array.isArray(schema))) {
    throw new LoomError(
      'grammar_unsupported',
      { detail: 'the schema must be a JSON object' },
      { param: 'response_format' },
    )
  }
  const prepared = prepareSchema(schema)
  // Interval rules are generated at compile time, but an interval with no rules is refused now.
  for (const splice of prepared.splices.values()) {
    if (splice.kind === 'interval') {
      try {
        intervalGrammar('check', splice.interval)
      } catch (err) {
        if (!(err instanceof IntervalUnsupportedError)) throw err
        throw new LoomError(
          'grammar_unsupported',
          { detail: `\`minimum/maximum\` is not supported as given: ${err.message}` },
          { param: 'response_format', cause: err },
        )
      }
    }
  }
  return {
    key: canonicalSchemaJson(schema),
    schema: canonicalSchemaJson(prepared.schema),
    splices: prepared.splices,
    strict: true,
  }
}

/** A pattern's rules, or the 422 naming `pattern` when its grammar cannot be used. */
function patternOrRefuse(prefix: string, ebnf: string, pattern: string): SplicedRules {
  try {
    return patternGrammar(prefix, ebnf)
  } catch (err) {
    if (!(err instanceof PatternUnsupportedError)) throw err
    throw new LoomError(
      'grammar_unsupported',
      { detail: `\`pattern\` is not supported as given (${JSON.stringify(pattern)}): ${err.message}` },
      { param: 'response_format', cause: err },
    )
  }
}
