/**
 * Turns what XGrammar printed before aborting a compile into a `grammar_unsupported` error that
 * names the schema keyword at fault where the message allows.
 */
import { LoomError } from '../errors/index.ts'

/** `[FATAL] /path/to/json_schema_converter.cc:902: Unsupported type "foo"` → its parts. */
const FATAL_LINE = /^\[FATAL\]\s+(?:\S*\/)?([\w.-]+\.cc):\d+:\s*(.*)$/s
/** XGrammar's CHECK macro adds `Check failed: (<C++ condition>) is false: ` before the message. */
const CHECK_PREFIX = /^Check failed: \(.*?\) is false:\s*/s

/** Keywords recognisable from the message text, tried in order. */
const KEYWORD_HINTS: readonly [RegExp, string][] = [
  [/^Unsupported type/, 'type'],
  [/\bminItems\b|\bmaxItems\b|prefixItems/, 'minItems/maxItems'],
  [/\bminLength\b|\bmaxLength\b/, 'minLength/maxLength'],
  [/\bminProperties\b|\bmaxProperties\b/, 'minProperties/maxProperties'],
  [/\bminimum\b|\bmaximum\b|Invalid range/, 'minimum/maximum'],
  [/\bURI\b|\$ref|Cannot find field|\$defs|definitions/, '$ref'],
  [/\benum\b/i, 'enum'],
  [/\bconst\b/, 'const'],
  [/Schema should not be false/, 'false schema'],
]

/** The keyword a failed compile points at, or null when the message does not say. */
function keywordOf(file: string, message: string): string | null {
  // The regex converter only ever sees `pattern` (and `format`s XGrammar maps to regexes, which it
  // writes itself), so its errors are about the user's `pattern`.
  if (file === 'regex_converter.cc') return 'pattern'
  for (const [hint, keyword] of KEYWORD_HINTS) if (hint.test(message)) return keyword
  return null
}

/**
 * Build the 422 for a schema XGrammar could not compile from the lines it printed (`[FATAL] …`).
 * The message keeps XGrammar's own wording (it names what is unsupported, e.g. "Lookbehind is not
 * supported yet") without the C++ source path.
 */
export function grammarUnsupportedError(output: readonly string[], cause: unknown): LoomError {
  const fatal = output.find((line) => line.startsWith('[FATAL]'))
  const match = fatal === undefined ? null : FATAL_LINE.exec(fatal.trim())
  if (match === null) {
    const reason = cause instanceof Error ? cause.message : String(cause)
    return new LoomError(
      'grammar_unsupported',
      { detail: `the structured-output engine rejected the schema (${reason})` },
      { param: 'response_format', cause },
    )
  }
  const file = match[1]!
  const message = match[2]!.replace(CHECK_PREFIX, '').trim()
  const keyword = keywordOf(file, message)
  const detail =
    keyword === null
      ? `the schema is not supported: ${message}`
      : `\`${keyword}\` is not supported as given: ${message}`
  return new LoomError('grammar_unsupported', { detail }, { param: 'response_format', cause })
}
