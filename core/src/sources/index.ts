/**
 * The source kit: what every `AdapterSource` that downloads files needs, so plugins (ours and
 * third parties') share one tested copy instead of writing their own. Exported from `@loom/core`.
 *
 * - `adapter-files.ts`: the file names the runtime reads and `pickAdapterFiles` (which to fetch);
 * - `retry.ts`: `withRetry`, exponential backoff with jitter that honours an `AbortSignal`;
 * - `file-download.ts` / `download-file.ts`: stream a body to disk with size and SHA-256 checks,
 *   resumable or in one go;
 * - `until-aborted.ts`: leave a shared call when one caller's request is cancelled;
 * - `fetch-error-text.ts`: a secret-free reason for a failed `fetch`.
 */
export {
  ADAPTER_FILE_NAMES,
  LORA_CONFIG_FILE,
  LORA_WEIGHT_FILES,
  MEDUSA_CONFIG_FILE,
  MEDUSA_DRAFT_VOCAB_FILE,
  MEDUSA_WEIGHT_FILES,
  TOKENIZER_FILES,
  hasAdapterConfig,
  pickAdapterFiles,
  type AdapterFilesProblem,
  type PickedAdapterFiles,
} from './adapter-files.ts'
export { DownloadCheckError, DownloadStalledError } from './download-errors.ts'
export { downloadFile, type DownloadFileOptions } from './download-file.ts'
export { fetchErrorText } from './fetch-error-text.ts'
export {
  FileDownload,
  type DownloadBody,
  type DownloadedFile,
  type ExpectedFile,
  type WriteOptions,
} from './file-download.ts'
export { backoffMs, withRetry, type RetryOptions, type RetryPolicy } from './retry.ts'
export { untilAborted } from './until-aborted.ts'
