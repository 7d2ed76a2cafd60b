import { readFileSync } from 'node:fs'

/** Loom's version, from the root package.json (read once at startup). */
export const LOOM_VERSION: string = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version
