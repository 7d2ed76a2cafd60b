/** Environment switches that turn the global-token fallback on (LoRAX's name, and Loom's). */
export const GLOBAL_TOKEN_SWITCHES = ['LORAX_USE_GLOBAL_HF_TOKEN', 'LOOM_USE_GLOBAL_HF_TOKEN'] as const

/** Where the server's own token is read from, in order. */
export const GLOBAL_TOKEN_VARIABLES = ['HF_TOKEN', 'HUGGING_FACE_HUB_TOKEN'] as const

/** Whether the fallback is on: the `use_global_token` option, or a switch set to `1`/`true`. */
export function globalTokenEnabled(option: boolean, env: NodeJS.ProcessEnv): boolean {
  return option || GLOBAL_TOKEN_SWITCHES.some((name) => /^(1|true)$/i.test(env[name]?.trim() ?? ''))
}

/** The server's token (`HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`), or undefined when neither is set. */
export function readGlobalToken(env: NodeJS.ProcessEnv): string | undefined {
  for (const name of GLOBAL_TOKEN_VARIABLES) {
    const value = env[name]?.trim()
    if (value) return value
  }
  return undefined
}
