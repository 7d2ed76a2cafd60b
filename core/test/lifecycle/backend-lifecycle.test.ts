import t from 'tap'
import { BackendLifecycle } from '../../src/lifecycle/backend-lifecycle.ts'

/** A backend whose work is a set of names; records what the lifecycle asked of it. */
class Recorder extends BackendLifecycle {
  readonly work = new Set<string>()
  readonly failed: string[] = []
  shutdowns = 0
  failShutdown = false

  take(name: string): void {
    if (this.closing) throw new Error('server_closing')
    this.work.add(name)
  }

  finish(name: string): void {
    this.work.delete(name)
    this.workDone()
  }

  protected isIdle(): boolean {
    return this.work.size === 0
  }

  protected failAll(reason: Error): void {
    for (const name of this.work) this.failed.push(`${name}: ${reason.message}`)
    this.work.clear()
  }

  protected async shutdown(): Promise<void> {
    this.shutdowns++
    if (this.failShutdown) throw new Error('shutdown failed')
  }
}

t.test('close refuses new work, waits for the running work, shuts down once', async (t) => {
  const b = new Recorder()
  b.take('a')
  let closed = false
  const closing = b.close().then(() => (closed = true))
  t.equal(b.close(), b.close(), 'idempotent: the same promise')
  t.throws(() => b.take('b'), /server_closing/, 'new work refused')
  await new Promise((resolve) => setImmediate(resolve))
  t.notOk(closed, 'still waiting for a')
  t.equal(b.shutdowns, 0)
  b.finish('a')
  await closing
  t.equal(b.shutdowns, 1, 'shut down once the work drained')
  b.destroy()
  t.equal(b.shutdowns, 1, 'destroy after close does not shut down again')
})

t.test('destroy fails everything now and shuts down; close then resolves', async (t) => {
  const b = new Recorder()
  b.take('a')
  b.take('b')
  b.destroy(new Error('gone'))
  b.destroy(new Error('twice'))
  t.same(b.failed, ['a: gone', 'b: gone'], 'failed once, with the first reason')
  await b.close()
  t.equal(b.shutdowns, 1)
})

t.test('a failing shutdown still settles close', async (t) => {
  const b = new Recorder()
  b.failShutdown = true
  await b.close()
  t.equal(b.shutdowns, 1)
})
