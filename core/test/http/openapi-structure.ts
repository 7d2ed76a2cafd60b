/**
 * A focused JSON Schema (2020-12) of an OpenAPI 3.1 document's structure, for the parts Loom's
 * document uses: the root, path items, operations, parameters, request bodies, responses, headers,
 * media types and examples, tags and `components.schemas`. No package installed here ships the
 * official OpenAPI 3.1 schema (`spec.openapis.org/oas/3.1/schema`), so this follows the
 * specification's object definitions (https://spec.openapis.org/oas/v3.1.0): each object's fixed
 * fields with their types, its required fields, and `x-` extensions as the only other keys. Schema
 * Objects are checked separately, against JSON Schema 2020-12's own meta-schema.
 */

/** An object with these fixed fields, where only `x-` extensions may be added. */
function fixed(properties: Record<string, unknown>, required: string[] = []): Record<string, unknown> {
  return {
    type: 'object',
    required,
    properties,
    patternProperties: { '^x-': true },
    additionalProperties: false,
  }
}

const mapOf = (value: unknown, keys?: string) => ({
  type: 'object',
  ...(keys === undefined ? {} : { propertyNames: { pattern: keys } }),
  additionalProperties: value,
})

const text = { type: 'string' }
const schemaObject = { type: ['object', 'boolean'] }
const reference = fixed({ $ref: text, summary: text, description: text }, ['$ref'])
const orRef = (def: string) => ({ anyOf: [{ $ref: `#/$defs/${def}` }, reference] })

export const OPENAPI_31_STRUCTURE = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  ...fixed(
    {
      openapi: { type: 'string', pattern: '^3\\.1\\.\\d+(-.+)?$' },
      info: fixed(
        {
          title: text,
          summary: text,
          description: text,
          termsOfService: text,
          contact: { type: 'object' },
          license: { type: 'object' },
          version: text,
        },
        ['title', 'version'],
      ),
      jsonSchemaDialect: text,
      servers: {
        type: 'array',
        items: fixed({ url: text, description: text, variables: { type: 'object' } }, ['url']),
      },
      paths: mapOf({ $ref: '#/$defs/pathItem' }, '^/'),
      webhooks: mapOf({ $ref: '#/$defs/pathItem' }),
      components: fixed({
        schemas: mapOf(schemaObject),
        responses: mapOf(orRef('response')),
        parameters: mapOf(orRef('parameter')),
        examples: mapOf(orRef('example')),
        requestBodies: mapOf(orRef('requestBody')),
        headers: mapOf(orRef('header')),
        securitySchemes: mapOf({ type: 'object' }),
      }),
      security: { type: 'array', items: { type: 'object' } },
      tags: {
        type: 'array',
        items: fixed({ name: text, description: text, externalDocs: { type: 'object' } }, ['name']),
      },
      externalDocs: fixed({ url: text, description: text }, ['url']),
    },
    ['openapi', 'info'],
  ),
  anyOf: [{ required: ['paths'] }, { required: ['components'] }, { required: ['webhooks'] }],
  $defs: {
    pathItem: fixed({
      $ref: text,
      summary: text,
      description: text,
      ...Object.fromEntries(
        ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'].map((m) => [
          m,
          { $ref: '#/$defs/operation' },
        ]),
      ),
      servers: { type: 'array' },
      parameters: { type: 'array', items: orRef('parameter') },
    }),
    operation: fixed({
      tags: { type: 'array', items: text },
      summary: text,
      description: text,
      externalDocs: { type: 'object' },
      operationId: text,
      parameters: { type: 'array', items: orRef('parameter') },
      requestBody: orRef('requestBody'),
      responses: {
        ...mapOf(orRef('response'), '^([1-5](\\d\\d|XX)|default)$'),
        minProperties: 1,
      },
      callbacks: { type: 'object' },
      deprecated: { type: 'boolean' },
      security: { type: 'array' },
      servers: { type: 'array' },
    }),
    parameter: {
      ...fixed(
        {
          name: text,
          in: { enum: ['query', 'header', 'path', 'cookie'] },
          description: text,
          required: { type: 'boolean' },
          deprecated: { type: 'boolean' },
          allowEmptyValue: { type: 'boolean' },
          style: text,
          explode: { type: 'boolean' },
          allowReserved: { type: 'boolean' },
          schema: schemaObject,
          example: true,
          examples: mapOf(orRef('example')),
          content: mapOf({ $ref: '#/$defs/mediaType' }),
        },
        ['name', 'in'],
      ),
      // A path parameter is required; a parameter has a schema or a content, not both.
      if: { properties: { in: { const: 'path' } } },
      then: { required: ['required'], properties: { required: { const: true } } },
      oneOf: [{ required: ['schema'] }, { required: ['content'] }],
    },
    requestBody: fixed(
      { description: text, content: mapOf({ $ref: '#/$defs/mediaType' }), required: { type: 'boolean' } },
      ['content'],
    ),
    response: fixed(
      {
        description: text,
        headers: mapOf(orRef('header')),
        content: mapOf({ $ref: '#/$defs/mediaType' }),
        links: { type: 'object' },
      },
      ['description'],
    ),
    header: fixed({
      description: text,
      required: { type: 'boolean' },
      deprecated: { type: 'boolean' },
      schema: schemaObject,
      example: true,
      examples: mapOf(orRef('example')),
    }),
    mediaType: {
      ...fixed({
        schema: schemaObject,
        example: true,
        examples: mapOf(orRef('example')),
        encoding: { type: 'object' },
      }),
      not: { required: ['example', 'examples'] },
    },
    example: {
      ...fixed({ summary: text, description: text, value: true, externalValue: text }),
      not: { required: ['value', 'externalValue'] },
    },
  },
}
