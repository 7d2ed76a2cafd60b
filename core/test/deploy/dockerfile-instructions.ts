/**
 * A Dockerfile as a list of instructions grouped by build stage: enough to check what the images
 * run without a Docker engine. Continuation lines are joined, comments and the parser directive
 * dropped; JSON (exec) forms are parsed.
 */
export interface Instruction {
  /** Upper-cased: FROM, RUN, COPY, ... */
  readonly name: string
  /** The text after the instruction's name, continuations joined with a space. */
  readonly args: string
  /** 1-based line of the instruction's first line. */
  readonly line: number
}

export interface Stage {
  /** FROM's image, as written (build arguments not substituted). */
  readonly from: string
  /** `AS name`, if given. */
  readonly name: string | undefined
  readonly instructions: Instruction[]
}

export interface Dockerfile {
  /** Instructions before the first FROM (global ARGs). */
  readonly global: Instruction[]
  readonly stages: Stage[]
}

export function parseDockerfile(text: string): Dockerfile {
  const instructions: Instruction[] = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const first = lines[i]!
    if (/^\s*(#|$)/.test(first)) continue
    const start = i + 1
    let joined = first
    while (/\\\s*$/.test(joined) && i + 1 < lines.length) {
      joined = joined.replace(/\\\s*$/, ' ')
      i++
      // Comment lines inside a continued instruction are dropped, as Docker does.
      while (i + 1 < lines.length && /^\s*#/.test(lines[i]!)) i++
      joined += lines[i]!.trim()
    }
    const match = /^\s*([A-Za-z]+)\s+([\s\S]*)$/.exec(joined)
    if (!match) throw new Error(`Dockerfile line ${start}: cannot read '${first}'`)
    instructions.push({ name: match[1]!.toUpperCase(), args: match[2]!.replace(/\s+/g, ' ').trim(), line: start })
  }
  const global: Instruction[] = []
  const stages: Stage[] = []
  for (const instruction of instructions) {
    if (instruction.name === 'FROM') {
      const [from, as, name] = instruction.args.split(' ')
      stages.push({ from: from!, name: as?.toUpperCase() === 'AS' ? name : undefined, instructions: [] })
    } else if (stages.length === 0) {
      global.push(instruction)
    } else {
      stages[stages.length - 1]!.instructions.push(instruction)
    }
  }
  return { global, stages }
}

/** The commands of a shell-form RUN, split on `&&` and `;` (subshell parentheses removed). */
export function shellCommands(args: string): string[] {
  return args
    .split(/&&|;/)
    .map((c) => c.replace(/^[\s(]+|[\s)]+$/g, '').trim())
    .filter((c) => c !== '')
}

/** An exec-form (JSON array) argument list, or undefined for the shell form. */
export function execForm(args: string): string[] | undefined {
  if (!args.startsWith('[')) return undefined
  const parsed: unknown = JSON.parse(args)
  if (!Array.isArray(parsed) || !parsed.every((a) => typeof a === 'string')) {
    throw new Error(`not a JSON string array: ${args}`)
  }
  return parsed
}

/** `KEY=value` pairs of an ENV or ARG instruction (the `ENV KEY value` form too). */
export function assignments(args: string): Map<string, string> {
  const out = new Map<string, string>()
  const legacy = /^([A-Za-z_][A-Za-z0-9_]*) ([^=]*)$/.exec(args)
  if (legacy) return out.set(legacy[1]!, legacy[2]!)
  for (const pair of args.match(/[A-Za-z_][A-Za-z0-9_]*(?:=(?:"[^"]*"|\S*))?/g) ?? []) {
    const [key, ...rest] = pair.split('=')
    out.set(key!, rest.join('=').replace(/^"|"$/g, ''))
  }
  return out
}
