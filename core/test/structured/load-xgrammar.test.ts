import t from 'tap'
import { loadXGrammar, loadXGrammarInstance, XGrammarConstraint } from '../../src/structured/index.ts'
import type { MatcherHandle } from '../../src/structured/xgrammar-constraint.ts'

t.test('loads once, leaves no globals behind, captures the wasm memory', async (t) => {
  const [a, b] = await Promise.all([loadXGrammar(), loadXGrammar()])
  t.equal(a, b, 'memoised')
  t.equal(await loadXGrammar(), a)
  const g = globalThis as Record<string, unknown>
  for (const name of ['require', '__filename', '__dirname', 'xgrammar'])
    t.equal(g[name], undefined, `no global ${name}`)
  t.type(a.api.GrammarCompiler.createGrammarCompiler, 'function')
  t.ok(a.memory instanceof WebAssembly.Memory, 'wasm memory captured')
  const fresh = await loadXGrammarInstance()
  t.not(fresh, a, 'a fresh instance is separate')
  t.not(fresh.api, a.api)
})

t.test('captureOutput returns what XGrammar printed with the error', async (t) => {
  const xg = await loadXGrammarInstance()
  const err = (await xg.captureOutput(() => xg.api.Grammar.fromJSONSchema('{"type":"banana"}')).catch((e) => e)) as {
    xgrammarOutput?: string[]
  }
  t.match(err.xgrammarOutput?.join('\n'), /\[FATAL\].*Unsupported type "banana"/)
  const ok = await xg.captureOutput(() => xg.api.Grammar.fromJSONSchema('{"type":"integer"}'))
  t.same(ok.output, [])
  ok.value.dispose()
})

t.test('block copy of the bitmask equals the package copy, past the vocabulary clear', async (t) => {
  const xg = await loadXGrammar()
  const vocab = ['"', '{', '}', ':', ',', ' ', '1', '2', 'a', '<eos>']
  const V = 70 // larger than the vocabulary, not a multiple of 32
  const info = await xg.api.TokenizerInfo.createTokenizerInfo(vocab, 'raw', false, V, [9])
  const compiler = await xg.api.GrammarCompiler.createGrammarCompiler(info, false)
  const grammar = await compiler.compileJSONSchema('{"type":"integer"}')
  for (const memory of [xg.memory, null]) {
    const matcher = await xg.api.GrammarMatcher.createGrammarMatcher(grammar)
    const expected = new Uint32Array(await matcher.getNextTokenBitmask())
    const handle = (matcher as unknown as { handle: MatcherHandle }).handle
    const constraint = new XGrammarConstraint(handle, V, [9], memory)
    const mask = new Uint32Array(3).fill(0xffffffff)
    t.equal(constraint.fillNextTokenMask(mask), true)
    t.same(
      mask,
      expected.map((w, i) => (i === 2 ? w & 0x3f : w)),
      memory ? 'block copy' : 'word by word',
    )
    t.same(
      [...mask].flatMap((w, i) => [...Array(32).keys()].filter((b) => (w >>> b) & 1).map((b) => i * 32 + b)),
      [6, 7],
    )
    constraint.dispose()
    constraint.dispose()
    t.throws(() => constraint.isTerminated(), /after dispose/)
  }
  grammar.dispose()
  compiler.dispose()
  info.dispose()
})
