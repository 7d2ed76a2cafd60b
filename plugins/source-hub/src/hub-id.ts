import { LoomError } from '@loom/core'

/** A parsed hub adapter id: `owner/name`, optionally pinned with `@revision`. */
export interface HubId {
  /** `owner/name`. */
  readonly repo: string
  /** A branch, tag or commit sha; undefined means the repo's default branch. */
  readonly revision: string | undefined
}

/** One part of a repo id, as the hub allows it: letters, digits, `_`, `.`, `-`; no `--` or `..`; at most 96. */
const PART = /^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$/

/** A git ref or sha: `/`-separated segments of safe characters (`v1.0`, `refs/pr/3`, a 40-hex sha). */
const REVISION = /^[A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+)*$/

export const EXPECTED_FORM = 'expected `owner/name` or `owner/name@revision` (for example acme/my-lora@main)'

/**
 * Check and split an `adapter_id` for the hub. Refusing everything outside the hub's own naming
 * rules keeps every URL the source builds inside `hub_url`.
 */
export function parseHubId(id: string, source: string): HubId {
  const at = id.indexOf('@')
  const repo = at === -1 ? id : id.slice(0, at)
  const revision = at === -1 ? undefined : id.slice(at + 1)
  const parts = repo.split('/')
  const validRepo =
    parts.length === 2 && parts.every((part) => PART.test(part) && !part.includes('--') && !part.includes('..'))
  const validRevision =
    revision === undefined || (revision.length <= 255 && REVISION.test(revision) && !revision.includes('..'))
  if (!validRepo || !validRevision) {
    throw new LoomError('adapter_id_invalid', { id, source, detail: EXPECTED_FORM })
  }
  return { repo, revision }
}
