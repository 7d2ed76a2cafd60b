import type OpenAI from 'openai'
import t from 'tap'
import { startSdkServer } from './sdk-test-server.ts'

/**
 * QA: logprobs cover exactly the text returned when a stop sequence cuts it. Tokens wholly in the
 * removed part are left out; the token the cut falls inside is kept, shown cut to the returned part
 * (bytes too) with its whole logprob. Streamed and non-streamed answers list the same tokens.
 */
t.test('logprobs end where a stop sequence cut the text', async (t) => {
  const { test, client } = await startSdkServer(t.testdir())
  t.teardown(() => test.close())
  const messages = [{ role: 'user' as const, content: 'Tell me a story' }]
  const greedy = { model: '', temperature: 0, max_tokens: 24, logprobs: true, top_logprobs: 2 } as const
  const free = await client.chat.completions.create({ ...greedy, messages })
  const tokens = free.choices[0]!.logprobs!.content!
  const text = free.choices[0]!.message.content!
  // The testkit model writes bytes at random: tokens holding parts of characters show U+FFFD, and
  // their bytes (the field OpenAI adds for exactly this) rebuild the text.
  const textBefore = (k: number) => Buffer.from(tokens.slice(0, k).flatMap((c) => c.bytes!)).toString('utf8')
  t.equal(textBefore(tokens.length), text, 'without a stop, the tokens spell the text')

  // Cut inside a token: the stop starts at its second character and runs past its end.
  const inside = tokens.findIndex((c, i) => {
    const at = textBefore(i).length
    return i > 0 && /^[ -~]{2,}$/.test(c.token) && text.indexOf(text.slice(at + 1, at + 4)) === at + 1
  })
  t.ok(inside > 0, `a token to cut inside: ${JSON.stringify(tokens.map((c) => c.token))}`)
  const cutAt = textBefore(inside).length + 1
  const stop = text.slice(cutAt, cutAt + 3)
  const kept = [...tokens.slice(0, inside).map((c) => c.token), tokens[inside]!.token.slice(0, 1)]

  const stopped = await client.chat.completions.create({ ...greedy, messages, stop })
  const choice = stopped.choices[0]!
  t.equal(choice.message.content, text.slice(0, cutAt), `the stop ${JSON.stringify(stop)} cuts the text`)
  t.equal(choice.finish_reason, 'stop')
  const listed = choice.logprobs!.content!
  t.same(
    listed.map((c) => c.token),
    kept,
    'the tokens spell exactly the returned text',
  )
  t.same(
    listed.map((c) => c.logprob),
    tokens.slice(0, inside + 1).map((c) => c.logprob),
    'with the logprobs of the whole tokens',
  )
  t.same(listed[inside]!.bytes, [...Buffer.from(kept[inside]!)], "the cut token's bytes are cut too")
  t.same(listed[inside]!.top_logprobs, tokens[inside]!.top_logprobs, 'its alternatives are as generated')

  const chunks: OpenAI.ChatCompletionChunk[] = []
  for await (const chunk of await client.chat.completions.create({ ...greedy, messages, stop, stream: true }))
    chunks.push(chunk)
  t.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), choice.message.content, 'streamed text')
  t.same(
    chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? []),
    listed,
    'streamed logprobs equal the non-streamed ones',
  )

  // A stop at a token boundary: the tokens after it are all left out, none is cut.
  const boundary = cutAt - 1
  const atBoundary = await client.chat.completions.create({
    ...greedy,
    messages,
    stop: text.slice(boundary, boundary + 3),
  })
  t.same(
    atBoundary.choices[0]!.logprobs!.content!.map((c) => c.token),
    tokens.slice(0, inside).map((c) => c.token),
  )

  t.test('/v1/completions', async (t) => {
    const ask = { model: '', prompt: 'Once upon a time', temperature: 0, max_tokens: 24, logprobs: 2 } as const
    const whole = await client.completions.create(ask)
    const wholeText = whole.choices[0]!.text
    const rows = whole.choices[0]!.logprobs!
    const k = rows.tokens!.findIndex((tok, i) => {
      const at = rows.text_offset![i]!
      t.ok(!/^[ -~]+$/.test(tok) || wholeText.startsWith(tok, at), `${JSON.stringify(tok)} is at its offset`)
      return i > 0 && /^[ -~]{2,}$/.test(tok) && wholeText.indexOf(wholeText.slice(at + 1, at + 4)) === at + 1
    })
    t.ok(k > 0, `a token to cut inside: ${JSON.stringify(rows.tokens)}`)
    const cut = rows.text_offset![k]! + 1
    const cutStop = wholeText.slice(cut, cut + 3)
    const expected = {
      tokens: [...rows.tokens!.slice(0, k), rows.tokens![k]!.slice(0, 1)],
      token_logprobs: rows.token_logprobs!.slice(0, k + 1),
      top_logprobs: rows.top_logprobs!.slice(0, k + 1),
      text_offset: rows.text_offset!.slice(0, k + 1),
    }
    const cutRes = await client.completions.create({ ...ask, stop: cutStop })
    t.equal(cutRes.choices[0]!.text, wholeText.slice(0, cut))
    t.same(cutRes.choices[0]!.logprobs, expected)

    const streamed = {
      tokens: [] as string[],
      token_logprobs: [] as number[],
      top_logprobs: [] as unknown[],
      text_offset: [] as number[],
    }
    let streamedText = ''
    for await (const chunk of await client.completions.create({ ...ask, stop: cutStop, stream: true })) {
      const c = chunk.choices[0]!
      streamedText += c.text
      for (const key of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const)
        (streamed[key] as unknown[]).push(...((c.logprobs?.[key] as unknown[] | undefined) ?? []))
    }
    t.equal(streamedText, wholeText.slice(0, cut))
    t.same(streamed, expected, 'streamed rows equal the non-streamed ones, offsets into the streamed text')
  })
})
