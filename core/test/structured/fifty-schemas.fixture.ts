/**
 * Fifty JSON schemas (draft 2020-12) covering what issue 5 asks structured output to honour:
 * nested objects, arrays with minItems/maxItems, enums, required/optional properties, integers and
 * numbers with bounds (negative, wide, fractional, exclusive, one-sided), strings with
 * minLength/maxLength and patterns, anyOf of objects and of primitives, and `$defs` + `$ref`.
 * Strings are mostly bounded so a random model reaches the end within a modest token budget.
 */

export interface SchemaCase {
  readonly name: string
  readonly schema: Record<string, unknown>
}

const short = (maxLength: number, minLength = 0): Record<string, unknown> =>
  minLength > 0 ? { type: 'string', minLength, maxLength } : { type: 'string', maxLength }

export const FIFTY_SCHEMAS: readonly SchemaCase[] = [
  // Integers with bounds.
  { name: 'integer 0..150', schema: { type: 'integer', minimum: 0, maximum: 150 } },
  { name: 'integer -5000..100000 (wide)', schema: { type: 'integer', minimum: -5000, maximum: 100000 } },
  { name: 'integer exclusive -3..7', schema: { type: 'integer', exclusiveMinimum: -3, exclusiveMaximum: 7 } },
  { name: 'integer minimum only', schema: { type: 'integer', minimum: 10 } },
  { name: 'integer exclusiveMaximum only, negative', schema: { type: 'integer', exclusiveMaximum: -10 } },
  {
    name: 'integer ±1e12 (very wide)',
    schema: { type: 'integer', minimum: -1_000_000_000_000, maximum: 1_000_000_000_000 },
  },
  { name: 'integer fractional bounds', schema: { type: 'integer', minimum: 2.5, maximum: 9.5 } },
  // Numbers with bounds.
  { name: 'number 0.5..2', schema: { type: 'number', minimum: 0.5, maximum: 2 } },
  { name: 'number exclusive 0..1', schema: { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 1 } },
  { name: 'number -1.25..3.75 exclusive max', schema: { type: 'number', minimum: -1.25, exclusiveMaximum: 3.75 } },
  {
    name: 'number negative range',
    schema: { type: 'number', exclusiveMinimum: -100, maximum: -0.001 },
  },
  { name: 'number positive only', schema: { type: 'number', exclusiveMinimum: 0 } },
  { name: 'number tiny interval', schema: { type: 'number', minimum: 0.0001, maximum: 0.0002 } },
  {
    name: 'coordinates',
    schema: {
      type: 'object',
      properties: {
        lat: { type: 'number', minimum: -90, maximum: 90 },
        lon: { type: 'number', minimum: -180, maximum: 180 },
      },
      required: ['lat', 'lon'],
    },
  },
  // Strings.
  { name: 'string maxLength', schema: short(5) },
  { name: 'string minLength and maxLength', schema: short(8, 2) },
  { name: 'pattern lowercase 2..5', schema: { type: 'string', pattern: '^[a-z]{2,5}$' } },
  { name: 'pattern phone', schema: { type: 'string', pattern: '^\\d{3}-\\d{4}$' } },
  { name: 'pattern hex colour', schema: { type: 'string', pattern: '^#[0-9a-f]{6}$' } },
  { name: 'pattern date-like', schema: { type: 'string', pattern: '^\\d{4}-\\d{2}-\\d{2}$' } },
  { name: 'pattern capitalised word', schema: { type: 'string', pattern: '^[A-Z][a-z]{0,8}$' } },
  { name: 'pattern class with a quote and backslash', schema: { type: 'string', pattern: '^[a-z"\\\\]{1,4}$' } },
  { name: 'pattern literal quote', schema: { type: 'string', pattern: '^a"b$' } },
  { name: 'pattern any character', schema: { type: 'string', pattern: '^x.{1,3}$' } },
  // Enums.
  { name: 'enum of strings', schema: { enum: ['red', 'green', 'blue'] } },
  { name: 'enum of numbers', schema: { enum: [1, 2.5, -3, 100] } },
  { name: 'enum mixed', schema: { enum: ['a', 1, null, true] } },
  // Arrays.
  {
    name: 'array of bounded integers 2..4 items',
    schema: { type: 'array', items: { type: 'integer', minimum: -10, maximum: 10 }, minItems: 2, maxItems: 4 },
  },
  {
    name: 'array of enum strings 1..3 items',
    schema: { type: 'array', items: { enum: ['x', 'y', 'z'] }, minItems: 1, maxItems: 3 },
  },
  {
    name: '2x2 matrix',
    schema: {
      type: 'array',
      minItems: 2,
      maxItems: 2,
      items: { type: 'array', minItems: 2, maxItems: 2, items: { type: 'number', minimum: -1, maximum: 1 } },
    },
  },
  { name: 'array up to 2 short strings', schema: { type: 'array', items: short(4), maxItems: 2 } },
  {
    name: 'array of objects',
    schema: {
      type: 'array',
      minItems: 1,
      maxItems: 3,
      items: {
        type: 'object',
        properties: { id: { type: 'integer', minimum: 1, maximum: 999 }, ok: { type: 'boolean' } },
        required: ['id', 'ok'],
      },
    },
  },
  // Objects, required and optional.
  {
    name: 'person',
    schema: {
      type: 'object',
      properties: {
        name: short(10, 1),
        age: { type: 'integer', minimum: 0, maximum: 120 },
        nickname: short(6),
      },
      required: ['name', 'age'],
    },
  },
  {
    name: 'all optional',
    schema: { type: 'object', properties: { a: { type: 'boolean' }, b: { type: 'null' }, c: short(3) } },
  },
  {
    name: 'address with zip pattern',
    schema: {
      type: 'object',
      properties: {
        street: short(16),
        city: short(10),
        zip: { type: 'string', pattern: '^\\d{5}$' },
      },
      required: ['street', 'city', 'zip'],
    },
  },
  {
    name: 'nested depth 3',
    schema: {
      type: 'object',
      properties: {
        a: {
          type: 'object',
          properties: {
            b: { type: 'object', properties: { c: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['c'] },
          },
          required: ['b'],
        },
      },
      required: ['a'],
    },
  },
  {
    name: 'nested depth 4 with optional leaves',
    schema: {
      type: 'object',
      properties: {
        l1: {
          type: 'object',
          properties: {
            l2: {
              type: 'object',
              properties: {
                l3: {
                  type: 'object',
                  properties: { v: { type: 'number', exclusiveMinimum: 0, maximum: 5 }, tag: short(3) },
                  required: ['v'],
                },
              },
              required: ['l3'],
            },
            note: short(5),
          },
          required: ['l2'],
        },
      },
      required: ['l1'],
    },
  },
  {
    name: 'order with line items',
    schema: {
      type: 'object',
      properties: {
        id: { type: 'integer', minimum: 1 },
        lines: {
          type: 'array',
          minItems: 1,
          maxItems: 3,
          items: {
            type: 'object',
            properties: {
              sku: { type: 'string', pattern: '^[A-Z]{3}-\\d{2}$' },
              qty: { type: 'integer', minimum: 1, maximum: 99 },
              price: { type: 'number', minimum: 0.01, maximum: 999.99 },
            },
            required: ['sku', 'qty', 'price'],
          },
        },
        status: { enum: ['new', 'paid', 'shipped'] },
      },
      required: ['id', 'lines', 'status'],
    },
  },
  // anyOf.
  {
    name: 'anyOf of primitives',
    schema: { anyOf: [short(4), { type: 'integer', minimum: 0, maximum: 9 }, { type: 'null' }] },
  },
  {
    name: 'anyOf of objects (shapes)',
    schema: {
      anyOf: [
        {
          type: 'object',
          properties: { kind: { const: 'circle' }, r: { type: 'number', exclusiveMinimum: 0, maximum: 10 } },
          required: ['kind', 'r'],
        },
        {
          type: 'object',
          properties: {
            kind: { const: 'rect' },
            w: { type: 'integer', minimum: 1, maximum: 20 },
            h: { type: 'integer', minimum: 1, maximum: 20 },
          },
          required: ['kind', 'w', 'h'],
        },
      ],
    },
  },
  {
    name: 'array of anyOf items',
    schema: {
      type: 'array',
      maxItems: 3,
      items: { anyOf: [{ type: 'boolean' }, { type: 'number', minimum: -2, maximum: 2 }] },
    },
  },
  { name: 'nullable bounded integer', schema: { type: ['integer', 'null'], minimum: 1, maximum: 5 } },
  {
    name: 'anyOf with patterns',
    schema: {
      anyOf: [
        { type: 'string', pattern: '^[0-9]{2}$' },
        { type: 'string', pattern: '^[a-c]{3}$' },
      ],
    },
  },
  // $defs and $ref.
  {
    name: '$ref point pair',
    schema: {
      $defs: {
        point: {
          type: 'object',
          properties: {
            x: { type: 'number', minimum: -1, maximum: 1 },
            y: { type: 'number', minimum: -1, maximum: 1 },
          },
          required: ['x', 'y'],
        },
      },
      type: 'object',
      properties: { from: { $ref: '#/$defs/point' }, to: { $ref: '#/$defs/point' } },
      required: ['from', 'to'],
    },
  },
  {
    name: '$ref enum and bounded integer',
    schema: {
      $defs: { level: { enum: ['low', 'mid', 'high'] }, score: { type: 'integer', minimum: -50, maximum: 50 } },
      type: 'object',
      properties: {
        level: { $ref: '#/$defs/level' },
        scores: { type: 'array', items: { $ref: '#/$defs/score' }, maxItems: 3 },
      },
      required: ['level', 'scores'],
    },
  },
  {
    name: '$ref chain through defs',
    schema: {
      $defs: {
        name: { type: 'string', pattern: '^[a-z]{1,6}$' },
        user: {
          type: 'object',
          properties: { name: { $ref: '#/$defs/name' }, admin: { type: 'boolean' } },
          required: ['name'],
        },
      },
      type: 'object',
      properties: {
        owner: { $ref: '#/$defs/user' },
        members: { type: 'array', items: { $ref: '#/$defs/user' }, maxItems: 2 },
      },
      required: ['owner', 'members'],
    },
  },
  {
    name: '$ref inside anyOf',
    schema: {
      $defs: {
        money: {
          type: 'object',
          properties: { amount: { type: 'number', minimum: 0, maximum: 1000 }, currency: { enum: ['EUR', 'USD'] } },
          required: ['amount', 'currency'],
        },
      },
      anyOf: [{ $ref: '#/$defs/money' }, { type: 'null' }],
    },
  },
  {
    name: 'tree two levels via $defs',
    schema: {
      $defs: {
        leaf: {
          type: 'object',
          properties: { value: { type: 'integer', minimum: 0, maximum: 3 } },
          required: ['value'],
        },
        branch: {
          type: 'object',
          properties: { children: { type: 'array', items: { $ref: '#/$defs/leaf' }, minItems: 1, maxItems: 2 } },
          required: ['children'],
        },
      },
      type: 'object',
      properties: { root: { $ref: '#/$defs/branch' } },
      required: ['root'],
    },
  },
  // Combinations.
  {
    name: 'event',
    schema: {
      type: 'object',
      properties: {
        date: { type: 'string', pattern: '^2024-(0[1-9]|1[0-2])-[0-2][0-9]$' },
        attendees: { type: 'integer', exclusiveMinimum: 0, maximum: 500 },
        rating: { type: 'number', minimum: 1, maximum: 5 },
        kind: { enum: ['talk', 'workshop'] },
        tags: { type: 'array', items: short(5, 1), minItems: 0, maxItems: 2 },
      },
      required: ['date', 'attendees', 'kind'],
    },
  },
  {
    name: 'sensor reading',
    schema: {
      type: 'object',
      properties: {
        id: { type: 'string', pattern: '^S\\d{3}$' },
        temperature: { type: 'number', exclusiveMinimum: -40, exclusiveMaximum: 85 },
        humidity: { type: 'integer', minimum: 0, maximum: 100 },
        battery: { anyOf: [{ type: 'number', minimum: 0, maximum: 1 }, { type: 'null' }] },
      },
      required: ['id', 'temperature', 'humidity', 'battery'],
    },
  },
]
