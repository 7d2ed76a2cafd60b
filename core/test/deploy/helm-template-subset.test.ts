// The Helm-subset renderer the chart tests rely on: Helm's output for each construct the chart uses,
// and a clear error for anything outside the subset (so the chart cannot drift from what is tested).
import t from 'tap'
import { mergeValues, renderTemplate, toYaml, truthy } from './helm-template-subset.ts'

const scope = {
  Values: { name: 'loom', port: 3000, on: true, off: false, empty: {}, list: [], map: { b: 2, a: 'x' }, blank: '' },
  Release: { Name: 'rel', Namespace: 'ns', Service: 'Helm' },
  Chart: { Name: 'loom', Version: '0.1.0', AppVersion: '0.1.0' },
}
const render = (source: string) => renderTemplate(source, scope)

t.test('values and built-in objects', async (t) => {
  t.equal(render('name: {{ .Values.name }}-{{ .Release.Name }} v{{ .Chart.Version }}'), 'name: loom-rel v0.1.0')
  t.equal(render('port: {{ .Values.port }}'), 'port: 3000')
  t.equal(render('{{ .Values.port | quote }} {{ quote .Values.name }}'), '"3000" "loom"')
})

t.test('whitespace trimming', async (t) => {
  t.equal(render('a:\n  {{- .Values.name }}\nb'), 'a:loom\nb')
  t.equal(render('a: {{ .Values.name -}}\n\n  b'), 'a: loomb')
  t.equal(render('{{/* a comment */}}x'), 'x')
})

t.test('if / else with Go truth', async (t) => {
  t.equal(render('{{ if .Values.on }}y{{ else }}n{{ end }}'), 'y')
  for (const key of ['off', 'empty', 'list', 'blank']) {
    t.equal(render(`{{ if .Values.${key} }}y{{ else }}n{{ end }}`), 'n', `${key} is false`)
  }
  t.equal(truthy(0), false)
  t.equal(truthy([0]), true)
  t.equal(render('x\n{{- if .Values.off }}\nhidden\n{{- end }}\ny'), 'x\ny', 'a false block leaves no line')
})

t.test('toYaml, nindent, indent', async (t) => {
  t.equal(toYaml({ b: 1, a: { d: [1], c: 'x' } }), 'a:\n  c: x\n  d:\n    - 1\nb: 1', 'keys sorted, like Helm')
  t.equal(toYaml({}), '{}')
  t.equal(render('m:\n  {{- toYaml .Values.map | nindent 2 }}'), 'm:\n  a: x\n  b: 2')
  t.equal(render('{{ toYaml .Values.map | indent 4 }}'), '    a: x\n    b: 2')
})

t.test('define and include', async (t) => {
  const defines = new Map()
  renderTemplate('{{- define "x.name" -}}\n{{ .Release.Name }}-x\n{{- end }}', scope, { defines })
  t.equal(renderTemplate('n: {{ include "x.name" . }}', scope, { defines }), 'n: rel-x')
  t.equal(
    renderTemplate('l:\n  {{- include "x.name" . | nindent 2 }}', scope, { defines }),
    'l:\n  rel-x',
    'an include piped to nindent',
  )
})

t.test('anything outside the subset is an error', async (t) => {
  t.throws(() => render('{{ .Values.missing }}'), /\.Values\.missing is not set/)
  t.throws(() => render('{{ default "x" .Values.name }}'), /'default' is outside the subset/)
  t.throws(() => render('{{ range .Values.list }}{{ end }}'), /outside the subset/)
  t.throws(() => render('{{ .Values.map }}'), /prints .*not a string/)
  t.throws(() => render('{{ include "nope" . }}'), /undefined template/)
  t.throws(() => render('{{ if .Values.on }}open'), /if block not closed/)
  t.throws(() => render('{{ end }}'), /without a block/)
})

t.test("values merge like Helm's", async (t) => {
  t.same(mergeValues({ a: { b: 1, c: 2 }, l: [1, 2] }, { a: { c: 3 }, l: [9] }), { a: { b: 1, c: 3 }, l: [9] })
})
