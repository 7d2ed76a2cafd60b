/**
 * Twenty small JSON schemas of the kind clients send with `response_format`: objects of one to
 * four properties (strings, integers, numbers, booleans, enums, short arrays, a nested object),
 * most of them closed with `additionalProperties: false` as OpenAI's strict mode requires.
 */
import type { SchemaCase } from './fifty-schemas.fixture.ts'

const closed = (properties: Record<string, unknown>, required = Object.keys(properties)): Record<string, unknown> => ({
  type: 'object',
  properties,
  required,
  additionalProperties: false,
})

const name = { type: 'string', maxLength: 12 }

export const SMALL_SCHEMAS: readonly SchemaCase[] = [
  { name: 'one string', schema: closed({ name }) },
  { name: 'one integer', schema: closed({ count: { type: 'integer' } }) },
  { name: 'one boolean', schema: closed({ ok: { type: 'boolean' } }) },
  { name: 'one enum', schema: closed({ mood: { enum: ['happy', 'sad', 'angry'] } }) },
  { name: 'person', schema: closed({ name, age: { type: 'integer', minimum: 0, maximum: 120 } }) },
  { name: 'flag and score', schema: closed({ valid: { type: 'boolean' }, score: { type: 'number' } }) },
  {
    name: 'city',
    schema: closed({ city: { type: 'string', maxLength: 16 }, population: { type: 'integer', minimum: 0 } }),
  },
  { name: 'tags', schema: closed({ tags: { type: 'array', items: { type: 'string', maxLength: 8 }, maxItems: 3 } }) },
  {
    name: 'numbers',
    schema: closed({ values: { type: 'array', items: { type: 'integer' }, minItems: 1, maxItems: 4 } }),
  },
  {
    name: 'sentiment',
    schema: closed({
      label: { enum: ['positive', 'negative', 'neutral'] },
      confidence: { type: 'number', minimum: 0, maximum: 1 },
    }),
  },
  { name: 'point', schema: closed({ x: { type: 'integer' }, y: { type: 'integer' } }) },
  {
    name: 'nested object',
    schema: closed({ user: closed({ id: { type: 'integer' }, admin: { type: 'boolean' } }) }),
  },
  {
    name: 'three kinds',
    schema: closed({ title: name, year: { type: 'integer' }, seen: { type: 'boolean' } }),
  },
  {
    name: 'four properties',
    schema: closed({
      name,
      age: { type: 'integer', minimum: 0 },
      student: { type: 'boolean' },
      grade: { enum: ['A', 'B', 'C'] },
    }),
  },
  { name: 'optional property', schema: closed({ name, nickname: name }, ['name']) },
  { name: 'nullable', schema: closed({ note: { type: ['string', 'null'], maxLength: 10 } }) },
  { name: 'const and integer', schema: closed({ kind: { const: 'order' }, qty: { type: 'integer', minimum: 1 } }) },
  {
    name: 'array of objects',
    schema: closed({
      items: { type: 'array', items: closed({ id: { type: 'integer' } }), maxItems: 2 },
    }),
  },
  {
    name: 'nested with array',
    schema: closed({
      meta: closed({ tags: { type: 'array', items: { type: 'boolean' }, maxItems: 2 } }),
      n: { type: 'integer' },
    }),
  },
  { name: 'open object', schema: { type: 'object', properties: { id: { type: 'integer' } }, required: ['id'] } },
]
