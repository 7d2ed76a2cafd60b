// The rule programmatic dependent launch rests on (native/src/cuda/grid-dependency.cuh): the cuda
// device lets a kernel's blocks start before the kernel queued ahead of it has finished, so every
// kernel must call wait_for_prior_kernels() before it touches what earlier ops wrote or read, and
// every launch on the device's stream must go through CudaDevice::launch. A kernel that breaks it
// races on a GPU only, and only sometimes; these checks read the sources, so a CPU-only CI catches
// the omission (the GPU check, gpu/check.sh, is what runs the kernels).
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'

const cudaDir = join(import.meta.dirname, '..', 'native', 'src', 'cuda')

/** Source without comments (their braces and words would confuse the scan), same line count. */
function stripComments(source: string): string {
  return source.replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' ')).replace(/\/\/[^\n]*/g, '')
}

/** The index just past the bracket that closes the one at `open`. */
function closing(text: string, open: number): number {
  const opener = text[open]
  const want = opener === '(' ? ')' : opener === '{' ? '}' : undefined
  if (want === undefined) throw new Error(`no bracket at ${open}`)
  let depth = 0
  for (let i = open; i < text.length; i++) {
    if (text[i] === opener) depth++
    else if (text[i] === want && --depth === 0) return i + 1
  }
  throw new Error(`unbalanced ${opener} at ${open}`)
}

interface Kernel {
  name: string
  body: string
}

/** Every `__global__` function of `source`, with its body (between its braces). */
export function kernelsOf(source: string): Kernel[] {
  const text = stripComments(source)
  const kernels: Kernel[] = []
  for (let at = text.indexOf('__global__'); at >= 0; at = text.indexOf('__global__', at + 1)) {
    let i = at + '__global__'.length
    const bounds = /^\s*void\s+__launch_bounds__\s*\(/.exec(text.slice(i))
    if (bounds) i = closing(text, i + bounds[0].length - 1)
    const name = /(\w+)\s*\(/.exec(text.slice(i))
    if (!name) throw new Error(`no kernel name after __global__ at ${at}`)
    const params = i + name.index + name[0].length - 1
    const open = text.indexOf('{', closing(text, params))
    kernels.push({ name: name[1] ?? '', body: text.slice(open + 1, closing(text, open) - 1) })
  }
  return kernels
}

// What may not happen before the wait: leaving, block-wide barriers, and writes to memory.
const beforeWaitForbidden: [RegExp, string][] = [
  [/\breturn\b/, 'returns'],
  [/__syncthreads/, 'synchronizes the block'],
  [/atomic\w*\s*\(/, 'makes an atomic update'],
  [/cp_async\w*\s*\(/, 'starts an async copy'],
  [/(^|[^\w)\]])\*\s*\w+\s*[-+*/|&^]?=(?!=)/m, 'stores through a pointer'],
]

/** The first indexed store in `before` into something other than a local array declared there. */
function memoryStore(before: string): string | null {
  for (const m of before.matchAll(/(\w+)\s*(\[[^\]]*\]\s*)+[-+*/|&^]?=(?!=)/g)) {
    const local = new RegExp(`[\\w>*]\\s+${m[1]}\\s*(\\[[^\\]]*\\]\\s*)+;`)
    if (!local.test(before)) return m[0]
  }
  return null
}

/** Why `kernel` breaks the rule, or null when it keeps it. */
export function ruleBroken(kernel: Kernel): string | null {
  const calls = kernel.body.split('wait_for_prior_kernels()').length - 1
  if (calls !== 1) return `calls wait_for_prior_kernels() ${calls} times (expected once, unconditionally)`
  const before = kernel.body.slice(0, kernel.body.indexOf('wait_for_prior_kernels()'))
  if (/\b(if|for|while)\b[^;{]*$/.test(before.trimEnd()) || /\b(if|for|while|switch)\s*\([^;]*\)\s*$/.test(before))
    return 'calls wait_for_prior_kernels() under a condition'
  if (before.split('{').length !== before.split('}').length) return 'calls wait_for_prior_kernels() inside a block'
  for (const [pattern, what] of beforeWaitForbidden)
    if (pattern.test(before)) return `${what} before wait_for_prior_kernels()`
  const store = memoryStore(before)
  if (store) return `stores through an index (${store}) before wait_for_prior_kernels()`
  return null
}

const files = readdirSync(cudaDir).sort()

t.test('every kernel waits for the kernels before it, before touching their data', async (t) => {
  let count = 0
  for (const file of files.filter((f) => f.endsWith('.cuh') || f.endsWith('.cu'))) {
    for (const kernel of kernelsOf(readFileSync(join(cudaDir, file), 'utf8'))) {
      if (file === 'cuda-device.cu' && kernel.name === 'probe_kernel') continue // launched alone, see below
      count++
      t.equal(ruleBroken(kernel), null, `${file}: ${kernel.name}`)
    }
  }
  t.ok(count >= 30, `${count} kernels checked`)
})

t.test('every launch on the device stream goes through CudaDevice::launch', async (t) => {
  for (const file of files.filter((f) => f.endsWith('.cu'))) {
    const text = stripComments(readFileSync(join(cudaDir, file), 'utf8'))
    const chevrons = [...text.matchAll(/(\w+)\s*(<[^<>]*>)?\s*<<</g)].map((m) => m[1])
    // The probe runs one kernel on the default stream before any device exists.
    const expected = file === 'cuda-device.cu' ? ['probe_kernel'] : []
    t.same(chevrons, expected, `${file}: triple-chevron launches`)
  }
})

t.test('the checks catch a kernel that breaks the rule', async (t) => {
  const verdict = (body: string) => {
    const [kernel] = kernelsOf(`__global__ void k(float* y) {${body}}`)
    return kernel ? ruleBroken(kernel) : 'no kernel found'
  }
  t.equal(verdict('wait_for_prior_kernels(); y[0] = 1.0f;'), null, 'a kernel that waits first')
  t.equal(verdict('const float a = y[1] * 2.0f; wait_for_prior_kernels(); y[0] = a;'), null, 'a read before it')
  t.match(verdict('y[0] = 1.0f;'), /0 times/, 'no wait at all')
  t.match(verdict('y[0] = 1.0f; wait_for_prior_kernels();'), /stores through an index/, 'a store first')
  t.equal(
    verdict('float r[4]; for (int i = 0; i < 4; i++) r[i] = y[i]; wait_for_prior_kernels(); y[0] = r[1];'),
    null,
    'a local array filled first',
  )
  t.match(
    verdict('float r[4]; r[0] = 1.0f; y[1] += r[0]; wait_for_prior_kernels();'),
    /index \(y\[1\] \+=/,
    'a store beside a local array',
  )
  t.match(verdict('*y = 1.0f; wait_for_prior_kernels();'), /stores through a pointer/, 'a pointer store first')
  t.match(verdict('if (threadIdx.x > 3) return; wait_for_prior_kernels();'), /returns/, 'an early return')
  t.match(verdict('if (threadIdx.x == 0) wait_for_prior_kernels();'), /condition/, 'a conditional wait')
  t.match(verdict('if (y) { wait_for_prior_kernels(); }'), /block/, 'a wait inside a block')
  t.match(verdict('__syncthreads(); wait_for_prior_kernels();'), /synchronizes/, 'a barrier first')
  const bounded = kernelsOf('__global__ void __launch_bounds__(256) g(int n) { wait_for_prior_kernels(); }')
  t.same(
    bounded.map((k) => k.name),
    ['g'],
    'a kernel with launch bounds is found by its name',
  )
})
