// Entry file of every worker started by startModuleWorker (./merge-in-worker.ts). Node 20 does
// not run the parent's `--import tsx` hooks before a worker's own entry module, so a worker
// pointed straight at a .ts file fails with ERR_UNKNOWN_FILE_EXTENSION. This plain module
// registers tsx first when the real entry is TypeScript, then imports it.
import { workerData } from 'node:worker_threads'

const entry = workerData.entry
if (entry.endsWith('.ts')) (await import('tsx/esm/api')).register()
await import(entry)
