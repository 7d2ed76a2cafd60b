// The images' recipes, checked without a Docker engine (none runs on the development machines):
// each Dockerfile installs and builds with the README's and CI's commands, runs the README's serve
// command as a non-root user, checks /health, exposes the default port, and keeps config and
// adapter cache in volumes that the served config really uses.
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { loadConfig } from '../../src/config/index.ts'
import { assignments, execForm, parseDockerfile, shellCommands, type Stage } from './dockerfile-instructions.ts'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const read = (file: string) => readFileSync(path.join(root, file), 'utf8')
const packageJson = JSON.parse(read('package.json')) as {
  scripts: Record<string, string>
  dependencies?: Record<string, string>
  workspaces: string[]
}

/** The quickstart's first bash block, without comments: the README's install and start commands. */
function quickstartCommands(): string[] {
  const readme = read('README.md')
  const section = readme.slice(readme.indexOf('## Quickstart'))
  const block = /```bash\n([\s\S]*?)```/.exec(section)?.[1] ?? ''
  return block
    .split('\n')
    .map((l) => l.replace(/#.*$/, '').trim())
    .filter(Boolean)
}

/** What CI runs (.ci/run), without comments and shell settings. */
function ciCommands(): string[] {
  return read('.ci/run')
    .split('\n')
    .map((l) => l.replace(/#.*$/, '').trim())
    .filter((l) => l !== '' && !/^(set|cd) /.test(l))
}

const commandsOf = (stage: Stage) =>
  stage.instructions.filter((i) => i.name === 'RUN').flatMap((i) => shellCommands(i.args))
const last = <T>(items: T[]) => items[items.length - 1]!
const valuesOf = (stage: Stage, name: 'ENV' | 'ARG') =>
  new Map(stage.instructions.filter((i) => i.name === name).flatMap((i) => [...assignments(i.args)]))

/** Docker's matching for the patterns .dockerignore uses here: `**\/name` anywhere, else a root path. */
function ignoredByDockerignore(file: string, patterns: string[]): boolean {
  const segments = file.split('/')
  return patterns.some((p) => {
    if (p.startsWith('**/')) return segments.includes(p.slice(3))
    if (p.startsWith('*.')) return file.endsWith(p.slice(1))
    return file === p || file.startsWith(`${p}/`)
  })
}

const images = [
  {
    file: 'Dockerfile',
    buildBase: /^node:\$\{NODE_VERSION\}-bookworm$/,
    runtimeBase: /^node:\$\{NODE_VERSION\}-bookworm-slim$/,
  },
  {
    file: 'Dockerfile.cuda',
    buildBase: /^nvidia\/cuda:\$\{CUDA_VERSION\}-devel-/,
    runtimeBase: /^nvidia\/cuda:\$\{CUDA_VERSION\}-runtime-/,
  },
]

for (const image of images) {
  t.test(image.file, async (t) => {
    const dockerfile = parseDockerfile(read(image.file))
    const [build, runtime] = [dockerfile.stages[0]!, last(dockerfile.stages)]
    t.equal(dockerfile.stages.length, 2, 'two stages: build and runtime')
    t.match(build.from, image.buildBase, 'build stage base image')
    t.equal(build.name, 'build')
    t.match(runtime.from, image.runtimeBase, 'runtime stage base image')

    t.test('installs and builds with the README and CI commands', async (t) => {
      const readme = quickstartCommands()
      const ci = ciCommands()
      const install = ci.find((c) => c.startsWith('npm '))
      t.equal(install, 'npm ci', "CI's install command")
      t.ok(readme.includes('npm ci'), "the README's install command")
      const npm = commandsOf(build).filter((c) => /^(npm|npx|node)\b/.test(c))
      t.same(npm, ['npm ci'], 'the build stage runs npm ci and nothing else of the project')
      for (const command of npm) t.ok(readme.includes(command) || ci.includes(command), `${command} is in README or CI`)
      t.ok(
        build.instructions.some((i) => i.name === 'COPY' && i.args === '. .'),
        'the whole context (what .dockerignore lets through) is copied before npm ci',
      )
      t.same(
        commandsOf(runtime).filter((c) => /^(npm|npx)\b/.test(c)),
        [],
        'the runtime stage installs nothing',
      )
    })

    t.test('dev dependencies are pruned only if the server can run without them', async (t) => {
      const prunes = [...commandsOf(build), ...commandsOf(runtime)].some((c) => /npm prune/.test(c))
      const tsxIsProduction = ['package.json', 'core/package.json'].some(
        (f) => (JSON.parse(read(f)) as { dependencies?: Record<string, string> }).dependencies?.tsx !== undefined,
      )
      // The serve command loads TypeScript through tsx; `npm prune --omit=dev` removes a dev-only tsx.
      t.ok(!prunes || tsxIsProduction, 'no prune while tsx is a dev dependency')
      t.ok(packageJson.scripts.serve!.includes('--import tsx'), 'the server runs through tsx')
    })

    t.test('the native build options are build arguments', async (t) => {
      const args = valuesOf(build, 'ARG')
      t.ok(args.has('LOOM_NATIVE_ISA'), 'LOOM_NATIVE_ISA (avx2: no AVX-512)')
      t.equal(args.get('LOOM_NATIVE_ISA'), '', 'without a default, so the build machine decides unless told')
      if (image.file === 'Dockerfile.cuda') {
        t.equal(args.get('LOOM_CUDA_ARCHS'), '', 'LOOM_CUDA_ARCHS without a default (build.mjs adds PTX when unset)')
        const path = valuesOf(build, 'ENV').get('PATH') ?? ''
        t.match(path, /\/usr\/local\/cuda\/bin/, 'nvcc on PATH, so build.mjs compiles the cuda device')
        t.match(path, /\/opt\/node\/bin/, 'node on PATH')
      }
      const script = read('plugins/backend-cuda-native/scripts/build.mjs')
      t.match(script, /process\.env\.LOOM_NATIVE_ISA/, 'build.mjs reads LOOM_NATIVE_ISA')
    })

    t.test('runs the README serve command as a non-root user', async (t) => {
      const cmd = execForm(last(runtime.instructions.filter((i) => i.name === 'CMD')).args)
      t.same(cmd, packageJson.scripts.serve!.split(' '), 'CMD is `npm run serve` without npm (signals reach node)')
      t.ok(read('README.md').includes(packageJson.scripts.serve!), 'the README names that command')
      t.notOk(
        runtime.instructions.some((i) => i.name === 'ENTRYPOINT'),
        'no ENTRYPOINT: `docker run IMAGE node ...` replaces the command',
      )
      const user = last(runtime.instructions.filter((i) => i.name === 'USER')).args
      t.match(user, /^\d+:\d+$/, 'numeric uid:gid, which runAsNonRoot can check')
      t.not(user.split(':')[0], '0', 'not root')
      t.equal(user, '1000:1000', "the Helm chart's runAsUser / runAsGroup")
      t.ok(
        runtime.instructions.some(
          (i) => i.name === 'COPY' && i.args.startsWith('--from=build --chown=1000:1000 /app /app'),
        ),
        'the app is owned by that user',
      )
    })

    t.test('serves the default port with a health check on /health', async (t) => {
      const config = await loadConfig(path.join(root, 'config/default.yaml'), { env: {} })
      const port = String(config.server.port)
      t.equal(runtime.instructions.find((i) => i.name === 'EXPOSE')?.args, port, 'EXPOSE is the default port')
      t.equal(valuesOf(runtime, 'ENV').get('PORT'), port, 'PORT fixes the port whatever the config says')
      const check = runtime.instructions.find((i) => i.name === 'HEALTHCHECK')
      t.ok(check, 'HEALTHCHECK')
      t.match(check!.args, /--start-period=\d+s/, 'a start period for loading the model')
      const probe = execForm(check!.args.slice(check!.args.indexOf('CMD ') + 4))!
      t.same(probe.slice(0, 2), ['node', '-e'], 'node, since the slim image has no curl')
      t.match(probe[2]!, /\/health'/, 'GET /health')
      t.match(probe[2]!, /process\.env\.PORT \|\| 3000/, 'on $PORT')
      t.match(probe[2]!, /r\.ok \? 0 : 1/, 'a 503 while loading counts as unhealthy')
    })

    t.test('config and adapter cache are volumes the served config uses', async (t) => {
      const volumes = execForm(runtime.instructions.find((i) => i.name === 'VOLUME')!.args)
      t.same(volumes, ['/etc/loom', '/var/cache/loom'])
      const run = commandsOf(runtime)
      t.ok(run.includes('ln -s /var/cache/loom /app/.loom-cache'), '/app/.loom-cache leads into the cache volume')
      t.ok(run.includes('chown 1000:1000 /etc/loom /var/cache/loom'), 'the volumes are writable by the user')
      t.equal(runtime.instructions.find((i) => i.name === 'WORKDIR')?.args, '/app')
      const configFile =
        valuesOf(runtime, 'ENV')
          .get('LOOM_CONFIG')
          ?.replace(/^\/app\//, '') ?? 'config/default.yaml'
      const config = await loadConfig(path.join(root, configFile), { env: {} })
      t.equal(
        path.relative(root, config.adapters.cache_dir).split(path.sep)[0],
        '.loom-cache',
        `${configFile} caches adapters under /app/.loom-cache`,
      )
      t.ok(existsSync(config.model.path), `${configFile} serves a model the image contains`)
      if (image.file === 'Dockerfile.cuda') {
        const backend = config.plugins.find((p) => p.use === '@loom/backend-cuda-native')
        t.equal((backend?.options as { device?: string } | undefined)?.device, 'auto', 'device: auto')
      } else {
        t.equal(configFile, 'config/default.yaml', 'the CPU image serves what `npm start` serves')
      }
    })

    t.test('.dockerignore keeps what npm ci and the server need', async (t) => {
      const patterns = read('.dockerignore')
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l !== '' && !l.startsWith('#'))
      const workspaceManifests = packageJson.workspaces.flatMap((w) =>
        w.endsWith('/*')
          ? readdirSync(path.join(root, w.slice(0, -2)))
              .map((d) => `${w.slice(0, -2)}/${d}/package.json`)
              .filter((f) => existsSync(path.join(root, f)))
          : [`${w}/package.json`],
      )
      const needed = [
        'package.json',
        'package-lock.json',
        ...workspaceManifests,
        'plugins/backend-cuda-native/package.json',
        'plugins/backend-cuda-native/binding.gyp',
        'plugins/backend-cuda-native/scripts/build.mjs',
        'plugins/backend-cuda-native/native/src/binding.cc',
        'core/src/cli/main.ts',
        'config/default.yaml',
        'deploy/docker/cuda-demo.yaml',
        'models/demo/model.safetensors',
        'models/demo/adapters',
      ]
      for (const file of needed) {
        t.ok(existsSync(path.join(root, file)), `${file} exists`)
        t.notOk(ignoredByDockerignore(file, patterns), `${file} reaches the build`)
      }
      for (const file of [
        'node_modules/tsx/package.json',
        'plugins/backend-cuda-native/build/Release/x.node',
        '.git/HEAD',
      ]) {
        t.ok(ignoredByDockerignore(file, patterns), `${file} stays out (the image installs and builds its own)`)
      }
    })
  })
}
