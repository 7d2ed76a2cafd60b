/**
 * Renders the subset of Helm's template language that deploy/helm/loom is written in, so the
 * tests can validate the chart's manifests without a Helm binary (none is installed here, and no
 * maintained JavaScript renderer of Helm templates exists).
 *
 * The subset, with Helm's meaning:
 * - `{{ .Values.a.b }}`, `{{ .Release.Name }}` (also `Namespace`, `Service`), `{{ .Chart.Name }}`
 *   (also `Version`, `AppVersion`), `.` itself, "string" and integer literals;
 * - `include "name" .` of a `define "name"` … `end` block from a `_*.tpl` file;
 * - the functions `toYaml X` and `quote X`, and in pipes `| nindent N`, `| indent N`, `| quote`,
 *   `| toYaml`;
 * - `if PIPELINE` … `else` … `end`, with Go templates' truth (false, 0, "", null and empty maps
 *   and lists are false);
 * - `{{-` and `-}}` whitespace trimming, and `{{/* comments *\/}}`.
 *
 * It is stricter than Helm where Helm would quietly render something: a value missing from the
 * values, a map printed as text, or any action outside the subset throws, naming the template, so
 * a template that strays from the subset fails the tests instead of rendering differently here.
 */
import { readFileSync, readdirSync } from 'node:fs'
import path from 'node:path'
import { parse as parseYaml, parseAllDocuments, stringify as stringifyYaml } from 'yaml'

/** What `.` is at the top of a template: Helm's built-in objects that the subset knows. */
export interface TemplateScope {
  readonly Values: Record<string, unknown>
  readonly Release: { readonly Name: string; readonly Namespace: string; readonly Service: string }
  readonly Chart: { readonly Name: string; readonly Version: string; readonly AppVersion: string }
}

type Node =
  | { kind: 'text'; text: string }
  | { kind: 'output'; pipeline: string }
  | { kind: 'if'; pipeline: string; then: Node[]; else: Node[] }

interface Action {
  readonly body: string
  readonly trimLeft: boolean
  readonly trimRight: boolean
}

/** One rendered chart: every object, with the template it came from. */
export interface RenderedObject {
  readonly template: string
  readonly object: Record<string, unknown>
}

const ACTION = /\{\{(-\s)?([\s\S]*?)(\s-)?\}\}/g

/** Split a template into text and actions, applying `{{-` / `-}}` trimming to the text between. */
function lex(source: string): (string | Action)[] {
  const parts: (string | Action)[] = []
  let last = 0
  for (const match of source.matchAll(ACTION)) {
    parts.push(source.slice(last, match.index))
    parts.push({ body: match[2]!.trim(), trimLeft: match[1] !== undefined, trimRight: match[3] !== undefined })
    last = match.index + match[0].length
  }
  parts.push(source.slice(last))
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]
    if (typeof part === 'string') continue
    if (part!.trimLeft) parts[i - 1] = (parts[i - 1] as string).replace(/\s+$/, '')
    if (part!.trimRight) parts[i + 1] = (parts[i + 1] as string).replace(/^\s+/, '')
  }
  return parts
}

/** Parse lexed parts into nodes; `define` blocks go into `defines`. */
function parse(parts: (string | Action)[], file: string, defines: Map<string, Node[]>): Node[] {
  const root: Node[] = []
  // The open blocks, innermost last: where nodes go, and which branch of an `if` is being filled.
  const stack: { nodes: Node[]; block: 'root' | 'define' | 'if'; node?: Node & { kind: 'if' }; name?: string }[] = [
    { nodes: root, block: 'root' },
  ]
  const top = () => stack[stack.length - 1]!
  for (const part of parts) {
    if (typeof part === 'string') {
      if (part !== '') top().nodes.push({ kind: 'text', text: part })
      continue
    }
    const body = part.body
    if (body.startsWith('/*') && body.endsWith('*/')) continue
    const define = /^define\s+"([^"]+)"$/.exec(body)
    if (define) {
      const nodes: Node[] = []
      defines.set(define[1]!, nodes)
      stack.push({ nodes, block: 'define', name: define[1]! })
    } else if (body.startsWith('if ')) {
      const node = { kind: 'if' as const, pipeline: body.slice(3).trim(), then: [], else: [] }
      top().nodes.push(node)
      stack.push({ nodes: node.then, block: 'if', node })
    } else if (body === 'else') {
      const open = top()
      if (open.block !== 'if' || open.nodes !== open.node!.then) throw new Error(`${file}: {{ else }} outside an if`)
      open.nodes = open.node!.else
    } else if (body === 'end') {
      if (stack.length === 1) throw new Error(`${file}: {{ end }} without a block`)
      stack.pop()
    } else if (/^(range|with|block|template|else\b)|^\$|:=/.test(body)) {
      throw new Error(`${file}: {{ ${body} }} is outside the subset`)
    } else {
      top().nodes.push({ kind: 'output', pipeline: body })
    }
  }
  if (stack.length !== 1) throw new Error(`${file}: ${top().block} block not closed`)
  return root
}

