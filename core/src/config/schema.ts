import { z } from 'zod'

/**
 * The configuration file's schema. Every object is strict: an unknown key is an error, so a typo
 * never silently falls back to a default. Paths are resolved against the file's directory by
 * `load-config.ts` after validation.
 */

const port = z.number().int().min(0).max(65535)
const positiveInt = z.number().int().positive()
/**
 * The HTTP timeouts (seconds): only while a request is being received; never while it is answered.
 * At most a day: Node's timers take 32-bit milliseconds.
 */
const timeoutSeconds = z.number().positive().max(86_400)

export const ServerSchema = z
  .strictObject({
    host: z.string().min(1).default('0.0.0.0'),
    port: port.default(3000),
    /** Largest accepted request body in bytes. */
    body_limit: positiveInt.default(1024 * 1024),
    log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /** Seconds a client has to send a request's headers (from connecting, or the end of its previous request); then 408. */
    headers_timeout_s: timeoutSeconds.default(10),
    /** Seconds a client has to send a whole request, body included, counted like `headers_timeout_s`; then 408. */
    request_timeout_s: timeoutSeconds.default(60),
    /** Seconds an idle kept-alive connection stays open (uvicorn's default, so vLLM's, is 5). */
    keep_alive_timeout_s: timeoutSeconds.default(5),
  })
  // Node refuses a headers timeout longer than the request timeout, which includes the headers.
  .check((ctx) => {
    const { headers_timeout_s: headers, request_timeout_s: request } = ctx.value
    if (headers > request) {
      ctx.issues.push({
        code: 'custom',
        input: headers,
        path: ['headers_timeout_s'],
        message: `must be <= \`server.request_timeout_s\` (${request}), which counts the headers too`,
      })
    }
  })
  .prefault({})

export const ModelSchema = z.strictObject({
  /** Served model id: `/info` `model_id`, `/v1/models`, and the `model` value that selects the base model. */
  id: z.string().min(1),
  /** Directory with `config.json`, safetensors weights and `tokenizer.json`, relative to the config file. */
  path: z.string().min(1),
})

export const LimitsSchema = z
  .strictObject({
    /** Longest prompt in tokens (after truncation); absent: max_total_tokens − 1. */
    max_input_length: positiveInt.optional(),
    /** Longest prompt + generation in tokens; absent: the model's context length. */
    max_total_tokens: positiveInt.optional(),
    /** Most sequences in one step. */
    max_batch_size: positiveInt.default(32),
    /** Most prompt tokens prefilled in one step. */
    max_batch_prefill_tokens: positiveInt.default(4096),
    /** Requests admitted at once (queued + running); beyond it: 429 `overloaded`. */
    max_concurrent_requests: positiveInt.default(128),
    max_stop_sequences: z.number().int().min(0).default(4),
  })
  .prefault({})

export const AdaptersSchema = z
  .strictObject({
    /** `adapter_source` used when a request names an adapter without one. */
    default_source: z.string().min(1).default('hub'),
    /** Disk cache for fetched adapters, relative to the config file. */
    cache_dir: z.string().min(1).default('.loom-cache/adapters'),
    /** Seconds an authorization decision may be reused for an identical (source, id, token); 0: never. */
    auth_ttl_s: z.number().min(0).default(0),
    /**
     * Seconds a resolved revision (`owner/name` → commit) is reused before asking the source again.
     * An id with an explicit revision is immutable anyway; this bounds how long `main` stays pinned.
     */
    resolve_ttl_s: z.number().min(0).default(30),
    /** Host memory (MiB) kept for parsed adapter weights evicted from device slots, so a reload skips the disk. */
    host_cache_mb: z.number().min(0).default(1024),
    /** Seconds a request may wait for a device slot while every slot is in use, before 503 `adapter_slots_full`. */
    slot_wait_s: z.number().positive().default(30),
    /**
     * Download attempts per adapter before the request fails (transient errors only). Sources may
     * retry single files themselves; this outer retry starts the whole adapter again.
     */
    download_attempts: z.number().int().min(1).max(10).default(2),
    /** Adapters loaded at startup. */
    preload: z.array(z.strictObject({ id: z.string().min(1), source: z.string().min(1).optional() })).default([]),
  })
  .prefault({})

