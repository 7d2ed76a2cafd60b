// deploy/helm/loom rendered without Helm (helm-template-subset.ts) with its defaults and with every
// option on, each object validated against the Kubernetes schemas, and the parts that must agree
// with the server checked against it: the ConfigMap is a valid Loom config, the probes, port and
// environment are the ones the server reads, the cache volume holds the config's cache_dir.
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { existsSync, readFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { IHTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute'
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment'
import type { IPersistentVolumeClaim } from 'kubernetes-models/v1/PersistentVolumeClaim'
import type { ISecret } from 'kubernetes-models/v1/Secret'
import type { IService } from 'kubernetes-models/v1/Service'
import t from 'tap'
import { parseAllDocuments } from 'yaml'
import { loadConfig } from '../../src/config/index.ts'
import { renderChart, type RenderedObject } from './helm-template-subset.ts'
import { validateManifest } from './kubernetes-schemas.ts'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const chartDir = path.join(root, 'deploy/helm/loom')

/** The source plugins' documented credential variables (their READMEs), all set in `everything`. */
const CREDENTIALS = {
  HF_TOKEN: 'hf_test',
  HUGGING_FACE_HUB_TOKEN: 'hf_test',
  AWS_ACCESS_KEY_ID: 'AKIDTEST',
  AWS_SECRET_ACCESS_KEY: 'secret',
  AWS_SESSION_TOKEN: 'session',
  PREDIBASE_API_TOKEN: 'pb_test',
}

const cases: { name: string; overrides: Record<string, unknown>; kinds: string[] }[] = [
  { name: 'defaults', overrides: {}, kinds: ['ConfigMap', 'Deployment', 'Service'] },
  {
    name: 'everything on (GPU, PVC, secrets)',
    overrides: {
      replicaCount: 2,
      gpu: { enabled: true, count: 2 },
      cache: { persistence: { enabled: true, storageClassName: 'fast-ssd' } },
      secretEnv: CREDENTIALS,
      existingSecret: 'loom-tokens',
      env: [{ name: 'LOG_LEVEL', value: 'debug' }],
      nodeSelector: { 'nvidia.com/gpu.present': 'true' },
      tolerations: [{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }],
      affinity: {
        podAntiAffinity: {
          preferredDuringSchedulingIgnoredDuringExecution: [
            {
              weight: 1,
              podAffinityTerm: {
                topologyKey: 'kubernetes.io/hostname',
                labelSelector: { matchLabels: { 'app.kubernetes.io/name': 'loom' } },
              },
            },
          ],
        },
      },
      config: {
        plugins: [
          { use: '@loom/backend-cuda-native', options: { device: 'auto' } },
          { use: '@loom/source-hub', options: {} },
          { use: '@loom/source-s3', options: {} },
          { use: '@loom/source-hosted', options: {} },
          { use: '@loom/source-local', options: { roots: ['/app/models/demo/adapters'] } },
          { use: '@loom/source-local', options: { name: 'demo-heads', roots: ['/app/models/demo'] } },
        ],
      },
    },
    kinds: ['ConfigMap', 'Deployment', 'PersistentVolumeClaim', 'Secret', 'Service'],
  },
  {
    name: 'no scrape annotations, no pod labels',
    overrides: { prometheusScrape: false, podLabels: {} },
    kinds: ['ConfigMap', 'Deployment', 'Service'],
  },
]

function only<T>(objects: RenderedObject[], kind: string): T {
  const found = objects.filter((o) => o.object.kind === kind)
  if (found.length !== 1) throw new Error(`expected one ${kind}, rendered ${found.length}`)
  return found[0]!.object as T
}

/** The gateway example's request timeout in seconds: a drain never waits longer for a routed request. */
function gatewayRequestTimeoutS(): number {
  const docs = parseAllDocuments(readFileSync(path.join(root, 'deploy/gateway/gateway.yaml'), 'utf8'))
  const route = docs.map((d) => d.toJS() as IHTTPRoute).find((o) => o.kind === 'HTTPRoute')!
  const timeout = route.spec!.rules![0]!.timeouts!.request!
  const match = /^(\d+)s$/.exec(timeout)
  if (!match) throw new Error(`unexpected timeout ${timeout}`)
  return Number(match[1])
}

for (const c of cases) {
  t.test(c.name, async (t) => {
    const objects = renderChart(chartDir, { release: 'loom', overrides: c.overrides })
    t.same(objects.map((o) => o.object.kind).sort(), c.kinds, 'the objects rendered')
    for (const { template, object } of objects) {
      t.doesNotThrow(() => validateManifest(object), `${template}: ${String(object.kind)} matches its schema`)
    }

    const deployment = only<IDeployment>(objects, 'Deployment')
    const service = only<IService>(objects, 'Service')
    const configMap = only<{ data: Record<string, string>; metadata: { name: string } }>(objects, 'ConfigMap')
    const pod = deployment.spec!.template.spec!
    const container = pod.containers.find((x) => x.name === 'loom')!
    const env = new Map((container.env ?? []).map((e) => [e.name, e.value]))
    const http = container.ports!.find((p) => p.name === 'http')!
    const mounts = new Map((container.volumeMounts ?? []).map((m) => [m.name, m]))
    const volumes = new Map((pod.volumes ?? []).map((v) => [v.name, v]))

    t.test('the ConfigMap is a valid Loom config, read where LOOM_CONFIG points', async (t) => {
      const configPath = env.get('LOOM_CONFIG')!
      const mount = mounts.get('config')!
      t.equal(path.posix.dirname(configPath), mount.mountPath, 'LOOM_CONFIG is in the config volume')
      t.equal(volumes.get('config')?.configMap?.name, configMap.metadata.name)
      const text = configMap.data[path.posix.basename(configPath)]
      t.ok(text, 'the ConfigMap has the file LOOM_CONFIG names')
      const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-chart-'))
      t.teardown(() => rm(dir, { recursive: true, force: true }))
      await writeFile(path.join(dir, 'loom.yaml'), text!)
      const config = await loadConfig(path.join(dir, 'loom.yaml'), { env: {} })
      t.equal(config.server.port, http.containerPort, 'server.port agrees with the container port')
      const cacheMount = mounts.get('cache')!.mountPath
      t.ok(config.adapters.cache_dir.startsWith(`${cacheMount}/`), 'cache_dir is inside the cache volume')
      // The image is the repository under /app (Dockerfile: WORKDIR /app, COPY . .).
      const inImage = (p: string) => path.join(root, path.posix.relative('/app', p))
      t.ok(existsSync(inImage(config.model.path)), `model.path ${config.model.path} is in the image`)
      for (const plugin of config.plugins) {
        for (const dirInImage of (plugin.options as { roots?: string[] } | undefined)?.roots ?? []) {
          t.ok(existsSync(inImage(dirInImage)), `${plugin.use} root ${dirInImage} is in the image`)
        }
      }
    })

    t.test('port, probes and environment are what the server answers on', async (t) => {
      t.equal(env.get('PORT'), String(http.containerPort), '$PORT (which overrides server.port) is the container port')
      t.equal(service.spec!.ports![0]!.targetPort, 'http', 'the Service sends to that port')
      for (const [key, value] of Object.entries(service.spec!.selector!)) {
        t.equal(deployment.spec!.template.metadata!.labels![key], value, `the Service selects the pods by ${key}`)
      }
      t.same(deployment.spec!.selector.matchLabels, service.spec!.selector, 'Deployment and Service select alike')
      t.same(container.readinessProbe?.httpGet, { path: '/health', port: 'http' }, 'readiness is GET /health')
      t.same(container.startupProbe?.httpGet, { path: '/health', port: 'http' }, 'startup waits for GET /health')
      const startupWindowS = container.startupProbe!.periodSeconds! * container.startupProbe!.failureThreshold!
      t.ok(startupWindowS >= 600, `loading a model has ${startupWindowS} s before the kubelet restarts it`)
      t.same(container.livenessProbe?.tcpSocket, { port: 'http' }, 'liveness is a TCP check, not the 503 of /health')
      t.notOk(container.livenessProbe?.httpGet, 'no HTTP liveness')
      const annotations = deployment.spec!.template.metadata!.annotations
      if (c.overrides.prometheusScrape === false) {
        t.equal(annotations, undefined, 'no scrape annotations')
      } else {
        t.same(
          annotations,
          {
            'prometheus.io/scrape': 'true',
            'prometheus.io/port': String(http.containerPort),
            'prometheus.io/path': '/metrics',
          },
          'Prometheus scrapes /metrics on the server port',
        )
      }
    })

    t.test('terminates gracefully: the grace period outlasts preStop and the longest routed request', async (t) => {
      const sleep = container.lifecycle!.preStop!.exec!.command!
      t.equal(sleep[0], 'sleep')
      const grace = pod.terminationGracePeriodSeconds!
      const timeout = gatewayRequestTimeoutS()
      t.ok(grace > Number(sleep[1]) + timeout, `${grace} s > preStop ${sleep[1]} s + request timeout ${timeout} s`)
    })

    t.test('runs as the image user, without privileges', async (t) => {
      t.equal(pod.securityContext?.runAsNonRoot, true)
      t.equal(pod.securityContext?.runAsUser, 1000, "the Dockerfiles' USER 1000:1000")
      t.equal(pod.securityContext?.runAsGroup, 1000)
      t.equal(pod.securityContext?.fsGroup, 1000, 'volumes writable by that group')
      t.equal(container.securityContext?.allowPrivilegeEscalation, false)
      t.same(container.securityContext?.capabilities?.drop, ['ALL'])
      t.equal(container.securityContext?.readOnlyRootFilesystem, true)
      t.equal(mounts.get('tmp')?.mountPath, '/tmp', "tsx's compile cache has a writable /tmp")
      t.equal(pod.automountServiceAccountToken, false)
    })

    t.test('the cache volume, GPUs and secrets follow the values', async (t) => {
      const cache = volumes.get('cache')!
      const limits = container.resources!.limits as Record<string, unknown>
      if (c.kinds.includes('PersistentVolumeClaim')) {
        const pvc = only<IPersistentVolumeClaim>(objects, 'PersistentVolumeClaim')
        t.equal(cache.persistentVolumeClaim?.claimName, pvc.metadata!.name, 'the cache is the claim')
        t.equal(pvc.spec!.storageClassName, 'fast-ssd')
        t.equal(limits['nvidia.com/gpu'], 2, 'GPUs requested from the device plugin')
        t.equal(deployment.spec!.replicas, 2)
      } else {
        t.ok(cache.emptyDir, 'the cache is an emptyDir')
        t.equal(limits['nvidia.com/gpu'], undefined, 'no GPU by default')
      }
      const secretRefs = (container.envFrom ?? []).map((e) => e.secretRef)
      t.same(secretRefs[0], { name: 'loom', optional: true }, "the chart's Secret, when there is one")
      if (c.kinds.includes('Secret')) {
        const secret = only<ISecret>(objects, 'Secret')
        t.same(secret.stringData, CREDENTIALS, 'secretEnv becomes the Secret')
        t.equal(secret.metadata!.name, 'loom')
        t.same(secretRefs[1], { name: 'loom-tokens' }, 'existingSecret is read too')
        const readmes = ['source-hub', 'source-s3', 'source-hosted']
          .map((p) => readFileSync(path.join(root, 'plugins', p, 'README.md'), 'utf8'))
          .join('\n')
        for (const key of Object.keys(CREDENTIALS)) t.ok(readmes.includes(key), `${key} is a documented variable`)
        t.equal(env.get('LOG_LEVEL'), 'debug', 'extra env')
      } else {
        t.equal(secretRefs.length, 1, 'no other Secret')
      }
    })
  })
}