/** Go templates' truth: false, 0, nil, "" and empty collections are false. */
export function truthy(value: unknown): boolean {
  if (value === null || value === undefined || value === false || value === 0 || value === '') return false
  if (Array.isArray(value)) return value.length > 0
  if (typeof value === 'object') return Object.keys(value).length > 0
  return true
}

/** Helm's toYaml: keys sorted (sigs.k8s.io/yaml goes through JSON), no trailing newline. */
export function toYaml(value: unknown): string {
  return stringifyYaml(value, { sortMapEntries: true, lineWidth: 0 }).replace(/\n$/, '')
}

function indent(text: string, spaces: number): string {
  const pad = ' '.repeat(spaces)
  return text
    .split('\n')
    .map((line) => pad + line)
    .join('\n')
}

/** Split on spaces outside double quotes. */
function words(command: string): string[] {
  return command.match(/"(?:[^"\\]|\\.)*"|\S+/g) ?? []
}

/** Split a pipeline on `|` outside double quotes. */
function commands(pipeline: string): string[] {
  return (pipeline.match(/(?:"(?:[^"\\]|\\.)*"|[^|"])+/g) ?? []).map((c) => c.trim())
}

class Renderer {
  constructor(
    readonly defines: Map<string, Node[]>,
    readonly file: string,
  ) {}

  render(nodes: Node[], dot: unknown): string {
    let out = ''
    for (const node of nodes) {
      if (node.kind === 'text') out += node.text
      else if (node.kind === 'output') out += this.print(this.pipeline(node.pipeline, dot), node.pipeline)
      else out += this.render(truthy(this.pipeline(node.pipeline, dot)) ? node.then : node.else, dot)
    }
    return out
  }

  print(value: unknown, action: string): string {
    if (typeof value === 'string') return value
    if (typeof value === 'number' || typeof value === 'boolean') return String(value)
    throw new Error(`${this.file}: {{ ${action} }} prints ${JSON.stringify(value)}, not a string, number or boolean`)
  }

  term(word: string, dot: unknown, action: string): unknown {
    if (word.startsWith('"')) return JSON.parse(word) as string
    if (/^-?\d+$/.test(word)) return Number(word)
    if (word === '.') return dot
    if (!word.startsWith('.')) throw new Error(`${this.file}: {{ ${action} }}: '${word}' is outside the subset`)
    let value: unknown = dot
    let walked = ''
    for (const key of word.slice(1).split('.')) {
      walked += `.${key}`
      if (value === null || typeof value !== 'object' || !Object.hasOwn(value, key)) {
        throw new Error(`${this.file}: {{ ${action} }}: ${walked} is not set`)
      }
      value = (value as Record<string, unknown>)[key]
    }
    return value
  }

  pipeline(pipeline: string, dot: unknown): unknown {
    const [first, ...rest] = commands(pipeline)
    let value = this.command(words(first ?? ''), dot, pipeline)
    for (const command of rest) value = this.command(words(command), dot, pipeline, value)
    return value
  }

