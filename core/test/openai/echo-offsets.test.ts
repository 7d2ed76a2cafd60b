import t from 'tap'
import { startSdkServer } from './sdk-test-server.ts'

/**
 * QA: with `echo` and `logprobs`, `text_offset` indexes the returned `text` exactly, in UTF-16
 * code units (JS string indices): BOS, which is not in the text, sits at 0 and takes no room;
 * tokens holding parts of a character all point at that character; nothing drifts after them.
 */
t.test('echo offsets index the returned text', async (t) => {
  const { test, client } = await startSdkServer(t.testdir())
  t.teardown(() => test.close())
  const ascii = /^[ -~\n]+$/

  for (const prompt of ['ROMEO:', 'Roméo — ☃ 😀: «ça»']) {
    const ask = { model: '', prompt, max_tokens: 6, temperature: 0, logprobs: 1 } as const
    const echoed = await client.completions.create({ ...ask, echo: true })
    const text = echoed.choices[0]!.text
    const { tokens, text_offset: offsets, token_logprobs: logprobs } = echoed.choices[0]!.logprobs!
    t.ok(text.startsWith(prompt), 'the text starts with the prompt')
    t.equal(tokens![0], '<|bos|>', 'the prompt tokens start with BOS')
    t.equal(offsets![0], 0, 'BOS takes the offset of the first character')
    t.equal(logprobs![0], null, 'and has no logprob')
    t.equal(offsets![1], 0, 'BOS takes no room')
    for (let i = 1; i < tokens!.length; i++) {
      const token = tokens![i]!
      const at = offsets![i]!
      t.ok(at >= offsets![i - 1]!, `offsets do not go back (${i})`)
      if (ascii.test(token)) t.equal(text.slice(at, at + token.length), token, `${JSON.stringify(token)} at ${at}`)
      else t.ok(text.codePointAt(at)! > 0x7f, `${JSON.stringify(token)} at ${at} points at a non-ASCII character`)
    }

    // The generated part: the same rows as without echo, shifted by the prompt's length.
    const plain = (await client.completions.create(ask)).choices[0]!.logprobs!
    const generated = plain.tokens!.length
    t.same(tokens!.slice(-generated), plain.tokens)
    t.same(
      offsets!.slice(-generated),
      plain.text_offset!.map((o) => o + prompt.length),
      `${JSON.stringify(prompt)}: generated offsets follow the prompt`,
    )
  }
})