/** Medusa speculative decoding (issue 7). */
export const SpeculationSchema = z
  .strictObject({
    /**
     * Default Medusa heads, loaded at startup and used by every request (LoRAX: a Medusa
     * `--adapter-id`). Per-request Medusa adapters are accepted only when this is set.
     */
    medusa_adapter: z
      .strictObject({ id: z.string().min(1), source: z.string().min(1).optional() })
      .nullable()
      .default(null),
    /** The sparse candidate tree (Medusa's `medusa_choices`); default: 25 candidates, depth 4. */
    medusa_choices: z
      .array(z.array(z.number().int().min(0).max(1023)).min(1))
      .min(1)
      .optional(),
    /** No speculation in a step with more running sequences than this. */
    max_batch_size: z.number().int().min(0).default(32),
    /** Most candidate tokens verified per step, over all rows. */
    max_tokens: z.number().int().min(0).default(256),
    /**
     * Prompt lookup (n-gram) drafting for requests without Medusa heads (LoRAX and TGI's n-gram
     * speculation): the tokens that followed the latest earlier occurrence of the row's last
     * `ngram_size` tokens (then shorter n-grams) are verified losslessly. `draft_tokens` 0: off.
     * Requests that draft by Medusa heads get a full `ngram_size` match's continuation on the
     * heads' top-1 path (the heads' candidates keep the other branches).
     */
    prompt_lookup: z
      .strictObject({
        ngram_size: z.number().int().min(1).max(64).default(3),
        draft_tokens: z.number().int().min(0).max(64).default(0),
      })
      .prefault({}),
    /**
     * With prompt lookup on, what drafts for a request that has Medusa heads: `learned` picks its
     * heads or prompt lookup per adapter and speculator, by the decode speed each gave that key's
     * finished requests (heads trained on base outputs draft poorly for some adapters, and lookup
     * wins on text that repeats itself); `heads` always uses the heads. Speed only, never outputs.
     */
    drafter_choice: z.enum(['learned', 'heads']).default('learned'),
  })
  .prefault({})

/** Structured output (`response_format`). */
export const StructuredOutputSchema = z
  .strictObject({
    /**
     * Whitespace between JSON tokens when a request does not set `response_format.whitespace`:
     * `compact` (at most one space, no newlines) or `flexible` (newlines and indentation, runs of
     * up to 24 characters).
     */
    json_whitespace: z.enum(['compact', 'flexible']).default('compact'),
  })
  .prefault({})

/** What `/metrics` exports beside Loom's own `loom_*` series. */
export const MetricsSchema = z
  .strictObject({
    /**
     * The series the Gateway API Inference Extension's endpoint picker reads, in vLLM's spelling
     * (`vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:kv_cache_usage_perc`,
     * `vllm:gpu_cache_usage_perc`, `vllm:lora_requests_info`).
     */
    inference_gateway: z.boolean().default(true),
  })
  .prefault({})

export const PluginEntrySchema = z.strictObject({
  /** A workspace package, an installed npm package, or a path relative to the config file. */
  use: z.string().min(1),
  /** Options validated by the plugin's own schema. */
  options: z.unknown().optional(),
})

export const ConfigSchema = z.strictObject({
  server: ServerSchema,
  model: ModelSchema,
  limits: LimitsSchema,
  adapters: AdaptersSchema,
  speculation: SpeculationSchema,
  structured_output: StructuredOutputSchema,
  metrics: MetricsSchema,
  plugins: z.array(PluginEntrySchema).min(1),
})

export type RawConfig = z.output<typeof ConfigSchema>
