import t from 'tap'
import { StopSequenceMatcher } from '../../src/generation/stop-sequences.ts'

t.test('include mode (native): finds a stop split across deltas and keeps it', async (t) => {
  const m = new StopSequenceMatcher(['\n\n', 'END'], true)
  t.same(m.push('Hello'), { emit: 'Hello', stopped: false })
  t.same(m.push(' E'), { emit: ' E', stopped: false })
  t.same(m.push('NDING'), { emit: 'ND', stopped: true }, 'output ends with the stop sequence')
})

t.test('exclude mode (OpenAI): holds back a possible stop prefix and cuts the stop off', async (t) => {
  const m = new StopSequenceMatcher(['END'], false)
  t.same(m.push('Hello E'), { emit: 'Hello ', stopped: false }, '"E" might start END: held back')
  t.same(m.push('N'), { emit: '', stopped: false })
  t.same(m.push('Dx'), { emit: '', stopped: true }, 'END is cut off, nothing after it is emitted')
})

t.test('exclude mode releases held text once it cannot be a stop', async (t) => {
  const m = new StopSequenceMatcher(['END'], false)
  t.same(m.push('an E'), { emit: 'an ', stopped: false })
  t.same(m.push('ND'), { emit: '', stopped: true })
  const n = new StopSequenceMatcher(['END'], false)
  n.push('an E')
  t.same(n.push('x'), { emit: 'Ex', stopped: false })
  t.equal(n.flush(), '')
  const o = new StopSequenceMatcher(['END'], false)
  o.push('tail E')
  t.equal(o.flush(), 'E', 'flush at the end of generation releases held text')
})

t.test('the earliest-ending stop wins when several match in one delta', async (t) => {
  const m = new StopSequenceMatcher(['cd', 'abc'], true)
  t.same(m.push('xabcd'), { emit: 'xabc', stopped: true })
})

t.test('no stops: everything is emitted at once', async (t) => {
  const m = new StopSequenceMatcher([], false)
  t.same(m.push('anything at all'), { emit: 'anything at all', stopped: false })
})
