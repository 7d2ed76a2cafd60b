import t from 'tap'
import { MergeQueue } from '../../../src/adapters/merge/merge-queue.ts'

/** A promise and its resolver. */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void
  const promise = new Promise<void>((r) => (resolve = r))
  return { promise, resolve }
}

t.test('at most `limit` merges run at once, the others in arrival order', async (t) => {
  const queue = new MergeQueue(1)
  const gates = [deferred(), deferred(), deferred()]
  const order: string[] = []
  let running = 0
  let most = 0
  const jobs = gates.map((gate, i) =>
    queue.run(async () => {
      running++
      most = Math.max(most, running)
      order.push(`start ${i}`)
      await gate.promise
      order.push(`end ${i}`)
      running--
      return i
    }),
  )
  await new Promise((resolve) => setImmediate(resolve))
  t.same(order, ['start 0'], 'the second and third wait')
  for (const gate of gates) {
    gate.resolve()
    await new Promise((resolve) => setImmediate(resolve))
  }
  t.same(await Promise.all(jobs), [0, 1, 2])
  t.equal(most, 1, 'never two at once')
  t.same(order, ['start 0', 'end 0', 'start 1', 'end 1', 'start 2', 'end 2'])
})

t.test('closing rejects the waiting merges with server_closing; a failed one frees its turn', async (t) => {
  const queue = new MergeQueue(1)
  await t.rejects(
    queue.run(async () => {
      throw new Error('boom')
    }),
    /boom/,
  )
  const gate = deferred()
  const first = queue.run(() => gate.promise.then(() => 'done'))
  const waiting = queue.run(async () => 'never')
  queue.close()
  await t.rejects(waiting, { code: 'server_closing' })
  gate.resolve()
  t.equal(await first, 'done', 'the running one finishes (its own signal stops it)')
  await t.rejects(
    queue.run(async () => 'late'),
    { code: 'server_closing' },
  )
})