  /** One command; `piped` is the previous command's value, Go's final argument. */
  command(command: string[], dot: unknown, action: string, ...piped: unknown[]): unknown {
    const [name, ...args] = command
    const values = () => [...args.map((a) => this.term(a, dot, action)), ...piped]
    switch (name) {
      case 'include': {
        const [template, scope] = values()
        const body = this.defines.get(template as string)
        if (!body) throw new Error(`${this.file}: include of undefined template ${JSON.stringify(template)}`)
        return this.render(body, scope)
      }
      case 'toYaml':
        return toYaml(only(values(), name, this.file))
      case 'quote':
        return JSON.stringify(this.print(only(values(), name, this.file), action))
      case 'nindent':
      case 'indent': {
        const [spaces, text] = values()
        if (typeof spaces !== 'number' || typeof text !== 'string') {
          throw new Error(`${this.file}: {{ ${action} }}: ${name} takes a number and a string`)
        }
        return (name === 'nindent' ? '\n' : '') + indent(text, spaces)
      }
      default:
        if (command.length === 1 && piped.length === 0) return this.term(name!, dot, action)
        throw new Error(`${this.file}: {{ ${action} }}: '${name}' is outside the subset`)
    }
  }
}

function only(values: unknown[], name: string, file: string): unknown {
  if (values.length !== 1) throw new Error(`${file}: ${name} takes one argument, got ${values.length}`)
  return values[0]
}

/** Render one template's text with the given defines (from `_*.tpl` files) and scope. */
export function renderTemplate(
  source: string,
  scope: unknown,
  options: { file?: string; defines?: Map<string, Node[]> } = {},
): string {
  const file = options.file ?? '(template)'
  const defines = options.defines ?? new Map<string, Node[]>()
  const nodes = parse(lex(source), file, defines)
  return new Renderer(defines, file).render(nodes, scope)
}

/** Helm's values merge: maps merge key by key, anything else in `override` replaces. */
export function mergeValues(base: unknown, override: unknown): unknown {
  const isMap = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v)
  if (!isMap(base) || !isMap(override)) return override
  const merged: Record<string, unknown> = { ...base }
  for (const [key, value] of Object.entries(override)) merged[key] = mergeValues(base[key], value)
  return merged
}

/**
 * `helm template RELEASE CHART_DIR` for the subset: values.yaml merged with `overrides`, every
 * `templates/*.yaml` rendered and split into its YAML documents (empty ones dropped).
 */
export function renderChart(
  chartDir: string,
  options: { release: string; namespace?: string; overrides?: Record<string, unknown> },
): RenderedObject[] {
  const chart = parseYaml(readFileSync(path.join(chartDir, 'Chart.yaml'), 'utf8')) as Record<string, string>
  const defaults = parseYaml(readFileSync(path.join(chartDir, 'values.yaml'), 'utf8')) as Record<string, unknown>
  const scope: TemplateScope = {
    Values: mergeValues(defaults, options.overrides ?? {}) as Record<string, unknown>,
    Release: { Name: options.release, Namespace: options.namespace ?? 'default', Service: 'Helm' },
    Chart: { Name: chart.name!, Version: chart.version!, AppVersion: chart.appVersion! },
  }
  const templatesDir = path.join(chartDir, 'templates')
  const files = readdirSync(templatesDir).sort()
  const defines = new Map<string, Node[]>()
  for (const file of files.filter((f) => f.startsWith('_') && f.endsWith('.tpl'))) {
    const text = renderTemplate(readFileSync(path.join(templatesDir, file), 'utf8'), scope, { file, defines })
    if (text.trim() !== '') throw new Error(`${file}: a helper file may only define templates`)
  }
  const rendered: RenderedObject[] = []
  for (const file of files.filter((f) => f.endsWith('.yaml'))) {
    const text = renderTemplate(readFileSync(path.join(templatesDir, file), 'utf8'), scope, { file, defines })
    for (const doc of parseAllDocuments(text)) {
      if (doc.errors.length > 0) throw new Error(`${file}: rendered YAML is invalid: ${doc.errors[0]!.message}`)
      const object = doc.toJS() as Record<string, unknown> | null
      if (object !== null) rendered.push({ template: file, object })
    }
  }
  return rendered
}
