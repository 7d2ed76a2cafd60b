import { readFile } from 'node:fs/promises'
import { basename } from 'node:path'
import { LoomError } from '../errors/index.ts'

/** Read one of an adapter's weight files; an unreadable file is `adapter_invalid` naming the adapter and the file. */
export async function readAdapterFile(path: string, id: string): Promise<{ bytes: Buffer; file: string }> {
  const file = basename(path)
  try {
    return { bytes: await readFile(path), file }
  } catch (err) {
    throw new LoomError(
      'adapter_invalid',
      { id, detail: `${file}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})` },
      { cause: err },
    )
  }
}
