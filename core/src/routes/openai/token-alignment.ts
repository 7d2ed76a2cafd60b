import { isFragment, placeFragments } from './fragment-runs.ts'

/** Where one token sits in a response's text. */
export interface AlignedPiece {
  /**
   * UTF-16 index into the text (a JS string index) where the token's text starts. A token with no
   * text there (a special token such as BOS, or one in a removed part) gets the index of the next
   * character; the bytes of one character split over several tokens all get that character's index.
   */
  readonly offset: number
  /** The token as a response shows it: its own string, cut to the returned part when the text ends inside it. */
  readonly shown: string
  /** The token's UTF-8 bytes when its string cannot show them (part of a character), if known; else null. */
  readonly bytes: readonly number[] | null
  /** Whether any of the token's text is in the text. */
  readonly inText: boolean
}

/** What `alignPieces` could place: a prefix of the pieces, and where the text after them starts. */
export interface Alignment {
  readonly aligned: AlignedPiece[]
  readonly end: number
}

/**
 * Place tokens, each given by its own string (`decode([id])`), in `text` from index `from`.
 *
 * A token's string is usually exactly its text, but not always: a special token has no text;
 * decoding a token alone loses a leading space for SentencePiece tokenizers; and a token holding
 * part of a multi-byte character decodes to U+FFFD (see `fragment-runs.ts`). So a token is placed
 * where its string matches, after any whitespace its string lost, and is otherwise not in the text.
 *
 * With `final` false, `text` is what has been released so far and may grow: only tokens whose
 * place cannot change are returned (a token is placed for good once the text after it shows
 * something it cannot be). With `final` true, `text` is complete: every token is placed, and one the
 * text ends inside (a stop sequence cut it) is shown cut to the part that was returned.
 */
export function alignPieces(text: string, from: number, pieces: readonly string[], final: boolean): Alignment {
  const aligned: AlignedPiece[] = []
  let cursor = from
  let i = 0
  while (i < pieces.length) {
    const piece = pieces[i]!
    if (isFragment(piece)) {
      let runEnd = i + 1
      while (runEnd < pieces.length && isFragment(pieces[runEnd]!)) runEnd++
      const run = placeFragments(text, cursor, pieces.slice(i, runEnd), pieces[runEnd], final)
      if (run === null) break
      aligned.push(...run.aligned)
      cursor = run.end
      i = runEnd
      continue
    }
    const rest = text.slice(cursor)
    const match = matchPiece(rest, piece)
    if (match === 'partial') {
      // The text ends inside this token: final, it was cut there; else the rest is still to come.
      if (!final) break
      aligned.push({ offset: cursor, shown: rest, bytes: null, inText: true })
      cursor = text.length
    } else if (match !== null) {
      aligned.push({ offset: cursor, shown: rest.slice(0, match), bytes: null, inText: true })
      cursor += match
    } else if (!final && piece !== '' && rest.trim() === '') {
      break
    } else {
      aligned.push({ offset: cursor, shown: piece, bytes: null, inText: false })
    }
    i++
  }
  return { aligned, end: cursor }
}

/**
 * How `piece` matches the start of `rest`: the length of text it covers (its string, after any
 * whitespace the string lost), `'partial'` when `rest` ends inside it, or null when it is not there.
 */
function matchPiece(rest: string, piece: string): number | 'partial' | null {
  if (piece === '') return null
  if (rest.startsWith(piece)) return piece.length
  const lead = rest.length - rest.trimStart().length
  if (lead > 0 && rest.startsWith(piece, lead)) return lead + piece.length
  if (rest !== '' && piece.startsWith(rest)) return 'partial'
  if (lead > 0 && lead < rest.length && piece.startsWith(rest.slice(lead))) return 'partial'
  return null
}
