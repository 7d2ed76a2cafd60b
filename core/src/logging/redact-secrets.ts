/**
 * Redaction of secrets in free text: error messages, URLs and log messages that may embed a token
 * (an upstream error quoting a request URL, a header dump, a JSON body). It is a safety net: code
 * should never put a secret into text in the first place.
 */

/** What a redacted value is replaced with, everywhere in Loom's logs. */
export const REDACTED = '[Redacted]'

// Query or form parameters, and `key=value` pairs in text, whose value is a credential.
const SECRET_PARAM =
  /\b(api[_-]?token|access[_-]?token|auth[_-]?token|refresh[_-]?token|id[_-]?token|token|api[_-]?key|password|passwd|secret|client[_-]?secret|aws[_-]?secret[_-]?access[_-]?key|aws[_-]?session[_-]?token|secret[_-]?access[_-]?key|session[_-]?token|x-amz-signature|x-amz-credential|x-amz-security-token|signature|sig)=[^&\s"',;]+/gi

// The same keys quoted in JSON text: `"api_token": "…"`.
const SECRET_JSON_FIELD =
  /("(?:api[_-]?token|apiToken|access[_-]?token|accessToken|auth[_-]?token|token|api[_-]?key|apiKey|password|secret|client[_-]?secret|secret[_-]?access[_-]?key|secretAccessKey|aws[_-]?secret[_-]?access[_-]?key|session[_-]?token|sessionToken|authorization)"\s*:\s*)"(?:[^"\\]|\\.)*"/gi

// `key: value` pairs as written in YAML, header dumps and messages (`aws_secret_access_key: abc`).
const SECRET_COLON_FIELD =
  /\b(aws[_-]?secret[_-]?access[_-]?key|secret[_-]?access[_-]?key|secretAccessKey|aws[_-]?session[_-]?token|sessionToken|api[_-]?token|apiToken|access[_-]?token|accessToken|x-api-key)(\s*:\s*)(?!\[Redacted\])['"]?[^\s'",}]+['"]?/gi

// Credentials in the authority part of a URL: `https://user:password@host`.
const URL_PASSWORD = /(\b[a-z][a-z0-9+.-]*:\/\/[^/\s:@]+:)[^@\s/]+@/gi

// HTTP authorization schemes followed by their credential.
const AUTH_SCHEME = /\b(Bearer|Basic)\s+[A-Za-z0-9\-._~+/]+=*/gi

// `Authorization: <value>` where the scheme is not one of the above (e.g. `Authorization: abc123`).
const AUTH_HEADER =
  /\b(authorization|proxy-authorization)(\s*[:=]\s*)(?!\s|Bearer\b|Basic\b|\[Redacted\])['"]?[^\s'",}]+/gi

// Well-known token formats: model hub user/org tokens, hosted-adapter (pb_) and sk- style keys.
const KNOWN_TOKEN_FORMATS = /(?<![A-Za-z0-9])(?:hf_|api_org_|pb_|sk-)[A-Za-z0-9_-]{16,}/g

/**
 * Return `text` with every credential-looking value replaced by `[Redacted]`: `Bearer …`/`Basic …`
 * credentials, hub-style tokens (`hf_…`, `api_org_…`, `pb_…`, `sk-…`), `api_token=…` and other
 * credential parameters (including AWS pre-signed URL signatures), quoted JSON credential fields and
 * URL passwords. Text without secrets is returned unchanged.
 */
export function redactSecrets(text: string): string {
  return text
    .replace(AUTH_SCHEME, `$1 ${REDACTED}`)
    .replace(AUTH_HEADER, `$1$2${REDACTED}`)
    .replace(SECRET_JSON_FIELD, `$1"${REDACTED}"`)
    .replace(SECRET_PARAM, (match) => `${match.slice(0, match.indexOf('='))}=${REDACTED}`)
    .replace(SECRET_COLON_FIELD, `$1$2${REDACTED}`)
    .replace(URL_PASSWORD, `$1${REDACTED}@`)
    .replace(KNOWN_TOKEN_FORMATS, REDACTED)
}
