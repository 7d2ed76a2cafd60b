/**
 * GPT-2's `bytes_to_unicode`, the alphabet of byte-level token strings: entry `b` is the character
 * that stands for byte `b`. Printable Latin-1 bytes are themselves; the rest move to U+0100 on, in
 * byte order. Shared by the streaming detokenizer and XGrammar's vocabulary.
 */
export function byteLevelAlphabet(): string[] {
  const alphabet = new Array<string>(256)
  let shifted = 0
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
    alphabet[b] = String.fromCharCode(printable ? b : 256 + shifted++)
  }
  return alphabet
}
