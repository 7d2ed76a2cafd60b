import { getEventListeners } from 'node:events'
import { setImmediate as tick } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { LoomError } from '../../src/errors/index.ts'
import type { GenerationRequest } from '../../src/generation/generation-request.ts'
import type {
  GenerationEvent,
  GenerationResult,
  GenerationService,
  StartedGeneration,
} from '../../src/generation/generation-service.ts'
import { finishChoices, mergeChoices, startChoices } from '../../src/routes/openai/run-choices.ts'

/** A choice whose events the test releases one at a time; records whether it was cancelled. */
function scriptedChoice() {
  const queue: { resolve: (r: IteratorResult<GenerationEvent>) => void; reject: (e: unknown) => void }[] = []
  let returned = false
  const iterator: AsyncIterator<GenerationEvent> = {
    next: () => new Promise((resolve, reject) => queue.push({ resolve, reject })),
    return: () => {
      returned = true
      return Promise.resolve({ value: undefined, done: true })
    },
  }
  const started: StartedGeneration = {
    promptText: 'p',
    promptTokens: 1,
    adapter: null,
    events: { [Symbol.asyncIterator]: () => iterator },
  }
  return {
    started,
    get returned() {
      return returned
    },
    /** Answer the oldest pending pull. */
    emit(event: GenerationEvent) {
      queue.shift()!.resolve({ value: event, done: false })
    },
    fail(err: unknown) {
      queue.shift()!.reject(err)
    },
    /** The choice has no more events. */
    finish() {
      queue.shift()!.resolve({ value: undefined, done: true })
    },
    get waiting() {
      return queue.length
    },
  }
}

const token = (id: number): GenerationEvent => ({
  type: 'token',
  token: { id, text: `t${id}`, piece: `t${id}`, logprob: 0, special: false, skipped: false },
})

const result = { generatedText: 'x' } as GenerationResult

/** Collects unhandled rejections for the duration of a test. */
function watchUnhandled(t: Test): unknown[] {
  const seen: unknown[] = []
  const listener = (reason: unknown) => seen.push(reason)
  process.on('unhandledRejection', listener)
  t.teardown(() => void process.off('unhandledRejection', listener))
  return seen
}

t.test('a consumer that stops at an event leaves no pull that can reject unobserved', async (t) => {
  const unhandled = watchUnhandled(t)
  const a = scriptedChoice()
  const b = scriptedChoice()
  const merged = mergeChoices([a.started, b.started])
  const first = merged.next()
  a.emit(token(1))
  t.same((await first).value, { index: 0, value: token(1) })
  // The client leaves now: the route stops reading. Then the cancellation reaches the choices.
  await merged.return(undefined)
  while (a.waiting > 0) a.fail(new LoomError('request_cancelled'))
  while (b.waiting > 0) b.fail(new LoomError('request_cancelled'))
  await tick()
  await tick()
  t.same(unhandled, [], 'no unhandled rejection')
  t.ok(a.returned && b.returned, 'both choices were cancelled')
})

t.test("a choice's failure is thrown to the consumer and cancels the others", async (t) => {
  const unhandled = watchUnhandled(t)
  const a = scriptedChoice()
  const b = scriptedChoice()
  const c = scriptedChoice()
  const merged = mergeChoices([a.started, b.started, c.started])
  const failing = merged.next()
  b.fail(new LoomError('generation_error', { detail: 'boom' }))
  await t.rejects(failing, { code: 'generation_error' })
  t.ok(a.returned && c.returned, 'the other choices were cancelled')
  t.notOk(b.returned, 'the failed choice is over already')
  // Their pulls settle later (cancelled): nobody is waiting for them, and nothing leaks.
  a.fail(new LoomError('request_cancelled'))
  c.emit(token(2))
  await tick()
  await tick()
  t.same(unhandled, [], 'no unhandled rejection')
})

t.test('events interleave as they arrive, tagged by choice', async (t) => {
  const a = scriptedChoice()
  const b = scriptedChoice()
  const seen: string[] = []
  const done = (async () => {
    for await (const { index, value } of mergeChoices([a.started, b.started])) {
      seen.push(`${index}:${value.type === 'token' ? value.token.id : 'end'}`)
    }
  })()
  const step = async (act: () => void) => {
    act()
    for (let i = 0; i < 4; i++) await tick()
  }
  await step(() => b.emit(token(1)))
  await step(() => a.emit(token(2)))
  await step(() => b.emit({ type: 'end', result }))
  await step(() => b.finish())
  await step(() => a.emit({ type: 'end', result }))
  await step(() => a.finish())
  await done
  t.same(seen, ['1:1', '0:2', '1:end', '0:end'])
  t.notOk(a.returned || b.returned, 'choices that ran to the end are not cancelled')
})

t.test('finishChoices: the first failure is thrown and the other choices are cancelled', async (t) => {
  const a = scriptedChoice()
  const b = scriptedChoice()
  const finishing = finishChoices([a.started, b.started])
  await tick()
  a.fail(new LoomError('generation_error', { detail: 'boom' }))
  await t.rejects(finishing, { code: 'generation_error' })
  t.ok(b.returned, 'the other choice does not run on for nobody')
})

t.test('startChoices: one listener on the request signal, and the real failure reported', async (t) => {
  const listenersPerChoice = 4
  const childListeners: number[] = []
  const service = {
    async start(request: GenerationRequest, signal: AbortSignal): Promise<StartedGeneration> {
      // Like the real layers (sources, auth, backend), each adds its own abort listener.
      for (let i = 0; i < listenersPerChoice; i++) signal.addEventListener('abort', () => undefined, { once: true })
      childListeners.push(getEventListeners(signal, 'abort').length)
      if (request.requestedModel === 'fails') {
        await tick()
        throw new LoomError('adapter_not_found', { id: 'x', source: 'local' })
      }
      // The others wait (an adapter download) until cancelled.
      return new Promise((_, reject) =>
        signal.addEventListener('abort', () => reject(new LoomError('request_cancelled')), { once: true }),
      )
    },
  } as unknown as GenerationService
  const request = (model: string) => ({ requestedModel: model, sampling: {} }) as unknown as GenerationRequest
  const parent = new AbortController()
  const requests = [...Array.from({ length: 15 }, () => request('')), request('fails')]
  const thrown: unknown = await startChoices(service, requests, parent.signal, (err, index) => ({ err, index })).then(
    () => null,
    (failure: unknown) => failure,
  )
  t.match(thrown, { err: { code: 'adapter_not_found' }, index: 15 }, 'the failing choice, not a cancellation')
  t.equal(getEventListeners(parent.signal, 'abort').length, 1, "the request's signal carries one listener")
  t.ok(
    childListeners.every((n) => n === listenersPerChoice),
    "each choice's signal carries only its own listeners",
  )
})

t.test('startChoices: a request aborted before it starts cancels every choice', async (t) => {
  const parent = new AbortController()
  parent.abort(new Error('client disconnected'))
  const signals: AbortSignal[] = []
  const service = {
    start: (_request: GenerationRequest, signal: AbortSignal) => {
      signals.push(signal)
      return Promise.reject(new LoomError('request_cancelled'))
    },
  } as unknown as GenerationService
  await t.rejects(startChoices(service, [{} as GenerationRequest, {} as GenerationRequest], parent.signal), {
    code: 'request_cancelled',
  })
  t.ok(
    signals.every((s) => s.aborted),
    'every choice saw an aborted signal',
  )
})
