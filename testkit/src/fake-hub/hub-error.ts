/** The `X-Error-Code` values the real hub sends, which clients branch on. */
export type HubErrorCode = 'RepoNotFound' | 'GatedRepo' | 'RevisionNotFound' | 'EntryNotFound'

/** One error answer: status, optional `X-Error-Code`, and the text for `X-Error-Message` and `{"error"}`. */
export interface HubError {
  readonly status: number
  readonly code?: HubErrorCode
  readonly message: string
}

/** The message the hub sends (and huggingface_hub checks for) when a bearer token is unknown or revoked. */
export const INVALID_CREDENTIALS = 'Invalid credentials in Authorization header'

/** The hub's answers, worded as it words them (see research/integration.md §2.2). */
export const hubErrors = {
  invalidCredentials: (): HubError => ({ status: 401, message: INVALID_CREDENTIALS }),
  /** Missing repo, or private without access: 401 to anonymous callers (no enumeration), 404 to signed-in ones. */
  repoNotFound: (authenticated: boolean): HubError => ({
    status: authenticated ? 404 : 401,
    code: 'RepoNotFound',
    message: 'Repository not found',
  }),
  gated: (repo: string, authenticated: boolean): HubError =>
    authenticated
      ? {
          status: 403,
          code: 'GatedRepo',
          message: `Access to model ${repo} is restricted and you are not in the authorized list. Visit https://huggingface.co/${repo} to ask for access.`,
        }
      : {
          status: 401,
          code: 'GatedRepo',
          message: `Access to model ${repo} is restricted. You must have access to it and be authenticated to access it. Please log in.`,
        },
  revisionNotFound: (rev: string): HubError => ({
    status: 404,
    code: 'RevisionNotFound',
    message: `Invalid rev id: ${rev}`,
  }),
  entryNotFound: (): HubError => ({ status: 404, code: 'EntryNotFound', message: 'Entry not found' }),
  notLoggedIn: (): HubError => ({ status: 401, message: 'Invalid username or password.' }),
  routeNotFound: (): HubError => ({ status: 404, message: 'Not Found' }),
  badRequest: (message: string): HubError => ({ status: 400, message }),
  injected: (status: number): HubError => ({ status, message: `Injected failure (HTTP ${status})` }),
} as const
