import t from 'tap'
import { StopSequenceMatcher } from '../../src/generation/stop-sequences.ts'

t.test('finds a stop sequence split across deltas and returns where to cut', async (t) => {
  const m = new StopSequenceMatcher(['\n\n', 'END'])
  t.equal(m.push('Hello'), -1)
  t.equal(m.push(' E'), -1)
  t.equal(m.push('NDING'), 'Hello END'.length, 'cut just past END')
})

t.test('the earliest-ending stop wins when several match in one delta', async (t) => {
  const m = new StopSequenceMatcher(['cd', 'abc'])
  t.equal(m.push('xabcd'), 4)
})

t.test('no stops: never matches', async (t) => {
  const m = new StopSequenceMatcher([])
  t.equal(m.push('anything at all'), -1)
})
