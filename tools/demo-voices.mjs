// The README's OpenAI SDK example: one prompt through the base model and each demo adapter, sent
// at once (they share batches). Run against `npm start`: `node tools/demo-voices.mjs`.
import OpenAI from 'openai'

const client = new OpenAI({ baseURL: `${process.env.LOOM_URL ?? 'http://localhost:3000'}/v1`, apiKey: 'any' })
const models = ['', 'kjv', 'devil'] // '' is the base model; the others are LoRA adapters
const answers = await Promise.all(
  models.map((model) =>
    client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'What is the meaning of love?' }],
      max_tokens: 40,
      temperature: 0,
    }),
  ),
)
for (const [i, answer] of answers.entries()) {
  console.log(`--- ${models[i] || 'base'}\n${answer.choices[0].message.content}`)
}
