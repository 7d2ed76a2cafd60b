import { readFile } from 'node:fs/promises'
import t from 'tap'
import { ERRORS, type ErrorCode } from '../../src/errors/index.ts'

// docs/errors.md has one `## code` section per registry code. A section may state its status and
// types in a line `Status 422 · error_type \`validation\` · type \`invalid_request_error\``; when it
// does, they must match the registry.
const DOC = new URL('../../../docs/errors.md', import.meta.url)

interface Section {
  readonly code: string
  readonly text: string
}

function sections(markdown: string): Section[] {
  const parts = markdown.split(/^## /m).slice(1)
  return parts.map((part) => {
    const newline = part.indexOf('\n')
    return { code: part.slice(0, newline).trim(), text: part.slice(newline + 1) }
  })
}

t.test('every error code is documented and every documented code exists', async (t) => {
  const documented = sections(await readFile(DOC, 'utf8'))
  const codes = new Set(Object.keys(ERRORS))
  const seen = new Set<string>()
  for (const { code } of documented) {
    t.ok(codes.has(code), `docs/errors.md documents \`${code}\`, which is not in core/src/errors/registry.ts`)
    t.notOk(seen.has(code), `\`${code}\` is documented once`)
    seen.add(code)
  }
  for (const code of codes) {
    t.ok(seen.has(code), `\`${code}\` from registry.ts has a \`## ${code}\` section in docs/errors.md`)
  }
})

t.test('each section explains its code and states the registry status and types', async (t) => {
  for (const { code, text } of sections(await readFile(DOC, 'utf8'))) {
    if (!(code in ERRORS)) continue
    const spec = ERRORS[code as ErrorCode]
    const prose = text.replace(/^Status .*$/m, '').trim()
    t.ok(prose.length >= 40, `\`${code}\` says when it happens and what to do`)
    const line = /^Status (\d{3}) · error_type `([^`]+)` · type `([^`]+)`\s*$/m.exec(text)
    if (line === null) continue
    t.strictSame(
      { status: Number(line[1]), nativeType: line[2], openaiType: line[3] },
      { status: spec.status, nativeType: spec.nativeType, openaiType: spec.openaiType },
      `\`${code}\` status line matches the registry`,
    )
  }
})
