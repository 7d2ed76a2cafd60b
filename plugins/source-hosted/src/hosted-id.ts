import { LoomError } from '@loom/core'

/** A hosted adapter as a request names it: a repo, and a version or none (the latest). */
export interface HostedId {
  readonly repo: string
  /** Undefined: the repository's latest version, pinned when resolved. */
  readonly version?: number
}

/** Repo names: letters, digits, `.`, `_`, `-`; no path syntax. */
const REPO = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/

/** Parse `<repo>/<version>` or `<repo>`; anything else is `adapter_id_invalid` naming the form. */
export function parseHostedId(id: string, source: string): HostedId {
  const [repo, version, ...rest] = id.split('/')
  const ok =
    repo !== undefined &&
    REPO.test(repo) &&
    !/^\.+$/.test(repo) &&
    rest.length === 0 &&
    (version === undefined || /^[1-9]\d{0,8}$/.test(version))
  if (!ok) {
    throw new LoomError('adapter_id_invalid', {
      id,
      source,
      detail: 'expected <repo>/<version> or <repo> (the latest version), for example my-adapter/3',
    })
  }
  return version === undefined ? { repo } : { repo, version: Number(version) }
}
