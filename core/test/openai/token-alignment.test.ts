import t from 'tap'
import { alignPieces } from '../../src/routes/openai/token-alignment.ts'

const F = '\uFFFD'
const offsets = (text: string, pieces: string[], final = true) => alignPieces(text, 0, pieces, final).aligned

/** Placing tokens in a response's text: the offsets, shown strings and bytes the v1 logprobs report. */
t.test('tokens whose strings are their text', async (t) => {
  const placed = offsets('ROMEO:\nI will', ['<|bos|>', 'ROMEO', ':', '\n', 'I', ' will'])
  t.same(
    placed.map((p) => [p.offset, p.shown, p.inText]),
    [
      [0, '<|bos|>', false],
      [0, 'ROMEO', true],
      [5, ':', true],
      [6, '\n', true],
      [7, 'I', true],
      [8, ' will', true],
    ],
    'a special token has no text and the offset of the next character',
  )
  const spaceLost = offsets('Hello world', ['Hello', 'world'])
  t.same(
    spaceLost.map((p) => [p.offset, p.shown]),
    [
      [0, 'Hello'],
      [5, ' world'],
    ],
    'a SentencePiece token whose string lost its leading space still covers it',
  )
})

t.test('a stop sequence cut the text', async (t) => {
  const placed = offsets('CORIO', ['CORI', 'OL', 'AN', 'US'])
  t.same(
    placed.map((p) => [p.offset, p.shown, p.inText]),
    [
      [0, 'CORI', true],
      [4, 'O', true],
      [5, 'AN', false],
      [5, 'US', false],
    ],
  )
  const pending = alignPieces('CORI', 0, ['CORI', 'OL'], false)
  t.same(
    pending.aligned.map((p) => p.shown),
    ['CORI'],
    'while streaming, a token the text ends inside waits',
  )
  t.equal(pending.end, 4)
  t.same(alignPieces('CORIO', 4, ['OL', 'AN'], false).aligned, [], 'and still waits while the text may grow')
})

t.test('tokens holding parts of characters', async (t) => {
  const text = 'Roméo — ☃:'
  const pieces = ['<|bos|>', 'R', 'om', F, F, 'o', ' ', F, F, F, ' ', F, F, F, ':']
  const placed = offsets(text, pieces)
  t.same(
    placed.map((p) => p.offset),
    [0, 0, 1, 3, 3, 4, 5, 6, 6, 6, 7, 8, 8, 8, 9],
  )
  t.same(
    placed.map((p) => p.bytes),
    [null, null, null, [0xc3], [0xa9], null, null, [0xe2], [0x80], [0x94], null, [0xe2], [0x98], [0x83], null],
    'byte tokens get their bytes',
  )
  t.ok(
    placed.every((p, i) => i === 0 || p.inText),
    'all in the text',
  )
  t.equal(
    alignPieces('Roméo — ☃', 0, pieces.slice(0, -1), false).aligned.length,
    11,
    'while streaming, a run of them at the end waits (its last character may not be whole yet)',
  )

  const emoji = offsets('a😀b', ['a', F, F, F, F, 'b'])
  t.same(
    emoji.map((p) => p.offset),
    [0, 1, 1, 1, 1, 3],
    'offsets are UTF-16 indices',
  )
  const merged = offsets('—x', [F, F, 'x'])
  t.same(
    merged.map((p) => [p.offset, p.bytes]),
    [
      [0, null],
      [0, null],
      [1, null],
    ],
    'a token holding several bytes: no exact bytes, and no drift after the run',
  )
  const cut = offsets('é', [F, F, F, F])
  t.same(
    cut.map((p) => p.inText),
    [true, true, false, false],
    'bytes past a cut are not in the text',
  )
})
